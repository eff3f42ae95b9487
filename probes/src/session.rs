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

use causeway_backends::{EventSink, StackRecord};
use causeway_model::codes::op;
use causeway_model::{Event, LossKind};

use crate::decode::{stack_hash, Decoder};
use crate::discovery::{self, DiscoveryOptions};
use crate::loader::{AttachedLib, LoadOptions, Probes, Rings};
use crate::process::{alive, GatedChild};
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
    /// `--cuda-lib`: library files or directories to probe.
    pub cuda_libs: Vec<PathBuf>,
    /// Probe only `cuda_libs` and what the targets map (no ldconfig / CUDA paths / pip wheel search).
    pub explicit_libs_only: bool,
    /// Probe exactly the `cuda_libs` files, not the CUDA libraries beside them.
    pub no_sibling_libs: bool,
    /// Also attach the CUDA libraries that show up in the targets' maps (loaded after the start, or
    /// missed by discovery). Off only where exactly the given libraries must be probed (the
    /// overhead bench compares one uprobe pair with bpftrace's).
    pub follow_mapped_libs: bool,
    pub duration_ns: Option<i64>,
    /// Record a user stack with every CUDA call.
    pub stacks: bool,
    /// Scheduler, process, block and memory tracepoints.
    pub host_probes: bool,
    pub ring_cuda_bytes: u32,
    pub ring_sched_bytes: u32,
    pub ring_host_bytes: u32,
    /// Drop a batch (counted as sink back-pressure) rather than wait when the sink is behind.
    pub drop_on_backpressure: bool,
    /// Raise to end the trace (Ctrl-C, an MCP cancel).
    pub stop: Arc<AtomicBool>,
    /// How often the targets' maps are checked for libraries loaded after the start.
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
            explicit_libs_only: false,
            no_sibling_libs: false,
            follow_mapped_libs: true,
            duration_ns: None,
            stacks: false,
            host_probes: true,
            ring_cuda_bytes: l.ring_cuda_bytes,
            ring_sched_bytes: l.ring_sched_bytes,
            ring_host_bytes: l.ring_host_bytes,
            drop_on_backpressure: false,
            stop: Arc::new(AtomicBool::new(false)),
            lib_poll_ms: 100,
            reader_delay_us: 0,
            perf_uprobes: false,
        }
    }
}

/// Events lost at one place, for one source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct LossRow {
    pub source: u8,
    pub kind: String,
    pub count: u64,
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
    pub losses: Vec<LossRow>,
    pub libraries: Vec<AttachedLib>,
    /// Host tracepoints attached.
    pub host_probes: Vec<String>,
    /// What was skipped or went wrong without stopping the trace.
    pub notes: Vec<String>,
    /// Kernel function pointers (`cudaLaunchKernel` arg0, `cuLaunchKernel` arg0, hex) resolved to symbols.
    pub kernel_symbols: BTreeMap<String, String>,
    pub traced_pids: Vec<u32>,
    pub command_pid: Option<u32>,
    pub command_exit: Option<i32>,
}

impl TraceReport {
    pub fn lost(&self) -> u64 {
        self.losses.iter().map(|l| l.count).sum()
    }
}

struct Msg {
    events: Vec<Event>,
    stacks: Vec<(i64, u32, Vec<u64>)>,
    /// maps of processes, read by the reader when it first saw their calls (they may be gone now)
    maps: Vec<(u32, Vec<crate::symbols::Mapping>)>,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Run one trace to its end. `progress` is called about once a second.
pub async fn trace(
    opts: TraceOptions,
    mut sink: Box<dyn EventSink>,
    mut progress: impl FnMut(&LiveStats),
) -> anyhow::Result<TraceReport> {
    let mut report = TraceReport {
        started_at_ns: now_ns(),
        ..Default::default()
    };
    let load = LoadOptions {
        ring_cuda_bytes: opts.ring_cuda_bytes,
        ring_sched_bytes: opts.ring_sched_bytes,
        ring_host_bytes: opts.ring_host_bytes,
        stacks: opts.stacks,
        host_probes: opts.host_probes,
        perf_uprobes: opts.perf_uprobes,
    };
    let mut probes = Probes::load(&load)?;
    anyhow::ensure!(
        !opts.pids.is_empty() || !opts.command.is_empty(),
        "nothing to trace: give --pid or a command"
    );
    for &p in &opts.pids {
        anyhow::ensure!(alive(p), "no process {p}");
    }

    // libraries: explicit, the targets' maps, the host, the command's own virtualenv
    let mut dopts = DiscoveryOptions {
        explicit: opts.cuda_libs.clone(),
        pids: opts.pids.clone(),
        explicit_only: opts.explicit_libs_only,
        no_siblings: opts.no_sibling_libs,
        ..Default::default()
    };
    if let Some(prog) = opts.command.first().and_then(|p| which(p)) {
        dopts.site_packages = discovery::site_packages_of_program(&prog);
    }
    for lib in discovery::discover(&dopts) {
        if let Err(e) = probes.attach_library(&lib) {
            probes.notes.push(format!("{}: {e:#}", lib.path.display()));
        }
    }
    if probes.attached.is_empty() {
        probes.notes.push(
            "no CUDA library found yet: watching the targets' maps for one loaded later".into(),
        );
    }

    let mut child = None;
    if !opts.command.is_empty() {
        let mut c = GatedChild::spawn(&opts.command, opts.command_stdout.as_deref(), opts.command_stdin_null)?;
        probes.trace_pid(c.pid)?;
        c.release();
        report.command_pid = Some(c.pid);
        child = Some(c);
    }
    for &p in &opts.pids {
        probes.trace_pid(p)?;
    }

    let rings = probes
        .take_rings()
        .ok_or_else(|| anyhow::anyhow!("rings already taken"))?;
    let reader_stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Msg>(64);
    let decode_errors = Arc::new(std::sync::Mutex::new([0u64; 16]));
    let reader = {
        let stop = reader_stop.clone();
        let errs = decode_errors.clone();
        let delay = Duration::from_micros(opts.reader_delay_us);
        std::thread::Builder::new()
            .name("causeway-rings".into())
            .spawn(move || read_rings(rings, tx, stop, errs, delay))?
    };

    let started = Instant::now();
    let deadline = opts
        .duration_ns
        .map(|d| started + Duration::from_nanos(d.max(0) as u64));
    let mut stats = StatsBuilder::default();
    let mut symbolizer = Symbolizer::default();
    let mut seen_kernels: HashSet<(u32, i64)> = HashSet::new();
    let mut named: HashSet<u32> = HashSet::new();
    let mut prev_counters = vec![0u64; cnt::N as usize];
    let mut prev_pages: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut poll = tokio::time::interval(Duration::from_millis(opts.lib_poll_ms.max(10)));
    let mut stopping = false;
    let mut backpressure: HashMap<u8, u64> = HashMap::new();

    loop {
        tokio::select! {
            msg = rx.recv() => {
                let Some(mut msg) = msg else { break };
                for (pid, maps) in std::mem::take(&mut msg.maps) {
                    symbolizer.set_maps(pid, maps);
                }
                stats.add_batch(&msg.events);
                for e in &msg.events {
                    if (e.source, e.op) == (op::PROCESS_EXEC.source, op::PROCESS_EXEC.op) {
                        symbolizer.refresh(e.pid);
                        named.remove(&e.pid);
                    }
                    if !named.contains(&e.pid) && e.pid != 0 && (e.source == 1 || e.source == 4 || e.sched.is_some()) {
                        named.insert(e.pid);
                        symbolizer.refresh(e.pid);
                        let name = std::fs::read_to_string(format!("/proc/{}/comm", e.pid)).map(|s| s.trim().to_string()).unwrap_or_else(|_| e.comm.clone());
                        let _ = sink.write_process_name(e.pid, name, e.ts_ns).await;
                    }
                    if (e.source, e.op) == (op::CUDA_LAUNCH_KERNEL.source, op::CUDA_LAUNCH_KERNEL.op)
                        || (e.source, e.op) == (op::CU_LAUNCH_KERNEL.source, op::CU_LAUNCH_KERNEL.op)
                    {
                        if seen_kernels.insert((e.pid, e.arg0)) {
                            if let Some(r) = symbolizer.resolve(e.pid, e.arg0 as u64) {
                                if let Some(s) = r.symbol {
                                    report.kernel_symbols.insert(format!("{:#x}", e.arg0), s);
                                }
                            }
                        }
                    }
                }
                if !msg.stacks.is_empty() {
                    let recs = msg.stacks.iter().map(|(h, pid, ips)| stack_record(&mut symbolizer, *h, *pid, ips)).collect();
                    let _ = sink.write_stacks(recs).await;
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
                for pid in probes.traced_pids().into_iter().filter(|_| opts.follow_mapped_libs) {
                    for lib in discovery::libs_in_maps(pid) {
                        if !probes.is_attached(&lib) {
                            if let Some(kind) = discovery::classify(&lib) {
                                let f = discovery::FoundLibrary { path: lib.clone(), kind, how: format!("maps:{pid} (loaded after start)") };
                                if let Err(e) = probes.attach_library(&f) {
                                    probes.notes.push(format!("{}: {e:#}", lib.display()));
                                }
                            }
                        }
                    }
                }
                if end {
                    stopping = true;
                    reader_stop.store(true, Ordering::Relaxed);
                }
            }
            _ = tick.tick() => {
                let summaries = summary_events(&probes, &mut prev_counters, &mut prev_pages);
                if !summaries.is_empty() {
                    let n = summaries.len() as u64;
                    if sink.write_batch(summaries).await.is_ok() {
                        report.events_written += n;
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

    // final aggregates and every loss counter
    let summaries = summary_events(&probes, &mut prev_counters, &mut prev_pages);
    if !summaries.is_empty() {
        let n = summaries.len() as u64;
        if sink.write_batch(summaries).await.is_ok() {
            report.events_written += n;
        }
    }
    let counters = probes.counters();
    let decode = *decode_errors.lock().unwrap();
    for src in 0..16u8 {
        let ring = counters[(cnt::LOST_BASE + src as u32) as usize]
            + counters[(cnt::STASH_FAIL_BASE + src as u32) as usize];
        let rows = [
            (LossKind::RingReserve, ring),
            (LossKind::Decode, decode[src as usize]),
            (
                LossKind::SinkBackpressure,
                backpressure.get(&src).copied().unwrap_or(0),
            ),
        ];
        for (kind, n) in rows {
            if n > 0 {
                // the sink counts its own back-pressure drops; the rest we add
                if kind != LossKind::SinkBackpressure || !opts.drop_on_backpressure {
                    sink.add_loss(src, kind, n);
                }
                report.losses.push(LossRow {
                    source: src,
                    kind: kind.as_str().into(),
                    count: n,
                });
            }
        }
    }
    report.traced_pids = probes.traced_pids();
    report.libraries = probes.attached.values().cloned().collect();
    report.host_probes = probes.host_attached.clone();
    report.notes = std::mem::take(&mut probes.notes);
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
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(prog))
        .find(|p| p.is_file())
}

fn stack_record(sym: &mut Symbolizer, hash: i64, pid: u32, ips: &[u64]) -> StackRecord {
    let frames: Vec<serde_json::Value> = ips
        .iter()
        .map(|&ip| match sym.resolve(pid, ip) {
            Some(r) => match r.symbol {
                Some(s) => serde_json::json!({"s": format!("{s}+{:#x}", r.offset), "f": r.file}),
                None => serde_json::json!({"i": format!("{ip:#x}"), "f": r.file}),
            },
            None => serde_json::json!({"i": format!("{ip:#x}")}),
        })
        .collect();
    let ips: Vec<String> = ips.iter().map(|ip| format!("{ip:#x}")).collect();
    StackRecord {
        hash,
        ips: serde_json::to_string(&ips).unwrap_or_default(),
        frames: serde_json::Value::Array(frames).to_string(),
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

/// The in-kernel aggregates since the last call, as summary events.
fn summary_events(
    probes: &Probes,
    prev: &mut [u64],
    prev_pages: &mut HashMap<u32, (u64, u64)>,
) -> Vec<Event> {
    let now = now_ns();
    let c = probes.counters();
    let d = |i: u32| c[i as usize].saturating_sub(prev[i as usize]) as i64;
    let mut out = Vec::new();
    let mk = |code: causeway_model::OpCode, pid: u32, arg0: i64, arg1: i64| Event {
        ts_ns: now,
        pid,
        cpu: -1,
        source: code.source,
        op: code.op,
        arg0,
        arg1,
        ..Default::default()
    };
    if d(cnt::SWITCH_OTHER) > 0 {
        let mut e = mk(op::SCHED_SWITCH_SUMMARY, 0, 0, d(cnt::SWITCH_OTHER));
        e.dur_ns = d(cnt::SWITCH_OTHER_NS);
        out.push(e);
    }
    if d(cnt::WAKEUP_OTHER) > 0 {
        out.push(mk(op::SCHED_WAKEUP_SUMMARY, 0, 0, d(cnt::WAKEUP_OTHER)));
    }
    if d(cnt::BLOCK_OTHER) > 0 {
        out.push(mk(
            op::BLOCK_SUMMARY,
            0,
            d(cnt::BLOCK_OTHER_BYTES),
            d(cnt::BLOCK_OTHER),
        ));
    }
    if d(cnt::PAGE_OTHER) > 0 {
        out.push(mk(
            op::MM_PAGE_ALLOC_SUMMARY,
            0,
            d(cnt::PAGE_OTHER_BYTES),
            d(cnt::PAGE_OTHER),
        ));
    }
    for (pid, p) in probes.pages() {
        let (pc, pb) = prev_pages.get(&pid).copied().unwrap_or((0, 0));
        if p.count > pc {
            out.push(mk(
                op::MM_PAGE_ALLOC_SUMMARY,
                pid,
                (p.bytes - pb) as i64,
                (p.count - pc) as i64,
            ));
            prev_pages.insert(pid, (p.count, p.bytes));
        }
    }
    prev.copy_from_slice(&c);
    out
}

/// The ring reader thread: poll the three rings, decode, batch, send. After `stop` it drains the
/// rings once more completely and ends (closing the channel).
fn read_rings(
    mut rings: Rings,
    tx: tokio::sync::mpsc::Sender<Msg>,
    stop: Arc<AtomicBool>,
    errors: Arc<std::sync::Mutex<[u64; 16]>>,
    delay: Duration,
) {
    use std::os::fd::AsRawFd;
    let mut decoder = Decoder::new();
    let mut seen_stacks: HashSet<i64> = HashSet::new();
    let mut mapped: HashSet<u32> = HashSet::new();
    let mut batch = Msg {
        events: Vec::with_capacity(8192),
        stacks: Vec::new(),
        maps: Vec::new(),
    };
    let mut last_send = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let mut fds = [
            libc::pollfd {
                fd: rings.sched.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: rings.cuda.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: rings.host.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if !stopping && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if !stopping {
            // SAFETY: three valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 3, 10) };
        }
        // sched first: a call's off-CPU intervals are read before the call itself
        for (ring_src, which) in [(3u8, 0), (1u8, 1), (3u8, 2)] {
            let ring = match which {
                0 => &mut rings.sched,
                1 => &mut rings.cuda,
                _ => &mut rings.host,
            };
            while let Some(item) = ring.next() {
                match wire::parse(&item) {
                    Ok(rec) => {
                        if let wire::Record::Call(c) = &rec {
                            if mapped.insert(c.pid) {
                                if let Ok(m) = crate::symbols::read_maps(c.pid) {
                                    batch.maps.push((c.pid, m));
                                }
                            }
                        }
                        let mut stack = None;
                        if let (wire::Record::Call(c), Some(st)) = (&rec, rings.stacks.as_ref()) {
                            if c.stack_id >= 0 {
                                if let Ok(trace) = st.get(&(c.stack_id as u32), 0) {
                                    let ips: Vec<u64> =
                                        trace.frames().iter().map(|f| f.ip).collect();
                                    let h = stack_hash(&ips);
                                    if seen_stacks.insert(h) {
                                        batch.stacks.push((h, c.pid, ips));
                                    }
                                    stack = Some(h);
                                }
                            }
                        }
                        let mut e = decoder.event(rec);
                        if let Some(h) = stack {
                            e.stack_hash = h;
                        }
                        batch.events.push(e);
                    }
                    Err(_) => errors.lock().unwrap()[ring_src as usize] += 1,
                }
                if batch.events.len() >= 8192 {
                    let full = std::mem::replace(
                        &mut batch,
                        Msg {
                            events: Vec::with_capacity(8192),
                            stacks: Vec::new(),
                            maps: Vec::new(),
                        },
                    );
                    if tx.blocking_send(full).is_err() {
                        return;
                    }
                    last_send = Instant::now();
                }
            }
        }
        if !batch.events.is_empty()
            && (stopping || last_send.elapsed() >= Duration::from_millis(50))
        {
            let full = std::mem::replace(
                &mut batch,
                Msg {
                    events: Vec::with_capacity(8192),
                    stacks: Vec::new(),
                    maps: Vec::new(),
                },
            );
            if tx.blocking_send(full).is_err() {
                return;
            }
            last_send = Instant::now();
        }
        if stopping {
            return;
        }
    }
}
