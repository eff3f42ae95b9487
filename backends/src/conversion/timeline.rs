//! The device timeline in `convert` and `cut`: which of its rows a [`Scope`] keeps, copied into the
//! target in parts (the ops streamed in chunks, never all in memory). The target ties the ops to
//! their launching calls again when it is finished (a cut leaves out the calls before its window:
//! those ops name none).

use std::collections::{BTreeMap, BTreeSet};

use causeway_model::{GpuClockSync, GpuTimelineNote};

use super::{ConvertTarget, Scope, CHUNK_ROWS};
use crate::{GpuTimelinePart, Result, TraceStore};

/// Rows of the device timeline a conversion wrote.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Copied {
    pub ops: u64,
    pub clock_syncs: u64,
    pub devices: u64,
    pub notes: u64,
}

/// Note kinds that say what state the device view is in from then on: the latest of them before a
/// cut's window still holds at its start, so the cut keeps it.
const STATE_NOTES: [&str; 5] = ["started", "stopped", "stepped_aside", "resumed", "off"];

/// Copy what `scope` keeps of `store`'s device timeline into `target`: the ops whose device start
/// is in the window (of its process), the calibrations in the window with the nearest one on each
/// side per process (the pairs that mapped the window's ops), the processes' devices, the notes in
/// the window and each process's latest state note before it.
pub(super) fn copy(store: &dyn TraceStore, scope: &Scope, target: &mut dyn ConvertTarget) -> Result<Copied> {
    let mut copied = Copied::default();
    let mut chunk = Vec::new();
    let mut failed = None;
    let mut flush = |chunk: &mut Vec<_>, copied: &mut Copied| -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let part = GpuTimelinePart { ops: std::mem::take(chunk), ..Default::default() };
        copied.ops += part.ops.len() as u64;
        target.write_gpu_timeline(&part)
    };
    store.scan_gpu_ops(&scope.window, &mut |op| {
        if failed.is_some() || !scope.keeps_pid(op.pid) {
            return;
        }
        chunk.push(op);
        if chunk.len() >= CHUNK_ROWS {
            if let Err(e) = flush(&mut chunk, &mut copied) {
                failed = Some(e);
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    flush(&mut chunk, &mut copied)?;
    let mut devices = store.gpu_devices()?;
    devices.retain(|d| scope.keeps_pid(d.pid));
    let rest = GpuTimelinePart {
        ops: Vec::new(),
        clock_syncs: syncs_in(store.gpu_clock_syncs()?, scope),
        devices,
        notes: notes_in(store.gpu_timeline_notes()?, scope),
    };
    copied.clock_syncs = rest.clock_syncs.len() as u64;
    copied.devices = rest.devices.len() as u64;
    copied.notes = rest.notes.len() as u64;
    target.write_gpu_timeline(&rest)?;
    Ok(copied)
}

/// The calibrations of `scope`'s processes in its window, with each process's last one before the
/// window and first one after it (`syncs` by pid, then time).
fn syncs_in(syncs: Vec<GpuClockSync>, scope: &Scope) -> Vec<GpuClockSync> {
    let (from, to) = (scope.window.from_ns.unwrap_or(i64::MIN), scope.window.to_ns.unwrap_or(i64::MAX));
    let mut out = Vec::new();
    for (i, s) in syncs.iter().enumerate().filter(|(_, s)| scope.keeps_pid(s.pid)) {
        let same = |j: usize| syncs.get(j).filter(|o| o.pid == s.pid);
        let inside = |o: &GpuClockSync| o.trace_ns >= from && o.trace_ns <= to;
        let keep = inside(s)
            // the last before the window: the next one of the process is not before it
            || (s.trace_ns < from && i.checked_add(1).and_then(same).is_none_or(|n| n.trace_ns >= from))
            // the first after it: the one before it is not after it
            || (s.trace_ns > to && i.checked_sub(1).and_then(same).is_none_or(|p| p.trace_ns <= to));
        if keep {
            out.push(*s);
        }
    }
    out
}

/// The notes of `scope`'s processes in its window, and each process's latest [`STATE_NOTES`] note
/// before it (`notes` by time).
fn notes_in(notes: Vec<GpuTimelineNote>, scope: &Scope) -> Vec<GpuTimelineNote> {
    let from = scope.window.from_ns.unwrap_or(i64::MIN);
    let to = scope.window.to_ns.unwrap_or(i64::MAX);
    let mut state_before: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, n) in notes.iter().enumerate() {
        if n.ts_ns < from && scope.keeps_pid(n.pid) && STATE_NOTES.contains(&n.kind.as_str()) {
            state_before.insert(n.pid, i);
        }
    }
    let before: BTreeSet<usize> = state_before.into_values().collect();
    notes
        .into_iter()
        .enumerate()
        .filter(|(i, n)| before.contains(i) || (scope.keeps_pid(n.pid) && n.ts_ns >= from && n.ts_ns <= to))
        .map(|(_, n)| n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::time::TimeWindow;

    #[test]
    fn a_window_keeps_the_calibrations_around_it_and_the_state_it_starts_in() {
        let sync = |pid, trace_ns| GpuClockSync { pid, cupti_ns: trace_ns / 2, trace_ns, error_ns: 1 };
        let syncs = vec![sync(1, 10), sync(1, 20), sync(1, 35), sync(1, 50), sync(1, 60), sync(2, 5), sync(2, 70)];
        let scope = Scope { window: TimeWindow { from_ns: Some(30), to_ns: Some(40) }, pid: None };
        let kept: Vec<(u32, i64)> = syncs_in(syncs.clone(), &scope).iter().map(|s| (s.pid, s.trace_ns)).collect();
        assert_eq!(kept, [(1, 20), (1, 35), (1, 50), (2, 5), (2, 70)]);
        let one = Scope { pid: Some(2), ..scope.clone() };
        assert_eq!(syncs_in(syncs, &one).len(), 2);
        let note =
            |pid, ts_ns, kind: &str| GpuTimelineNote { pid, ts_ns, kind: kind.into(), count: 0, detail: String::new() };
        let notes = vec![
            note(1, 1, "started"),
            note(2, 2, "started"),
            note(1, 10, "stepped_aside"),
            note(1, 12, "dropped"),
            note(1, 35, "resumed"),
            note(1, 45, "stopped"),
        ];
        let kept: Vec<(u32, i64)> = notes_in(notes, &scope).iter().map(|n| (n.pid, n.ts_ns)).collect();
        assert_eq!(kept, [(2, 2), (1, 10), (1, 35)], "the hole the window starts in, the notes in it");
    }
}
