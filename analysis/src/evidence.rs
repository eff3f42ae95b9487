//! Evidence SQL: for every chain, one read-only query that recomputes the chain's headline figure from
//! the DB it came from, the same way the Rust code does (interval overlap with MAX/MIN, nearest-rank
//! percentiles with ROW_NUMBER, the same top-level and gap rules). Run it with
//! `causeway query --db PATH "SQL"`: it returns one row with one column, `value`.
//!
//! Every query is built from a *subject* CTE `c(tid, pid, ts, te)` (the slow calls of an op, or the
//! long gaps of a thread) and a *measure* over it (an off-CPU segment of one cause and culprit, the
//! uncovered part, the remainder).

use causeway_model::codes::{self, op, OpCode, OpKind};
use causeway_model::time::TimeWindow;

use crate::attribution::{
    gpu_call_sources, Cause, PAGE_ALLOC_PRESSURE_BYTES, SLOW_FLOOR_NS, SLOW_P50_MULTIPLE, SLOW_PER_MILLE,
};
use crate::detectors::{GAP_FLOOR_NS, GAP_P50_MULTIPLE, GAP_P75_MULTIPLE};
use crate::spin;
use crate::stats::nearest_rank_sql;

/// What the SQL may use: the scope of the analysis and what the DB records.
#[derive(Debug, Clone)]
pub struct SqlScope {
    pub window: TimeWindow,
    pub pid: Option<u32>,
    /// The DB has the native scheduler columns (prev_state, next_*, wake_ts, waker_*).
    pub sched_detail: bool,
    /// The DB has the `cpu` column (the host's CPUs are counted from it: [`crate::spin`]).
    pub has_cpu: bool,
}

impl SqlScope {
    /// `AND` conditions for the window and pid on table alias `t` (empty alias = bare columns).
    pub fn filter(&self, t: &str) -> String {
        let p = if t.is_empty() { String::new() } else { format!("{t}.") };
        let mut s = String::new();
        if let Some(f) = self.window.from_ns {
            s.push_str(&format!(" AND {p}timestamp >= {f}"));
        }
        if let Some(to) = self.window.to_ns {
            s.push_str(&format!(" AND {p}timestamp <= {to}"));
        }
        if let Some(pid) = self.pid {
            s.push_str(&format!(" AND {p}pid = {pid}"));
        }
        s
    }
}

/// `NOT EXISTS` clause: `alias` (with columns id, tid, source, timestamp, duration) is not inside
/// another GPU call of its thread in scope. The lower bound on `o.timestamp` (no call lasts longer
/// than the longest GPU call) changes no result; it lets the timestamp index bound the search.
pub fn top_level_sql(scope: &SqlScope, alias: &str) -> String {
    let a = alias;
    let gpu = gpu_sources_sql();
    format!(
        "NOT EXISTS (SELECT 1 FROM events o WHERE o.tid = {a}.tid AND o.source IN ({gpu}) AND o.id <> {a}.id \
         AND o.timestamp <= {a}.timestamp AND o.timestamp + o.duration >= {a}.timestamp + {a}.duration{} \
         AND o.timestamp >= {a}.timestamp - (SELECT MAX(duration) FROM events WHERE source IN ({gpu})) \
         AND (o.timestamp < {a}.timestamp OR o.duration > {a}.duration OR o.source < {a}.source \
         OR (o.source = {a}.source AND o.id < {a}.id)))",
        scope.filter("o")
    )
}

/// The GPU-call sources as a SQL list (`1, 4, 8`): [`crate::attribution::gpu_call_sources`].
fn gpu_sources_sql() -> String {
    gpu_call_sources().iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}

/// Subject CTEs: the slow top-level calls of `op` in scope, as `c(tid, pid, ts, te)`.
pub fn slow_calls_cte(scope: &SqlScope, op: OpCode) -> String {
    format!(
        "d AS (SELECT id, pid, tid, source, timestamp, duration, ROW_NUMBER() OVER (ORDER BY duration) AS rn, \
         COUNT(*) OVER () AS n FROM events WHERE source = {s} AND op = {o}{f}), \
         th AS (SELECT MAX(MAX(CASE WHEN rn = {p90} THEN duration END), \
         {m} * MAX(CASE WHEN rn = {p50} THEN duration END), {floor}) AS t FROM d), \
         c AS (SELECT d.tid, d.pid, d.timestamp AS ts, d.timestamp + d.duration AS te FROM d, th \
         WHERE d.duration >= th.t AND {top})",
        s = op.source,
        o = op.op,
        f = scope.filter(""),
        p90 = nearest_rank_sql(SLOW_PER_MILLE, "n"),
        p50 = nearest_rank_sql(500, "n"),
        m = SLOW_P50_MULTIPLE,
        floor = SLOW_FLOOR_NS,
        top = top_level_sql(scope, "d"),
    )
}

/// Subject CTEs: the long gaps between GPU calls of thread `tid`, as `c(tid, pid, ts, te)`.
pub fn long_gaps_cte(scope: &SqlScope, tid: u32) -> String {
    format!(
        "g0 AS (SELECT tid, pid, timestamp AS ts, MAX(timestamp + duration) OVER (PARTITION BY tid \
         ORDER BY timestamp, duration DESC, source, id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pe \
         FROM events WHERE source IN ({gpu}){f}), \
         g1 AS (SELECT tid, pid, pe AS a, ts AS b, ts - pe AS gap FROM g0 WHERE pe IS NOT NULL AND ts > pe), \
         gr AS (SELECT tid, gap, ROW_NUMBER() OVER (PARTITION BY tid ORDER BY gap) AS rn, \
         COUNT(*) OVER (PARTITION BY tid) AS n FROM g1), \
         gt AS (SELECT tid, MAX({floor}, {m} * MAX(CASE WHEN rn = {p50} THEN gap END), \
         {m75} * MAX(CASE WHEN rn = {p75} THEN gap END)) AS t FROM gr GROUP BY tid), \
         c AS (SELECT g1.tid, g1.pid, g1.a AS ts, g1.b AS te FROM g1 JOIN gt ON gt.tid = g1.tid \
         WHERE g1.tid = {tid} AND g1.gap >= gt.t)",
        f = scope.filter(""),
        gpu = gpu_sources_sql(),
        floor = GAP_FLOOR_NS,
        m = GAP_P50_MULTIPLE,
        p50 = nearest_rank_sql(500, "n"),
        m75 = GAP_P75_MULTIPLE,
        p75 = nearest_rank_sql(750, "n"),
    )
}

/// `{e}` (a `sched_switch` row) is an off-CPU interval overlapping the subject interval
/// `[c.ts, c.te]`. The last bound changes no result (an interval that begins before `c.te` ends
/// before `c.te` plus the longest off-CPU interval of the DB); it lets the `(tid, timestamp)` index
/// bound the search, where `timestamp - duration < c.te` alone scans the thread to its end.
fn overlaps_subject(e: &str) -> String {
    format!(
        "{e}.timestamp > c.ts AND {e}.timestamp - {e}.duration < c.te \
         AND {e}.timestamp < c.te + (SELECT MAX(duration) FROM events WHERE {})",
        op::SCHED_SWITCH.sql("")
    )
}

/// A culprit as the SQL keys it: who took the CPU `(pid, tid, comm)`, who woke the thread
/// `(pid, tid)`, or the network peer a socket call waited on (`net_peers` key, `events.arg2`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CulpritKey {
    None,
    TookCpu(u32, u32, String),
    Woke(u32, u32),
    Peer(i64),
}

/// SQL condition: the off-CPU row `e` lies inside a socket call of its thread (to `peer` when
/// given), as `OffCpu::socket_peer` is found.
fn in_socket_call(peer: Option<i64>) -> String {
    let peer = peer.map(|p| format!(" AND n.arg2 = {p}")).unwrap_or_default();
    format!(
        "EXISTS (SELECT 1 FROM events n WHERE n.tid = e.tid AND {ops} \
         AND n.timestamp <= e.timestamp - e.duration AND n.timestamp + n.duration >= e.timestamp{peer})",
        ops = ops_condition("n", &codes::ops_of_kind(OpKind::SocketCall)),
    )
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The measure over `c`: total ns of `cause` (with `culprit`) inside the subject intervals.
pub fn measure_sql(scope: &SqlScope, cause: Cause, culprit: &CulpritKey) -> String {
    let sw = format!(
        "FROM c JOIN events e ON e.tid = c.tid AND {} AND {}",
        op::SCHED_SWITCH.sql("e"),
        overlaps_subject("e")
    );
    let so = "(e.timestamp - e.duration)";
    let wake = format!(
        "(CASE WHEN COALESCE(e.wake_ts, 0) > 0 THEN MIN(MAX(e.wake_ts, {so}), e.timestamp) ELSE e.timestamp END)"
    );
    let ov =
        |a: &str, b: &str| format!("SELECT COALESCE(SUM(MAX(0, MIN(c.te, {b}) - MAX(c.ts, {a}))), 0) AS value {sw}");
    let state_known = "e.prev_state IN (0, 1, 2, 3)";
    match cause {
        Cause::OffCpuUnrecorded if !scope.sched_detail => ov(so, "e.timestamp"),
        Cause::OffCpuUnrecorded => {
            format!("{} WHERE NOT ({state_known}) OR e.prev_state IS NULL", ov(so, "e.timestamp"))
        }
        Cause::Preempted => format!("{} WHERE e.prev_state = 0{}", ov(so, "e.timestamp"), preempted_by(culprit)),
        // Only slow calls of a synchronizing op spin; their query is built by `slow_call_chain_sql`.
        Cause::SpinGpuBusy => format!("{} WHERE e.prev_state = 0", ov(so, "e.timestamp")),
        Cause::GpuWait => format!("{} WHERE e.prev_state = 1 AND NOT {}", ov(so, &wake), in_socket_call(None)),
        Cause::NetworkWait => {
            let peer = match culprit {
                CulpritKey::Peer(p) => *p,
                _ => 0,
            };
            format!("{} WHERE e.prev_state = 1 AND {}", ov(so, &wake), in_socket_call(Some(peer)))
        }
        Cause::Uninterruptible => format!("{} WHERE e.prev_state = 2", ov(so, &wake)),
        Cause::Sleep | Cause::StoppedOrOther => {
            let state = if cause == Cause::Sleep { 1 } else { 3 };
            let (p, t) = match culprit {
                CulpritKey::Woke(p, t) => (*p, *t),
                _ => (0, 0),
            };
            // a sleep inside a socket call is a network wait
            let not_net =
                if cause == Cause::Sleep { format!(" AND NOT {}", in_socket_call(None)) } else { String::new() };
            format!(
                "{} WHERE e.prev_state = {state} AND COALESCE(e.waker_pid, 0) = {p} AND COALESCE(e.waker_tid, 0) = {t}{not_net}",
                ov(so, &wake)
            )
        }
        Cause::RunqueueWait => format!("{} WHERE e.prev_state IN (1, 2, 3)", ov(&wake, "e.timestamp")),
        Cause::NoSchedData => format!(
            "SELECT COALESCE(SUM((c.te - c.ts) - {cov}), 0) AS value FROM c LEFT JOIN cv ON cv.tid = c.tid",
            cov = coverage_expr()
        ),
        Cause::OnCpuOrGpu | Cause::HostCompute | Cause::PageAllocPressure => {
            let covered = if scope.sched_detail { "(c.te - c.ts)".to_string() } else { coverage_expr() };
            let pages = match cause {
                Cause::PageAllocPressure => format!(" WHERE pages >= {PAGE_ALLOC_PRESSURE_BYTES}"),
                Cause::OnCpuOrGpu => format!(" WHERE pages < {PAGE_ALLOC_PRESSURE_BYTES}"),
                _ => String::new(),
            };
            format!(
                "SELECT COALESCE(SUM(MAX(0, covered - off)), 0) AS value FROM (SELECT {covered} AS covered, \
                 COALESCE((SELECT SUM(MAX(0, MIN(c.te, e.timestamp) - MAX(c.ts, e.timestamp - e.duration))) \
                 FROM events e WHERE e.tid = c.tid AND {switch} AND {overlap}), 0) AS off, \
                 (SELECT COALESCE(SUM(p.arg0), 0) FROM events p WHERE p.pid = c.pid AND p.source = {host} \
                 AND p.op IN ({page}, {page_sum}) AND p.timestamp BETWEEN c.ts AND c.te) AS pages \
                 FROM c{join_cv}){pages}",
                join_cv = if scope.sched_detail { "" } else { " LEFT JOIN cv ON cv.tid = c.tid" },
                switch = op::SCHED_SWITCH.sql("e"),
                overlap = overlaps_subject("e"),
                host = op::MM_PAGE_ALLOC.source,
                page = op::MM_PAGE_ALLOC.op,
                page_sum = op::MM_PAGE_ALLOC_SUMMARY.op,
            )
        }
    }
}

/// The covered part of `[c.ts, c.te]` given `cv(tid, cs, ce)`, the thread's recorded switch span.
fn coverage_expr() -> String {
    "COALESCE(MAX(0, MIN(c.te, cv.ce) - MAX(c.ts, cv.cs)), 0)".to_string()
}

/// `, cv(tid, cs, ce)`: each thread's recorded scheduler span over the whole DB, for the measures
/// that use it (a DB without scheduler detail); empty for the others, which would pay a scan of
/// every switch for nothing.
fn coverage_cte(scope: &SqlScope, cause: Cause) -> String {
    let uses = match cause {
        Cause::NoSchedData => true,
        Cause::OnCpuOrGpu | Cause::HostCompute | Cause::PageAllocPressure => !scope.sched_detail,
        _ => false,
    };
    if !uses {
        return String::new();
    }
    format!(
        ", cv AS (SELECT tid, MIN(timestamp - duration) AS cs, MAX(timestamp) AS ce FROM events WHERE {} GROUP BY tid)",
        op::SCHED_SWITCH.sql("")
    )
}

/// The full query for a slow-call chain. The preempted time of a synchronizing op is measured call
/// by call with the spin decision of [`crate::spin`] ([`spin_wait_cte`]).
pub fn slow_call_chain_sql(scope: &SqlScope, op: OpCode, cause: Cause, culprit: &CulpritKey) -> String {
    if scope.sched_detail && spin::is_spin_bounded_op(op) && matches!(cause, Cause::Preempted | Cause::SpinGpuBusy) {
        return format!(
            "WITH {}, {} {}",
            slow_calls_cte(scope, op),
            spin_wait_cte(scope),
            spin_measure_sql(cause, culprit)
        );
    }
    format!("WITH {}{} {}", slow_calls_cte(scope, op), coverage_cte(scope, cause), measure_sql(scope, cause, culprit))
}

/// CTEs `fl` (the flag-setting calls, over the whole trace), `nc(n)` (the host's CPUs) and
/// `w(tid, pid, ts, te, spin)`: the subject calls `c` with `spin` = 1 when the call spun, decided as
/// [`crate::spin::SchedPolicies::wait_mode`] decides it: no sleep (state S) inside the call, and the
/// latest flags before it (by timestamp, then id) spin (1), or are auto (0, 3, 5, 6, 7 or none) with
/// at most as many contexts (`cuCtxCreate` calls before it, at least 1) as CPUs.
pub fn spin_wait_cte(scope: &SqlScope) -> String {
    let cpus = if scope.has_cpu { spin::host_cpus_sql() } else { "SELECT 0".to_string() };
    let ctx = causeway_model::codes::op::CU_CTX_CREATE;
    format!(
        "fl AS MATERIALIZED (SELECT f0.pid, f0.source, f0.op, f0.timestamp, f0.id, f0.arg0 FROM events f0 WHERE {flags}), \
         nc(n) AS ({cpus}), \
         w AS (SELECT c.tid, c.pid, c.ts, c.te, CASE WHEN EXISTS (SELECT 1 FROM events s WHERE s.tid = c.tid \
         AND {switch} AND s.prev_state = 1 AND {overlap}) THEN 0 \
         ELSE CASE COALESCE((SELECT f.arg0 & 7 FROM fl f WHERE f.pid = c.pid AND f.timestamp < c.ts \
         ORDER BY f.timestamp DESC, f.id DESC LIMIT 1), 0) WHEN 1 THEN 1 WHEN 2 THEN 0 WHEN 4 THEN 0 \
         ELSE MAX(1, (SELECT COUNT(*) FROM fl x WHERE x.pid = c.pid AND x.source = {cs} AND x.op = {co} \
         AND x.timestamp < c.ts)) <= (SELECT n FROM nc) END END AS spin FROM c)",
        flags = ops_condition("f0", &spin::sched_flag_ops()),
        switch = op::SCHED_SWITCH.sql("s"),
        overlap = overlaps_subject("s"),
        cs = ctx.source,
        co = ctx.op,
    )
}

/// The preempted time of the calls in `w`: all of it in calls that did not spin; in calls that
/// spun, the last preempted interval when it ends within [`spin::SPIN_RETURN_EPSILON_NS`] of the
/// return ([`Cause::Preempted`], for `culprit`), or every other one ([`Cause::SpinGpuBusy`]).
fn spin_measure_sql(cause: Cause, culprit: &CulpritKey) -> String {
    let last = format!(
        "(e.timestamp >= c.te - {eps} AND NOT EXISTS (SELECT 1 FROM events l WHERE l.tid = c.tid AND {switch} \
         AND l.prev_state = 0 AND l.duration > 0 AND l.timestamp > e.timestamp AND l.timestamp - l.duration < c.te \
         AND l.timestamp < c.te + (SELECT MAX(duration) FROM events WHERE {switch_any})))",
        eps = spin::SPIN_RETURN_EPSILON_NS,
        switch = op::SCHED_SWITCH.sql("l"),
        switch_any = op::SCHED_SWITCH.sql(""),
    );
    let head = format!(
        "SELECT COALESCE(SUM(MAX(0, MIN(c.te, e.timestamp) - MAX(c.ts, (e.timestamp - e.duration)))), 0) AS value \
         FROM w c JOIN events e ON e.tid = c.tid AND {} AND {}",
        op::SCHED_SWITCH.sql("e"),
        overlaps_subject("e")
    );
    match cause {
        Cause::SpinGpuBusy => format!("{head} WHERE e.prev_state = 0 AND c.spin = 1 AND NOT {last}"),
        _ => format!("{head} WHERE e.prev_state = 0{} AND (c.spin = 0 OR {last})", preempted_by(culprit)),
    }
}

/// The condition on `e` naming who took the CPU.
fn preempted_by(culprit: &CulpritKey) -> String {
    match culprit {
        CulpritKey::TookCpu(p, t, comm) => {
            format!(" AND e.next_pid = {p} AND e.next_tid = {t} AND COALESCE(e.next_comm, '') = {}", quote(comm))
        }
        _ => " AND COALESCE(e.next_pid, 0) = 0 AND COALESCE(e.next_tid, 0) = 0".to_string(),
    }
}

/// The full query for a feeding-gap chain of thread `tid`.
pub fn gap_chain_sql(scope: &SqlScope, tid: u32, cause: Cause, culprit: &CulpritKey) -> String {
    format!("WITH {}{} {}", long_gaps_cte(scope, tid), coverage_cte(scope, cause), measure_sql(scope, cause, culprit))
}

/// SQL condition: `alias` is one of `ops`.
pub fn ops_condition(alias: &str, ops: &[OpCode]) -> String {
    let terms: Vec<String> =
        ops.iter().map(|o| format!("({alias}.source = {} AND {alias}.op = {})", o.source, o.op)).collect();
    format!("({})", terms.join(" OR "))
}

/// Throughput-drop figure: time lost in `[split, end]` at the launch rate of `[first, split)`.
pub fn throughput_drop_sql(scope: &SqlScope, launches: &[OpCode], first: i64, split: i64, end: i64) -> String {
    format!(
        "WITH l AS (SELECT d.timestamp AS ts FROM events d WHERE {ops}{f} AND {top}), \
         k AS (SELECT SUM(ts >= {first} AND ts < {split}) AS before, SUM(ts >= {split} AND ts <= {end}) AS during FROM l) \
         SELECT ({end} - {split}) - (during * ({split} - {first})) / before AS value FROM k",
        ops = ops_condition("d", launches),
        f = scope.filter("d"),
        top = top_level_sql(scope, "d"),
    )
}

/// Sum of durations of the top-level calls of `ops` on thread `tid` (pid-wide when `tid` is None).
pub fn call_time_sql(scope: &SqlScope, ops: &[OpCode], pid: u32, tid: Option<u32>) -> String {
    let t = tid.map(|t| format!(" AND d.tid = {t}")).unwrap_or_default();
    format!(
        "SELECT COALESCE(SUM(d.duration), 0) AS value FROM events d WHERE {ops}{f} AND d.pid = {pid}{t} AND {top}",
        ops = ops_condition("d", ops),
        f = scope.filter("d"),
        top = top_level_sql(scope, "d"),
    )
}

/// Allocation latency growth: extra time of the later half of the top-level allocations of `pid`
/// over the p50 of the earlier half (half = `n / 2` calls by time, the later half gets the odd one).
pub fn alloc_growth_sql(scope: &SqlScope, allocs: &[OpCode], pid: u32) -> String {
    format!(
        "WITH a AS (SELECT d.duration AS dur, ROW_NUMBER() OVER (ORDER BY d.timestamp, d.id) AS rt, COUNT(*) OVER () AS n \
         FROM events d WHERE {ops}{f} AND d.pid = {pid} AND {top}), \
         e AS (SELECT dur, ROW_NUMBER() OVER (ORDER BY dur) AS rd, COUNT(*) OVER () AS m FROM a WHERE rt <= n / 2), \
         p AS (SELECT MAX(CASE WHEN rd = {p50} THEN dur END) AS p50 FROM e) \
         SELECT COALESCE(SUM(MAX(0, a.dur - p.p50)), 0) AS value FROM a, p WHERE a.rt > a.n / 2",
        ops = ops_condition("d", allocs),
        f = scope.filter("d"),
        top = top_level_sql(scope, "d"),
        p50 = nearest_rank_sql(500, "m"),
    )
}

/// Bytes of top-level allocations of `pid` never freed in scope: matched by device pointer (`arg2`)
/// when the DB has it, else all allocated bytes (the DB cannot match frees to allocations).
pub fn unfreed_bytes_sql(scope: &SqlScope, allocs: &[OpCode], frees: &[OpCode], pid: u32, has_ptr: bool) -> String {
    // The last free of each (pid, pointer), computed once: a lookup per allocation into the whole
    // events table (no index on pointers) took longer than the query time limit on 60k events.
    let (with, unmatched) = if has_ptr {
        (
            format!(
                "WITH fr AS MATERIALIZED (SELECT fr.pid, fr.arg2, MAX(fr.timestamp) AS last FROM events fr WHERE {fops}{ff} \
                 GROUP BY fr.pid, fr.arg2) ",
                fops = ops_condition("fr", frees),
                ff = scope.filter("fr"),
            ),
            " AND NOT EXISTS (SELECT 1 FROM fr WHERE fr.pid = d.pid AND fr.arg2 = d.arg2 AND fr.last >= d.timestamp)".to_string(),
        )
    } else {
        (String::new(), String::new())
    };
    format!(
        "{with}SELECT COALESCE(SUM(d.arg0), 0) AS value FROM events d WHERE {ops}{f} AND d.pid = {pid} AND {top}{unmatched}",
        ops = ops_condition("d", allocs),
        f = scope.filter("d"),
        top = top_level_sql(scope, "d"),
    )
}
