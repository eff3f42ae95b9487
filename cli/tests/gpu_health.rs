//! The GPU's links and memory as a user meets them (root, eBPF, mock-cuda's NVML and driver read
//! through `causeway trace --nvml-lib`): a PCIe link at gen 1 while the GPU is busy is named with
//! the copies that ran over it, and the same link while the GPU is idle is not; NVLink CRC errors
//! planted while the all-reduces of two NCCL ranks ran slow name that GPU and the collectives; a
//! traced process whose context outlived it and an untraced pid NVML still lists after it is gone
//! are named with their GPU, pid and bytes; a process that leaks device memory is named with its
//! allocations never freed; a clean run names neither. `stats` shows the link and the memory.

mod common;

use std::path::Path;

use common::{causeway, chain_words, query_rows, query_u64, require_root_to};
use serde_json::Value;

fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

/// Trace `argv` (a mock-cuda program, or a command) with the mock NVML sampled 20 times a second
/// and `env`; returns `explain --json` and `stats --json`.
fn traced(db: &Path, env: &[(&str, String)], argv: &[String]) -> (Value, Value) {
    let nvml = causeway_testdata::mock_cuda_build().join("libnvidia-ml.so.1");
    let mut cmd = causeway();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["trace", "--nvml-hz", "20", "--nvml-lib"])
        .arg(&nvml)
        .arg("--db")
        .arg(db)
        .arg("--")
        .args(argv)
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !said.contains("ERRORS 1"), "{said}");
    let json = |sub: &str| -> Value {
        let out = causeway().args([sub, "--json", "--db"]).arg(db).output().unwrap();
        assert!(out.status.success(), "{sub}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    (json("explain"), json("stats"))
}

fn program(name: &str, args: &[&str]) -> Vec<String> {
    let mut v = vec![causeway_testdata::mock_cuda_build().join(name).display().to_string()];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

/// The chains of `cause`, each checked: its SQL gives its figure.
fn chains_of<'a>(db: &Path, e: &'a Value, cause: &str) -> Vec<&'a Value> {
    let v: Vec<&Value> = e["chains"].as_array().unwrap().iter().filter(|c| c["cause"] == cause).collect();
    for c in &v {
        let sql = c["evidence"]["sql"].as_str().unwrap();
        assert_eq!(query_u64(db, sql) as i64, c["evidence"]["value"].as_i64().unwrap(), "{sql}");
    }
    v
}

fn summaries(e: &Value) -> Vec<String> {
    e["chains"].as_array().unwrap().iter().map(|c| format!("{}: {}", c["cause"], chain_words(c))).collect()
}

/// mock-cuda's `train` copying 8 MiB in per iteration (a synchronous cudaMemcpy), its link at
/// gen 1 x16 (of gen 5 x16, a 63 GB/s link: the mock driver's copies take as long as that link
/// allows), NVML saying the GPU is busy or idle.
fn copies_over_gen1(db: &Path, util: &str) -> (Value, Value) {
    let env = [
        ("MOCK_NVML_PCIE", "1:16".to_string()),
        ("MOCK_NVML_UTIL", util.to_string()),
        ("MOCK_CUDA_BW_MBPS", "63000".to_string()),
    ];
    let args = ["--iters", "150", "--batch-bytes", "8388608", "--copy-sync", "1", "--producer-us", "4000"];
    let argv = program("train", &args);
    traced(db, &env, &argv)
}

#[test]
fn a_pcie_link_at_gen_1_while_busy_is_named_with_its_copies() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gen1.db");
    let (e, stats) = copies_over_gen1(&db, "97:60");
    let named = chains_of(&db, &e, "pcie_link_degraded");
    assert_eq!(named.len(), 1, "{:#?}", summaries(&e));
    let c = named[0];
    assert_eq!((c["kind"].as_str(), c["op"].as_str()), (Some("degraded_link"), Some("PCIe link")));
    let s = &chain_words(c);
    assert!(s.starts_with("GPU 0's PCIe link ran at gen 1 x16 (max gen 5 x16) for "), "{s}");
    assert!(s.contains("while busy") && c["summary"].as_str().unwrap_or_default().len() <= 160, "{s}");
    assert!(c["evidence"]["value"].as_i64().unwrap() >= 10, "busy samples below the maximum: {c}");
    let slow = c["details"][0].as_str().unwrap();
    assert!(slow.starts_with("slow over the degraded link: ") && slow.contains(" cudaMemcpy ("), "{slow}");
    assert!(c["calls"].as_u64().unwrap() >= 100, "the batch copies, each as slow as the link: {c}");
    let link = &stats["gpus"][0];
    assert_eq!(
        (link["pcie_link_gen_max"].as_i64(), link["pcie_link_gen_busy_min"].as_i64()),
        (Some(5), Some(1)),
        "{link}"
    );
}

#[test]
fn a_pcie_link_at_gen_1_while_idle_is_not_named() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idle.db");
    let (e, stats) = copies_over_gen1(&db, "0:0");
    assert!(chains_of(&db, &e, "pcie_link_degraded").is_empty(), "{:#?}", summaries(&e));
    let link = &stats["gpus"][0];
    assert_eq!((link["busy_samples"].as_i64(), link["pcie_link_gen_busy_min"].as_i64()), (Some(0), Some(-1)), "{link}");
}

#[test]
fn nvlink_crc_errors_during_slow_all_reduces_name_the_gpu_and_the_collectives() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("nvlink.db");
    // from 2 s to 4 s after the start: the fabric replays (NCCL's transfers 10x slower) and GPU 1's
    // NVLink counts 3 CRC errors every 100 ms
    let t0 = now_ms();
    let (from, to) = (t0 + 2_000, t0 + 4_000);
    let crc: Vec<String> = (from..to).step_by(100).map(|ms| format!("{ms}:3:1")).collect();
    let env = [
        ("MOCK_GPU_COUNT", "2".to_string()),
        ("MOCK_NCCL_SLOW", format!("{from}:{to}:10")),
        ("MOCK_NVML_NVLINK_CRC", crc.join(",")),
    ];
    let argv = program("nccl_ranks", &["--ranks", "2", "--steps", "1000", "--bytes", "16777216", "--pin", "0"]);
    let (e, stats) = traced(&db, &env, &argv);
    let all_reduces = query_u64(&db, "SELECT count(*) AS value FROM nccl_calls WHERE op = 1");
    assert_eq!(all_reduces, 2_000, "both ranks' 1000 all-reduces");
    let named = chains_of(&db, &e, "nvlink_errors");
    assert_eq!(named.len(), 1, "GPU 1 only: {:#?}", summaries(&e));
    let c = named[0];
    let s = &chain_words(c);
    assert!(s.starts_with("GPU 1's NVLink counted ") && s.contains("ncclAllReduce ran: median"), "{s}");
    assert_eq!(c["severity"], "HIGH", "slower than the all-reduces without errors: {s}");
    assert_eq!(c["evidence"]["value"].as_i64(), Some(60), "every planted error, counted from the samples: {c}");
    // the rank on GPU 1 where the trace maps processes to GPUs, else every rank, said so
    let on_gpu1 = query_rows(&db, "SELECT pid FROM gpu_devices WHERE nvml_index = 1");
    match on_gpu1.first().and_then(|r| r[0].as_i64()) {
        Some(pid) => assert_eq!(c["pid"].as_i64(), Some(pid), "{c:#}"),
        None => assert!(
            c["details"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().contains("does not map processes")),
            "{c:#}"
        ),
    }
    assert_eq!(
        (stats["gpus"][0]["nvlink_errors"].as_i64(), stats["gpus"][1]["nvlink_errors"].as_i64()),
        (Some(0), Some(60))
    );
}

#[test]
fn memory_left_behind_by_a_traced_process_and_an_untraced_pid_is_named() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("left.db");
    let procs = dir.path().join("procs");
    std::fs::create_dir(&procs).unwrap();
    // an untraced process that is gone, which NVML still lists with 2 GiB on GPU 0
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let env = [
        ("MOCK_GPU_PROCS_DIR", procs.display().to_string()),
        ("MOCK_CUDA_KEEP_CONTEXT", "1".to_string()),
        ("MOCK_NVML_PIDS", format!("{gone_pid}:2048:0")),
    ];
    // train exits; its shell waits 3 s more, traced, while NVML still lists train's context
    let train = program("train", &["--iters", "60"]).join(" ");
    let (e, stats) = traced(&db, &env, &["/bin/sh".into(), "-c".into(), format!("{train}; sleep 3")]);
    let pids = query_rows(&db, "SELECT DISTINCT pid FROM events WHERE source = 1");
    assert_eq!(pids.len(), 1, "one CUDA process: {pids:?}");
    let train_pid = pids[0][0].as_i64().unwrap();
    let named = chains_of(&db, &e, "memory_left_behind");
    let mine =
        named.iter().find(|c| c["pid"].as_i64() == Some(train_pid)).unwrap_or_else(|| panic!("{:#?}", summaries(&e)));
    let s = &chain_words(mine);
    assert!(s.starts_with("GPU 0 still held ") && s.contains(&format!("for pid {train_pid} (train)")), "{s}");
    assert!(s.contains("after it exited (exited with code 0)"), "{s}");
    let held = mine["evidence"]["value"].as_i64().unwrap();
    assert!(held >= 300 << 20, "the context and its allocations: {held}");
    let untraced = named.iter().find(|c| c["pid"].as_i64() == Some(gone_pid as i64)).expect("the untraced pid");
    let s = &chain_words(untraced);
    assert!(
        s.starts_with(&format!(
            "GPU 0 held 2.0 GiB for pid {gone_pid}, a process that was gone (/proc/{gone_pid} absent)"
        )),
        "{s}"
    );
    // stats: each process's peak per GPU, and how many samples found it gone
    let m = stats["gpu_memory"].as_array().unwrap();
    let row = m.iter().find(|r| r["pid"].as_i64() == Some(train_pid)).expect("train's memory");
    assert!(row["gone_samples"].as_u64().unwrap() >= 20 && row["peak_bytes"].as_i64().unwrap() >= held, "{row}");
}

#[test]
fn memory_that_keeps_growing_names_the_allocations_never_freed() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("leak.db");
    let procs = dir.path().join("procs");
    std::fs::create_dir(&procs).unwrap();
    let env = [("MOCK_GPU_PROCS_DIR", procs.display().to_string())];
    // every other churned block leaks, about 2 MB an iteration, for 3 s or more
    let (e, _) = traced(&db, &env, &program("train", &["--iters", "800", "--churn", "20", "--producer-us", "8000"]));
    let named = chains_of(&db, &e, "memory_growth");
    assert_eq!(named.len(), 1, "{:#?}", summaries(&e));
    let s = &chain_words(named[0]);
    assert!(s.contains("(train)'s memory rose from") && s.contains("were never freed, the largest"), "{s}");
    assert!(named[0]["evidence"]["value"].as_i64().unwrap() >= 64 << 20, "{}", named[0]);
    assert!(chains_of(&db, &e, "memory_left_behind").is_empty(), "its context went with it: {:#?}", summaries(&e));
}

#[test]
fn a_clean_run_names_no_memory_held_nor_growth() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("clean.db");
    let procs = dir.path().join("procs");
    std::fs::create_dir(&procs).unwrap();
    let env = [("MOCK_GPU_PROCS_DIR", procs.display().to_string())];
    let (e, stats) = traced(&db, &env, &program("train", &["--iters", "600", "--producer-us", "8000"]));
    let memory: Vec<&Value> = e["chains"].as_array().unwrap().iter().filter(|c| c["kind"] == "gpu_memory").collect();
    assert!(memory.is_empty(), "{memory:#?}");
    assert!(!stats["gpu_memory"].as_array().unwrap().is_empty(), "NVML listed the process: {}", stats["gpu_memory"]);
}
