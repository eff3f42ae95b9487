//! Container and cgroup attribution, live (root, eBPF): one workload runs in a cgroup laid out as
//! Docker lays out a container's (with the container's name in a Docker state directory under
//! `--container-root`), another outside it; the trace records each process's cgroup with the id
//! its events carry, names the container, and `stats --per-process` shows it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{causeway, query_rows, require_root_to};

const ID: &str = "c0ffee00d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f";

/// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
fn v2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo").ok()?.lines().find_map(|l| {
        let (before, after) = l.split_once(" - ")?;
        (after.split_whitespace().next()? == "cgroup2")
            .then(|| PathBuf::from(before.split_whitespace().nth(4).unwrap()))
    })
}

fn steady(in_cgroup: Option<&Path>) -> Child {
    let program = causeway_testdata::mock_cuda_build().join("steady");
    let mut sh = Command::new("sh");
    let join = in_cgroup.map(|cg| format!("echo $$ > {}/cgroup.procs && ", cg.display())).unwrap_or_default();
    sh.arg("-c").arg(format!("{join}exec {} --ms 6000 --launches 2", program.display()));
    sh.stdout(Stdio::null()).spawn().unwrap()
}

fn wait_for_cuda(pid: u32) {
    let start = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libcudart")) {
        assert!(start.elapsed() < Duration::from_secs(10), "pid {pid} never mapped libcudart");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn each_process_is_attributed_to_its_cgroup_and_container() {
    require_root_to("trace with eBPF and make cgroups");
    let Some(mount) = v2_mount() else {
        eprintln!("SKIPPED: this kernel has no cgroup v2 hierarchy mounted (the events carry no cgroup v2 id)");
        return;
    };
    let cgroup = mount.join(format!("docker-{ID}.scope"));
    let _ = std::fs::remove_dir(&cgroup);
    std::fs::create_dir(&cgroup).unwrap_or_else(|e| panic!("mkdir {}: {e}", cgroup.display()));
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join(format!("var/lib/docker/containers/{ID}"));
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("config.v2.json"), r#"{"Name": "/web", "Config": {"Labels": {}}}"#).unwrap();

    let mut inside = steady(Some(&cgroup));
    let mut outside = steady(None);
    wait_for_cuda(inside.id());
    wait_for_cuda(outside.id());
    let db = root.path().join("t.db");
    let out = causeway()
        .args(["trace", "--quiet", "--nvml-hz", "0", "--duration", "2s", "--container-root"])
        .arg(root.path())
        .args(["--pid", &inside.id().to_string(), "--pid", &outside.id().to_string(), "--db"])
        .arg(&db)
        .output()
        .unwrap();
    for c in [&mut inside, &mut outside] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir(&cgroup);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let row = |pid: u32| {
        let r = query_rows(
            &db,
            &format!("SELECT cgroup_id, path, runtime, container_id, container FROM process_cgroups WHERE pid = {pid}"),
        );
        assert_eq!(r.len(), 1, "pid {pid} has its cgroup recorded");
        r[0].clone()
    };
    let (a, b) = (row(inside.id()), row(outside.id()));
    assert_eq!(a[1], format!("/docker-{ID}.scope"));
    assert_eq!((a[2].as_str(), a[3].as_str(), a[4].as_str()), (Some("docker"), Some(ID), Some("web")));
    assert_ne!(a[0], b[0], "the two processes are in different cgroups");
    assert_ne!(b[2], "docker");
    for (pid, cg) in [(inside.id(), &a[0]), (outside.id(), &b[0])] {
        let same = query_rows(
            &db,
            &format!("SELECT count(*) FROM events WHERE pid = {pid} AND source = 1 AND cgroup_id = {cg}"),
        );
        let other = query_rows(
            &db,
            &format!("SELECT count(*) FROM events WHERE pid = {pid} AND source = 1 AND cgroup_id != {cg}"),
        );
        assert!(same[0][0].as_u64().unwrap() > 0, "pid {pid}: its calls carry the recorded cgroup id {cg}");
        assert_eq!(other[0][0].as_u64(), Some(0), "pid {pid}: no call carries another cgroup id");
    }
    let stats = causeway().args(["stats", "--per-process", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains(&format!("container web (docker {})", &ID[..12])), "stats names the container:\n{text}");
}
