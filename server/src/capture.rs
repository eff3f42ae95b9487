//! `capture_trace` (only with `causeway mcp --allow-capture`): record a NEW trace from the agent with
//! [`causeway_probes::trace`] — the pids it names, or a program from this server's allow-list — for
//! a bounded time, into a new DB under the capture directory, then add it to the [`TraceSet`] so the
//! other tools can query it by name or index. No tracing logic here: validation, the file, progress
//! and the clean-up of a launched program.
//!
//! Safety model: nothing is traced or launched unless the operator passed `--allow-capture`; a
//! command must be a program the operator listed with `--capture-allow` (matched by canonical path
//! or by its file name), run directly with the arguments as a list (never a shell), stdin from
//! /dev/null, stdout to a log file beside the trace, and stopped (SIGTERM, then SIGKILL) when the
//! window ends; one capture at a time; the window is 1 to 120 s; every file written is new
//! (existing data is never touched).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use causeway_backends::SqliteSink;
use causeway_probes::ProbeError;

use crate::args::CaptureArgs;
use crate::outputs::{CaptureOutput, CapturedLibrary};
use crate::sanitize::UNTRUSTED_NOTE;
use crate::tools::CallCtx;
use crate::traces::TraceSet;

pub const NAME: &str = "capture_trace";
pub const TITLE: &str = "Record a new trace (eBPF)";
/// Window of a capture without `duration_s`, and the bounds of `duration_s`.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
pub const MIN_DURATION: Duration = Duration::from_secs(1);
pub const MAX_DURATION: Duration = Duration::from_secs(120);
/// Time allowed beyond the window for loading the probes and finishing the DB.
pub const SETUP_MARGIN: Duration = Duration::from_secs(60);
/// Most pids one capture may name.
pub const MAX_PIDS: usize = 64;
/// How long a launched program gets to exit after SIGTERM when the window ends.
const TERM_GRACE: Duration = Duration::from_secs(3);

/// One program the operator allowed (`--capture-allow`).
#[derive(Debug, Clone)]
struct Allowed {
    given: String,
    path: PathBuf,
}

/// What the operator allowed: the programs that may be launched, and where new traces go.
pub struct CaptureConfig {
    allowed: Vec<Allowed>,
    /// `--capture-dir`, or a fresh private temp dir made at the first capture.
    dir: Option<PathBuf>,
    made_dir: OnceLock<PathBuf>,
    busy: Mutex<()>,
    seq: AtomicU64,
}

impl CaptureConfig {
    /// Check every allowed program (an executable file, kept by canonical path) and create `dir`
    /// when given and missing.
    pub fn new(allow: Vec<PathBuf>, dir: Option<PathBuf>) -> anyhow::Result<CaptureConfig> {
        let mut allowed = Vec::new();
        for p in allow {
            let path =
                std::fs::canonicalize(&p).map_err(|e| anyhow::anyhow!("--capture-allow {}: {e}", p.display()))?;
            anyhow::ensure!(is_executable(&path), "--capture-allow {}: not an executable file", p.display());
            allowed.push(Allowed { given: p.to_string_lossy().into_owned(), path });
        }
        if let Some(d) = &dir {
            std::fs::create_dir_all(d).map_err(|e| anyhow::anyhow!("--capture-dir {}: {e}", d.display()))?;
            anyhow::ensure!(d.is_dir(), "--capture-dir {}: not a directory", d.display());
        }
        Ok(CaptureConfig { allowed, dir, made_dir: OnceLock::new(), busy: Mutex::new(()), seq: AtomicU64::new(0) })
    }

    /// The tool description, naming the allowed programs.
    pub fn description(&self) -> String {
        let programs = if self.allowed.is_empty() {
            "none (this server traces running pids only)".to_string()
        } else {
            self.allowed.iter().map(|a| a.path.display().to_string()).collect::<Vec<_>>().join(", ")
        };
        format!(
            "Records a NEW trace with eBPF (CUDA calls, scheduler, block I/O) of running processes (`pids`, their children \
             followed) or of a program launched from this server's allow-list (`command`: the program, then its arguments, \
             run without a shell; stopped when the window ends), for duration_s seconds (default {}, {} to {}). The trace \
             goes into a new DB, joins list_traces, and its `trace` name works with every other tool: follow with \
             get_trace_stats and get_causal_chains. Reports progress while it records. Needs root. Allowed programs: {programs}.",
            DEFAULT_DURATION.as_secs(),
            MIN_DURATION.as_secs(),
            MAX_DURATION.as_secs()
        )
    }

    /// The allowed program `requested` means: the same canonical path, or the file name of exactly
    /// one allowed program.
    pub fn resolve_program(&self, requested: &str) -> Result<PathBuf, String> {
        let req = requested.trim();
        let canonical = if req.contains('/') { std::fs::canonicalize(req).ok() } else { None };
        let found: Vec<&Allowed> = self
            .allowed
            .iter()
            .filter(|a| {
                a.given == req
                    || canonical.as_ref() == Some(&a.path)
                    || (!req.contains('/') && a.path.file_name().is_some_and(|f| f.to_string_lossy() == req))
            })
            .collect();
        match found.as_slice() {
            [one] => Ok(one.path.clone()),
            [] if self.allowed.is_empty() => Err(format!(
                "'{req}' is not an allowed program: this server allows no command (start it with --capture-allow PROGRAM), so give pids of running processes instead"
            )),
            [] => Err(format!(
                "'{req}' is not an allowed program: command[0] must be one of {} (the operator's --capture-allow list), or give pids instead",
                self.allowed.iter().map(|a| a.path.display().to_string()).collect::<Vec<_>>().join(", ")
            )),
            _ => Err(format!("'{req}' names several allowed programs: give the full path")),
        }
    }

    fn dir(&self) -> Result<PathBuf, String> {
        if let Some(d) = &self.dir {
            return Ok(d.clone());
        }
        if let Some(d) = self.made_dir.get() {
            return Ok(d.clone());
        }
        let d = private_temp_dir().map_err(|e| {
            format!(
                "cannot create a capture directory in {}: {e}; start the server with --capture-dir DIR",
                std::env::temp_dir().display()
            )
        })?;
        Ok(self.made_dir.get_or_init(|| d).clone())
    }

    /// A DB path in the capture dir that does not exist yet.
    fn new_db_path(&self) -> Result<PathBuf, String> {
        let dir = self.dir()?;
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        loop {
            let n = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
            let p = dir.join(format!("capture-{secs}-{}-{n}.db", std::process::id()));
            if !p.exists() {
                return Ok(p);
            }
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A new directory only this user can enter, under the system temp dir.
fn private_temp_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    for i in 0..100u32 {
        let d = base.join(format!("causeway-captures-{}-{nanos}-{i}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free name"))
}

/// The validated request: what to trace and for how long.
#[derive(Debug, PartialEq)]
struct Plan {
    pids: Vec<u32>,
    argv: Vec<String>,
    duration: Duration,
    stacks: bool,
}

fn plan(config: &CaptureConfig, a: CaptureArgs) -> Result<Plan, String> {
    let secs = a.duration_s.unwrap_or(DEFAULT_DURATION.as_secs_f64());
    if !secs.is_finite() || secs < MIN_DURATION.as_secs_f64() || secs > MAX_DURATION.as_secs_f64() {
        return Err(format!(
            "duration_s {secs} is out of range: give {} to {} seconds (default {})",
            MIN_DURATION.as_secs(),
            MAX_DURATION.as_secs(),
            DEFAULT_DURATION.as_secs()
        ));
    }
    let mut pids = a.pids.unwrap_or_default();
    pids.sort_unstable();
    pids.dedup();
    let command = a.command.unwrap_or_default();
    if pids.is_empty() && command.is_empty() {
        return Err("nothing to trace: give pids (running processes, e.g. from `ps`) or command (an allowed program, then its arguments)".into());
    }
    if pids.len() > MAX_PIDS {
        return Err(format!(
            "{} pids given: at most {MAX_PIDS} per capture (their children are followed anyway)",
            pids.len()
        ));
    }
    for &p in &pids {
        if p == 0 || !Path::new(&format!("/proc/{p}")).exists() {
            return Err(format!("no process {p} on this host: give the pid of a running process (list_traces shows traced pids of earlier traces)"));
        }
    }
    let mut argv = Vec::new();
    if let Some(first) = command.first() {
        argv.push(config.resolve_program(first)?.to_string_lossy().into_owned());
        for arg in &command[1..] {
            if arg.contains('\0') {
                return Err("a command argument contains a NUL byte".into());
            }
            argv.push(arg.clone());
        }
    }
    Ok(Plan { pids, argv, duration: Duration::from_secs_f64(secs), stacks: a.stacks.unwrap_or(false) })
}

/// Record one trace and add it to `set`.
pub fn capture(config: &CaptureConfig, set: &TraceSet, a: CaptureArgs, ctx: &CallCtx) -> Result<CaptureOutput, String> {
    let plan = plan(config, a)?;
    let _one_at_a_time = config
        .busy
        .try_lock()
        .map_err(|_| "another capture is running on this server: wait for it to finish, then call again".to_string())?;
    let path = config.new_db_path()?;
    let stdout_log = (!plan.argv.is_empty()).then(|| path.with_extension("stdout.log"));
    let session =
        causeway_probes::new_session_info(&plan.pids, &plan.argv, format!("stacks={} host=true via=mcp", plan.stacks));
    let sink = SqliteSink::create(&path, session).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let opts = causeway_probes::TraceOptions {
        pids: plan.pids.clone(),
        command: plan.argv.clone(),
        command_stdout: stdout_log.clone(),
        command_stdin_null: true,
        duration_ns: Some(plan.duration.as_nanos() as i64),
        stacks: plan.stacks,
        host_probes: true,
        drop_on_backpressure: true,
        ..Default::default()
    };
    let total_ms = plan.duration.as_millis() as f64;
    ctx.progress.report(0.0, Some(total_ms), format!("{NAME}: loading the probes"));
    let started = Instant::now();
    let result = run_trace(opts, sink, ctx, total_ms);
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            for p in [Some(path.clone()), Some(wal(&path, "-wal")), Some(wal(&path, "-shm")), stdout_log.clone()]
                .into_iter()
                .flatten()
            {
                let _ = std::fs::remove_file(p);
            }
            return Err(failure(&e));
        }
    };
    let mut command_stopped = false;
    if let (Some(pid), None) = (report.command_pid, report.command_exit) {
        command_stopped = stop_child(pid);
    }
    let entry = set.add(&path);
    entry.store().map_err(|e| format!("the capture finished but {} cannot be opened: {e}", path.display()))?;
    let lost = report.lost();
    let secs = started.elapsed().as_secs_f64();
    let summary = format!(
        "recorded trace {} (index {}): {} events in {:.1} s, {} lost, pids {:?}{}; query it with trace: \"{}\"",
        entry.name,
        entry.index,
        report.events_written,
        secs,
        lost,
        report.traced_pids,
        match (report.command_exit, command_stopped) {
            (Some(code), _) => format!(", the command exited with {code}"),
            (None, true) => ", the command was stopped at the end of the window".into(),
            _ => String::new(),
        },
        entry.name
    );
    let hint = if report.libraries.is_empty() {
        Some("no CUDA library was probed: the targets did not load libcudart/libcuda during the window (see notes); host events were still recorded".into())
    } else if report.events_written == 0 {
        Some("no event recorded: were the processes busy during the window?".into())
    } else {
        Some(format!("next: get_trace_stats and get_causal_chains with trace \"{}\"", entry.name))
    };
    Ok(CaptureOutput {
        summary,
        trace: entry.name.clone(),
        index: entry.index,
        path: path.clone(),
        duration_s: (secs * 1000.0).round() / 1000.0,
        events_written: report.events_written,
        lost,
        events_by_op: report.events_by_op,
        losses: report.losses,
        traced_pids: report.traced_pids,
        command: plan.argv,
        command_pid: report.command_pid,
        command_exit: report.command_exit,
        command_stopped,
        command_stdout: stdout_log,
        libraries: report
            .libraries
            .iter()
            .map(|l| CapturedLibrary { path: l.path.clone(), how: l.how.clone(), symbols: l.symbols.len() })
            .collect(),
        host_probes: report.host_probes,
        notes: report.notes,
        hint,
        untrusted: UNTRUSTED_NOTE.to_string(),
    })
}

fn wal(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Drive [`causeway_probes::trace`] on its own runtime (this is a blocking thread), posting
/// progress and raising the stop flag when the call is cancelled (or runs past its limit).
fn run_trace(
    opts: causeway_probes::TraceOptions,
    sink: SqliteSink,
    ctx: &CallCtx,
    total_ms: f64,
) -> Result<causeway_probes::TraceReport, ProbeError> {
    let stop = opts.stop.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let progress = ctx.progress.clone();
    let cancel = ctx.cancel.clone();
    rt.block_on(async move {
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let done = done.clone();
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    if cancel.is_cancelled() {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let r = causeway_probes::trace(opts, Box::new(sink), move |live| {
            let ms = (live.elapsed_ns as f64 / 1e6).min(total_ms);
            progress.report(
                ms,
                Some(total_ms),
                format!(
                    "{NAME}: {:.1} s of {:.0} s, {} events, {} lost, pids {:?}",
                    ms / 1000.0,
                    total_ms / 1000.0,
                    live.events,
                    live.lost,
                    live.traced_pids
                ),
            );
        })
        .await;
        done.store(true, Ordering::Relaxed);
        let _ = watcher.await;
        r
    })
}

/// The error of a failed capture, with what to do about it.
fn failure(e: &ProbeError) -> String {
    let hint = match e {
        ProbeError::NotPermitted { .. } => {
            "restart `causeway mcp --allow-capture` as root (or with CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE)"
        }
        ProbeError::NoSuchProcess(_) => "the process has exited: list_traces or ps for a live pid",
        ProbeError::Command { .. } => "check the program path against --capture-allow and that it runs",
        ProbeError::Storage(_) => "check free space and permissions under --capture-dir",
        _ => "get_check lists what this host can trace (BTF, uprobes, tracefs, BPF loading)",
    };
    format!("capture failed: {e}; {hint}")
}

/// Stop a launched program still running when the window ended: SIGTERM, then SIGKILL after a
/// grace period; reaped either way. True when it had to be stopped.
fn stop_child(pid: u32) -> bool {
    let pid = pid as i32;
    let reaped = || {
        let mut status = 0;
        // SAFETY: waitpid on a child of this process, without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        r == pid || r < 0
    };
    if reaped() {
        return false;
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + TERM_GRACE;
    while Instant::now() < deadline {
        if reaped() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut status = 0;
    // SAFETY: a blocking wait on our own child, which SIGKILL ends.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CaptureConfig {
        CaptureConfig::new(vec![PathBuf::from("/bin/sleep")], Some(std::env::temp_dir())).unwrap()
    }

    fn args(v: serde_json::Value) -> CaptureArgs {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn bad_requests_are_refused_with_what_to_do() {
        let c = config();
        let e = plan(&c, args(serde_json::json!({}))).unwrap_err();
        assert!(e.contains("nothing to trace") && e.contains("pids"), "{e}");
        let e = plan(&c, args(serde_json::json!({"pids": [999_999_999]}))).unwrap_err();
        assert!(e.contains("no process 999999999"), "{e}");
        for d in [0.5, 121.0, -1.0] {
            let e = plan(&c, args(serde_json::json!({"pids": [std::process::id()], "duration_s": d}))).unwrap_err();
            assert!(e.contains("out of range") && e.contains("1 to 120"), "{e}");
        }
        let e = plan(&c, args(serde_json::json!({"command": ["/bin/sh", "-c", "id"]}))).unwrap_err();
        assert!(e.contains("not an allowed program") && e.contains("sleep"), "{e}");
        let none = CaptureConfig::new(Vec::new(), None).unwrap();
        let e = plan(&none, args(serde_json::json!({"command": ["sleep", "1"]}))).unwrap_err();
        assert!(e.contains("allows no command"), "{e}");
    }

    #[test]
    fn allowed_programs_match_by_path_or_file_name_and_run_by_canonical_path() {
        let c = config();
        let sleep = std::fs::canonicalize("/bin/sleep").unwrap();
        let p = plan(
            &c,
            args(serde_json::json!({"command": ["sleep", "5"], "pids": [std::process::id(), std::process::id()]})),
        )
        .unwrap();
        assert_eq!(p.argv, vec![sleep.to_string_lossy().into_owned(), "5".into()]);
        assert_eq!((p.pids, p.duration, p.stacks), (vec![std::process::id()], DEFAULT_DURATION, false));
        assert_eq!(c.resolve_program(&sleep.to_string_lossy()).unwrap(), sleep);
        assert!(c.resolve_program("/tmp/../bin/sleep").is_ok());
        assert!(c.resolve_program("sleepy").is_err());
        assert!(CaptureConfig::new(vec![PathBuf::from("/nonexistent/prog")], None).is_err());
        assert!(c.description().contains(&sleep.to_string_lossy().into_owned()));
    }

    #[test]
    fn new_db_paths_are_unique_in_a_private_dir() {
        let c = CaptureConfig::new(Vec::new(), None).unwrap();
        let (a, b) = (c.new_db_path().unwrap(), c.new_db_path().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.parent(), b.parent());
        let dir = a.parent().unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::remove_dir(dir).unwrap();
    }

    #[test]
    fn a_stopped_child_is_terminated_and_reaped() {
        let child = std::process::Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(stop_child(pid));
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        std::mem::forget(child);
    }
}
