//! A job that hangs, as a user meets it (root, eBPF): mock-cuda's `gpuloop` whose 50th kernel never
//! ends (`MOCK_CUDA_HANG_AT`), so the `cudaStreamSynchronize` behind it never returns. `trace
//! --duration` stops on time and leaves the job running (and says so, with its pid); the call in
//! flight and the thread's open sleep are in the trace; `explain` names the hang first: the call,
//! how long, since which step, the thread asleep, the kernel it waits for.

mod common;

use std::time::{Duration, Instant};

use common::{causeway, chain_words, query_rows, query_u64, require_root_to};
use serde_json::Value;

/// Kills the job when the test ends, whatever happened.
struct Job(u32);

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: kill(2) of a pid this test started (through the tracer).
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

/// Trace (`trace_args`, into `db`) gpuloop whose `hang_at`-th kernel never ends; the trace's exit
/// status and stderr. The job inherits the tracer's stderr and outlives it: a file beside `db`,
/// not a pipe that would stay open.
fn trace_hung_loop(db: &std::path::Path, hang_at: &str, trace_args: &[&str]) -> (std::process::ExitStatus, String) {
    let log = db.with_extension("log");
    let status = causeway()
        .env("MOCK_CUDA_HANG_AT", hang_at)
        .env("MOCK_CUDA_KERNEL_US", "1000")
        .arg("trace")
        .args(trace_args)
        .args(["--nvml-hz", "0", "--db"])
        .arg(db)
        .arg("--")
        .arg(causeway_testdata::mock_cuda_build().join("gpuloop"))
        .args(["--steps", "400", "--kernels", "1", "--host-us", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    (status, std::fs::read_to_string(&log).unwrap())
}

/// The pid of the launched command, as the trace's note about it at the end names it.
fn command_pid(stderr: &str) -> u32 {
    stderr
        .split("the command (pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the trace names the command still running at its end, with its pid: {stderr}"))
}

#[test]
fn a_synchronize_that_never_returns_is_named_first_and_the_job_is_left_running() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hang.db");
    let started = Instant::now();
    let (out, stderr) = trace_hung_loop(&db, "50", &["--duration", "3s", "--stacks"]);
    let took = started.elapsed();
    let pid = command_pid(&stderr);
    let _job = Job(pid);
    assert!(out.success(), "{stderr}");
    assert!(took < Duration::from_secs(20), "--duration 3s stopped the trace (it took {took:?})");
    // SAFETY: kill(pid, 0) only asks whether the process exists.
    assert_eq!(unsafe { libc::kill(pid as i32, 0) }, 0, "the job was left running");
    assert!(stderr.contains("was still in cudaStreamSync when the trace ended"), "{stderr}");

    // the call in flight (runtime and driver) runs to the end; the thread's sleep is closed there
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE ret_code = -1"), 2);
    let end = query_u64(&db, "SELECT max(timestamp + duration) FROM events WHERE ret_code = -1");
    let open = query_u64(
        &db,
        &format!(
            "SELECT count(*) FROM events WHERE source = 3 AND op = 1 AND tid = {pid} AND timestamp >= {end} - 1000000"
        ),
    );
    assert_eq!(open, 1, "the launch thread's open sleep, closed at the end");
    assert_eq!(query_u64(&db, "SELECT count(*) FROM under_way"), 0, "a finished trace's last look is in events");

    let out = causeway().args(["explain", "--json", "--db"]).arg(&db).output().unwrap();
    assert!(out.status.success());
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &e["chains"][0];
    assert_eq!((c["kind"].as_str(), c["cause"].as_str()), (Some("hang"), Some("never_returned")), "{c}");
    let s = &chain_words(c);
    for want in [
        "cudaStreamSync for",
        "(since step 49)",
        "had not returned when the trace ended",
        "asleep",
        "gpuloop_",
        "its code then: ",
        "its thread's last call with a stack",
    ] {
        assert!(s.contains(want), "{want:?} in {s}");
    }
    // its figure is what its SQL returns
    let sql = c["evidence"]["sql"].as_str().unwrap();
    assert_eq!(query_u64(&db, sql) as i64, c["evidence"]["value"].as_i64().unwrap(), "{sql}");
    assert!(c["stall_ns"].as_i64().unwrap() > 2_000_000_000, "{c}");
    // `stats` lists the calls in flight per process
    let out = causeway().args(["stats", "--json", "--db"]).arg(&db).output().unwrap();
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let in_flight = &stats["failures"][0]["in_flight"];
    assert!(in_flight.as_array().unwrap().iter().any(|c| c["op"] == "cudaStreamSync"), "{in_flight}");
}

/// With `--kill-on-stop` the hung job is ended when the trace stops (its call in flight written
/// first), and the trace says how.
#[test]
fn kill_on_stop_ends_the_hung_job_after_writing_its_call_in_flight() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("killed.db");
    let (status, stderr) = trace_hung_loop(&db, "5", &["--duration", "1s", "--kill-on-stop"]);
    assert!(status.success(), "{stderr}");
    let pid = command_pid(&stderr);
    let _job = Job(pid);
    assert!(stderr.contains("ended with SIGTERM (--kill-on-stop), exit status 143"), "{stderr}");
    // SAFETY: kill(pid, 0) only asks whether the process exists.
    assert_ne!(unsafe { libc::kill(pid as i32, 0) }, 0, "the job is gone");
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE ret_code = -1"), 2, "written before the end");
}

/// Three ranks; rank 2 sleeps for good in its host code before all-reduce #41 (`--stuck 2
/// --stuck-at 40`): the first chain names the collective, the ranks that entered it and waited,
/// and the rank that never did with what it was doing. The same job cut short by `--duration`
/// while it runs normally names no hang (ranks out of step at the end are not one).
#[test]
fn the_rank_that_never_arrived_is_named_and_a_trace_cut_short_is_no_hang() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let build = causeway_testdata::mock_cuda_build();
    let run = |name: &str, extra: &[&str]| {
        let db = dir.path().join(format!("{name}.db"));
        let log = dir.path().join(format!("{name}.log"));
        let status = causeway()
            .env_remove("MOCK_NCCL_TIMEOUT_S")
            .args(["trace", "--duration", "3s", "--kill-on-stop", "--nvml-hz", "0", "--db"])
            .arg(&db)
            .arg("--")
            .arg(build.join("nccl_ranks"))
            .args(["--ranks", "3", "--steps", "2000", "--bytes", "1048576"])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .status()
            .unwrap();
        // the ranks outlive their parent (the command the trace ended)
        let pids = common::query_rows(&db, "SELECT DISTINCT pid FROM nccl_calls");
        let _ranks: Vec<Job> = pids.iter().filter_map(|r| r[0].as_u64()).map(|p| Job(p as u32)).collect();
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert!(status.success(), "{stderr}");
        let out = causeway().args(["explain", "--json", "--db"]).arg(&db).output().unwrap();
        assert!(out.status.success());
        (db, serde_json::from_slice::<Value>(&out.stdout).unwrap())
    };

    let (db, e) = run("stuck", &["--stuck", "2", "--stuck-at", "40"]);
    let c = &e["chains"][0];
    assert_eq!((c["kind"].as_str(), c["cause"].as_str()), (Some("hang"), Some("rank_never_arrived")), "{c}");
    assert_eq!(c["op"], "ncclAllReduce #41", "{c}");
    let s = &chain_words(c);
    for want in ["rank 0 (pid", "rank 1 (pid", "entered it and waited", "rank 2 (pid", "never entered it", "asleep"] {
        assert!(s.contains(want), "{want:?} in {s}");
    }
    let sql = c["evidence"]["sql"].as_str().unwrap();
    assert_eq!(query_u64(&db, sql), 2, "two ranks entered it: {sql}");
    // the waiting ranks' own calls follow it
    let waiting = e["chains"].as_array().unwrap().iter().filter(|c| c["cause"] == "never_returned").count();
    assert_eq!(waiting, 2, "{}", e["chains"]);

    let (_db, e) = run("clean", &[]);
    let hangs: Vec<&Value> = e["chains"].as_array().unwrap().iter().filter(|c| c["kind"] == "hang").collect();
    assert!(hangs.is_empty(), "a job cut short is not hung: {hangs:?}");
}

/// While the trace runs, the calls in flight for a second or more are written every
/// `--in-flight-every` (`under_way`): `explain` names the hang on the trace being written, and the
/// hang stays in the trace when the tracer is killed (no end to write it then).
#[test]
fn a_hang_is_in_the_trace_while_it_runs_and_after_the_tracer_is_killed() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let log = dir.path().join("live.log");
    let mut tracer = causeway()
        .env("MOCK_CUDA_HANG_AT", "5")
        .env("MOCK_CUDA_KERNEL_US", "1000")
        .args(["trace", "--in-flight-every", "1s", "--nvml-hz", "0", "--quiet", "--db"])
        .arg(&db)
        .arg("--")
        .arg(causeway_testdata::mock_cuda_build().join("gpuloop"))
        .args(["--steps", "400", "--kernels", "1", "--host-us", "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    struct Tracer<'a>(&'a mut std::process::Child);
    impl Drop for Tracer<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let tracer = Tracer(&mut tracer);
    // the look that finds the synchronize a second old: at most two looks after the hang
    let deadline = Instant::now() + Duration::from_secs(30);
    let calls = "SELECT count(*) FROM under_way WHERE ret_code = -1 AND source = 1";
    while !db.exists()
        || query_rows(&db, "SELECT name FROM sqlite_master WHERE name = 'under_way'").is_empty()
        || query_u64(&db, calls) == 0
    {
        assert!(Instant::now() < deadline, "no call in flight written: {}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = query_u64(&db, "SELECT pid FROM under_way WHERE ret_code = -1 LIMIT 1") as u32;
    let _job = Job(pid);
    let hang_of = |db: &std::path::Path| -> Value {
        let out = causeway().args(["explain", "--json", "--db"]).arg(db).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let e: Value = serde_json::from_slice(&out.stdout).unwrap();
        e["chains"][0].clone()
    };
    // read while it is written
    let c = hang_of(&db);
    assert_eq!((c["kind"].as_str(), c["cause"].as_str()), (Some("hang"), Some("never_returned")), "{c}");
    let s = &chain_words(&c);
    assert!(s.contains("cudaStreamSync for") && s.contains("at the tracer's last look"), "{s}");

    // the tracer killed: nothing ends the session, the last look stays
    let _ = tracer.0.kill();
    let _ = tracer.0.wait();
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE ret_code = -1"), 0, "no end was written");
    let c = hang_of(&db);
    assert_eq!(c["cause"], "never_returned", "{c}");
    let s = &chain_words(&c);
    assert!(s.contains("at the tracer's last look") && s.contains("asleep"), "{s}");
    let sql = c["evidence"]["sql"].as_str().unwrap();
    assert!(sql.contains("FROM under_way"), "{sql}");
    assert_eq!(query_u64(&db, sql) as i64, c["evidence"]["value"].as_i64().unwrap(), "{sql}");
    assert!(c["evidence"]["event_ids"].as_array().unwrap().iter().all(|id| id != -1), "{c}");
}
