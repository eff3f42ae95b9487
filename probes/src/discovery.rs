//! Finding the CUDA libraries to probe: an explicit path, the `/proc/PID/maps` of the targets, the
//! ldconfig cache, the standard CUDA install paths, and pip `nvidia-*` wheels in site-packages
//! (`nvidia/cuda_runtime/lib/libcudart.so.12`). Sonames `.so`, `.so.11`, `.so.12`, `.so.13`.

#[cfg(test)]
pub(crate) mod testutil;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which API a library implements.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LibKind {
    /// libcudart: the CUDA runtime API.
    Runtime,
    /// libcuda: the CUDA driver API.
    Driver,
}

/// A library found on this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct FoundLibrary {
    /// The file (symlinks resolved).
    pub path: PathBuf,
    pub kind: LibKind,
    /// Where it was found: `explicit`, `maps:PID`, `ldconfig`, `cuda-path`, `pip-wheel`.
    pub how: String,
}

/// The kind of a CUDA library, from its file name (`libcudart.so.12.4.127`, `libcuda.so.1`, ...).
pub fn classify(path: &Path) -> Option<LibKind> {
    let name = path.file_name()?.to_str()?;
    let ok_suffix = |rest: &str| {
        rest.is_empty()
            || rest.starts_with('.') && rest[1..].chars().all(|c| c.is_ascii_digit() || c == '.')
    };
    if let Some(rest) = name.strip_prefix("libcudart.so") {
        return ok_suffix(rest).then_some(LibKind::Runtime);
    }
    if let Some(rest) = name.strip_prefix("libcuda.so") {
        return ok_suffix(rest).then_some(LibKind::Driver);
    }
    None
}

/// Accumulates found libraries, one entry per real file.
#[derive(Default)]
struct Found(BTreeMap<PathBuf, FoundLibrary>);

impl Found {
    fn add(&mut self, path: &Path, how: &str) {
        let Some(kind) = classify(path) else { return };
        let Ok(real) = std::fs::canonicalize(path) else {
            return;
        };
        if !real.is_file() {
            return;
        }
        self.0.entry(real.clone()).or_insert(FoundLibrary {
            path: real,
            kind,
            how: how.to_string(),
        });
    }
    fn scan_dir(&mut self, dir: &Path, how: &str) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            self.add(&e.path(), how);
        }
    }
}

/// Where to look.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryOptions {
    /// `--cuda-lib`: files (their directory is scanned for the sibling runtime/driver too) or directories.
    pub explicit: Vec<PathBuf>,
    /// Processes whose maps to read.
    pub pids: Vec<u32>,
    /// Skip the host-wide search (ldconfig, CUDA paths, pip wheels): only explicit paths and maps.
    pub explicit_only: bool,
    /// More site-packages directories to search for `nvidia/*/lib`.
    pub site_packages: Vec<PathBuf>,
    /// Do not add the CUDA libraries beside an explicit file (by default `--cuda-lib
    /// .../libcudart.so.12` also probes the `libcuda.so.1` next to it).
    pub no_siblings: bool,
}

pub fn discover(opts: &DiscoveryOptions) -> Vec<FoundLibrary> {
    let mut f = Found::default();
    for p in &opts.explicit {
        if p.is_dir() {
            f.scan_dir(p, "explicit");
        } else {
            f.add(p, "explicit");
            if let Some(dir) = p.parent().filter(|_| !opts.no_siblings) {
                f.scan_dir(dir, "explicit");
            }
        }
    }
    for &pid in &opts.pids {
        for lib in libs_in_maps(pid) {
            f.add(&lib, &format!("maps:{pid}"));
        }
    }
    if !opts.explicit_only {
        for p in ldconfig_libs() {
            f.add(&p, "ldconfig");
        }
        for dir in cuda_dirs() {
            f.scan_dir(&dir, "cuda-path");
        }
        let mut sites = site_packages_dirs();
        sites.extend(opts.site_packages.iter().cloned());
        for site in sites {
            for lib in wheel_libs(&site) {
                f.add(&lib, "pip-wheel");
            }
        }
    }
    f.0.into_values().collect()
}

/// CUDA libraries mapped into a process.
pub fn libs_in_maps(pid: u32) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5).map(PathBuf::from))
        .filter(|p| classify(p).is_some())
        .collect();
    v.sort();
    v.dedup();
    // the file as seen by the process (it may live in another mount namespace)
    v.into_iter()
        .map(|p| {
            let via_root = PathBuf::from(format!("/proc/{pid}/root{}", p.display()));
            if p.exists() {
                p
            } else {
                via_root
            }
        })
        .collect()
}

fn ldconfig_libs() -> Vec<PathBuf> {
    let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|b| {
            std::process::Command::new(b)
                .arg("-p")
                .output()
                .ok()
                .filter(|o| o.status.success())
        });
    let Some(out) = out else { return Vec::new() };
    parse_ldconfig(&String::from_utf8_lossy(&out.stdout))
}

pub fn parse_ldconfig(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| l.split_once(" => ").map(|(_, p)| PathBuf::from(p.trim())))
        .filter(|p| classify(p).is_some())
        .collect()
}

/// Entries of `dir` whose name starts with `prefix`.
fn children(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn cuda_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for root in children(Path::new("/usr/local"), "cuda")
        .into_iter()
        .chain(children(Path::new("/opt"), "cuda"))
    {
        v.push(root.join("lib64"));
        v.push(root.join("lib"));
        v.push(root.join("targets/x86_64-linux/lib"));
        v.push(root.join("compat"));
    }
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/lib/wsl/lib",
        "/usr/lib/x86_64-linux-gnu/nvidia/current",
    ] {
        v.push(PathBuf::from(d));
    }
    v
}

/// site-packages / dist-packages directories of the Pythons on this host.
pub fn site_packages_dirs() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = vec!["/usr".into(), "/usr/local".into(), "/opt/conda".into()];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        prefixes.push(home.join(".local"));
        prefixes.push(home.join(".cache/causeway/venv"));
        for v in children(&home.join(".pyenv/versions"), "") {
            prefixes.push(v);
        }
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var) {
            prefixes.push(p.into());
        }
    }
    if let Some(root) = std::env::var_os("PYENV_ROOT") {
        prefixes.extend(children(&Path::new(&root).join("versions"), ""));
    }
    let mut v = Vec::new();
    for p in prefixes {
        for lib in ["lib", "lib64"] {
            for py in children(&p.join(lib), "python3") {
                v.push(py.join("site-packages"));
                v.push(py.join("dist-packages"));
            }
        }
    }
    v.retain(|d| d.is_dir());
    v.sort();
    v.dedup();
    v
}

/// The site-packages of a Python virtual environment that `program` (e.g. `venv/bin/python`) lives in.
pub fn site_packages_of_program(program: &Path) -> Vec<PathBuf> {
    let Some(prefix) = program.parent().and_then(|b| b.parent()) else {
        return Vec::new();
    };
    children(&prefix.join("lib"), "python3")
        .into_iter()
        .map(|p| p.join("site-packages"))
        .filter(|p| p.is_dir())
        .collect()
}

/// `nvidia/*/lib/libcud*.so*` inside one site-packages directory.
pub fn wheel_libs(site: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for pkg in children(&site.join("nvidia"), "") {
        for f in children(&pkg.join("lib"), "libcud") {
            if classify(&f).is_some() {
                v.push(f);
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sonames_are_classified() {
        for (n, k) in [
            ("libcudart.so.12", Some(LibKind::Runtime)),
            ("libcudart.so.11.0", Some(LibKind::Runtime)),
            ("libcudart.so.13.0.48", Some(LibKind::Runtime)),
            ("libcudart.so", Some(LibKind::Runtime)),
            ("libcuda.so.1", Some(LibKind::Driver)),
            ("libcuda.so.580.65.06", Some(LibKind::Driver)),
            ("libcudart_static.a", None),
            ("libcudadebugger.so.1", None),
            ("libcudnn.so.9", None),
        ] {
            assert_eq!(classify(Path::new(n)), k, "{n}");
        }
    }

    #[test]
    fn ldconfig_output_is_parsed() {
        let t = "3 libs found in cache `/etc/ld.so.cache'\n\
                 \tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n\
                 \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n\
                 \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n";
        let v = parse_ldconfig(t);
        assert_eq!(
            v,
            vec![
                PathBuf::from("/usr/local/cuda/lib64/libcudart.so.12"),
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libcuda.so.1")
            ]
        );
    }

    #[test]
    fn pip_wheel_layout_is_found() {
        let d = tempfile::tempdir().unwrap();
        let lib = d.path().join("nvidia/cuda_runtime/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libcudart.so.12"), b"x").unwrap();
        std::fs::write(lib.join("libnvrtc.so.12"), b"x").unwrap();
        let found = discover(&DiscoveryOptions {
            explicit_only: false,
            site_packages: vec![d.path().into()],
            ..Default::default()
        });
        assert!(
            found.iter().any(
                |f| f.path.ends_with("nvidia/cuda_runtime/lib/libcudart.so.12")
                    && f.how == "pip-wheel"
            ),
            "{found:?}"
        );
    }
}
