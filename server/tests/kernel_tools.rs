//! get_trace_stats with group_by "kernel" and get_stacks with a kernel filter, through the tool
//! catalogue on a native trace with kernel names, launch configurations, a late attach and NVML
//! samples of a GPU throttled for one sample.

use std::path::Path;

use causeway_backends::QueryCancel;
use causeway_backends::{EventSink, SqliteSink, StackRecord};
use causeway_model::codes::op;
use causeway_model::{Event, GpuSample, KernelName, LaunchConfig, LibraryAttach, SessionInfo};
use causeway_server::tools::{call, catalogue};
use causeway_server::TraceSet;
use serde_json::json;

const T0: i64 = 1_774_015_573_000_000_000;
const PID: u32 = 4000;

fn write_trace(path: &Path) {
    let cfg = LaunchConfig { grid: [64, 2, 1], block: [128, 1, 1], shared_mem_bytes: 49_152, cluster: [1, 1, 1] };
    let mut events = Vec::new();
    let mut launch = |ts: i64, dur: i64, code: causeway_model::codes::OpCode, handle: i64, stack: i64, config: i64| {
        events.push(Event {
            ts_ns: ts,
            dur_ns: dur,
            pid: PID,
            tid: PID,
            source: code.source,
            op: code.op,
            arg0: handle,
            stack_hash: stack,
            launch_config: config,
            comm: "vllm".into(),
            ..Default::default()
        })
    };
    // flash_attn_fwd: 5 launches of 10..50 us through cuLaunchKernelEx; rms_norm: 3 of 7 us.
    for i in 0..5i64 {
        launch(T0 + i * 1_000_000, (i + 1) * 10_000, op::CU_LAUNCH_KERNEL_EX, 0x10, 0x1, cfg.key());
    }
    for i in 0..3i64 {
        launch(T0 + 10_000_000 + i * 1_000_000, 7_000, op::CU_LAUNCH_KERNEL, 0x20, 0x2, 0);
    }
    let names = vec![
        KernelName {
            pid: PID,
            handle: 0x10,
            name: "flash_attn_fwd".into(),
            mangled: "flash_attn_fwd".into(),
            how: "module".into(),
        },
        KernelName {
            pid: PID,
            handle: 0x20,
            name: "rms_norm(float*)".into(),
            mangled: "_Z8rms_normPf".into(),
            how: "module".into(),
        },
    ];
    let attach = LibraryAttach {
        pid: PID,
        path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
        kind: "driver".into(),
        how: "loaded".into(),
        attached_at_ns: T0 + 500_000_000,
        complete: false,
        symbols: vec!["cuLaunchKernel".into()],
        missing: Vec::new(),
        note: String::new(),
    };
    let stacks = vec![
        StackRecord { hash: 0x1, ips: "[]".into(), frames: r#"[{"pf":"/app/attn.py","pfn":"forward","pl":3}]"#.into() },
        StackRecord { hash: 0x2, ips: "[]".into(), frames: r#"[{"pf":"/app/norm.py","pfn":"forward","pl":5}]"#.into() },
    ];
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let session = SessionInfo { started_at_ns: T0, tool_version: "test".into(), ..Default::default() };
        let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(path, session).unwrap());
        sink.write_kernel_names(names).await.unwrap();
        sink.write_launch_configs(vec![cfg]).await.unwrap();
        sink.write_attachments(vec![attach]).await.unwrap();
        sink.write_stacks(stacks).await.unwrap();
        // GPU 0 every 5 ms, thermally throttled at the third sample
        let samples = (0..4i64)
            .map(|i| GpuSample {
                ts_ns: T0 + i * 5_000_000,
                gpu: 0,
                sm_clock_mhz: if i == 2 { 495 } else { 1980 },
                sm_clock_max_mhz: 1980,
                throttle_reasons: if i == 2 { 0x40 } else { 0 },
                temperature_c: if i == 2 { 91 } else { 55 },
                ..Default::default()
            })
            .collect();
        sink.write_gpu_samples(samples, Vec::new()).await.unwrap();
        sink.write_batch(events).await.unwrap();
        sink.finish(T0 + 20_000_000).await.unwrap();
    });
}

#[test]
fn stats_group_by_kernel_and_stacks_by_kernel_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.db");
    write_trace(&path);
    let set = TraceSet::open(&[path]);
    let tools = catalogue();
    let cancel = QueryCancel::new();

    let a = call(&tools, &set, "get_trace_stats", json!({"group_by": "kernel"}), &cancel).unwrap().structured;
    let k = &a["stats"]["kernels"];
    assert_eq!((k["launches"].as_u64(), k["kernels_total"].as_u64()), (Some(8), Some(2)));
    let flash = &k["kernels"][0];
    assert_eq!(flash["kernel"], "flash_attn_fwd");
    // 10, 20, 30, 40, 50 us: nearest-rank p50 = rank 3, p90 = p99 = rank 5.
    assert_eq!(
        (flash["p50_us"].as_f64(), flash["p90_us"].as_f64(), flash["p99_us"].as_f64()),
        (Some(30.0), Some(50.0), Some(50.0))
    );
    assert_eq!(flash["apis"]["cuLaunchKernelEx"], 5);
    assert_eq!(
        flash["configs"][0],
        json!({"grid": [64, 2, 1], "block": [128, 1, 1], "shared_mem_bytes": 49152, "cluster": [1, 1, 1], "launches": 5})
    );
    assert_eq!(k["kernels"][1]["mangled"], "_Z8rms_normPf");
    let summary = a["summary"].as_str().unwrap();
    assert!(summary.contains("8 kernel launches of 2 kernels (8 named)"), "{summary}");
    assert!(summary.contains("host-side launch time"), "{summary}");
    assert!(
        summary.contains("coverage: calls of pid 4000 through libcuda.so.1 before +0.500 s are unknown"),
        "{summary}"
    );
    assert_eq!(a["stats"]["coverage"].as_array().unwrap().len(), 1);
    // the GPU's own state beside the host's
    assert!(
        summary
            .contains("GPU 0: SM clock p50 1980 MHz (min 495), up to 91 °C, throttled 5.00 ms (hw_thermal_slowdown)"),
        "{summary}"
    );
    assert_eq!(a["stats"]["gpus"][0]["throttled_ns"].as_i64(), Some(5_000_000));
    // limit cuts the kernel list and says so.
    let a =
        call(&tools, &set, "get_trace_stats", json!({"group_by": "kernel", "limit": 1}), &cancel).unwrap().structured;
    assert_eq!((a["stats"]["kernels"]["kernels"].as_array().unwrap().len(), a["truncated"].as_bool()), (1, Some(true)));
    assert!(a["hint"].as_str().unwrap().contains("1 of 2 kernels shown"));
    // Default grouping: no kernel figures, coverage still said; a bad grouping is an error.
    let a = call(&tools, &set, "get_trace_stats", json!({}), &cancel).unwrap().structured;
    assert!(a["stats"].get("kernels").is_none() && a["stats"]["coverage"].is_array());
    assert!(call(&tools, &set, "get_trace_stats", json!({"group_by": "thread"}), &cancel).is_err());

    let s = call(&tools, &set, "get_stacks", json!({"kernel": "RMS"}), &cancel).unwrap().structured;
    assert_eq!((s["stacks"]["calls"].as_u64(), s["stacks"]["by_count"][0]["stack_hash"].as_i64()), (Some(3), Some(2)));
    assert!(
        s["summary"]
            .as_str()
            .unwrap()
            .starts_with("launches of the 1 kernel(s) whose name contains 'RMS': rms_norm(float*)"),
        "{}",
        s["summary"]
    );
}
