//! One trace: what to trace ([`TraceOptions`]), what it did ([`TraceReport`]), and [`trace`], the
//! loop that drives it: load and attach the probes, start (or adopt) the target processes, read
//! the rings on a dedicated thread, decode into events, write them through an [`EventSink`] in
//! batches, emit the in-kernel aggregates as summary events each second, attach libraries loaded
//! late, and account for every lost event. Ends when the command exits, the pids are gone, the
//! duration passes or the stop flag is raised; then drains everything, stores the loss counters
//! and finishes the sink. Each of those stages is a method of [`Running`] (`running.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use causeway_model::LossCounter;
use causeway_store::EventSink;

use crate::error::ProbeError;
use crate::gpu_timeline::GpuTimelineSocket;
use crate::labels::LabelSocket;
use crate::loader::{AttachedLib, LoadOptions};
use crate::running::Running;
use crate::stats::LiveStats;

/// What to trace and how.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// Running processes to trace (and the children they fork).
    pub pids: Vec<u32>,
    /// A command to launch and trace (with its children); the trace ends when it exits.
    pub command: Vec<String>,
    /// Every process of the host that uses CUDA, now and started later (`trace --all`): the trace
    /// ends only at the stop flag or the duration.
    pub all: bool,
    /// With `all`: how often `/proc` is listed for processes the probes have not caught.
    pub all_rescan_ms: u64,
    /// Where the command's stdout goes (inherited when None).
    pub command_stdout: Option<PathBuf>,
    /// Give the command /dev/null as stdin instead of ours (an MCP server over stdio).
    pub command_stdin_null: bool,
    /// Variables added to the command's environment (the label socket's path is added by `trace`).
    pub command_env: Vec<(String, String)>,
    /// The socket the workload sends its step, epoch and task labels to.
    pub labels: crate::labels::LabelOptions,
    /// `--cuda-lib`: library files (or directories of them) to probe whether or not a traced
    /// process maps them; never dropped (a file that is not a CUDA library is an error).
    pub cuda_libs: Vec<PathBuf>,
    /// Attach the CUDA libraries the traced processes map (at the start, at each dlopen, on the
    /// poll). Off only where exactly the given libraries must be probed (the overhead bench
    /// compares one uprobe pair with bpftrace's).
    pub follow_mapped_libs: bool,
    /// Hold a launched command at each dlopen until its new CUDA libraries are attached (SIGSTOP /
    /// SIGCONT), so its first call through them is recorded. Never applied to `pids` (a stop is
    /// visible to the process's parent, e.g. an interactive shell).
    pub stop_on_load: bool,
    /// End a launched command still running when the trace stops (SIGTERM, then SIGKILL after
    /// 5 s), after its calls in flight are written; else it is left running, and the trace says so.
    pub kill_on_stop: bool,
    /// How often the calls in flight for a second or more are written out (`under_way`), so a
    /// hang is in the trace while it runs and if the tracer is killed; `None`: only at the end.
    pub in_flight_every: Option<std::time::Duration>,
    pub duration_ns: Option<i64>,
    /// Record a user stack with every CUDA call.
    pub stacks: bool,
    /// With `stacks`, walk the CPython frames of Python processes too (the line being executed in
    /// each Python function). Off: native frames only, the interpreter's eval loop included.
    pub python_frames: bool,
    /// Scheduler, process, block and memory tracepoints.
    pub host_probes: bool,
    /// Socket calls of the traced threads, TCP retransmits and state changes (with `host_probes`).
    pub network: bool,
    /// What the traced processes touched (with `host_probes`; `trace --footprint`): every syscall
    /// counted in the kernel per process and kind, the files and sockets they opened with their
    /// bytes, the programs their children ran, their libraries, their CPU time, their requests.
    pub footprint: bool,
    pub ring_cuda_bytes: u32,
    pub ring_sched_bytes: u32,
    pub ring_host_bytes: u32,
    /// Drop a batch (counted as sink back-pressure) rather than wait when the sink is behind.
    pub drop_on_backpressure: bool,
    /// Raise to end the trace (Ctrl-C, an MCP cancel).
    pub stop: Arc<AtomicBool>,
    /// How often the targets' maps are checked for libraries the loader hook did not report.
    pub lib_poll_ms: u64,
    /// Pause the ring reader this long between reads: a deliberately slow consumer, for overload
    /// tests that check every lost event is counted. 0 in normal use.
    pub reader_delay_us: u64,
    /// One perf-event uprobe per symbol instead of uprobe_multi links (the fallback path).
    pub perf_uprobes: bool,
    /// The GPUs' own state, sampled through NVML while tracing.
    pub nvml: crate::gpu_state::NvmlOptions,
    /// The device's own timeline of the launched command (`--gpu-timeline`), through the injection
    /// library.
    pub gpu_timeline: crate::gpu_timeline::GpuTimelineOptions,
    /// Serving engines among the traced processes, their metrics scraped while tracing.
    pub serving: crate::serving::ServingOptions,
    /// Live Prometheus metrics, updated at each batch and each second (`trace --metrics`).
    pub metrics: Option<Arc<crate::metrics::TraceMetrics>>,
    /// The root under which the container runtimes' files are read to name containers and pods
    /// (`/`; the host's root where the tracer runs in a container with it mounted elsewhere).
    pub container_root: PathBuf,
}

impl Default for TraceOptions {
    fn default() -> Self {
        let l = LoadOptions::default();
        TraceOptions {
            pids: Vec::new(),
            command: Vec::new(),
            all: false,
            all_rescan_ms: 1000,
            command_stdout: None,
            command_stdin_null: false,
            command_env: Vec::new(),
            labels: crate::labels::LabelOptions::default(),
            cuda_libs: Vec::new(),
            follow_mapped_libs: true,
            stop_on_load: true,
            kill_on_stop: false,
            in_flight_every: Some(crate::in_flight::LOOK_EVERY),
            duration_ns: None,
            stacks: false,
            python_frames: true,
            host_probes: true,
            network: l.network,
            footprint: l.footprint,
            ring_cuda_bytes: l.ring_cuda_bytes,
            ring_sched_bytes: l.ring_sched_bytes,
            ring_host_bytes: l.ring_host_bytes,
            drop_on_backpressure: false,
            stop: Arc::new(AtomicBool::new(false)),
            lib_poll_ms: 250,
            container_root: PathBuf::from("/"),
            reader_delay_us: 0,
            perf_uprobes: false,
            nvml: crate::gpu_state::NvmlOptions::default(),
            gpu_timeline: crate::gpu_timeline::GpuTimelineOptions::default(),
            serving: crate::serving::ServingOptions::default(),
            metrics: None,
        }
    }
}

/// What a finished trace did.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct TraceReport {
    pub started_at_ns: i64,
    pub stopped_at_ns: i64,
    /// Events the sink accepted.
    pub events_written: u64,
    /// Events the sink accepted, by op name.
    pub events_by_op: BTreeMap<String, u64>,
    /// Every loss, where it happened (also stored in the trace).
    pub losses: Vec<LossCounter>,
    pub libraries: Vec<AttachedLib>,
    /// Host tracepoints attached.
    pub host_probes: Vec<String>,
    /// What was skipped or went wrong without stopping the trace.
    pub notes: Vec<String>,
    /// Kernel handles (a launch's arg0, hex) and their demangled names (also stored in
    /// `kernel_names`).
    pub kernel_symbols: BTreeMap<String, String>,
    /// What the trace covers, per process and library (also stored in `attachments`).
    pub attachments: Vec<causeway_model::LibraryAttach>,
    pub traced_pids: Vec<u32>,
    pub command_pid: Option<u32>,
    pub command_exit: Option<i32>,
    /// Where the workload could send labels (`None`: no socket).
    pub labels_socket: Option<String>,
    /// Device ops (kernels, copies, memsets, synchronizations) the injection library delivered
    /// (`--gpu-timeline`).
    pub gpu_ops: u64,
    /// Rows the sink refused outside the event batches, per table (`stack_traces`,
    /// `process_names`, `launch_configs`, `kernel_names`, `attachments`, and summary `events`):
    /// the trace goes on without them, and each table with a failure also gets a note.
    pub unwritten: BTreeMap<String, UnwrittenRows>,
}

/// How many rows of one table the sink refused, and the first error it gave.
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct UnwrittenRows {
    pub rows: u64,
    pub first_error: String,
}

impl TraceReport {
    pub fn lost(&self) -> u64 {
        self.losses.iter().map(|l| l.count).sum()
    }

    /// Count a side write that failed (nothing is silently dropped; the trace goes on).
    pub(crate) fn check_write(
        &mut self,
        table: &str,
        rows: usize,
        result: Result<(), causeway_store::StoreError>,
    ) -> bool {
        let Err(e) = result else { return true };
        let u = self.unwritten.entry(table.to_string()).or_default();
        if u.rows == 0 {
            u.first_error = e.to_string();
        }
        u.rows += rows as u64;
        false
    }

    /// One note per table with refused rows.
    pub(crate) fn unwritten_notes(&self) -> Vec<String> {
        self.unwritten
            .iter()
            .map(|(table, u)| {
                format!("{} row(s) of `{table}` could not be written (first error: {})", u.rows, u.first_error)
            })
            .collect()
    }
}

/// Run one trace to its end. `progress` is called about once a second. The stages are
/// [`Running`]'s methods; this is the loop that waits on the reader, the loader hook's notices,
/// the poll and the clock.
pub async fn trace(
    mut opts: TraceOptions,
    sink: Box<dyn EventSink>,
    mut progress: impl FnMut(&LiveStats),
) -> Result<TraceReport, ProbeError> {
    let (mut labels, label_note) = open_labels(&opts.labels)?;
    if let (Some(l), false) = (&labels, opts.command.is_empty()) {
        opts.command_env.push((crate::labels::LABELS_ENV.to_string(), l.path.display().to_string()));
    }
    let (mut device, device_note) = open_gpu_timeline(&mut opts)?;
    let mut run = Running::start(&opts, sink).await?;
    run.note_all(label_note);
    run.note_all(device_note);
    run.cupti_watch = device.as_ref().map(|d| d.watch.clone());
    let mut reader = run.spawn_reader()?;
    if let (Some(d), true) = (&device, opts.command.is_empty()) {
        attach_running(&mut run, d, &opts).await;
        let t = &opts.gpu_timeline.triggers;
        if !t.kinds.is_empty() {
            run.triggers = Some((crate::gpu_timeline::triggers::Triggers::new(t.clone()), d.commands.clone()));
        }
    }
    let (gpu_tx, mut gpu_rx) = tokio::sync::mpsc::unbounded_channel();
    let kmsg_tx = gpu_tx.clone();
    let (sampler, nvml_row) = crate::gpu_state::start(&opts.nvml, gpu_tx);
    run.on_nvml(nvml_row).await;
    // the driver's own Xid lines, on a host whose NVIDIA driver NVML found
    let mut kmsg = None;
    if let Some(s) = &sampler {
        run.nvml_uuids = s.uuids.iter().cloned().collect();
        run.devices = crate::devices::DeviceMap::new(s.gpus.clone());
        match crate::kmsg::start(s.addresses.clone(), kmsg_tx) {
            Ok(k) => kmsg = Some(k),
            Err(e) => run.note_all([format!(
                "the kernel log cannot be read ({e}): the NVIDIA driver's Xid lines, which name the offending process, are not recorded (run as root, or kernel.dmesg_restrict=0)"
            )]),
        }
    }
    run.on_network().await;
    let (serving_tx, mut serving_rx) = tokio::sync::mpsc::unbounded_channel();
    run.watch_serving(crate::serving::ServingWatch::start(&opts.serving, serving_tx));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut poll = tokio::time::interval(Duration::from_millis(opts.lib_poll_ms.max(10)));
    // `--all --gpu-timeline`: the attaches of adopted processes, each on a blocking thread
    let (attach_tx, mut attach_rx) = tokio::sync::mpsc::unbounded_channel();
    loop {
        // no `biased;`: under a constant stream of batches the poll (deadline, exit) must still run
        tokio::select! {
            Some(dl) = reader.loads.recv() => run.on_loaded(dl).await,
            msg = reader.batches.recv() => match msg {
                Some(msg) => run.on_batch(msg).await,
                None => break,
            },
            _ = poll.tick(), if !run.stopping => {
                run.on_poll().await;
                if let Some(d) = &device {
                    dispatch_attaches(&mut run, d, &attach_tx);
                }
            }
            Some((pid, done)) = attach_rx.recv() => {
                if let Some(d) = &device {
                    on_attached(&mut run, d, &opts, pid, done).await;
                }
            }
            _ = tick.tick() => progress(&run.on_tick().await),
            Some(g) = gpu_rx.recv() => run.on_gpu(g).await,
            Some(news) = next_label(&mut labels) => run.on_label(news).await,
            Some(s) = serving_rx.recv() => run.on_serving(s).await,
            Some(part) = next_device_part(&mut device) => run.on_gpu_timeline(part).await,
        }
    }
    if let Some(d) = device.take() {
        // what the processes sent before they exited (their last flush) is in the socket's queue
        for part in d.close() {
            run.on_gpu_timeline(part).await;
        }
    }
    let _ = reader.thread.join();
    if let Some(s) = sampler {
        s.stop();
    }
    if let Some(k) = kmsg {
        k.stop();
    }
    while let Ok(g) = gpu_rx.try_recv() {
        run.on_gpu(g).await;
    }
    run.stop_serving();
    while let Ok(s) = serving_rx.try_recv() {
        run.on_serving(s).await;
    }
    if let Some(mut l) = labels.take() {
        // whatever arrived before the end is kept; the socket closes (and its file goes) here
        while let Ok(news) = l.news.try_recv() {
            run.on_label(news).await;
        }
        run.note_all(l.unfinished());
        run.labels_at(&l.path);
    }
    run.finish(&mut reader.loads).await
}

/// The label socket, unless turned off; a default path that cannot be opened is a note, an
/// explicit one an error.
fn open_labels(opts: &crate::labels::LabelOptions) -> Result<(Option<LabelSocket>, Option<String>), ProbeError> {
    if !opts.enabled {
        return Ok((None, None));
    }
    match LabelSocket::open(opts.socket.as_deref(), opts.mode) {
        Ok(s) => Ok((Some(s), None)),
        Err(e) if opts.socket.is_some() => Err(ProbeError::Labels(format!("{e:#}"))),
        Err(e) => Ok((None, Some(format!("no label socket: {e:#}")))),
    }
}

/// The device-timeline socket of a launched command with `--gpu-timeline`, and the variables that
/// make the CUDA driver load the injection library in it. A command whose environment already names
/// an injection library (Nsight Systems sets the same variable) keeps it: the device view belongs
/// to that tool, and the trace says so.
fn open_gpu_timeline(opts: &mut TraceOptions) -> Result<(Option<GpuTimelineSocket>, Option<String>), ProbeError> {
    use crate::gpu_timeline::{INJECTION_ENV, SOCKET_ENV};
    if !opts.gpu_timeline.enabled {
        return Ok((None, None));
    }
    if opts.command.is_empty() && opts.pids.is_empty() && !opts.all {
        return Ok((None, Some(format!(
            "--gpu-timeline records a command the trace launches, the processes named with --pid or those --all adopts (attached through ptrace), or a service whose environment sets {INJECTION_ENV} and {SOCKET_ENV}"
        ))));
    }
    if opts.command.is_empty() {
        let library =
            crate::gpu_timeline::find_library(opts.gpu_timeline.library.as_deref()).map_err(ProbeError::GpuTimeline)?;
        let socket = GpuTimelineSocket::open(opts.gpu_timeline.socket.as_deref(), &library)
            .map_err(|e| ProbeError::GpuTimeline(format!("{e:#}")))?;
        return Ok((Some(socket), None));
    }
    let inherited = opts
        .command_env
        .iter()
        .find(|(k, _)| k == INJECTION_ENV)
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var(INJECTION_ENV).ok().filter(|v| !v.is_empty()));
    if let Some(other) = inherited {
        return Ok((None, Some(format!(
            "no device timeline: the command's environment already sets {INJECTION_ENV}={other} (Nsight Systems or another CUDA tool): the device view belongs to it"
        ))));
    }
    let library =
        crate::gpu_timeline::find_library(opts.gpu_timeline.library.as_deref()).map_err(ProbeError::GpuTimeline)?;
    let socket = GpuTimelineSocket::open(opts.gpu_timeline.socket.as_deref(), &library)
        .map_err(|e| ProbeError::GpuTimeline(format!("{e:#}")))?;
    opts.command_env.push((INJECTION_ENV.to_string(), library.display().to_string()));
    opts.command_env.push((SOCKET_ENV.to_string(), socket.path.display().to_string()));
    Ok((Some(socket), None))
}

/// `trace --pid P --gpu-timeline`: the injection library loaded into each running process named
/// (ptrace, `gpu_timeline::attach`), its `attached` note stored (how long its main thread was
/// held), the window the trace asked for opened once the library connects. A process that cannot
/// be attached is left as it was and the trace goes on without its device view, saying why.
async fn attach_running(run: &mut Running<'_>, device: &GpuTimelineSocket, opts: &TraceOptions) {
    for &pid in &opts.pids {
        let Some(paths) = prepare_attach(run, device, pid) else { continue };
        let done = tokio::task::spawn_blocking(move || crate::gpu_timeline::attach::attach(pid, &paths))
            .await
            .unwrap_or_else(|e| Err(format!("the attach panicked ({e})")));
        on_attached(run, device, opts, pid, done).await;
    }
}

/// Where the library and the socket are for `pid` (another mount namespace gets a copy and a
/// second listening socket); `None`, said in a note, when they cannot be.
fn prepare_attach(
    run: &mut Running<'_>,
    device: &GpuTimelineSocket,
    pid: u32,
) -> Option<crate::gpu_timeline::attach::TargetPaths> {
    let paths = match crate::gpu_timeline::attach::target_paths(pid, &device.library, &device.path) {
        Ok(p) => p,
        Err(e) => {
            run.note_all([format!("no device timeline for pid {pid}: {e}")]);
            return None;
        }
    };
    if let Some(extra) = &paths.listen_also {
        if let Err(e) = device.listen_also(extra) {
            run.note_all([format!("no device timeline for pid {pid}: listening in its mount namespace: {e:#}")]);
            return None;
        }
    }
    Some(paths)
}

/// `trace --all --gpu-timeline`: the queued CUDA processes that have loaded libcuda are attached,
/// each on a blocking thread (the trace loop goes on; the result comes back on `tx`); one that has
/// not yet waits for a later poll, up to `WAIT_FOR_LIBCUDA`.
fn dispatch_attaches(
    run: &mut Running<'_>,
    device: &GpuTimelineSocket,
    tx: &tokio::sync::mpsc::UnboundedSender<(u32, Result<crate::gpu_timeline::attach::Attached, String>)>,
) {
    use crate::gpu_timeline::attach;
    for (pid, since) in std::mem::take(&mut run.attach_queue) {
        if !attach::has_libcuda(pid) {
            if !crate::process::alive(pid) {
                continue;
            }
            if since.elapsed() < attach::WAIT_FOR_LIBCUDA {
                run.attach_queue.push((pid, since));
            } else {
                run.note_all([format!(
                    "no device timeline for pid {pid}: it calls CUDA but had not loaded libcuda {} s after its first call",
                    attach::WAIT_FOR_LIBCUDA.as_secs()
                )]);
            }
            continue;
        }
        let Some(paths) = prepare_attach(run, device, pid) else { continue };
        let tx = tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = tx.send((pid, attach::attach(pid, &paths)));
        });
    }
}

/// What an attach came to: the window (or the dormant state, or the pre-trigger buffer) asked
/// for, the `attached` note; or why the process was left as it was.
async fn on_attached(
    run: &mut Running<'_>,
    device: &GpuTimelineSocket,
    opts: &TraceOptions,
    pid: u32,
    done: Result<crate::gpu_timeline::attach::Attached, String>,
) {
    use crate::gpu_timeline::{Command, WHOLE_TRACE_MS};
    let g = &opts.gpu_timeline;
    let attached = match done {
        Ok(a) => a,
        Err(why) => {
            run.note_all([format!("no device timeline for pid {pid}: {why}")]);
            return;
        }
    };
    let window_ms = (!g.dormant).then(|| g.window_ms.unwrap_or(WHOLE_TRACE_MS));
    let reason = match g.window_ms {
        Some(ms) => format!("opened by the trace: --gpu-window {} s", ms as f64 / 1000.0),
        None => "opened by the trace: the whole trace".to_string(),
    };
    let pre_ms = g.triggers.pre_ms;
    let _ = device.commands.send(Command::Attached { pid, window_ms, reason, pre_ms });
    let mut detail = attached.describe();
    if attached.busy {
        detail.push_str("; the library there already records for another live tracer: no window from this one");
    } else if g.triggers.pre_ms > 0 {
        detail.push_str(&format!(
            "; armed: records kept {} s in the tracer's memory, stored only in windows",
            g.triggers.pre_ms as f64 / 1000.0
        ));
    } else if g.dormant {
        detail.push_str("; dormant: `causeway gpu-window --pid PID --for 10s` or an MCP client opens a window");
    }
    if !g.triggers.kinds.is_empty() {
        let names: Vec<&str> = g.triggers.kinds.iter().map(|k| k.name()).collect();
        detail.push_str(&format!(
            "; triggers {} open windows of {} s",
            names.join(","),
            g.triggers.window_ms as f64 / 1000.0
        ));
    }
    run.note_all([format!("pid {pid}: {detail}")]);
    let note = causeway_model::GpuTimelineNote {
        pid,
        ts_ns: crate::decode::mono_to_realtime_offset() + crate::labels::monotonic_ns(),
        kind: causeway_gpu_wire::note::ATTACHED.into(),
        count: attached.held.as_nanos() as i64,
        detail,
    };
    run.on_gpu_timeline(causeway_store::GpuTimelinePart { notes: vec![note], ..Default::default() }).await;
}

/// What the device-timeline socket received, or never when there is none.
async fn next_device_part(device: &mut Option<GpuTimelineSocket>) -> Option<causeway_store::GpuTimelinePart> {
    match device {
        Some(d) => d.news.recv().await,
        None => std::future::pending().await,
    }
}

/// The next label news, or never when there is no socket.
async fn next_label(labels: &mut Option<LabelSocket>) -> Option<crate::labels::LabelNews> {
    match labels {
        Some(l) => l.news.recv().await,
        None => std::future::pending().await,
    }
}

/// The session row of a trace this process is about to record on this host: start time, version,
/// kernel, host name, what is traced, and this process's pid (its own threads run beside the
/// workload and may appear in the trace; the analysis names them as the tracer).
pub fn new_session_info(pids: &[u32], command: &[String], flags: String) -> causeway_model::SessionInfo {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    causeway_model::SessionInfo {
        started_at_ns: now.as_nanos() as i64,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        kernel: read("/proc/sys/kernel/osrelease"),
        hostname: read("/proc/sys/kernel/hostname"),
        node: read("/proc/sys/kernel/hostname"),
        pid_filter: pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","),
        command: command.join(" "),
        flags,
        tracer_pid: std::process::id(),
        ..Default::default()
    }
}
