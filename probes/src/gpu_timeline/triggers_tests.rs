//! The triggers' rules on made-up samples: each fires once per episode, on the numbers it says.

use super::*;
use causeway_model::codes::op;

fn opts(kinds: &[TriggerKind]) -> TriggerOptions {
    TriggerOptions { kinds: kinds.to_vec(), window_ms: 1000, pre_ms: 0 }
}

fn util(ts_ms: i64, gpu: i32, pct: i32) -> GpuSample {
    GpuSample { ts_ns: ts_ms * 1_000_000, gpu, util_gpu_pct: pct, ..Default::default() }
}

#[test]
fn a_busy_gpu_falling_to_half_its_median_fires_once_per_drop() {
    let mut t = Triggers::new(opts(&[TriggerKind::UtilDrop]));
    let procs = [GpuProcessMemory { gpu: 0, pid: 42, ..Default::default() }];
    let mut fired = Vec::new();
    // busy, then a drop (fires), still low (nothing), back for three samples (re-armed: a drop
    // within them would be the same episode), a second drop
    let series = [95, 93, 94, 96, 40, 10, 5, 90, 30, 90, 94, 92, 47, 20];
    for (i, pct) in series.into_iter().enumerate() {
        fired.extend(t.on_gpu(&[util(i as i64 * 500, 0, pct)], &procs));
    }
    assert_eq!(fired.len(), 2, "{fired:?}");
    // each at its first low sample, fired by the second
    assert_eq!((fired[0].ts_ns, fired[0].pids.as_slice()), (2_000_000_000, &[42][..]));
    assert!(fired[0].what.contains("fell to 40%, then 10% from a median of 94%"), "{}", fired[0].what);
    assert_eq!(fired[1].ts_ns, 6_000_000_000);
    assert!(fired[1].what.contains("fell to 47%, then 20%"), "{}", fired[1].what);
}

#[test]
fn an_idle_gpu_or_too_few_samples_never_fire() {
    let mut t = Triggers::new(opts(&[TriggerKind::UtilDrop]));
    let mut fired = Vec::new();
    for (i, pct) in [30, 35, 10, 0, 0].into_iter().enumerate() {
        fired.extend(t.on_gpu(&[util(i as i64 * 500, 0, pct)], &[]));
    }
    // too few samples for a median; then a one-sample dip (noise)
    let mut u = Triggers::new(opts(&[TriggerKind::UtilDrop]));
    for (i, pct) in [95, 95, 5, 5, 95, 95, 95, 10, 95, 95].into_iter().enumerate() {
        fired.extend(u.on_gpu(&[util(i as i64 * 500, 0, pct)], &[]));
    }
    // NVML had no utilization (-1): not a drop
    let mut v = Triggers::new(opts(&[TriggerKind::UtilDrop]));
    for (i, pct) in [95, 95, 95, -1, -1].into_iter().enumerate() {
        fired.extend(v.on_gpu(&[util(i as i64 * 500, 0, pct)], &[]));
    }
    assert!(fired.is_empty(), "{fired:?}");
}

fn step(index: i64, start_ms: i64, dur_ms: i64) -> Event {
    Event {
        ts_ns: start_ms * 1_000_000,
        dur_ns: dur_ms * 1_000_000,
        pid: 7,
        tid: 7,
        source: op::STEP.source,
        op: op::STEP.op,
        arg0: index,
        ..Default::default()
    }
}

#[test]
fn a_slow_labeled_step_fires_at_its_end_by_the_analysis_rule() {
    let mut t = Triggers::new(opts(&[TriggerKind::SlowStep]));
    let mut at = 0;
    let mut fired = Vec::new();
    // 10 ms steps; step 6 takes 14 ms (under 1.5x: not slow), step 8 takes 40 ms, step 9 too (same
    // episode), step 12 again after normal ones (40 ms: not the slowest, nothing), step 14 60 ms
    for (i, d) in [10, 10, 11, 10, 9, 10, 14, 10, 40, 40, 10, 10, 40, 10, 60].into_iter().enumerate() {
        fired.extend(t.on_labels(&[step(i as i64, at, d)]));
        at += d;
    }
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert_eq!(fired[0].ts_ns, (10 + 10 + 11 + 10 + 9 + 10 + 14 + 10 + 40) * 1_000_000);
    assert!(
        fired[0].what.starts_with("step 8 of pid 7 took 40.00 ms against a median of 10.00 ms"),
        "{}",
        fired[0].what
    );
    assert_eq!(fired[0].pids, vec![7]);
    assert!(fired[1].what.starts_with("step 14 of pid 7 took 60.00 ms"), "{}", fired[1].what);
}

fn scrape(ts_s: i64, ttft_sum: f64, ttft_count: f64, waiting: f64) -> Vec<ServingSample> {
    let s = |metric: &str, value: f64| ServingSample {
        ts_ns: ts_s * 1_000_000_000,
        pid: 9,
        engine: "vllm".into(),
        metric: metric.into(),
        labels: "{}".into(),
        le: None,
        value,
    };
    vec![
        s("vllm:time_to_first_token_seconds_sum", ttft_sum),
        s("vllm:time_to_first_token_seconds_count", ttft_count),
        s("vllm:num_requests_waiting", waiting),
    ]
}

#[test]
fn a_serving_spike_and_a_stall_fire_by_the_serving_rule() {
    let mut t = Triggers::new(opts(&[TriggerKind::Serving]));
    let mut fired = Vec::new();
    // 10 requests a second at 50 ms each, then a second that served nothing while 4 waited
    let mut sum = 0.0;
    let mut count = 0.0;
    for ts in 0..6 {
        fired.extend(t.on_serving(&scrape(ts, sum, count, 0.0)));
        sum += 0.5;
        count += 10.0;
    }
    fired.extend(t.on_serving(&scrape(6, sum - 0.5, count - 10.0, 4.0)));
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].what.contains("served no request since its last scrape while 4 waited"), "{}", fired[0].what);
    // 10 requests averaging 1 s, 20 times the baseline
    let mut u = Triggers::new(opts(&[TriggerKind::Serving]));
    let mut fired = Vec::new();
    let (mut sum, mut count) = (0.0, 0.0);
    for ts in 0..7 {
        let slow = ts == 6;
        if ts > 0 {
            sum += if slow { 10.0 } else { 0.5 };
            count += 10.0;
        }
        fired.extend(u.on_serving(&scrape(ts, sum, count, 0.0)));
    }
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].what.starts_with(
            "vllm:time_to_first_token_seconds of vLLM averaged 1.000 s over 10 requests against a baseline of 0.050 s"
        ),
        "{}",
        fired[0].what
    );
}

#[test]
fn trigger_lists_parse_and_refuse_unknown_names() {
    assert_eq!(TriggerKind::parse_list("util, step").unwrap(), vec![TriggerKind::SlowStep, TriggerKind::UtilDrop]);
    assert_eq!(TriggerKind::parse_list("all").unwrap().len(), 3);
    assert!(TriggerKind::parse_list("gpu").unwrap_err().contains("unknown trigger `gpu`"));
    assert!(TriggerKind::parse_list("").is_err());
}
