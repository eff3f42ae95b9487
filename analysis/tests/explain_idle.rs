//! Idle time is not a cause. Each planted stall sits beside more idle time than it lasts: a
//! serving engine that sleeps between requests under light load, a training loop that sleeps in
//! every step, a late rank that sleeps early in every step before anyone waits for it. The
//! explanation of the TTFT spike, of the slow steps and of the straggler names the stall (host
//! work, a hog's preemption), never the idle sleep, because it counts only the time that hurt:
//! requests waiting and none served, the slow steps' excess over normal ones, the late rank's time
//! while the other ranks waited.

mod common;

use causeway_analysis::{explain, ChainKind, ExplainRequest, Explanation};
use causeway_backends::open_store;
use causeway_model::codes::op;
use causeway_model::{PrevState, ServingSample};
use common::{Trace, MS, T0, US};

const S: i64 = 1_000 * MS;
/// The timer that ends an idle sleep (the kernel's, no thread of the workload).
const TIMER: (u32, u32) = (0, 0);
const HOG: (u32, u32, &str) = (900, 900, "cpu-hog");

fn explained(t: Trace) -> Explanation {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idle.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    explain(store.as_ref(), &ExplainRequest::default()).unwrap()
}

/// `tid` sleeps idle over `[from, to)` in 2 ms naps woken by a timer, 10 us on the CPU between.
fn idle(t: &mut Trace, pid: u32, tid: u32, from: i64, to: i64) {
    let mut at = from;
    while at + 100 * US < to {
        let inn = (at + 2 * MS).min(to);
        t.off_cpu(pid, tid, at, inn, 1, PrevState::Sleeping, (0, 0, "swapper/1"), inn, TIMER);
        at = inn + 10 * US;
    }
}

/// One engine or training step: 8 launches 20 us apart, then a 1.5 ms synchronize. Returns its end.
fn gpu_step(t: &mut Trace, pid: u32, ts: i64) -> i64 {
    for k in 0..8 {
        t.nested_call(pid, pid, op::CUDA_LAUNCH_KERNEL, op::CU_LAUNCH_KERNEL, ts + k * 20 * US, 8 * US);
    }
    let sync = ts + 8 * 20 * US;
    t.nested_call(pid, pid, op::CUDA_STREAM_SYNC, op::CU_STREAM_SYNCHRONIZE, sync, 1_500 * US);
    sync + 1_500 * US
}

/// A vLLM engine (pid 5100) under light load: a request every 50 ms (at +25 ms, +75 ms, ...) taken
/// at once in one step, the engine sleeping between them. From 5 s to 6.2 s its thread does host
/// work and no GPU call; the 24 requests that queued meanwhile get their first token after it.
/// Its gauges freeze while it works (the waiting gauge reads 0 throughout). Scrapes every 250 ms.
fn serving_engine() -> Trace {
    const PID: u32 = 5100;
    let mut t = Trace { names: vec![(PID, "python3".into())], ..Default::default() };
    let (stall_from, stall_to) = (T0 + 5 * S, T0 + 6_200 * MS);
    let mut first_tokens: Vec<(i64, f64)> = Vec::new(); // (served at, TTFT s)
    let mut queued = Vec::new();
    let mut free_at = T0;
    for k in 0..200 {
        let arrival = T0 + 25 * MS + k * 50 * MS;
        if (stall_from..stall_to).contains(&arrival) {
            queued.push(arrival);
            continue;
        }
        if !queued.is_empty() {
            // back from the host work: the queue served in one batched step
            let end = gpu_step(&mut t, PID, stall_to);
            first_tokens.extend(queued.drain(..).map(|a| (end, (end - a) as f64 / 1e9)));
            free_at = end;
        }
        idle(&mut t, PID, PID, free_at, arrival);
        let end = gpu_step(&mut t, PID, arrival.max(free_at));
        first_tokens.push((end, (end - arrival) as f64 / 1e9));
        free_at = end;
        if arrival + 50 * MS >= stall_from && arrival < stall_from {
            // idle until the host work starts (on the CPU, no GPU call, until `stall_to`)
            idle(&mut t, PID, PID, free_at, stall_from);
            free_at = stall_to;
        }
    }
    let ttft = "vllm:time_to_first_token_seconds";
    let bounds = [0.01, 0.1, 1.0, 2.5];
    for j in 0..=40 {
        let ts = T0 + j * 250 * MS;
        let served: Vec<f64> = first_tokens.iter().filter(|(at, _)| *at <= ts).map(|x| x.1).collect();
        let sample = |metric: String, le: Option<f64>, value: f64| ServingSample {
            ts_ns: ts,
            pid: PID,
            engine: "vllm".into(),
            metric,
            labels: "{}".into(),
            le,
            value,
        };
        t.serving_samples.push(sample(format!("{ttft}_count"), None, served.len() as f64));
        t.serving_samples.push(sample(format!("{ttft}_sum"), None, served.iter().sum()));
        for le in bounds {
            let n = served.iter().filter(|v| **v <= le).count() as f64;
            t.serving_samples.push(sample(format!("{ttft}_bucket"), Some(le), n));
        }
        t.serving_samples.push(sample("vllm:num_requests_waiting".into(), None, 0.0));
    }
    t
}

#[test]
fn an_idle_engines_ttft_spike_is_the_host_work_not_its_idle_sleeps() {
    let e = explained(serving_engine());
    let engine = &e.serving.engines[0];
    let spike = engine.spikes.iter().find(|s| s.stalled_ns > 0).unwrap_or_else(|| panic!("{engine:#?}"));
    // the window explained reaches back 2.5 s before the late first tokens: 1.5 s of idle sleeps
    // in it against 1 s of host work while requests waited
    assert!(spike.cause_from_ns <= T0 + 3_750 * MS, "{spike:#?}");
    assert_eq!(spike.stalled_ns, S, "{spike:#?}");
    let why = spike.why.as_deref().unwrap_or_default();
    let key = spike.chain_key.as_deref().unwrap_or_default();
    assert!(key.starts_with("feeding_gap/") && key.contains("/host_compute/"), "{key}: {why}");
    assert!(why.contains("host work") && !why.contains("voluntary sleep"), "{why}");
}

/// A training loop (pid 4400) whose thread sleeps 58 ms idle in every step between its GPU calls
/// (then 2 ms of host work); in steps 30-37 a hog also preempts it for 40 ms.
fn training_loop_idling_every_step() -> Trace {
    const PID: u32 = 4400;
    let mut t = Trace { names: vec![(PID, "train".into()), (HOG.0, HOG.2.into())], ..Default::default() };
    let mut ts = T0;
    for step in 0..60 {
        let end = gpu_step(&mut t, PID, ts);
        idle(&mut t, PID, PID, end, end + 58 * MS);
        let mut next = end + 60 * MS;
        if (30..=37).contains(&step) {
            t.preempted(PID, PID, end + 59 * MS, end + 99 * MS, 1, HOG);
            next += 40 * MS;
        }
        ts = next;
    }
    t
}

#[test]
fn slow_steps_of_an_idling_loop_are_the_hogs_preemption_not_the_sleep_every_step_has() {
    let e = explained(training_loop_idling_every_step());
    let series = e.steps.series.iter().find(|s| s.pid == 4400).unwrap_or_else(|| panic!("{:#?}", e.steps));
    let range = &series.slow[0];
    assert!(range.first <= 31 && range.last >= 36, "{series:#?}");
    let key = range.chain_key.as_deref().unwrap_or_default();
    assert!(key.contains("/preempted/"), "{key}: {}", range.summary);
    assert!(range.summary.contains("cpu-hog"), "{}", range.summary);
}

/// Two ranks (pids 100 and 200) meeting at an all-reduce every 40 ms. Rank 1 sleeps 20 ms idle
/// early in every step, before anyone waits for it; in steps 11-30 a hog preempts it for 4 ms
/// just before its entry, so it enters 4 ms after rank 0.
fn ranks_with_an_idle_late_rank() -> Trace {
    let mut t = Trace {
        names: vec![(100, "nccl_ranks".into()), (200, "nccl_ranks".into()), (HOG.0, HOG.2.into())],
        ..Default::default()
    };
    let late_ns = 4 * MS;
    for step in 1..=40i64 {
        let base = T0 + step * 40 * MS;
        let late = (11..=30).contains(&step);
        let entry = [base, base + 50 * US + if late { late_ns } else { 0 }];
        let done = entry[1] + MS;
        for (r, pid) in [(0i32, 100u32), (1, 200)] {
            let i = r as usize;
            if r == 1 && late {
                t.preempted(pid, pid, entry[i] - late_ns - MS, entry[i] - MS, 1, HOG);
            }
            t.allreduce_step(pid, r, step, entry[i], done);
            if r == 1 {
                idle(&mut t, pid, pid, done + 100 * US, done + 20 * MS);
            }
        }
    }
    t
}

#[test]
fn a_late_rank_idling_early_in_its_steps_is_named_for_the_hog_that_delayed_its_entry() {
    let e = explained(ranks_with_an_idle_late_rank());
    let c = e.chains.iter().find(|c| c.kind == ChainKind::Straggler).unwrap_or_else(|| panic!("{:#?}", e.chains));
    assert_eq!((c.pid, c.calls), (200, 20), "{}", c.summary);
    assert_eq!(c.cause, "preempted", "{}", c.summary);
    assert_eq!(c.culprit.as_ref().map(|h| h.pid), Some(HOG.0), "{}", c.summary);
    assert!(c.details[0].contains("while the other ranks waited for it"), "{}", c.details[0]);
}
