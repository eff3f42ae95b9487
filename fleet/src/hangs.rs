//! The fleet's hangs: the collective a job stopped at, across hosts. From the lake's `nccl_calls`
//! ((communicator, sequence) per rank, on every node) and the calls still in flight when each
//! node's trace ended (or at its tracer's last look: `events` rows with `ret_code` -1), per
//! communicator: the last collective some rank entered, the ranks that entered it and still wait
//! (a call of theirs in flight since then), and the ranks that never entered it, each with where it
//! stood instead (its own call in flight, else its last collective and how long before the end of
//! its trace). Times are only compared within one process (one node's clock): no alignment is
//! needed and none is assumed.
//!
//! A communicator whose ranks are out of step while none of them waits (a trace cut short, a
//! checkpoint where every rank is idle) is not a hang and is not listed.

use causeway_model::codes::{op_name, RET_IN_FLIGHT};
use causeway_model::time::fmt_ns;
use serde::Serialize;

use crate::analyses::Fleet;
use crate::lake::LAKE;
use crate::FleetError;

/// The shortest call in flight that makes a rank a waiting one (as one host's explain).
const WAIT_MIN_NS: i64 = causeway_model::codes::LONG_IN_FLIGHT_NS;

/// A call that had not returned when its trace ended (or at its tracer's last look).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CallInFlight {
    pub tid: i64,
    /// The call's name (`cudaStreamSynchronize`, `ncclAllReduce`).
    pub op: String,
    /// When it began (the node's clock, unix ns) and how long it had run, ns.
    pub started_ns: i64,
    pub running_ns: i64,
}

/// One rank of a hung communicator: where it stood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RankState {
    pub node: String,
    pub trace_uid: String,
    pub pid: i64,
    pub rank: i64,
    /// The last collective of the communicator it entered, and when (its node's clock, unix ns).
    pub last_seq: i64,
    pub last_entered_ns: i64,
    /// Its longest call in flight at the end, if any.
    pub in_flight: Option<CallInFlight>,
    /// How long before the end of its trace it entered `last_seq`, ns.
    pub since_ns: i64,
}

/// A communicator whose ranks hang at one collective.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FleetHang {
    pub comm_hash: i64,
    /// The collective the waiting ranks entered and the missing ones never did.
    pub seq: i64,
    pub op: String,
    pub nranks: i64,
    /// Ranks that entered it and wait (a call in flight begun at or after their entry).
    pub waiting: Vec<RankState>,
    /// Ranks that never entered it.
    pub missing: Vec<RankState>,
    /// What it has cost so far ([`crate::costs::hang_cost`]): the waiting ranks' calls in flight,
    /// one GPU each; priced by `Fleet::price_hangs`.
    pub cost: causeway_analysis::GpuCost,
    /// One sentence.
    pub summary: String,
}

/// One row of the per-rank read.
struct Row {
    comm_hash: i64,
    nranks: i64,
    op: i64,
    state: RankState,
}

impl Fleet {
    /// The communicators hung at a collective, most ranks waiting first.
    pub fn hangs(&self) -> Result<Vec<FleetHang>, FleetError> {
        // per rank (node, trace, pid) of each communicator: its last collective; its longest call
        // in flight of a second or more; the end of its trace
        let sql = format!(
            "WITH last AS (
  SELECT comm_hash, node, trace_uid, pid, any_value(rank) AS rank, any_value(nranks) AS nranks,
         arg_max(op, seq) AS op, max(seq) AS seq, arg_max(timestamp, seq) AS entered
  FROM {LAKE}.nccl_calls GROUP BY comm_hash, node, trace_uid, pid),
fl AS (
  SELECT node, trace_uid, pid, arg_max(tid, duration) AS tid, arg_max(source, duration) AS source,
         arg_max(op, duration) AS op, arg_max(timestamp, duration) AS ts, max(duration) AS dur
  FROM {LAKE}.events WHERE ret_code = {RET_IN_FLIGHT} AND source IN (1, 4, 9) AND duration >= {WAIT_MIN_NS}
  GROUP BY node, trace_uid, pid),
ends AS (
  SELECT node, trace_uid, max(timestamp + duration) AS end_ns FROM {LAKE}.events GROUP BY node, trace_uid)
SELECT l.comm_hash, l.node, l.trace_uid, l.pid, l.rank, l.nranks, l.op, l.seq, l.entered,
       fl.tid, fl.source, fl.op, fl.ts, fl.dur, coalesce(ends.end_ns, l.entered)
FROM last l LEFT JOIN fl USING (node, trace_uid, pid) LEFT JOIN ends USING (node, trace_uid)
ORDER BY l.comm_hash, l.rank, l.node, l.pid"
        );
        let mut st = self.connection().prepare(&sql)?;
        let rows = st.query_map([], |r| {
            let flight: Option<i64> = r.get(9)?;
            let in_flight = match flight {
                Some(tid) => Some(CallInFlight {
                    tid,
                    op: op_name(r.get::<_, i64>(10)? as u8, r.get::<_, i64>(11)? as u16).into_owned(),
                    started_ns: r.get(12)?,
                    running_ns: r.get(13)?,
                }),
                None => None,
            };
            let entered: i64 = r.get(8)?;
            let end_ns: i64 = r.get(14)?;
            Ok(Row {
                comm_hash: r.get(0)?,
                nranks: r.get(5)?,
                op: r.get(6)?,
                state: RankState {
                    node: r.get(1)?,
                    trace_uid: r.get(2)?,
                    pid: r.get(3)?,
                    rank: r.get(4)?,
                    last_seq: r.get(7)?,
                    last_entered_ns: entered,
                    in_flight,
                    since_ns: (end_ns - entered).max(0),
                },
            })
        })?;
        let rows: Vec<Row> = rows.collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for group in rows.chunk_by(|a, b| a.comm_hash == b.comm_hash) {
            if let Some(h) = hang_of(group) {
                out.push(h);
            }
        }
        out.sort_by(|a, b| b.waiting.len().cmp(&a.waiting.len()).then(a.comm_hash.cmp(&b.comm_hash)));
        Ok(out)
    }
}

/// The hang of one communicator's ranks, if some wait at its last collective and some never entered it.
fn hang_of(ranks: &[Row]) -> Option<FleetHang> {
    let top = ranks.iter().map(|r| r.state.last_seq).max()?;
    // a rank at the top whose call in flight began at or after its entry waits in it
    let waits = |r: &Row| {
        r.state.last_seq == top && r.state.in_flight.as_ref().is_some_and(|c| c.started_ns >= r.state.last_entered_ns)
    };
    let waiting: Vec<RankState> = ranks.iter().filter(|r| waits(r)).map(|r| r.state.clone()).collect();
    let missing: Vec<RankState> = ranks.iter().filter(|r| r.state.last_seq < top).map(|r| r.state.clone()).collect();
    if waiting.is_empty() || missing.is_empty() {
        return None;
    }
    let first = ranks.iter().find(|r| r.state.last_seq == top)?;
    let op = op_name(causeway_model::codes::Source::Nccl.code(), first.op as u16).into_owned();
    let nranks = ranks.iter().map(|r| r.nranks).max().unwrap_or(0);
    let who = |r: &RankState| format!("rank {} ({}, pid {})", r.rank, r.node, r.pid);
    let doing = |r: &RankState| match &r.in_flight {
        Some(c) => format!("in {} for {}", c.op, fmt_ns(c.running_ns)),
        None => {
            format!("no call in flight; its last was #{} {} before its trace ended", r.last_seq, fmt_ns(r.since_ns))
        }
    };
    let missing_words: Vec<String> = missing.iter().map(|r| format!("{} ({})", who(r), doing(r))).collect();
    let waiting_words: Vec<String> = waiting.iter().map(who).collect();
    let longest = waiting.iter().filter_map(|r| r.in_flight.as_ref()).map(|c| c.running_ns).max().unwrap_or(0);
    let summary = format!(
        "{op} #{top} of communicator {:#x} ({nranks} ranks): {} entered it and waited up to {}; never entered: {}",
        ranks[0].comm_hash,
        waiting_words.join(", "),
        fmt_ns(longest),
        missing_words.join("; ")
    );
    let cost = crate::costs::hang_cost(&waiting);
    Some(FleetHang { comm_hash: ranks[0].comm_hash, seq: top, op, nranks, waiting, missing, cost, summary })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FLEET_DDL;
    use duckdb::Connection;

    const SEC: i64 = 1_000_000_000;

    /// Three ranks on two nodes: ranks 0 and 1 (node a and b) enter all-reduce #40 and wait in
    /// cudaStreamSynchronize to the end; rank 2 (node b) stops after #39, in no call, when `stuck`;
    /// otherwise every rank enters #40 and none waits (a trace cut short).
    fn lake(stuck: bool) -> Fleet {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!("ATTACH ':memory:' AS {LAKE}")).unwrap();
        conn.execute_batch(FLEET_DDL).unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE {LAKE}.nccl_calls (node VARCHAR, trace_uid VARCHAR, pid BIGINT, tid BIGINT, rank BIGINT,
               nranks BIGINT, comm_hash BIGINT, comm BIGINT, seq BIGINT, op BIGINT, count BIGINT, timestamp BIGINT);
             CREATE TABLE {LAKE}.events (node VARCHAR, trace_uid VARCHAR, id BIGINT, timestamp BIGINT, pid BIGINT,
               tid BIGINT, source BIGINT, op BIGINT, duration BIGINT, ret_code BIGINT);"
        ))
        .unwrap();
        let t0 = 1_790_000_000 * SEC;
        let allreduce = causeway_model::codes::NCCL_COLLECTIVES[0].op as i64;
        let sync = causeway_model::codes::op::CUDA_STREAM_SYNC;
        let ranks = [("a", 100, 0), ("b", 200, 1), ("b", 300, 2)];
        for (node, pid, rank) in ranks {
            let last = if stuck && rank == 2 { 39 } else { 40 };
            for seq in 1..=last {
                conn.execute(
                    &format!("INSERT INTO {LAKE}.nccl_calls VALUES (?, ?, ?, ?, ?, 3, 77, 1, ?, ?, 1, ?)"),
                    duckdb::params![node, format!("u{pid}"), pid, pid, rank, seq, allreduce, t0 + seq * SEC],
                )
                .unwrap();
            }
            // the end of each trace: t0 + 100 s
            let (ret, dur) = if stuck && rank < 2 { (RET_IN_FLIGHT as i64, 60 * SEC) } else { (0, SEC / 1000) };
            conn.execute(
                &format!("INSERT INTO {LAKE}.events VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?)"),
                duckdb::params![
                    node,
                    format!("u{pid}"),
                    t0 + 100 * SEC - dur,
                    pid,
                    pid,
                    sync.source as i64,
                    sync.op as i64,
                    dur,
                    ret
                ],
            )
            .unwrap();
        }
        Fleet::new(conn).unwrap()
    }

    #[test]
    fn the_rank_that_never_arrived_is_named_with_its_node() {
        let hangs = lake(true).hangs().unwrap();
        assert_eq!(hangs.len(), 1, "{hangs:?}");
        let h = &hangs[0];
        assert_eq!((h.seq, h.nranks), (40, 3));
        let waiting: Vec<(&str, i64)> = h.waiting.iter().map(|r| (r.node.as_str(), r.rank)).collect();
        assert_eq!(waiting, [("a", 0), ("b", 1)]);
        let missing: Vec<(&str, i64, i64)> = h.missing.iter().map(|r| (r.node.as_str(), r.rank, r.last_seq)).collect();
        assert_eq!(missing, [("b", 2, 39)]);
        assert!(h.missing[0].in_flight.is_none());
        assert_eq!(h.missing[0].since_ns, 61 * SEC, "from #39 (t0 + 39 s) to its trace's end (t0 + 100 s)");
        assert_eq!(h.waiting[0].in_flight.as_ref().unwrap().op, "cudaStreamSync");
        assert!(h.summary.contains("never entered: rank 2 (b, pid 300)"), "{}", h.summary);
    }

    #[test]
    fn ranks_in_step_with_none_waiting_are_no_hang() {
        assert!(lake(false).hangs().unwrap().is_empty());
    }
}
