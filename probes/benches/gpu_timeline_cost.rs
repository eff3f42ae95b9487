//! The device timeline's cost, in one run (root; `cargo bench --workspace --bench gpu_timeline_cost`):
//! 1. the whole trace's cost on mock-cuda's launch loop (`launchloop`, zero-length kernels in a
//!    tight loop): traced without and with `--gpu-timeline`, interleaved, ns per launch (wall and
//!    the launching thread's own CPU) and the ratio; every traced run must have stored each kernel
//!    once when the timeline is on;
//! 2. the injection library's own cost, as it measures it: its flush thread's CPU time over the
//!    run (calibrations, flushes, and converting and sending the records CUPTI hands it), per flush
//!    and per record sent (the library's `stopped` note);
//! 3. the states of a process attached while it runs (`trace --pid P --gpu-timeline`): the same loop
//!    started untraced and traced by pid without a timeline, attached dormant (the library loaded,
//!    nothing enabled), attached with a window open, and attached with a pre-trigger buffer (the
//!    library recording, the tracer keeping the last 5 s), ns per launch and ratios; and the attach's
//!    pause of the process's main thread (the `attached` note).
//!
//! The mock CUPTI is not NVIDIA's: the difference between the two traced modes includes the mock's
//! own record keeping on the launching thread and the tracer's work on the shared CPUs; the
//! library's own share is line 2. On a real GPU, CUPTI's cost replaces the mock's
//! (`scripts/gpu-check.sh`'s `timeline` step measures it on the H100).
//!
//! Options (environment): `CAUSEWAY_BENCH_RUNS` (interleaved runs of each mode, default 5),
//! `CAUSEWAY_BENCH_ITERS` (launches per run, default 100000), `CAUSEWAY_BENCH_ONLY=attached` (part 3
//! only).

use std::path::Path;

use causeway_backends::{open_store, SqliteSink};
use causeway_model::SessionInfo;
use causeway_probes::{GpuTimelineOptions, TraceOptions};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `KEY value` from the workload's output.
fn value(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().parse::<f64>().unwrap_or(f64::NAN)))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
}

/// One traced run of `launchloop --iters N`; (its output, kernels stored, the library's stopped note).
fn traced(build: &Path, inject: &Path, iters: u64, timeline: bool) -> (String, u64, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let db = dir.path().join("trace.db");
    let opts = TraceOptions {
        command: vec![build.join("launchloop").display().to_string(), "--iters".into(), iters.to_string()],
        command_stdout: Some(out.clone()),
        cuda_libs: vec![build.join("libcudart.so.12")],
        gpu_timeline: GpuTimelineOptions {
            enabled: timeline,
            library: Some(inject.to_path_buf()),
            ..Default::default()
        },
        nvml: causeway_probes::NvmlOptions { hz: 0, lib: None },
        ..Default::default()
    };
    let session = SessionInfo { started_at_ns: 1, tool_version: "bench".into(), ..Default::default() };
    let sink = SqliteSink::create(&db, session).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(causeway_probes::trace(opts, Box::new(sink), |_| {})).expect("trace");
    assert_eq!(report.command_exit, Some(0), "launchloop failed");
    let text = std::fs::read_to_string(&out).unwrap();
    let store = open_store(&db).unwrap();
    let mut kernels = 0u64;
    store
        .scan_gpu_ops(&causeway_model::time::TimeWindow::ALL, &mut |g| {
            kernels += u64::from(g.kind == causeway_model::GpuOpKind::Kernel)
        })
        .unwrap();
    let stopped = store
        .gpu_timeline_notes()
        .unwrap()
        .into_iter()
        .find(|n| n.kind == "stopped")
        .map(|n| n.detail)
        .unwrap_or_default();
    (text, kernels, stopped)
}

/// What a `stopped` note says the library cost: "... N records sent; reading and sending records
/// used R us of CPU; the flush thread used X us of CPU over F flushes".
struct LibraryCost {
    records: f64,
    records_us: f64,
    flush_us: f64,
    flushes: f64,
}

fn library_cost(note: &str) -> Option<LibraryCost> {
    let num_before = |after: &str, word: &str| -> Option<f64> {
        let from = note.find(after)?;
        let rest = &note[from..];
        let at = rest.find(word)?;
        rest[..at].split_whitespace().last()?.parse().ok()
    };
    Some(LibraryCost {
        records: num_before("", " records sent")?,
        records_us: num_before("reading and sending", " us of CPU")?,
        flush_us: num_before("flush thread", " us of CPU")?,
        flushes: num_before("flush thread", " flushes")?,
    })
}

/// How a running launch loop is traced in part 3.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Not traced at all.
    Untraced,
    /// Traced by pid, no device timeline.
    Traced,
    /// Attached, dormant: the library loaded, nothing enabled.
    Dormant,
    /// Attached, a window open for the whole loop.
    Window,
    /// Attached with a pre-trigger buffer (`--gpu-pre-trigger 5s`): the library records, the
    /// tracer keeps the last seconds and stores nothing (no window opens).
    Armed,
}

/// One run of `launchloop --iters N` started untraced, traced in `state` by pid during its 4 s
/// pause before the loop; (its output, the attach's pause of its main thread in us).
fn attached(build: &Path, inject: &Path, iters: u64, state: State) -> (String, Option<f64>) {
    let child = std::process::Command::new(build.join("launchloop"))
        .args(["--iters", &iters.to_string(), "--start-after-ms", "4000"])
        .env_remove("CUDA_INJECTION64_PATH")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("launchloop starts");
    let pid = child.id();
    while !std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default().contains("libcuda.so") {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut held = None;
    if state != State::Untraced {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("trace.db");
        let opts = TraceOptions {
            pids: vec![pid],
            cuda_libs: vec![build.join("libcudart.so.12")],
            gpu_timeline: GpuTimelineOptions {
                enabled: state != State::Traced,
                library: Some(inject.to_path_buf()),
                dormant: matches!(state, State::Dormant | State::Armed),
                triggers: causeway_probes::GpuTriggerOptions {
                    pre_ms: if state == State::Armed { 5000 } else { 0 },
                    ..Default::default()
                },
                ..Default::default()
            },
            nvml: causeway_probes::NvmlOptions { hz: 0, lib: None },
            duration_ns: Some(120_000_000_000),
            ..Default::default()
        };
        // the trace of a pid runs to its duration: stopped here once the loop has exited
        let stop = opts.stop.clone();
        std::thread::spawn(move || loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            if state.is_none_or(|c| c == 'Z' || c == 'X') {
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        });
        let session = SessionInfo { started_at_ns: 1, tool_version: "bench".into(), ..Default::default() };
        let sink = SqliteSink::create(&db, session).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(causeway_probes::trace(opts, Box::new(sink), |_| {})).expect("trace");
        let store = open_store(&db).unwrap();
        held =
            store.gpu_timeline_notes().unwrap().iter().find(|n| n.kind == "attached").map(|n| n.count as f64 / 1000.0);
        if state != State::Traced {
            assert!(held.is_some(), "{state:?}: the loop was not attached");
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "launchloop failed");
    (String::from_utf8_lossy(&out.stdout).into_owned(), held)
}

/// Part 3: the cost of each state of an attached process.
fn attached_states(build: &Path, inject: &Path, runs: usize, iters: u64) {
    let states = [State::Untraced, State::Traced, State::Dormant, State::Window, State::Armed];
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); states.len()];
    let mut helds = Vec::new();
    for _ in 0..runs {
        for (i, &state) in states.iter().enumerate() {
            let (out, held) = attached(build, inject, iters, state);
            wall[i].push(value(&out, "NS_PER_ITER"));
            helds.extend(held);
        }
    }
    let m: Vec<f64> = wall.into_iter().map(median).collect();
    println!("a process attached while it runs (launchloop started untraced, median of {runs}):");
    println!("  not traced:                 {:.0} ns per launch", m[0]);
    println!("  traced by pid, no timeline: {:.0} ns per launch ({:.2}x not traced)", m[1], m[1] / m[0]);
    println!(
        "  attached, dormant:          {:.0} ns per launch ({:.2}x traced without a timeline: the dormant library's cost)",
        m[2],
        m[2] / m[1]
    );
    println!(
        "  attached, window open:      {:.0} ns per launch ({:.2}x traced without a timeline, {:.2}x dormant)",
        m[3],
        m[3] / m[1],
        m[3] / m[2]
    );
    println!(
        "  attached, pre-trigger buffer: {:.0} ns per launch ({:.2}x traced without a timeline, {:.2}x a window open: records kept in the tracer, none stored)",
        m[4],
        m[4] / m[1],
        m[4] / m[3]
    );
    if !helds.is_empty() {
        let mut h = helds.clone();
        h.sort_by(|a, b| a.total_cmp(b));
        println!(
            "  the attach held the main thread {:.0} us (median of {}; max {:.0} us)",
            median(helds),
            h.len(),
            h[h.len() - 1]
        );
    }
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("gpu_timeline_cost: tracing needs root; nothing measured");
        return;
    }
    let build = causeway_testdata::mock_cuda_build();
    let inject = causeway_testdata::inject_library();
    let runs = env_num("CAUSEWAY_BENCH_RUNS", 5) as usize;
    let iters = env_num("CAUSEWAY_BENCH_ITERS", 100_000);
    println!(
        "gpu_timeline_cost: launchloop --iters {iters}, {runs} interleaved runs per mode (after one warm-up each)"
    );
    if std::env::var("CAUSEWAY_BENCH_ONLY").is_ok_and(|v| v == "attached") {
        attached_states(&build, &inject, runs.min(3), iters);
        return;
    }
    traced(&build, &inject, iters / 10, false);
    traced(&build, &inject, iters / 10, true);
    let (mut wall, mut cpu) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let mut lib = Vec::new();
    for _ in 0..runs {
        for (i, timeline) in [false, true].into_iter().enumerate() {
            let (out, kernels, stopped) = traced(&build, &inject, iters, timeline);
            wall[i].push(value(&out, "NS_PER_ITER"));
            cpu[i].push(value(&out, "CPU_NS_PER_ITER"));
            if timeline {
                // (the loop's launches and its warm-up one, as the workload counts them)
                let launched = value(&out, "CALLS cudaLaunchKernel ") as u64;
                if kernels != launched {
                    // launchloop exits without a synchronize: kernels the mock GPU ran after the
                    // exit's forced flush are not in the device view (nor would they be on a GPU)
                    println!("  a run stored {kernels} of {launched} kernels (the loop exits without a synchronize: what ran after the exit's last flush is not recorded); its stopped note: {stopped}");
                }
                assert!(kernels <= launched, "no kernel stored twice");
                lib.extend(library_cost(&stopped));
            }
        }
    }
    let (w0, w1) = (median(wall[0].clone()), median(wall[1].clone()));
    let (c0, c1) = (median(cpu[0].clone()), median(cpu[1].clone()));
    println!("traced, no timeline:   {w0:.0} ns per launch (wall), {c0:.0} ns (the thread's CPU)");
    println!("traced, with timeline: {w1:.0} ns per launch (wall), {c1:.0} ns (the thread's CPU)");
    println!(
        "the timeline adds {:.0} ns per launch (wall; ratio {:.2}x), {:.0} ns of the launching thread's CPU (ratio {:.2}x)",
        w1 - w0,
        w1 / w0,
        c1 - c0,
        c1 / c0
    );
    println!("  every run (wall ns): without {:?}, with {:?}", wall[0], wall[1]);
    attached_states(&build, &inject, runs.min(3), iters);
    if lib.is_empty() {
        println!("the library's own cost: its stopped note was not found (no figure)");
        return;
    }
    let per_record = median(lib.iter().map(|c| c.records_us * 1000.0 / c.records.max(1.0)).collect());
    let per_flush = median(lib.iter().map(|c| c.flush_us / c.flushes.max(1.0)).collect());
    let records = median(lib.iter().map(|c| c.records).collect());
    println!(
        "the library's own cost: {per_record:.0} ns of CPU per record read and sent ({records:.0} records a run, median); its flush thread {per_flush:.0} us per flush"
    );
}
