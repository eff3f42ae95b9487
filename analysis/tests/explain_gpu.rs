//! When the GPU is where the time went: a training loop whose GPU work became 4x slower for a
//! second (no host cause planted beyond a little run-queue noise). With NVML samples that show a
//! thermal throttle over that second, the first chain names the throttle, its reason and the clock
//! drop; without them, the first chain still says the time was the GPU's, and the small host cause
//! is not MEDIUM on its own.

mod common;

use causeway_analysis::{compute_stats, explain, ChainKind, ExplainRequest, Severity, StatsRequest};
use causeway_backends::{open_store, QueryLimits};
use causeway_model::{GpuSample, PrevState};
use common::{training_loop, Trace, MS, T0, US};

const SLOW_FROM: i64 = 1_000 * MS;
const SLOW_TO: i64 = 2_000 * MS;

/// 3 s of iterations: 8 ms of GPU work per sync (32 ms inside the slow second), the thread asleep
/// in the sync until the GPU finishes, and a 300 us run-queue wait at the end of every 4th sync.
fn slow_gpu(with_nvml: bool) -> Trace {
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    let slow = |ts: i64| (T0 + SLOW_FROM..T0 + SLOW_TO).contains(&ts);
    let mut starts = Vec::new();
    let mut ts = T0;
    while ts < T0 + 3_000 * MS {
        let dur = if slow(ts) { 32 * MS } else { 8 * MS };
        starts.push((ts, dur));
        ts += dur + 2 * MS;
    }
    let syncs = training_loop(&mut t, 4242, 4242, T0, starts.len(), 2 * MS, 4, &|i| starts[i].1);
    for (i, &sync) in syncs.iter().enumerate() {
        let end = sync + starts[i].1;
        let woke = end - if i % 4 == 0 { 300 * US } else { 20 * US };
        t.off_cpu(
            4242,
            4242,
            sync + 100 * US,
            end - 10 * US,
            0,
            PrevState::Sleeping,
            (0, 0, "swapper/0"),
            woke,
            (0, 0),
        );
    }
    if with_nvml {
        for k in 0..30 {
            let at = k * 100 * MS;
            let hot = (SLOW_FROM..SLOW_TO).contains(&at);
            t.gpu_samples.push(GpuSample {
                ts_ns: T0 + at,
                gpu: 0,
                sm_clock_mhz: if hot { 495 } else { 1980 },
                sm_clock_max_mhz: 1980,
                mem_clock_mhz: 2619,
                throttle_reasons: if hot { 0x40 } else { 0 },
                temperature_c: if hot { 91 } else { 55 },
                power_mw: 450_000,
                power_limit_mw: 700_000,
                util_gpu_pct: 97,
                util_mem_pct: 60,
                ..Default::default()
            });
        }
    }
    t
}

fn explained(
    with_nvml: bool,
) -> (tempfile::TempDir, Box<dyn causeway_backends::TraceStore>, causeway_analysis::Explanation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpu.db");
    slow_gpu(with_nvml).write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    (dir, store, e)
}

#[test]
fn a_throttled_gpu_is_named_first_with_its_reason_and_clock() {
    let (_d, store, e) = explained(true);
    let c = &e.chains[0];
    assert_eq!(
        (c.kind, c.cause.as_str(), c.severity),
        (ChainKind::SlowCalls, "gpu_throttled", Severity::High),
        "{:#?}",
        e.chains
    );
    assert_eq!(c.op, "cudaStreamSync");
    assert!(c.summary.contains("GPU 0 throttled (hw_thermal_slowdown)"), "{}", c.summary);
    // the clocks, temperature and power: the first detail, whole
    assert!(c.details[0].contains("SM clock down to 495 MHz from 1980 MHz"), "{}", c.details[0]);
    assert!(c.details[0].contains("91 °C"), "{}", c.details[0]);
    // the chain's own figure is reproduced by its SQL; the throttled samples are listed by theirs
    let r = store.query(&c.evidence.sql, &QueryLimits::default()).unwrap();
    assert_eq!(r.rows[0][0].as_i64(), Some(c.evidence.value), "{}", c.evidence.sql);
    let sql = c.details.iter().find_map(|d| d.strip_prefix("the throttled GPU samples: ")).expect("samples SQL");
    let rows = store.query(sql, &QueryLimits::default()).unwrap().rows;
    assert_eq!(rows.len(), 10, "the ten throttled samples: {sql}");
    // host noise is small next to GPU time: not MEDIUM on its own
    assert!(
        e.chains.iter().filter(|x| x.cause == "runqueue_wait").all(|x| x.severity == Severity::Low),
        "{:#?}",
        e.chains
    );
    // the statistics show the GPU's state beside the host's
    let stats = compute_stats(store.as_ref(), &StatsRequest::default()).unwrap();
    assert_eq!(stats.gpus.len(), 1);
    let g = &stats.gpus[0];
    assert_eq!((g.samples, g.sm_clock_min_mhz, g.sm_clock_p50_mhz, g.temperature_max_c), (30, 495, 1980, 91));
    assert_eq!(g.throttled_ns, 1_000 * MS);
}

#[test]
fn without_nvml_the_first_chain_still_says_the_time_was_the_gpus() {
    let (_d, store, e) = explained(false);
    let c = &e.chains[0];
    assert_eq!((c.kind, c.cause.as_str()), (ChainKind::SlowCalls, "gpu_wait"), "{:#?}", e.chains);
    assert_ne!(c.severity, Severity::Low, "{}", c.summary);
    assert!(c.details.iter().any(|d| d.contains("of slow-call time is GPU time")), "{:?}", c.details);
    assert!(
        e.chains.iter().filter(|x| x.cause == "runqueue_wait").all(|x| x.severity == Severity::Low),
        "{:#?}",
        e.chains
    );
    assert!(compute_stats(store.as_ref(), &StatsRequest::default()).unwrap().gpus.is_empty());
}

/// The throttled GPU is GPU 0, but the device timeline says the process ran on GPU 1 (NVML index 1,
/// sampled cool): the throttle is another job's, so the slow syncs are the GPU's time, not a
/// throttle's. Mapped to GPU 0, the throttle is named as before.
#[test]
fn a_throttle_is_matched_to_the_gpu_the_process_used() {
    let run = |nvml_index: i32| {
        let mut t = slow_gpu(true);
        let cool: Vec<GpuSample> = t
            .gpu_samples
            .iter()
            .map(|s| GpuSample { gpu: 1, throttle_reasons: 0, sm_clock_mhz: 1980, ..s.clone() })
            .collect();
        t.gpu_samples.extend(cool);
        t.gpu.devices.push(causeway_model::GpuDevice {
            pid: 4242,
            device: 0,
            uuid: format!("GPU-{nvml_index}"),
            name: "Mock H100".into(),
            nvml_index,
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.db");
        t.write(&path);
        let store = open_store(&path).unwrap();
        explain(store.as_ref(), &ExplainRequest::default()).unwrap()
    };
    let e = run(1);
    assert!(e.chains.iter().all(|c| c.cause != "gpu_throttled"), "{:#?}", e.chains);
    assert_eq!(e.chains[0].cause, "gpu_wait", "{:#?}", e.chains);
    let e = run(0);
    assert_eq!(e.chains[0].cause, "gpu_throttled", "{:#?}", e.chains);
    assert!(e.chains[0].summary.contains("GPU 0 throttled"), "{}", e.chains[0].summary);
}
