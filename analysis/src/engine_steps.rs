//! A serving engine's steps, told from its launches: the engine thread (the thread that launches
//! the most kernels in scope) runs one step per synchronization (the sampled tokens copied back,
//! a stream or device synchronize): the top-level launches since the previous one and the wait.
//! A step's work is the thread blocks of its launches (a launch with no recorded configuration,
//! a CUDA graph's among them, counts one). Prefill processes whole prompts: its steps do many
//! times the work of a decode step, which generates one token per running request. The steps
//! split in two by their work (the two-group split of log work with the least spread) when the
//! heavier group's typical work is at least [`SPLIT_RATIO`] times the lighter's: the heavier is
//! prefill-heavy, the lighter decode-heavy; otherwise the steps are one phase. Each phase has its
//! own baseline (median and p99 step time, nearest rank).

use std::collections::{BTreeMap, HashMap};

use causeway_model::codes::{gpu_role, GpuRole};
use causeway_model::time::TimeWindow;
use causeway_store::summary::nearest_rank;
use causeway_store::{EventFilter, TraceStore};

use crate::AnalysisError;

/// The heavier group's median work must be this many times the lighter's to split the steps.
pub const SPLIT_RATIO: f64 = 4.0;
/// Steps an engine thread needs before it has phases.
pub const MIN_STEPS: usize = 8;

/// What a step mostly did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    PrefillHeavy,
    DecodeHeavy,
    /// The steps' work does not split in two.
    Unsplit,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::PrefillHeavy => "prefill-heavy",
            Phase::DecodeHeavy => "decode-heavy",
            Phase::Unsplit => "engine",
        }
    }
}

/// The engine thread's steps in scope.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct EngineSteps {
    pub pid: u32,
    pub tid: u32,
    pub steps: u64,
    pub phases: Vec<PhaseFigures>,
    pub rule: String,
    pub summary: String,
}

/// One phase's steps and baseline.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct PhaseFigures {
    pub phase: Phase,
    pub steps: u64,
    pub median_ns: i64,
    pub p99_ns: i64,
    /// The median step's work, thread blocks.
    pub median_work: i64,
}

/// One step of the engine thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct EngineStep {
    pub start_ns: i64,
    pub end_ns: i64,
    pub work: i64,
    pub phase: Phase,
}

/// A launch or synchronization of a thread: (start, duration, is a launch, work).
type ThreadCall = (i64, i64, bool, i64);

/// The engine thread's steps in `window` and their phases; `None` when no thread launched at
/// least [`MIN_STEPS`] steps.
pub(crate) fn engine_steps(
    store: &dyn TraceStore,
    window: TimeWindow,
) -> Result<Option<(EngineSteps, Vec<EngineStep>)>, AnalysisError> {
    let blocks: HashMap<i64, i64> = store
        .launch_configs()?
        .into_iter()
        .map(|c| (c.key(), c.grid.iter().map(|&g| i64::from(g.max(1))).product()))
        .collect();
    // (ts, dur, is launch, work) per (pid, tid)
    let mut by_thread: HashMap<(u32, u32), Vec<ThreadCall>> = HashMap::new();
    let filter = EventFilter { window, sources: Some(crate::gpu_call_sources().to_vec()), ..Default::default() };
    store.scan_events(&filter, &mut |s| {
        let e = &s.event;
        let launch = match gpu_role(e.code()) {
            GpuRole::Launch => true,
            GpuRole::Sync | GpuRole::SyncCopy => false,
            _ => return,
        };
        let work = if launch { blocks.get(&e.launch_config).copied().unwrap_or(1) } else { 0 };
        by_thread.entry((e.pid, e.tid)).or_default().push((e.ts_ns, e.dur_ns, launch, work));
    })?;
    let launches = |v: &Vec<ThreadCall>| v.iter().filter(|c| c.2).count();
    let Some(((pid, tid), mut calls)) = by_thread.into_iter().max_by_key(|(k, v)| (launches(v), std::cmp::Reverse(*k)))
    else {
        return Ok(None);
    };
    calls.sort_by_key(|c| (c.0, std::cmp::Reverse(c.1)));
    let mut steps = Vec::new();
    let (mut start, mut work, mut any_launch, mut top_end) = (0i64, 0i64, false, i64::MIN);
    for (ts, dur, launch, w) in calls {
        if ts < top_end {
            continue; // nested in the call before (a runtime call's driver call)
        }
        top_end = ts + dur;
        if launch {
            if !any_launch {
                start = ts;
            }
            any_launch = true;
            work += w;
        } else if any_launch {
            steps.push(EngineStep { start_ns: start, end_ns: ts + dur, work, phase: Phase::Unsplit });
            (work, any_launch) = (0, false);
        }
    }
    if steps.len() < MIN_STEPS {
        return Ok(None);
    }
    let split = split_by_work(&steps);
    for s in &mut steps {
        s.phase = match split {
            Some(bound) if s.work >= bound => Phase::PrefillHeavy,
            Some(_) => Phase::DecodeHeavy,
            None => Phase::Unsplit,
        };
    }
    let phases = phase_figures(&steps);
    let summary = {
        let parts: Vec<String> = phases
            .iter()
            .map(|p| {
                format!("{} {} steps (median {}, p99 {})", p.steps, p.phase.label(), fmt(p.median_ns), fmt(p.p99_ns))
            })
            .collect();
        format!("engine thread {tid} (pid {pid}): {}", parts.join(", "))
    };
    let rule = format!(
        "a step: the engine thread's top-level launches up to a synchronization; prefill-heavy when the steps' work \
         (thread blocks launched) splits in two groups {SPLIT_RATIO}x apart and it is in the heavier one"
    );
    Ok(Some((EngineSteps { pid, tid, steps: steps.len() as u64, phases, rule, summary }, steps)))
}

/// The least work of a prefill-heavy step, when the steps' work splits in two.
fn split_by_work(steps: &[EngineStep]) -> Option<i64> {
    let mut logs: Vec<(f64, i64)> = steps.iter().map(|s| ((s.work.max(1) as f64).ln(), s.work)).collect();
    logs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = logs.len();
    let prefix: Vec<f64> = std::iter::once(0.0)
        .chain(logs.iter().scan(0.0, |acc, x| {
            *acc += x.0;
            Some(*acc)
        }))
        .collect();
    let squares: Vec<f64> = std::iter::once(0.0)
        .chain(logs.iter().scan(0.0, |acc, x| {
            *acc += x.0 * x.0;
            Some(*acc)
        }))
        .collect();
    let spread = |a: usize, b: usize| {
        let k = (b - a) as f64;
        let s = prefix[b] - prefix[a];
        squares[b] - squares[a] - s * s / k
    };
    let best = (1..n)
        .filter(|&i| logs[i].0 > logs[i - 1].0)
        .min_by(|&a, &b| (spread(0, a) + spread(a, n)).total_cmp(&(spread(0, b) + spread(b, n))))?;
    let median = |xs: &[(f64, i64)]| xs[(xs.len() - 1) / 2].1;
    let (light, heavy) = (median(&logs[..best]), median(&logs[best..]));
    (heavy as f64 >= SPLIT_RATIO * light.max(1) as f64).then_some(logs[best].1)
}

fn phase_figures(steps: &[EngineStep]) -> Vec<PhaseFigures> {
    let mut by: BTreeMap<Phase, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    for s in steps {
        let e = by.entry(s.phase).or_default();
        e.0.push(s.end_ns - s.start_ns);
        e.1.push(s.work);
    }
    by.into_iter()
        .map(|(phase, (mut durs, mut works))| {
            durs.sort_unstable();
            works.sort_unstable();
            PhaseFigures {
                phase,
                steps: durs.len() as u64,
                median_ns: nearest_rank(&durs, 500).unwrap_or(0),
                p99_ns: nearest_rank(&durs, 990).unwrap_or(0),
                median_work: nearest_rank(&works, 500).unwrap_or(0),
            }
        })
        .collect()
}

/// The engine's steps in `[from, to]` against the phases' baselines, in words.
pub(crate) fn steps_in_window(all: &EngineSteps, steps: &[EngineStep], from: i64, to: i64) -> String {
    let inside: Vec<&EngineStep> = steps.iter().filter(|s| s.start_ns >= from && s.end_ns <= to).collect();
    let parts: Vec<String> = all
        .phases
        .iter()
        .map(|p| {
            let mut durs: Vec<i64> =
                inside.iter().filter(|s| s.phase == p.phase).map(|s| s.end_ns - s.start_ns).collect();
            durs.sort_unstable();
            match nearest_rank(&durs, 500) {
                Some(m) => {
                    format!("{} {} (median {} against {})", durs.len(), p.phase.label(), fmt(m), fmt(p.median_ns))
                }
                None => format!("0 {}", p.phase.label()),
            }
        })
        .collect();
    format!("engine steps in those {}: {}", fmt(to - from), parts.join(", "))
}

fn fmt(ns: i64) -> String {
    causeway_model::time::fmt_ns(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(work: i64) -> EngineStep {
        EngineStep { start_ns: 0, end_ns: 1, work, phase: Phase::Unsplit }
    }

    #[test]
    fn work_splits_into_prefill_and_decode_only_when_far_apart() {
        let mut steps: Vec<EngineStep> = (0..20).map(|i| step(128 + i % 3)).collect();
        steps.extend((0..4).map(|i| step(4096 * (1 + i))));
        assert_eq!(split_by_work(&steps), Some(4096));
        // graphs: one config-less launch per decode step, many launches per prefill step
        let graphs: Vec<EngineStep> = [1, 1, 1, 1, 1, 1, 300, 280].into_iter().map(step).collect();
        assert_eq!(split_by_work(&graphs), Some(280));
        // steady work: one phase
        let steady: Vec<EngineStep> = (0..20).map(|i| step(1000 + 50 * i)).collect();
        assert_eq!(split_by_work(&steady), None);
        assert_eq!(split_by_work(&[step(5); 10]), None);
    }
}
