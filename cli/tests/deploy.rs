//! The always-on recipes in `deploy/` run as written (root, eBPF): the systemd unit's ExecStart and
//! the container's CMD are taken from the files, their host paths moved into a scratch directory,
//! and run against a mock CUDA workload; one tracer per host (a second is refused, naming the
//! first); the trace is a series of files and a restart continues it with a new session.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{query_u64, require_root_to};

fn deploy_file(name: &str) -> String {
    let p = causeway_testdata::repo_root().join("deploy").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The unit's ExecStart, split as systemd splits a line without quotes.
fn unit_argv() -> Vec<String> {
    let unit = deploy_file("causeway.service");
    let line = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("the unit has an ExecStart");
    assert!(!line.contains('"') && !line.contains('\''), "the test splits on spaces: {line}");
    line.split_whitespace().map(String::from).collect()
}

/// The container's ENTRYPOINT + CMD (exec form: JSON arrays).
fn container_argv() -> Vec<String> {
    let recipe = deploy_file("Containerfile");
    let array = |key: &str| -> Vec<String> {
        let line = recipe.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_else(|| panic!("no {key}"));
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{key} is not the exec form: {e}"))
    };
    let mut argv = array("ENTRYPOINT ");
    argv.extend(array("CMD "));
    argv
}

/// The recipe's command with its binary replaced by the one under test, its host directories moved
/// under `root`, its metrics port chosen by the kernel and a duration added.
fn localized(argv: &[String], root: &Path, duration: &str) -> Command {
    assert!(argv[0].ends_with("/causeway"), "{argv:?}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_causeway"));
    for a in &argv[1..] {
        let a = a
            .replace("/var/lib/causeway", &root.join("state").to_string_lossy())
            .replace("/run/causeway", &root.join("run").to_string_lossy());
        let a = match a.rsplit_once(':') {
            Some((host, "9464")) => format!("{host}:0"),
            _ => a,
        };
        cmd.arg(a);
    }
    std::fs::create_dir_all(root.join("state")).unwrap();
    cmd.args(["--duration", duration]).env_remove("CAUSEWAY_LOG");
    cmd
}

fn steady(ms: u32) -> Child {
    Command::new(causeway_testdata::mock_cuda_build().join("steady"))
        .args(["--ms", &ms.to_string(), "--launches", "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn check_recipe(argv: Vec<String>, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state/host");
    let mut workload = steady(6000);
    std::thread::sleep(Duration::from_millis(300));

    let first = localized(&argv, dir.path(), "4s").stderr(Stdio::piped()).spawn().unwrap();
    let lock = dir.path().join("run/trace-all.lock");
    let start = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|s| s.contains("writing")) {
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: the first tracer never took the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    // one per host: a second one is refused at once, naming the first
    let second = localized(&argv, dir.path(), "4s").output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{what}: a second always-on tracer ran beside the first");
    assert!(
        err.contains("another `causeway trace --all`") && err.contains(&format!("pid {}", first.id())),
        "{what}: {err}"
    );

    let out = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {stderr}");
    assert!(!stderr.contains("off-CPU"), "{what}: --quiet printed the live table:\n{stderr}");
    assert!(stderr.contains("events written to"), "{what}: the final report is printed:\n{stderr}");
    let calls = query_u64(&db, &format!("SELECT count(*) FROM events WHERE pid = {} AND source = 1", workload.id()));
    assert!(calls > 0, "{what}: the running CUDA workload was not traced:\n{stderr}");

    assert!(db.join("000001.db").is_file(), "{what}: the trace is a series of files in {}", db.display());

    // a restart takes the released lock and continues the series with a new session in a new file
    let again = localized(&argv, dir.path(), "1s").output().unwrap();
    assert!(again.status.success(), "{what}: {}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(
        query_u64(&db, "SELECT count(*) FROM sessions"),
        2,
        "{what}: a restart continues the trace with a new session"
    );
    assert!(db.join("000002.db").is_file(), "{what}: the restart writes the next file of the series");
    let _ = workload.kill();
    let _ = workload.wait();
}

#[test]
fn the_systemd_unit_runs_as_written() {
    require_root_to("trace with eBPF");
    check_recipe(unit_argv(), "causeway.service");
}

#[test]
fn the_container_command_runs_as_written() {
    require_root_to("trace with eBPF");
    check_recipe(container_argv(), "Containerfile");
}

#[test]
fn the_unit_file_passes_systemd_analyze() {
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("SKIPPED: systemd-analyze is not installed on this machine (the unit still runs as written above)");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    // verify wants the binary to exist where ExecStart says: point it at the one under test
    let unit = deploy_file("causeway.service").replace("/usr/local/bin/causeway", env!("CARGO_BIN_EXE_causeway"));
    let path: PathBuf = dir.path().join("causeway.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze").args(["verify", "--man=no"]).arg(&path).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let ours: Vec<&str> = text.lines().filter(|l| l.contains("causeway.service")).collect();
    assert!(ours.is_empty(), "systemd-analyze verify found problems in the unit:\n{text}");
}
