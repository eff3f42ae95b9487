//! The kernel trace of `kernels.rs`: a vLLM-like process launching named kernels with launch
//! configurations, one slow launch preempted by backup-rsync, Python stacks behind the launches.
//! Shared with the CLI's report test (`cli/tests/report.rs` includes `common`).

#![allow(dead_code)]

use causeway_backends::StackRecord;
use causeway_model::codes::op;
use causeway_model::{KernelName, LaunchConfig, LibraryAttach};

use super::*;

pub const PID: u32 = 5000;

fn name(handle: i64, name: &str, mangled: &str) -> KernelName {
    KernelName { pid: PID, handle, name: name.into(), mangled: mangled.into(), how: "register".into() }
}

fn cfg_a() -> LaunchConfig {
    LaunchConfig { grid: [128, 1, 1], block: [256, 1, 1], shared_mem_bytes: 0, cluster: [1, 1, 1] }
}

fn cfg_b() -> LaunchConfig {
    LaunchConfig { grid: [132, 1, 1], block: [384, 1, 1], shared_mem_bytes: 232_448, cluster: [2, 1, 1] }
}

fn attach(pid: u32, path: &str, kind: &str, at: i64, complete: bool, symbols: &[&str]) -> LibraryAttach {
    LibraryAttach {
        pid,
        path: path.into(),
        kind: kind.into(),
        how: "maps".into(),
        attached_at_ns: at,
        complete,
        symbols: symbols.iter().map(|s| s.to_string()).collect(),
        missing: Vec::new(),
        note: String::new(),
    }
}

/// 20 vector_add launches through the runtime (1..20 us, the driver call inside carrying config
/// A), 11 gemm launches through cuLaunchKernelEx (10 of 5 us, one of 30 ms preempted 26 ms by a
/// hog), stacks on both, a late-attached runtime and a process with a symbol-less static runtime.
pub fn kernel_trace(path: &std::path::Path) {
    let mut t = Trace {
        names: vec![(PID, "vllm".into()), (9912, "backup-rsync".into())],
        kernel_names: vec![
            name(0x100, "vector_add(float*, float*, int)", "_Z10vector_addPfS_i"),
            name(0xf00, "gemm_sm90_tma", "gemm_sm90_tma"),
        ],
        launch_configs: vec![cfg_a(), cfg_b()],
        attachments: vec![
            attach(PID, "/usr/lib/libcudart.so.12", "runtime", T0 + 1_210 * MS, false, &["cudaLaunchKernel"]),
            attach(812, "/opt/app/server", "runtime_static", T0, true, &[]),
        ],
        stacks: vec![
            StackRecord {
                hash: 0x55,
                ips: "[]".into(),
                frames: r#"[{"pf":"/app/model.py","pfn":"add","pl":7}]"#.into(),
            },
            // as a PyTorch stack merges: the driver, libtorch, torch's Python, then the user's code
            StackRecord {
                hash: 0x77,
                ips: "[]".into(),
                frames: r#"[{"s":"cuLaunchKernelEx+0x10","f":"libcuda.so.1"},
                    {"s":"_ZN2at6native4gemmEv+0x3a","f":"libtorch_cuda.so"},
                    {"pf":"/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py","pfn":"forward","pl":125},
                    {"pf":"/app/model.py","pfn":"matmul","pl":9},
                    {"pf":"/app/train.py","pfn":"step","pl":30},
                    {"pf":"/app/train.py","pfn":"<module>","pl":51}]"#
                    .into(),
            },
        ],
        ..Default::default()
    };
    let mut ts = T0 + 10 * MS;
    for i in 0..20i64 {
        let e = t.call(PID, PID, op::CUDA_LAUNCH_KERNEL, ts, (i + 1) * US);
        (e.arg0, e.stack_hash) = (0x100, 0x55);
        let d = t.call(PID, PID, op::CU_LAUNCH_KERNEL, ts + 100, (i + 1) * US - 200);
        (d.arg0, d.launch_config) = (0xabc, cfg_a().key());
        ts += MS;
    }
    for i in 0..11i64 {
        let dur = if i == 10 { 30 * MS } else { 5 * US };
        let e = t.call(PID, PID, op::CU_LAUNCH_KERNEL_EX, ts, dur);
        (e.arg0, e.stack_hash) = (0xf00, 0x77);
        e.launch_config = if (5..10).contains(&i) { cfg_a().key() } else { cfg_b().key() };
        if i == 10 {
            t.preempted(PID, PID, ts + 2 * MS, ts + 28 * MS, 1, (9912, 9912, "backup-rsync"));
        }
        ts += MS;
    }
    t.write(path);
}
