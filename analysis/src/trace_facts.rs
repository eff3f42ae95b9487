//! What else the trace says about a chain's subject, beyond its own calls and off-CPU intervals:
//! whether the feeding process had forked workers and how much host memory it allocated around its
//! gaps, and which other processes had block I/O in flight during its uninterruptible waits.

use std::collections::BTreeMap;

use causeway_model::codes::op;
use causeway_model::time::{fmt_ns, fmt_since, TimeWindow};
use causeway_store::{StoredEvent, TraceStore};

use crate::attribution::{Culprit, Part};
use crate::trace_data::{self, Names};
use crate::AnalysisError;

/// What else the trace says about the feeding process while its thread was busy between GPU calls:
/// whether it had forked worker processes yet, and how many pages it allocated. `forks` caches the
/// fork events of the scope (`window`, `pid_scope`) across calls (on a row store every uncached
/// read would scan the trace).
#[allow(clippy::too_many_arguments)]
pub fn host_work_facts(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid_scope: Option<u32>,
    forks: &mut Option<Vec<StoredEvent>>,
    pid: u32,
    first_gap: i64,
    last_gap_end: i64,
    bounds: Option<(i64, i64)>,
    names: &Names,
) -> Result<Vec<String>, AnalysisError> {
    let origin = bounds.map(|b| b.0).unwrap_or(0);
    let mut out = Vec::new();
    if forks.is_none() {
        let filter = causeway_store::EventFilter {
            window,
            pid: pid_scope,
            ops: Some(vec![causeway_model::codes::op::PROCESS_FORK]),
            ..Default::default()
        };
        *forks = Some(store.events(&filter)?);
    }
    let forks: Vec<&StoredEvent> = forks.iter().flatten().filter(|f| f.event.pid == pid).collect();
    let before: Vec<_> = forks.iter().filter(|f| f.event.ts_ns < last_gap_end).collect();
    if before.is_empty() {
        let first = forks.first().map(|f| {
            let child = f.event.arg1 as u32;
            let name = names.of(child, child);
            format!(
                "; its first fork, child {child}{}, is at {} (event {})",
                if name.is_empty() { String::new() } else { format!(" {name}") },
                fmt_since(f.event.ts_ns, origin),
                f.id
            )
        });
        out.push(format!(
            "pid {pid} forked no process in scope before the last gap ended ({}){}: no DataLoader worker process was started during these gaps, so batches were prepared by the training process itself",
            fmt_since(last_gap_end, origin),
            first.unwrap_or_default()
        ));
    } else {
        out.push(format!("pid {pid} forked {} processes before the last gap ended (worker processes existed): the feeding thread was busy on the CPU all the same", before.len()));
    }
    let (mut pages, mut bytes) = (0u64, 0i64);
    for a in store.aggregates(&TimeWindow { from_ns: Some(first_gap), to_ns: Some(last_gap_end) })? {
        if a.pid == pid && op::MM_PAGE_ALLOC.is(a.source, a.op) {
            pages += a.count;
            bytes += a.sum_arg0;
        }
    }
    if pages > 0 {
        out.push(format!(
            "event_aggregates: pid {pid} allocated {pages} pages ({} MiB) in the minute buckets covering these gaps: heavy host memory work",
            bytes >> 20
        ));
    }
    Ok(out)
}

/// A process as the I/O facts group it: (pid, comm).
type ProcessKey = (u32, String);

/// A process's block requests during the waits: (in-flight intervals clipped to the waits, bytes,
/// requests, a tid).
type InFlight = (Vec<(i64, i64)>, i64, u64, u32);

/// The other processes whose block requests were in flight during a chain's D-state waits: for each,
/// the time during the waits when it had at least one request in flight (the union of its requests'
/// intervals, so a burst of concurrent requests counts once), most first. The top one is the chain's
/// culprit (role `issued_io`); the top three are named.
pub fn io_contenders(
    store: &dyn TraceStore,
    victim: u32,
    parts: &[(i64, Part)],
) -> Result<(Option<Culprit>, Vec<String>), AnalysisError> {
    let mut waits: Vec<(i64, i64)> = parts.iter().map(|(_, p)| (p.start, p.end)).collect();
    waits.sort_unstable();
    let (Some(a), Some(b)) = (waits.first().map(|w| w.0), waits.iter().map(|w| w.1).max()) else {
        return Ok((None, Vec::new()));
    };
    let mut by: BTreeMap<ProcessKey, InFlight> = BTreeMap::new();
    for r in trace_data::block_requests_all(store, a, b)? {
        let e = &r.event;
        if e.pid == victim || e.pid == 0 {
            continue;
        }
        let clipped: Vec<(i64, i64)> = waits
            .iter()
            .filter_map(|w| {
                let (x, y) = (w.0.max(e.ts_ns), w.1.min(e.end_ns()));
                (y > x).then_some((x, y))
            })
            .collect();
        if !clipped.is_empty() {
            let x = by.entry((e.pid, e.comm.clone())).or_insert((Vec::new(), 0, 0, e.tid));
            x.0.extend(clipped);
            x.1 += e.arg0;
            x.2 += 1;
        }
    }
    let mut top: Vec<(ProcessKey, (i64, i64, u64, u32))> = by
        .into_iter()
        .map(|(k, (iv, bytes, n, tid))| {
            let busy = trace_data::merge_intervals(iv).iter().map(|(x, y)| y - x).sum();
            (k, (busy, bytes, n, tid))
        })
        .collect();
    top.sort_by(|x, y| y.1 .0.cmp(&x.1 .0).then(y.1 .1.cmp(&x.1 .1)).then(x.0.cmp(&y.0)));
    let lines = top
        .iter()
        .take(3)
        .map(|((p, comm), (busy, bytes, n, _))| {
            format!(
                "pid {p} ({}) had block requests in flight for {} of these waits ({n} requests, {} KiB)",
                crate::stacks::clean(comm),
                fmt_ns(*busy),
                bytes >> 10
            )
        })
        .collect();
    let culprit = top.first().map(|((p, comm), (.., tid))| Culprit {
        pid: *p,
        tid: *tid,
        comm: crate::stacks::clean(comm),
        role: "issued_io".into(),
        place: String::new(),
    });
    Ok((culprit, lines))
}
