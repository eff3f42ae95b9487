//! `causeway stats --by kernel` and `causeway stacks --kernel` on a native trace with kernel names.

use std::path::Path;
use std::process::Command;

use causeway_backends::{EventSink, SqliteSink};
use causeway_model::codes::op;
use causeway_model::{Event, KernelName, LaunchConfig, LibraryAttach, SessionInfo};

const T0: i64 = 1_774_015_573_000_000_000;

fn write_trace(path: &Path) {
    let cfg = LaunchConfig { grid: [8, 1, 1], block: [32, 1, 1], shared_mem_bytes: 0, cluster: [1, 1, 1] };
    let events: Vec<Event> = (0..4i64)
        .map(|i| Event {
            ts_ns: T0 + i * 1_000_000,
            dur_ns: (i + 1) * 2_000,
            pid: 300,
            tid: 300,
            source: op::CUDA_LAUNCH_KERNEL.source,
            op: op::CUDA_LAUNCH_KERNEL.op,
            arg0: 0xbeef,
            launch_config: cfg.key(),
            stack_hash: 0,
            comm: "infer".into(),
            ..Default::default()
        })
        .collect();
    let name = KernelName {
        pid: 300,
        handle: 0xbeef,
        name: "softmax_warp(float*)".into(),
        mangled: "_Z12softmax_warpPf".into(),
        how: "register".into(),
    };
    let attach = LibraryAttach {
        pid: 812,
        kind: "runtime_static".into(),
        how: "maps".into(),
        complete: true,
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let session = SessionInfo { started_at_ns: T0, tool_version: "test".into(), ..Default::default() };
        let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(path, session).unwrap());
        sink.write_kernel_names(vec![name]).await.unwrap();
        sink.write_launch_configs(vec![cfg]).await.unwrap();
        sink.write_attachments(vec![attach]).await.unwrap();
        sink.write_batch(events).await.unwrap();
        sink.finish(T0 + 10_000_000).await.unwrap();
    });
}

fn causeway(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_causeway")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn stats_by_kernel_and_stacks_by_kernel_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    write_trace(&db);
    let db = db.to_str().unwrap();
    let text = causeway(&["stats", "--db", db, "--by", "kernel"]);
    assert!(text.contains("4 kernel launches of 1 kernels (4 named"), "{text}");
    assert!(text.contains("not of the kernels on the GPU"), "{text}");
    assert!(text.contains("\nk1 softmax_warp(float*)\n  launched by cudaLaunchKernel x4\n  grid(8,1,1) block(32,1,1) smem 0 B cluster(1,1,1) x4"), "{text}");
    // the table names the kernel short, by the number its full name is listed under
    let row = text.lines().find(|l| l.trim_start().starts_with("k1 ")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" softmax_warp ") && !row.contains("float*"), "{row}");
    assert!(
        text.contains(
            "coverage: pid 812: only driver calls are visible: the CUDA runtime is statically linked without symbols"
        ),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&causeway(&["stats", "--db", db, "--by", "kernel", "--json"])).unwrap();
    let k = &json["kernels"]["kernels"][0];
    // 2, 4, 6, 8 us: p50 = rank 2, p90 = rank 4.
    assert_eq!((k["p50_us"].as_f64(), k["p90_us"].as_f64(), k["sum_us"].as_f64()), (Some(4.0), Some(8.0), Some(20.0)));
    assert_eq!(json["coverage"].as_array().unwrap().len(), 1);
    // The plain table says the coverage too, and has no kernel section.
    let plain = causeway(&["stats", "--db", db]);
    assert!(plain.contains("coverage: pid 812") && !plain.contains("kernel launches of"), "{plain}");
    let stacks = causeway(&["stacks", "--db", db, "--kernel", "SOFTMAX"]);
    assert!(
        stacks.starts_with(
            "launches of the 1 kernel(s) whose name contains 'SOFTMAX': softmax_warp(float*)\n4 calls, 0 with a stack"
        ),
        "{stacks}"
    );
}
