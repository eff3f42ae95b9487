//! The fleet against a real lake: a PostgreSQL catalog started by `scripts/fleet-catalog.sh`,
//! Parquet data in a directory, DuckDB 1.5.5 with the signed extension files. Eight simulated nodes
//! of one synthetic training job (planted straggler, planted clock offsets, a planted loss) ship
//! concurrently; the cross-host answers must name what was planted, within the clocks' bounds.

mod common;

use std::path::Path;

use causeway_backends::SyntheticJob;
use causeway_fleet::{connect, Access, Fleet, LakeReader, ShipOptions, Shipper, Tier};
use causeway_testdata::FleetCatalog;
use common::{eight_rank_job, lake, MS, SKEWS, T0};

/// The job every test here ships: rank 5 late to steps 80-119.
fn job() -> SyntheticJob {
    eight_rank_job(0, 0x5eed_1234, (5, 80, 119))
}

/// Write one node's trace: the given ranks of the job as a host recorded them.
fn write_node(path: &Path, node: &str, ranks: &[(u32, i64)], pids: Option<&[u32]>, lost: u64) {
    let ranks: Vec<(u32, i64, Option<u32>)> =
        ranks.iter().enumerate().map(|(i, &(r, skew))| (r, skew, pids.map(|p| p[i]))).collect();
    job().write_node(path, node, &ranks, lost).unwrap();
}

fn count(conn: &duckdb::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn eight_nodes_ship_once_and_the_straggler_is_named_within_the_clock_bounds() {
    let catalog = FleetCatalog::start("fleet-lake");
    let dir = tempfile::tempdir().unwrap();
    let traces: Vec<_> = (0..8u32)
        .map(|k| {
            let p = dir.path().join(format!("node-{k}.db"));
            write_node(&p, &format!("node-{k}"), &[(k, SKEWS[k as usize])], None, if k == 3 { 17 } else { 0 });
            p
        })
        .collect();

    // eight shippers at once, each in small transactions (commit conflicts on the catalog are retried)
    std::thread::scope(|s| {
        for (k, p) in traces.iter().enumerate() {
            let (ship, data) = (catalog.ship_lake(), catalog.data_path());
            s.spawn(move || {
                let opts = ShipOptions {
                    batch_rows: 500,
                    data_path: Some(data),
                    test_clock_skew_ns: Some(SKEWS[k]),
                    ..Default::default()
                };
                let mut shipper = Shipper::open(&lake(&ship), p, &opts).unwrap();
                assert_eq!(shipper.node(), format!("node-{k}"));
                let r = shipper.ship_all().unwrap();
                assert_eq!(r.unshipped_events(), 0, "{r:?}");
                assert_eq!(r.rows["events"], 400, "summary tier: 200 all-reduces and 200 syncs, no launches: {r:?}");
                assert!(r.flushes >= 5, "2400 events in batches of 500: {r:?}");
            });
        }
    });

    let fleet = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    let conn = fleet.connection();

    // exactly once, and aggregates of everything
    for k in 0..8 {
        let n = |sql: &str| count(conn, &sql.replace("NODE", &format!("'node-{k}'")));
        assert_eq!(n("SELECT count(*) FROM lake.events WHERE node = NODE"), 400);
        assert_eq!(n("SELECT count(DISTINCT id) FROM lake.events WHERE node = NODE"), 400);
        assert_eq!(n("SELECT count(*) FROM lake.nccl_calls WHERE node = NODE"), 200);
        assert_eq!(n("SELECT sum(calls)::BIGINT FROM lake.op_windows WHERE node = NODE"), 2400);
        assert_eq!(n("SELECT count(*) FROM lake.sessions WHERE node = NODE"), 1);
    }

    // the nodes, their ranks, the planted loss
    let nodes = fleet.nodes().unwrap();
    assert_eq!(nodes.len(), 8);
    for (k, n) in nodes.iter().enumerate() {
        assert_eq!(n.node, format!("node-{k}"));
        assert_eq!(n.ranks, k.to_string());
        assert!(n.finished, "{n:?}");
        assert_eq!(n.lost, if k == 3 { 17 } else { 0 }, "{n:?}");
    }

    // the planted offsets, recovered within the bound each answer states
    let clocks = fleet.clocks().unwrap();
    assert_eq!(clocks.len(), 8);
    let worst = clocks.iter().map(|c| c.error_ns).max().unwrap();
    for (k, c) in clocks.iter().enumerate() {
        assert!((c.offset_ns + SKEWS[k]).abs() <= c.error_ns, "node-{k}: planted {} ns, measured {c:?}", -SKEWS[k]);
        assert!(c.measured && c.flushes > 0, "every flush sampled the catalog server's clock: {c:?}");
        assert!(c.error_ns < MS, "loopback round trips: {c:?}");
        assert!(c.residual_collectives >= 190, "{c:?}");
        assert!(!c.disagrees, "the collectives agree with the aligned clocks: {c:?}");
        // completions after alignment: off by this node's error and the median node's at most
        assert!(c.residual_ns.unwrap().abs() <= c.error_ns + worst + 20_000, "{c:?} (worst bound {worst})");
    }

    // the straggler: rank 5, one episode #80-#119, 30 ms late less the 20 us of entry jitter
    let st = fleet.stragglers().unwrap();
    assert_eq!(st.len(), 1, "{st:#?}");
    let s = &st[0];
    assert_eq!((s.node.as_str(), s.rank, s.nranks, s.late_collectives), ("node-5", 5, 8, 40), "{s:#?}");
    assert_eq!(s.episodes.len(), 1);
    assert_eq!((s.episodes[0].first_seq, s.episodes[0].last_seq), (80, 119));
    let bound = clocks[5].error_ns + clocks[7].error_ns;
    let planted = 30 * MS + 5 * 10_000 - 7 * 10_000;
    assert!((s.median_late_ns - planted).abs() <= bound, "median {} vs {planted} ± {bound}", s.median_late_ns);
    assert_eq!(s.period_ns / MS, 10, "{s:?}");

    // per-rank waits: rank 0 waits 70 us for rank 7 on 160 steps, 30.05 ms for rank 5 on 40
    let waits = fleet.waits().unwrap();
    assert_eq!(waits.len(), 8);
    let w0 = waits.iter().find(|w| w.rank == 0).unwrap();
    let expect = 160 * 70_000 + 40 * (planted + 5 * 10_000 + 20_000);
    assert!((w0.waited_ns - expect).abs() <= 200 * (clocks[0].error_ns + clocks[7].error_ns), "{w0:?} vs {expect}");
    // last at its 40 late collectives; at the others the ranks enter 10-20 us apart, less than a
    // loaded host's clock bounds, so which of them is last there is within the alignment's error
    let last5 = waits.iter().find(|w| w.rank == 5).unwrap().times_last;
    assert!(last5 >= 40, "{last5}");
    if last5 > 40 {
        assert!(clocks[5].error_ns + clocks[7].error_ns >= 20_000, "rank 5 last {last5} times within tight clocks");
    }

    // the serving role reads and cannot write
    let e = conn.execute_batch("INSERT INTO lake.ship_windows VALUES ('x', 'x', 0, 0, 0, 0)").unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");

    // shipping again ships nothing; a window of raw events is added once
    let opts = ShipOptions { data_path: None, test_clock_skew_ns: Some(SKEWS[2]), ..Default::default() };
    let mut again = Shipper::open(&lake(&catalog.ship_lake()), &traces[2], &opts).unwrap();
    let r = again.ship_all().unwrap();
    assert_eq!(r.rows.get("events").copied().unwrap_or(0), 0, "{r:?}");
    let from = T0 + SKEWS[2] + 79 * 10 * MS;
    let to = from + 10 * 10 * MS;
    assert_eq!(again.ship_window(from, to).unwrap(), 100, "10 steps of 10 launches");
    assert_eq!(again.ship_window(from - 5 * MS, to).unwrap(), 0, "already shipped");
    let fresh = connect(&lake(&catalog.read_lake()), &Access::Read).unwrap();
    assert_eq!(count(&fresh, "SELECT count(*) FROM lake.events WHERE node = 'node-2'"), 500);
    assert_eq!(count(&fresh, "SELECT count(DISTINCT id) FROM lake.events WHERE node = 'node-2'"), 500);

    // a tier cannot change under a trace
    let all = ShipOptions { tier: Tier::All, ..Default::default() };
    let e = Shipper::open(&lake(&catalog.ship_lake()), &traces[2], &all).err().unwrap().to_string();
    assert!(e.contains("tier `summary`"), "{e}");
}

/// Scoped to one node with every rank on it, the fleet's straggler is the one-host analysis's,
/// figure for figure (one node's offset shifts every rank alike): with one process per rank, and
/// with one process driving two ranks through two handles of the communicator (`ncclCommInitAll`),
/// where both analyses keep that process's earliest entry into each collective.
#[test]
fn one_node_straggler_matches_the_local_analysis() {
    for two_handles in [false, true] {
        one_node_straggler_matches(two_handles);
    }
}

fn one_node_straggler_matches(two_handles: bool) {
    let catalog = FleetCatalog::start(if two_handles { "fleet-one-multi" } else { "fleet-one" });
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.db");
    let ranks: Vec<(u32, i64)> = (0..8).map(|r| (r, 0)).collect();
    // ranks 6 and 7 in one process when `two_handles`
    let pids: Vec<u32> = (0..8).map(|r| 6000 + if two_handles { r.min(6) } else { r }).collect();
    write_node(&p, "solo", &ranks, Some(&pids), 0);
    if two_handles {
        let db = rusqlite::Connection::open(&p).unwrap();
        assert_eq!(db.execute("UPDATE nccl_calls SET comm = comm + rank WHERE pid = 6006", []).unwrap(), 400);
    }
    let opts = ShipOptions { data_path: Some(catalog.data_path()), ..Default::default() };
    Shipper::open(&lake(&catalog.ship_lake()), &p, &opts).unwrap().ship_all().unwrap();

    let store = causeway_backends::open_store(&p).unwrap();
    let local = causeway_analysis::find_stragglers(&store.nccl_calls(&Default::default()).unwrap());
    let fleet = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    let remote = fleet.stragglers().unwrap();
    assert_eq!(local.len(), 1);
    assert_eq!(remote.len(), 1);
    let (l, r) = (&local[0], &remote[0]);
    assert_eq!((r.pid, r.rank, r.comm_hash), (i64::from(l.pid), i64::from(l.rank), l.comm_hash));
    assert_eq!(r.late_collectives as usize, l.late.len());
    // what the others waited counts one entry per process: 7 with two handles in one
    let in_per_collective = if two_handles { 7 } else { 8 };
    assert!(l.late.iter().all(|c| c.others.len() + 1 == in_per_collective), "{:?}", l.late[0]);
    assert_eq!(r.waited_ns, l.waited_ns());
    assert_eq!(r.period_ns, l.period_ns);
    let mut lates: Vec<i64> = l.late.iter().map(|c| c.late_ns).collect();
    lates.sort();
    assert_eq!(r.median_late_ns, lates[lates.len().div_ceil(2) - 1], "nearest-rank median");
    assert_eq!(r.max_late_ns, *lates.last().unwrap());
    assert_eq!(format!("#{}-#{}", r.episodes[0].first_seq, r.episodes[0].last_seq), l.seq_ranges());
    // netted and graded on the worst stretch by the one definition
    assert_eq!(r.waited_for_others_ns, l.waited_for_others_ns);
    assert_eq!(r.net_waited_ns, l.net_waited_ns());
    assert_eq!(r.worst_stretch, l.worst_stretch());
    assert_eq!(r.worst_stretch.late, l.late.len(), "one dense run: {:?}", r.worst_stretch);
    // and the per-rank waits count the same entries
    let waits = fleet.waits().unwrap();
    assert_eq!(waits.len(), in_per_collective, "{waits:?}");
}

/// An inference-like fleet (no collective across nodes): one node's synchronize calls take five
/// times the others'; its figures, exact nearest-rank, stand out against the fleet's.
#[test]
fn a_slow_node_stands_out_in_the_op_distributions() {
    let catalog = FleetCatalog::start("fleet-ops");
    let dir = tempfile::tempdir().unwrap();
    for (k, transfer) in [(0, 2 * MS), (1, 2 * MS), (2, 10 * MS)] {
        let job =
            SyntheticJob { world: 1, steps: 100, transfer_ns: transfer, straggler: None, comm_hash: 100 + k, ..job() };
        let p = dir.path().join(format!("srv{k}.db"));
        job.write_node(&p, &format!("srv-{k}"), &[(0, 0, None)], 0).unwrap();
        let opts = ShipOptions { data_path: Some(catalog.data_path()), ..Default::default() };
        Shipper::open(&lake(&catalog.ship_lake()), &p, &opts).unwrap().ship_all().unwrap();
    }
    let fleet = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    let ops = fleet.op_distributions().unwrap();
    let sync: Vec<_> = ops.iter().filter(|o| o.op == "cudaStreamSync").collect();
    assert_eq!(sync.len(), 3, "{ops:#?}");
    for o in &sync {
        // every sync waits `transfer` less the 30 us between the entry and the sync, exactly
        let expect = if o.node == "srv-2" { 10 * MS - 30_000 } else { 2 * MS - 30_000 };
        assert_eq!((o.calls, o.p50_ns, o.p99_ns), (100, expect, expect), "{o:?}");
        assert_eq!(o.fleet_calls, 300);
        assert_eq!(o.fleet_p50_ns, 2 * MS - 30_000, "the nearest-rank median of 200 fast and 100 slow");
        assert_eq!(o.fleet_p99_ns, 10 * MS - 30_000);
        assert_eq!(o.outlier, o.node == "srv-2", "{o:?}");
    }
}

/// A catalog started with `--tls` takes TLS connections only: shipping and reading work with
/// `sslmode=require`, and a connection without TLS is refused.
#[test]
fn a_tls_catalog_ships_and_refuses_plain_connections() {
    let catalog = FleetCatalog::start_with("fleet-tls", true);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tls.db");
    job().write_node(&p, "tls-0", &[(0, 0, None)], 0).unwrap();
    let opts = ShipOptions { data_path: Some(catalog.data_path()), ..Default::default() };
    let r = Shipper::open(&lake(&catalog.ship_lake()), &p, &opts).unwrap().ship_all().unwrap();
    assert_eq!(r.rows["events"], 400);
    let fleet = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    assert_eq!(fleet.nodes().unwrap()[0].events, 400);
    let plain = catalog.read_lake().replace("sslmode=require", "sslmode=disable");
    let e = connect(&lake(&plain), &Access::Read).map(|_| ()).expect_err("a plain connection is refused").to_string();
    assert!(e.contains("no pg_hba.conf entry") || e.contains("SSL"), "{e}");
}

#[test]
fn a_reader_answers_from_one_instance_and_attaches_again_after_the_catalog_restarts() {
    let catalog = FleetCatalog::start("fleet-reader");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("node-0.db");
    write_node(&p, "node-0", &[(5, 0), (6, 0)], None, 0);
    let opts = ShipOptions { tier: Tier::All, data_path: Some(catalog.data_path()), ..Default::default() };
    Shipper::open(&lake(&catalog.ship_lake()), &p, &opts).unwrap().ship_all().unwrap();

    let reader = LakeReader::new(lake(&catalog.read_lake()));
    assert!(!reader.is_open(), "nothing opened before the first answer");
    let first = reader.with_fleet(|f| f.stragglers()).unwrap();
    assert!(reader.is_open());
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].rank, 5);
    // a second answer from the same instance (its own connection: the temporary tables of the first
    // do not leak into it) equals a fresh connection's
    assert_eq!(reader.with_fleet(|f| f.stragglers()).unwrap(), first);
    let fresh = Fleet::new(connect(&lake(&catalog.read_lake()), &Access::Read).unwrap()).unwrap();
    assert_eq!(fresh.stragglers().unwrap(), first);
    drop(fresh);
    // a node shipped after the instance was opened is in the next answer
    let p2 = dir.path().join("node-1.db");
    write_node(&p2, "node-1", &[(0, 0)], None, 0);
    Shipper::open(&lake(&catalog.ship_lake()), &p2, &opts).unwrap().ship_all().unwrap();
    let nodes = reader.with_fleet(|f| f.nodes()).unwrap();
    assert_eq!(nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["node-0", "node-1"]);

    // the catalog goes away: a clear error, and the instance is let go
    catalog.stop_server();
    let e = reader.with_fleet(|f| f.nodes()).unwrap_err().to_string();
    assert!(!reader.is_open(), "the instance is dropped after an error: {e}");
    // it comes back: the next answer attaches the lake again
    catalog.start_server();
    let nodes = reader.with_fleet(|f| f.nodes()).unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(reader.is_open());
}
