//! Test helpers: C programs and libraries compiled at test time, and a child process that maps a
//! library with `dlopen` and stays alive while a test reads its maps.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Compiles C source `src` to `out` with the first C compiler found (gcc, cc, clang; the build
/// itself needs clang). Panics with the compiler's message on failure: this is test setup.
pub fn compile(src: &str, out: &Path, args: &[&str]) {
    compile_many(&[src], out, args)
}

/// [`compile`] with several translation units (to have two `static` functions of one name).
pub fn compile_many(srcs: &[&str], out: &Path, args: &[&str]) {
    let dir = out.parent().expect("output in a directory");
    let name = out.file_name().unwrap().to_string_lossy();
    let files: Vec<PathBuf> = srcs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let f = dir.join(format!("{name}.{i}.c"));
            std::fs::write(&f, s).unwrap();
            f
        })
        .collect();
    let mut last = String::new();
    for cc in ["gcc", "cc", "clang"] {
        match Command::new(cc).args(&files).arg("-o").arg(out).args(args).output() {
            Ok(o) if o.status.success() => return,
            Ok(o) => last = format!("{cc}: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => last = format!("{cc}: {e}"),
        }
    }
    panic!("cannot compile {}: {last}", out.display());
}

/// A program that `dlopen`s `argv[1]`, prints `ok PID`, and sleeps.
pub const LOADER_SRC: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2 || !dlopen(argv[1], RTLD_NOW)) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    printf("ok %d\n", (int)getpid());
    fflush(stdout);
    sleep(30);
    return 0;
}
"#;

/// Builds the loader into `dir` and returns its path.
pub fn loader(dir: &Path) -> PathBuf {
    let exe = dir.join("cw-loader");
    if !exe.exists() {
        compile(LOADER_SRC, &exe, &["-ldl"]);
    }
    exe
}

/// A running child that printed `ok PID` (the pid of the process holding the mapping, which can be
/// a grandchild, as under `unshare`). Killed when dropped.
pub struct LoadedChild {
    child: Child,
    pid: u32,
    /// The words the child printed after `ok PID`.
    pub extra: Vec<String>,
}

impl LoadedChild {
    /// Runs the loader (built in `dir`) on `lib` and waits until the library is mapped.
    pub fn start(dir: &Path, lib: &Path) -> LoadedChild {
        let mut cmd = Command::new(loader(dir));
        cmd.arg(lib);
        LoadedChild::spawn(cmd)
    }

    /// Runs `cmd`, which must print `ok PID [words...]` once it is ready (its library mapped).
    pub fn spawn(mut cmd: Command) -> LoadedChild {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let mut words = line.split_whitespace();
        let pid = match (words.next(), words.next().and_then(|p| p.parse().ok())) {
            (Some("ok"), Some(pid)) => pid,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child did not start as expected: {line:?}")
            }
        };
        let extra = words.map(str::to_string).collect();
        LoadedChild { child, pid, extra }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for LoadedChild {
    fn drop(&mut self) {
        if self.pid != self.child.id() {
            // the grandchild this test started, by its id
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
