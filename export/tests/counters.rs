//! The counter tracks of an export against the trace they come from: every NVML sample as a
//! value of its GPU's tracks at its own time, and the kernel launches per second adding up to the
//! launches the process made (a driver launch inside a runtime launch is the same kernel); a
//! serving engine's queue at each scrape and its TTFT mean per scrape interval.

#[path = "../../analysis/tests/common/mod.rs"]
mod common;

use causeway_backends::open_store;
use causeway_export::{export, ExportRequest, Format};
use causeway_model::GpuSample;
use common::{training_loop, Trace, MS, T0};
use serde_json::Value;

const ITERATIONS: usize = 200;
const LAUNCHES: usize = 6;

fn trace_with_samples() -> (tempfile::TempDir, std::path::PathBuf, Vec<GpuSample>) {
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    training_loop(&mut t, 4242, 4242, T0, ITERATIONS, 2 * MS, LAUNCHES, &|i| {
        if i % 50 == 0 {
            30 * MS
        } else {
            3 * MS
        }
    });
    for k in 0..20 {
        t.gpu_samples.push(GpuSample {
            ts_ns: T0 + k * 50 * MS,
            gpu: 0,
            sm_clock_mhz: 1980 - (k as i32) * 50,
            sm_clock_max_mhz: 1980,
            mem_clock_mhz: 2619,
            throttle_reasons: if k > 10 { 0x40 } else { 0 },
            temperature_c: 50 + k as i32,
            power_mw: 400_000 + k * 1000,
            util_gpu_pct: 90,
            mem_used_bytes: -1,
            ..Default::default()
        });
    }
    let samples = t.gpu_samples.clone();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.db");
    t.write(&path);
    (dir, path, samples)
}

/// (ns since the origin, value) of every `C` event of the counter named `name`.
fn counter(v: &Value, name: &str) -> Vec<(i64, f64)> {
    let origin = v["otherData"]["origin_unix_ns"].as_i64().unwrap();
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == name)
        .map(|e| (origin + (e["ts"].as_f64().unwrap() * 1000.0).round() as i64, e["args"]["value"].as_f64().unwrap()))
        .collect()
}

#[test]
fn gpu_samples_and_launch_rate_are_counters_that_add_up() {
    let (_dir, path, samples) = trace_with_samples();
    let store = open_store(&path).unwrap();
    let mut out = Vec::new();
    let s = export(store.as_ref(), &ExportRequest::default(), Format::Chrome, &mut out).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();

    let sm = counter(&v, "GPU 0 SM clock (MHz)");
    let want: Vec<(i64, f64)> = samples.iter().map(|s| (s.ts_ns, f64::from(s.sm_clock_mhz))).collect();
    assert_eq!(sm, want);
    let throttle = counter(&v, "GPU 0 throttle reasons (bitmask)");
    assert_eq!(throttle.iter().filter(|(_, x)| *x == 64.0).count(), 9);
    let power = counter(&v, "GPU 0 power (W)");
    assert_eq!(power.last().map(|p| p.1), Some(419.0));
    assert!(counter(&v, "GPU 0 memory used (GiB)").is_empty(), "a value NVML did not report (-1) is not drawn");

    let rate_name = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .filter_map(|e| e["name"].as_str())
        .find(|n| n.starts_with("kernel launches per second"))
        .expect("a launch-rate counter")
        .to_string();
    let per_ms: f64 = rate_name.rsplit("per ").next().unwrap().trim_end_matches(" ms)").parse().unwrap();
    let rate = counter(&v, &rate_name);
    let launches: f64 = rate.iter().map(|(_, r)| r * per_ms / 1000.0).sum();
    assert!((launches - (ITERATIONS * LAUNCHES) as f64).abs() < 1e-6, "{launches} launches counted");
    assert_eq!(rate.last().map(|r| r.1), Some(0.0), "the rate drops to zero where the launches stop");
    assert!(s.counter_values as usize >= sm.len() + rate.len());

    // the protobuf form holds the same number of counter values
    let mut proto = Vec::new();
    let p = export(store.as_ref(), &ExportRequest::default(), Format::Perfetto, &mut proto).unwrap();
    assert_eq!(p.counter_values, s.counter_values);
}

#[test]
fn a_serving_engines_queue_and_ttft_are_counters() {
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    // (the export covers the events' span: the loop outlasts the scrapes)
    training_loop(&mut t, 4242, 4242, T0, 200, 2 * MS, 2, &|_| 3 * MS);
    // four scrapes 100 ms apart: 2, 0 and 3 first tokens at 10 ms, 0 and 60 ms in the intervals
    let served = [(0.0, 0.0, 4.0), (2.0, 0.02, 1.0), (2.0, 0.02, 6.0), (5.0, 0.2, 0.0)];
    for (k, (count, sum, waiting)) in served.iter().enumerate() {
        let ts = T0 + k as i64 * 100 * MS;
        let sample = |metric: &str, value: f64| causeway_model::ServingSample {
            ts_ns: ts,
            pid: 4242,
            engine: "vllm".into(),
            metric: metric.into(),
            labels: "{}".into(),
            le: None,
            value,
        };
        t.serving_samples.push(sample("vllm:time_to_first_token_seconds_count", *count));
        t.serving_samples.push(sample("vllm:time_to_first_token_seconds_sum", *sum));
        t.serving_samples.push(sample("vllm:num_requests_waiting", *waiting));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serving.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    let mut out = Vec::new();
    export(store.as_ref(), &ExportRequest::default(), Format::Chrome, &mut out).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let waiting = counter(&v, "vLLM requests waiting (pid 4242, requests)");
    assert_eq!(waiting.iter().map(|p| p.1).collect::<Vec<_>>(), vec![4.0, 1.0, 6.0, 0.0]);
    let ttft = counter(&v, "vLLM TTFT, mean per scrape interval (0: none served) (pid 4242, ms)");
    let means: Vec<f64> = ttft.iter().map(|p| (p.1 * 1e6).round() / 1e6).collect();
    assert_eq!(means, vec![10.0, 0.0, 60.0], "(0.18 s - 0.02 s) / 3 = 60 ms in the last interval");
    assert_eq!(ttft[0].0, T0, "a mean is drawn from its interval's start");
}
