//! Uprobe overhead, in one run (root; `cargo bench --workspace --bench uprobe_overhead`):
//! 1. the mock `cudaLaunchKernel` in a tight loop: untraced, with bpftrace counting the same
//!    uprobe + uretprobe pair, and with Causeway recording full events into SQLite; the added ns per
//!    call of each and Causeway's ratio to bpftrace (target <= 1.1x);
//! 2. events/s sustained with zero loss (runtime + driver probes, tight loop);
//! 3. the workload's slowdown at 20,000 launches/s;
//! 4. the Python walk's cost: with `--stacks`, the BPF program time per CUDA call of a Python
//!    process (ctypes calls at a fixed Python depth) with and without its Python frames, on every
//!    installed CPython, in ns per call and as a ratio;
//! 5. an NCCL call's probes: the BPF time of `nccl_ret` (the NCCL return program) per NCCL call
//!    and of the entry dispatch `cw_entry`, beside the runtime's `rt_ret` in the same run, as a
//!    ratio (mock-cuda's `nccl_ranks` in one process: group, all-reduce, sync per step);
//! 6. the network tracepoints' cost (raw syscall entry and exit, TCP and socket tracepoints):
//!    Causeway with them and without them (`--no-network`), interleaved, on the traced tight
//!    loop (ns per CUDA call) and on a traced syscall loop (`dd bs=1`: a read and a write per
//!    byte, none of them on a socket: the cost a traced process pays on every syscall), and on the
//!    same syscall loop untraced while a trace runs (what every other process on the host pays);
//! 7. the footprint programs' cost (`trace --footprint`: every syscall of a traced process counted
//!    in the kernel per (pid, request, syscall), descriptors' bytes, opens, execs): Causeway with
//!    and without them (network programs on in both), interleaved, on the same traced and untraced
//!    syscall loops as part 6, and on a traced loop of open/read/close of a small file (the opens
//!    send a record each);
//! 8. attaching and detaching the probes of the mock runtime, driver and NCCL libraries (every
//!    probed symbol they export) on the uprobe_multi path (CO-RE-relocated programs, three links
//!    per library) and on the perf-event path (one uprobe per symbol), interleaved, as medians and
//!    ratios.
//!
//! Each figure is the median of several runs (the host is shared and noisy).
//!
//! Fairness: the three modes run the same binary, loop and call count, interleaved, after one
//! discarded warm-up round; Causeway probes exactly the library bpftrace probes (not the driver
//! library the mock runtime calls into, so one uprobe pair per call in both), and every Causeway
//! run must have recorded each call exactly once.
//!
//! Options (environment): `CAUSEWAY_BENCH_RUNS` (interleaved runs, default 9),
//! `CAUSEWAY_BENCH_ITERS` (calls per tight-loop run, default 200000), `CAUSEWAY_BENCH_ONLY` (a
//! comma list of `loop`, `bpf`, `rate`, `paced`, `python`, `nccl`, `network`, `footprint`, `attach`; default all), `CAUSEWAY_BENCH_PY_DEPTH`
//! (Python frames on the stack of each call in part `python`, default 32), `CAUSEWAY_BENCH_SINK=null` (Causeway
//! counts events instead of storing them: the storing's share of the cost).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use causeway_backends::{EventSink, SinkSummary, SqliteSink, StackRecord};
use causeway_model::{Event, KernelName, LaunchConfig, LibraryAttach, LossKind, SessionInfo};
use causeway_probes::{TraceOptions, TraceReport};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn part(name: &str) -> bool {
    std::env::var("CAUSEWAY_BENCH_ONLY").map_or(true, |v| v.split(',').any(|p| p.trim() == name))
}

/// CPU seconds (user + system) of this process (the tracer's threads) and of its waited-for
/// children (the workloads).
fn cpu_seconds() -> (f64, f64) {
    let get = |who| {
        // SAFETY: getrusage fills a zeroed struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut u) };
        let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        s(u.ru_utime) + s(u.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

fn parse(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().parse::<f64>().unwrap()))
        .unwrap_or_else(|| panic!("{key} missing in:\n{out}"))
}

/// One tight-loop run as the workload reports it.
#[derive(Clone)]
struct LoopRun {
    wall_ns_per_call: f64,
    cpu_ns_per_call: f64,
    involuntary_switches: f64,
}

impl LoopRun {
    fn of(out: &str) -> LoopRun {
        LoopRun {
            wall_ns_per_call: parse(out, "NS_PER_ITER"),
            cpu_ns_per_call: parse(out, "CPU_NS_PER_ITER"),
            involuntary_switches: parse(out, "INVOLUNTARY_SWITCHES"),
        }
    }
    fn wall(&self) -> f64 {
        self.wall_ns_per_call
    }
    fn cpu(&self) -> f64 {
        self.cpu_ns_per_call
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn run_plain(bin: &Path, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).output().expect("workload");
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// BPF links are released asynchronously after their fds close: wait until no Causeway or bpftrace
/// program is loaded, so the next run is really untraced.
fn wait_unloaded() {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        let o = Command::new("bpftool")
            .args(["prog", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if !o.contains("name cw_entry")
            && !o.contains("name rt_launch")
            && !o.contains("name rt_ret")
            && !o.contains("name cudaLaunchKerne") // bpftrace's, named after the probe
            && !o.contains("name uprobe")
            && !o.contains("name uretprobe")
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn with_bpftrace(lib: &Path, bin: &Path, args: &[&str]) -> Option<String> {
    let script = format!(
        "uprobe:{l}:cudaLaunchKernel {{ @c = count(); }} uretprobe:{l}:cudaLaunchKernel {{ @r = count(); }}",
        l = lib.display()
    );
    let mut bt =
        Command::new("bpftrace").args(["-e", &script]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
    // wait for "Attaching 2 probes..."
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(bt.stdout.take().unwrap()).lines();
    let ready = lines.next().map(|l| l.map(|l| l.contains("Attaching")).unwrap_or(false)).unwrap_or(false);
    if !ready {
        let _ = bt.kill();
        return None;
    }
    std::thread::sleep(Duration::from_millis(300));
    let out = run_plain(bin, args);
    // bpftrace sometimes misses a SIGINT that lands while it is still setting up (seen here: it then
    // waits forever): ask again every 2 s, and kill it after 10 s.
    for attempt in 0..6 {
        // SAFETY: signal our own child.
        unsafe { libc::kill(bt.id() as i32, if attempt < 5 { libc::SIGINT } else { libc::SIGKILL }) };
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_secs(2) {
            if matches!(bt.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(bt.try_wait(), Ok(Some(_))) {
            break;
        }
    }
    let _ = bt.wait();
    wait_unloaded();
    Some(out)
}

fn with_causeway(lib: &Path, bin: &Path, args: &[&str], both_libs: bool) -> (String, TraceReport) {
    let opts = TraceOptions { follow_mapped_libs: both_libs, ..Default::default() };
    with_causeway_opts(lib, bin, args, opts)
}

/// Trace `bin args` with `opts` (its command, output and library filled in here) into a fresh
/// SQLite file: the command's stdout and the report.
fn with_causeway_opts(lib: &Path, bin: &Path, args: &[&str], opts: TraceOptions) -> (String, TraceReport) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let mut cmd = vec![bin.to_string_lossy().into_owned()];
    cmd.extend(args.iter().map(|s| s.to_string()));
    let opts =
        TraceOptions { command: cmd, command_stdout: Some(out.clone()), cuda_libs: vec![lib.to_path_buf()], ..opts };
    let sink: Box<dyn EventSink> = if std::env::var("CAUSEWAY_BENCH_SINK").is_ok_and(|s| s == "null") {
        Box::new(CountingSink(0))
    } else {
        Box::new(SqliteSink::create(&dir.path().join("bench.db"), SessionInfo::default()).unwrap())
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(causeway_probes::trace(opts, sink, |_| {})).expect("trace");
    (std::fs::read_to_string(&out).unwrap(), report)
}

/// Kernel BPF statistics (run time, run count) of the loaded programs named in `names`, summed
/// per name, sampled while `run` runs (programs vanish when their tracer exits: the last sample
/// counts). Needs kernel.bpf_stats_enabled, which costs time itself: compare only figures taken this
/// way with each other.
fn bpf_program_ns<T>(names: &[&str], run: impl FnOnce() -> T) -> Option<Vec<(f64, f64)>> {
    let knob = "/proc/sys/kernel/bpf_stats_enabled";
    let before = std::fs::read_to_string(knob).ok()?;
    std::fs::write(knob, "1").ok()?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let poll = std::thread::spawn(move || {
        let mut last: Option<Vec<(f64, f64)>> = None;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let o = Command::new("bpftool").args(["-j", "prog", "show"]).output();
            let v: serde_json::Value = o.ok().and_then(|o| serde_json::from_slice(&o.stdout).ok()).unwrap_or_default();
            let mut sums = vec![(0.0, 0.0); names.len()];
            for p in v.as_array().into_iter().flatten() {
                let Some(i) = names.iter().position(|n| p["name"] == n.as_str()) else {
                    continue;
                };
                sums[i].0 += p["run_time_ns"].as_f64().unwrap_or(0.0);
                sums[i].1 += p["run_cnt"].as_f64().unwrap_or(0.0);
            }
            if sums.iter().all(|s| s.1 > 0.0) {
                last = Some(sums);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        last
    });
    run();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let r = poll.join().ok().flatten();
    let _ = std::fs::write(knob, before.trim());
    r
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("uprobe_overhead: SKIPPED LOUDLY: needs root to load BPF programs");
        return;
    }
    let build = causeway_testdata::mock_cuda_build();
    let lib = build.join("libcudart.so.12");
    let bin = build.join("launchloop");
    let _ = causeway_probes::mount_tracefs(); // bpftrace detaches through tracefs
    let runs = env_num("CAUSEWAY_BENCH_RUNS", 9).max(1) as usize;
    let iters = env_num("CAUSEWAY_BENCH_ITERS", 200_000);
    let it = iters.to_string();
    let args = ["--iters", it.as_str()];
    // one Causeway run of the tight loop: ns per call, and the tracer's CPU ns per event
    let causeway_loop = || {
        let (self0, _) = cpu_seconds();
        let (o, r) = with_causeway(&lib, &bin, &args, false);
        let (self1, _) = cpu_seconds();
        let by_op = |n: &str| r.events_by_op.get(n).copied().unwrap_or(0);
        assert_eq!(
            (by_op("cudaLaunchKernel"), by_op("cuLaunchKernel"), r.lost()),
            (iters + 1, 0, 0),
            "Causeway must record each call once, probing the runtime only: {:?} {:?}",
            r.events_by_op,
            r.losses
        );
        (LoopRun::of(&o), (self1 - self0) * 1e9 / r.events_written as f64)
    };

    if part("loop") {
        // a discarded warm-up round, then interleaved runs (untraced, bpftrace, Causeway) so that
        // load from other processes hits all three alike; the minimum is the least disturbed run,
        // the median the typical one
        let _ = run_plain(&bin, &args);
        let _ = causeway_loop();
        let (mut base, mut bt_by_round, mut cw, mut cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            base.push(LoopRun::of(&run_plain(&bin, &args)));
            bt_by_round.push(with_bpftrace(&lib, &bin, &args).map(|o| LoopRun::of(&o)));
            let (run, tracer) = causeway_loop();
            cw.push(run);
            cpu.push(tracer);
        }
        let bt: Vec<LoopRun> = bt_by_round.iter().flatten().cloned().collect();
        println!("== cudaLaunchKernel in a tight loop ({iters} calls, {runs} interleaved runs: min / median) ==");
        // Wall clock per call, then the calling thread's own CPU time per call: the second leaves
        // out the time the loop waited while other threads (the tracer's reader and writer, on
        // this 2-core host) had its CPU, which the involuntary switch counts show.
        for (what, pick) in
            [("wall clock", LoopRun::wall as fn(&LoopRun) -> f64), ("calling thread's CPU time", LoopRun::cpu)]
        {
            let stats = |v: &[LoopRun]| {
                let x: Vec<f64> = v.iter().map(pick).collect();
                (x.iter().copied().fold(f64::INFINITY, f64::min), median(x))
            };
            let (base_min, base_med) = stats(&base);
            let (cw_min, cw_med) = stats(&cw);
            println!("-- {what} --");
            println!("untraced:                      {base_min:8.1} / {base_med:8.1} ns/call");
            if bt.is_empty() {
                println!("bpftrace:                      unavailable (bpftrace missing or failed to attach)");
                println!("Causeway full events (SQLite): {cw_min:8.1} / {cw_med:8.1} ns/call");
                continue;
            }
            let (bt_min, bt_med) = stats(&bt);
            println!(
                "bpftrace count (uprobe+uret):  {bt_min:8.1} / {bt_med:8.1} ns/call, +{:.1} / +{:.1} ns",
                bt_min - base_min,
                bt_med - base_med
            );
            println!(
                "Causeway full events (SQLite): {cw_min:8.1} / {cw_med:8.1} ns/call, +{:.1} / +{:.1} ns",
                cw_min - base_min,
                cw_med - base_med
            );
            // each round's three runs are adjacent in time, so the host's slow drifts hit them
            // alike: the median of the per-round ratios is the figure least moved by them
            let mut rounds: Vec<f64> = base
                .iter()
                .zip(&bt_by_round)
                .zip(&cw)
                .filter_map(|((b, t), c)| Some((pick(c) - pick(b)) / (pick(t.as_ref()?) - pick(b))))
                .collect();
            rounds.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let paired = median(rounds.clone());
            println!(
                "Causeway / bpftrace added cost: {:.2}x (min) / {:.2}x (median) / {paired:.2}x (median of per-round ratios) (target <= 1.10x)",
                (cw_min - base_min) / (bt_min - base_min),
                (cw_med - base_med) / (bt_med - base_med)
            );
            // How far one round's ratio strays: a target inside this spread cannot be told from
            // the host's noise by one run. Nearest-rank quartiles.
            // (bt is not empty here, so neither is rounds)
            let rank = |p: f64| rounds[((p * rounds.len() as f64).ceil() as usize).clamp(1, rounds.len()) - 1];
            println!(
                "per-round ratios ({} rounds): min {:.2}x / p25 {:.2}x / p75 {:.2}x / max {:.2}x",
                rounds.len(),
                rank(0.0),
                rank(0.25),
                rank(0.75),
                rank(1.0)
            );
        }
        let switches = |v: &[LoopRun]| median(v.iter().map(|r| r.involuntary_switches).collect());
        println!(
            "loop preempted (involuntary switches, median): untraced {:.0}, bpftrace {}, Causeway {:.0}",
            switches(&base),
            if bt.is_empty() { "-".to_string() } else { format!("{:.0}", switches(&bt)) },
            switches(&cw)
        );
        println!(
            "Causeway's own CPU (load, attach, ring reader, decoder, SQLite writer): {:.0} ns per event (median), beside the workload",
            median(cpu)
        );
    }

    if part("bpf") {
        // where the added cost goes: time inside the BPF programs (kernel.bpf_stats_enabled, separate
        // runs since the statistics cost time themselves)
        let bt = bpf_program_ns(&["cudaLaunchKerne"], || with_bpftrace(&lib, &bin, &args));
        // a launch's own entry and return programs (`ebpf/cuda_probes.bpf.c`)
        let cw = bpf_program_ns(&["rt_launch", "rt_launch_ret"], causeway_loop);
        let calls = (iters + 1) as f64;
        if let Some(b) = bt {
            println!("bpftrace BPF programs: {:.0} ns per call (entry + return, with bpf_stats on)", b[0].0 / calls);
        }
        if let Some(c) = cw {
            println!(
                "Causeway BPF programs: rt_launch {:.0} ns + rt_launch_ret {:.0} ns per call (with bpf_stats on); the rest of the added cost is the uprobe traps and the user-space reader/writer sharing this host's CPUs",
                c[0].0 / c[0].1,
                c[1].0 / c[1].1
            );
        }
    }

    if part("nccl") {
        nccl_cost(&build);
    }

    if part("attach") {
        attach_cost(&build, runs);
    }

    if part("network") {
        network_cost(&lib, &bin, &args, runs);
    }

    if part("footprint") {
        footprint_cost(&lib, runs);
    }

    if part("python") {
        python_walk(&lib);
    }

    if part("rate") {
        // sustained events/s with zero loss: runtime + driver probes (2 events per launch)
        let big = 1_000_000u64.to_string();
        let (o, r) = with_causeway(&lib, &bin, &["--iters", big.as_str()], true);
        let el = parse(&o, "ELAPSED_NS");
        let events = r.events_by_op.get("cudaLaunchKernel").copied().unwrap_or(0)
            + r.events_by_op.get("cuLaunchKernel").copied().unwrap_or(0);
        println!("== sustained rate ==");
        println!(
            "{events} call events in {:.2} s: {:.0} events/s, lost {} (runtime + driver uprobes, SQLite sink)",
            el / 1e9,
            events as f64 / (el / 1e9),
            r.lost()
        );
    }

    if part("paced") {
        // slowdown at 20,000 launches/s (50 us of host work per launch)
        let n = 40_000u64.to_string();
        let paced = ["--iters", n.as_str(), "--work-ns", "50000"];
        let (mut plain, mut traced) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            plain.push(parse(&run_plain(&bin, &paced), "ELAPSED_NS"));
            traced.push(parse(&with_causeway(&lib, &bin, &paced, true).0, "ELAPSED_NS"));
        }
        let (plain, traced) = (median(plain), median(traced));
        println!("== 20,000 launches/s ==");
        println!(
            "untraced {:.3} s, traced {:.3} s: slowdown {:.2}%",
            plain / 1e9,
            traced / 1e9,
            (traced / plain - 1.0) * 100.0
        );
    }
}

/// `dd if=/dev/zero of=/dev/null bs=1 count=N` through `sh` (its report on stdout): ns per syscall
/// (a read and a write per byte), from dd's own elapsed time.
const DD_BYTES: u64 = 200_000;
fn dd_ns_per_syscall(out: &str) -> f64 {
    // "200000 bytes (200 kB, 195 KiB) copied, 0.0812 s, 2.5 MB/s"
    let secs = out
        .lines()
        .find_map(|l| l.split("copied, ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no dd report in {out}"));
    secs * 1e9 / (2 * DD_BYTES) as f64
}

/// Part `network`: Causeway with and without the network programs, interleaved (see the module doc).
fn network_cost(lib: &Path, bin: &Path, args: &[&str], runs: usize) {
    let sh = Path::new("/bin/sh");
    let dd = format!("dd if=/dev/zero of=/dev/null bs=1 count={DD_BYTES} 2>&1");
    let dd_args = ["-c", dd.as_str()];
    let (mut loop_on, mut loop_off, mut dd_on, mut dd_off, mut dd_plain) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut other_on, mut other_off) = (Vec::new(), Vec::new());
    // an untraced dd while a trace (of a sleep that outlasts it) runs
    let beside = |network: bool| {
        let opts = TraceOptions { network, ..Default::default() };
        std::thread::scope(|s| {
            let tracer = s.spawn(|| with_causeway_opts(lib, Path::new("/bin/sleep"), &["4"], opts));
            std::thread::sleep(Duration::from_millis(1500)); // attached by then
            let v = dd_ns_per_syscall(&run_plain(sh, &dd_args));
            let _ = tracer.join();
            v
        })
    };
    for _ in 0..runs.clamp(1, 5) {
        for network in [true, false] {
            let opts = TraceOptions { network, ..Default::default() };
            let (o, r) = with_causeway_opts(lib, bin, args, opts.clone());
            assert_eq!(r.lost(), 0);
            (if network { &mut loop_on } else { &mut loop_off }).push(LoopRun::of(&o).wall());
            let (o, _) = with_causeway_opts(lib, sh, &dd_args, opts);
            (if network { &mut dd_on } else { &mut dd_off }).push(dd_ns_per_syscall(&o));
            (if network { &mut other_on } else { &mut other_off }).push(beside(network));
        }
        dd_plain.push(dd_ns_per_syscall(&run_plain(sh, &dd_args)));
    }
    let (lon, loff, don, doff, plain) =
        (median(loop_on), median(loop_off), median(dd_on), median(dd_off), median(dd_plain));
    let (oon, ooff) = (median(other_on), median(other_off));
    println!("== network tracepoints (medians of interleaved runs) ==");
    println!(
        "traced cudaLaunchKernel loop: {lon:.1} ns/call with, {loff:.1} without: +{:.1} ns/call ({:.3}x)",
        lon - loff,
        lon / loff
    );
    println!(
        "traced syscall loop (dd bs=1): {don:.1} ns/syscall with, {doff:.1} without, {plain:.1} untraced: +{:.1} ns/syscall ({:.3}x)",
        don - doff,
        don / doff
    );
    println!(
        "untraced syscall loop beside a trace: {oon:.1} ns/syscall with, {ooff:.1} without: +{:.1} ns/syscall ({:.3}x)",
        oon - ooff,
        oon / ooff
    );
}

/// Part `footprint`: Causeway with and without the footprint programs, interleaved (see the module
/// doc): ns per syscall of a traced `dd bs=1`, of an untraced one beside a trace, and ns per
/// open+read+close of a traced loop over a small file.
fn footprint_cost(lib: &Path, runs: usize) {
    let sh = Path::new("/bin/sh");
    let dd = format!("dd if=/dev/zero of=/dev/null bs=1 count={DD_BYTES} 2>&1");
    let dd_args = ["-c", dd.as_str()];
    // 20,000 opens of a small file by one python process (its own clock around the loop)
    const OPENS: u64 = 20_000;
    let py = format!(
        "import time,os\nopen('/tmp/causeway-fp-bench','w').write('x'*64)\nt=time.perf_counter_ns()\nfor _ in range({OPENS}):\n    f=open('/tmp/causeway-fp-bench','rb'); f.read(); f.close()\nprint('OPEN_NS', (time.perf_counter_ns()-t)/{OPENS})"
    );
    let py_args = ["-c", py.as_str()];
    let python = Path::new("/usr/bin/python3");
    let open_ns = |out: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix("OPEN_NS "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no OPEN_NS in {out}"))
    };
    let beside = |footprint: bool| {
        let opts = TraceOptions { footprint, ..Default::default() };
        std::thread::scope(|s| {
            let tracer = s.spawn(|| with_causeway_opts(lib, Path::new("/bin/sleep"), &["4"], opts));
            std::thread::sleep(Duration::from_millis(1500)); // attached by then
            let v = dd_ns_per_syscall(&run_plain(sh, &dd_args));
            let _ = tracer.join();
            v
        })
    };
    let (mut dd_on, mut dd_off, mut other_on, mut other_off, mut open_on, mut open_off, mut plain, mut open_plain) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs.clamp(1, 5) {
        for footprint in [true, false] {
            let opts = TraceOptions { footprint, ..Default::default() };
            let (o, _) = with_causeway_opts(lib, sh, &dd_args, opts.clone());
            (if footprint { &mut dd_on } else { &mut dd_off }).push(dd_ns_per_syscall(&o));
            let (o, _) = with_causeway_opts(lib, python, &py_args, opts);
            (if footprint { &mut open_on } else { &mut open_off }).push(open_ns(&o));
            (if footprint { &mut other_on } else { &mut other_off }).push(beside(footprint));
        }
        plain.push(dd_ns_per_syscall(&run_plain(sh, &dd_args)));
        open_plain.push(open_ns(&run_plain(python, &py_args)));
    }
    let (don, doff, p) = (median(dd_on), median(dd_off), median(plain));
    let (oon, ooff) = (median(other_on), median(other_off));
    let (fon, foff, fp) = (median(open_on), median(open_off), median(open_plain));
    println!("== footprint programs (medians of interleaved runs; network programs on in both) ==");
    println!(
        "traced syscall loop (dd bs=1): {don:.1} ns/syscall with, {doff:.1} without, {p:.1} untraced: +{:.1} ns/syscall ({:.3}x)",
        don - doff,
        don / doff
    );
    println!(
        "traced open+read+close loop (python): {fon:.0} ns/iteration with, {foff:.0} without, {fp:.0} untraced: +{:.0} ns ({:.3}x)",
        fon - foff,
        fon / foff
    );
    println!(
        "untraced syscall loop beside a trace: {oon:.1} ns/syscall with, {ooff:.1} without: +{:.1} ns/syscall ({:.3}x)",
        oon - ooff,
        oon / ooff
    );
}

/// Part `nccl`: the BPF programs' time per NCCL call (kernel.bpf_stats_enabled), next to the
/// runtime return program's per CUDA call in the same runs; the median of the interleaved runs.
fn nccl_cost(build: &Path) {
    let bin = build.join("nccl_ranks");
    let steps = env_num("CAUSEWAY_BENCH_NCCL_STEPS", 4000).to_string();
    let args = ["--all-in-one", "1", "--steps", steps.as_str(), "--bytes", "64", "--kernel-us", "0"];
    // the mock's transfer time is not what is measured: make it nil
    std::env::set_var("MOCK_NCCL_LAT_US", "0");
    let runs = env_num("CAUSEWAY_BENCH_RUNS", 9).clamp(1, 5) as usize;
    let (mut nccl, mut entry, mut rt, mut ratio) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let opts = TraceOptions { follow_mapped_libs: true, ..Default::default() };
        let lib = build.join("libcudart.so.12");
        let Some(r) = bpf_program_ns(&["nccl_ret", "cw_entry", "rt_ret"], || {
            let (_, report) = with_causeway_opts(&lib, &bin, &args, opts);
            assert!(report.events_by_op.get("ncclAllReduce").copied().unwrap_or(0) >= 1, "{:?}", report.events_by_op);
        }) else {
            println!("nccl: kernel.bpf_stats_enabled or bpftool unavailable: no figure");
            return;
        };
        let per = |i: usize| r[i].0 / r[i].1;
        nccl.push(per(0));
        entry.push(per(1));
        rt.push(per(2));
        ratio.push(per(0) / per(2));
    }
    println!(
        "NCCL call probes: nccl_ret {:.0} ns per NCCL call, cw_entry {:.0} ns per dispatched call; rt_ret {:.0} ns per runtime call; NCCL return / runtime return {:.2}x (median of {runs} runs, bpf_stats on)",
        median(nccl),
        median(entry),
        median(rt),
        median(ratio)
    );
}

/// Part `python`: the BPF time per call of the runtime's return program `rt_ret` (where the stack
/// is taken; the entry program does the same work either way) for `cudaFree` called through ctypes at a fixed Python depth, with
/// `--stacks` and native frames only, then with the Python frames walked too, per CPython.
fn python_walk(lib: &Path) {
    let iters = env_num("CAUSEWAY_BENCH_ITERS", 200_000) / 2;
    let depth = env_num("CAUSEWAY_BENCH_PY_DEPTH", 32);
    let rounds = env_num("CAUSEWAY_BENCH_RUNS", 9).clamp(1, 5);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/py/deep_calls.py");
    let (it, dp) = (iters.to_string(), depth.to_string());
    let args = [script.to_str().unwrap(), lib.to_str().unwrap(), it.as_str(), dp.as_str()];
    println!(
        "== the Python walk: BPF time of the return program (rt_ret) per cudaFree called at Python depth {depth} ({iters} calls, with bpf_stats on, median of {rounds} rounds) =="
    );
    let pythons = causeway_testdata::cpythons();
    if pythons.is_empty() {
        println!("no CPython 3.10+ installed: SKIPPED LOUDLY");
    }
    for py in pythons {
        let run = |python_frames: bool| {
            let opts = TraceOptions { stacks: true, python_frames, follow_mapped_libs: false, ..Default::default() };
            let mut report = None;
            let ns = bpf_program_ns(&["rt_ret"], || {
                report = Some(with_causeway_opts(lib, &py.path, &args, opts));
            });
            let (out, report) = report.unwrap();
            assert!(out.contains(&format!("CALLS {iters}")), "{}: the workload failed: {out}", py.path.display());
            let frees = report.events_by_op.get("cudaFree").copied().unwrap_or(0);
            assert_eq!((frees, report.lost()), (iters, 0), "each call recorded once: {:?}", report.losses);
            let walked = report.notes.iter().any(|n| n.starts_with("Python frames of pid"));
            let cut: Vec<&String> = report.notes.iter().filter(|n| n.contains("call(s):")).collect();
            assert_eq!((walked, cut.len()), (python_frames, 0), "{}: {:?}", py.path.display(), report.notes);
            ns.map(|v| v.iter().map(|(t, n)| t / n).sum::<f64>())
        };
        // interleaved rounds (native, then Python): the host's drifts hit both alike
        let (mut native, mut python, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (n, p) = (run(false), run(true));
            let (Some(n), Some(p)) = (n, p) else {
                println!("bpf_stats gave no figure (native {n:?}, Python {p:?}): SKIPPED LOUDLY");
                return;
            };
            native.push(n);
            python.push(p);
            ratios.push(p / n);
        }
        let (native, python) = (median(native), median(python));
        println!(
            "CPython 3.{:<2} native frames only {native:6.0} ns/call, with Python frames {python:6.0} ns/call: +{:.0} ns ({:.1} ns per Python frame), {:.2}x (median of {rounds} rounds' ratios)",
            py.minor,
            python - native,
            (python - native) / depth as f64,
            median(ratios)
        );
    }
}

/// A sink that only counts (`CAUSEWAY_BENCH_SINK=null`): separates the cost of storing from the cost
/// of tracing.
struct CountingSink(u64);

type SinkResult<T> = Result<T, causeway_backends::StoreError>;

#[async_trait::async_trait]
impl EventSink for CountingSink {
    async fn write_batch(&mut self, events: Vec<Event>) -> SinkResult<()> {
        self.0 += events.len() as u64;
        Ok(())
    }
    fn try_write_batch(&mut self, events: Vec<Event>) -> bool {
        self.0 += events.len() as u64;
        true
    }
    async fn write_stacks(&mut self, _: Vec<StackRecord>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_process_name(&mut self, _: u32, _: String, _: i64) -> SinkResult<()> {
        Ok(())
    }
    async fn write_launch_configs(&mut self, _: Vec<LaunchConfig>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_net_peers(&mut self, _: Vec<causeway_model::NetPeer>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_kernel_names(&mut self, _: Vec<KernelName>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_attachments(&mut self, _: Vec<LibraryAttach>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_nccl_calls(&mut self, _: Vec<causeway_model::NcclCall>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_gpu_samples(
        &mut self,
        _: Vec<causeway_model::GpuSample>,
        _: Vec<causeway_model::GpuProcessMemory>,
    ) -> SinkResult<()> {
        Ok(())
    }
    async fn write_gpu_timeline(&mut self, _: causeway_backends::GpuTimelinePart) -> SinkResult<()> {
        Ok(())
    }
    async fn write_under_way(&mut self, _: i64, _: Vec<Event>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_serving_samples(&mut self, _: Vec<causeway_model::ServingSample>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_process_cgroups(&mut self, _: Vec<causeway_model::ProcessCgroup>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_process_ranks(&mut self, _: Vec<causeway_model::ProcessRank>) -> SinkResult<()> {
        Ok(())
    }
    async fn write_footprint(&mut self, _: causeway_model::FootprintPart) -> SinkResult<()> {
        Ok(())
    }
    fn add_loss(&mut self, _: u8, _: LossKind, _: u64) {}
    async fn flush(&mut self) -> SinkResult<()> {
        Ok(())
    }
    async fn finish(self: Box<Self>, _: i64) -> SinkResult<SinkSummary> {
        Ok(SinkSummary { events_written: self.0, ..Default::default() })
    }
}

/// Part `attach`: the time to attach and to detach every probe of the mock runtime, driver and
/// NCCL libraries, on each uprobe path, interleaved (program loading apart: `Probes::load` is
/// timed separately, the multi path's CO-RE relocation included).
fn attach_cost(build: &Path, runs: usize) {
    use causeway_probes::{FoundLibrary, LibKind, LoadOptions, Probes};
    let libs =
        [("libcudart.so.12", LibKind::Runtime), ("libcuda.so.1", LibKind::Driver), ("libnccl.so.2", LibKind::Nccl)];
    // (load, attach, detach) seconds and the symbols attached, per path
    let once = |perf: bool| -> (f64, f64, f64, usize) {
        let t = Instant::now();
        let mut probes = Probes::load(&LoadOptions { perf_uprobes: perf, ..Default::default() }).expect("load");
        let load = t.elapsed().as_secs_f64();
        assert!(
            perf || !probes.notes.iter().any(|n| n.contains("uprobe_multi unavailable")),
            "the multi path: {:?}",
            probes.notes
        );
        let t = Instant::now();
        let mut symbols = 0;
        for (name, kind) in libs {
            let found = FoundLibrary { path: build.join(name), kind, how: "explicit".into() };
            symbols += probes.attach_library(&found).expect("attach");
        }
        let attach = t.elapsed().as_secs_f64();
        let t = Instant::now();
        probes.detach_all();
        (load, attach, t.elapsed().as_secs_f64(), symbols)
    };
    let _ = once(false); // warm-up
    let (mut multi, mut perf) = (Vec::new(), Vec::new());
    for _ in 0..runs.min(5) {
        multi.push(once(false));
        perf.push(once(true));
    }
    let median = |v: &[(f64, f64, f64, usize)], f: fn(&(f64, f64, f64, usize)) -> f64| -> f64 {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(|a, b| a.total_cmp(b));
        x[x.len().div_ceil(2) - 1]
    };
    println!("attach and detach ({} symbols of 3 libraries, median of {} interleaved runs):", multi[0].3, multi.len());
    for (what, f) in [
        ("load", (|r: &(f64, f64, f64, usize)| r.0) as fn(&(f64, f64, f64, usize)) -> f64),
        ("attach", |r| r.1),
        ("detach", |r| r.2),
    ] {
        let (m, p) = (median(&multi, f), median(&perf, f));
        println!(
            "  {what:<7} uprobe_multi {:>8.1} ms   perf events {:>8.1} ms   perf/multi {:>6.1}x",
            m * 1e3,
            p * 1e3,
            p / m.max(1e-9)
        );
    }
}
