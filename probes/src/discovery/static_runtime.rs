//! A CUDA runtime linked into the program itself rather than loaded as `libcudart.so`.
//!
//! nvcc links the runtime statically by default (`-cudart=static`), and so does CMake's
//! `CMAKE_CUDA_RUNTIME_LIBRARY`. Such a program maps no libcudart: probing libcudart finds nothing,
//! and only its driver calls are seen. Two cases:
//! - **not stripped**: the runtime's functions are in the executable's `.symtab`, as LOCAL symbols
//!   (`cudaLaunchKernel`, `cudaMalloc`, `cudaStreamSynchronize`); the runtime probes attach to the
//!   executable by those names like to a libcudart;
//! - **stripped**: no names to attach to, but the runtime's code still carries its read-only
//!   strings. Two are used, both C strings of `.rodata` in every libcudart, static or shared
//!   (checked in the 12.8 and 13.0 `libcudart.so` and the 13.0 `libcudart_static.a` linked
//!   into a program and stripped):
//!   - `cudaErrorInsufficientDriver`, from the runtime's table of error names (`cudaGetErrorName`),
//!     which exists in every CUDA version and no other library has;
//!   - `cuGetExportTable`, the name under which the runtime asks libcuda for its private
//!     interface, at start-up, in every version.
//!
//!   Both must be there, each as a whole C string: a program that prints CUDA error names itself,
//!   or one that looks up driver entry points by name, has at most one of them. `.rodata` only,
//!   not `.dynstr`: a program that *imports* driver functions has their names in `.dynstr`.
//!
//! Only the one file is read (the executable: never every library it maps), through a cache of the
//! byte ranges parsed, so a program with hundreds of MB of GPU code costs its symbol tables and its
//! `.rodata`.

use std::path::{Path, PathBuf};

use object::read::ReadCache;
use object::{Object, ObjectSection};

use super::mapped::{file_id, under_root};

/// A CUDA runtime found inside a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticRuntime {
    /// The file defines the runtime's functions by name: attach the runtime probes to it by symbol.
    Symbols(PathBuf),
    /// The file carries the runtime's code but no names for it (stripped): its runtime calls
    /// cannot be probed; say so.
    Stripped(PathBuf),
}

impl StaticRuntime {
    #[cfg(test)]
    fn path(&self) -> &Path {
        match self {
            StaticRuntime::Symbols(p) | StaticRuntime::Stripped(p) => p,
        }
    }
}

/// The runtime's own functions: any one defined in the file means the runtime is there by name.
const RUNTIME_FUNCTIONS: [&str; 3] = ["cudaLaunchKernel", "cudaMalloc", "cudaStreamSynchronize"];

/// C strings of the runtime's `.rodata`, all of which a stripped runtime still carries (see the
/// module's doc).
const RODATA_MARKS: [&[u8]; 2] = [b"cudaErrorInsufficientDriver", b"cuGetExportTable"];

/// The runtime linked into the main executable of process `pid`, read through `/proc/PID/exe`
/// (the very file the process runs, in whatever mount namespace). The path returned is the
/// executable as the process names it, under `/proc/PID/root`, when that is the same file (so it
/// stays valid after the process exits), else `/proc/PID/exe`. `None` when the executable has
/// nothing of the runtime (a program that loads libcudart, a driver-API program, a Python
/// interpreter), and when the process is gone.
///
/// Meant for a process that maps no libcudart: one that does would have its runtime calls probed
/// there, and an executable that carries a runtime of its own as well is rare.
pub fn static_runtime_of(pid: u32) -> Option<StaticRuntime> {
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let found = static_runtime_in_file(&exe)?;
    let path = named_exe(pid, &exe).unwrap_or(exe);
    Some(match found {
        StaticRuntime::Symbols(_) => StaticRuntime::Symbols(path),
        StaticRuntime::Stripped(_) => StaticRuntime::Stripped(path),
    })
}

/// `/proc/PID/root` + the executable's path, or that path as we see it, when it is the file `exe`.
fn named_exe(pid: u32, exe: &Path) -> Option<PathBuf> {
    let id = file_id(exe).ok()?;
    let target = std::fs::read_link(exe).ok()?;
    [under_root(pid, &target), target].into_iter().find(|c| file_id(c).ok() == Some(id))
}

/// The runtime carried by any ELF file (an executable, or a library that links its own copy, as
/// cuBLAS does): `Symbols` when the file defines one of the runtime's functions (`.symtab` or
/// `.dynsym`; a `libcudart.so` itself is `Symbols` too), `Stripped` when it has only the runtime's
/// strings, `None` when neither, or when the file is not a readable ELF file.
pub fn static_runtime_in_file(path: &Path) -> Option<StaticRuntime> {
    let cache = ReadCache::new(std::fs::File::open(path).ok()?);
    let file = object::File::parse(&cache).ok()?;
    if !crate::symbols::defined_in(&file, &RUNTIME_FUNCTIONS).is_empty() {
        return Some(StaticRuntime::Symbols(path.to_path_buf()));
    }
    let mut seen = [false; RODATA_MARKS.len()];
    for section in file.sections() {
        let is_rodata = section.name().is_ok_and(|n| n == ".rodata" || n.starts_with(".rodata."));
        let Some(data) = is_rodata.then(|| section.data().ok()).flatten() else {
            continue;
        };
        // whole C strings, NUL on both sides: the bytes of a mark inside other data (a Rust
        // program's string constants are not NUL-separated, and this one has the marks as
        // constants) do not count
        for s in data.split(|&b| b == 0) {
            for (mark, seen) in RODATA_MARKS.iter().zip(seen.iter_mut()) {
                *seen |= s == *mark;
            }
        }
    }
    seen.iter().all(|&s| s).then(|| StaticRuntime::Stripped(path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{compile, LoadedChild};
    use super::*;

    /// A program shaped like one linking the runtime statically: a local `cudaLaunchKernel`, the
    /// runtime's two marker strings in `.rodata`; it prints `ok PID` and waits when given an argument.
    const FAKE_STATIC: &str = r#"
#include <stdio.h>
#include <unistd.h>
static const char *names[] = { "cudaErrorInsufficientDriver", "cuGetExportTable" };
static __attribute__((noinline, used)) int cudaLaunchKernel(const void *f) { return f != 0; }
int main(int argc, char **argv) {
    printf("ok %d %s\n", (int)getpid(), names[argc > 5]);
    fflush(stdout);
    if (argc > 1) sleep(30);
    return cudaLaunchKernel(argv) - 1;
}
"#;

    #[test]
    fn symbols_stripped_or_nothing() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("app");
        compile(FAKE_STATIC, &exe, &["-O0"]);
        assert_eq!(static_runtime_in_file(&exe), Some(StaticRuntime::Symbols(exe.clone())));
        let stripped = d.path().join("app-stripped");
        compile(FAKE_STATIC, &stripped, &["-O0", "-s"]);
        assert_eq!(static_runtime_in_file(&stripped), Some(StaticRuntime::Stripped(stripped.clone())));
        // one marker alone (a program printing an error name itself) is not the runtime
        let one = d.path().join("one-mark");
        compile(
            "#include <stdio.h>\nint main(void) { puts(\"cudaErrorInsufficientDriver\"); return 0; }\n",
            &one,
            &["-s"],
        );
        assert_eq!(static_runtime_in_file(&one), None);
        // a driver-API program: `cuGetExportTable` and `cuInit` imported, so only in `.dynstr`
        let drv = d.path().join("libcuda.so.1");
        compile(
            "int cuInit(unsigned f) { return f; }\nint cuGetExportTable(void) { return 0; }\n",
            &drv,
            &["-shared", "-fPIC"],
        );
        let user = d.path().join("driver-user");
        compile(
            "int cuInit(unsigned); int cuGetExportTable(void);\nint main(void) { return cuInit(0) + cuGetExportTable(); }\n",
            &user,
            &[drv.to_str().unwrap(), "-s"],
        );
        assert_eq!(static_runtime_in_file(&user), None);
        // this test binary, a shell, a text file, a missing file
        assert_eq!(static_runtime_in_file(&std::env::current_exe().unwrap()), None);
        assert_eq!(static_runtime_in_file(Path::new("/bin/sh")), None);
        // (built at run time: NUL-separated literals would put the marks in this test's own .rodata)
        let text: Vec<u8> = RODATA_MARKS.iter().flat_map(|m| m.iter().chain(b"\0")).copied().collect();
        std::fs::write(d.path().join("text"), text).unwrap();
        assert_eq!(static_runtime_in_file(&d.path().join("text")), None);
        assert_eq!(static_runtime_in_file(&d.path().join("missing")), None);
    }

    #[test]
    fn the_running_executable_is_examined() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        let stripped = dir.join("app-stripped");
        compile(FAKE_STATIC, &stripped, &["-O0", "-s"]);
        let mut cmd = std::process::Command::new(&stripped);
        cmd.arg("wait");
        let child = LoadedChild::spawn(cmd);
        let pid = child.pid();
        let found = static_runtime_of(pid).expect("the runtime's strings");
        assert!(matches!(found, StaticRuntime::Stripped(_)), "{found:?}");
        assert_eq!(found.path(), under_root(pid, &stripped));
        assert_eq!(file_id(found.path()).unwrap(), file_id(&stripped).unwrap());

        let mut sleeper = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let none = static_runtime_of(sleeper.id());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert_eq!(none, None);
        assert_eq!(static_runtime_of(sleeper.id()), None, "a process that is gone");
    }

    /// The real thing: NVIDIA's `libcudart_static.a` from the `nvidia-cuda-runtime` 13 wheel
    /// (`nvidia/cu13/lib`), which scripts/install-test-deps.sh installs into the test venv
    /// (`CAUSEWAY_CUDART_STATIC` names another archive).
    #[test]
    fn a_program_linked_with_the_real_static_runtime() {
        let archive = std::env::var_os("CAUSEWAY_CUDART_STATIC").map(std::path::PathBuf::from).unwrap_or_else(|| {
            let venv = std::env::var_os("CAUSEWAY_VENV").map(std::path::PathBuf::from).unwrap_or_else(|| {
                std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/causeway/venv")
            });
            let pattern = venv.join("lib");
            std::fs::read_dir(&pattern)
                .ok()
                .and_then(|rd| {
                    rd.flatten()
                        .map(|e| e.path().join("site-packages/nvidia/cu13/lib/libcudart_static.a"))
                        .find(|p| p.exists())
                })
                .unwrap_or_else(|| {
                    panic!("no libcudart_static.a under {}: run scripts/install-test-deps.sh", pattern.display())
                })
        });
        let archive = archive.to_string_lossy().into_owned();
        let src = "#include <stddef.h>\nint cudaMalloc(void **, size_t);\n\
                   int main(int argc, char **argv) { void *p; (void)argv; return argc > 5 ? cudaMalloc(&p, 16) : 0; }\n";
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("real");
        compile(src, &exe, &[&archive, "-lpthread", "-ldl", "-lrt"]);
        assert_eq!(static_runtime_in_file(&exe), Some(StaticRuntime::Symbols(exe.clone())));
        let syms = crate::symbols::ElfSymbols::load(&exe).unwrap();
        for f in ["cudaLaunchKernel", "cudaMalloc", "cudaStreamSynchronize"] {
            assert!(syms.offset_of(f).is_some(), "{f}");
        }
        let stripped = d.path().join("real-stripped");
        compile(src, &stripped, &[&archive, "-lpthread", "-ldl", "-lrt", "-s"]);
        assert_eq!(static_runtime_in_file(&stripped), Some(StaticRuntime::Stripped(stripped.clone())));
    }
}
