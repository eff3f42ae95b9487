//! The one place tests find their fixtures, so that `scripts/test.sh` passes on a clone with nothing
//! beside it:
//!
//! - the real Ingero trace databases and their `FACTS.json`, carried in `testdata/ingero-dbs/`
//!   (see `testdata/ingero-dbs/NOTICE.md` for where they come from and their license);
//! - the mock CUDA libraries and workloads, built once per test process by `make -C mock-cuda`;
//! - the CPython interpreters installed on the machine (pyenv's and the system's), for the
//!   Python-frames tests;
//! - the benches' memory figures ([`rss_kib`], [`peak_rss_kib`], [`reset_peak_rss`],
//!   [`AnonPeak`]).
//!
//! `CAUSEWAY_INGERO_DBS` points the Ingero fixtures at another directory (newer Ingero DBs, say);
//! `PYENV_ROOT` (else `~/.pyenv`) is where pyenv's interpreters are looked for.

use std::path::{Path, PathBuf};
use std::sync::Once;

/// The Ingero databases in `testdata/ingero-dbs`, each described in its `FACTS.json`. They are in
/// WAL mode: open them `immutable=1` (or copy them) so that no test writes beside them.
pub const INGERO_DBS: &[&str] = &[
    "pytorch-dataloader-starvation.db",
    "sample-cluster.db",
    "sample-gpu-node-01.db",
    "sample-gpu-node-02.db",
    "sample-gpu-node-03.db",
];

/// The root of the repository (the workspace) whose tests are running.
///
/// Found at run time from the package directory cargo gives the running test
/// (`CARGO_MANIFEST_DIR`), not from where this crate was compiled: clones that share one target
/// directory (CI's clean clone and a working tree) reuse this crate's build, and a compiled-in path
/// would send one clone's tests to the other's files.
pub fn repo_root() -> PathBuf {
    let is_root = |d: &Path| d.join("testdata/src/lib.rs").is_file() && d.join("Cargo.toml").is_file();
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        if let Some(root) = Path::new(&dir).ancestors().find(|d| is_root(d)) {
            return root.to_path_buf();
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testdata/ sits in the workspace root").to_path_buf()
}

/// One `/proc/self/status` figure in KiB (0 when it cannot be read: not Linux).
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// This process's resident memory now (`VmRSS`), KiB.
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// The largest anonymous resident memory (`RssAnon`: the heap and the stacks, not the pages of
/// mapped files, which the kernel can drop and read again) this process had while it ran, KiB.
/// The kernel keeps no peak of it: a thread of its own reads it every 2 ms, so a peak shorter than
/// that may be missed.
pub struct AnonPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    poller: std::thread::JoinHandle<u64>,
}

impl AnonPeak {
    pub fn start() -> AnonPeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let poller = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                peak = peak.max(status_kib("RssAnon:"));
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        AnonPeak { stop, poller }
    }

    /// The peak seen, KiB.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.poller.join().expect("the RssAnon poller")
    }
}

/// This process's peak resident memory (`VmHWM`) since the start or the last [`reset_peak_rss`], KiB.
pub fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

/// CPU time (user + system) of this process's threads whose name, as the kernel keeps it (its
/// first 15 bytes), starts with `prefix`, ns. The kernel counts in clock ticks
/// (`/proc/self/task/*/stat`, fields 14 and 15), so the resolution is one tick (10 ms at the usual
/// 100 Hz): measure seconds of work, not a call.
pub fn thread_cpu_ns(prefix: &str) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !name.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // the fields after the name's closing parenthesis: state is field 3, utime 14, stime 15
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks * 1_000_000_000 / hz
}

/// Starts a new peak from the current resident memory (Linux: 5 written to `clear_refs`), so the
/// next [`peak_rss_kib`] is the peak of what runs in between. The allocator first gives back the
/// free memory it holds: a bench that generated ten million events before the step it measures
/// would otherwise start the step's peak from the generator's freed heap (glibc keeps freed
/// small allocations resident).
pub fn reset_peak_rss() {
    // SAFETY: malloc_trim only returns free pages of glibc's heap to the kernel; it takes no
    // pointer and leaves every live allocation where it is.
    unsafe {
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The trace of every bundled investigation (`investigations/*/trace.db`), sorted.
///
/// # Panics
/// When fewer than the six bundled ones are found.
pub fn investigation_traces() -> Vec<PathBuf> {
    let dir = repo_root().join("investigations");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().join("trace.db")).filter(|p| p.exists()).collect())
        .unwrap_or_default();
    v.sort();
    assert!(v.len() >= 6, "the bundled investigations' traces are not in {}", dir.display());
    v
}

/// The directory holding the Ingero DBs and `FACTS.json`.
///
/// # Panics
/// When the directory lacks `FACTS.json`: a test that cannot find its fixture fails loudly.
pub fn ingero_dbs() -> PathBuf {
    let dir = std::env::var_os("CAUSEWAY_INGERO_DBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("testdata/ingero-dbs"));
    assert!(
        dir.join("FACTS.json").is_file(),
        "FACTS.json not found in {} (the Ingero fixtures are carried in testdata/ingero-dbs; \
         CAUSEWAY_INGERO_DBS overrides the directory)",
        dir.display()
    );
    dir
}

/// One Ingero DB by file name, e.g. `ingero_db("sample-cluster.db")`.
pub fn ingero_db(name: &str) -> PathBuf {
    let path = ingero_dbs().join(name);
    assert!(path.is_file(), "no Ingero fixture {}", path.display());
    path
}

/// `FACTS.json` of the Ingero DBs, as text.
pub fn ingero_facts() -> String {
    let path = ingero_dbs().join("FACTS.json");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `mock-cuda/build`, built (`make -s -C mock-cuda`) once per test process.
///
/// # Panics
/// When the build fails: the live tests need the mock libraries.
pub fn mock_cuda_build() -> PathBuf {
    static BUILD: Once = Once::new();
    let dir = repo_root().join("mock-cuda");
    BUILD.call_once(|| {
        let status = std::process::Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(&dir)
            .status()
            .unwrap_or_else(|e| panic!("make -C {}: {e}", dir.display()));
        assert!(status.success(), "make -C {} failed", dir.display());
    });
    dir.join("build")
}

/// The injection library of `--gpu-timeline` (`libcauseway_inject.so`), built with
/// `cargo build -p causeway-inject` (nothing to do when it is up to date) once per test process,
/// into the target directory and profile of the running test binary.
///
/// # Panics
/// When the build fails: the device-timeline tests need the library.
pub fn inject_library() -> PathBuf {
    static SO: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf();
        let target = profile_dir.parent().expect("the target directory");
        let mut cmd = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.args(["build", "--locked", "-p", "causeway-inject"]).env("CARGO_TARGET_DIR", target);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cargo build -p causeway-inject");
        assert!(status.success(), "cargo build -p causeway-inject failed");
        let so = profile_dir.join("libcauseway_inject.so");
        assert!(so.is_file(), "{} not built", so.display());
        so
    })
    .clone()
}

/// One CPython interpreter installed on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CPython {
    /// 3.`minor`.
    pub minor: u8,
    pub path: PathBuf,
}

impl CPython {
    /// The shared library of this interpreter (`../lib/libpython3.N.so.1.0`, as pyenv builds
    /// it, with its DWARF); `None` for a static executable (Debian's).
    pub fn libpython(&self) -> Option<PathBuf> {
        let lib = self.path.parent()?.parent()?.join(format!("lib/libpython3.{}.so.1.0", self.minor));
        lib.is_file().then_some(lib)
    }
}

/// The CPython 3.10+ interpreters on this machine, for the Python-frames tests: pyenv's
/// (`$PYENV_ROOT` or `~/.pyenv`, `versions/3.N.*/bin/python3`, one per minor version) and the
/// system's `/usr/bin/python3.N`, oldest first. The system's comes in addition to pyenv's of the
/// same version (one links libpython, the other is a static executable).
pub fn cpythons() -> Vec<CPython> {
    let mut out: Vec<CPython> = Vec::new();
    let versions = pyenv_root().join("versions");
    let mut names: Vec<String> = std::fs::read_dir(&versions)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    for name in names {
        let Some(minor) = minor_of(&name) else { continue };
        let path = versions.join(&name).join("bin/python3");
        if minor >= 10 && path.is_file() && !out.iter().any(|p| p.minor == minor) {
            out.push(CPython { minor, path });
        }
    }
    for minor in 10..=20u8 {
        let path = PathBuf::from(format!("/usr/bin/python3.{minor}"));
        if path.is_file() {
            out.push(CPython { minor, path });
        }
    }
    out.sort_by_key(|p| p.minor);
    out
}

fn pyenv_root() -> PathBuf {
    std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
        .unwrap_or_default()
}

/// `N` of a pyenv version name `3.N.P`.
fn minor_of(name: &str) -> Option<u8> {
    name.strip_prefix("3.")?.split('.').next()?.parse().ok()
}

/// A real PostgreSQL catalog for the fleet tests, started by `scripts/fleet-catalog.sh` in a
/// directory of its own on a free loopback port, stopped (and its directory removed) on drop.
/// The lake strings it returns carry no password, only the password file's path (`passfile=`).
pub struct FleetCatalog {
    pub dir: PathBuf,
    pub port: u16,
    /// Started with `--tls`: only TLS connections are accepted, the lake strings ask for it.
    pub tls: bool,
}

impl FleetCatalog {
    /// Start one. Panics with the script's output when it cannot (a missing PostgreSQL is a
    /// missing install step: `scripts/install-fleet.sh`).
    pub fn start(name: &str) -> FleetCatalog {
        Self::start_with(name, false)
    }

    /// Start one, with TLS only (`fleet-catalog.sh --tls`) when `tls`.
    pub fn start_with(name: &str, tls: bool) -> FleetCatalog {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap();
        let dir = std::env::temp_dir().join(format!("causeway-{name}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = std::process::Command::new("bash")
            .arg(repo_root().join("scripts/fleet-catalog.sh"))
            .args(["start", dir.to_str().unwrap(), "--port", &port.to_string()])
            .args(if tls { &["--tls"][..] } else { &[][..] })
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/fleet-catalog.sh start failed (install PostgreSQL: scripts/install-fleet.sh): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        FleetCatalog { dir, port, tls }
    }

    /// libpq's password file with the two roles' passwords.
    pub fn pgpass(&self) -> PathBuf {
        self.dir.join("pgpass")
    }

    /// Where the lake's Parquet files go.
    pub fn data_path(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The lake string of the shipping role (read-write); the password comes from the catalog's
    /// password file, named in the string (`passfile=`), so tests of many catalogs in one process
    /// need no shared environment.
    pub fn ship_lake(&self) -> String {
        format!(
            "postgres:host=127.0.0.1 port={} dbname=causeway_fleet user=causeway_ship passfile={}{}",
            self.port,
            self.pgpass().display(),
            if self.tls { " sslmode=require" } else { "" }
        )
    }

    /// The lake string of the serving role (SELECT only).
    pub fn read_lake(&self) -> String {
        format!(
            "postgres:host=127.0.0.1 port={} dbname=causeway_fleet user=causeway_read passfile={}{}",
            self.port,
            self.pgpass().display(),
            if self.tls { " sslmode=require" } else { "" }
        )
    }

    /// Stop the catalog server (`fleet-catalog.sh stop`): fault tests of an unreachable catalog.
    pub fn stop_server(&self) {
        self.script("stop");
    }

    /// Start the stopped catalog server again, same directory and port (`fleet-catalog.sh start`).
    pub fn start_server(&self) {
        self.script("start");
    }

    fn script(&self, cmd: &str) {
        let out = self.run_script(cmd).unwrap();
        assert!(out.status.success(), "fleet-catalog.sh {cmd}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `fleet-catalog.sh CMD DIR` on this catalog's directory.
    fn run_script(&self, cmd: &str) -> std::io::Result<std::process::Output> {
        std::process::Command::new("bash")
            .arg(repo_root().join("scripts/fleet-catalog.sh"))
            .args([cmd, self.dir.to_str().unwrap()])
            .output()
    }

    /// The environment a process needs to reach the catalog.
    pub fn env(&self) -> [(&'static str, PathBuf); 1] {
        [("PGPASSFILE", self.pgpass())]
    }

    /// The postmaster's pid and its children's (the whole server), for fault tests.
    pub fn server_pids(&self) -> Vec<u32> {
        let pidfile = std::fs::read_to_string(self.dir.join("pgdata/postmaster.pid")).unwrap_or_default();
        let Some(master) = pidfile.lines().next().and_then(|l| l.trim().parse::<u32>().ok()) else {
            return Vec::new();
        };
        let mut pids = vec![master];
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let ppid = stat
                    .rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().nth(1))
                    .and_then(|p| p.parse::<u32>().ok());
                if ppid == Some(master) {
                    pids.push(pid);
                }
            }
        }
        pids
    }
}

impl Drop for FleetCatalog {
    fn drop(&mut self) {
        let _ = self.run_script("stop");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
