//! The per-collective summaries `fleet maintain` keeps give the straggler query the answer it has
//! from every row, on a real lake (PostgreSQL catalog, Parquet data): right after the maintain;
//! with rows shipped since (a second job shipped by shippers, and a late rank's entries into
//! collectives already summarized); with a node's clock sampled again since, which moves all its
//! rows; after the next maintain; and the summaries are read (a summary altered by hand changes
//! the answer).

mod common;

use std::time::Duration;

use causeway_backends::SyntheticJob;
use causeway_fleet::{connect, maintain, Access, Fleet, FleetStraggler, ShipOptions, Shipper};
use causeway_testdata::FleetCatalog;
use common::{eight_rank_job as job, lake, MS, SKEWS, T0};

/// Ship `nodes` of `job` (node-K holds rank K, its clock `SKEWS[K]` off), eight shippers at once.
fn ship(catalog: &FleetCatalog, dir: &std::path::Path, job: &SyntheticJob, nodes: std::ops::Range<u32>) {
    std::thread::scope(|s| {
        for k in nodes {
            let p = dir.join(format!("{:x}-node-{k}.db", job.comm_hash));
            job.write_node(&p, &format!("node-{k}"), &[(k, SKEWS[k as usize], None)], 0).unwrap();
            let (ship, data) = (catalog.ship_lake(), catalog.data_path());
            s.spawn(move || {
                let opts = ShipOptions {
                    batch_rows: 500,
                    data_path: Some(data),
                    test_clock_skew_ns: Some(SKEWS[k as usize]),
                    ..Default::default()
                };
                Shipper::open(&lake(&ship), &p, &opts).unwrap().ship_all().unwrap();
            });
        }
    });
}

/// The stragglers from the summaries, asserted equal to those from every row.
fn same_answer(catalog: &FleetCatalog, when: &str) -> Vec<FleetStraggler> {
    let fleet = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    let rows = fleet.stragglers_from_rows().unwrap();
    assert_eq!(fleet.stragglers().unwrap(), rows, "{when}: the summaries' answer is the rows'");
    rows
}

fn who(stragglers: &[FleetStraggler]) -> Vec<(i64, String, i64)> {
    let mut v: Vec<_> = stragglers.iter().map(|s| (s.comm_hash, s.node.clone(), s.late_collectives)).collect();
    v.sort();
    v
}

/// What the summarizing step of a maintain did: (collectives read from their rows, summaries).
fn summarize(catalog: &FleetCatalog) -> (i64, i64) {
    let steps = maintain(&lake(&catalog.ship_lake()), Duration::from_secs(3600)).unwrap();
    let last = steps.last().unwrap();
    assert_eq!(last.step, "summarize collectives", "{steps:?}");
    let done = last.summarized.clone().unwrap();
    (done.collectives, done.summaries)
}

fn ship_sql(catalog: &FleetCatalog, sql: &str) {
    let w = connect(&lake(&catalog.ship_lake()), &Access::Ship { data_path: None }).unwrap();
    w.execute_batch(sql).unwrap();
}

#[test]
fn the_summaries_give_the_answer_of_every_row() {
    let catalog = FleetCatalog::start("fleet-summaries");
    let dir = tempfile::tempdir().unwrap();
    let first = job(0, 0x5eed_1234, (5, 80, 119));
    ship(&catalog, dir.path(), &first, 0..8);
    let planted = same_answer(&catalog, "before any maintain");
    assert_eq!(who(&planted), [(0x5eed_1234, "node-5".to_string(), 40)]);

    // the first maintain summarizes every collective, and the answer stays
    assert_eq!(summarize(&catalog), (200, 200));
    assert_eq!(same_answer(&catalog, "right after the maintain"), planted);

    // shipped since: a second job 100 s later (rank 2 late at #30-#59), by shippers; and a ninth process entering
    // collectives #20-#25 of the first job, already summarized, 40 ms after node-0's rank
    ship(&catalog, dir.path(), &job(100_000 * MS, 0x77, (2, 30, 59)), 0..8);
    ship_sql(
        &catalog,
        &format!(
            "INSERT INTO lake.nccl_calls BY NAME
             SELECT * REPLACE ('node-8' AS node, 'late-uid' AS trace_uid, 999 AS pid, 999 AS tid, 8 AS rank,
                               timestamp + {late} AS timestamp)
             FROM lake.nccl_calls WHERE node = 'node-0' AND comm_hash = {comm} AND seq BETWEEN 20 AND 25",
            late = 40 * MS,
            comm = 0x5eed_1234
        ),
    );
    let shipped = same_answer(&catalog, "with rows shipped since the maintain");
    assert_eq!(
        who(&shipped),
        [
            (0x77, "node-2".to_string(), 30),
            (0x5eed_1234, "node-5".to_string(), 40),
            (0x5eed_1234, "node-8".to_string(), 6)
        ]
    );

    // node-2's clock sampled since, mid-run (its local clock reads `SKEWS[2]` ahead), by a tight
    // round trip 50 ms off the truth: its earliest flush now, every row of node-2 moves 50 ms later,
    // and node-2 enters every collective of both jobs last
    let uid: String = {
        let w = connect(&lake(&catalog.read_lake()), &Access::Read).unwrap();
        w.query_row(
            "SELECT trace_uid FROM lake.ship_traces WHERE node = 'node-2' ORDER BY first_shipped_ns LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let mid = T0 + SKEWS[2] + 100 * 10 * MS;
    ship_sql(
        &catalog,
        &format!(
            "INSERT INTO lake.clock_samples VALUES ('node-2', '{uid}', 9001, 0, {mid}, {server}, {recv})",
            server = mid + 100 - SKEWS[2] + 50 * MS,
            recv = mid + 200
        ),
    );
    let moved = same_answer(&catalog, "with node-2's clock moved since the maintain");
    assert_eq!(
        who(&moved),
        [(0x77, "node-2".to_string(), 200), (0x5eed_1234, "node-2".to_string(), 200)],
        "node-2 is last everywhere now"
    );

    // the next maintain reads only what changed; the one after it, nothing
    let (read, summaries) = summarize(&catalog);
    assert!(read >= 200, "the second job's collectives at least: {read}");
    assert_eq!(summaries, 400);
    assert_eq!(same_answer(&catalog, "after the next maintain"), moved);
    assert_eq!(summarize(&catalog), (0, 400));
    assert_eq!(same_answer(&catalog, "after a maintain with nothing new"), moved);

    // and the answer comes from the summaries: one altered by hand shows in it, not in the rows'
    ship_sql(&catalog, "UPDATE lake.collective_last_entries SET late_ns = 0 WHERE comm_hash = 119");
    let fleet = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    assert_eq!(who(&fleet.stragglers().unwrap()), [(0x5eed_1234, "node-2".to_string(), 200)]);
    assert_eq!(fleet.stragglers_from_rows().unwrap(), moved);
}
