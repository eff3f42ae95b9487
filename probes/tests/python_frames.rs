//! Python frames, live: `probes/tests/py/frames_workload.py` runs under the tracer with stacks on,
//! on every CPython 3.10+ installed here (pyenv's, linked to libpython, and the system's, a static
//! executable), calling mock-cuda's runtime through ctypes. Each call's stored stack must carry the
//! exact Python frames of the workload's file (line being executed, function), innermost first, in
//! place of the interpreter's frames, for nested calls, a loop, a generator, an async task and two
//! threads.

mod common;

use std::collections::BTreeMap;

use causeway_model::codes::op;
use common::{mock_build, require_root, Collected, MemSink};

/// The line of each `# @tag` of the workload.
fn tags(script: &str) -> BTreeMap<String, i64> {
    script
        .lines()
        .enumerate()
        .filter_map(|(i, l)| l.split("# @").nth(1).map(|t| (t.trim().to_string(), i as i64 + 1)))
        .collect()
}

/// (file name, line, function) of one Python frame.
type PyFrameText = (String, i64, String);

/// The Python frames of one stored stack, innermost first.
fn python_frames(frames_json: &str) -> Vec<PyFrameText> {
    let v: serde_json::Value = serde_json::from_str(frames_json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(|f| {
            let file = f.get("pf")?.as_str()?;
            let name = std::path::Path::new(file).file_name()?.to_string_lossy().into_owned();
            Some((name, f.get("pl")?.as_i64()?, f.get("pfn")?.as_str()?.to_string()))
        })
        .collect()
}

fn run(
    python: &std::path::Path,
    script: &std::path::Path,
    python_frames: bool,
) -> (causeway_probes::TraceReport, Collected, String) {
    let lib = mock_build().join("libcudart.so.12");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout.txt");
    let sink = MemSink::default();
    let opts = causeway_probes::TraceOptions {
        command: vec![python.display().to_string(), script.display().to_string(), lib.display().to_string()],
        command_stdout: Some(out.clone()),
        cuda_libs: vec![lib],
        stacks: true,
        python_frames,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(causeway_probes::trace(opts, Box::new(sink.clone()), |_| {})).expect("trace");
    let c = std::mem::take(&mut *sink.0.lock().unwrap());
    (report, c, std::fs::read_to_string(&out).unwrap_or_default())
}

#[test]
fn every_installed_cpython_gives_the_exact_python_stack_of_each_call() {
    require_root();
    let script = common::root().join("probes/tests/py/frames_workload.py");
    let t = tags(&std::fs::read_to_string(&script).unwrap());
    let f = |func: &str, tag: &str| ("frames_workload.py".to_string(), t[tag], func.to_string());
    let chain = |inner: &[(&str, &str)]| -> Vec<PyFrameText> { inner.iter().map(|(func, tag)| f(func, tag)).collect() };
    let expected: Vec<(i64, Vec<PyFrameText>)> = vec![
        (
            1001,
            chain(&[
                ("malloc", "malloc"),
                ("inner", "inner"),
                ("outer", "outer"),
                ("main", "main_outer"),
                ("<module>", "module"),
            ]),
        ),
        (1002, chain(&[("malloc", "malloc"), ("loop", "loop"), ("main", "main_loop"), ("<module>", "module")])),
        (
            1003,
            chain(&[
                ("malloc", "malloc"),
                ("gen", "gen"),
                ("use_gen", "use_gen"),
                ("main", "main_gen"),
                ("<module>", "module"),
            ]),
        ),
        (
            1004,
            chain(&[
                ("malloc", "malloc"),
                ("task", "task"),
                ("run_async", "run_async"),
                ("main", "main_async"),
                ("<module>", "module"),
            ]),
        ),
        (1005, chain(&[("malloc", "malloc"), ("worker", "worker")])),
        (1006, chain(&[("malloc", "malloc"), ("worker", "worker")])),
    ];
    let pythons = causeway_testdata::cpythons();
    assert!(!pythons.is_empty(), "no CPython 3.10+ on this machine");
    let mut failures = Vec::new();
    for py in &pythons {
        let (report, c, stdout) = run(&py.path, &script, true);
        let who = format!("CPython 3.{} ({})", py.minor, py.path.display());
        if !stdout.contains("DONE") {
            failures.push(format!("{who}: the workload did not finish: {stdout:?} {:?}", report.notes));
            continue;
        }
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.starts_with("Python frames of pid") && n.contains(&format!("CPython 3.{}.", py.minor))),
            "{who}: no layout installed: {:?}",
            report.notes
        );
        let stacks: BTreeMap<i64, &str> = c.stacks.iter().map(|s| (s.hash, s.frames.as_str())).collect();
        let mallocs: Vec<_> = c.events.iter().filter(|e| op::CUDA_MALLOC.is(e.source, e.op)).collect();
        for (size, want) in &expected {
            let calls: Vec<_> = mallocs.iter().filter(|e| e.arg0 == *size).collect();
            let n = if *size == 1002 { 3 } else { 1 };
            if calls.len() != n {
                failures.push(format!("{who}: {} cudaMalloc({size}) calls recorded, expected {n}", calls.len()));
                continue;
            }
            for e in calls {
                let Some(frames) = stacks.get(&e.stack_hash) else {
                    failures.push(format!("{who}: cudaMalloc({size}) has no stored stack ({:#x})", e.stack_hash));
                    continue;
                };
                let got: Vec<_> = python_frames(frames).into_iter().filter(|f| f.0 == "frames_workload.py").collect();
                if &got != want {
                    failures
                        .push(format!("{who}: cudaMalloc({size}):\n  got  {got:?}\n  want {want:?}\n  stack {frames}"));
                }
            }
        }
        // the interpreter's own frames are replaced: no eval-loop frame stays in a stack
        for s in &c.stacks {
            if s.frames.contains("_PyEval_EvalFrameDefault") {
                failures.push(format!("{who}: an eval-loop frame was left in {}", s.frames));
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn without_python_frames_the_stacks_are_native_only() {
    require_root();
    let script = common::root().join("probes/tests/py/frames_workload.py");
    let py = causeway_testdata::cpythons().pop().expect("no CPython 3.10+ on this machine");
    let (report, c, stdout) = run(&py.path, &script, false);
    assert!(stdout.contains("DONE"), "{stdout:?} {:?}", report.notes);
    assert!(!report.notes.iter().any(|n| n.starts_with("Python frames of pid")), "{:?}", report.notes);
    let mallocs = c.events.iter().filter(|e| op::CUDA_MALLOC.is(e.source, e.op)).count();
    assert_eq!(mallocs, 8, "every cudaMalloc of the workload is recorded");
    assert!(!c.stacks.is_empty(), "native stacks are still taken");
    for s in &c.stacks {
        assert!(python_frames(&s.frames).is_empty(), "a Python frame in {}", s.frames);
    }
}
