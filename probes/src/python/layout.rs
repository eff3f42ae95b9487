//! Where a traced process's CPython keeps what the frame walk reads: the interpreter module mapped
//! in the process (a `libpython3.N.so` or an executable with the interpreter linked in), its
//! version, the run-time addresses of `_PyRuntime` and `PyCode_Type`, and the field offsets
//! (`struct cw_py_layout` in `ebpf/causeway.h`). From 3.13 the interpreter publishes its offsets
//! (`_Py_DebugOffsets`, at the start of `_PyRuntime`, read from the file); before that they come
//! from per-version tables taken from CPython's headers (checked against the DWARF of real builds
//! by the tests). A version neither covers is refused with a note, never guessed.

use std::path::{Path, PathBuf};

use object::read::ReadCache;

use crate::symbols::{symbol_address, Mapping, Segments};

/// A layout field the version does not have (`CW_PY_NONE`).
const NONE: u16 = 0xffff;

/// `struct cw_py_layout`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyLayoutRaw {
    pub runtime: u64,
    pub code_type: u64,
    pub runtime_interps: u16,
    pub interp_next: u16,
    pub interp_threads: u16,
    pub tstate_next: u16,
    pub tstate_thread_id: u16,
    pub tstate_frame: u16,
    pub cframe_frame: u16,
    pub frame_span: u16,
    pub frame_previous: u16,
    pub frame_code: u16,
    pub frame_instr: u16,
    pub frame_owner: u16,
    pub frame_is_entry: u16,
    pub code_code: u16,
    pub code_filename: u16,
    pub code_name: u16,
    pub code_firstlineno: u16,
    pub code_linetable: u16,
    pub object_type: u16,
    pub bytes_size: u16,
    pub bytes_data: u16,
    pub unicode_state: u16,
    pub unicode_length: u16,
    pub ascii_data: u16,
    pub compact_data: u16,
    pub instr_is_index: u8,
    pub every_frame_entry: u8,
    pub owner_cstack: u8,
    pub minor: u8,
    pub pad: [u8; 2],
}

const _: () = assert!(std::mem::size_of::<PyLayoutRaw>() == 72);

// SAFETY: plain integers, `repr(C)`, no padding the compiler adds (the size is checked above).
unsafe impl aya::Pod for PyLayoutRaw {}

/// Where a layout's offsets came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetsFrom {
    /// The interpreter's own `_Py_DebugOffsets`.
    DebugOffsets,
    /// This build's table for the version.
    Table,
}

/// The frame-walk layout of one process's interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyLayout {
    pub raw: PyLayoutRaw,
    /// (3, minor, micro) when the file says (`Py_Version`); micro 0 when only the name does.
    pub version: (u8, u8, u8),
    pub from: OffsetsFrom,
    /// The file the interpreter is in.
    pub module: PathBuf,
}

/// Why a process gets no Python frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("not a Python process (no interpreter mapped)")]
    NotPython,
    #[error("CPython {0}.{1} in {2}: this build knows the frame layout of 3.10 to 3.13 only; native frames only")]
    Unsupported(u8, u8, String),
    #[error("{0}: {1}")]
    Unreadable(String, String),
}

/// The interpreter of a process, from its executable mappings (`/proc/PID/maps`) and its
/// executable (`/proc/PID/exe`): the layout its frames are walked with.
pub fn detect(maps: &[Mapping], exe: Option<&Path>) -> Result<PyLayout, LayoutError> {
    let mut candidates: Vec<&Mapping> = maps.iter().filter(|m| is_libpython(&m.path)).collect();
    if candidates.is_empty() {
        // an interpreter linked into the executable (Debian's python3.N, static pyenv builds)
        candidates = maps.iter().filter(|m| Some(m.path.as_path()) == exe && names_python(&m.path)).collect();
    }
    let Some(m) = candidates.first() else { return Err(LayoutError::NotPython) };
    match layout_of(&m.path, m) {
        // a `python3.N` launcher whose libpython is not mapped yet (the loader is still at work)
        Err(LayoutError::Unreadable(..)) if !is_libpython(&m.path) => Err(LayoutError::NotPython),
        r => r,
    }
}

fn is_libpython(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libpython3.") && n.contains(".so"))
}

fn names_python(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python"))
}

/// `N` of `libpython3.N.so…` or `python3.N`.
fn minor_from_name(p: &Path) -> Option<u8> {
    let n = p.file_name()?.to_str()?;
    let rest = n.strip_prefix("libpython3.").or_else(|| n.strip_prefix("python3."))?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The layout of the interpreter in `path`, mapped (executable part) by `m`.
pub fn layout_of(path: &Path, m: &Mapping) -> Result<PyLayout, LayoutError> {
    let unreadable = |e: String| LayoutError::Unreadable(path.display().to_string(), e);
    let file = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let cache = ReadCache::new(file);
    let elf = object::File::parse(&cache).map_err(|e| unreadable(e.to_string()))?;
    let segments = Segments::of(&elf);
    let symbol = |name: &str| symbol_address(&elf, name);
    let read = |vaddr: u64, len: u64| -> Option<Vec<u8>> {
        let off = segments.file_offset(vaddr)?;
        object::ReadRef::read_bytes_at(&cache, off, len).ok().map(|b| b.to_vec())
    };
    let runtime = symbol("_PyRuntime").ok_or_else(|| unreadable("no `_PyRuntime` symbol (stripped?)".into()))?;
    let code_type = symbol("PyCode_Type").ok_or_else(|| unreadable("no `PyCode_Type` symbol".into()))?;
    let version = match symbol("Py_Version").and_then(|a| read(a, 4)) {
        Some(b) => {
            let hex = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            ((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8)
        }
        None => (
            3,
            minor_from_name(path).ok_or_else(|| unreadable("no `Py_Version` and no version in the name".into()))?,
            0,
        ),
    };
    // load bias: the mapping's start minus the virtual address of its file offset
    let mapped_vaddr = segments.vaddr(m.offset).ok_or_else(|| unreadable("the mapping matches no segment".into()))?;
    let bias = m.start.wrapping_sub(mapped_vaddr);
    let mut raw = match version {
        (3, 10..=12, _) => table(version.1),
        (3, 13, _) => {
            let bytes = read(runtime, DEBUG_OFFSETS_313_SIZE)
                .ok_or_else(|| unreadable("`_PyRuntime` is not in the file (no debug offsets)".into()))?;
            from_debug_offsets_313(&bytes).map_err(unreadable)?
        }
        (major, minor, _) => return Err(LayoutError::Unsupported(major, minor, path.display().to_string())),
    };
    raw.runtime = bias.wrapping_add(runtime);
    raw.code_type = bias.wrapping_add(code_type);
    raw.minor = version.1;
    let from = if version.1 >= 13 { OffsetsFrom::DebugOffsets } else { OffsetsFrom::Table };
    Ok(PyLayout { raw, version, from, module: path.to_path_buf() })
}

/// The offsets shared by 3.10-3.12 (object headers of the default, GIL build).
fn base() -> PyLayoutRaw {
    PyLayoutRaw {
        interp_next: 0,
        tstate_next: 8,
        cframe_frame: NONE,
        frame_owner: NONE,
        frame_is_entry: NONE,
        code_code: NONE,
        object_type: 8,
        bytes_size: 16,
        bytes_data: 32,
        unicode_state: 32,
        unicode_length: 16,
        owner_cstack: 0xff,
        ..Default::default()
    }
}

/// 3.10-3.12, from CPython's `Include/cpython/pystate.h`, `Include/internal/pycore_runtime.h`,
/// `pycore_interp.h`, `pycore_frame.h` (3.11+), `Include/cpython/frameobject.h` (3.10),
/// `Include/cpython/code.h` and `unicodeobject.h` of each version (x86-64).
fn table(minor: u8) -> PyLayoutRaw {
    let b = base();
    match minor {
        10 => PyLayoutRaw {
            runtime_interps: 32,
            interp_threads: 8,
            tstate_thread_id: 176,
            tstate_frame: 24, // PyThreadState.frame: a PyFrameObject
            frame_span: 24,   // f_back 24, f_code 32, f_lasti 96
            frame_previous: 0,
            frame_code: 8,
            frame_instr: 72,
            code_filename: 104,
            code_name: 112, // co_name: 3.10 has no co_qualname
            code_firstlineno: 40,
            code_linetable: 120,
            ascii_data: 48,
            compact_data: 72,
            instr_is_index: 1,
            every_frame_entry: 1,
            ..b
        },
        11 => PyLayoutRaw {
            runtime_interps: 40,
            interp_threads: 16,
            tstate_thread_id: 152,
            tstate_frame: 56, // .cframe
            cframe_frame: 8,  // _PyCFrame.current_frame
            frame_span: 0,
            frame_previous: 48,
            frame_code: 32,
            frame_instr: 56, // prev_instr
            frame_is_entry: 68,
            code_code: 184,
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 72,
            code_linetable: 136,
            ascii_data: 48,
            compact_data: 72,
            ..b
        },
        _ => PyLayoutRaw {
            runtime_interps: 40,
            interp_threads: 72,
            tstate_thread_id: 136,
            tstate_frame: 56,
            cframe_frame: 0,
            frame_span: 0,
            frame_previous: 8,
            frame_code: 0,
            frame_instr: 56, // prev_instr
            frame_owner: 70,
            owner_cstack: 3, // FRAME_OWNED_BY_CSTACK
            code_code: 192,
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 68,
            code_linetable: 136,
            ascii_data: 40,
            compact_data: 56,
            ..b
        },
    }
}

/// Bytes of 3.13's `_Py_DebugOffsets` read.
const DEBUG_OFFSETS_313_SIZE: u64 = 584;

/// 3.13's `_Py_DebugOffsets` (`Include/internal/pycore_runtime.h`): the cookie, the version, then
/// sections of u64 offsets, each led by the size of the struct it describes.
fn from_debug_offsets_313(b: &[u8]) -> Result<PyLayoutRaw, String> {
    if b.len() < DEBUG_OFFSETS_313_SIZE as usize || &b[..8] != b"xdebugpy" {
        return Err("`_PyRuntime` does not start with the `xdebugpy` cookie".into());
    }
    let u = |at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    let version = u(8);
    if (version >> 16) & 0xff != 13 {
        return Err(format!("debug offsets of version {version:#x}, expected 3.13"));
    }
    if u(16) != 0 {
        return Err("a free-threaded build: its object headers are not read by this build".into());
    }
    let f =
        |at: usize| -> Result<u16, String> { u16::try_from(u(at)).map_err(|_| format!("offset {} too large", u(at))) };
    let (previous, executable, instr) = (f(232)?, f(240)?, f(248)?);
    let owner = f(264)?;
    let span_end = previous.max(executable).max(instr).max(owner);
    if span_end > 120 || previous % 8 != 0 || executable % 8 != 0 || instr % 8 != 0 {
        return Err("interpreter frame fields outside one 128-byte read".into());
    }
    let ascii = f(560)?;
    Ok(PyLayoutRaw {
        runtime_interps: f(40)?,
        interp_next: f(64)?,
        interp_threads: f(72)?,
        tstate_next: f(168)?,
        tstate_thread_id: f(192)?,
        tstate_frame: f(184)?,
        cframe_frame: NONE,
        frame_span: 0,
        frame_previous: previous,
        frame_code: executable,
        frame_instr: instr,
        frame_owner: owner,
        frame_is_entry: NONE,
        owner_cstack: 3,
        code_code: f(344)?,
        code_filename: f(280)?,
        code_name: f(296)?,
        code_firstlineno: f(312)?,
        code_linetable: f(304)?,
        object_type: f(360)?,
        bytes_size: f(520)?,
        bytes_data: f(528)?,
        unicode_state: f(544)?,
        unicode_length: f(552)?,
        ascii_data: ascii,
        compact_data: ascii + 16, // PyCompactUnicodeObject: + utf8_length, utf8
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    /// Each installed interpreter prints where its `_PyRuntime` and `PyCode_Type` are (through
    /// ctypes); the layout found from its maps must name the same addresses and its version.
    #[test]
    fn every_installed_cpython_is_found_with_its_runtime_addresses() {
        let script = "import ctypes, sys\n\
                      a = lambda n: ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, n))\n\
                      print(a('_PyRuntime'), a('PyCode_Type'), sys.version_info[1], flush=True)\n\
                      sys.stdin.read()\n";
        let pythons = causeway_testdata::cpythons();
        assert!(!pythons.is_empty(), "no CPython 3.10+ on this machine");
        for py in pythons {
            let mut child = std::process::Command::new(&py.path)
                .args(["-c", script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
            let maps = crate::symbols::read_maps(child.id()).unwrap();
            let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).ok();
            let found = detect(&maps, exe.as_deref());
            drop(child.stdin.take());
            child.wait().unwrap();
            let want: Vec<u64> = line.split_whitespace().map(|v| v.parse().unwrap()).collect();
            let layout = found.unwrap_or_else(|e| panic!("{}: {e}", py.path.display()));
            assert_eq!(
                (layout.raw.runtime, layout.raw.code_type, layout.version.1 as u64),
                (want[0], want[1], want[2]),
                "{}",
                py.path.display()
            );
            assert_eq!(layout.from, if py.minor >= 13 { OffsetsFrom::DebugOffsets } else { OffsetsFrom::Table });
        }
    }

    /// 3.13's published offsets, read from the file, against the DWARF of pyenv's 3.13.0
    /// (`gdb -batch -ex 'p (long)&((PyThreadState*)0)->current_frame'` and so on).
    #[test]
    fn debug_offsets_of_3_13_match_its_dwarf() {
        let Some(py) = causeway_testdata::cpythons().into_iter().find(|p| p.minor == 13) else {
            panic!("no CPython 3.13 on this machine (pyenv install 3.13)");
        };
        let lib = py.libpython().expect("pyenv's 3.13 has its libpython");
        let m = Mapping { start: 0x7f00_0000_0000, end: 0x7f00_0010_0000, offset: 0, path: lib.clone() };
        let l = layout_of(&lib, &m).unwrap().raw;
        let got = [
            l.runtime_interps,
            l.interp_next,
            l.interp_threads,
            l.tstate_next,
            l.tstate_thread_id,
            l.tstate_frame,
            l.frame_previous,
            l.frame_code,
            l.frame_instr,
            l.frame_owner,
            l.code_code,
            l.code_filename,
            l.code_name,
            l.code_firstlineno,
            l.code_linetable,
            l.ascii_data,
        ];
        assert_eq!(got, [632, 7264, 7344, 8, 152, 72, 8, 0, 56, 70, 200, 112, 128, 68, 136, 40]);
    }

    /// `(long)EXPR` for each expression, from the DWARF of `lib`, by gdb.
    fn dwarf_values(lib: &Path, exprs: &[&str]) -> Vec<i64> {
        let mut cmd = std::process::Command::new("gdb");
        cmd.args(["-batch", "-nx"]);
        for e in exprs {
            cmd.arg("-ex").arg(format!("p (long)({e})"));
        }
        let out = cmd.arg(lib).output().unwrap_or_else(|e| {
            panic!("gdb: {e} (scripts/install.sh installs it: the tables are checked against DWARF)")
        });
        let text = String::from_utf8_lossy(&out.stdout);
        let values: Vec<i64> =
            text.lines().filter_map(|l| l.split_once(" = ").and_then(|(_, v)| v.trim().parse().ok())).collect();
        assert_eq!(
            values.len(),
            exprs.len(),
            "{}: gdb said\n{text}{}",
            lib.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        values
    }

    /// The tables of 3.10-3.12, field by field, against the DWARF of pyenv's builds (which keep
    /// their debug information): a wrong offset in a table would walk garbage.
    #[test]
    fn the_tables_of_3_10_to_3_12_match_the_dwarf_of_each_version() {
        let pythons: Vec<_> =
            causeway_testdata::cpythons().into_iter().filter(|p| (10..=12).contains(&p.minor)).collect();
        let mut checked = Vec::new();
        for py in pythons {
            let Some(lib) = py.libpython() else {
                continue; // a distribution's interpreter without its libpython and DWARF (Debian's)
            };
            let t = table(py.minor);
            let f = |v: u16| v as i64;
            let (frame, code_name) = match py.minor {
                10 => ("PyFrameObject", "co_name"),
                _ => ("_PyInterpreterFrame", "co_qualname"),
            };
            let span = f(t.frame_span);
            let mut rows: Vec<(String, i64)> = vec![
                ("&((_PyRuntimeState*)0)->interpreters.head".into(), f(t.runtime_interps)),
                ("&((PyInterpreterState*)0)->next".into(), f(t.interp_next)),
                ("&((PyThreadState*)0)->next".into(), f(t.tstate_next)),
                ("&((PyThreadState*)0)->thread_id".into(), f(t.tstate_thread_id)),
                ("&((PyCodeObject*)0)->co_filename".into(), f(t.code_filename)),
                (format!("&((PyCodeObject*)0)->{code_name}"), f(t.code_name)),
                ("&((PyCodeObject*)0)->co_firstlineno".into(), f(t.code_firstlineno)),
                ("&((PyCodeObject*)0)->co_linetable".into(), f(t.code_linetable)),
                ("&((PyObject*)0)->ob_type".into(), f(t.object_type)),
                ("&((PyVarObject*)0)->ob_size".into(), f(t.bytes_size)),
                ("&((PyBytesObject*)0)->ob_sval".into(), f(t.bytes_data)),
                ("&((PyASCIIObject*)0)->state".into(), f(t.unicode_state)),
                ("&((PyASCIIObject*)0)->length".into(), f(t.unicode_length)),
                ("sizeof(PyASCIIObject)".into(), f(t.ascii_data)),
                ("sizeof(PyCompactUnicodeObject)".into(), f(t.compact_data)),
                (
                    format!("&(({frame}*)0)->{}", if py.minor == 10 { "f_back" } else { "previous" }),
                    span + f(t.frame_previous),
                ),
                (format!("&(({frame}*)0)->f_code"), span + f(t.frame_code)),
                (
                    format!("&(({frame}*)0)->{}", if py.minor == 10 { "f_lasti" } else { "prev_instr" }),
                    span + f(t.frame_instr),
                ),
            ];
            if py.minor == 10 {
                rows.push(("&((PyInterpreterState*)0)->tstate_head".into(), f(t.interp_threads)));
                rows.push(("&((PyThreadState*)0)->frame".into(), f(t.tstate_frame)));
            } else {
                rows.push(("&((PyInterpreterState*)0)->threads.head".into(), f(t.interp_threads)));
                rows.push(("&((PyThreadState*)0)->cframe".into(), f(t.tstate_frame)));
                rows.push(("&((_PyCFrame*)0)->current_frame".into(), f(t.cframe_frame)));
                rows.push(("&((PyCodeObject*)0)->co_code_adaptive".into(), f(t.code_code)));
            }
            if py.minor == 11 {
                rows.push(("&((_PyInterpreterFrame*)0)->is_entry".into(), f(t.frame_is_entry)));
            }
            if py.minor == 12 {
                rows.push(("&((_PyInterpreterFrame*)0)->owner".into(), f(t.frame_owner)));
                rows.push(("FRAME_OWNED_BY_CSTACK".into(), t.owner_cstack as i64));
            }
            let exprs: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
            let dwarf = dwarf_values(&lib, &exprs);
            for ((expr, ours), theirs) in rows.iter().zip(dwarf) {
                assert_eq!(*ours, theirs, "CPython 3.{} ({}): {expr}", py.minor, lib.display());
            }
            checked.push(py.minor);
        }
        checked.dedup();
        assert_eq!(checked, vec![10, 11, 12], "pyenv's 3.10, 3.11 and 3.12 are expected on this machine");
    }

    /// A copy of the 3.13 library with one field changed, as another build would have it.
    fn patched_313(at_symbol: &str, plus: u64, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let py = causeway_testdata::cpythons().into_iter().find(|p| p.minor == 13).expect("CPython 3.13");
        let lib = py.libpython().expect("pyenv's 3.13 has its libpython");
        let mut data = std::fs::read(&lib).unwrap();
        let elf = object::File::parse(&*data).unwrap();
        let vaddr = symbol_address(&elf, at_symbol).unwrap() + plus;
        let off = Segments::of(&elf).file_offset(vaddr).unwrap() as usize;
        data[off..off + bytes.len()].copy_from_slice(bytes);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("libpython3.13.so.1.0");
        std::fs::write(&out, data).unwrap();
        (dir, out)
    }

    /// A version this build has no layout for (3.14 here: not installable on this machine, and its
    /// debug offsets differ from 3.13's) and a free-threaded build are refused with the reason,
    /// never walked with the wrong offsets.
    #[test]
    fn an_unknown_version_and_a_free_threaded_build_are_refused() {
        let m = |path: &Path| Mapping { start: 0x7f00_0000_0000, end: 0x7f00_0010_0000, offset: 0, path: path.into() };
        // Py_Version = 3.14.0 final (0x030e00f0)
        let (_d, lib) = patched_313("Py_Version", 0, &0x030e_00f0u32.to_ne_bytes());
        match layout_of(&lib, &m(&lib)) {
            Err(e @ LayoutError::Unsupported(3, 14, _)) => assert!(e.to_string().contains("3.14"), "{e}"),
            other => panic!("{other:?}"),
        }
        // _Py_DebugOffsets.free_threaded (after the cookie and the version) set
        let (_d, lib) = patched_313("_PyRuntime", 16, &1u64.to_ne_bytes());
        match layout_of(&lib, &m(&lib)) {
            Err(LayoutError::Unreadable(_, why)) => assert!(why.contains("free-threaded"), "{why}"),
            other => panic!("{other:?}"),
        }
        // and the file unchanged is read
        let (_d, lib) = patched_313("Py_Version", 0, &[]);
        assert_eq!(layout_of(&lib, &m(&lib)).unwrap().version.1, 13);
    }

    #[test]
    fn a_file_that_is_no_interpreter_is_refused_with_a_reason() {
        let d = tempfile::tempdir().unwrap();
        let fake = d.path().join("libpython3.12.so.1.0");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let m = Mapping { start: 0x1000, end: 0x2000, offset: 0, path: fake };
        assert!(matches!(detect(&[m], None), Err(LayoutError::Unreadable(..))));
        assert_eq!(detect(&[], None), Err(LayoutError::NotPython));
    }
}
