//! One traced process's device-timeline messages turned into stored rows: CUPTI's clock mapped onto
//! the trace's (the calibration pairs the library sends at each flush, piecewise, split at a step),
//! each device op joined with the API record of the call that launched it (by correlation id), the
//! library's notes and the tracer's own (lost messages, ops whose launching call never came).
//!
//! Memory is bounded: API records are kept for [`API_KEEP`] correlations, ops wait for their API
//! record at most [`WAIT_NS`] of arrival time (then go on without it), calibration pairs [`PAIRS_KEEP`].

use std::collections::{HashMap, VecDeque};

use causeway_gpu_wire::{ClockPair, Hello, Message, WireApi, WireNote, WireOp};
use causeway_model::{GpuClockSync, GpuDevice, GpuOp, GpuOpKind, GpuTimelineNote};
use causeway_store::GpuTimelinePart;

/// API records kept for ops still to come (a kernel's record may arrive flushes after its call's).
pub const API_KEEP: usize = 1 << 20;
/// How long (tracer's monotonic clock) an op waits for its launching call's API record.
pub const WAIT_NS: i64 = 2_000_000_000;
/// Calibration pairs kept for mapping.
pub const PAIRS_KEEP: usize = 256;
/// Two consecutive pairs whose offsets differ by more than this are a step of CUPTI's clock.
pub const STEP_NS: i64 = 1_000_000;

/// The per-process state of the conversion.
pub struct ProcessTimeline {
    pid: u32,
    /// `CLOCK_MONOTONIC` to unix ns, as the probes' decoder uses it.
    mono_to_unix: i64,
    /// (cupti_ns, offset = mono - cupti, half width), by cupti_ns.
    pairs: VecDeque<(i64, i64, i64)>,
    apis: HashMap<u32, WireApi>,
    api_order: VecDeque<u32>,
    /// Ops without their API record yet, with when they arrived.
    waiting: VecDeque<(i64, WireOp)>,
    /// Ops that arrived before any calibration.
    unmapped: Vec<WireOp>,
    next_seq: Option<u32>,
    lost_messages: u64,
    unmatched: u64,
    /// The library's Hello (what it runs on).
    pub hello: Option<Hello>,
    /// The library said it stopped, or the view is finished.
    stopped: bool,
    /// The library turned itself off (it says why; nothing more comes).
    off: bool,
    /// An attached library's last note left it dormant (between windows): nothing more to come.
    dormant: bool,
}

impl ProcessTimeline {
    /// A process's state; `mono_to_unix` is the trace's monotonic-to-unix offset.
    pub fn new(pid: u32, mono_to_unix: i64) -> ProcessTimeline {
        ProcessTimeline {
            pid,
            mono_to_unix,
            pairs: VecDeque::new(),
            apis: HashMap::new(),
            api_order: VecDeque::new(),
            waiting: VecDeque::new(),
            unmapped: Vec::new(),
            next_seq: None,
            lost_messages: 0,
            unmatched: 0,
            hello: None,
            stopped: false,
            off: false,
            dormant: false,
        }
    }

    /// Take one message that arrived at `now_mono` (the tracer's monotonic clock) with sequence
    /// number `seq`; what it gives to store goes into `out`.
    pub fn take(&mut self, seq: u32, msg: Message, now_mono: i64, out: &mut GpuTimelinePart) {
        if let Some(want) = self.next_seq {
            if seq != want {
                self.lost_messages += u64::from(seq.wrapping_sub(want));
            }
        }
        self.next_seq = Some(seq.wrapping_add(1));
        match msg {
            // the library's own `started` note says what it runs on; the Hello is kept for its
            // thread id type
            Message::Hello(h) => self.hello = Some(h),
            Message::Clock(pairs) => self.calibrate(&pairs, now_mono, out),
            Message::Apis(apis) => {
                for a in apis {
                    self.keep_api(a);
                }
            }
            Message::Ops(ops) => {
                for op in ops {
                    self.waiting.push_back((now_mono, op));
                }
            }
            Message::Devices(devs) => out.devices.extend(devs.into_iter().map(|d| GpuDevice {
                pid: self.pid,
                device: d.device,
                uuid: uuid_words(&d.uuid),
                name: d.name,
                nvml_index: -1,
            })),
            Message::Note(n) => {
                self.stopped |= n.kind == "stopped";
                self.off |= n.kind == "off";
                // an attached library that closed its window at the trace's end has said its last
                // (it stays loaded, dormant, in a process that runs on)
                self.dormant = matches!(n.kind.as_str(), "dormant" | "window_closed")
                    || (self.dormant && n.kind != "window_opened");
                out.notes.push(self.library_note(n));
            }
            // the tracer's own messages and a client's, never a library's
            Message::Control(_) | Message::WindowRequest(_) | Message::WindowReply { .. } => {}
        }
        self.release(now_mono, false, out);
    }

    /// The process is gone (its socket closed) or the trace ends: everything held goes out, and
    /// what was lost is said.
    pub fn finish(&mut self, now_mono: i64, out: &mut GpuTimelinePart) {
        self.release(now_mono, true, out);
        if !self.unmapped.is_empty() {
            let n = self.unmapped.len();
            self.unmapped.clear();
            out.notes.push(self.note(
                now_mono,
                "dropped",
                n as i64,
                format!("{n} device records arrived with no clock calibration to map them: not stored"),
            ));
        }
        // lost messages in between are counted by the library itself (a later `dropped` note counts
        // their records); lost messages at the end are seen only by the missing `stopped` note
        if self.next_seq.is_some() && !self.stopped && !self.off && !self.dormant {
            out.notes.push(self.note(now_mono, "dropped", 0, format!(
                "the injection library's last messages never arrived (no `stopped` note{}): the end of the device view may be missing",
                if self.lost_messages > 0 { format!("; {} messages missing before", self.lost_messages) } else { String::new() }
            )));
        }
        self.stopped = true;
        if self.unmatched > 0 {
            out.notes.push(self.note(
                now_mono,
                "unmatched",
                self.unmatched as i64,
                format!("{} device ops came without CUPTI's record of the call that launched them", self.unmatched),
            ));
            self.unmatched = 0;
        }
    }

    fn keep_api(&mut self, a: WireApi) {
        if self.apis.insert(a.correlation, a).is_none() {
            self.api_order.push_back(a.correlation);
        }
        while self.api_order.len() > API_KEEP {
            if let Some(old) = self.api_order.pop_front() {
                self.apis.remove(&old);
            }
        }
    }

    fn calibrate(&mut self, pairs: &[ClockPair], now_mono: i64, out: &mut GpuTimelinePart) {
        for p in pairs {
            let cupti = p.cupti_ns as i64;
            let offset = p.mono_ns as i64 - cupti;
            let half = p.half_width_ns as i64;
            if let Some(&(_, last, _)) = self.pairs.back() {
                if (offset - last).abs() > STEP_NS {
                    out.notes.push(self.note(now_mono, "clock_step", 0, format!(
                        "CUPTI's clock moved {} against the host's between two calibrations: device times are mapped by the nearest calibration on each side",
                        causeway_model::time::fmt_ns(offset - last)
                    )));
                }
            }
            let at = self.pairs.partition_point(|q| q.0 <= cupti);
            self.pairs.insert(at, (cupti, offset, half));
            if self.pairs.len() > PAIRS_KEEP {
                self.pairs.pop_front();
            }
            out.clock_syncs.push(GpuClockSync {
                pid: self.pid,
                cupti_ns: cupti,
                trace_ns: p.mono_ns as i64 + self.mono_to_unix,
                error_ns: half,
            });
        }
        if !self.pairs.is_empty() && !self.unmapped.is_empty() {
            let held = std::mem::take(&mut self.unmapped);
            self.waiting.extend(held.into_iter().map(|op| (now_mono, op)));
        }
    }

    /// CUPTI time to the trace's (unix ns): the offset interpolated between the calibrations on
    /// each side when they agree, else the nearest one's (a step lies between them).
    fn map(&self, cupti: u64) -> Option<i64> {
        let x = cupti as i64;
        let i = self.pairs.partition_point(|q| q.0 <= x);
        let before = i.checked_sub(1).map(|i| self.pairs[i]);
        let after = self.pairs.get(i).copied();
        let offset = match (before, after) {
            (Some(a), Some(b)) if (a.1 - b.1).abs() <= STEP_NS && b.0 > a.0 => {
                a.1 + ((b.1 - a.1) as i128 * (x - a.0) as i128 / (b.0 - a.0) as i128) as i64
            }
            (Some(a), Some(b)) => {
                if x - a.0 <= b.0 - x {
                    a.1
                } else {
                    b.1
                }
            }
            (Some(a), None) => a.1,
            (None, Some(b)) => b.1,
            (None, None) => return None,
        };
        Some(x + offset + self.mono_to_unix)
    }

    /// Ops that waited long enough for their API record go out without it (called every half
    /// second while no message arrives).
    pub fn tick(&mut self, now_mono: i64, out: &mut GpuTimelinePart) {
        self.release(now_mono, false, out);
    }

    /// Ops whose API record is here (or waited long enough, or `all`) go out.
    fn release(&mut self, now_mono: i64, all: bool, out: &mut GpuTimelinePart) {
        if self.pairs.is_empty() {
            if all {
                self.unmapped.extend(self.waiting.drain(..).map(|(_, op)| op));
            }
            return;
        }
        let mut keep = VecDeque::new();
        while let Some((arrived, op)) = self.waiting.pop_front() {
            let api = self.apis.get(&op.correlation).copied();
            if api.is_none() && !all && now_mono - arrived < WAIT_NS {
                keep.push_back((arrived, op));
                continue;
            }
            if let Some(g) = self.op_row(&op, api) {
                out.ops.push(g);
            }
        }
        self.waiting = keep;
    }

    fn op_row(&mut self, op: &WireOp, api: Option<WireApi>) -> Option<GpuOp> {
        let kind = GpuOpKind::from_code(op.kind)?;
        let (start, end) = (self.map(op.start)?, self.map(op.end)?);
        // API records name Linux tids only with CUPTI's SYSTEM thread id type (the library sets it;
        // a CUPTI that refused leaves pthread ids, which name no thread of the trace)
        let linux_tids = self.hello.as_ref().is_none_or(|h| h.thread_id_type == 1);
        let (launch_tid, launch_start_ns, launch_end_ns, launch_cbid) = match api {
            Some(a) if linux_tids => (
                a.tid,
                self.map(a.start).unwrap_or(0),
                self.map(a.end).unwrap_or(0),
                if a.domain == 5 { a.cbid + GpuOp::RUNTIME_CBID_BASE } else { a.cbid },
            ),
            _ => {
                // a synchronization is its own call; every other op should have had one
                if kind != GpuOpKind::Sync {
                    self.unmatched += 1;
                }
                (0, 0, 0, 0)
            }
        };
        Some(GpuOp {
            pid: self.pid,
            device: op.device,
            context: op.context,
            stream: op.stream,
            kind,
            start_ns: start,
            end_ns: end.max(start),
            correlation: op.correlation,
            name: op_name(kind, op),
            bytes: op.bytes as i64,
            launch_tid,
            launch_start_ns,
            launch_end_ns,
            launch_cbid,
            launch_event_id: 0,
        })
    }

    fn note(&self, mono: i64, kind: &str, count: i64, detail: String) -> GpuTimelineNote {
        GpuTimelineNote { pid: self.pid, ts_ns: mono + self.mono_to_unix, kind: kind.into(), count, detail }
    }

    fn library_note(&self, n: WireNote) -> GpuTimelineNote {
        self.note(n.mono_ns as i64, &n.kind, n.count as i64, n.detail)
    }
}

/// NVML's spelling of a UUID: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_words(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A stored op's name: a kernel's own, a copy's direction, a synchronization's type.
fn op_name(kind: GpuOpKind, op: &WireOp) -> String {
    match kind {
        GpuOpKind::Kernel => op.name.clone(),
        GpuOpKind::Memcpy => match op.subkind {
            1 => "HtoD",
            2 => "DtoH",
            3 => "HtoA",
            4 => "AtoH",
            5 => "AtoA",
            6 => "AtoD",
            7 => "DtoA",
            8 => "DtoD",
            9 => "HtoH",
            10 => "PtoP",
            _ => "unknown",
        }
        .into(),
        GpuOpKind::Memset => String::new(),
        GpuOpKind::Sync => match op.subkind {
            1 => "event",
            2 => "stream_wait_event",
            3 => "stream",
            4 => "context",
            _ => "unknown",
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: u8, corr: u32, start: u64, end: u64) -> WireOp {
        WireOp {
            kind,
            subkind: 0,
            device: 0,
            context: 1,
            stream: 7,
            correlation: corr,
            start,
            end,
            bytes: 0,
            name: "k".into(),
        }
    }

    fn api(corr: u32, tid: u32, start: u64, end: u64) -> WireApi {
        WireApi { domain: 4, cbid: 307, tid, correlation: corr, ret: 0, start, end }
    }

    #[test]
    fn ops_are_mapped_through_the_calibration_and_joined_with_their_call() {
        let mut p = ProcessTimeline::new(42, 1_000_000_000_000);
        let mut out = GpuTimelinePart::default();
        // CUPTI's clock is 5 s ahead of the monotonic clock
        let pair = |c: u64| ClockPair { cupti_ns: c, mono_ns: c - 5_000_000_000, half_width_ns: 40 };
        p.take(0, Message::Clock(vec![pair(10_000_000_000)]), 0, &mut out);
        p.take(1, Message::Ops(vec![op(1, 9, 10_000_100_000, 10_000_200_000)]), 1, &mut out);
        assert!(out.ops.is_empty(), "an op waits for its call's record");
        p.take(2, Message::Apis(vec![api(9, 777, 10_000_050_000, 10_000_060_000)]), 2, &mut out);
        assert_eq!(out.ops.len(), 1);
        let g = &out.ops[0];
        assert_eq!(g.start_ns, 1_000_000_000_000 + 5_000_100_000);
        assert_eq!(g.end_ns - g.start_ns, 100_000);
        assert_eq!((g.launch_tid, g.launch_start_ns), (777, 1_000_000_000_000 + 5_000_050_000));
        assert_eq!(out.clock_syncs[0].error_ns, 40);
    }

    #[test]
    fn an_op_without_its_call_goes_out_after_the_wait_and_is_counted() {
        let mut p = ProcessTimeline::new(1, 0);
        let mut out = GpuTimelinePart::default();
        p.take(0, Message::Clock(vec![ClockPair { cupti_ns: 100, mono_ns: 100, half_width_ns: 1 }]), 0, &mut out);
        p.take(1, Message::Ops(vec![op(1, 5, 200, 300)]), 0, &mut out);
        p.take(2, Message::Apis(vec![]), WAIT_NS + 1, &mut out);
        assert_eq!(out.ops.len(), 1);
        assert_eq!(out.ops[0].launch_tid, 0);
        p.finish(WAIT_NS + 2, &mut out);
        assert!(out.notes.iter().any(|n| n.kind == "unmatched" && n.count == 1), "{:?}", out.notes);
    }

    #[test]
    fn a_clock_step_is_noted_and_each_side_maps_by_its_own_calibration() {
        let mut p = ProcessTimeline::new(1, 0);
        let mut out = GpuTimelinePart::default();
        let step = 2_000_000_000u64;
        p.take(
            0,
            Message::Clock(vec![ClockPair { cupti_ns: 1_000_000, mono_ns: 1_000_000, half_width_ns: 1 }]),
            0,
            &mut out,
        );
        p.take(
            1,
            Message::Clock(vec![ClockPair { cupti_ns: 201_000_000 + step, mono_ns: 201_000_000, half_width_ns: 1 }]),
            0,
            &mut out,
        );
        assert!(out.notes.iter().any(|n| n.kind == "clock_step"));
        assert_eq!(p.map(100_000_000), Some(100_000_000), "before the step: the first calibration");
        assert_eq!(p.map(200_000_000 + step), Some(200_000_000), "after it: the second");
    }

    #[test]
    fn a_library_that_never_said_it_stopped_is_said_to_have_lost_its_end() {
        let mut p = ProcessTimeline::new(1, 0);
        let mut out = GpuTimelinePart::default();
        p.take(0, Message::Apis(vec![]), 0, &mut out);
        p.take(4, Message::Apis(vec![]), 0, &mut out);
        p.finish(0, &mut out);
        let n = out.notes.iter().find(|n| n.kind == "dropped").expect("a note");
        assert!(n.detail.contains("3 messages missing"), "{}", n.detail);
        // one that did is not
        let mut p = ProcessTimeline::new(1, 0);
        let mut out = GpuTimelinePart::default();
        let stopped = WireNote { mono_ns: 5, kind: "stopped".into(), count: 0, detail: "exit".into() };
        p.take(0, Message::Note(stopped), 0, &mut out);
        p.finish(0, &mut out);
        assert!(out.notes.iter().all(|n| n.kind == "stopped"), "{:?}", out.notes);
    }

    #[test]
    fn uuids_read_as_nvml_writes_them() {
        let u: [u8; 16] = [0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
        assert_eq!(uuid_words(&u), "GPU-deadbeef-0001-0203-0405-060708090a0b");
    }
}
