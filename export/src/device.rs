//! The device's own timeline in an export (traces recorded with `trace --gpu-timeline`): every
//! kernel, copy and memset as a slice on its stream's track (`GPU 0 stream 13`, in its process),
//! every synchronization on a track of the thread that waited (`GPU 0 syncs: train (4821)`: a
//! host's wait, not device work, and one thread's waits never overlap), a flow from each launching
//! call's slice to each op it launched, and the idle gaps over 1 ms on `GPU 0 idle`, named by their
//! top cause ([`crate::device_gaps`]).
//!
//! The ops are read window by window with the events (by device start, in the order the store
//! hands them). A call is written before the ops it launched (the device starts work after the call
//! that queued it), so the flows are allocated at the call: one per op of the export that names it
//! (`gpu_ops.launch_event_id`), counted once before the walk in one bit per call id (a map for the
//! calls that launched several ops: graph launches). The state kept across windows is per stream,
//! per device and per call whose ops are still queued, never per op written.

use std::collections::{BTreeMap, HashMap};

use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::{GpuOp, GpuOpKind};
use causeway_store::{EventId, TraceStore};

use crate::device_gaps::{explain_gaps, ExplainedGap, GapFinder};
use crate::writer::{Arg, Nesting, Slice, TraceWriter, Track};
use crate::{ExportError, ExportSummary};

/// What a device track shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum TrackKey {
    /// The kernels, copies and memsets of one stream.
    Stream { pid: u32, device: i32, stream: u32 },
    /// One thread's synchronizations (device -1: of no one device).
    Syncs { pid: u32, device: i32, tid: u32 },
    /// The device's idle gaps over 1 ms, named by their cause.
    Idle { pid: u32, device: i32 },
}

/// The names the tracks are given: the walk's process and thread names.
pub(crate) struct Names<'a> {
    pub processes: &'a BTreeMap<u32, String>,
    pub threads: &'a HashMap<u32, String>,
}

impl Names<'_> {
    fn process(&self, pid: u32) -> String {
        let name = self.processes.get(&pid).cloned().unwrap_or_else(|| format!("pid {pid}"));
        format!("{name} ({pid})")
    }

    fn thread(&self, tid: u32) -> String {
        match self.threads.get(&tid) {
            Some(comm) => format!("{comm} ({tid})"),
            None if tid == 0 => "thread unknown".into(),
            None => format!("tid {tid}"),
        }
    }
}

/// How many of the export's ops each traced call launched: one bit per call id for the first op,
/// a count for the few calls that launched several.
#[derive(Default)]
struct LaunchCounts {
    seen: HashMap<i64, u64>,
    several: HashMap<i64, u32>,
}

impl LaunchCounts {
    fn add(&mut self, id: i64) {
        let word = self.seen.entry(id.div_euclid(64)).or_default();
        let bit = 1u64 << id.rem_euclid(64);
        if *word & bit == 0 {
            *word |= bit;
        } else {
            *self.several.entry(id).or_insert(1) += 1;
        }
    }

    fn get(&self, id: i64) -> u32 {
        let seen = self.seen.get(&id.div_euclid(64)).is_some_and(|w| w & (1u64 << id.rem_euclid(64)) != 0);
        if seen {
            self.several.get(&id).copied().unwrap_or(1)
        } else {
            0
        }
    }
}

/// The device timeline's side of the walk.
pub(crate) struct DeviceTimeline {
    launches: LaunchCounts,
    /// Calls written whose ops are still to come: the next flow id and how many remain.
    pending: HashMap<i64, (u64, u32)>,
    /// Ops written before their call (a clock's rounding can put a device start a hair before the
    /// call's entry): they get no flow, and the call none for them.
    early: HashMap<i64, u32>,
    tracks: HashMap<TrackKey, usize>,
    /// A kernel's (slice name, demangled name) by CUPTI's name.
    kernel_names: HashMap<String, (String, String)>,
    gaps: GapFinder,
}

impl DeviceTimeline {
    /// Counts each call's ops over the export's scope; `None` when it holds no device op (a trace
    /// recorded without `--gpu-timeline` exports as it always did).
    pub fn prepare(
        store: &dyn TraceStore,
        window: TimeWindow,
        pid: Option<u32>,
    ) -> Result<Option<DeviceTimeline>, ExportError> {
        let mut launches = LaunchCounts::default();
        let mut ops = 0u64;
        store.scan_gpu_ops(&window, &mut |g| {
            if pid.is_none_or(|p| p == g.pid) {
                ops += 1;
                if g.launch_event_id > 0 {
                    launches.add(g.launch_event_id);
                }
            }
        })?;
        Ok((ops > 0).then(|| DeviceTimeline {
            launches,
            pending: HashMap::new(),
            early: HashMap::new(),
            tracks: HashMap::new(),
            kernel_names: HashMap::new(),
            gaps: GapFinder::default(),
        }))
    }

    /// The ops of `window` (of `pid`) in the store's order, at most `cap` (the caller halves a
    /// window that holds more); returns them and how many there were.
    pub fn read(
        store: &dyn TraceStore,
        window: TimeWindow,
        pid: Option<u32>,
        cap: u64,
    ) -> Result<(Vec<GpuOp>, u64), ExportError> {
        let mut ops = Vec::new();
        let mut n = 0u64;
        store.scan_gpu_ops(&window, &mut |g| {
            if pid.is_none_or(|p| p == g.pid) {
                n += 1;
                if n <= cap {
                    ops.push(g);
                }
            }
        })?;
        Ok((ops, n))
    }

    /// The flows leaving call `id`'s slice: one per op of the export it launched that is still to
    /// be written.
    pub fn call_flows(&mut self, id: &EventId, next_flow: &mut u64) -> Vec<u64> {
        let EventId::Int(id) = *id else { return Vec::new() };
        let total = self.launches.get(id);
        if total == 0 {
            return Vec::new();
        }
        let n = total.saturating_sub(self.early.remove(&id).unwrap_or(0));
        if n == 0 {
            return Vec::new();
        }
        let first = *next_flow;
        *next_flow += u64::from(n);
        self.pending.insert(id, (first, n));
        (first..first + u64::from(n)).collect()
    }

    /// The flow ending at an op launched by call `id`, if that call's slice was written.
    fn op_flow(&mut self, id: i64) -> Option<u64> {
        if id <= 0 {
            return None;
        }
        let Some((next, left)) = self.pending.get_mut(&id) else {
            *self.early.entry(id).or_default() += 1;
            return None;
        };
        let flow = *next;
        *next += 1;
        *left -= 1;
        if *left == 0 {
            self.pending.remove(&id);
        }
        Some(flow)
    }

    fn track(&mut self, w: &mut dyn TraceWriter, key: TrackKey, names: &Names) -> Result<Track, ExportError> {
        if let Some(&id) = self.tracks.get(&key) {
            return Ok(Track::Device(id));
        }
        let id = self.tracks.len();
        let gpu = |device: i32| if device >= 0 { format!("GPU {device}") } else { "GPU".to_string() };
        let (pid, name) = match key {
            TrackKey::Stream { pid, device, stream } => (pid, format!("{} stream {stream}", gpu(device))),
            TrackKey::Syncs { pid, device, tid } => (pid, format!("{} syncs: {}", gpu(device), names.thread(tid))),
            TrackKey::Idle { pid, device } => (pid, format!("{} idle", gpu(device))),
        };
        w.device_track(id, pid, &names.process(pid), &name)?;
        self.tracks.insert(key, id);
        Ok(Track::Device(id))
    }

    /// Writes one window's ops (in the store's order, by device start), then the idle gaps they
    /// closed, each named by its cause.
    pub fn write(
        &mut self,
        store: &dyn TraceStore,
        w: &mut dyn TraceWriter,
        nesting: &mut Nesting,
        names: &Names,
        ops: Vec<GpuOp>,
        summary: &mut ExportSummary,
    ) -> Result<(), ExportError> {
        let mut found = Vec::new();
        for op in ops {
            found.extend(self.gaps.push(&op));
            let key = match op.kind {
                GpuOpKind::Sync => TrackKey::Syncs { pid: op.pid, device: op.device, tid: op.launch_tid },
                _ => TrackKey::Stream { pid: op.pid, device: op.device, stream: op.stream },
            };
            let track = self.track(w, key, names)?;
            let mut slice = self.op_slice(&op);
            if let Some(f) = self.op_flow(op.launch_event_id) {
                slice.flows_in.push(f);
                summary.launch_flows += 1;
            }
            summary.clipped += nesting.begin(w, track, op.start_ns, op.end_ns.max(op.start_ns), &slice)?;
            summary.device_ops += 1;
        }
        for ExplainedGap { gap, why } in explain_gaps(store, found)? {
            let track = self.track(w, TrackKey::Idle { pid: gap.pid, device: gap.device }, names)?;
            let slice = crate::device_gaps::gap_slice(&gap, why.as_ref());
            summary.clipped += nesting.begin(w, track, gap.start, gap.end, &slice)?;
            summary.idle_gaps += 1;
        }
        Ok(())
    }

    fn op_slice(&mut self, op: &GpuOp) -> Slice {
        let mut args = Vec::new();
        let (name, category) = match op.kind {
            GpuOpKind::Kernel => {
                let (short, full) = self
                    .kernel_names
                    .entry(op.name.clone())
                    .or_insert_with(|| {
                        let full = causeway_model::demangle::demangle(&op.name);
                        (causeway_analysis::short_kernel_name(&full), full)
                    })
                    .clone();
                // the slice says the function (a track cannot show PyTorch's kilobyte templates);
                // its args keep the full name
                args.push(("kernel", Arg::Str(full)));
                (short, "gpu_kernel")
            }
            GpuOpKind::Memcpy => {
                args.push(("direction", Arg::Str(op.name.clone())));
                args.push(("bytes", Arg::Int(op.bytes)));
                (format!("memcpy {}", op.name), "gpu_memcpy")
            }
            GpuOpKind::Memset => {
                args.push(("bytes", Arg::Int(op.bytes)));
                ("memset".to_string(), "gpu_memset")
            }
            GpuOpKind::Sync => {
                let kind = if op.name.is_empty() { "device" } else { op.name.as_str() };
                args.push(("sync_type", Arg::Str(kind.to_string())));
                (format!("{kind} sync"), "gpu_sync")
            }
        };
        args.extend([
            ("dur", Arg::Str(fmt_ns(op.dur_ns()))),
            ("device", Arg::Int(i64::from(op.device))),
            ("stream", Arg::Int(i64::from(op.stream))),
            ("context", Arg::Int(i64::from(op.context))),
            ("correlation", Arg::Int(i64::from(op.correlation))),
            ("launch_tid", Arg::Int(i64::from(op.launch_tid))),
        ]);
        if op.launch_event_id > 0 {
            args.push(("launch_event_id", Arg::Str(op.launch_event_id.to_string())));
        }
        if let Some(latency) = op.launch_latency_ns() {
            args.push(("launch_latency", Arg::Str(fmt_ns(latency))));
        }
        Slice { name, category: category.into(), args, flows_out: Vec::new(), flows_in: Vec::new() }
    }
}
