//! The real NCCL of the PyPI wheel `nvidia-nccl-cu12` (`nvidia/nccl/lib/libnccl.so.2`, what
//! PyTorch's CUDA 12 wheels load; scripts/install-test-deps.sh installs it into
//! $HOME/.cache/causeway/venv), called through Python ctypes: found by discovery as a pip wheel of
//! kind NCCL, attached by symbol when the process maps it (every NCCL function of the probe table
//! attached or reported missing), and its calls that work without a GPU (group start / end)
//! recorded exactly, each with its `nccl_calls` row.

mod common;

use causeway_model::codes::op;
use causeway_probes::LibKind;
use causeway_probes::{ProbeLib, CUDA_PROBES};

#[test]
fn real_libnccl_from_the_pip_wheel_is_found_attached_and_traced() {
    common::require_root();
    let suffix = "nvidia/nccl/lib/libnccl.so.2";
    let n = 6u64;
    let (wheel, run) = common::trace_wheel_script(suffix, "call_libnccl.py", &[n.to_string()]);
    assert_eq!((wheel.how.as_str(), wheel.kind), ("pip-wheel", LibKind::Nccl));
    let common::WheelRun { report, sink, pid, lib, .. } = run;
    let lib = &report.libraries[lib];
    // every NCCL symbol of the probe table attached or reported missing; this NCCL has them all
    let mut table: Vec<&str> =
        CUDA_PROBES.iter().filter(|p| p.lib == ProbeLib::Nccl).flat_map(|p| p.symbols.iter().copied()).collect();
    let mut attached: Vec<&str> = lib.symbols.iter().map(String::as_str).collect();
    table.sort();
    attached.sort();
    assert_eq!(attached, table, "missing: {:?}", lib.missing);
    let c = sink.0.lock().unwrap();
    for code in [op::NCCL_GROUP_START, op::NCCL_GROUP_END] {
        let events: Vec<_> = c.events.iter().filter(|e| e.pid == pid && code.is(e.source, e.op)).collect();
        assert_eq!(events.len() as u64, n, "{}", code.name());
        assert!(events.iter().all(|e| e.ret_code == 0));
        let rows = c.nccl_calls.iter().filter(|r| r.pid == pid && r.op == code.op).count();
        assert_eq!(rows as u64, n, "{} rows", code.name());
    }
    assert!(c.attachments.iter().any(|a| a.pid == pid && a.kind == "nccl" && a.path.ends_with(suffix)));
}
