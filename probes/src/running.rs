//! The running trace behind [`trace`](crate::trace): the state its event loop updates, and one
//! stage per thing the loop waits on, in the order a trace meets them:
//!
//! 1. [`Running::start`]: probes loaded, the targets started or adopted with their libraries
//!    probed, the first attachment rows written; [`Running::spawn_reader`] starts the ring reader.
//! 2. [`Running::on_loaded`]: a process loaded a library (the loader hook's notice): attach what
//!    it mapped, walk its Python frames if it is an interpreter, then let it go on.
//! 3. [`Running::on_batch`]: a batch from the reader: maps, kernel names, process names, stacks,
//!    then the events into the sink (or counted as back-pressure losses).
//! 4. [`Running::on_poll`]: the end conditions (stop flag, deadline, command exit, pids gone),
//!    libraries the loader hook did not report, Python processes not seen yet; with `--all`, the
//!    host's new CUDA processes (`host_watch.rs`).
//! 5. [`Running::on_tick`]: each second, the in-kernel aggregates as summary events and the live
//!    figures.
//! 6. [`Running::finish`]: drain, last names and coverage, every loss counter, the sink finished,
//!    the report.

use crate::cgroups::CgroupResolver;
use crate::decode::now_ns;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use causeway_model::codes::op;
use causeway_model::{LossCounter, LossKind};
use causeway_store::{EventSink, StackRecord};
use tokio::sync::mpsc;

use crate::error::ProbeError;
use crate::host_watch::{self, HostWatch, Look};
use crate::kernels::KernelNamer;
use crate::libraries::LibraryTracker;
use crate::loader::{LoadOptions, Probes};
use crate::process::{alive, resume, stopped, GatedChild};
use crate::python::{merge, Merged, NativeFrame, PyProcs};
use crate::rings::{read_rings, summary_events, Msg, StackMsg};
use crate::session::{TraceOptions, TraceReport};
use crate::stats::{LiveStats, StatsBuilder};
use crate::symbols::Symbolizer;
use crate::wire::{self, cnt};

/// One trace between its start and its report.
pub(crate) struct Running<'o> {
    opts: &'o TraceOptions,
    load: LoadOptions,
    sink: Box<dyn EventSink>,
    report: TraceReport,
    probes: Probes,
    libs: LibraryTracker,
    /// The launched command, if any.
    child: Option<GatedChild>,
    python: PyProcs,
    walk_python: bool,
    /// Raised when the end is decided: the reader returns after its last read.
    reader_stop: Arc<AtomicBool>,
    /// Records the reader could not decode, by source.
    decode_errors: Arc<Mutex<[u64; 16]>>,
    started: Instant,
    deadline: Option<Instant>,
    stats: StatsBuilder,
    symbolizer: Symbolizer,
    namer: KernelNamer,
    /// Processes whose name is written.
    named: HashSet<u32>,
    /// Processes whose cgroup is written (the traced ones, and those that took their CPUs), with
    /// its id (0: unknown).
    cgrouped: HashMap<u32, i64>,
    cgroups: CgroupResolver,
    prev_counters: Vec<u64>,
    prev_pages: HashMap<u32, (u64, u64)>,
    /// Events dropped because the sink was behind, by source.
    backpressure: HashMap<u8, u64>,
    /// The NVML GPUs by UUID (their index), when NVML is sampled: what the device timeline's
    /// devices are matched to.
    pub(crate) nvml_uuids: HashMap<String, i32>,
    /// The end was decided (the poll stops; the loop runs until the reader's channel closes).
    pub(crate) stopping: bool,
    /// `trace --all`: the host's processes, looked at for CUDA.
    watch: Option<HostWatch>,
    /// Label messages refused (the first ten are noted).
    labels_refused: u64,
    /// The serving engines' scraper, told of each traced process when it is first named.
    serving: Option<crate::serving::ServingWatch>,
    /// The device-timeline thread's coexistence rules (`--gpu-timeline`): told of every CUPTI
    /// control call and of each process's first CUDA call.
    pub(crate) cupti_watch: Option<std::sync::mpsc::Sender<crate::gpu_timeline::coexist::Watch>>,
    /// Processes whose first CUDA call the rules were told of.
    cuda_seen: HashSet<u32>,
    /// `--all --gpu-timeline`: the CUDA processes to load the injection library into, each with
    /// when it was queued (one that has not loaded libcuda yet waits, up to
    /// [`crate::gpu_timeline::attach::WAIT_FOR_LIBCUDA`]).
    pub(crate) attach_queue: Vec<(u32, Instant)>,
    /// `--gpu-trigger`: the watches over NVML samples, step labels and serving scrapes, and where
    /// the windows they open are asked for (the device-timeline thread).
    pub(crate) triggers:
        Option<(crate::gpu_timeline::triggers::Triggers, std::sync::mpsc::Sender<crate::gpu_timeline::Command>)>,
    /// When the calls in flight were last written out (`under_way`), and whether that look found any.
    last_look: (Instant, bool),
    /// The GPU of each call (`devices.rs`), over the GPUs NVML lists.
    pub(crate) devices: crate::devices::DeviceMap,
    /// `--footprint`: what the traced processes touched, rows not written yet.
    footprint: Option<crate::footprint::Footprint>,
}

/// The ring reader thread and its two channels: event batches, and the loader hook's notices
/// (apart, so that a process stopped at a dlopen never waits behind batches).
pub(crate) struct Reader {
    pub(crate) thread: std::thread::JoinHandle<()>,
    pub(crate) batches: mpsc::Receiver<Msg>,
    pub(crate) loads: mpsc::UnboundedReceiver<wire::DlRec>,
}

impl<'o> Running<'o> {
    /// Check the targets, load the probes, start or adopt the targets, write the first attachments.
    pub(crate) async fn start(opts: &'o TraceOptions, sink: Box<dyn EventSink>) -> Result<Running<'o>, ProbeError> {
        let report = TraceReport { started_at_ns: now_ns(), ..Default::default() };
        if opts.pids.is_empty() && opts.command.is_empty() && !opts.all {
            return Err(ProbeError::NothingToTrace);
        }
        if let Some(&p) = opts.pids.iter().find(|&&p| !alive(p)) {
            return Err(ProbeError::NoSuchProcess(p));
        }
        let load = load_options(opts);
        let mut probes = Probes::load(&load).map_err(|e| ProbeError::load_failure(&e))?;
        let mut libs = LibraryTracker::with_explicit(&mut probes, &opts.cuda_libs)?;
        // (`--all` holds no process at its loads: the poll attaches what it finds at once)
        libs.defer_polled = opts.stop_on_load && !opts.all;
        let started = Instant::now();
        let mut run = Running {
            opts,
            load,
            sink,
            report,
            probes,
            libs,
            child: None,
            python: PyProcs::default(),
            walk_python: opts.stacks && opts.python_frames,
            reader_stop: Arc::new(AtomicBool::new(false)),
            decode_errors: Arc::new(Mutex::new([0u64; 16])),
            started,
            deadline: opts.duration_ns.map(|d| started + Duration::from_nanos(d.max(0) as u64)),
            stats: StatsBuilder::default(),
            symbolizer: Symbolizer::default(),
            namer: KernelNamer::default(),
            named: HashSet::new(),
            cgrouped: HashMap::new(),
            cgroups: CgroupResolver::new(&opts.container_root),
            prev_counters: vec![0u64; cnt::N as usize],
            prev_pages: HashMap::new(),
            backpressure: HashMap::new(),
            nvml_uuids: HashMap::new(),
            stopping: false,
            watch: opts.all.then(|| HostWatch::new(Duration::from_millis(opts.all_rescan_ms.max(10)))),
            labels_refused: 0,
            serving: None,
            cupti_watch: None,
            triggers: None,
            attach_queue: Vec::new(),
            cuda_seen: HashSet::new(),
            last_look: (started, false),
            devices: crate::devices::DeviceMap::default(),
            footprint: None,
        };
        run.footprint = run.probes.footprint.is_some().then(crate::footprint::Footprint::new);
        run.child = start_targets(opts, &mut run.probes, &mut run.libs, &mut run.report)?;
        if let (Some(f), Some(maps)) = (&mut run.footprint, &mut run.probes.footprint) {
            // what the attached processes hold already (traced first: a close from now on is seen)
            for &p in &opts.pids {
                if let Some(note) = f.adopt(maps, p) {
                    run.probes.notes.push(note);
                }
            }
        }
        if run.walk_python {
            for &p in &opts.pids {
                run.python.check(&mut run.probes, p, true);
            }
        }
        if opts.all {
            run.watch_host();
            run.on_watch(true);
        }
        write_attachments(&mut run.libs, &mut run.sink, &mut run.report).await;
        Ok(run)
    }

    /// `--all` at the start: probe the host's own loader (every process started from now on under
    /// it reports its loads) and the host's CUDA libraries (`check`'s list: ldconfig, the CUDA
    /// paths, pip wheels), so a process started later that calls them is traced from its first
    /// call.
    fn watch_host(&mut self) {
        if let Ok(me) = std::env::current_exe() {
            self.libs.attach_loader_of_program(&mut self.probes, &me);
        }
        let (found, notes) = crate::discovery::discover_with_notes(&crate::discovery::DiscoveryOptions::default());
        self.probes.notes.extend(notes);
        for lib in found {
            if let Err(e) = self.probes.attach_library(&lib) {
                self.probes.notes.push(format!("{}: not probed ({e:#})", lib.path.display()));
            }
        }
    }

    /// `--all`, when a rescan is due (or `now`): adopt the processes that map a CUDA library and
    /// probe the loaders of the others.
    fn on_watch(&mut self, now: bool) {
        let Some(watch) = self.watch.as_mut() else { return };
        if !now && !watch.due() {
            return;
        }
        let traced = self.probes.traced_pids();
        for (pid, look) in watch.rescan(&traced) {
            match look {
                // at the start (`now`) nothing it did since can have been missed
                Look::Cuda => self.adopt(pid, if now { "maps" } else { "rescan" }, now),
                Look::Other { loader: Some(ld) } => {
                    if self.watch.as_mut().is_some_and(|w| w.first_loader(&ld)) {
                        self.libs.attach_loader(&mut self.probes, &ld);
                    }
                }
                Look::Other { loader: None } | Look::Nothing => {}
            }
        }
    }

    /// Trace a running process from now on with the CUDA libraries it maps (`--all`).
    /// `complete`: the trace starts now, so nothing it did since can have been missed.
    fn adopt(&mut self, pid: u32, how: &str, complete: bool) {
        self.libs.scan(&mut self.probes, pid, how, complete);
        if let Err(e) = self.probes.trace_pid(pid) {
            self.probes.notes.push(format!("pid {pid}: uses CUDA but could not be traced ({e:#})"));
            return;
        }
        if self.walk_python {
            self.python.check(&mut self.probes, pid, true);
        }
    }

    /// Start the ring reader on its own thread.
    pub(crate) fn spawn_reader(&mut self) -> Result<Reader, ProbeError> {
        let rings =
            self.probes.take_rings().ok_or_else(|| ProbeError::Load("the ring buffers were taken already".into()))?;
        let (tx, batches) = mpsc::channel::<Msg>(64);
        let (dl_tx, loads) = mpsc::unbounded_channel::<wire::DlRec>();
        let stop = self.reader_stop.clone();
        let errs = self.decode_errors.clone();
        let delay = Duration::from_micros(self.opts.reader_delay_us);
        let thread = std::thread::Builder::new()
            .name("causeway-rings".into())
            .spawn(move || read_rings(rings, tx, dl_tx, stop, errs, delay))?;
        Ok(Reader { thread, batches, loads })
    }

    /// A process loaded a library and may be stopped until its new libraries are attached.
    pub(crate) async fn on_loaded(&mut self, dl: wire::DlRec) {
        if self.watch.is_some() && !self.probes.is_traced(dl.pid) {
            // `--all` hears of every process's loads: adopt it if this one mapped CUDA
            if host_watch::look_at(dl.pid) == Look::Cuda {
                self.adopt(dl.pid, "loaded", false);
                write_attachments(&mut self.libs, &mut self.sink, &mut self.report).await;
            }
            return;
        }
        if self.opts.follow_mapped_libs {
            self.libs.scan(&mut self.probes, dl.pid, "loaded", dl.stopped);
        }
        if self.walk_python {
            // before the process goes on: its next CUDA call may be its first
            self.python.check(&mut self.probes, dl.pid, true);
        }
        if self.libs.uses_cuda(dl.pid) {
            self.tell_cuda_process(dl.pid); // while it is stopped: a short job may be gone by its first batch
            let launched = self.launched_command();
            self.devices.observe(dl.pid, launched);
        }
        if dl.stopped {
            resume(dl.pid);
        }
        write_attachments(&mut self.libs, &mut self.sink, &mut self.report).await;
    }

    /// Tell the coexistence rules (once) of a process that calls CUDA, with the injection library
    /// its environment names.
    fn tell_cuda_process(&mut self, pid: u32) {
        let Some(w) = &self.cupti_watch else { return };
        if !self.cuda_seen.insert(pid) {
            return;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let injection = crate::gpu_timeline::coexist::injection_of(&environ);
        // `--all --gpu-timeline`: a process whose environment names no injection library gets ours
        // by pid (one that names it records already; another tool's keeps its own)
        if self.opts.all && injection.is_none() {
            self.attach_queue.push((pid, Instant::now()));
        }
        let _ = w.send(crate::gpu_timeline::coexist::Watch::CudaProcess { pid, injection });
    }

    /// One batch from the reader.
    /// Write the cgroup (and container or pod) of every process new in this batch: the traced
    /// ones, and those that took a traced thread's CPU or woke it (read while they still run);
    /// and give each event its process's cgroup id (`events.cgroup_id`: the process's cgroup
    /// when it was first seen; the BPF records leave it 0).
    async fn write_cgroups(&mut self, events: &mut [causeway_model::Event]) {
        let mut found = Vec::new();
        for e in events.iter_mut() {
            let culprits = e.sched.as_ref().map_or([0, 0], |s| [s.next_pid, s.waker_pid]);
            for pid in std::iter::once(e.pid).chain(culprits).filter(|&p| p != 0) {
                let id = *self.cgrouped.entry(pid).or_insert_with(|| {
                    let resolved = self.cgroups.resolve(pid);
                    let id = resolved.as_ref().map_or(0, |c| c.cgroup_id);
                    found.extend(resolved);
                    id
                });
                if pid == e.pid && e.cgroup_id == 0 {
                    e.cgroup_id = id;
                }
            }
        }
        if !found.is_empty() {
            let n = found.len();
            let written = self.sink.write_process_cgroups(found).await;
            self.report.check_write("process_cgroups", n, written);
        }
    }

    pub(crate) async fn on_batch(&mut self, mut msg: Msg) {
        if let Some(f) = &mut self.footprint {
            f.on_records(std::mem::take(&mut msg.footprint));
        }
        for (pid, maps) in std::mem::take(&mut msg.maps) {
            self.symbolizer.set_maps(pid, maps);
        }
        for n in &msg.names {
            self.namer.fact(n);
        }
        if !msg.launch_configs.is_empty() {
            let n = msg.launch_configs.len();
            let written = self.sink.write_launch_configs(std::mem::take(&mut msg.launch_configs)).await;
            self.report.check_write("launch_configs", n, written);
        }
        self.stats.add_batch(&msg.events);
        if let Some(w) = &self.cupti_watch {
            use crate::gpu_timeline::coexist::{CuptiCall, Watch};
            // one pass: the CUPTI controls, and the processes whose first CUDA call this is
            let mut first: Vec<u32> = Vec::new();
            for e in &msg.events {
                if let Some(c) = CuptiCall::of_event(e) {
                    let _ = w.send(Watch::Cupti(c));
                } else if causeway_model::codes::is_gpu_call_source(e.source) && !self.cuda_seen.contains(&e.pid) {
                    first.push(e.pid);
                }
            }
            for pid in first {
                self.tell_cuda_process(pid);
            }
        }
        for e in &msg.events {
            if op::PROCESS_EXEC.is(e.source, e.op) {
                self.symbolizer.refresh(e.pid);
                self.named.remove(&e.pid);
                if self.opts.follow_mapped_libs && e.pid == e.tid {
                    self.libs.exec(&mut self.probes, e.pid);
                }
                if e.pid == e.tid {
                    self.python.exec(&mut self.probes, e.pid);
                }
            }
            if !self.named.contains(&e.pid)
                && e.pid != 0
                && (causeway_model::codes::is_gpu_call_source(e.source) || e.sched.is_some())
            {
                self.named.insert(e.pid);
                self.symbolizer.refresh(e.pid);
                let name = std::fs::read_to_string(format!("/proc/{}/comm", e.pid))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_else(|_| e.comm.clone());
                let written = self.sink.write_process_name(e.pid, name, e.ts_ns).await;
                self.report.check_write("process_names", 1, written);
                if let Some(s) = &self.serving {
                    s.consider(e.pid);
                }
                // its place in a distributed job, as its launcher's environment says
                let environ = std::fs::read(format!("/proc/{}/environ", e.pid)).unwrap_or_default();
                if let Some(rank) = causeway_model::ProcessRank::from_environ(e.pid, &environ) {
                    let written = self.sink.write_process_ranks(vec![rank]).await;
                    self.report.check_write("process_ranks", 1, written);
                }
            }
        }
        self.write_cgroups(&mut msg.events).await;
        self.stamp_devices(&mut msg.events).await;
        self.namer.launches(&msg.events);
        write_kernel_names(&mut self.namer, &mut self.symbolizer, false, &mut self.sink, &mut self.report).await;
        write_attachments(&mut self.libs, &mut self.sink, &mut self.report).await;
        if !msg.stacks.is_empty() {
            let recs: Vec<_> = msg.stacks.iter().map(|st| stack_record(&mut self.symbolizer, st)).collect();
            let n = recs.len();
            let written = self.sink.write_stacks(recs).await;
            self.report.check_write("stack_traces", n, written);
        }
        let codes = op_counts(&msg.events);
        let tally = self.opts.metrics.as_ref().map(|_| crate::metrics::BatchTally::of(&msg.events));
        let ok = if self.opts.drop_on_backpressure {
            self.sink.try_write_batch(msg.events)
        } else {
            self.sink.write_batch(msg.events).await.is_ok()
        };
        if !msg.peers.is_empty() {
            // before or with the events that name them; a peer row without events is harmless
            let n = msg.peers.len();
            let written = self.sink.write_net_peers(std::mem::take(&mut msg.peers)).await;
            self.report.check_write("net_peers", n, written);
        }
        if ok && !msg.nccl.is_empty() {
            let n = msg.nccl.len();
            let written = self.sink.write_nccl_calls(std::mem::take(&mut msg.nccl)).await;
            self.report.check_write("nccl_calls", n, written);
        }
        if let (true, Some(m), Some(t)) = (ok, &self.opts.metrics, tally) {
            m.observe(t);
        }
        self.count_batch(codes, ok);
    }

    /// Count a batch of events per op (`op_counts`) as written (`ok`), or as dropped for the
    /// sink's back-pressure.
    fn count_batch(&mut self, codes: HashMap<(u8, u16), u64>, ok: bool) {
        for ((s, o), k) in codes {
            if ok {
                self.report.events_written += k;
                *self.report.events_by_op.entry(causeway_model::codes::op_name(s, o).into_owned()).or_default() += k;
            } else {
                *self.backpressure.entry(s).or_default() += k;
            }
        }
    }

    /// A label from the workload (`labels.rs`): the interval written as an event, or the refusal
    /// noted (the first few; then counted).
    pub(crate) async fn on_label(&mut self, news: crate::labels::LabelNews) {
        match news {
            crate::labels::LabelNews::Label(e) => {
                if let Some((t, to)) = &mut self.triggers {
                    ask_windows(to, t.on_labels(std::slice::from_ref(&e)));
                }
                let mut events = vec![e];
                self.write_cgroups(&mut events).await;
                let codes = op_counts(&events);
                let ok = self.sink.write_batch(events).await.is_ok();
                self.count_batch(codes, ok);
            }
            crate::labels::LabelNews::Refused(why) => {
                self.labels_refused += 1;
                if self.labels_refused <= 10 {
                    self.probes.notes.push(format!("label refused: {why}"));
                }
            }
        }
    }

    /// The serving engines' scraper: told of the processes traced from the start (those named
    /// later are told in `on_batch`).
    pub(crate) fn watch_serving(&mut self, watch: Option<crate::serving::ServingWatch>) {
        if let Some(w) = &watch {
            for pid in self.opts.pids.iter().copied().chain(self.report.command_pid) {
                w.consider(pid);
            }
        }
        self.serving = watch;
    }

    /// Stop the scraper (its last samples stay on the channel).
    pub(crate) fn stop_serving(&mut self) {
        if let Some(w) = self.serving.take() {
            w.stop();
        }
    }

    /// What the serving scraper found or read.
    pub(crate) async fn on_serving(&mut self, msg: crate::serving::ServingMsg) {
        match msg {
            crate::serving::ServingMsg::Samples(s) => {
                if let Some((t, to)) = &mut self.triggers {
                    ask_windows(to, t.on_serving(&s));
                }
                let n = s.len();
                let written = self.sink.write_serving_samples(s).await;
                self.report.check_write("serving_samples", n, written);
            }
            crate::serving::ServingMsg::Found(row) => {
                self.report.attachments.push(row.clone());
                let written = self.sink.write_attachments(vec![row]).await;
                self.report.check_write("attachments", 1, written);
            }
            crate::serving::ServingMsg::Note(n) => self.probes.notes.push(n),
        }
    }

    /// Notes for the report: what was skipped or went wrong without stopping the trace.
    pub(crate) fn note_all(&mut self, notes: impl IntoIterator<Item = String>) {
        self.probes.notes.extend(notes);
    }

    /// Where the label socket listened, for the report.
    pub(crate) fn labels_at(&mut self, path: &std::path::Path) {
        self.report.labels_socket = Some(path.display().to_string());
    }

    /// What the trace has of the network (the tracepoints in place, or why there are none).
    pub(crate) async fn on_network(&mut self) {
        let wanted = self.opts.host_probes && self.opts.network;
        let row = crate::loader::network_row(wanted, &self.probes.host_attached, self.report.started_at_ns);
        if wanted && !row.note.is_empty() {
            self.probes.notes.push(format!("network: {}", row.note));
        }
        self.report.attachments.push(row.clone());
        let written = self.sink.write_attachments(vec![row]).await;
        self.report.check_write("attachments", 1, written);
    }

    /// What the trace has of the GPUs' own state (NVML found, or why not).
    pub(crate) async fn on_nvml(&mut self, row: causeway_model::LibraryAttach) {
        if row.note.starts_with("no NVML") {
            self.probes.notes.push(row.note.clone());
        }
        self.report.attachments.push(row.clone());
        let written = self.sink.write_attachments(vec![row]).await;
        self.report.check_write("attachments", 1, written);
    }

    /// GPU samples or an Xid event from the NVML sampler.
    pub(crate) async fn on_gpu(&mut self, msg: crate::gpu_state::GpuMsg) {
        match msg {
            crate::gpu_state::GpuMsg::Samples(s, p) => {
                if let Some((t, to)) = &mut self.triggers {
                    ask_windows(to, t.on_gpu(&s, &p));
                }
                let n = s.len();
                let written = self.sink.write_gpu_samples(s, p).await;
                self.report.check_write("gpu_samples", n, written);
            }
            crate::gpu_state::GpuMsg::Xid(e) => {
                self.report.events_written += 1;
                *self.report.events_by_op.entry(e.op_name().into_owned()).or_default() += 1;
                if self.sink.write_batch(vec![e]).await.is_err() {
                    self.report.events_written -= 1;
                    *self.backpressure.entry(op::GPU_XID.source).or_default() += 1;
                }
            }
        }
    }

    /// What the injection library of a traced process sent: the device's own timeline.
    pub(crate) async fn on_gpu_timeline(&mut self, mut part: causeway_store::GpuTimelinePart) {
        // a device CUPTI described is the NVML GPU of the same UUID
        for d in &mut part.devices {
            if let Some(&i) = self.nvml_uuids.get(&d.uuid) {
                d.nvml_index = i;
            }
        }
        self.devices.learn(&part.devices);
        let n = part.ops.len() + part.clock_syncs.len() + part.devices.len() + part.notes.len();
        let said: Vec<String> = part
            .notes
            .iter()
            .filter(|n| matches!(n.kind.as_str(), "off" | "stepped_aside" | "dropped"))
            .map(|n| format!("device timeline of pid {}: {}", n.pid, n.detail))
            .collect();
        self.note_all(said);
        self.report.gpu_ops += part.ops.len() as u64;
        let written = self.sink.write_gpu_timeline(part).await;
        self.report.check_write("gpu_ops", n, written);
    }

    /// The poll: decide the end, attach what the loader hook did not report, find new Python
    /// processes.
    pub(crate) async fn on_poll(&mut self) {
        let mut end = self.opts.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d);
        if let Some(c) = self.child.as_mut() {
            if let Some(code) = c.try_wait() {
                self.report.command_exit = Some(code);
                end = true;
            }
        } else if !self.opts.all && !self.opts.pids.is_empty() && !self.opts.pids.iter().any(|&p| alive(p)) {
            end = true;
        }
        self.on_watch(false);
        if self.walk_python {
            for pid in self.probes.traced_pids() {
                if self.python.unseen(pid) && !stopped(pid) {
                    self.python.check(&mut self.probes, pid, false);
                }
            }
        }
        if self.opts.follow_mapped_libs {
            for pid in self.probes.traced_pids() {
                // stopped by the loader hook: its notice is on the way and attaches what
                // the process loaded as complete (nothing ran since); a poll now would
                // attach the same libraries first and mark them incomplete
                if self.opts.stop_on_load && stopped(pid) {
                    continue;
                }
                if self.libs.needs_poll(pid) {
                    self.libs.scan(&mut self.probes, pid, "poll", false);
                }
            }
            write_attachments(&mut self.libs, &mut self.sink, &mut self.report).await;
        }
        if end {
            self.stopping = true;
            self.reader_stop.store(true, Ordering::Relaxed);
        }
    }

    /// Each second: the in-kernel aggregates as summary events, and the live figures.
    pub(crate) async fn on_tick(&mut self) -> LiveStats {
        self.write_summaries().await;
        self.look_under_way().await;
        self.look_footprint(false).await;
        let lost_now: u64 = self.probes.counters()[..32].iter().sum::<u64>() + self.backpressure.values().sum::<u64>();
        if let Some(m) = &self.opts.metrics {
            m.tick(&self.loss_counters(), self.probes.traced_pids().len());
        }
        LiveStats {
            elapsed_ns: self.started.elapsed().as_nanos() as i64,
            events: self.report.events_written,
            lost: lost_now,
            traced_pids: self.probes.traced_pids(),
            ops: self.stats.rows(),
        }
    }

    /// `--footprint`: a look at the kernel's footprint counters, and the rows made since the last
    /// one written (at the end, `last`: every descriptor and request still open too, and what the
    /// kernel could not keep said).
    async fn look_footprint(&mut self, last: bool) {
        let traced = self.probes.traced_pids();
        let (Some(f), Some(maps)) = (&mut self.footprint, &mut self.probes.footprint) else { return };
        f.look(maps, now_ns(), &traced, last);
        let part = f.take();
        if !part.is_empty() {
            let n = part.syscalls.len() + part.cpu.len() + part.fds.len() + part.requests.len() + part.execs.len();
            let written = self.sink.write_footprint(part).await;
            self.report.check_write("footprint", n, written);
        }
        if last {
            let c = self.probes.counters();
            let said = [
                (
                    cnt::FP_SYS_FULL,
                    "syscall count(s) not kept (the kernel's table of (process, request, syscall) was full)",
                ),
                (cnt::FP_FD_FULL, "descriptor byte count(s) not kept (the kernel's table of descriptors was full)"),
                (cnt::FP_LOST, "footprint record(s) (opens, connects, execs, requests) lost: the ring was full"),
            ];
            for (i, what) in said {
                let n = c[i as usize];
                if n > 0 {
                    self.probes.notes.push(format!("footprint: {n} {what}"));
                }
            }
        }
    }

    /// The in-kernel aggregates since the last call, as summary events.
    async fn write_summaries(&mut self) {
        let summaries = summary_events(&self.probes, &mut self.prev_counters, &mut self.prev_pages);
        if !summaries.is_empty() {
            let n = summaries.len();
            let written = self.sink.write_batch(summaries).await;
            if self.report.check_write("events (summaries)", n, written) {
                self.report.events_written += n as u64;
            }
        }
    }

    /// After the reader returned: release what waits, write what is left and every loss counter,
    /// detach, finish the sink; the report.
    pub(crate) async fn finish(
        mut self,
        loads: &mut mpsc::UnboundedReceiver<wire::DlRec>,
    ) -> Result<TraceReport, ProbeError> {
        // a process the loader hook stopped after the reader's last read waits for nobody now
        while let Ok(dl) = loads.try_recv() {
            if dl.stopped {
                resume(dl.pid);
            }
        }
        if self.load.stop_on_load {
            release_stopped(&mut self.probes);
        }
        self.write_under_way().await;
        self.end_command();

        // final aggregates, names, coverage and every loss counter
        self.write_summaries().await;
        write_kernel_names(&mut self.namer, &mut self.symbolizer, true, &mut self.sink, &mut self.report).await;
        let traced = self.probes.traced_pids();
        let last_rows = self.libs.finish();
        if !last_rows.is_empty() {
            self.report.attachments.extend(last_rows.iter().cloned());
            let n = last_rows.len();
            let written = self.sink.write_attachments(last_rows).await;
            self.report.check_write("attachments", n, written);
        }
        let counters = self.probes.counters();
        if self.namer.unnamed() > 0 {
            self.probes.notes.push(format!(
                "{} launched kernel handle(s) could not be named (no registration, module or symbol seen for them)",
                self.namer.unnamed()
            ));
        }
        let names_lost = counters[cnt::NAME_LOST as usize];
        if names_lost > 0 {
            self.probes
                .notes
                .push(format!("{names_lost} kernel-name record(s) lost (ring full): some launches may be unnamed"));
        }
        if self.namer.truncated > 0 {
            self.probes.notes.push(format!(
                "{} kernel name(s) longer than {} bytes were cut short",
                self.namer.truncated,
                wire::NAME_MAX - 1
            ));
        }
        python_notes(&counters, &self.python, &mut self.probes.notes);
        let again = counters[cnt::NET_AGAIN as usize];
        if again > 0 {
            self.probes.notes.push(format!(
                "{again} socket call(s) of traced threads returned EAGAIN (non-blocking, nothing ready): counted, not recorded"
            ));
        }
        for loss in self.loss_counters() {
            // the sink counts its own back-pressure drops; the rest we add
            if loss.kind != LossKind::SinkBackpressure || !self.opts.drop_on_backpressure {
                self.sink.add_loss(loss.source, loss.kind, loss.count);
            }
            self.report.losses.push(loss);
        }
        self.report.traced_pids = traced;
        self.report.libraries = self.probes.attached.values().cloned().collect();
        self.report.host_probes = self.probes.host_attached.clone();
        self.report.notes = std::mem::take(&mut self.probes.notes);
        self.report.notes.append(&mut self.libs.notes);
        self.report.notes.extend(self.report.unwritten_notes());
        self.look_footprint(true).await;
        drop(self.probes); // detach every uprobe and tracepoint before the sink's final work
        self.report.stopped_at_ns = now_ns();
        self.sink.flush().await?;
        let stored = self.sink.finish(self.report.stopped_at_ns).await?;
        // what the sink could not store (a write that failed, a full disk) is lost too, and only
        // what it committed was written
        self.report.events_written = self.report.events_written.min(stored.events_written);
        self.report.losses.extend(stored.losses.into_iter().filter(|l| l.kind == LossKind::Write));
        self.report.notes.extend(stored.notes);
        Ok(self.report)
    }
}

impl Running<'_> {
    /// Whether every traced process began under the trace (a launched command and its children:
    /// their threads start on device 0).
    fn launched_command(&self) -> bool {
        !self.opts.command.is_empty() && self.opts.pids.is_empty() && !self.opts.all
    }

    /// Each GPU call's `gpu_id` (`devices.rs`), and the devices processes used for the first time
    /// written to `gpu_devices`.
    async fn stamp_devices(&mut self, events: &mut [causeway_model::Event]) {
        let launched = self.launched_command();
        let devices = self.devices.stamp(events, |_| launched);
        if !devices.is_empty() {
            let n = devices.len();
            let part = causeway_store::GpuTimelinePart { devices, ..Default::default() };
            let written = self.sink.write_gpu_timeline(part).await;
            self.report.check_write("gpu_devices", n, written);
        }
    }

    /// What the traced processes have under way now (`in_flight.rs`): calls in flight and open
    /// off-CPU intervals, as events ending now.
    fn under_way_now(&self) -> crate::in_flight::Snapshot {
        crate::in_flight::snapshot(
            &self.probes.traced_pids(),
            self.probes.map_raw_fd("cw_inflight"),
            self.probes.map_raw_fd("cw_offcpu"),
        )
    }

    /// Every `--in-flight-every`: the calls in flight for a second or more and their threads'
    /// state replace the session's `under_way` rows (nothing is written while none is found twice).
    async fn look_under_way(&mut self) {
        let Some(every) = self.opts.in_flight_every else { return };
        if self.last_look.0.elapsed() < every {
            return;
        }
        let mut events = crate::in_flight::worth_keeping(self.under_way_now().events);
        let found = !events.is_empty();
        let found_before = std::mem::replace(&mut self.last_look, (Instant::now(), found)).1;
        if found || found_before {
            self.write_cgroups(&mut events).await;
            self.stamp_devices(&mut events).await;
            if let Err(e) = self.sink.write_under_way(now_ns(), events).await {
                tracing::warn!("writing the calls in flight failed: {e}");
            }
        }
    }

    /// What the end of the trace found under way in the traced processes (`in_flight.rs`): the
    /// calls that had not returned and the threads still off the CPU, written as events ending
    /// now, and a note per call in flight.
    async fn write_under_way(&mut self) {
        let snap = self.under_way_now();
        if snap.unreadable > 0 {
            self.probes.notes.push(format!(
                "{} thread(s) of the traced processes could not be read for calls in flight (this kernel has no PIDFD_THREAD, Linux 6.9+): a call that never returned there is not in the trace",
                snap.unreadable
            ));
        }
        let mut events = snap.events;
        if events.is_empty() {
            return;
        }
        let in_flight =
            |e: &&causeway_model::Event| e.ret_code == causeway_model::codes::RET_IN_FLIGHT && e.sched.is_none();
        let short =
            events.iter().filter(in_flight).filter(|e| e.dur_ns < causeway_model::codes::LONG_IN_FLIGHT_NS).count();
        if short > 0 {
            self.probes.notes.push(format!(
                "{short} call(s) under a second old were in flight when the trace ended (a step cut short): written with ret_code -1, their duration up to the end"
            ));
        }
        for e in events.iter().filter(in_flight).filter(|e| e.dur_ns >= causeway_model::codes::LONG_IN_FLIGHT_NS) {
            self.probes.notes.push(format!(
                "tid {} ({}) of pid {} was still in {} when the trace ended, for {} (its event runs to the end: ret_code -1)",
                e.tid,
                e.comm,
                e.pid,
                causeway_model::codes::op_name(e.source, e.op),
                causeway_model::time::fmt_ns(e.dur_ns)
            ));
        }
        self.write_cgroups(&mut events).await;
        self.stamp_devices(&mut events).await;
        let codes = op_counts(&events);
        let ok = self.sink.write_batch(events).await.is_ok();
        self.count_batch(codes, ok);
    }

    /// A launched command still running when the trace stops: ended (`--kill-on-stop`: SIGTERM,
    /// SIGKILL after 5 s) or left running; said either way, with its pid.
    fn end_command(&mut self) {
        let (Some(c), None) = (self.child.as_mut(), self.report.command_exit) else { return };
        if let Some(code) = c.try_wait() {
            self.report.command_exit = Some(code);
            return;
        }
        let pid = c.pid;
        if !self.opts.kill_on_stop {
            self.probes.notes.push(format!(
                "the command (pid {pid}) was still running when the trace stopped: it was left running, untraced (stop it with `kill {pid}`, or trace with --kill-on-stop)"
            ));
            return;
        }
        let started = Instant::now();
        let mut signal = libc::SIGTERM;
        // SAFETY: kill(2) of our own child, which try_wait has not reaped.
        unsafe { libc::kill(pid as i32, signal) };
        let code = loop {
            if let Some(code) = c.try_wait() {
                break Some(code);
            }
            let waited = started.elapsed();
            if waited >= Duration::from_secs(5) && signal == libc::SIGTERM {
                signal = libc::SIGKILL;
                // SAFETY: as above.
                unsafe { libc::kill(pid as i32, signal) };
            }
            if waited >= Duration::from_secs(10) {
                break None; // stuck in the kernel (uninterruptible): the trace does not wait for it
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let how = if signal == libc::SIGKILL { "SIGTERM, then SIGKILL after 5 s" } else { "SIGTERM" };
        self.report.command_exit = code;
        self.probes.notes.push(match code {
            Some(code) => format!(
                "the command (pid {pid}) was still running when the trace stopped: ended with {how} (--kill-on-stop), exit status {code}"
            ),
            None => format!(
                "the command (pid {pid}) was still running when the trace stopped and did not exit within 10 s of {how} (--kill-on-stop): it is stuck in the kernel (uninterruptible sleep, often the GPU driver)"
            ),
        });
    }

    /// Every loss so far, per source and kind (cumulative): ring reservations and stash failures
    /// in BPF, records the reader could not decode, batches the sink could not take.
    fn loss_counters(&self) -> Vec<LossCounter> {
        let counters = self.probes.counters();
        let decode = *self.decode_errors.lock().unwrap_or_else(|p| p.into_inner());
        let mut v = Vec::new();
        for src in 0..16u8 {
            let ring = counters[(cnt::LOST_BASE + src as u32) as usize]
                + counters[(cnt::STASH_FAIL_BASE + src as u32) as usize];
            let rows = [
                (LossKind::RingReserve, ring),
                (LossKind::Decode, decode[src as usize]),
                (LossKind::SinkBackpressure, self.backpressure.get(&src).copied().unwrap_or(0)),
            ];
            v.extend(rows.into_iter().filter(|(_, n)| *n > 0).map(|(kind, count)| LossCounter {
                source: src,
                kind,
                count,
            }));
        }
        v
    }
}

/// At the end of a trace that holds its command at each dlopen: a notice still in the ring when
/// the reader stopped is never read, so its process would stay stopped for good (and a signal sent
/// to it meanwhile, even SIGTERM, waits with it). No process is stopped from here on, and every
/// stopped one of the command's tree (the only processes this mode ever stops) goes on.
/// The windows the triggers that fired ask for, sent to the device-timeline thread.
fn ask_windows(
    to: &std::sync::mpsc::Sender<crate::gpu_timeline::Command>,
    fired: Vec<crate::gpu_timeline::triggers::Fired>,
) {
    for f in fired {
        let _ = to.send(crate::gpu_timeline::Command::Trigger(f));
    }
}

fn release_stopped(probes: &mut Probes) {
    let pids = probes.traced_pids();
    for &pid in &pids {
        probes.quiet_loads(pid);
    }
    for pid in pids {
        if stopped(pid) {
            resume(pid);
        }
    }
}

fn load_options(opts: &TraceOptions) -> LoadOptions {
    LoadOptions {
        ring_cuda_bytes: opts.ring_cuda_bytes,
        ring_sched_bytes: opts.ring_sched_bytes,
        ring_host_bytes: opts.ring_host_bytes,
        stacks: opts.stacks,
        host_probes: opts.host_probes,
        network: opts.network,
        footprint: opts.footprint,
        perf_uprobes: opts.perf_uprobes,
        stop_on_load: opts.stop_on_load && opts.follow_mapped_libs && opts.pids.is_empty() && !opts.command.is_empty(),
        adopt_callers: opts.all,
    }
}

/// Put the targets in the traced map with their libraries probed: the pids as they are now, the
/// command gated until its program's runtime (if linked in) and its dynamic loader are probed.
fn start_targets(
    opts: &TraceOptions,
    probes: &mut Probes,
    libs: &mut LibraryTracker,
    report: &mut TraceReport,
) -> Result<Option<GatedChild>, ProbeError> {
    for &p in &opts.pids {
        if opts.follow_mapped_libs {
            libs.scan(probes, p, "maps", true);
        }
        probes.trace_pid(p).map_err(|e| ProbeError::Follow { pid: p, detail: format!("{e:#}") })?;
    }
    if opts.command.is_empty() {
        return Ok(None);
    }
    let mut c =
        GatedChild::spawn(&opts.command, &opts.command_env, opts.command_stdout.as_deref(), opts.command_stdin_null)
            .map_err(|e| ProbeError::Command { command: opts.command.join(" "), detail: format!("{e:#}") })?;
    if opts.follow_mapped_libs {
        if let Some(prog) = opts.command.first().and_then(|p| which(p)) {
            libs.attach_loader_of_program(probes, &prog);
            libs.attach_program(probes, c.pid, &prog);
        }
    }
    probes.trace_pid(c.pid).map_err(|e| ProbeError::Follow { pid: c.pid, detail: format!("{e:#}") })?;
    c.release();
    report.command_pid = Some(c.pid);
    Ok(Some(c))
}

/// Write the attachment rows the tracker has collected (and keep them for the report).
async fn write_attachments(libs: &mut LibraryTracker, sink: &mut Box<dyn EventSink>, report: &mut TraceReport) {
    let rows = libs.take_rows();
    if !rows.is_empty() {
        report.attachments.extend(rows.iter().cloned());
        let n = rows.len();
        let written = sink.write_attachments(rows).await;
        report.check_write("attachments", n, written);
    }
}

/// Write the kernel names that can be given now (all that are left, at the last chance).
async fn write_kernel_names(
    namer: &mut KernelNamer,
    symbolizer: &mut Symbolizer,
    last_chance: bool,
    sink: &mut Box<dyn EventSink>,
    report: &mut TraceReport,
) {
    let names = namer.resolve(symbolizer, last_chance);
    if !names.is_empty() {
        for k in &names {
            report.kernel_symbols.insert(format!("{:#x}", k.handle), k.name.clone());
        }
        let n = names.len();
        let written = sink.write_kernel_names(names).await;
        report.check_write("kernel_names", n, written);
    }
}

fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Some(PathBuf::from(prog));
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join(prog)).find(|p| p.is_file())
}

/// A stack as stored: native frames symbolized, Python frames merged in (see [`merge`]), and a
/// note where the Python stack is incomplete.
fn stack_record(sym: &mut Symbolizer, st: &StackMsg) -> StackRecord {
    let native: Vec<NativeFrame<serde_json::Value>> = st
        .ips
        .iter()
        .map(|&ip| {
            let r = sym.resolve(st.pid, ip);
            let value = match &r {
                Some(r) => match &r.symbol {
                    Some(s) => serde_json::json!({"s": format!("{s}+{:#x}", r.offset), "f": r.file}),
                    None => serde_json::json!({"i": format!("{ip:#x}"), "f": r.file}),
                },
                None => serde_json::json!({"i": format!("{ip:#x}")}),
            };
            let (symbol, file) = r.map(|r| (r.symbol, r.file)).unwrap_or_default();
            NativeFrame { symbol, file, value }
        })
        .collect();
    let mut frames: Vec<serde_json::Value> = match &st.python {
        None => native.into_iter().map(|n| n.value).collect(),
        Some(py) => merge(native, &py.frames)
            .into_iter()
            .map(|m| match m {
                Merged::Native(v) => v,
                Merged::Python(f) => serde_json::json!({"pf": f.file, "pfn": f.function, "pl": f.line.unwrap_or(0)}),
            })
            .collect(),
    };
    if let Some(py) = &st.python {
        if py.truncated {
            frames.push(
                serde_json::json!({"note": format!("Python stack cut: deeper than {} frames", crate::python::DEPTH)}),
            );
        }
        if py.fault {
            frames.push(
                serde_json::json!({"note": "Python stack cut: a frame could not be read (it changed under the walk)"}),
            );
        }
        if py.unnamed > 0 {
            frames.push(
                serde_json::json!({"note": format!("{} Python frame(s) without a code object record", py.unnamed)}),
            );
        }
    }
    let ips: Vec<String> = st.ips.iter().map(|ip| format!("{ip:#x}")).collect();
    StackRecord {
        hash: st.hash,
        ips: serde_json::to_string(&ips).unwrap_or_default(),
        frames: serde_json::Value::Array(frames).to_string(),
    }
}

/// What the Python walk did, for the report: which processes had it, and every call whose Python
/// stack is missing or incomplete, by reason.
fn python_notes(counters: &[u64], python: &PyProcs, notes: &mut Vec<String>) {
    for (pid, what) in python.walked() {
        notes.push(format!("Python frames of pid {pid}: {what}"));
    }
    notes.extend(python.notes.iter().cloned());
    let reasons = [
        (cnt::PY_NO_THREAD, "no Python thread state for the calling thread (a thread Python did not start)"),
        (cnt::PY_TRUNCATED, "Python stack cut: deeper than the frames kept"),
        (cnt::PY_FAULT, "Python stack cut: a frame could not be read"),
        (cnt::PY_TABLE_FULL, "no Python stack: the stack table is full"),
        (cnt::PY_COLLISION, "no Python stack: two stacks with one key"),
        (cnt::PY_CODE_LOST, "code object records lost (ring full): their frames are unnamed"),
    ];
    for (idx, why) in reasons {
        let n = counters[idx as usize];
        if n > 0 {
            notes.push(format!("{n} call(s): {why}"));
        }
    }
}

/// How many of `events` each (source, op) has.
fn op_counts(events: &[causeway_model::Event]) -> HashMap<(u8, u16), u64> {
    let mut codes: HashMap<(u8, u16), u64> = HashMap::new();
    for e in events {
        *codes.entry((e.source, e.op)).or_default() += 1;
    }
    codes
}
