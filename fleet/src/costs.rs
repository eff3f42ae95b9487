//! What the fleet's stalls cost, totalled per node and per job, in GPU time and in money at the
//! lake's rate (`Fleet::rate`: the built-in list prices by GPU model, the config file,
//! `--gpu-rate`).
//!
//! - A straggler's cost is `causeway_analysis::straggler_cost`: what every other rank of the
//!   communicator waited for it at its late collectives, one GPU per waiting rank.
//! - A hang's cost ([`hang_cost`]) is the GPU time the waiting ranks' calls in flight held until
//!   their traces ended (the `duration` of those `events` rows with `ret_code` -1), one GPU per
//!   waiting rank: a lower bound while the job still hangs.
//!
//! Who is charged: a straggler's node and job (what its lateness cost the others); a hang's job,
//! and its node only when every rank that never entered the collective is on that one node (a hang
//! whose missing ranks are on several nodes is counted in `hangs_on_several_nodes` and per job
//! only: charging one of them would claim more than the evidence shows). The job is the launcher's
//! job id of the process (`process_ranks.job`: `TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID`); a process
//! without one is counted under its communicator (`comm 0x...`).

use std::collections::BTreeMap;

use causeway_analysis::{dollars_of, CostBasis, GpuCost, Rate, Rates};
use serde::Serialize;

use crate::analyses::Fleet;
use crate::hangs::FleetHang;
use crate::lake::LAKE;
use crate::stragglers::FleetStraggler;
use crate::FleetError;

/// What one node's or one job's stalls cost.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CostTotal {
    /// The node, or the job (`comm 0x...` for processes without a job id).
    pub name: String,
    pub stragglers: i64,
    /// Their cost, ns of GPU time (every waiting rank's).
    pub straggler_gpu_ns: i64,
    pub hangs: i64,
    /// Their cost, ns of GPU time (the waiting ranks' calls in flight).
    pub hang_gpu_ns: i64,
    /// Both.
    pub gpu_ns: i64,
    /// US dollars at the rate; `None` without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

/// The fleet's stalls' cost per node and per job, the most costly first.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FleetCosts {
    pub per_node: Vec<CostTotal>,
    pub per_job: Vec<CostTotal>,
    /// Hangs whose ranks that never entered are on several nodes: in `per_job` only.
    pub hangs_on_several_nodes: i64,
    /// Every straggler's and hang's cost, ns of GPU time, and in dollars at the rate.
    pub gpu_ns: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Why there is no rate (no GPU model in the lake, mixed models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_rate: Option<String>,
}

/// What a hang has cost so far: the waiting ranks' calls in flight, one GPU each.
pub fn hang_cost(waiting: &[crate::hangs::RankState]) -> GpuCost {
    let held: Vec<i64> = waiting.iter().filter_map(|r| r.in_flight.as_ref()).map(|c| c.running_ns).collect();
    GpuCost {
        gpu_ns: held.iter().sum(),
        gpus: held.len() as u32,
        basis: CostBasis::Estimated,
        how: format!(
            "running_ns of the {} waiting ranks' calls in flight (events with ret_code -1, to the end of their traces), each rank's GPU held; at least this while it hangs",
            held.len()
        ),
        share: 0.0,
        dollars: None,
    }
}

/// The job of each process that names one, by (node, trace_uid, pid).
type Jobs = BTreeMap<(String, String, i64), String>;

fn job_of(jobs: &Jobs, node: &str, trace_uid: &str, pid: i64, comm_hash: i64) -> String {
    jobs.get(&(node.to_string(), trace_uid.to_string(), pid)).cloned().unwrap_or_else(|| format!("comm {comm_hash:#x}"))
}

/// The totals of `stragglers` and `hangs` (their costs already priced or not), by the rules in the
/// module's doc.
pub fn totals(
    stragglers: &[FleetStraggler],
    hangs: &[FleetHang],
    jobs: &Jobs,
    rate: Result<Rate, String>,
) -> FleetCosts {
    let (mut nodes, mut per_job): (BTreeMap<String, CostTotal>, BTreeMap<String, CostTotal>) = Default::default();
    fn add(m: &mut BTreeMap<String, CostTotal>, name: &str, straggler_ns: Option<i64>, hang_ns: Option<i64>) {
        let t = m.entry(name.to_string()).or_insert_with(|| CostTotal {
            name: name.to_string(),
            stragglers: 0,
            straggler_gpu_ns: 0,
            hangs: 0,
            hang_gpu_ns: 0,
            gpu_ns: 0,
            dollars: None,
        });
        if let Some(ns) = straggler_ns {
            t.stragglers += 1;
            t.straggler_gpu_ns += ns;
            t.gpu_ns += ns;
        }
        if let Some(ns) = hang_ns {
            t.hangs += 1;
            t.hang_gpu_ns += ns;
            t.gpu_ns += ns;
        }
    }
    for s in stragglers {
        add(&mut nodes, &s.node, Some(s.cost.gpu_ns), None);
        add(&mut per_job, &job_of(jobs, &s.node, &s.trace_uid, s.pid, s.comm_hash), Some(s.cost.gpu_ns), None);
    }
    let mut several = 0;
    for h in hangs {
        let cost = h.cost.gpu_ns;
        let missing_nodes: std::collections::BTreeSet<&str> = h.missing.iter().map(|r| r.node.as_str()).collect();
        match missing_nodes.into_iter().collect::<Vec<_>>().as_slice() {
            [one] => add(&mut nodes, one, None, Some(cost)),
            _ => several += 1,
        }
        // the job of the ranks in the hang (the first that names one)
        let job = h
            .waiting
            .iter()
            .chain(&h.missing)
            .find_map(|r| jobs.get(&(r.node.clone(), r.trace_uid.clone(), r.pid)).cloned())
            .unwrap_or_else(|| format!("comm {:#x}", h.comm_hash));
        add(&mut per_job, &job, None, Some(cost));
    }
    let gpu_ns =
        stragglers.iter().map(|s| s.cost.gpu_ns).sum::<i64>() + hangs.iter().map(|h| h.cost.gpu_ns).sum::<i64>();
    let price = |ns: i64| rate.as_ref().ok().map(|r| dollars_of(ns, r));
    let ranked = |m: BTreeMap<String, CostTotal>| {
        let mut v: Vec<CostTotal> = m.into_values().map(|t| CostTotal { dollars: price(t.gpu_ns), ..t }).collect();
        v.sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then(a.name.cmp(&b.name)));
        v
    };
    FleetCosts {
        per_node: ranked(nodes),
        per_job: ranked(per_job),
        hangs_on_several_nodes: several,
        gpu_ns,
        dollars: price(gpu_ns),
        no_rate: rate.as_ref().err().cloned(),
        rate: rate.ok(),
    }
}

impl Fleet {
    /// The rate of the lake's GPU model (`rates`: the built-in table, the config file,
    /// `--gpu-rate`), or why there is none.
    pub fn rate(&self, rates: &Rates) -> Result<Result<Rate, String>, FleetError> {
        Ok(causeway_analysis::rate_of(&self.gpu_models()?, rates))
    }

    /// Price the hangs' costs at the lake's rate; the rate, or why there is none.
    pub fn price_hangs(&self, hangs: &mut [FleetHang], rates: &Rates) -> Result<Result<Rate, String>, FleetError> {
        let rate = self.rate(rates)?;
        if let Ok(r) = &rate {
            for h in hangs.iter_mut() {
                h.cost.dollars = Some(dollars_of(h.cost.gpu_ns, r));
            }
        }
        Ok(rate)
    }

    /// What the stragglers and the hangs cost, per node and per job, priced.
    pub fn costs(&self, rates: &Rates) -> Result<FleetCosts, FleetError> {
        let mut stragglers = self.stragglers()?;
        let mut hangs = self.hangs()?;
        let rate = self.rate(rates)?;
        if let Ok(r) = &rate {
            let costs = stragglers.iter_mut().map(|s| &mut s.cost).chain(hangs.iter_mut().map(|h| &mut h.cost));
            for c in costs {
                c.dollars = Some(dollars_of(c.gpu_ns, r));
            }
        }
        Ok(totals(&stragglers, &hangs, &self.jobs()?, rate))
    }

    /// The launcher's job id of every process that has one (`process_ranks.job`, where the lake
    /// has the column).
    fn jobs(&self) -> Result<Jobs, FleetError> {
        let has: i64 = self.connection().query_row(
            &format!(
                "SELECT count(*) FROM information_schema.columns
                 WHERE table_catalog = '{LAKE}' AND table_name = 'process_ranks' AND column_name = 'job'"
            ),
            [],
            |r| r.get(0),
        )?;
        let mut out = Jobs::new();
        if has == 0 {
            return Ok(out);
        }
        let mut st = self.connection().prepare(&format!(
            "SELECT DISTINCT node, trace_uid, pid::BIGINT, job FROM {LAKE}.process_ranks WHERE job <> ''"
        ))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            out.insert((r.get(0)?, r.get(1)?, r.get(2)?), r.get(3)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FLEET_DDL;
    use causeway_model::codes::RET_IN_FLIGHT;
    use duckdb::Connection;

    const SEC: i64 = 1_000_000_000;
    const MS: i64 = 1_000_000;

    /// Three nodes a, b, c, clocks in step. Communicator 77 (job `job7`, pids 100-102): rank 2 on c
    /// enters collectives 50-69 200 ms late (1 s apart). Communicator 88 (no job id, pids 200-202):
    /// ranks 0 and 1 (a, b) enter #40 and wait in cudaStreamSynchronize for 60 s to their traces'
    /// end; rank 2 on c stops after #39.
    fn lake() -> Fleet {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!("ATTACH ':memory:' AS {LAKE}")).unwrap();
        conn.execute_batch(FLEET_DDL).unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE {LAKE}.nccl_calls (node VARCHAR, trace_uid VARCHAR, pid BIGINT, tid BIGINT, rank BIGINT,
               nranks BIGINT, comm_hash BIGINT, comm BIGINT, seq BIGINT, op BIGINT, count BIGINT, timestamp BIGINT);
             CREATE TABLE {LAKE}.events (node VARCHAR, trace_uid VARCHAR, id BIGINT, timestamp BIGINT, pid BIGINT,
               tid BIGINT, source BIGINT, op BIGINT, duration BIGINT, ret_code BIGINT);
             CREATE TABLE {LAKE}.process_ranks (node VARCHAR, trace_uid VARCHAR, pid BIGINT, rank BIGINT, job VARCHAR);
             INSERT INTO {LAKE}.process_ranks VALUES ('a', 'u', 100, 0, 'job7'), ('b', 'u', 101, 1, 'job7'),
               ('c', 'u', 102, 2, 'job7'), ('a', 'u', 200, 0, ''), ('b', 'u', 201, 1, ''), ('c', 'u', 202, 2, '');"
        ))
        .unwrap();
        let t0 = 1_790_000_000 * SEC;
        for node in ["a", "b", "c"] {
            conn.execute(
                &format!("INSERT INTO {LAKE}.clock_samples VALUES (?, 'u', 1, 0, ?, ?, ?)"),
                duckdb::params![node, t0 - SEC, t0 - SEC + 500, t0 - SEC + 1000],
            )
            .unwrap();
        }
        let op = causeway_model::codes::NCCL_COLLECTIVES[0].op as i64;
        let mut insert = conn
            .prepare(&format!("INSERT INTO {LAKE}.nccl_calls VALUES (?, 'u', ?, ?, ?, 3, ?, 1, ?, ?, 1, ?)"))
            .unwrap();
        for (node, rank) in [("a", 0), ("b", 1), ("c", 2)] {
            for seq in 1..=100i64 {
                let late = if rank == 2 && (50..70).contains(&seq) { 200 * MS } else { 100_000 * rank };
                insert
                    .execute(duckdb::params![node, 100 + rank, 100 + rank, rank, 77, seq, op, t0 + seq * SEC + late])
                    .unwrap();
            }
            for seq in 1..=(if rank == 2 { 39 } else { 40 }) {
                insert
                    .execute(duckdb::params![node, 200 + rank, 200 + rank, rank, 88, seq, op, t0 + seq * SEC])
                    .unwrap();
            }
            let sync = causeway_model::codes::op::CUDA_STREAM_SYNC;
            let (ret, dur) = if rank < 2 { (RET_IN_FLIGHT as i64, 60 * SEC) } else { (0, MS) };
            conn.execute(
                &format!("INSERT INTO {LAKE}.events VALUES (?, 'u', 1, ?, ?, ?, ?, ?, ?, ?)"),
                duckdb::params![
                    node,
                    t0 + 100 * SEC - dur,
                    200 + rank,
                    200 + rank,
                    sync.source as i64,
                    sync.op as i64,
                    dur,
                    ret
                ],
            )
            .unwrap();
        }
        drop(insert);
        Fleet::new(conn).unwrap()
    }

    fn value(fleet: &Fleet, sql: &str) -> i64 {
        fleet.connection().query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// Per node and per job, each figure as the stored rows' SQL gives it: the straggler's cost
    /// is every waiting rank's wait (both of them), the hang's the waiting ranks' calls in flight.
    #[test]
    fn costs_per_node_and_job_are_the_stored_rows_figures() {
        let fleet = lake();
        let costs = fleet.costs(&Rates::load(Some(3.6)).unwrap()).unwrap();
        // the straggler: at each collective where rank 2 entered last by at least max(1 ms, a tenth
        // of the 1 s period), what ranks 0 and 1 waited for it
        let waited = value(
            &fleet,
            &format!(
                "WITH e AS (SELECT seq, rank, timestamp FROM {LAKE}.nccl_calls WHERE comm_hash = 77),
                 c AS (SELECT seq, max(timestamp) AS last_ns, max(timestamp) FILTER (WHERE rank <> 2) AS before_ns
                       FROM e GROUP BY seq),
                 late AS (SELECT seq, last_ns FROM c JOIN e USING (seq)
                          WHERE e.rank = 2 AND e.timestamp = last_ns AND last_ns - before_ns >= {})
                 SELECT sum(last_ns - timestamp)::BIGINT FROM late JOIN e USING (seq) WHERE e.rank <> 2",
                SEC / 10
            ),
        );
        assert!(waited >= 2 * 20 * 199 * MS, "both waiting ranks, 20 collectives: {waited}");
        let held = value(
            &fleet,
            &format!(
                "SELECT sum(duration)::BIGINT FROM {LAKE}.events WHERE ret_code = {RET_IN_FLIGHT}
                 AND (node, pid) IN (SELECT (node, pid) FROM {LAKE}.nccl_calls WHERE comm_hash = 88 AND seq = 40)"
            ),
        );
        assert_eq!(held, 120 * SEC);
        let dollars = |ns: i64| ns as f64 / 3.6e12 * 3.6;
        assert_eq!(costs.per_node.len(), 1, "rank 2's node caused both: {:?}", costs.per_node);
        let c = &costs.per_node[0];
        assert_eq!((c.name.as_str(), c.stragglers, c.hangs), ("c", 1, 1));
        assert_eq!((c.straggler_gpu_ns, c.hang_gpu_ns, c.gpu_ns), (waited, held, waited + held));
        assert!((c.dollars.unwrap() - dollars(waited + held)).abs() < 1e-9, "{c:?}");
        let jobs: Vec<(&str, i64, i64)> =
            costs.per_job.iter().map(|j| (j.name.as_str(), j.straggler_gpu_ns, j.hang_gpu_ns)).collect();
        assert_eq!(jobs, [("comm 0x58", 0, held), ("job7", waited, 0)], "the most costly first");
        assert_eq!((costs.gpu_ns, costs.hangs_on_several_nodes), (waited + held, 0));
        assert_eq!(costs.rate.as_ref().unwrap().dollars_per_gpu_hour, 3.6);
        // without a rate (the lake names no GPU model), GPU time only
        let unpriced = fleet.costs(&Rates::builtin()).unwrap();
        assert!(unpriced.no_rate.is_some() && unpriced.per_node[0].dollars.is_none(), "{unpriced:?}");
    }

    /// A hang whose ranks that never entered are on two nodes is charged to its job only.
    #[test]
    fn a_hang_missing_ranks_on_several_nodes_is_charged_to_its_job_only() {
        let fleet = lake();
        let mut hangs = fleet.hangs().unwrap();
        let mut other = hangs[0].missing[0].clone();
        other.node = "d".into();
        hangs[0].missing.push(other);
        let costs = totals(&[], &hangs, &Jobs::new(), Err("no rate".into()));
        assert!(costs.per_node.is_empty(), "{costs:?}");
        assert_eq!(costs.hangs_on_several_nodes, 1);
        assert_eq!(costs.per_job[0].hang_gpu_ns, 120 * SEC);
    }
}
