//! The walk over a trace that every format shares: read the events window by window, order each
//! window by slice start, and turn each event into tracks, slices, flows and counter values for a
//! [`TraceWriter`]. Nothing here knows a file format. The device's own timeline, where the trace
//! holds one, is read in the same windows and written by [`crate::device`].

use std::collections::{BTreeMap, HashMap, HashSet};

use causeway_analysis::{explain, ExplainRequest, KernelIndex, ThreadNesting};
use causeway_model::codes::{self, op, GpuRole, OpCode, OpKind};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::{Event, PrevState};
use causeway_store::{EventFilter, EventId, StoredEvent, TraceStore};

use crate::device::{DeviceTimeline, Names};
use crate::writer::{Arg, CounterOwner, Nesting, Slice, TraceWriter, Track};
use crate::{ExportError, ExportRequest, ExportSummary};

/// A window that reads more than this many times [`ExportRequest::chunk_events`] is halved.
const DENSE_FACTOR: u64 = 4;
/// Launch-rate buckets: the trace's span over this many, within [`MIN_BUCKET_NS`, `MAX_BUCKET_NS`].
const RATE_BUCKETS: i64 = 2_000;
const MIN_BUCKET_NS: i64 = 1_000_000;
const MAX_BUCKET_NS: i64 = 1_000_000_000;
/// Chains annotated at most (explain ranks them; the rest are in `explain`'s own answer).
const MAX_CHAINS: usize = 50;

/// Where a JSON export counts its microseconds from: the window's first second.
pub(crate) fn origin(store: &dyn TraceStore, req: &ExportRequest) -> i64 {
    let first = store.info().first_ns;
    let from = req.window.from_ns.unwrap_or(first).max(first);
    from - from.rem_euclid(1_000_000_000)
}

/// Writes the whole export through `w`.
pub(crate) fn walk(
    store: &dyn TraceStore,
    req: &ExportRequest,
    w: &mut dyn TraceWriter,
) -> Result<ExportSummary, ExportError> {
    let info = store.info();
    let from = req.window.from_ns.unwrap_or(info.first_ns).max(info.first_ns);
    let to = req.window.to_ns.unwrap_or(info.last_ns).min(info.last_ns);
    let mut walk = Walk::new(store, req, from, to)?;
    if info.events > 0 && from <= to {
        walk.gpu_counters(w, from, to)?;
        walk.serving_counters(w, from, to)?;
        if req.chains {
            walk.prepare_chains(w)?;
        }
        walk.device = DeviceTimeline::prepare(store, req.window, req.pid)?;
        walk.windows(w, from, to)?;
    }
    walk.finish(w)
}

/// A chain's annotation, waiting for its time to come.
struct ChainMark {
    rank: usize,
    start: i64,
    end: i64,
    slice: Slice,
}

/// One thing to write in a window, by where its slice starts.
enum Item {
    Event(StoredEvent),
    Chain(usize),
}

struct Walk<'a> {
    store: &'a dyn TraceStore,
    req: &'a ExportRequest,
    kernels: KernelIndex,
    /// Each launched kernel's (name, short name) by (pid, handle), worked out once per window: the
    /// names PyTorch records run to kilobytes, and a window launches the same kernels again and again.
    kernel_names: HashMap<(u32, i64), (String, String)>,
    /// Socket peers by key (`net_peers`), to name socket calls.
    peers: HashMap<i64, String>,
    process_names: BTreeMap<u32, String>,
    thread_names: HashMap<u32, String>,
    threads: HashSet<(u32, u32)>,
    cpus: HashSet<i32>,
    nesting: Nesting,
    /// Flows ending at an evidence event's slice.
    evidence_flows: HashMap<EventId, Vec<u64>>,
    chains: Vec<ChainMark>,
    next_chain: usize,
    next_flow: u64,
    rates: LaunchRates,
    /// Each thread's call nesting: a launch inside another call (the driver launch of a runtime
    /// launch) is the same kernel and is not counted again.
    nesting_by_thread: HashMap<u32, ThreadNesting>,
    next_counter: usize,
    /// The device's own timeline, when the trace holds one in the export's scope.
    device: Option<DeviceTimeline>,
    summary: ExportSummary,
}

impl<'a> Walk<'a> {
    fn new(store: &'a dyn TraceStore, req: &'a ExportRequest, from: i64, to: i64) -> Result<Walk<'a>, ExportError> {
        let window = TimeWindow { from_ns: Some(from), to_ns: Some(to) };
        let filter = EventFilter { window, pid: req.pid, ..Default::default() };
        Ok(Walk {
            store,
            req,
            kernels: KernelIndex::load(store)?,
            kernel_names: HashMap::new(),
            peers: store.net_peers()?.into_iter().map(|p| (p.peer, p.label())).collect(),
            process_names: store.process_names()?,
            thread_names: store.thread_comms(&filter, true)?,
            threads: HashSet::new(),
            cpus: HashSet::new(),
            nesting: Nesting::default(),
            evidence_flows: HashMap::new(),
            chains: Vec::new(),
            next_chain: 0,
            next_flow: 1,
            rates: LaunchRates::new(rate_bucket_ns(from, to)),
            nesting_by_thread: HashMap::new(),
            next_counter: 0,
            device: None,
            summary: ExportSummary::default(),
        })
    }

    fn flow(&mut self) -> u64 {
        let f = self.next_flow;
        self.next_flow += 1;
        f
    }

    /// The GPUs' NVML samples as counter tracks (a few per second: read at once).
    fn gpu_counters(&mut self, w: &mut dyn TraceWriter, from: i64, to: i64) -> Result<(), ExportError> {
        type Reading = fn(&causeway_model::GpuSample) -> Option<f64>;
        let readings: [(&str, &str, Reading); 7] = [
            ("SM clock", "MHz", |s| (s.sm_clock_mhz >= 0).then_some(f64::from(s.sm_clock_mhz))),
            ("memory clock", "MHz", |s| (s.mem_clock_mhz >= 0).then_some(f64::from(s.mem_clock_mhz))),
            ("temperature", "C", |s| (s.temperature_c >= 0).then_some(f64::from(s.temperature_c))),
            ("power", "W", |s| (s.power_mw >= 0).then_some(s.power_mw as f64 / 1000.0)),
            ("utilization", "%", |s| (s.util_gpu_pct >= 0).then_some(f64::from(s.util_gpu_pct))),
            ("memory used", "GiB", |s| {
                (s.mem_used_bytes >= 0).then_some(s.mem_used_bytes as f64 / (1u64 << 30) as f64)
            }),
            ("throttle reasons", "bitmask", |s| (s.throttle_reasons >= 0).then_some(s.throttle_reasons as f64)),
        ];
        let samples = self.store.gpu_samples(&TimeWindow { from_ns: Some(from), to_ns: Some(to) })?;
        let mut tracks: HashMap<(i32, usize), usize> = HashMap::new();
        for s in &samples {
            for (k, (name, unit, read)) in readings.iter().enumerate() {
                let Some(v) = read(s) else { continue };
                let id = match tracks.get(&(s.gpu, k)) {
                    Some(&id) => id,
                    None => {
                        let id = self.next_counter;
                        self.next_counter += 1;
                        w.counter_track(
                            id,
                            &CounterOwner::Gpu(s.gpu),
                            &format!("GPU {} {name} ({unit})", s.gpu),
                            unit,
                        )?;
                        tracks.insert((s.gpu, k), id);
                        id
                    }
                };
                w.counter(id, s.ts_ns, v)?;
                self.summary.counter_values += 1;
            }
        }
        Ok(())
    }

    /// A serving engine's scraped metrics as counter tracks: its queue and KV cache at each
    /// scrape, each latency's mean per scrape interval (a few values a second: read at once).
    fn serving_counters(&mut self, w: &mut dyn TraceWriter, from: i64, to: i64) -> Result<(), ExportError> {
        let samples = self.store.serving_samples(&TimeWindow { from_ns: Some(from), to_ns: Some(to) })?;
        for series in causeway_analysis::serving_series(&samples) {
            let id = self.next_counter;
            self.next_counter += 1;
            let name = format!("{} (pid {}, {})", series.name, series.pid, series.unit);
            w.counter_track(id, &CounterOwner::Serving, &name, series.unit)?;
            for (ts, v) in series.points {
                w.counter(id, ts, v)?;
                self.summary.counter_values += 1;
            }
        }
        Ok(())
    }

    /// Runs explain over the export's scope and declares one annotation track per chain, with a
    /// flow to each evidence event the export will write.
    fn prepare_chains(&mut self, w: &mut dyn TraceWriter) -> Result<(), ExportError> {
        let ex = explain(self.store, &ExplainRequest::new(self.req.window, self.req.pid, MAX_CHAINS))?;
        let ids: Vec<EventId> = ex.chains.iter().flat_map(|c| c.evidence.event_ids.iter().cloned()).collect();
        let spans: HashMap<EventId, (i64, i64)> =
            self.store.events_by_id(&ids)?.into_iter().map(|e| (e.id.clone(), e.event.span())).collect();
        for (i, chain) in ex.chains.iter().enumerate() {
            let found: Vec<(&EventId, (i64, i64))> =
                chain.evidence.event_ids.iter().filter_map(|id| spans.get(id).map(|&s| (id, s))).collect();
            let (Some(start), Some(end)) = (found.iter().map(|(_, s)| s.0).min(), found.iter().map(|(_, s)| s.1).max())
            else {
                continue;
            };
            let mut flows_out = Vec::new();
            for (id, _) in &found {
                let f = self.flow();
                self.evidence_flows.entry((*id).clone()).or_default().push(f);
                flows_out.push(f);
            }
            let rank = i + 1;
            let name = chain.title();
            let mut args = vec![
                ("headline", Arg::Str(chain.headline())),
                ("kind", Arg::Str(format!("{:?}", chain.kind))),
                ("calls", Arg::Int(chain.calls as i64)),
                ("stall_ns", Arg::Int(chain.stall_ns)),
                ("evidence_sql", Arg::Str(chain.evidence.sql.clone())),
                ("evidence_value", Arg::Int(chain.evidence.value)),
            ];
            if let Some(r) = chain.recommendations.first() {
                args.push(("do", Arg::Str(r.clone())));
            }
            w.chain(rank, &name)?;
            self.chains.push(ChainMark {
                rank,
                start,
                end,
                slice: Slice { name, category: "chain".into(), args, flows_out, flows_in: Vec::new() },
            });
            self.summary.chains += 1;
        }
        self.chains.sort_by_key(|c| (c.start, c.rank));
        Ok(())
    }

    /// Reads `[from, to]` a window at a time and writes each (the device ops that start in it too:
    /// the first window's from the request's start, the last one's to the request's end, as the
    /// device may run past the last host event).
    fn windows(&mut self, w: &mut dyn TraceWriter, from: i64, to: i64) -> Result<(), ExportError> {
        let info = self.store.info();
        let chunk = self.req.chunk_events.max(1);
        let span = (to - from).max(0) as u128 + 1;
        let nominal = ((span * u128::from(chunk)) / u128::from(info.events.max(1))).clamp(1, span) as i64;
        let limit = chunk.saturating_mul(DENSE_FACTOR);
        let mut width = nominal;
        let mut start = from;
        while start <= to {
            let end = start.saturating_add(width - 1).min(to);
            let filter = EventFilter {
                window: TimeWindow { from_ns: Some(start), to_ns: Some(end) },
                pid: self.req.pid,
                ..Default::default()
            };
            let mut items = Vec::new();
            let n = self.store.scan_events(&filter, &mut |e| {
                if (items.len() as u64) < limit {
                    items.push(e);
                }
            })?;
            if n > limit && end > start {
                width = ((end - start + 1) / 2).max(1);
                continue;
            }
            let (ops, n_ops) = match &self.device {
                Some(_) => {
                    let window = TimeWindow {
                        from_ns: if start == from { self.req.window.from_ns } else { Some(start) },
                        to_ns: if end == to { self.req.window.to_ns } else { Some(end) },
                    };
                    let cap = if end > start { limit.saturating_sub(n) } else { u64::MAX };
                    DeviceTimeline::read(self.store, window, self.req.pid, cap)?
                }
                None => (Vec::new(), 0),
            };
            let n = n + n_ops;
            if n > limit && end > start {
                width = ((end - start + 1) / 2).max(1);
                continue;
            }
            self.window(w, items, ops, end)?;
            self.summary.windows += 1;
            start = end + 1;
            // the next window by this one's density, within [1, 16x the average]
            width = ((width as u128 * u128::from(chunk)) / u128::from(n.max(1))).clamp(1, nominal as u128 * 16) as i64;
        }
        Ok(())
    }

    /// Writes one window's events (and the chains that start before its end) by slice start, then
    /// its device ops (after the calls that launched them, which carry the flows to them).
    fn window(
        &mut self,
        w: &mut dyn TraceWriter,
        events: Vec<StoredEvent>,
        ops: Vec<causeway_model::GpuOp>,
        end: i64,
    ) -> Result<(), ExportError> {
        let mut items: Vec<(i64, i64, u8, Item)> = Vec::with_capacity(events.len());
        while self.next_chain < self.chains.len() && self.chains[self.next_chain].start <= end {
            let c = &self.chains[self.next_chain];
            items.push((c.start, c.end, 0, Item::Chain(self.next_chain)));
            self.next_chain += 1;
        }
        for e in events {
            let (s, t) = e.event.span();
            items.push((s, t, 1, Item::Event(e)));
        }
        // by start, the longer first (a parent before what it contains), chains first
        items.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        for (start, end, _, item) in items {
            match item {
                Item::Chain(i) => {
                    let c = &self.chains[i];
                    self.nesting.begin(w, Track::Chain(c.rank), start, end, &c.slice)?;
                }
                Item::Event(e) => self.event(w, e)?,
            }
        }
        if let Some(device) = &mut self.device {
            let names = Names { processes: &self.process_names, threads: &self.thread_names };
            device.write(self.store, w, &mut self.nesting, &names, ops, &mut self.summary)?;
        }
        Ok(())
    }

    fn declare_thread(&mut self, w: &mut dyn TraceWriter, e: &Event) -> Result<(), ExportError> {
        if self.threads.insert((e.pid, e.tid)) {
            let comm = self.thread_names.get(&e.tid).cloned().unwrap_or_else(|| e.comm.clone());
            let process = self.process_names.get(&e.pid).cloned().unwrap_or_else(|| comm.clone());
            w.thread(e.pid, e.tid, &format!("{process} ({})", e.pid), &format!("{comm} ({})", e.tid))?;
            self.summary.threads += 1;
        }
        Ok(())
    }

    fn event(&mut self, w: &mut dyn TraceWriter, e: StoredEvent) -> Result<(), ExportError> {
        let ev = &e.event;
        self.declare_thread(w, ev)?;
        let track = Track::Thread { pid: ev.pid, tid: ev.tid };
        let code = OpCode::new(ev.source, ev.op);
        let flows_in = self.evidence_flows.remove(&e.id).unwrap_or_default();
        self.summary.chain_flows += flows_in.len() as u64;
        match codes::op_kind(ev.source, ev.op) {
            OpKind::GpuCall => {
                let mut slice = self.call_slice(&e, code, flows_in);
                if let Some(device) = &mut self.device {
                    slice.flows_out = device.call_flows(&e.id, &mut self.next_flow);
                }
                self.summary.clipped += self.nesting.begin(w, track, ev.ts_ns, ev.span().1, &slice)?;
                self.summary.calls += 1;
                let nested = self.nesting_by_thread.entry(ev.tid).or_default().nested(ev.span().1);
                if codes::is_kernel_launch(code) && !nested {
                    self.launch(w, ev.pid, ev.ts_ns)?;
                }
            }
            OpKind::OffCpu if code == op::SCHED_SWITCH => self.off_cpu(w, &e, track, flows_in)?,
            OpKind::SocketCall => {
                // the call spans the thread's wait on its peer: its off-CPU slices nest under it
                let peer = self.peers.get(&ev.arg2).cloned().unwrap_or_else(|| "unknown peer".into());
                let slice = Slice {
                    name: format!("{} {peer}", code.name()),
                    category: codes::source_name(ev.source),
                    args: vec![
                        ("event_id", Arg::Str(e.id.to_string())),
                        ("dur", Arg::Str(fmt_ns(ev.dur_ns))),
                        ("peer", Arg::Str(peer)),
                        ("bytes", Arg::Int(ev.arg0)),
                        ("fd", Arg::Int(ev.arg1)),
                        ("return_code", Arg::Int(i64::from(ev.ret_code))),
                    ],
                    flows_out: Vec::new(),
                    flows_in,
                };
                self.summary.clipped += self.nesting.begin(w, track, ev.ts_ns, ev.span().1, &slice)?;
                self.summary.socket_calls += 1;
            }
            OpKind::Label => {
                // a labeled step spans the calls made in it: the calls nest under it on the thread
                let slice = Slice {
                    name: format!("{} {}", code.name(), ev.arg0),
                    category: codes::source_name(ev.source),
                    args: vec![
                        ("event_id", Arg::Str(e.id.to_string())),
                        ("dur", Arg::Str(fmt_ns(ev.dur_ns))),
                        ("index", Arg::Int(ev.arg0)),
                    ],
                    flows_out: Vec::new(),
                    flows_in,
                };
                self.summary.clipped += self.nesting.begin(w, track, ev.ts_ns, ev.span().1, &slice)?;
            }
            _ => {
                let mut slice = self.point_slice(&e, code);
                slice.flows_in = flows_in;
                w.instant(track, ev.ts_ns, &slice)?;
                self.summary.instants += 1;
            }
        }
        Ok(())
    }

    fn call_slice(&mut self, e: &StoredEvent, code: OpCode, flows_in: Vec<u64>) -> Slice {
        let ev = &e.event;
        let op_name = code.name();
        let mut args = vec![("event_id", Arg::Str(e.id.to_string())), ("dur", Arg::Str(fmt_ns(ev.dur_ns)))];
        let mut name = op_name.to_string();
        let role = codes::gpu_role(code);
        if codes::is_kernel_launch(code) {
            let kernels = &self.kernels;
            let (kernel, short) = self.kernel_names.entry((ev.pid, ev.arg0)).or_insert_with(|| {
                let kernel = causeway_analysis::kernel_label(kernels, ev.pid, ev.arg0);
                let short = causeway_analysis::short_kernel_name(&kernel);
                (kernel, short)
            });
            // the slice says the function (a timeline row cannot show PyTorch's kilobyte templates);
            // its args keep the full name
            name = format!("{op_name}: {short}");
            args.push(("kernel", Arg::Str(kernel.clone())));
        }
        if matches!(role, GpuRole::Alloc | GpuRole::SyncCopy) || op_name.contains("emcpy") || op_name.contains("emset")
        {
            args.push(("bytes", Arg::Int(ev.arg0)));
        }
        if matches!(role, GpuRole::Launch | GpuRole::Sync) || op_name.contains("Async") {
            args.push(("stream", Arg::Str(format!("{:#x}", ev.arg2))));
        }
        args.push(("return_code", Arg::Int(i64::from(ev.ret_code))));
        args.extend([("arg0", Arg::Int(ev.arg0)), ("arg1", Arg::Int(ev.arg1)), ("arg2", Arg::Int(ev.arg2))]);
        Slice { name, category: codes::source_name(ev.source), args, flows_out: Vec::new(), flows_in }
    }

    fn off_cpu(
        &mut self,
        w: &mut dyn TraceWriter,
        e: &StoredEvent,
        track: Track,
        flows_in: Vec<u64>,
    ) -> Result<(), ExportError> {
        let ev = &e.event;
        let (start, end) = ev.span();
        let state = ev.sched.as_ref().map_or(PrevState::Unknown, |s| s.prev_state);
        let mut slice = Slice {
            name: format!("off-CPU: {}", state.as_str()),
            category: "off_cpu".into(),
            args: vec![("event_id", Arg::Str(e.id.to_string())), ("dur", Arg::Str(fmt_ns(ev.dur_ns)))],
            flows_out: Vec::new(),
            flows_in,
        };
        if ev.cpu >= 0 {
            slice.args.push(("cpu", Arg::Int(i64::from(ev.cpu))));
        }
        if let Some(s) = &ev.sched {
            if s.next_tid != 0 || s.next_pid != 0 {
                slice.args.push((
                    "took_the_cpu",
                    Arg::Str(format!("{} (pid {}, tid {})", s.next_comm, s.next_pid, s.next_tid)),
                ));
            }
            if s.wake_ts_ns != 0 {
                slice.args.push(("woken_after", Arg::Str(fmt_ns(s.wake_ts_ns - start))));
                slice.args.push(("waker", Arg::Str(format!("pid {} tid {}", s.waker_pid, s.waker_tid))));
            }
            let culprit = state == PrevState::Preempted && s.next_tid != 0 && s.next_tid != ev.tid && ev.cpu >= 0;
            if culprit {
                if self.cpus.insert(ev.cpu) {
                    w.cpu(ev.cpu)?;
                }
                let flow = self.flow();
                let on_cpu = Slice {
                    name: format!("{} ({})", s.next_comm, s.next_pid),
                    category: "culprit".into(),
                    args: vec![
                        ("pid", Arg::Int(i64::from(s.next_pid))),
                        ("tid", Arg::Int(i64::from(s.next_tid))),
                        ("preempted", Arg::Str(format!("{} (tid {})", ev.comm, ev.tid))),
                        ("event_id", Arg::Str(e.id.to_string())),
                    ],
                    flows_out: vec![flow],
                    flows_in: Vec::new(),
                };
                self.summary.clipped += self.nesting.begin(w, Track::Cpu(ev.cpu), start, end, &on_cpu)?;
                self.summary.culprit_slices += 1;
                slice.flows_in.push(flow);
                self.summary.preemption_flows += 1;
            }
        }
        self.summary.clipped += self.nesting.begin(w, track, start, end, &slice)?;
        self.summary.off_cpu += 1;
        Ok(())
    }

    fn point_slice(&self, e: &StoredEvent, code: OpCode) -> Slice {
        let ev = &e.event;
        let mut args = vec![("event_id", Arg::Str(e.id.to_string()))];
        if ev.dur_ns != 0 {
            args.push(("dur", Arg::Str(fmt_ns(ev.dur_ns))));
        }
        args.extend([("arg0", Arg::Int(ev.arg0)), ("arg1", Arg::Int(ev.arg1)), ("arg2", Arg::Int(ev.arg2))]);
        Slice {
            name: code.name().into_owned(),
            category: codes::source_name(ev.source),
            args,
            flows_out: Vec::new(),
            flows_in: Vec::new(),
        }
    }

    fn launch(&mut self, w: &mut dyn TraceWriter, pid: u32, ts: i64) -> Result<(), ExportError> {
        if !self.rates.tracks.contains_key(&pid) {
            let id = self.next_counter;
            self.next_counter += 1;
            let name = format!("kernel launches per second (counted per {} ms)", self.rates.bucket_ns / 1_000_000);
            w.counter_track(id, &CounterOwner::Process(pid), &name, "1/s")?;
            self.rates.tracks.insert(pid, RateTrack { id, bucket: i64::MIN, count: 0 });
        }
        self.summary.counter_values += self.rates.add(w, pid, ts)?;
        Ok(())
    }

    fn finish(mut self, w: &mut dyn TraceWriter) -> Result<ExportSummary, ExportError> {
        self.summary.counter_values += self.rates.flush_all(w)?;
        self.nesting.close_all(w)?;
        w.finish()?;
        Ok(self.summary)
    }
}

/// The launch-rate bucket of a window: its span over [`RATE_BUCKETS`], in whole milliseconds
/// (named in the counter's title), within [`MIN_BUCKET_NS`, `MAX_BUCKET_NS`].
fn rate_bucket_ns(from: i64, to: i64) -> i64 {
    let raw = (to - from) / RATE_BUCKETS;
    let whole_ms = (raw + 999_999) / 1_000_000 * 1_000_000;
    whole_ms.clamp(MIN_BUCKET_NS, MAX_BUCKET_NS)
}

/// Kernel launches per second of each process, counted in fixed buckets of time.
struct LaunchRates {
    bucket_ns: i64,
    tracks: HashMap<u32, RateTrack>,
}

struct RateTrack {
    id: usize,
    bucket: i64,
    count: u64,
}

impl LaunchRates {
    fn new(bucket_ns: i64) -> LaunchRates {
        LaunchRates { bucket_ns, tracks: HashMap::new() }
    }

    /// Counts a launch at `ts`; writes the buckets it closes (a zero after a silent stretch).
    fn add(&mut self, w: &mut dyn TraceWriter, pid: u32, ts: i64) -> std::io::Result<u64> {
        let bucket = ts.div_euclid(self.bucket_ns);
        let per_s = 1e9 / self.bucket_ns as f64;
        let t = self.tracks.get_mut(&pid).expect("declared before its first launch");
        let mut written = 0;
        if bucket != t.bucket {
            if t.bucket != i64::MIN {
                w.counter(t.id, t.bucket * self.bucket_ns, t.count as f64 * per_s)?;
                written += 1;
                if bucket > t.bucket + 1 {
                    w.counter(t.id, (t.bucket + 1) * self.bucket_ns, 0.0)?;
                    written += 1;
                }
            }
            t.bucket = bucket;
            t.count = 0;
        }
        t.count += 1;
        Ok(written)
    }

    /// Writes every open bucket, then a zero where the launches stopped.
    fn flush_all(&mut self, w: &mut dyn TraceWriter) -> std::io::Result<u64> {
        let per_s = 1e9 / self.bucket_ns as f64;
        let mut tracks: Vec<&RateTrack> = self.tracks.values().filter(|t| t.bucket != i64::MIN).collect();
        tracks.sort_by_key(|t| t.id);
        for t in &tracks {
            w.counter(t.id, t.bucket * self.bucket_ns, t.count as f64 * per_s)?;
            w.counter(t.id, (t.bucket + 1) * self.bucket_ns, 0.0)?;
        }
        Ok(2 * tracks.len() as u64)
    }
}
