use super::*;

fn py(file: &str, function: &str, line: i32, entry: bool) -> PyFrame {
    PyFrame { file: file.into(), function: function.into(), line: Some(line), entry }
}

fn native(symbol: &str, file: &str) -> NativeFrame<String> {
    NativeFrame { symbol: Some(symbol.into()), file: file.into(), value: symbol.into() }
}

fn texts(m: Vec<Merged<String>>) -> Vec<String> {
    m.into_iter()
        .map(|m| match m {
            Merged::Native(s) => s,
            Merged::Python(f) => format!("{}:{}", f.function, f.line.unwrap_or(0)),
        })
        .collect()
}

#[test]
fn each_eval_loop_frame_gives_way_to_its_group_of_python_frames() {
    let natives = vec![
        native("cudaMalloc", "libcudart.so.12"),
        native("ffi_call", "libffi.so.8"),
        native("_ctypes_callproc", "_ctypes.cpython-312-x86_64-linux-gnu.so"),
        native("_PyObject_MakeTpCall", "libpython3.12.so.1.0"),
        native("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0"),
        native("my_ext_call", "myext.so"),
        native("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0"),
        native("PyEval_EvalCode", "libpython3.12.so.1.0"),
        native("main", "python3.12"),
    ];
    let frames = [py("a.py", "inner", 3, false), py("a.py", "outer", 7, true), py("a.py", "<module>", 9, true)];
    assert_eq!(
        texts(merge(natives, &frames)),
        ["cudaMalloc", "ffi_call", "_ctypes_callproc", "inner:3", "outer:7", "my_ext_call", "<module>:9"]
    );
}

#[test]
fn python_frames_no_eval_loop_frame_claims_follow_the_native_ones() {
    // a native stack cut before the interpreter (no frame pointers in libffi, say)
    let natives = vec![native("cudaMalloc", "libcudart.so.12"), native("ffi_call_unix64", "libffi.so.8")];
    let frames = [py("a.py", "f", 3, true), py("a.py", "<module>", 9, true)];
    assert_eq!(texts(merge(natives, &frames)), ["cudaMalloc", "ffi_call_unix64", "f:3", "<module>:9"]);
    // not a Python process: the native stack as it is, interpreter-named files included
    let natives = vec![native("x", "python3-helper"), native("main", "app")];
    assert_eq!(texts(merge(natives, &[])), ["x", "main"]);
}

fn raw(pid: u32, frames: &[(u64, u32, u32)], flags: u16) -> PyStackRaw {
    let mut r = PyStackRaw { hash: 1, pid, depth: frames.len() as u16, flags, frames: [PyFrameRaw::default(); DEPTH] };
    for (i, &(code, instr, flags)) in frames.iter().enumerate() {
        r.frames[i] = PyFrameRaw { code, instr, flags };
    }
    r
}

fn code(pid: u32, addr: u64, name: &str, not_code: bool) -> PyCodeRec {
    // 3.10 table: instructions 0-1 on line 11, 2-3 on line 12
    PyCodeRec {
        pid,
        minor: 10,
        code: addr,
        firstlineno: 10,
        not_code,
        file: "/app/m.py".into(),
        name: name.into(),
        linetable: vec![4, 1, 4, 1],
        linetable_size: 4,
    }
}

#[test]
fn stacks_resolve_lines_and_count_what_they_lack() {
    let mut codes = PyCodes::default();
    codes.add(code(7, 0x100, "f", false));
    codes.add(code(7, 0x200, "junk", true));
    codes.add(code(8, 0x300, "other_process", false));
    let r = raw(
        7,
        &[(0x100, 3, 0), (0x200, 0, FRAME_ENTRY), (0x300, 0, 0), (0x999, 0, FRAME_SHIM), (0x100, 0, FRAME_NO_INSTR)],
        1,
    );
    let (s, h) = codes.stack(42, |k| (k == 42).then_some(r)).map(|(s, h)| (s.clone(), h)).unwrap();
    assert_eq!(
        s.frames,
        [
            // the garbage frame after it was dropped, its entry mark kept
            py("/app/m.py", "f", 12, true),
            // another process's code object at that address is not this one's; the shim after it
            // ends its group
            PyFrame { file: "?".into(), function: "<code 0x300>".into(), line: None, entry: true },
            // the outermost frame ends the outermost group
            PyFrame { file: "/app/m.py".into(), function: "f".into(), line: None, entry: true },
        ]
    );
    assert!(s.truncated && !s.fault);
    assert_eq!(s.unnamed, 2);
    // resolved once: the map is not read again, and the hash is the same
    assert_eq!(codes.stack(42, |_| panic!("read twice")).map(|(_, h)| h), Some(h));
    assert!(codes.stack(43, |_| None).is_none());
}
