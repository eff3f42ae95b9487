//! The evidence SQL of the device view ([`crate::device_idle`]): for every idle chain one read-only
//! query that recomputes its figure from `gpu_ops` and the launching threads' `sched_switch` rows,
//! the way the Rust code does (the same op order, gap rule, drain rule and host window), so an
//! agent can check "38 ms of GPU idle time: preempted by backup-rsync" against the stored rows.
//!
//! The gaps are built in CTEs: `h` holds the holes of the device view (from a `foreign_client`
//! note to the process's next `resumed` note, from a `window_closed` note to its next
//! `window_opened`, else without end), `o` numbers each device's ops (kernels, copies, memsets) in the
//! order the analysis sorts them and carries the latest end before each (`bu`, "busy until"); `g`
//! keeps the gaps at least the threshold long, with the drain's end (`de`) and the host window
//! `[hf, ht]`; the subject `c(tid, pid, ts, te)` is the host windows, measured by
//! [`crate::evidence::measure_sql`] as a feeding gap's time is.

use causeway_model::time::TimeWindow;

use super::IdleCause;
use crate::attribution::{Cause, Culprit};
use crate::evidence::{measure_sql, CulpritKey, SqlScope};

/// The CTEs `o0`, `o` and `g` over the scope's ops.
fn gaps_cte(window: TimeWindow, pid: Option<u32>, threshold: i64) -> String {
    let mut f = String::new();
    if let Some(from) = window.from_ns {
        f.push_str(&format!(" AND start_ns >= {from}"));
    }
    if let Some(to) = window.to_ns {
        f.push_str(&format!(" AND start_ns <= {to}"));
    }
    if let Some(p) = pid {
        f.push_str(&format!(" AND pid = {p}"));
    }
    let yf = f.replace("start_ns", "y.start_ns").replace("pid =", "y.pid =");
    format!(
        "h AS ({holes}), \
         o0 AS (SELECT pid, device, stream, correlation, start_ns AS s, MAX(end_ns, start_ns) AS e, launch_tid, \
         launch_start_ns AS ls FROM gpu_ops WHERE kind IN (1, 2, 3){f}), \
         o AS (SELECT o0.*, MAX(e) OVER (PARTITION BY pid, device ORDER BY s, e, stream, correlation \
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS bu FROM o0), \
         g0 AS (SELECT pid, device, bu AS gs, s AS ge, launch_tid AS tid, ls, \
         (SELECT MAX(MIN(MAX(y.end_ns, o.bu), o.s)) FROM gpu_ops y WHERE y.kind = 4 AND y.pid = o.pid \
         AND y.start_ns < o.bu AND y.end_ns >= o.bu - {tol}{yf}) AS de \
         FROM o WHERE bu IS NOT NULL AND s - bu >= {threshold} \
         AND NOT EXISTS (SELECT 1 FROM h WHERE h.pid = o.pid AND h.hs < o.s AND h.he > o.bu)), \
         g AS (SELECT g0.*, COALESCE(de, gs) AS hf, MIN(MAX(ls, COALESCE(de, gs)), ge) AS ht, \
         (tid <> 0 AND ls > 0 AND ls > gs) AS late FROM g0)",
        tol = super::DRAIN_TOLERANCE_NS,
        holes = holes_sql(),
    )
}

/// The holes of the device view (see `holes.rs`), one row per opening note: its process, start and
/// end (the process's next closing note of the same pair, else the end of time).
fn holes_sql() -> String {
    super::holes::PAIRS
        .iter()
        .map(|(opens, closes)| {
            format!(
                "SELECT f.pid, f.ts_ns AS hs, COALESCE((SELECT MIN(r.ts_ns) FROM gpu_timeline_notes r \
                 WHERE r.pid = f.pid AND r.kind = '{closes}' AND r.ts_ns > f.ts_ns), 9223372036854775807) AS he \
                 FROM gpu_timeline_notes f WHERE f.kind = '{opens}'"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// The query recomputing the idle time of `cause` (with `culprit`) over the scope's gaps.
pub fn chain_sql(
    window: TimeWindow,
    pid: Option<u32>,
    threshold: i64,
    cause: IdleCause,
    culprit: Option<&Culprit>,
) -> String {
    let gaps = gaps_cte(window, pid, threshold);
    let scope = SqlScope { window: TimeWindow::ALL, pid: None, sched_detail: true, has_cpu: true };
    let subject =
        |which: &str| format!(", c AS (SELECT tid, pid, hf AS ts, ht AS te FROM g WHERE late AND ht > hf{which})");
    match cause {
        IdleCause::LaunchUnknown => {
            format!("WITH {gaps} SELECT COALESCE(SUM(ge - gs), 0) AS value FROM g WHERE tid = 0 OR ls <= 0")
        }
        IdleCause::DeviceDependency => format!(
            "WITH {gaps} SELECT COALESCE(SUM(ge - gs), 0) AS value FROM g WHERE tid <> 0 AND ls > 0 AND ls <= gs"
        ),
        IdleCause::LaunchOverhead => {
            format!("WITH {gaps} SELECT COALESCE(SUM(ge - ht), 0) AS value FROM g WHERE late")
        }
        IdleCause::Drain => format!(
            "WITH {gaps}{c} SELECT (SELECT COALESCE(SUM(hf - gs), 0) FROM g WHERE late AND de IS NOT NULL) + ({m}) AS value",
            c = subject(" AND de IS NOT NULL"),
            m = measure_sql(&scope, Cause::HostCompute, &CulpritKey::None),
        ),
        IdleCause::HostCompute => format!(
            "WITH {gaps}{c} {m}",
            c = subject(" AND de IS NULL"),
            m = measure_sql(&scope, Cause::HostCompute, &CulpritKey::None),
        ),
        host => {
            let c = host.host().unwrap_or(Cause::HostCompute);
            let key = match (c, culprit) {
                (Cause::Preempted, Some(k)) => CulpritKey::TookCpu(k.pid, k.tid, k.comm.clone()),
                (Cause::Sleep | Cause::StoppedOrOther, Some(k)) => CulpritKey::Woke(k.pid, k.tid),
                _ => CulpritKey::None,
            };
            format!("WITH {gaps}{s} {m}", s = subject(""), m = measure_sql(&scope, c, &key))
        }
    }
}
