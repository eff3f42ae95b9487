//! The cgroup of a process and the container or Kubernetes pod it stands for, as the tracer sees
//! them: `/proc/PID/cgroup` gives the path, the cgroup v2 directory's inode is the id the BPF
//! programs record (`bpf_get_current_cgroup_id`), [`ProcessCgroup::from_path`] reads the runtime
//! and the container id off the path, and the runtimes' own files give the names:
//!
//! - Docker: `var/lib/docker/containers/<id>/config.v2.json` (`Name`);
//! - containerd under Kubernetes: `run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json`
//!   (annotations `io.kubernetes.cri.container-name`, `-sandbox-name`, `-sandbox-namespace`);
//! - CRI-O and Podman: `run/containers/storage/overlay-containers/<id>/userdata/config.json`
//!   (annotations `io.kubernetes.container.name`, `io.kubernetes.pod.name`,
//!   `io.kubernetes.pod.namespace`) and `var/lib/containers/storage/overlay-containers/containers.json`
//!   (`names`).
//!
//! Those paths are read under a root (`/` on the host; the host's root mounted elsewhere when the
//! tracer runs in a container). On a hybrid host (cgroup v1 controllers beside a v2 mount) the v2
//! path may be `/` while the runtime placed the process in v1 groups: the first v1 path that names
//! a container is used then. Each cgroup's names are read once.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use causeway_model::ProcessCgroup;

/// Resolves processes to their cgroups and containers, caching what each cgroup path says.
pub struct CgroupResolver {
    /// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
    v2_mount: Option<PathBuf>,
    /// The root under which the runtimes' files are read.
    runtime_root: PathBuf,
    /// What each cgroup path resolved to (pid 0).
    known: HashMap<String, ProcessCgroup>,
}

/// The mount point of the cgroup v2 hierarchy, from a `/proc/self/mountinfo` text.
fn v2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mount_point = before.split_whitespace().nth(4)?;
        (after.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

/// (v2 path, v1 paths) of a `/proc/PID/cgroup` text.
fn paths_in(proc_cgroup: &str) -> (Option<String>, Vec<String>) {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(_controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if id == "0" {
            v2 = Some(path.to_string());
        } else {
            v1.push(path.to_string());
        }
    }
    (v2, v1)
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn annotation(config: &serde_json::Value, key: &str) -> String {
    config["annotations"][key].as_str().unwrap_or_default().to_string()
}

impl CgroupResolver {
    /// A resolver reading the runtimes' files under `runtime_root` (`/` on the host).
    pub fn new(runtime_root: &Path) -> CgroupResolver {
        let v2_mount = std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|m| v2_mount_in(&m));
        CgroupResolver { v2_mount, runtime_root: runtime_root.to_path_buf(), known: HashMap::new() }
    }

    /// The cgroup of `pid` and what it stands for; None when the process is gone or the host
    /// has no cgroup v2 line for it.
    pub fn resolve(&mut self, pid: u32) -> Option<ProcessCgroup> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let (v2, v1) = paths_in(&text);
        let v2 = v2?;
        // the id the BPF programs record: the v2 directory's inode
        let id = self
            .v2_mount
            .as_ref()
            .and_then(|m| std::fs::metadata(m.join(v2.trim_start_matches('/'))).ok())
            .map_or(0, |meta| meta.ino() as i64);
        let path = if v2 != "/" {
            v2
        } else {
            // a hybrid host: the runtime's v1 group, if one names a container, else any non-root one
            v1.iter()
                .find(|p| ProcessCgroup::from_path(pid, id, p).is_container())
                .or_else(|| v1.iter().find(|p| *p != "/"))
                .cloned()
                .unwrap_or(v2)
        };
        let known = self.known.entry(path.clone()).or_insert_with(|| {
            let mut c = ProcessCgroup::from_path(0, 0, &path);
            name_container(&self.runtime_root, &mut c);
            c
        });
        Some(ProcessCgroup { pid, cgroup_id: id, ..known.clone() })
    }
}

/// Fill the container's and pod's names from the runtimes' files under `root`.
fn name_container(root: &Path, c: &mut ProcessCgroup) {
    if c.container_id.is_empty() {
        return;
    }
    let id = c.container_id.clone();
    if let Some(config) = read_json(&root.join("var/lib/docker/containers").join(&id).join("config.v2.json")) {
        c.container = config["Name"].as_str().unwrap_or_default().trim_start_matches('/').to_string();
        let labels = &config["Config"]["Labels"];
        c.pod = labels["io.kubernetes.pod.name"].as_str().map_or(c.pod.clone(), String::from);
        c.namespace = labels["io.kubernetes.pod.namespace"].as_str().unwrap_or_default().to_string();
        return;
    }
    let cri = root.join("run/containerd/io.containerd.runtime.v2.task/k8s.io").join(&id).join("config.json");
    if let Some(config) = read_json(&cri) {
        c.container = annotation(&config, "io.kubernetes.cri.container-name");
        let pod = annotation(&config, "io.kubernetes.cri.sandbox-name");
        if !pod.is_empty() {
            c.pod = pod;
        }
        c.namespace = annotation(&config, "io.kubernetes.cri.sandbox-namespace");
        return;
    }
    let oci = root.join("run/containers/storage/overlay-containers").join(&id).join("userdata/config.json");
    if let Some(config) = read_json(&oci) {
        c.container = annotation(&config, "io.kubernetes.container.name");
        let pod = annotation(&config, "io.kubernetes.pod.name");
        if !pod.is_empty() {
            c.pod = pod;
        }
        c.namespace = annotation(&config, "io.kubernetes.pod.namespace");
    }
    if c.container.is_empty() {
        // Podman (and CRI-O) keep every container's names in one list
        let list = read_json(&root.join("var/lib/containers/storage/overlay-containers/containers.json"));
        let named = list.as_ref().and_then(|l| l.as_array()).and_then(|all| {
            all.iter().find(|x| x["id"].as_str() == Some(id.as_str()))?["names"][0].as_str().map(String::from)
        });
        if let Some(name) = named {
            c.container = name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn named(root: &Path, path: &str) -> ProcessCgroup {
        let mut c = ProcessCgroup::from_path(1, 1, path);
        name_container(root, &mut c);
        c
    }

    #[test]
    fn the_runtimes_files_name_containers_and_pods() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(
            r,
            &format!("var/lib/docker/containers/{ID}/config.v2.json"),
            r#"{"Name": "/web", "Config": {"Labels": {}}}"#,
        );
        let c = named(r, &format!("/system.slice/docker-{ID}.scope"));
        assert_eq!((c.container.as_str(), c.pod.as_str()), ("web", ""));

        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(
            r,
            &format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
            r#"{"annotations": {"io.kubernetes.cri.container-name": "trainer", "io.kubernetes.cri.sandbox-name": "job-0", "io.kubernetes.cri.sandbox-namespace": "ml"}}"#,
        );
        let c = named(
            r,
            &format!(
                "/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f90a.slice/cri-containerd-{ID}.scope"
            ),
        );
        assert_eq!(c.words(), "pod ml/job-0, container trainer (containerd 3f2a1b9c0d4e)");

        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(
            r,
            &format!("run/containers/storage/overlay-containers/{ID}/userdata/config.json"),
            r#"{"annotations": {"io.kubernetes.container.name": "vllm", "io.kubernetes.pod.name": "serve-1", "io.kubernetes.pod.namespace": "prod"}}"#,
        );
        assert_eq!(
            named(r, &format!("/kubepods/pod{ID}/crio-{ID}.scope")).words(),
            "pod prod/serve-1, container vllm (cri-o 3f2a1b9c0d4e)"
        );

        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        write(
            r,
            "var/lib/containers/storage/overlay-containers/containers.json",
            &format!(r#"[{{"id": "{ID}", "names": ["notebook"]}}]"#),
        );
        assert_eq!(named(r, &format!("/machine.slice/libpod-{ID}.scope")).container, "notebook");
        // no files: the path's own facts only
        let bare = tempfile::tempdir().unwrap();
        assert_eq!(named(bare.path(), &format!("/docker/{ID}")).words(), "docker container 3f2a1b9c0d4e");
    }

    #[test]
    fn proc_texts_are_read_on_unified_and_hybrid_hosts() {
        let hybrid = "4:memory:/docker/abc\n1:name=systemd:/system.slice/x.service\n0::/\n";
        assert_eq!(paths_in(hybrid), (Some("/".into()), vec!["/docker/abc".into(), "/system.slice/x.service".into()]));
        assert_eq!(paths_in("0::/user.slice/a.scope\n"), (Some("/user.slice/a.scope".into()), vec![]));
        let mountinfo = "35 24 0:30 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                         44 35 0:39 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(v2_mount_in(mountinfo), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(v2_mount_in("1 2 0:1 / / rw - ext4 /dev/sda rw\n"), None);
    }

    #[test]
    fn this_process_resolves_to_the_cgroup_its_events_carry() {
        let mut r = CgroupResolver::new(Path::new("/"));
        let me = r.resolve(std::process::id()).expect("this process has a cgroup");
        assert_eq!(me.pid, std::process::id());
        if r.v2_mount.is_some() {
            assert!(me.cgroup_id > 0, "the v2 directory's inode: {me:?}");
        }
        assert!(r.resolve(u32::MAX - 1).is_none(), "no such process");
    }
}
