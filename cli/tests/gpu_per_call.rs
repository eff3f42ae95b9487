//! One GPU per call (root, eBPF): on a mock host of several GPUs, each CUDA call carries the NVML
//! index of the device its thread had current (`cudaSetDevice`, `CUDA_VISIBLE_DEVICES`), each
//! process's devices are in `gpu_devices`, and a throttle is blamed only for the calls of the GPU
//! that was throttled: the same slow synchronizes on GPU 1 are `gpu_throttled` when GPU 1 ran
//! power-capped, and not when only GPU 0 (which the job never used) did.

mod common;

use std::path::Path;

use common::{causeway, chain_words, query_rows, query_u64, require_root_to};
use serde_json::Value;

/// The two tests trace one at a time: the throttle's window is planted in wall time, and a trace
/// started beside another on two cores may reach it late.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

/// Trace mock-cuda's gpuloop on a host of `gpus` mock GPUs (NVML sampled), with `env` added.
fn trace(db: &Path, gpus: &str, env: &[(&str, String)], args: &[&str]) {
    let build = causeway_testdata::mock_cuda_build();
    let mut cmd = causeway();
    cmd.env("MOCK_GPU_COUNT", gpus);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["trace", "--quiet", "--nvml-hz", "20", "--nvml-lib"])
        .arg(build.join("libnvidia-ml.so.1"))
        .arg("--db")
        .arg(db)
        .arg("--")
        .arg(build.join("gpuloop"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The (device, nvml_index, uuid) rows of `gpu_devices`.
fn devices(db: &Path) -> Vec<(i64, i64, String)> {
    query_rows(db, "SELECT device, nvml_index, uuid FROM gpu_devices ORDER BY device")
        .into_iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap(), r[2].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn each_call_carries_the_gpu_its_thread_had_current() {
    require_root_to("trace with eBPF");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let args = ["--steps", "50", "--kernels", "1", "--host-us", "100"];
    // cudaSetDevice(2) on a host of four GPUs
    let db = dir.path().join("set.db");
    trace(&db, "4", &[], &[&args[..], &["--device", "2"]].concat());
    let calls = "SELECT count(*) FROM events WHERE source = 1";
    assert_eq!(query_u64(&db, &format!("{calls} AND gpu_id = 2")), query_u64(&db, calls), "every call on GPU 2");
    assert_eq!(devices(&db), [(2, 2, "GPU-5e1c0ffe-a102-4c2a-9b1d-000000c0de02".into())]);
    // CUDA_VISIBLE_DEVICES=3,1: ordinal 1 is NVML's GPU 1, the default ordinal 0 its GPU 3
    let db = dir.path().join("visible.db");
    let visible = [("CUDA_VISIBLE_DEVICES", "3,1".to_string())];
    trace(&db, "4", &visible, &[&args[..], &["--device", "1"]].concat());
    assert_eq!(query_u64(&db, &format!("{calls} AND gpu_id = 1")), query_u64(&db, calls));
    assert_eq!(devices(&db).iter().map(|d| (d.0, d.1)).collect::<Vec<_>>(), [(1, 1)]);
    let db = dir.path().join("default.db");
    trace(&db, "4", &visible, &args);
    assert_eq!(query_u64(&db, &format!("{calls} AND gpu_id = 3")), query_u64(&db, calls));
    assert_eq!(devices(&db).iter().map(|d| (d.0, d.1)).collect::<Vec<_>>(), [(0, 3)]);
}

#[test]
fn a_throttle_is_blamed_only_on_the_calls_of_its_gpu() {
    require_root_to("trace with eBPF");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // the job runs on GPU 1; for one second its work runs 4x slower. GPU 0, unused, is power-capped
    // meanwhile; GPU 1 says why it is slower (power cap) in one run and not (idle) in the other
    let run = |name: &str, gpu1_reasons: &str| -> Value {
        let db = dir.path().join(format!("{name}.db"));
        let t0 = now_ms();
        let (from, to) = (t0 + 2500, t0 + 3500);
        let throttle = format!("{from}:{to}:{gpu1_reasons}:4:1,{from}:{to}:0x4:4:0");
        let env = [("MOCK_GPU_THROTTLE", throttle), ("MOCK_CUDA_KERNEL_US", "3000".to_string())];
        trace(&db, "2", &env, &["--device", "1", "--steps", "1500", "--kernels", "1", "--host-us", "500"]);
        let out = causeway().args(["explain", "--json", "--db"]).arg(&db).output().unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let throttled = |e: &Value| -> Vec<String> {
        e["chains"].as_array().unwrap().iter().filter(|c| c["cause"] == "gpu_throttled").map(chain_words).collect()
    };
    let e = run("own", "0x4");
    let own = throttled(&e);
    assert_eq!(own.len(), 1, "{}", e["chains"]);
    assert!(own[0].contains("GPU 1 throttled (sw_power_cap)") && !own[0].contains("GPU 0"), "{}", own[0]);
    let e = run("other", "0x1");
    assert!(throttled(&e).is_empty(), "GPU 0's throttle is not the job's: {}", e["chains"]);
}
