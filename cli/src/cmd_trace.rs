//! `causeway trace`: record a trace into a database. Traces running pids (`--pid`), a command it
//! launches (`-- CMD ARGS`, with its children; ends when it exits) or every process of the host
//! that uses CUDA (`--all`, one such tracer per host, held by a lock file), shows a live per-op table each
//! second (or JSON lines with `--json`), and stops cleanly on Ctrl-C or after `--duration`, with
//! every event and loss counter flushed before it exits 0.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use causeway_backends::Engine;
use causeway_model::time::{fmt_ns, parse_duration_ns};
use causeway_probes::{LiveStats, TraceOptions};

use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database to write (default: causeway-<unix time>.db, or .duckdb with --backend duckdb).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Storage engine, sqlite or duckdb (default: by the --db extension, `.duckdb` = duckdb, else sqlite).
    #[arg(long, value_parser = Engine::parse)]
    pub backend: Option<Engine>,
    /// Process to trace (repeatable); its children are followed.
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Trace every process of this host that uses CUDA (maps libcudart, libcuda or libnccl): those
    /// running now and those started later, in containers too, each from its first call into a
    /// library already probed (else from when its load is seen). Runs until Ctrl-C, SIGTERM or
    /// --duration; one per host (see --lock).
    #[arg(long, conflicts_with_all = ["pids", "command"])]
    pub all: bool,
    /// With --all: the lock file that keeps a second always-on tracer off this host (it names the
    /// holder's pid and trace).
    #[arg(long, value_name = "FILE", default_value = "/run/causeway/trace-all.lock")]
    pub lock: PathBuf,
    /// A CUDA library (or a directory of them) to probe whether or not a traced process maps it,
    /// besides every CUDA library the traced processes map (repeatable). Any file name works
    /// (`libcudart-5e1c0ffe.so.13`): the file's own symbols say whether it is a runtime or a driver.
    #[arg(long = "cuda-lib")]
    pub cuda_libs: Vec<PathBuf>,
    /// Do not hold a launched command at its dlopens while its new CUDA libraries are attached (by
    /// default it is stopped for the attach, well under a millisecond each, so its first call through
    /// a library it loads late is recorded; without, calls between the load and the attach are lost
    /// and the trace says so).
    #[arg(long)]
    pub no_stop_on_load: bool,
    /// Stop after this long (e.g. 30s, 5m, 500ms). A launched command still running then is left
    /// running (the trace says so, with its pid) unless --kill-on-stop.
    #[arg(long)]
    pub duration: Option<String>,
    /// End a launched command that is still running when the trace stops (--duration, Ctrl-C,
    /// SIGTERM): SIGTERM, then SIGKILL after 5 s. Its calls in flight are written first.
    #[arg(long)]
    pub kill_on_stop: bool,
    /// How often the calls in flight for a second or more, and what their threads are doing, are
    /// written to the trace (table under_way), so a hang shows while the trace runs and survives a
    /// tracer that is killed (0: only when the trace stops).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub in_flight_every: std::time::Duration,
    /// Record the user stack of every CUDA call.
    #[arg(long)]
    pub stacks: bool,
    /// With --stacks, leave out the Python frames of Python processes (native frames only).
    #[arg(long, requires = "stacks")]
    pub no_python_frames: bool,
    /// Print the live statistics as JSON lines on stdout instead of a table on stderr.
    #[arg(long)]
    pub json: bool,
    /// The BPF ring buffers' sizes in MiB, CUDA,SCHED,HOST (each rounded up to a power of two; the
    /// tracer's largest fixed memory): smaller caps the tracer's memory, and a ring that fills up
    /// loses events, counted by source as ring_reserve losses.
    #[arg(long, value_name = "CUDA,SCHED,HOST", default_value = "16,8,2", value_parser = parse_rings)]
    pub ring_mib: RingSizes,
    /// No live statistics each second (a service: `--metrics` serves them); the start, the notes
    /// and the final report are still printed.
    #[arg(long, conflicts_with = "json")]
    pub quiet: bool,
    /// Do not attach the scheduler, process, block I/O and memory tracepoints.
    #[arg(long)]
    pub no_host: bool,
    /// This host's name in the trace (default: the host name): what a fleet tells nodes apart by.
    #[arg(long)]
    pub node: Option<String>,
    /// Samples per second of every GPU's own state through NVML (clocks, throttle reasons,
    /// temperature, power, utilization, memory, PCIe / NVLink, ECC) and its Xid errors; 0: off.
    /// Without NVML on the host the trace goes on and says "no NVML".
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub nvml_hz: u32,
    /// The root under which the container runtimes' files are read to name each traced process's
    /// container or pod (Docker, containerd, CRI-O, Podman): `/`, or where the host's root is
    /// mounted when the tracer runs in a container.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub container_root: PathBuf,
    /// The NVML library to load (default: libnvidia-ml.so.1 from the loader's search path).
    #[arg(long, env = "CAUSEWAY_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// Serve live Prometheus metrics while tracing at ADDR (default 127.0.0.1:9464): calls and
    /// latency histograms per op, off-CPU time of the traced threads, losses, the tracer's CPU.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = crate::metrics_http::DEFAULT_ADDR)]
    pub metrics: Option<String>,
    /// The Unix socket the workload labels its steps, epochs and tasks on (`causeway annotate`,
    /// the Python helper's `with causeway.step(i):`); a launched command finds it in
    /// $CAUSEWAY_LABELS. Default: /run/causeway/labels.sock for root, else under
    /// $XDG_RUNTIME_DIR (beside it when another trace holds it).
    #[arg(long, value_name = "PATH", conflicts_with = "no_labels")]
    pub labels_socket: Option<PathBuf>,
    /// The label socket's permission bits, octal (default 600: only this user may label).
    #[arg(long, value_name = "MODE", default_value = "600", value_parser = parse_mode)]
    pub labels_mode: u32,
    /// Open no label socket.
    #[arg(long)]
    pub no_labels: bool,
    /// Record the GPU's own timeline of the launched command: every kernel, copy, memset and
    /// synchronization with its device start and end, tied to the call that launched it (CUPTI's
    /// Activity API, through the injection library the CUDA driver loads from
    /// CUDA_INJECTION64_PATH; no code change). `explain` then says when the GPU sat idle and why.
    /// With --pid, each running process gets the library through ptrace (its main thread held for
    /// about a millisecond at a system call; the `attached` note says how long) and records for
    /// the whole trace, or --gpu-window, or (--gpu-dormant) only in the windows `causeway
    /// gpu-window`, an MCP client or a --gpu-trigger opens. With --all, each CUDA process it adopts
    /// gets the library the same way once it has loaded libcuda, unless its environment names an
    /// injection library (a service may set CUDA_INJECTION64_PATH=<libcauseway_inject.so> and
    /// CAUSEWAY_GPU_SOCKET=<--gpu-socket> itself).
    #[arg(long)]
    pub gpu_timeline: bool,
    /// With --pid: record the attached processes' device timeline for this long from the attach
    /// (e.g. 10s), then leave the library dormant (default: the whole trace).
    #[arg(long, value_name = "DURATION", requires = "gpu_timeline", conflicts_with = "gpu_dormant", value_parser = parse_window)]
    pub gpu_window: Option<u64>,
    /// With --pid: attach dormant; windows come from `causeway gpu-window --pid P --for 10s` or an
    /// MCP client (`open_gpu_window`).
    #[arg(long, requires = "gpu_timeline")]
    pub gpu_dormant: bool,
    /// With --pid: open a window on the attached processes when the tracer sees trouble: `util` (a
    /// GPU's NVML utilization falls to half its recent median or less), `step` (a labeled step
    /// slower than its series' median, by `causeway steps`' rule), `serving` (a serving engine's
    /// latency spike, or requests waiting while none is served), or `all`. Comma-separated. The
    /// processes attach dormant (unless --gpu-window) and each trigger is stored as a `trigger`
    /// note saying what it saw.
    #[arg(long, value_name = "LIST", requires = "gpu_timeline", value_parser = parse_triggers)]
    pub gpu_trigger: Option<TriggerList>,
    /// How long a window a trigger opens stays open.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_window)]
    pub gpu_trigger_window: u64,
    /// With --pid: keep the attached processes' device records of the last DURATION in the
    /// tracer's memory (the library records from the attach on; nothing is stored outside the
    /// windows), so each window (a trigger's, `causeway gpu-window`'s, an MCP client's) also holds
    /// the seconds before it opened. Costs what an open window costs in the process.
    #[arg(long, value_name = "DURATION", requires = "gpu_timeline", value_parser = parse_window)]
    pub gpu_pre_trigger: Option<u64>,
    /// The injection library (default: libcauseway_inject.so beside this binary, or $CAUSEWAY_INJECT_LIB).
    #[arg(long, value_name = "PATH", requires = "gpu_timeline")]
    pub gpu_library: Option<PathBuf>,
    /// Where the device timeline is received (default: gpu-PID.sock beside the label socket).
    #[arg(long, value_name = "PATH", requires = "gpu_timeline")]
    pub gpu_socket: Option<PathBuf>,
    /// How often a serving engine's metrics are scraped, in milliseconds. A traced process (or
    /// its ancestor) running vLLM, SGLang, TGI or Triton has its Prometheus endpoint found from
    /// its listening ports and command line; its latency histograms, queues and KV-cache use go
    /// into the trace (`serving_samples`).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub serving_scrape_ms: u64,
    /// A serving engine's metrics endpoint to scrape whatever is traced
    /// (http://HOST:PORT/metrics; the engine told by its metric names). Repeatable.
    #[arg(long, value_name = "URL")]
    pub serving_url: Vec<String>,
    /// Look for no serving engine among the traced processes (`--serving-url` still scraped).
    #[arg(long)]
    pub no_serving: bool,
    /// Record no socket calls, TCP retransmits or state changes (the raw syscall tracepoints
    /// they need make every syscall of every process take the kernel's slower path; see the
    /// uprobe bench for the cost).
    #[arg(long)]
    pub no_network: bool,
    /// Record what the traced processes touch, GPU or not (`causeway footprint`): every syscall
    /// counted in the kernel per process and kind (calls, errors, time, bytes), the files and
    /// sockets they open with the bytes through each, the programs their children run, the
    /// libraries they map, their CPU time, and the requests a server answers (a read on stdin or
    /// an accepted socket to the next write back). Costs every syscall of the host a little (the
    /// raw syscall tracepoints; see the uprobe bench's part `footprint`).
    #[arg(long, conflicts_with = "no_host")]
    pub footprint: bool,
    #[command(flatten)]
    pub series: SeriesArgs,
    #[cfg(feature = "duckdb")]
    #[command(flatten)]
    pub ship: crate::cmd_ship::TraceShipArgs,
    /// Command to launch and trace, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Bounded disk: the trace as a series of files in a directory (rollover), the oldest removed
/// (retention). Any of these makes `--db` a directory; every reader opens it as one trace.
#[derive(clap::Args, Debug, Default)]
pub struct SeriesArgs {
    /// Write the trace as a series of files in the directory --db, the next one begun when the
    /// one being written reaches SIZE (e.g. 256M, 1G: binary units) [default with any of these
    /// flags: 256M].
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_file_size: Option<u64>,
    /// ... or when it has been written this long (e.g. 1h, 30m) [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_file_age: Option<std::time::Duration>,
    /// Remove the oldest files of the series while it holds more than SIZE (never the one being
    /// written).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_size: Option<u64>,
    /// Remove the files of the series last written longer ago than this (e.g. 7d, 48h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_age: Option<std::time::Duration>,
}

impl SeriesArgs {
    /// The rollover policy, when any flag asks for a series.
    pub fn policy(&self) -> Option<causeway_backends::RollPolicy> {
        let asked = self.max_file_size.is_some()
            || self.max_file_age.is_some()
            || self.max_size.is_some()
            || self.max_age.is_some();
        asked.then(|| {
            let default = causeway_backends::RollPolicy::default();
            causeway_backends::RollPolicy {
                max_part_bytes: self.max_file_size.unwrap_or(default.max_part_bytes),
                max_part_age: self.max_file_age.unwrap_or(default.max_part_age),
                max_total_bytes: self.max_size,
                max_total_age: self.max_age,
            }
        })
    }
}

/// A size with an optional binary unit: `512K`, `256M`, `1.5G`, `10GiB`, `4096`.
fn parse_bytes(s: &str) -> Result<u64, String> {
    match parse_size::Config::new().with_binary().parse_size(s) {
        Ok(0) => Err(format!("{s:?}: a size above zero")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{s:?}: {e} (a size like 512K, 256M or 1G)")),
    }
}

/// A duration like `30s`, `15m`, `12h` or `7d`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (number, unit_s) = match s.trim() {
        t if t.ends_with('d') => (&t[..t.len() - 1], 86_400),
        t => return parse_duration_ns(t).map(|ns| std::time::Duration::from_nanos(ns.max(0) as u64)),
    };
    number
        .trim()
        .parse::<u64>()
        .map(|n| std::time::Duration::from_secs(n * unit_s))
        .map_err(|_| format!("{s:?}: a duration like 30s, 15m, 12h or 7d"))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let series = args.series.policy();
    let backend = match (args.backend, &args.db) {
        (Some(b), _) => b,
        (None, _) if series.is_some() => Engine::Sqlite,
        (None, Some(db)) => Engine::for_path(db),
        (None, None) => Engine::Sqlite,
    };
    anyhow::ensure!(
        series.is_none() || backend == Engine::Sqlite,
        "--max-file-size / --max-file-age / --max-size / --max-age write a series of SQLite files: \
         drop --backend {}",
        backend.name()
    );
    anyhow::ensure!(
        causeway_backends::is_built(backend),
        "--backend {}: this build has no {} engine (build with --features duckdb)",
        backend.name(),
        backend.name()
    );
    anyhow::ensure!(
        !args.pids.is_empty() || !args.command.is_empty() || args.all,
        "nothing to trace: give --pid N, -- COMMAND ARGS, or --all"
    );
    // a busy port fails the command before anything is written
    let metrics_listener = args.metrics.as_deref().map(crate::metrics_http::bind).transpose()?;
    if let Some(l) = &metrics_listener {
        eprintln!("causeway: metrics at http://{}/metrics", l.addr);
    }
    let duration_ns =
        args.duration.as_deref().map(parse_duration_ns).transpose().map_err(|e| anyhow::anyhow!("--duration: {e}"))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let db = args.db.clone().unwrap_or_else(|| match series {
        Some(_) => PathBuf::from(format!("causeway-{}", now.as_secs())),
        None => PathBuf::from(format!("causeway-{}.{}", now.as_secs(), backend.extension())),
    });
    // held until this process exits (a kill -9 too: the kernel drops the lock with the file)
    let _host_lock = if args.all { Some(crate::host_lock::acquire(&args.lock, &db)?) } else { None };
    let mut session = causeway_probes::new_session_info(
        &args.pids,
        &args.command,
        format!(
            "stacks={} python_frames={} host={}",
            args.stacks,
            args.stacks && !args.no_python_frames,
            !args.no_host
        ),
    );
    if args.all {
        session.pid_filter = "all".into();
    }
    anyhow::ensure!(
        (args.gpu_trigger.is_none() && args.gpu_pre_trigger.is_none()) || !args.pids.is_empty() || args.all,
        "--gpu-trigger and --gpu-pre-trigger open windows on processes attached with --pid or --all (a launched \
         command records its whole run with --gpu-timeline)"
    );
    if let Some(node) = &args.node {
        anyhow::ensure!(!node.trim().is_empty(), "--node: an empty name");
        session.node = node.trim().to_string();
    }
    #[cfg(feature = "duckdb")]
    anyhow::ensure!(
        args.ship.ship.is_none() || backend == Engine::Sqlite,
        "--ship reads the trace while it is written, which a DuckDB file does not allow: trace into SQLite \
         (the default), or `causeway ship` the DuckDB trace once it ends"
    );
    let node = session.node.clone();
    #[cfg(feature = "duckdb")]
    anyhow::ensure!(
        args.ship.ship.is_none() || series.is_none(),
        "--ship follows one trace file: trace without --max-file-size / --max-size (or `causeway ship` each \
         file of the series)"
    );
    let sink = match series {
        Some(policy) => causeway_backends::create_series_sink(&db, session, policy)?,
        None => causeway_backends::create_sink(&db, session, Some(backend))?,
    };
    #[cfg(feature = "duckdb")]
    let ship = crate::cmd_ship::LiveShip::start(&args.ship, &db, &node)?;
    #[cfg(not(feature = "duckdb"))]
    let _ = node;
    let opts = TraceOptions {
        pids: args.pids.clone(),
        command: args.command.clone(),
        all: args.all,
        cuda_libs: args.cuda_libs.clone(),
        stop_on_load: !args.no_stop_on_load,
        kill_on_stop: args.kill_on_stop,
        in_flight_every: (!args.in_flight_every.is_zero()).then_some(args.in_flight_every),
        duration_ns,
        stacks: args.stacks,
        python_frames: !args.no_python_frames,
        host_probes: !args.no_host,
        network: !args.no_host && !args.no_network,
        footprint: !args.no_host && args.footprint,
        drop_on_backpressure: true,
        ring_cuda_bytes: args.ring_mib.0[0] << 20,
        ring_sched_bytes: args.ring_mib.0[1] << 20,
        ring_host_bytes: args.ring_mib.0[2] << 20,
        nvml: causeway_probes::NvmlOptions { hz: args.nvml_hz, lib: args.nvml_lib.clone() },
        gpu_timeline: causeway_probes::GpuTimelineOptions {
            enabled: args.gpu_timeline,
            library: args.gpu_library.clone(),
            socket: args.gpu_socket.clone(),
            window_ms: args.gpu_window,
            // a trigger or a pre-trigger buffer opens the windows: dormant until then
            dormant: args.gpu_dormant
                || (args.gpu_window.is_none() && (args.gpu_trigger.is_some() || args.gpu_pre_trigger.is_some())),
            triggers: causeway_probes::GpuTriggerOptions {
                kinds: args.gpu_trigger.clone().map(|t| t.0).unwrap_or_default(),
                window_ms: args.gpu_trigger_window,
                pre_ms: args.gpu_pre_trigger.unwrap_or(0),
            },
        },
        metrics: args.metrics.as_ref().map(|_| std::sync::Arc::new(causeway_probes::TraceMetrics::new())),
        container_root: args.container_root.clone(),
        labels: causeway_probes::LabelOptions {
            enabled: !args.no_labels,
            socket: args.labels_socket.clone(),
            mode: args.labels_mode,
        },
        serving: causeway_probes::ServingOptions {
            enabled: !args.no_serving,
            scrape_ms: args.serving_scrape_ms,
            urls: args.serving_url.clone(),
        },
        ..Default::default()
    };
    let metrics = opts.metrics.clone();
    let stop = opts.stop.clone();
    let (json, quiet) = (args.json, args.quiet);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            stop.store(true, Ordering::Relaxed);
        });
        if let (Some(l), Some(m)) = (metrics_listener, metrics) {
            crate::metrics_http::spawn(l, m)?;
        }
        causeway_probes::trace(opts, sink, move |s| {
            if !quiet {
                show(s, json)
            }
        })
        .await
    })?;
    // the trace is whole locally whatever the lake did; a lake left behind is the exit status
    #[cfg(feature = "duckdb")]
    let shipped = ship.is_none_or(|ship| ship.finish(&db));

    let lost = report.lost();
    if json {
        println!("{}", serde_json::json!({"done": true, "db": db, "report": report}));
    } else {
        eprintln!(
            "causeway: {} events written to {} in {}; {} lost{}",
            report.events_written,
            db.display(),
            fmt_ns(report.stopped_at_ns - report.started_at_ns),
            lost,
            if lost > 0 {
                format!(
                    " ({})",
                    report
                        .losses
                        .iter()
                        .map(|l| format!("source {} {}: {}", l.source, l.kind.as_str(), l.count))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                String::new()
            }
        );
        for l in &report.libraries {
            eprintln!("causeway: probed {} ({} symbols, found by {})", l.path.display(), l.symbols.len(), l.how);
        }
        for a in report.attachments.iter().filter(|a| !a.complete && a.note.is_empty()) {
            eprintln!(
                "causeway: note: pid {}: {} was probed only after the process had mapped it: its calls before then are unknown",
                a.pid, a.path
            );
        }
        if let Some(path) = &report.labels_socket {
            let labels: Vec<String> = causeway_model::codes::label_kinds()
                .filter_map(|k| report.events_by_op.get(k).map(|n| format!("{n} {k}(s)")))
                .collect();
            let got = if labels.is_empty() { "no labels".to_string() } else { labels.join(", ") };
            eprintln!("causeway: label socket {path}: {got}");
        }
        if args.gpu_timeline {
            eprintln!(
                "causeway: device timeline: {} device ops (kernels, copies, memsets, synchronizations)",
                report.gpu_ops
            );
        }
        for n in &report.notes {
            eprintln!("causeway: note: {n}");
        }
    }
    #[cfg(feature = "duckdb")]
    if !shipped {
        return Ok(crate::cmd_ship::EXIT_BEHIND);
    }
    Ok(0)
}

/// `--gpu-window`: a duration (`10s`, `500ms`, `2m`), in ms, at least 1 ms.
pub fn parse_window(s: &str) -> Result<u64, String> {
    let ms = parse_duration_ns(s)? / 1_000_000;
    if ms <= 0 {
        return Err(format!("{s}: a window lasts at least 1 ms"));
    }
    Ok(ms as u64)
}

/// `--gpu-trigger`: the kinds of trigger asked for.
#[derive(Debug, Clone)]
pub struct TriggerList(pub Vec<causeway_probes::GpuTriggerKind>);

fn parse_triggers(s: &str) -> Result<TriggerList, String> {
    causeway_probes::GpuTriggerKind::parse_list(s).map(TriggerList)
}

/// `--ring-mib`: three sizes in MiB.
#[derive(Debug, Clone, Copy)]
pub struct RingSizes([u32; 3]);

fn parse_rings(s: &str) -> Result<RingSizes, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let [cuda, sched, host] = parts.as_slice() else {
        return Err(format!("{s:?}: three sizes in MiB, CUDA,SCHED,HOST (e.g. 16,8,2)"));
    };
    let mib = |name: &str, v: &str| -> Result<u32, String> {
        match v.parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(n),
            _ => Err(format!("the {name} ring: {v:?} is not a size from 1 to 1024 MiB")),
        }
    };
    Ok(RingSizes([mib("CUDA", cuda)?, mib("SCHED", sched)?, mib("HOST", host)?]))
}

fn show(s: &LiveStats, json: bool) {
    if json {
        if let Ok(line) = serde_json::to_string(s) {
            println!("{line}");
        }
        return;
    }
    let mut t = Table::new(&["op", ">count", ">p50", ">p99", ">off-CPU"]);
    for o in s.ops.iter().take(20) {
        t.row(vec![
            o.op.clone(),
            o.count.to_string(),
            fmt_ns(o.p50_ns as i64),
            fmt_ns(o.p99_ns as i64),
            fmt_ns(o.off_cpu_ns as i64),
        ]);
    }
    eprintln!(
        "-- {} | {} events | {} lost | pids {:?}\n{}",
        fmt_ns(s.elapsed_ns),
        s.events,
        s.lost,
        s.traced_pids,
        t.render()
    );
}

/// Permission bits in octal (`600`, `0660`).
fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("`{s}` is not permission bits in octal (e.g. 600, 660)"))
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_duration, parse_rings};

    #[test]
    fn sizes_are_binary_and_durations_take_days() {
        assert_eq!(parse_bytes("256M").unwrap(), 256 << 20);
        assert_eq!(parse_bytes("1G").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        for bad in ["0", "-1M", "big", ""] {
            assert!(parse_bytes(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(parse_duration("7d").unwrap().as_secs(), 7 * 86_400);
        assert_eq!(parse_duration("90m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("1h").unwrap().as_secs(), 3600);
        assert!(parse_duration("xd").is_err() && parse_duration("soon").is_err());
    }

    #[test]
    fn ring_sizes_are_three_bounded_mib_figures() {
        assert_eq!(parse_rings("16,8,2").unwrap().0, [16, 8, 2]);
        assert_eq!(parse_rings(" 4, 1 ,1024").unwrap().0, [4, 1, 1024]);
        for bad in ["16,8", "0,8,2", "16,8,2048", "a,b,c", "16,8,2,1"] {
            assert!(parse_rings(bad).is_err(), "{bad} accepted");
        }
        assert!(parse_rings("16,x,2").unwrap_err().contains("SCHED"));
    }
}
