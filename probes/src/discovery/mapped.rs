//! The CUDA libraries a running process has mapped, and the path through which to open each one.
//!
//! A line of `/proc/PID/maps` gives the file's path *as the process sees it* and the (device, inode)
//! of the mapped file. The path alone is not enough:
//! - in another mount namespace (a container) the same path on the host is another file, or none;
//!   `/proc/PID/root/<path>` is the process's own view, wherever it runs;
//! - a library replaced after the process mapped it (a package upgrade) leaves the old file mapped
//!   and a new file at the path; probing the new file gives zero events and no error;
//! - a deleted library (`(deleted)`) has no path at all.
//!
//! So each candidate path is checked by `stat`: its (st_dev, st_ino) must be the maps line's.
//! Two views of one file can still disagree on those numbers: on overlayfs (every Docker image),
//! kernels before 6.8 print the *backing* file's device and inode in maps, while `stat` through the
//! overlay gives the overlay's. Then `/proc/PID/map_files/<range>` (the mapped file itself; reading
//! it needs CAP_SYS_ADMIN, which a tracer running as root has) settles whether the candidate is the
//! mapped file.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{classify, LibKind};

/// A CUDA library mapped by a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedLib {
    /// The path in the process's maps, as the process sees it (in its own mount namespace).
    pub path_in_process: PathBuf,
    /// The path to open (to read symbols, to attach uprobes): `/proc/PID/root` + `path_in_process`,
    /// checked to be the mapped file. (Or `path_in_process` itself, for a chrooted process in this
    /// mount namespace, whose maps show paths from our root.)
    pub open_path: PathBuf,
    /// (st_dev, st_ino) of `open_path`, what [`file_id`] gives: the key to tell files apart.
    pub dev: u64,
    pub ino: u64,
    pub kind: LibKind,
}

/// (st_dev, st_ino) of a file (symlinks followed): one file whatever the path it is reached by, and
/// a different file at the same path is a different id.
pub fn file_id(path: &Path) -> std::io::Result<(u64, u64)> {
    let m = std::fs::metadata(path)?;
    Ok((m.dev(), m.ino()))
}

/// One file-backed line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MapsFile {
    pub start: u64,
    pub end: u64,
    /// The device as `stat` spells it (`makedev(major, minor)`).
    pub dev: u64,
    pub ino: u64,
    pub path: PathBuf,
    /// The line ended in ` (deleted)`.
    pub deleted: bool,
}

/// `addr perms offset major:minor inode path`: the device is printed as hex major and minor of the
/// kernel's dev_t, which `makedev` turns into the st_dev that `stat` reports. `None` for anonymous
/// and special (`[heap]`) mappings and for lines that do not parse.
pub(crate) fn parse_maps_line(line: &str) -> Option<MapsFile> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        rest = &t[end..];
        Some(&t[..end]).filter(|f| !f.is_empty())
    };
    let (range, _perms, _offset, dev, inode) = (field()?, field()?, field()?, field()?, field()?);
    let path = rest.trim_start();
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let ino: u64 = inode.parse().ok()?;
    if ino == 0 || !path.starts_with('/') {
        return None;
    }
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(p) => (p, true),
        None => (path, false),
    };
    Some(MapsFile {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        dev: libc::makedev(u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?),
        ino,
        path: PathBuf::from(path),
        deleted,
    })
}

/// The CUDA libraries (by name, see [`classify`]) that process `pid` maps, one per file, each with
/// a path checked to open the mapped file; and notes on the ones skipped (deleted, replaced since
/// the process mapped them, not reachable). A process that is gone gives nothing and no note. The
/// same notes come back on every call while their cause lasts: a poll should report each once.
pub fn mapped_cuda_libs(pid: u32) -> (Vec<MappedLib>, Vec<String>) {
    let text = match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
            return (Vec::new(), Vec::new())
        }
        Err(e) => return (Vec::new(), vec![format!("pid {pid}: cannot read /proc/{pid}/maps: {e}")]),
    };
    let (mut libs, mut notes) = (Vec::new(), Vec::new());
    let mut seen = BTreeSet::new();
    for m in text.lines().filter_map(parse_maps_line) {
        let Some(kind) = classify(&m.path) else {
            continue;
        };
        if !seen.insert((m.dev, m.ino, m.path.clone())) {
            continue;
        }
        if m.deleted {
            notes.push(format!(
                "pid {pid}: {} was deleted or replaced after the process mapped it; not probed",
                m.path.display()
            ));
            continue;
        }
        match open_path(pid, &m) {
            Ok((open_path, (dev, ino), note)) => {
                notes.extend(note);
                libs.push(MappedLib { path_in_process: m.path, open_path, dev, ino, kind });
            }
            Err(note) => notes.push(note),
        }
    }
    (libs, notes)
}

/// `/proc/PID/root` + `path` (`path` is absolute).
pub(super) fn under_root(pid: u32, path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    PathBuf::from(format!("/proc/{pid}/root")).join(rel)
}

/// A path that opens a mapped file, the file's (device, inode), and a note when the match is only probable.
type OpenPath = (PathBuf, (u64, u64), Option<String>);

/// The path that opens the file of maps line `m`, with its id and a note when the match is only
/// probable; or why there is none.
fn open_path(pid: u32, m: &MapsFile) -> Result<OpenPath, String> {
    let candidates = [under_root(pid, &m.path), m.path.clone()];
    let ids: Vec<Option<(u64, u64)>> = candidates.iter().map(|c| file_id(c).ok()).collect();
    for (c, id) in candidates.iter().zip(&ids) {
        if *id == Some((m.dev, m.ino)) {
            return Ok((c.clone(), (m.dev, m.ino), None));
        }
    }
    let shown = m.path.display();
    let Some(first) = candidates.iter().zip(&ids).find_map(|(c, id)| Some((c, (*id)?))) else {
        return Err(format!("pid {pid}: {shown} is mapped but cannot be opened through /proc/{pid}/root; not probed"));
    };
    // one file, two views (overlayfs): the mapped file itself tells
    let mapped = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
    match file_id(&mapped) {
        Ok(id) => match candidates.iter().zip(&ids).find(|(_, c)| **c == Some(id)) {
            Some((c, _)) => Ok((c.clone(), id, None)),
            None => Err(format!(
                "pid {pid}: {shown} was replaced after the process mapped it (the file now at that \
                 path is another one); not probed"
            )),
        },
        // a replacement on the same file system always has another inode number: the same inode
        // number on another device is the overlay case
        Err(_) if first.1 .1 == m.ino => Ok((
            first.0.clone(),
            first.1,
            Some(format!(
                "pid {pid}: {shown}: the device in maps differs from the file's (overlayfs?) and \
                 {} cannot be read to check; taken as the mapped file since the inode matches",
                mapped.display()
            )),
        )),
        Err(_) => Err(format!(
            "pid {pid}: {shown} was replaced after the process mapped it (maps: inode {}, the file \
             now at that path: inode {}); not probed",
            m.ino, first.1 .1
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{compile, loader, LoadedChild};
    use super::*;

    fn maps_discovery(pid: u32) -> Vec<super::super::FoundLibrary> {
        super::super::discover(&super::super::DiscoveryOptions {
            pids: vec![pid],
            explicit_only: true,
            ..Default::default()
        })
    }

    #[test]
    fn maps_lines_parse_device_inode_and_deleted() {
        let l = "7f1c2a000000-7f1c2a021000 r-xp 00001000 fd:01 1234567    /usr/lib/libcuda.so.1";
        let m = parse_maps_line(l).unwrap();
        assert_eq!((m.start, m.end), (0x7f1c2a000000, 0x7f1c2a021000));
        assert_eq!(m.dev, libc::makedev(0xfd, 1));
        assert_eq!(m.ino, 1234567);
        assert_eq!(m.path, PathBuf::from("/usr/lib/libcuda.so.1"));
        assert!(!m.deleted);
        // a major above 255 and a minor above 255 (both spill into the high bits of st_dev)
        let big = parse_maps_line("1000-2000 r--p 0 103:1a2 9 /a b/libcudart.so.12 (deleted)").unwrap();
        assert_eq!(big.dev, libc::makedev(0x103, 0x1a2));
        assert_ne!(big.dev, (0x103 << 8) | 0x1a2, "not the old 16-bit encoding");
        assert_eq!(big.path, PathBuf::from("/a b/libcudart.so.12"));
        assert!(big.deleted);
        for bad in [
            "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [vdso]",
            "7f0000000000-7f0000001000 rw-p 00000000 00:00 0",
            "55d0c0000000-55d0c0001000 r--p 00000000 08:01",
            "zz-55d0c0001000 r--p 00000000 08:01 12 /x",
            "",
        ] {
            assert_eq!(parse_maps_line(bad), None, "{bad}");
        }
    }

    /// The device encoding against the kernel: every regular file this test process maps has the
    /// (dev, inode) that `stat` gives for it.
    #[test]
    fn own_maps_match_stat_of_the_mapped_files() {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let files: Vec<MapsFile> = text.lines().filter_map(parse_maps_line).filter(|m| !m.deleted).collect();
        let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        assert!(files.iter().any(|m| m.path == me), "{text}");
        assert!(files.iter().any(|m| m.path.to_string_lossy().contains("libc.so")), "{text}");
        for m in &files {
            assert_eq!(file_id(&m.path).unwrap(), (m.dev, m.ino), "{}", m.path.display());
        }
    }

    #[test]
    fn a_process_without_cuda_maps_none() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (libs, notes) = mapped_cuda_libs(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(libs.is_empty(), "{libs:?}");
        assert!(notes.is_empty(), "{notes:?}");
        // gone: nothing, and nothing to say
        assert_eq!(mapped_cuda_libs(child.id()), (Vec::new(), Vec::new()));
    }

    #[test]
    fn a_dlopened_fake_libcudart_is_found_with_its_file_id() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        let lib = dir.join("libcudart.so.12");
        compile(
            "int cudaMalloc(void **p, unsigned long n) { (void)p; (void)n; return 0; }\n",
            &lib,
            &["-shared", "-fPIC"],
        );
        let child = LoadedChild::start(&dir, &lib);
        let pid = child.pid();
        let (libs, notes) = mapped_cuda_libs(pid);
        assert_eq!(libs.len(), 1, "{libs:?} {notes:?}");
        let m = &libs[0];
        assert_eq!(m.kind, LibKind::Runtime);
        assert_eq!(m.path_in_process, lib);
        assert_eq!(m.open_path, PathBuf::from(format!("/proc/{pid}/root{}", lib.display())));
        assert_eq!((m.dev, m.ino), file_id(&lib).unwrap());
        assert_eq!(file_id(&m.open_path).unwrap(), (m.dev, m.ino));
        assert!(notes.is_empty(), "{notes:?}");
        let opened: Vec<_> = mapped_cuda_libs(pid).0.into_iter().map(|l| l.open_path).collect();
        assert_eq!(opened, vec![m.open_path.clone()]);
        // discovery names it by its plain path, the same file, which outlives the process
        let found = maps_discovery(pid);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, lib);
        assert_eq!(found[0].how, format!("maps:{pid}"));
    }

    #[test]
    fn a_replaced_or_deleted_library_is_skipped_with_a_note() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        let src = "int cuInit(unsigned f) { (void)f; return 0; }\n";
        let lib = dir.join("libcuda.so.1");
        compile(src, &lib, &["-shared", "-fPIC"]);
        let child = LoadedChild::start(&dir, &lib);
        let pid = child.pid();
        assert_eq!(mapped_cuda_libs(pid).0.len(), 1);
        // an upgrade: a new file renamed over the old one, which stays mapped
        let new = dir.join("libcuda.so.1.new");
        compile(src, &new, &["-shared", "-fPIC"]);
        std::fs::rename(&new, &lib).unwrap();
        let (libs, notes) = mapped_cuda_libs(pid);
        assert!(libs.is_empty(), "{libs:?}");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("replaced") && notes[0].contains("libcuda.so.1"), "{notes:?}");
        // gone from the file system altogether: the maps line says `(deleted)`
        std::fs::remove_file(&lib).unwrap();
        let (libs, notes) = mapped_cuda_libs(pid);
        assert!(libs.is_empty(), "{libs:?}");
        assert!(notes.len() == 1 && notes[0].contains("deleted"), "{notes:?}");
    }

    /// A container's situation: the process, in its own mount namespace, maps a library at a path
    /// where the host has another file. It is found under `/proc/PID/root` with the process's file
    /// id, never the host's. Then a mount covers it inside the namespace: neither path opens the
    /// mapped file any more, and it is skipped with a note. Needs root (`unshare -m`, `mount`).
    #[test]
    fn another_mount_namespace_is_seen_through_proc_root() {
        let root = unsafe { libc::geteuid() } == 0;
        let unshare_ok =
            root && std::process::Command::new("unshare").args(["-m", "true"]).status().is_ok_and(|s| s.success());
        if !unshare_ok {
            eprintln!("not root or no unshare -m: the mount-namespace case is not tested");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        let (ctl, libdir) = (dir.join("ctl"), dir.join("lib"));
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::create_dir_all(&libdir).unwrap();
        let lib = libdir.join("libcuda.so.1");
        for (i, out) in [lib.clone(), ctl.join("ns1.so"), ctl.join("ns2.so")].iter().enumerate() {
            compile(&format!("int cuInit(unsigned f) {{ return (int)f + {i}; }}\n"), out, &["-shared", "-fPIC"]);
        }
        let script = format!(
            "set -e; mount -t tmpfs cw-ns1 {l}; cp {c}/ns1.so {l}/libcuda.so.1; {ld} {l}/libcuda.so.1 & \
             while [ ! -e {c}/go ]; do sleep 0.05; done; \
             mount -t tmpfs cw-ns2 {l}; cp {c}/ns2.so {l}/libcuda.so.1; touch {c}/done; wait",
            l = libdir.display(),
            c = ctl.display(),
            ld = loader(&ctl).display()
        );
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["-m", "--propagation", "private", "sh", "-c", &script]);
        let child = LoadedChild::spawn(cmd);
        let pid = child.pid();

        let (libs, notes) = mapped_cuda_libs(pid);
        assert_eq!(libs.len(), 1, "{libs:?} {notes:?}");
        let m = &libs[0];
        assert_eq!(m.kind, LibKind::Driver);
        assert_eq!(m.path_in_process, lib);
        assert_eq!(m.open_path, under_root(pid, &lib));
        assert_ne!((m.dev, m.ino), file_id(&lib).unwrap(), "the host's file is another one");
        assert_eq!(file_id(&m.open_path).unwrap(), (m.dev, m.ino));
        assert!(notes.is_empty(), "{notes:?}");
        let found = maps_discovery(pid);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, m.open_path, "not the host's file of that name");

        std::fs::write(ctl.join("go"), b"").unwrap();
        let t0 = std::time::Instant::now();
        while !ctl.join("done").exists() {
            assert!(t0.elapsed().as_secs() < 10, "the second mount did not happen");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let (libs, notes) = mapped_cuda_libs(pid);
        assert!(libs.is_empty(), "{libs:?}");
        assert!(notes.len() == 1 && notes[0].contains("replaced"), "{notes:?}");
    }
}
