//! Finding the CUDA libraries to probe: an explicit path, the `/proc/PID/maps` of the targets, the
//! ldconfig cache, the standard CUDA install paths (and `/usr/local/nvidia`, the driver mount of GPU
//! container images), pip `nvidia-*` wheels in site-packages (`nvidia/cuda_runtime/lib/libcudart.so.12`,
//! `nvidia/cu13/lib/libcudart.so.13`) and the copies torch wheels carry in `torch/lib`.
//!
//! Names: sonames `.so`, `.so.11`, `.so.12`, `.so.13`, and auditwheel's hashed copies
//! (`libcudart-8774224f.so.12`). A file whose name says nothing is classified by the functions it
//! defines ([`classify_file`]).
//!
//! Submodules: [`mapped`] reads what a running process has mapped, checked by (dev, inode) so that
//! a file replaced after it was mapped, or a same-path file of another mount namespace, is never
//! taken for it; [`static_runtime`] finds a CUDA runtime linked into an executable.

pub mod mapped;
pub mod static_runtime;
#[cfg(test)]
pub(crate) mod testutil;

pub use mapped::{file_id, mapped_cuda_libs};
pub use static_runtime::{static_runtime_in_file, static_runtime_of, StaticRuntime};

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Which API a library implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LibKind {
    /// libcudart: the CUDA runtime API.
    Runtime,
    /// libcuda: the CUDA driver API.
    Driver,
    /// libnccl: NCCL collectives (system installs, `nvidia-nccl-cu12` / `-cu13` wheels).
    Nccl,
    /// libcupti: the profiling interface; only its activity controls are probed (who holds the
    /// device timeline: the injection library, torch.profiler, Nsight).
    Cupti,
}

impl LibKind {
    /// The probes of the table (`cuda_table.rs`) that attach to a library of this kind.
    pub fn probes(self) -> crate::cuda_table::ProbeLib {
        match self {
            LibKind::Runtime => crate::cuda_table::ProbeLib::Runtime,
            LibKind::Driver => crate::cuda_table::ProbeLib::Driver,
            LibKind::Nccl => crate::cuda_table::ProbeLib::Nccl,
            LibKind::Cupti => crate::cuda_table::ProbeLib::Cupti,
        }
    }

    /// How `attachments.kind` names it.
    pub fn name(self) -> &'static str {
        match self {
            LibKind::Runtime => "runtime",
            LibKind::Driver => "driver",
            LibKind::Nccl => "nccl",
            LibKind::Cupti => "cupti",
        }
    }
}

/// A library found on this host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct FoundLibrary {
    /// The file: symlinks resolved for a host path; for a library of a process's maps that this
    /// path does not reach (another mount namespace), `/proc/PID/root/...` (do not canonicalize
    /// that: it would turn into the host's path).
    pub path: PathBuf,
    pub kind: LibKind,
    /// Where it was found: `explicit`, `maps:PID`, `ldconfig`, `cuda-path`, `pip-wheel`.
    pub how: String,
}

/// The kind of a CUDA library, from its file name: `libcudart.so.12.4.127`, `libcuda.so.1`,
/// `libnccl.so.2.27.3`, and the
/// auditwheel-renamed copies `libcudart-<8 hex>.so[.N...]` / `libcuda-<8 hex>.so[.N...]` that
/// LibTorch and older torch wheels ship (`libcudart-8774224f.so.12`, `libcudart-d0da41ae.so.11.0`).
pub fn classify(path: &Path) -> Option<LibKind> {
    let name = path.file_name()?.to_str()?;
    for (stem, kind) in [
        ("libcudart", LibKind::Runtime),
        ("libcuda", LibKind::Driver),
        ("libnccl", LibKind::Nccl),
        ("libcupti", LibKind::Cupti),
    ] {
        let Some(rest) = name.strip_prefix(stem) else {
            continue;
        };
        // auditwheel: `-` and the first 8 hex digits of the file's sha256
        let rest = match rest.strip_prefix('-') {
            Some(h) if h.len() >= 8 && h.as_bytes()[..8].iter().all(u8::is_ascii_hexdigit) => &h[8..],
            Some(_) => return None,
            None => rest,
        };
        let Some(version) = rest.strip_prefix(".so") else {
            continue;
        };
        let numeric =
            |v: &str| !v.is_empty() && v.split('.').all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()));
        if version.is_empty() || version.strip_prefix('.').is_some_and(numeric) {
            return Some(kind);
        }
    }
    None
}

/// Functions whose definition makes a file the CUDA runtime, or the CUDA driver.
const RUNTIME_MARKS: [&str; 2] = ["cudaLaunchKernel", "cudaMalloc"];
const DRIVER_MARKS: [&str; 2] = ["cuLaunchKernel", "cuInit"];
const NCCL_MARKS: [&str; 2] = ["ncclAllReduce", "ncclCommInitRank"];

/// The kind of any file: by its name when that says (see [`classify`]), else by the functions the
/// ELF file defines (`.dynsym` or `.symtab`, local ones included): `cudaLaunchKernel` or
/// `cudaMalloc` make it the runtime, `cuLaunchKernel` or `cuInit` the driver. For `--cuda-lib`
/// pointing at a renamed copy, a shim, or an executable that links the runtime statically. An error
/// (with the path) for a missing, non-ELF or malformed file, and for one that defines neither API.
pub fn classify_file(path: &Path) -> anyhow::Result<LibKind> {
    let meta = std::fs::metadata(path).with_context(|| path.display().to_string())?;
    anyhow::ensure!(meta.is_file(), "{} is not a regular file", path.display());
    if let Some(kind) = classify(path) {
        return Ok(kind);
    }
    let wanted: Vec<&str> = RUNTIME_MARKS.iter().chain(&DRIVER_MARKS).chain(&NCCL_MARKS).copied().collect();
    let defined = crate::symbols::defined_functions(path, &wanted)
        .with_context(|| format!("{}: not a readable ELF file", path.display()))?;
    let defines = |marks: &[&str]| marks.iter().any(|m| defined.iter().any(|d| d == m));
    if defines(&RUNTIME_MARKS) {
        Ok(LibKind::Runtime)
    } else if defines(&DRIVER_MARKS) {
        Ok(LibKind::Driver)
    } else if defines(&NCCL_MARKS) {
        Ok(LibKind::Nccl)
    } else {
        anyhow::bail!(
            "{} defines none of the CUDA runtime's symbols ({}), the driver's ({}) or NCCL's ({})",
            path.display(),
            RUNTIME_MARKS.join(", "),
            DRIVER_MARKS.join(", "),
            NCCL_MARKS.join(", ")
        )
    }
}

/// Accumulates found libraries, one entry per file: keyed by (dev, inode), so that one file reached
/// through two paths (a symlinked CUDA directory; the host path and `/proc/PID/root/...`) is one
/// entry. The first way it was found is kept; a path through `/proc` gives way to a plain one.
#[derive(Default)]
struct Found {
    libs: BTreeMap<(u64, u64), FoundLibrary>,
    notes: Vec<String>,
}

impl Found {
    /// A host path: classified by name, symlinks resolved.
    fn add(&mut self, path: &Path, how: &str) {
        let Some(kind) = classify(path) else { return };
        let Ok(real) = std::fs::canonicalize(path) else {
            return;
        };
        self.insert(real, kind, how);
    }

    /// `path` is taken as given: a `/proc/PID/root/...` path must not be canonicalized (readlink of
    /// another mount namespace's root gives `/`, which would land on the host's file of that name).
    fn insert(&mut self, path: PathBuf, kind: LibKind, how: &str) {
        if !path.is_file() {
            return;
        }
        let Ok(id) = file_id(&path) else { return };
        match self.libs.entry(id) {
            Entry::Vacant(e) => {
                e.insert(FoundLibrary { path, kind, how: how.to_string() });
            }
            Entry::Occupied(mut e) => {
                let f = e.get_mut();
                if f.path.starts_with("/proc") && !path.starts_with("/proc") {
                    f.path = path;
                }
            }
        }
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

/// Every CUDA library the options point at, one per file, sorted by path.
pub fn discover(opts: &DiscoveryOptions) -> Vec<FoundLibrary> {
    discover_with_notes(opts).0
}

/// [`discover`], with what was passed over and why: an explicit file that is not a CUDA library, a
/// mapped library deleted or replaced after the process mapped it.
pub fn discover_with_notes(opts: &DiscoveryOptions) -> (Vec<FoundLibrary>, Vec<String>) {
    let mut f = Found::default();
    for p in &opts.explicit {
        if p.is_dir() {
            f.scan_dir(p, "explicit");
            continue;
        }
        let real = |kind| -> anyhow::Result<(LibKind, PathBuf)> {
            Ok((kind, std::fs::canonicalize(p).with_context(|| p.display().to_string())?))
        };
        match classify_file(p).and_then(real) {
            Ok((kind, real)) => f.insert(real, kind, "explicit"),
            Err(e) => f.notes.push(format!("{e:#}")),
        }
        if let Some(dir) = p.parent().filter(|_| !opts.no_siblings) {
            f.scan_dir(dir, "explicit");
        }
    }
    for &pid in &opts.pids {
        let (libs, notes) = mapped_cuda_libs(pid);
        for lib in libs {
            // the plain path when it is the same file: it outlives the process
            let path = match file_id(&lib.path_in_process) {
                Ok(id) if id == (lib.dev, lib.ino) => lib.path_in_process,
                _ => lib.open_path,
            };
            f.insert(path, lib.kind, &format!("maps:{pid}"));
        }
        f.notes.extend(notes);
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
    let mut v: Vec<FoundLibrary> = f.libs.into_values().collect();
    v.sort_by(|a, b| a.path.cmp(&b.path));
    (v, f.notes)
}

fn ldconfig_libs() -> Vec<PathBuf> {
    let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|b| std::process::Command::new(b).arg("-p").output().ok().filter(|o| o.status.success()));
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
    let mut v: Vec<PathBuf> =
        rd.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).map(|e| e.path()).collect();
    v.sort();
    v
}

fn cuda_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for root in children(Path::new("/usr/local"), "cuda").into_iter().chain(children(Path::new("/opt"), "cuda")) {
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
        // the driver mount of NVIDIA's container images and of the GPU machines
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
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

/// The CUDA libraries of one site-packages directory: `nvidia/*/lib/libcud*` and `libnccl*` (CUDA
/// 12 wheels' `nvidia/cuda_runtime/lib/libcudart.so.12`, CUDA 13 wheels'
/// `nvidia/cu13/lib/libcudart.so.13`, `nvidia/nccl/lib/libnccl.so.2` of `nvidia-nccl-cu12` /
/// `-cu13`) and the copies a torch wheel carries in `torch/lib` (`libcudart-8774224f.so.12`).
pub fn wheel_libs(site: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = children(&site.join("nvidia"), "").into_iter().map(|pkg| pkg.join("lib")).collect();
    dirs.push(site.join("torch/lib"));
    let mut v = Vec::new();
    for dir in dirs {
        for prefix in ["libcud", "libnccl"] {
            v.extend(children(&dir, prefix).into_iter().filter(|f| classify(f).is_some()));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::testutil::compile;
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
            // auditwheel copies (libtorch 2.5.1+cu124, older torch wheels, CUDA 13)
            ("libcudart-8774224f.so.12", Some(LibKind::Runtime)),
            ("libcudart-d0da41ae.so.11.0", Some(LibKind::Runtime)),
            ("libcudart-5e1c0ffe.so.13", Some(LibKind::Runtime)),
            ("libcudart-5e1c0ffe.so", Some(LibKind::Runtime)),
            ("libcuda-0123abcd.so.1", Some(LibKind::Driver)),
            ("libnccl.so.2", Some(LibKind::Nccl)),
            ("libnccl.so.2.27.3", Some(LibKind::Nccl)),
            ("libnccl.so", Some(LibKind::Nccl)),
            ("libcupti.so.12", Some(LibKind::Cupti)),
            ("libcupti.so.2025.1.0", Some(LibKind::Cupti)),
            ("libnccl-net.so", None),
            ("libcudart_static.a", None),
            ("libcudart-xyz.so.12", None),
            ("libcudart-8774224g.so.12", None),
            ("libcudart-8774224.so.12", None),
            ("libcudart-8774224fa.so.12", None),
            ("libcudart-8774224f.a", None),
            ("libcudart.so.12.bak", None),
            ("libcudart.so.", None),
            ("libcudart.so.12..1", None),
            ("libcudadebugger.so.1", None),
            ("libcudnn.so.9", None),
            ("libcuda_stub.so", None),
            ("libcudart.a", None),
        ] {
            assert_eq!(classify(Path::new(n)), k, "{n}");
        }
    }

    #[test]
    fn files_are_classified_by_name_then_by_their_symbols() {
        let d = tempfile::tempdir().unwrap();
        let p = |n: &str| d.path().join(n);
        // the name is enough: the content is not read
        std::fs::write(p("libcudart-8774224f.so.12"), b"x").unwrap();
        assert_eq!(classify_file(&p("libcudart-8774224f.so.12")).unwrap(), LibKind::Runtime);
        compile("int cudaLaunchKernel(const void *f) { return f != 0; }\n", &p("shim.so"), &["-shared", "-fPIC"]);
        assert_eq!(classify_file(&p("shim.so")).unwrap(), LibKind::Runtime);
        compile("int cuInit(unsigned f) { return (int)f; }\n", &p("drv.so"), &["-shared", "-fPIC"]);
        assert_eq!(classify_file(&p("drv.so")).unwrap(), LibKind::Driver);
        compile("int ncclAllReduce(void *s) { return s != 0; }\n", &p("collectives.so"), &["-shared", "-fPIC"]);
        assert_eq!(classify_file(&p("collectives.so")).unwrap(), LibKind::Nccl);
        compile("int cublasCreate_v2(void *h) { return h != 0; }\n", &p("other.so"), &["-shared", "-fPIC"]);
        let e = format!("{:#}", classify_file(&p("other.so")).unwrap_err());
        assert!(e.contains("defines none of") && e.contains("other.so"), "{e}");
        // not ELF, cut short, missing, a directory: errors naming the file, no panic
        std::fs::write(p("notes.txt"), b"cudaLaunchKernel cuInit").unwrap();
        let bytes = std::fs::read(p("drv.so")).unwrap();
        std::fs::write(p("cut.so"), &bytes[..bytes.len().min(200)]).unwrap();
        std::fs::write(p("empty.so"), b"").unwrap();
        for bad in ["notes.txt", "cut.so", "empty.so", "missing.so"] {
            let e = format!("{:#}", classify_file(&p(bad)).unwrap_err());
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(classify_file(d.path()).is_err());
    }

    #[test]
    fn explicit_files_are_one_entry_per_file_with_notes_for_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("libcudart.so.12"), b"x").unwrap();
        // the same file under another name and directory: a hard link
        std::fs::hard_link(a.join("libcudart.so.12"), b.join("libcudart-8774224f.so.12")).unwrap();
        std::fs::write(b.join("README"), b"not a library").unwrap();
        let (found, notes) = discover_with_notes(&DiscoveryOptions {
            explicit: vec![a.join("libcudart.so.12"), b.join("libcudart-8774224f.so.12"), b.join("README")],
            explicit_only: true,
            ..Default::default()
        });
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, LibKind::Runtime);
        assert_eq!(found[0].how, "explicit");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("README"), "{notes:?}");
    }

    #[test]
    fn the_gpu_images_driver_mount_is_searched() {
        let dirs = cuda_dirs();
        for d in ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"] {
            assert!(dirs.contains(&PathBuf::from(d)), "{d}: {dirs:?}");
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
    fn wheel_layouts_of_cuda_12_cuda_13_and_torch_are_found() {
        let d = tempfile::tempdir().unwrap();
        let site = d.path();
        for (dir, files) in [
            ("nvidia/cuda_runtime/lib", &["libcudart.so.12", "libnvrtc.so.12"][..]),
            ("nvidia/cu13/lib", &["libcudart.so.13", "libcublas.so.13", "libcudadevrt.a"][..]),
            ("torch/lib", &["libcudart-8774224f.so.12", "libtorch_cuda.so", "libc10_cuda.so"][..]),
        ] {
            std::fs::create_dir_all(site.join(dir)).unwrap();
            for f in files {
                std::fs::write(site.join(dir).join(f), b"x").unwrap();
            }
        }
        let mut got: Vec<String> =
            wheel_libs(site).iter().map(|p| p.strip_prefix(site).unwrap().display().to_string()).collect();
        got.sort();
        assert_eq!(
            got,
            [
                "nvidia/cu13/lib/libcudart.so.13",
                "nvidia/cuda_runtime/lib/libcudart.so.12",
                "torch/lib/libcudart-8774224f.so.12"
            ]
        );
        let found = discover(&DiscoveryOptions {
            explicit_only: false,
            site_packages: vec![site.into()],
            ..Default::default()
        });
        for want in [
            "nvidia/cuda_runtime/lib/libcudart.so.12",
            "nvidia/cu13/lib/libcudart.so.13",
            "torch/lib/libcudart-8774224f.so.12",
        ] {
            assert!(
                found.iter().any(|f| f.path.ends_with(want) && f.how == "pip-wheel" && f.kind == LibKind::Runtime),
                "{want}: {found:?}"
            );
        }
    }
}
