//! ECC errors as explain reads them from NVML's samples (synthetic traces written through the
//! SQLite sink): uncorrected errors counted on the GPU a process used are a HIGH `gpu_fault` chain
//! naming the GPU, the process and its call that failed after them; corrected errors alone are a
//! LOW one; a counter that never rose, or another GPU's, names nothing. Every chain's SQL gives its
//! figure.

mod common;

use causeway_analysis::{explain, Chain, ChainKind, ExplainRequest, Explanation, Severity};
use causeway_backends::{open_store, QueryLimits, TraceStore};
use causeway_model::codes::op;
use causeway_model::{GpuDevice, GpuSample};
use common::{Trace, MS, T0};

/// `train` (pid 4242) on GPU 1 synchronizes every 50 ms for 3 s; NVML samples GPUs 0 and 1 every
/// 100 ms. GPU 1's counters: uncorrected 0 -> `uncorrected` and corrected 5 -> 5 + `corrected`
/// at 2 s; GPU 0's corrected count sits at 7 throughout. With `fails`, the sync after 2 s fails
/// with cudaErrorECCUncorrectable (214).
fn trace(uncorrected: i64, corrected: i64, fails: bool) -> Trace {
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    for k in 0..60 {
        let at = T0 + k * 50 * MS;
        let e = t.call(4242, 4242, op::CUDA_STREAM_SYNC, at, 5 * MS);
        if fails && k == 41 {
            e.ret_code = 214;
        }
    }
    t.gpu.devices.push(GpuDevice {
        pid: 4242,
        device: 0,
        uuid: "GPU-1".into(),
        name: "NVIDIA H100 80GB HBM3".into(),
        nvml_index: 1,
    });
    for k in 0..31 {
        let at = k * 100 * MS;
        let after = at >= 2_000 * MS;
        for (gpu, c, u) in [(0, 7, 0), (1, 5 + if after { corrected } else { 0 }, if after { uncorrected } else { 0 })]
        {
            t.gpu_samples.push(GpuSample {
                ts_ns: T0 + at,
                gpu,
                ecc_corrected: c,
                ecc_uncorrected: u,
                ..Default::default()
            });
        }
    }
    t
}

fn explained(t: Trace) -> (tempfile::TempDir, Box<dyn TraceStore>, Explanation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    (dir, store, e)
}

fn ecc_chains(e: &Explanation) -> Vec<&Chain> {
    e.chains.iter().filter(|c| c.cause == "ecc_errors").collect()
}

fn checked(store: &dyn TraceStore, c: &Chain) {
    let r = store.query(&c.evidence.sql, &QueryLimits::default()).unwrap();
    assert_eq!(r.rows[0][0].as_i64(), Some(c.evidence.value), "{}", c.evidence.sql);
}

#[test]
fn uncorrected_errors_name_the_gpu_the_process_and_the_call_that_failed() {
    let (_d, store, e) = explained(trace(2, 4, true));
    let found = ecc_chains(&e);
    assert_eq!(found.len(), 1, "GPU 0's steady count names nothing: {:?}", found);
    let c = found[0];
    checked(store.as_ref(), c);
    assert_eq!((c.kind, c.severity, c.pid, c.evidence.value), (ChainKind::GpuFault, Severity::High, 4242, 2));
    for want in [
        "GPU 1 counted 2 uncorrected ECC error(s) and 4 corrected",
        "the traced processes on it: pid 4242 (train)",
        "pid 4242's cudaStreamSync failed with",
    ] {
        // the headline, then the rest of the story in the details, whole
        let words = format!("{}\n{}", c.summary, c.details.join("\n"));
        assert!(words.contains(want), "{want:?} in {words}");
    }
    assert_eq!(e.chains[0].cause, "ecc_errors", "a fault ranks before the slowness it caused");
}

#[test]
fn corrected_errors_alone_are_low_and_a_steady_count_is_nothing() {
    let (_d, store, e) = explained(trace(0, 3, false));
    let found = ecc_chains(&e);
    assert_eq!(found.len(), 1, "{found:?}");
    checked(store.as_ref(), found[0]);
    assert_eq!((found[0].severity, found[0].evidence.value), (Severity::Low, 3));
    assert!(found[0].summary.starts_with("GPU 1 corrected 3 ECC error(s) while tracing"), "{}", found[0].summary);
    let (_d, _store, e) = explained(trace(0, 0, false));
    assert!(ecc_chains(&e).is_empty(), "{:?}", ecc_chains(&e));
}
