//! `trace()` says why it could not start, as a `ProbeError` a caller can match on, and leaves the
//! sink untouched: nothing to trace, a process that is not there, a CUDA library that cannot be
//! probed (this one loads the BPF programs first, so it needs root, as CI has).

mod common;

use causeway_probes::{ProbeError, TraceOptions};
use common::*;

fn start(opts: TraceOptions) -> (Result<causeway_probes::TraceReport, ProbeError>, Collected) {
    let sink = MemSink::default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let r = rt.block_on(causeway_probes::trace(opts, Box::new(sink.clone()), |_| {}));
    let c = std::mem::take(&mut *sink.0.lock().unwrap());
    (r, c)
}

#[test]
fn nothing_to_trace_and_a_missing_process_are_told_apart() {
    let (r, c) = start(TraceOptions::default());
    assert!(matches!(r, Err(ProbeError::NothingToTrace)), "{r:?}");
    assert!(c.events.is_empty() && !c.finished);
    let (r, _) = start(TraceOptions { pids: vec![u32::MAX - 1], ..Default::default() });
    match r {
        Err(e @ ProbeError::NoSuchProcess(p)) => {
            assert_eq!(p, u32::MAX - 1);
            assert!(!e.to_string().contains("--"), "worded by parameter, not by flag: {e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cuda_library_that_cannot_be_probed_is_named() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libcudart.so.12");
    let (r, c) = start(TraceOptions {
        command: vec!["/bin/true".into()],
        cuda_libs: vec![missing.clone()],
        ..Default::default()
    });
    match r {
        Err(ProbeError::Library { path, detail }) => {
            assert_eq!(path, missing);
            assert!(!detail.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert!(!c.finished, "the sink was not finished by a trace that never started");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (r, _) =
        start(TraceOptions { command: vec!["/bin/true".into()], cuda_libs: vec![empty.clone()], ..Default::default() });
    assert!(
        matches!(&r, Err(ProbeError::Library { path, detail }) if *path == empty && detail.contains("no libcudart")),
        "{r:?}"
    );
}
