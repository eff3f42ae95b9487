//! The Python label helper (`python/causeway.py`) against a socket that reads what it sends, on
//! every CPython this machine has (3.6 up: the helper promises 3.6): each line is a
//! `LabelMessage` the trace accepts, with the sender's pid and thread, CLOCK_MONOTONIC times
//! around the labeled block; without a listener the workload runs on untouched.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;

use causeway_probes::{monotonic_ns, LabelMessage};

fn helper_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("python")
}

/// `python3` and every pyenv interpreter.
fn interpreters() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("python3")];
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
        .unwrap_or_default()
        .join("versions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| d.flatten().map(|e| e.path().join("bin/python3")).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    found.sort();
    v.extend(found);
    v
}

const SCRIPT: &str = r#"
import os, sys, threading, time
import causeway
print(os.getpid(), flush=True)
with causeway.step(7):
    time.sleep(0.02)
def worker():
    with causeway.task(3):
        pass
    print(threading.get_native_id() if hasattr(threading, "get_native_id") else 0, flush=True)
t = threading.Thread(target=worker); t.start(); t.join()
"#;

#[test]
fn the_helper_sends_labels_the_trace_accepts_on_every_python() {
    let dir = tempfile::tempdir().unwrap();
    let mut ran = Vec::new();
    for (n, python) in interpreters().into_iter().enumerate() {
        let path = dir.path().join(format!("l{n}.sock"));
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let before = monotonic_ns();
        let child = Command::new(&python)
            .arg("-c")
            .arg(SCRIPT)
            .env("PYTHONPATH", helper_dir())
            .env("CAUSEWAY_LABELS", &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
        let (conn, _) = listener.accept().unwrap();
        let lines: Vec<LabelMessage> = std::io::BufReader::new(conn)
            .lines()
            .map(|l| serde_json::from_str(&l.unwrap()).expect("a LabelMessage"))
            .collect();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", python.display());
        let after = monotonic_ns();
        let printed: Vec<i64> =
            String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().parse().unwrap()).collect();
        assert_eq!(lines.len(), 2, "{}: {lines:?}", python.display());
        let (step, task) = (&lines[0], &lines[1]);
        assert_eq!((step.kind.as_str(), step.index, task.kind.as_str(), task.index), ("step", 7, "task", 3));
        assert_eq!(step.pid, Some(printed[0] as u32), "{}", python.display());
        assert_eq!(step.tid, step.pid, "the main thread");
        assert_ne!(task.tid, step.tid, "{}: the worker thread's own id", python.display());
        if printed[1] != 0 {
            assert_eq!(task.tid, Some(printed[1] as u32));
        }
        let (b, e) = (step.begin_ns.unwrap(), step.end_ns.unwrap());
        assert!(
            before <= b && b + 20_000_000 <= e && e <= after,
            "{}: {b}..{e} on our monotonic clock",
            python.display()
        );
        ran.push(python.display().to_string());
    }
    assert!(ran.len() >= 2, "python3 and at least one pyenv interpreter: {ran:?}");
    // no trace listening: the labeled block runs, nothing raised
    let out = Command::new("python3")
        .args(["-c", "import causeway\nwith causeway.step(1):\n    x = 1\nprint(causeway.label('epoch', 2, 0, 1))"])
        .env("PYTHONPATH", helper_dir())
        .env("CAUSEWAY_LABELS", dir.path().join("nobody.sock"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "False", "the send said it went nowhere");
}
