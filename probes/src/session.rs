//! One trace: load and attach the probes, start (or adopt) the target processes, read the rings on
//! a dedicated thread, decode into events, write them through an [`EventSink`] in batches, emit the
//! in-kernel aggregates as summary events each second, attach libraries loaded late, and account
//! for every lost event. Ends when the command exits, the pids are gone, the duration passes or the
//! stop flag is raised; then drains everything, stores the loss counters and finishes the sink.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_model::codes::op;
use causeway_model::{LossCounter, LossKind};
use causeway_store::{EventSink, StackRecord};

use crate::error::ProbeError;
use crate::kernels::KernelNamer;
use crate::libraries::LibraryTracker;
use crate::loader::{AttachedLib, LoadOptions, Probes};
use crate::process::{alive, resume, stopped, GatedChild};
use crate::python::{merge, Merged, NativeFrame, PyProcs};
use crate::rings::{read_rings, summary_events, Msg, StackMsg};
use crate::stats::{LiveStats, StatsBuilder};
use crate::symbols::Symbolizer;
use crate::wire::{self, cnt};

/// What to trace and how.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// Running processes to trace (and the children they fork).
    pub pids: Vec<u32>,
    /// A command to launch and trace (with its children); the trace ends when it exits.
    pub command: Vec<String>,
    /// Where the command's stdout goes (inherited when None).
    pub command_stdout: Option<PathBuf>,
    /// Give the command /dev/null as stdin instead of ours (an MCP server over stdio).
    pub command_stdin_null: bool,
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
    pub duration_ns: Option<i64>,
    /// Record a user stack with every CUDA call.
    pub stacks: bool,
    /// With `stacks`, walk the CPython frames of Python processes too (the line being executed in
    /// each Python function). Off: native frames only, the interpreter's eval loop included.
    pub python_frames: bool,
    /// Scheduler, process, block and memory tracepoints.
    pub host_probes: bool,
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
}

impl Default for TraceOptions {
    fn default() -> Self {
        let l = LoadOptions::default();
        TraceOptions {
            pids: Vec::new(),
            command: Vec::new(),
            command_stdout: None,
            command_stdin_null: false,
            cuda_libs: Vec::new(),
            follow_mapped_libs: true,
            stop_on_load: true,
            duration_ns: None,
            stacks: false,
            python_frames: true,
            host_probes: true,
            ring_cuda_bytes: l.ring_cuda_bytes,
            ring_sched_bytes: l.ring_sched_bytes,
            ring_host_bytes: l.ring_host_bytes,
            drop_on_backpressure: false,
            stop: Arc::new(AtomicBool::new(false)),
            lib_poll_ms: 250,
            reader_delay_us: 0,
            perf_uprobes: false,
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
    fn check_write(&mut self, table: &str, rows: usize, result: Result<(), causeway_store::StoreError>) -> bool {
        let Err(e) = result else { return true };
        let u = self.unwritten.entry(table.to_string()).or_default();
        if u.rows == 0 {
            u.first_error = e.to_string();
        }
        u.rows += rows as u64;
        false
    }

    /// One note per table with refused rows.
    fn unwritten_notes(&self) -> Vec<String> {
        self.unwritten
            .iter()
            .map(|(table, u)| {
                format!("{} row(s) of `{table}` could not be written (first error: {})", u.rows, u.first_error)
            })
            .collect()
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// At the end of a trace that holds its command at each dlopen: a notice still in the ring when
/// the reader stopped is never read, so its process would stay stopped for good (and a signal sent
/// to it meanwhile, even SIGTERM, waits with it). No process is stopped from here on, and every
/// stopped one of the command's tree (the only processes this mode ever stops) goes on.
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
        perf_uprobes: opts.perf_uprobes,
        stop_on_load: opts.stop_on_load && opts.follow_mapped_libs && opts.pids.is_empty() && !opts.command.is_empty(),
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
    let mut c = GatedChild::spawn(&opts.command, opts.command_stdout.as_deref(), opts.command_stdin_null)
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

/// Run one trace to its end. `progress` is called about once a second.
pub async fn trace(
    opts: TraceOptions,
    mut sink: Box<dyn EventSink>,
    mut progress: impl FnMut(&LiveStats),
) -> Result<TraceReport, ProbeError> {
    let mut report = TraceReport { started_at_ns: now_ns(), ..Default::default() };
    if opts.pids.is_empty() && opts.command.is_empty() {
        return Err(ProbeError::NothingToTrace);
    }
    if let Some(&p) = opts.pids.iter().find(|&&p| !alive(p)) {
        return Err(ProbeError::NoSuchProcess(p));
    }
    let load = load_options(&opts);
    let mut probes = Probes::load(&load).map_err(|e| ProbeError::load_failure(&e))?;
    let mut libs = LibraryTracker::with_explicit(&mut probes, &opts.cuda_libs)?;
    libs.defer_polled = opts.stop_on_load;
    let mut child = start_targets(&opts, &mut probes, &mut libs, &mut report)?;
    let mut python = PyProcs::default();
    let walk_python = opts.stacks && opts.python_frames;
    if walk_python {
        for &p in &opts.pids {
            python.check(&mut probes, p, true);
        }
    }
    write_attachments(&mut libs, &mut sink, &mut report).await;

    let rings = probes.take_rings().ok_or_else(|| ProbeError::Load("the ring buffers were taken already".into()))?;
    let reader_stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Msg>(64);
    // the loader's notifications skip the batches: a process may be waiting for them
    let (dl_tx, mut dl_rx) = tokio::sync::mpsc::unbounded_channel::<wire::DlRec>();
    let decode_errors = Arc::new(std::sync::Mutex::new([0u64; 16]));
    let reader = {
        let stop = reader_stop.clone();
        let errs = decode_errors.clone();
        let delay = Duration::from_micros(opts.reader_delay_us);
        std::thread::Builder::new()
            .name("causeway-rings".into())
            .spawn(move || read_rings(rings, tx, dl_tx, stop, errs, delay))?
    };

    let started = Instant::now();
    let deadline = opts.duration_ns.map(|d| started + Duration::from_nanos(d.max(0) as u64));
    let mut stats = StatsBuilder::default();
    let mut symbolizer = Symbolizer::default();
    let mut namer = KernelNamer::default();
    let mut named: HashSet<u32> = HashSet::new();
    let mut prev_counters = vec![0u64; cnt::N as usize];
    let mut prev_pages: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut poll = tokio::time::interval(Duration::from_millis(opts.lib_poll_ms.max(10)));
    let mut stopping = false;
    let mut backpressure: HashMap<u8, u64> = HashMap::new();

    loop {
        // no `biased;`: under a constant stream of batches the poll (deadline, exit) must still run
        tokio::select! {
            Some(dl) = dl_rx.recv() => {
                if opts.follow_mapped_libs {
                    libs.scan(&mut probes, dl.pid, "loaded", dl.stopped);
                }
                if walk_python {
                    // before the process goes on: its next CUDA call may be its first
                    python.check(&mut probes, dl.pid, true);
                }
                if dl.stopped {
                    resume(dl.pid);
                }
                write_attachments(&mut libs, &mut sink, &mut report).await;
            }
            msg = rx.recv() => {
                let Some(mut msg) = msg else { break };
                for (pid, maps) in std::mem::take(&mut msg.maps) {
                    symbolizer.set_maps(pid, maps);
                }
                for n in &msg.names {
                    namer.fact(n);
                }
                if !msg.launch_configs.is_empty() {
                    let n = msg.launch_configs.len();
                    let written = sink.write_launch_configs(std::mem::take(&mut msg.launch_configs)).await;
                    report.check_write("launch_configs", n, written);
                }
                stats.add_batch(&msg.events);
                for e in &msg.events {
                    if op::PROCESS_EXEC.is(e.source, e.op) {
                        symbolizer.refresh(e.pid);
                        named.remove(&e.pid);
                        if opts.follow_mapped_libs && e.pid == e.tid {
                            libs.exec(&mut probes, e.pid);
                        }
                        if e.pid == e.tid {
                            python.exec(&mut probes, e.pid);
                        }
                    }
                    if !named.contains(&e.pid) && e.pid != 0 && (causeway_model::codes::is_gpu_call_source(e.source) || e.sched.is_some()) {
                        named.insert(e.pid);
                        symbolizer.refresh(e.pid);
                        let name = std::fs::read_to_string(format!("/proc/{}/comm", e.pid)).map(|s| s.trim().to_string()).unwrap_or_else(|_| e.comm.clone());
                        let written = sink.write_process_name(e.pid, name, e.ts_ns).await;
                        report.check_write("process_names", 1, written);
                    }
                }
                namer.launches(&msg.events);
                write_kernel_names(&mut namer, &mut symbolizer, false, &mut sink, &mut report).await;
                write_attachments(&mut libs, &mut sink, &mut report).await;
                if !msg.stacks.is_empty() {
                    let recs: Vec<_> = msg.stacks.iter().map(|st| stack_record(&mut symbolizer, st)).collect();
                    let n = recs.len();
                    let written = sink.write_stacks(recs).await;
                    report.check_write("stack_traces", n, written);
                }
                let n = msg.events.len() as u64;
                let mut codes: HashMap<(u8, u16), u64> = HashMap::new();
                for e in &msg.events {
                    *codes.entry((e.source, e.op)).or_default() += 1;
                }
                let ok = if opts.drop_on_backpressure { sink.try_write_batch(msg.events) } else { sink.write_batch(msg.events).await.is_ok() };
                if ok {
                    report.events_written += n;
                    for ((s, o), k) in codes {
                        *report.events_by_op.entry(causeway_model::codes::op_name(s, o).into_owned()).or_default() += k;
                    }
                } else {
                    for ((s, _), k) in codes {
                        *backpressure.entry(s).or_default() += k;
                    }
                }
            }
            _ = poll.tick(), if !stopping => {
                let mut end = opts.stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d);
                if let Some(c) = child.as_mut() {
                    if let Some(code) = c.try_wait() {
                        report.command_exit = Some(code);
                        end = true;
                    }
                } else if !opts.pids.is_empty() && !opts.pids.iter().any(|&p| alive(p)) {
                    end = true;
                }
                if walk_python {
                    for pid in probes.traced_pids() {
                        if python.unseen(pid) && !stopped(pid) {
                            python.check(&mut probes, pid, false);
                        }
                    }
                }
                if opts.follow_mapped_libs {
                    for pid in probes.traced_pids() {
                        // stopped by the loader hook: its notice is on the way and attaches what
                        // the process loaded as complete (nothing ran since); a poll now would
                        // attach the same libraries first and mark them incomplete
                        if opts.stop_on_load && stopped(pid) {
                            continue;
                        }
                        if libs.needs_poll(pid) {
                            libs.scan(&mut probes, pid, "poll", false);
                        }
                    }
                    write_attachments(&mut libs, &mut sink, &mut report).await;
                }
                if end {
                    stopping = true;
                    reader_stop.store(true, Ordering::Relaxed);
                }
            }
            _ = tick.tick() => {
                let summaries = summary_events(&probes, &mut prev_counters, &mut prev_pages);
                if !summaries.is_empty() {
                    let n = summaries.len();
                    let written = sink.write_batch(summaries).await;
                    if report.check_write("events (summaries)", n, written) {
                        report.events_written += n as u64;
                    }
                }
                let lost_now: u64 = probes.counters()[..32].iter().sum::<u64>() + backpressure.values().sum::<u64>();
                let live = LiveStats {
                    elapsed_ns: started.elapsed().as_nanos() as i64,
                    events: report.events_written,
                    lost: lost_now,
                    traced_pids: probes.traced_pids(),
                    ops: stats.rows(),
                };
                progress(&live);
            }
        }
    }
    let _ = reader.join();
    // a process the loader hook stopped after the reader's last read waits for nobody now
    while let Ok(dl) = dl_rx.try_recv() {
        if dl.stopped {
            resume(dl.pid);
        }
    }
    if load.stop_on_load {
        release_stopped(&mut probes);
    }

    // final aggregates, names, coverage and every loss counter
    let summaries = summary_events(&probes, &mut prev_counters, &mut prev_pages);
    if !summaries.is_empty() {
        let n = summaries.len();
        let written = sink.write_batch(summaries).await;
        if report.check_write("events (summaries)", n, written) {
            report.events_written += n as u64;
        }
    }
    write_kernel_names(&mut namer, &mut symbolizer, true, &mut sink, &mut report).await;
    let traced = probes.traced_pids();
    let last_rows = libs.finish();
    if !last_rows.is_empty() {
        report.attachments.extend(last_rows.iter().cloned());
        let n = last_rows.len();
        let written = sink.write_attachments(last_rows).await;
        report.check_write("attachments", n, written);
    }
    let counters = probes.counters();
    if namer.unnamed() > 0 {
        probes.notes.push(format!(
            "{} launched kernel handle(s) could not be named (no registration, module or symbol seen for them)",
            namer.unnamed()
        ));
    }
    let names_lost = counters[cnt::NAME_LOST as usize];
    if names_lost > 0 {
        probes.notes.push(format!("{names_lost} kernel-name record(s) lost (ring full): some launches may be unnamed"));
    }
    if namer.truncated > 0 {
        probes.notes.push(format!(
            "{} kernel name(s) longer than {} bytes were cut short",
            namer.truncated,
            wire::NAME_MAX - 1
        ));
    }
    python_notes(&counters, &python, &mut probes.notes);
    let decode = *decode_errors.lock().unwrap();
    for src in 0..16u8 {
        let ring =
            counters[(cnt::LOST_BASE + src as u32) as usize] + counters[(cnt::STASH_FAIL_BASE + src as u32) as usize];
        let rows = [
            (LossKind::RingReserve, ring),
            (LossKind::Decode, decode[src as usize]),
            (LossKind::SinkBackpressure, backpressure.get(&src).copied().unwrap_or(0)),
        ];
        for (kind, n) in rows {
            if n > 0 {
                // the sink counts its own back-pressure drops; the rest we add
                if kind != LossKind::SinkBackpressure || !opts.drop_on_backpressure {
                    sink.add_loss(src, kind, n);
                }
                report.losses.push(LossCounter { source: src, kind, count: n });
            }
        }
    }
    report.traced_pids = traced;
    report.libraries = probes.attached.values().cloned().collect();
    report.host_probes = probes.host_attached.clone();
    report.notes = std::mem::take(&mut probes.notes);
    report.notes.append(&mut libs.notes);
    report.notes.extend(report.unwritten_notes());
    drop(probes); // detach every uprobe and tracepoint before the sink's final work
    report.stopped_at_ns = now_ns();
    sink.flush().await?;
    sink.finish(report.stopped_at_ns).await?;
    Ok(report)
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
