//! Tracing onto a disk that fills up (a 1 MiB tmpfs, root): the trace stops writing with one error
//! line, goes on to the end, says how many events it wrote and how many it lost, and the file it
//! leaves opens with exactly the events it said it wrote.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{causeway, query_u64, require_root_to};

/// A tmpfs of `size` mounted on a temporary directory, unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs failed");
        SmallDisk { dir }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn mock_train() -> PathBuf {
    causeway_testdata::mock_cuda_build().join("train")
}

/// Trace the mock training loop into `db` on a disk too small for it, with `extra` flags; the
/// trace must end cleanly with one error line and a report of what was written and lost. Returns
/// (stderr, events written).
fn trace_until_the_disk_is_full(db: &Path, extra: &[&str]) -> (String, u64) {
    let out = causeway()
        .env_remove("CAUSEWAY_LOG")
        .args(["trace", "--nvml-hz", "0"])
        .args(extra)
        .arg("--db")
        .arg(db)
        .arg("--")
        .arg(mock_train())
        .args(["--iters", "400"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "a full disk is not a failed trace:\n{stderr}");
    let errors = stderr.lines().filter(|l| l.contains("ERROR")).count();
    assert!(errors <= 2, "one error when the disk fills up, not one per batch ({errors}):\n{stderr}");
    // "causeway: N events written to FILE in T; M lost (source 1 write: K, ...)"
    let line = stderr.lines().find(|l| l.contains(" events written to ")).expect("the summary line");
    let written: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(line.contains("write:"), "the events after the disk filled up are counted as lost: {line}");
    let lost: u64 = line.split("; ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(written > 0 && lost > 0, "{line}");
    (stderr, written)
}

#[test]
fn a_full_disk_stops_writing_cleanly_and_the_trace_still_opens() {
    require_root_to("trace with eBPF and mount a tmpfs");
    let disk = SmallDisk::new("1m");
    let db = disk.path().join("t.db");
    let (stderr, written) = trace_until_the_disk_is_full(&db, &[]);
    assert!(stderr.contains("the disk filled up"), "the report says why events were lost:\n{stderr}");

    // the file opens (through its WAL when the session could not be closed) with what was written
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events"), written, "the events the report says were written");
    let stats = causeway().args(["stats", "--db"]).arg(&db).output().unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    assert!(String::from_utf8_lossy(&stats.stdout).contains("cudaLaunchKernel"));
}

#[test]
fn a_full_disk_under_a_series_stops_writing_cleanly_and_every_file_still_opens() {
    require_root_to("trace with eBPF and mount a tmpfs");
    let disk = SmallDisk::new("1m");
    let series = disk.path().join("host");
    let (stderr, written) = trace_until_the_disk_is_full(&series, &["--max-file-size", "128K"]);
    let parts: Vec<_> = std::fs::read_dir(&series)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "db"))
        .collect();
    assert!(parts.len() >= 2, "the series rolled over before the disk filled up: {parts:?}\n{stderr}");
    // every file opens alone, and together they hold what the report says was written
    let stored: u64 = parts.iter().map(|p| query_u64(p, "SELECT count(*) FROM events")).sum();
    assert_eq!(stored, written, "the files hold what the report says was written");
    assert_eq!(query_u64(&series, "SELECT count(*) FROM events"), written, "the series opens with them all");
}
