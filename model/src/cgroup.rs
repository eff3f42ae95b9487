//! Where a process runs: its cgroup (v2), and the container or Kubernetes pod that cgroup stands
//! for, as the container runtimes name their cgroups. Reading the names the runtimes keep in
//! their own files is I/O and lives in the probes; this module only reads paths.

/// The cgroup of a traced process (or of one that took a traced thread's CPU), and the container
/// or pod it stands for where the path says so. Stored in `process_cgroups`, one row per process;
/// empty strings where unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ProcessCgroup {
    /// The process.
    pub pid: u32,
    /// The cgroup v2 id (the cgroup directory's inode number): what `events.cgroup_id` holds.
    pub cgroup_id: i64,
    /// The cgroup v2 path (`/system.slice/docker-3f2a....scope`).
    pub path: String,
    /// Who made the cgroup: `docker`, `containerd`, `cri-o`, `podman`, `kubernetes` (a pod's
    /// cgroup without a container's), `systemd` (a service or scope), or empty.
    pub runtime: String,
    /// The container's id (64 hex digits), when the path names one.
    pub container_id: String,
    /// The container's name, from the runtime's own files.
    pub container: String,
    /// The Kubernetes pod's name (or, without the runtime's files, `pod<uid>` from the path).
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
}

impl ProcessCgroup {
    /// What the cgroup path alone says: the runtime, the container id and the pod's uid
    /// (`pod<uid>`) of the common layouts, with the systemd and cgroupfs drivers:
    /// `docker-<id>.scope` / `/docker/<id>`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
    /// `libpod-<id>.scope`, `kubepods[-<qos>]-pod<uid>.slice` / `/kubepods/<qos>/pod<uid>/<id>`, and a
    /// systemd unit (`<name>.service`, `<name>.scope`).
    pub fn from_path(pid: u32, cgroup_id: i64, path: &str) -> ProcessCgroup {
        let mut c = ProcessCgroup { pid, cgroup_id, path: path.to_string(), ..Default::default() };
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut in_kubepods = false;
        for (i, seg) in segments.iter().enumerate() {
            if seg.starts_with("kubepods") {
                in_kubepods = true;
            }
            if let Some(uid) = pod_uid(seg) {
                c.pod = format!("pod{uid}");
                in_kubepods = true;
            }
            let scoped = |prefix: &str| {
                seg.strip_prefix(prefix).and_then(|s| s.strip_suffix(".scope")).filter(|id| is_container_id(id))
            };
            let found =
                [("docker-", "docker"), ("cri-containerd-", "containerd"), ("crio-", "cri-o"), ("libpod-", "podman")]
                    .iter()
                    .find_map(|(prefix, runtime)| scoped(prefix).map(|id| (*runtime, id)));
            if let Some((runtime, id)) = found {
                c.runtime = runtime.into();
                c.container_id = id.into();
            } else if is_container_id(seg) && i > 0 {
                // cgroupfs driver: /docker/<id>, /kubepods/<qos>/pod<uid>/<id>, /system.slice/containerd/<id>
                let parent = segments[i - 1];
                c.runtime = match parent {
                    "docker" => "docker",
                    "libpod_parent" => "podman",
                    _ if in_kubepods => "kubernetes",
                    _ => "containerd",
                }
                .into();
                c.container_id = (*seg).into();
            }
        }
        if c.runtime.is_empty() {
            if in_kubepods {
                c.runtime = "kubernetes".into();
            } else if let Some(unit) = segments.last().filter(|s| s.ends_with(".service") || s.ends_with(".scope")) {
                c.runtime = "systemd".into();
                c.container = unit.to_string();
            }
        }
        c
    }

    /// Whether the cgroup stands for a container or a pod.
    pub fn is_container(&self) -> bool {
        !self.container_id.is_empty() || !self.pod.is_empty()
    }

    /// `pod default/trainer-0, container main`, `container web (docker 3f2a1b9c0d4e)`,
    /// `systemd unit nginx.service`, `cgroup /user.slice/...`: how the answers name it.
    pub fn words(&self) -> String {
        let short = |id: &str| id.chars().take(12).collect::<String>();
        let container = match (self.container.is_empty(), self.container_id.is_empty()) {
            (false, _) if self.runtime == "systemd" => return format!("systemd unit {}", self.container),
            (false, true) => format!("container {}", self.container),
            (false, false) => format!("container {} ({} {})", self.container, self.runtime, short(&self.container_id)),
            (true, false) => format!("{} container {}", self.runtime, short(&self.container_id)),
            (true, true) => String::new(),
        };
        let pod = match (self.pod.is_empty(), self.namespace.is_empty()) {
            (true, _) => String::new(),
            (false, true) => format!("pod {}", self.pod),
            (false, false) => format!("pod {}/{}", self.namespace, self.pod),
        };
        match (pod.is_empty(), container.is_empty()) {
            (false, false) => format!("{pod}, {container}"),
            (false, true) => pod,
            (true, false) => container,
            (true, true) => format!("cgroup {}", if self.path.is_empty() { "/" } else { &self.path }),
        }
    }
}

/// A container id: 64 lowercase hex digits.
fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The pod uid of a kubepods segment: `pod<uid>` (cgroupfs) or `kubepods-<qos>-pod<uid>.slice`
/// (systemd, with `_` for `-` in the uid).
fn pod_uid(seg: &str) -> Option<String> {
    let rest = seg.strip_suffix(".slice").unwrap_or(seg);
    let uid = match rest.rfind("-pod") {
        Some(at) if rest.starts_with("kubepods") => &rest[at + 4..],
        _ => rest.strip_prefix("pod")?,
    };
    (uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_'))
        .then(|| uid.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

    #[test]
    fn the_runtimes_cgroup_layouts_are_read() {
        let cases = [
            (format!("/system.slice/docker-{ID}.scope"), "docker", ID, ""),
            (format!("/docker/{ID}"), "docker", ID, ""),
            (format!("/system.slice/crio-{ID}.scope"), "cri-o", ID, ""),
            (format!("/machine.slice/libpod-{ID}.scope"), "podman", ID, ""),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f90a.slice/cri-containerd-{ID}.scope"
                ),
                "containerd",
                ID,
                "pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f90a",
            ),
            (
                format!("/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f90a/{ID}"),
                "kubernetes",
                ID,
                "pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f90a",
            ),
            (
                "/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f90a.slice".to_string(),
                "kubernetes",
                "",
                "pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f90a",
            ),
            ("/system.slice/nginx.service".to_string(), "systemd", "", ""),
            ("/user.slice/user-0.slice/session-3.scope".to_string(), "systemd", "", ""),
            ("/".to_string(), "", "", ""),
            ("/causeway-test/job".to_string(), "", "", ""),
        ];
        for (path, runtime, id, pod) in cases {
            let c = ProcessCgroup::from_path(7, 42, &path);
            assert_eq!((c.runtime.as_str(), c.container_id.as_str(), c.pod.as_str()), (runtime, id, pod), "{path}");
            assert_eq!((c.pid, c.cgroup_id, c.path.as_str()), (7, 42, path.as_str()));
        }
        // not a container id: too short, upper case
        assert_eq!(ProcessCgroup::from_path(1, 1, "/docker/abc").runtime, "");
        assert_eq!(ProcessCgroup::from_path(1, 1, &format!("/docker/{}", ID.to_uppercase())).runtime, "");
    }

    #[test]
    fn answers_name_the_pod_the_container_or_the_cgroup() {
        let mut c = ProcessCgroup::from_path(1, 1, &format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(c.words(), "docker container 3f2a1b9c0d4e");
        c.container = "web".into();
        assert_eq!(c.words(), "container web (docker 3f2a1b9c0d4e)");
        c.pod = "trainer-0".into();
        c.namespace = "ml".into();
        assert_eq!(c.words(), "pod ml/trainer-0, container web (docker 3f2a1b9c0d4e)");
        assert_eq!(ProcessCgroup::from_path(1, 1, "/system.slice/nginx.service").words(), "systemd unit nginx.service");
        assert_eq!(ProcessCgroup::from_path(1, 1, "/causeway-test/job").words(), "cgroup /causeway-test/job");
        assert!(!ProcessCgroup::from_path(1, 1, "/causeway-test/job").is_container());
    }
}
