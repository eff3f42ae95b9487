//! Python frames: the line of the user's code behind every CUDA call of a CPython process.
//!
//! The walk itself runs in BPF at the call's return (`ebpf/python.bpf.h`): it finds the calling
//! thread's thread state, follows the frame chain (bounded) and stores the (code object,
//! instruction offset) pairs once per distinct stack in `cw_py_stacks`; each code object a new
//! stack names goes out once per process as a `cw_py_code` record with its file, qualified name,
//! first line and line table. Here:
//!
//! - [`layout`]: which interpreter a process runs and the offsets the walk needs; [`PyProcs`]:
//!   which traced processes run one (their layout in `cw_py_procs`);
//! - [`lines`]: instruction offset to line, for each line-table format;
//! - [`PyCodes`]: the code objects received, per process, and a stored stack turned into
//!   [`PyFrame`]s;
//! - [`merge`]: Python frames put in place of the interpreter's eval-loop frames of the native
//!   stack, as `py-spy --native` shows them.

pub mod layout;
pub mod lines;
mod procs;

pub use procs::PyProcs;

use std::collections::HashMap;

use crate::wire::PyCodeRec;

/// Frames kept per stack (`CW_PY_DEPTH`).
pub const DEPTH: usize = 64;
/// `CW_PYF_ENTRY`: the outermost frame of one eval-loop invocation.
const FRAME_ENTRY: u32 = 1;
/// `CW_PYF_NO_INSTR`: no instruction offset (a frame that had not started).
const FRAME_NO_INSTR: u32 = 2;
/// `CW_PYF_SHIM`: a shim frame of the eval loop (3.12+), which ends the group before it.
const FRAME_SHIM: u32 = 4;
/// `CW_PYS_TRUNCATED`, `CW_PYS_FAULT`.
const STACK_TRUNCATED: u16 = 1;
const STACK_FAULT: u16 = 2;

/// `struct cw_py_frame`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PyFrameRaw {
    pub code: u64,
    pub instr: u32,
    pub flags: u32,
}

/// `struct cw_py_stack`: the value of `cw_py_stacks`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PyStackRaw {
    pub hash: u64,
    pub pid: u32,
    pub depth: u16,
    pub flags: u16,
    pub frames: [PyFrameRaw; DEPTH],
}

const _: () = assert!(std::mem::size_of::<PyStackRaw>() == 1040);

// SAFETY: integers only, `repr(C)`, no padding (the size is checked above).
unsafe impl aya::Pod for PyStackRaw {}

/// One Python frame of a call's stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PyFrame {
    pub file: String,
    /// The qualified name (3.11+) or the function name (3.10).
    pub function: String,
    /// The line being executed; `None` when the line table has no line there (or was cut).
    pub line: Option<i32>,
    /// The outermost frame of its eval-loop invocation (a native `_PyEval_EvalFrameDefault`
    /// frame runs it and the frames before it up to the previous entry).
    pub entry: bool,
}

/// A call's Python stack, innermost first, and why it may be incomplete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PyStack {
    pub frames: Vec<PyFrame>,
    /// Deeper than [`DEPTH`] frames: the outermost are missing.
    pub truncated: bool,
    /// A frame could not be read (the chain changed under the walk): the frames past it are missing.
    pub fault: bool,
    /// Frames whose code object never arrived (its record was lost) or was not a code object.
    pub unnamed: usize,
}

impl PyStack {
    /// FNV-1a 64 over every frame's file, function, line and entry mark, and the incomplete marks.
    fn hash(&self) -> u64 {
        let mut h = causeway_model::fnv::Fnv1a64::new();
        for f in &self.frames {
            h.write(f.file.as_bytes());
            h.write(&[0]);
            h.write(f.function.as_bytes());
            h.write(&[0]);
            h.write(&f.line.unwrap_or(-1).to_le_bytes());
            h.write(&[f.entry as u8]);
        }
        h.write(&[self.truncated as u8, self.fault as u8]);
        h.finish()
    }
}

/// What one code object says.
#[derive(Debug, Clone)]
struct CodeInfo {
    minor: u8,
    file: String,
    name: String,
    firstlineno: i32,
    linetable: Vec<u8>,
    not_code: bool,
}

/// The code objects received, by (pid, address), and the stacks resolved from them.
#[derive(Default)]
pub struct PyCodes {
    codes: HashMap<(u32, u64), CodeInfo>,
    /// key -> the stack and the hash of its resolved frames
    stacks: HashMap<u32, (PyStack, u64)>,
}

impl PyCodes {
    /// Note a code object (a later record for the same address replaces it: the address was
    /// reused by another code object).
    pub fn add(&mut self, r: PyCodeRec) {
        let info = CodeInfo {
            minor: r.minor,
            file: r.file,
            name: r.name,
            firstlineno: r.firstlineno,
            linetable: r.linetable,
            not_code: r.not_code,
        };
        self.codes.insert((r.pid, r.code), info);
    }

    /// The stack stored under `key`, resolved once (`read` fetches it from `cw_py_stacks`), and a
    /// hash of its frames as resolved (file, function, line: two offsets on one line are one stack).
    pub fn stack(&mut self, key: u32, read: impl FnOnce(u32) -> Option<PyStackRaw>) -> Option<(&PyStack, u64)> {
        if !self.stacks.contains_key(&key) {
            let raw = read(key)?;
            let resolved = self.resolve(&raw);
            let hash = resolved.hash();
            self.stacks.insert(key, (resolved, hash));
        }
        self.stacks.get(&key).map(|(s, h)| (s, *h))
    }

    /// Code objects to names and lines.
    fn resolve(&self, raw: &PyStackRaw) -> PyStack {
        let mut out = PyStack {
            truncated: raw.flags & STACK_TRUNCATED != 0,
            fault: raw.flags & STACK_FAULT != 0,
            ..Default::default()
        };
        for f in raw.frames.iter().take((raw.depth as usize).min(DEPTH)) {
            let entry = f.flags & FRAME_ENTRY != 0;
            let kept = match self.codes.get(&(raw.pid, f.code)) {
                // a shim frame of the eval loop: no Python code, but it ends the group before it
                _ if f.flags & FRAME_SHIM != 0 => None,
                Some(c) if !c.not_code => {
                    let line = if f.flags & FRAME_NO_INSTR != 0 {
                        None
                    } else {
                        lines::line_at(c.minor, &c.linetable, c.firstlineno, f.instr)
                    };
                    Some(PyFrame { file: c.file.clone(), function: c.name.clone(), line, entry })
                }
                // not a frame of Python code (a garbage pointer): dropped, counted
                Some(_) => {
                    out.unnamed += 1;
                    None
                }
                None => {
                    out.unnamed += 1;
                    Some(PyFrame { file: "?".into(), function: format!("<code {:#x}>", f.code), line: None, entry })
                }
            };
            match kept {
                Some(frame) => out.frames.push(frame),
                None if entry || f.flags & FRAME_SHIM != 0 => end_group(&mut out.frames),
                None => {}
            }
        }
        // the outermost frame ends the outermost group
        end_group(&mut out.frames);
        out
    }
}

/// Mark the last frame kept as the outermost of its eval-loop group.
fn end_group(frames: &mut [PyFrame]) {
    if let Some(last) = frames.last_mut() {
        last.entry = true;
    }
}

/// One native frame as the merge sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeFrame<T> {
    /// The function, when the address resolved to one.
    pub symbol: Option<String>,
    /// The file it is in (base name).
    pub file: String,
    pub value: T,
}

/// A frame of a merged stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merged<T> {
    Native(T),
    Python(PyFrame),
}

/// The interpreter's eval-loop function: each native frame of it runs one group of Python frames.
fn is_eval_loop(symbol: &str) -> bool {
    symbol == "_PyEval_EvalFrameDefault" || symbol == "PyEval_EvalFrameEx"
}

/// A file of the interpreter itself (its frames are replaced by the Python frames they run).
fn is_interpreter(file: &str) -> bool {
    file.starts_with("libpython3") || file.starts_with("python3") || file == "python"
}

/// Native and Python frames in call order, innermost first: each eval-loop frame of the native
/// stack is replaced by the next group of Python frames (the frames up to and including an entry
/// frame), the interpreter's other frames are dropped, and every other native frame (the CUDA
/// libraries, C extensions between Python frames, libffi) keeps its place. Python frames no
/// eval-loop frame claimed (the native stack was cut before the interpreter, as it is without
/// frame pointers) follow the native frames.
pub fn merge<T>(native: Vec<NativeFrame<T>>, python: &[PyFrame]) -> Vec<Merged<T>> {
    let mut groups = python.split_inclusive(|f| f.entry).peekable();
    let mut out = Vec::with_capacity(native.len() + python.len());
    for n in native {
        let sym = n.symbol.as_deref().unwrap_or("");
        if is_eval_loop(sym) {
            if let Some(g) = groups.next() {
                out.extend(g.iter().cloned().map(Merged::Python));
            }
            continue;
        }
        if python.is_empty() || !is_interpreter(&n.file) {
            out.push(Merged::Native(n.value));
        }
    }
    for g in groups {
        out.extend(g.iter().cloned().map(Merged::Python));
    }
    out
}

#[cfg(test)]
mod tests;
