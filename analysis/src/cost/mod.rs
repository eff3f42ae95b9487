//! What a stall costs, in GPU time and in money.
//!
//! GPU time: a chain's (a slow step range's, a serving spike's) cost is
//! - **measured** where the trace has the device's own timeline: the GPU idle time its stall
//!   overlapped (`gpu_idle_ns`, gaps of the device's busy spans);
//! - else **estimated**: the time of the GPU calls it held up (its headline figure, whose SQL is the
//!   chain's `evidence.sql`), as if the process's one GPU waited all of it, times the GPUs that
//!   waited. A straggler's figure is already the sum over every other rank of its wait at the
//!   collectives (one GPU per rank), so its `gpus` is the ranks that waited.
//!
//! A chain whose headline figure is no time (bytes, errors, samples) has no cost: nothing with SQL
//! says what it held up. The run's GPU time is each GPU process's span from its first GPU call to
//! the end of its last, one GPU per process ([`RunCost::sql`] recomputes it); each cost's `share` is
//! of that. Money is GPU time times a rate per GPU-hour ([`rates`]), filled in by [`price`].

pub mod rates;

use causeway_model::time::fmt_ns;

use crate::chains::{Chain, ChainKind};
use crate::evidence::SqlScope;
use crate::explain::Explanation;
pub use rates::{Rate, Rates};

/// Whether a cost was measured on the device's timeline or estimated from the host's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostBasis {
    /// The device's idle time (`trace --gpu-timeline`).
    Measured,
    /// The host-side stall times the GPUs that waited.
    Estimated,
}

/// What a finding cost in GPU time (and money, once priced).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct GpuCost {
    /// GPU time, ns: summed over the GPUs that waited.
    pub gpu_ns: i64,
    /// GPUs that waited.
    pub gpus: u32,
    pub basis: CostBasis,
    /// The figure it is derived from (`gpu_idle_ns`, `evidence.value`, `excess_ns`, `stalled_ns`,
    /// `waited_ns`), and how.
    pub how: String,
    /// Fraction of the run's GPU time.
    pub share: f64,
    /// US dollars at the run's rate; `None` without a rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

impl GpuCost {
    /// `2.1 GPU-s ($0.01, estimated)`: what a report line says.
    pub fn words(&self) -> String {
        let basis = match self.basis {
            CostBasis::Measured => "measured",
            CostBasis::Estimated => "estimated",
        };
        let money = self.dollars.map(|d| format!("{}, ", dollars(d))).unwrap_or_default();
        format!(
            "{} GPU time ({money}{basis}, {} GPU{})",
            fmt_ns(self.gpu_ns),
            self.gpus,
            if self.gpus == 1 { "" } else { "s" }
        )
    }
}

/// `$12.34`, `$0.0042`: enough digits to be read.
pub fn dollars(d: f64) -> String {
    if d >= 1.0 {
        format!("${d:.2}")
    } else {
        format!("${:.*}", 2 + (-d.max(1e-9).log10()).ceil() as usize, d)
    }
}

/// The run's GPU time and, once priced, its cost.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct RunCost {
    /// The GPU models NVML named (`attachments` of kind nvml, else `gpu_devices`, else
    /// `sessions.gpu_model`), most GPUs first; empty when NVML was not read.
    pub gpu_models: Vec<String>,
    /// Processes with GPU calls in scope, one GPU each.
    pub gpus: u32,
    /// Their spans from first GPU call to the end of the last, summed, ns.
    pub gpu_ns: i64,
    /// SQL that recomputes `gpu_ns` (one row, column `value`).
    pub sql: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Why there is no rate (an unknown or mixed model, no NVML).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

impl RunCost {
    /// `GPU time: 1.2 h over 8 GPU processes (NVIDIA H100 80GB HBM3): $14.75 at ...`, or why it
    /// has no price.
    pub fn words(&self) -> String {
        let model = self.gpu_models.first().map(|m| format!(" ({m})")).unwrap_or_default();
        let price = match (&self.rate, self.dollars, &self.no_rate) {
            (Some(r), Some(d), _) => format!("{} at ${}/GPU-hour ({})", dollars(d), r.dollars_per_gpu_hour, r.source),
            (_, _, Some(why)) => why.clone(),
            _ => "not priced".into(),
        };
        let plural = if self.gpus == 1 { "" } else { "es" };
        format!("GPU time: {} over {} GPU process{plural}{model}: {price}", fmt_ns(self.gpu_ns), self.gpus)
    }
}

/// The run's GPU time from its GPU calls: per process, its first call's start to its last call's
/// end (one pass; the calls of a process mostly come together).
pub(crate) fn run_gpu_time(calls: &[crate::attribution::Call], scope: &SqlScope) -> RunCost {
    let mut spans: std::collections::BTreeMap<u32, (i64, i64)> = Default::default();
    let mut last: Option<(u32, i64, i64)> = None;
    for c in calls {
        match &mut last {
            Some((p, a, b)) if *p == c.pid => {
                *a = (*a).min(c.ts);
                *b = (*b).max(c.end());
            }
            _ => {
                if let Some((p, a, b)) = last {
                    let e = spans.entry(p).or_insert((a, b));
                    *e = (e.0.min(a), e.1.max(b));
                }
                last = Some((c.pid, c.ts, c.end()));
            }
        }
    }
    if let Some((p, a, b)) = last {
        let e = spans.entry(p).or_insert((a, b));
        *e = (e.0.min(a), e.1.max(b));
    }
    let gpu = crate::attribution::gpu_call_sources().iter().map(u8::to_string).collect::<Vec<_>>().join(", ");
    RunCost {
        gpus: spans.len() as u32,
        gpu_ns: spans.values().map(|(a, b)| b - a).sum(),
        sql: format!(
            "SELECT coalesce(sum(te - ts), 0) AS value FROM (SELECT pid, min(timestamp) AS ts, max(timestamp + duration) AS te FROM events WHERE source IN ({gpu}){} GROUP BY pid)",
            scope.filter("")
        ),
        ..Default::default()
    }
}

/// The GPU models of a trace, most GPUs first (see [`RunCost::gpu_models`]).
pub(crate) fn gpu_models(store: &dyn causeway_store::TraceStore) -> Result<Vec<String>, crate::AnalysisError> {
    let mut names: Vec<String> = store
        .attachments()?
        .iter()
        .filter(|a| a.kind == "nvml")
        .flat_map(|a| a.symbols.iter().filter_map(|s| s.split_once(": ").map(|(_, n)| n.to_string())))
        .collect();
    if names.is_empty() {
        let mut seen = std::collections::BTreeSet::new();
        names = store.gpu_devices()?.into_iter().filter(|d| seen.insert(d.uuid.clone())).map(|d| d.name).collect();
    }
    if names.is_empty() {
        names = store.sessions()?.into_iter().map(|s| s.gpu_model).filter(|m| !m.is_empty()).collect();
    }
    let mut counts: Vec<(String, usize)> = Vec::new();
    for n in names {
        match counts.iter_mut().find(|c| c.0 == n) {
            Some(c) => c.1 += 1,
            None => counts.push((n, 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(counts.into_iter().map(|c| c.0).collect())
}

/// A chain's cost from its own figures, where it has none yet (a straggler's is set where its
/// ranks are known): measured from `gpu_idle_ns`, else estimated from a headline figure in ns.
pub(crate) fn chain_cost(c: &Chain) -> Option<GpuCost> {
    if let Some(idle) = c.gpu_idle_ns {
        return Some(GpuCost {
            gpu_ns: idle,
            gpus: 1,
            basis: CostBasis::Measured,
            how: "gpu_idle_ns: the device's idle time its stall overlapped".into(),
            share: 0.0,
            dollars: None,
        });
    }
    let held_up = c.evidence.unit == "ns" && c.evidence.value == c.stall_ns && c.stall_ns > 0;
    if !held_up || c.kind == ChainKind::ThroughputDrop {
        // a throughput drop is a symptom: its causes' chains carry the cost
        return None;
    }
    Some(GpuCost {
        gpu_ns: c.stall_ns,
        gpus: 1,
        basis: CostBasis::Estimated,
        how: "evidence.value x 1 GPU: the GPU calls it held up, the process's GPU assumed to wait all of it (no device timeline)".into(),
        share: 0.0,
        dollars: None,
    })
}

/// A straggler's cost: `waited_ns`, already the sum over the `waiting` ranks.
pub fn straggler_cost(waited_ns: i64, waiting: u32) -> GpuCost {
    GpuCost {
        gpu_ns: waited_ns,
        gpus: waiting,
        basis: CostBasis::Estimated,
        how: format!("waited_ns: the sum of the {waiting} other ranks' waits at its late collectives, each rank's GPU held in the collective"),
        share: 0.0,
        dollars: None,
    }
}

/// Every chain's, slow step range's and serving spike's GPU time, and their shares of the run's,
/// after the device view and the ranges are explained.
pub(crate) fn measure(e: &mut Explanation) {
    let run = e.cost.gpu_ns;
    let share = |ns: i64| if run > 0 { ns as f64 / run as f64 } else { 0.0 };
    for c in &mut e.chains {
        if c.cost.is_none() {
            c.cost = chain_cost(c);
        }
        if let Some(k) = &mut c.cost {
            k.share = share(k.gpu_ns);
        }
    }
    for r in e.steps.series.iter_mut().flat_map(|s| s.slow.iter_mut()) {
        r.cost = Some(match r.gpu_idle_ns {
            Some(idle) => GpuCost {
                gpu_ns: idle,
                gpus: 1,
                basis: CostBasis::Measured,
                how: "gpu_idle_ns: the device's idle time in the range".into(),
                share: share(idle),
                dollars: None,
            },
            None => GpuCost {
                gpu_ns: r.excess_ns,
                gpus: 1,
                basis: CostBasis::Estimated,
                how: "excess_ns x 1 GPU: the range's time over the median step".into(),
                share: share(r.excess_ns),
                dollars: None,
            },
        });
    }
    for s in e.serving.engines.iter_mut().flat_map(|x| x.spikes.iter_mut()) {
        s.cost = Some(match s.gpu_idle_ns {
            Some(idle) => GpuCost {
                gpu_ns: idle,
                gpus: 1,
                basis: CostBasis::Measured,
                how: "gpu_idle_ns: the device's idle time from the cause's start to the spike's end".into(),
                share: share(idle),
                dollars: None,
            },
            None => GpuCost {
                gpu_ns: s.stalled_ns,
                gpus: 1,
                basis: CostBasis::Estimated,
                how: "stalled_ns x 1 GPU: the spike's time when requests waited and none was served".into(),
                share: share(s.stalled_ns),
                dollars: None,
            },
        });
    }
}

/// Dollars for `gpu_ns` at `rate`.
pub fn dollars_of(gpu_ns: i64, rate: &Rate) -> f64 {
    gpu_ns as f64 / 3.6e12 * rate.dollars_per_gpu_hour
}

/// The rate of a trace's GPUs: one model (or `--gpu-rate`) has one; mixed models without the flag
/// have none.
pub fn rate_of(models: &[String], rates: &Rates) -> Result<Rate, String> {
    match models {
        [_, _, ..] if rates.override_rate.is_none() => {
            let fams: std::collections::BTreeSet<_> = models.iter().map(|m| rates::family(m)).collect();
            match (fams.len(), rates.rate_for(Some(&models[0]))) {
                (1, Ok(r)) if fams.iter().next().is_some_and(Option::is_some) => Ok(r),
                _ => Err(format!("no rate: the GPUs are of several models ({}); give --gpu-rate", models.join(", "))),
            }
        }
        _ => rates.rate_for(models.first().map(String::as_str)),
    }
}

/// Money for every cost of an explanation at the rate `rates` give its GPU model.
pub fn price(e: &mut Explanation, rates: &Rates) {
    let rate = rate_of(&e.cost.gpu_models, rates);
    let (rate, no_rate) = match rate {
        Ok(r) => (Some(r), None),
        Err(why) => (None, Some(why)),
    };
    let money = |ns: i64| rate.as_ref().map(|r| dollars_of(ns, r));
    e.cost.dollars = money(e.cost.gpu_ns);
    let costs = e
        .chains
        .iter_mut()
        .filter_map(|c| c.cost.as_mut())
        .chain(e.steps.series.iter_mut().flat_map(|s| s.slow.iter_mut()).filter_map(|r| r.cost.as_mut()))
        .chain(e.serving.engines.iter_mut().flat_map(|x| x.spikes.iter_mut()).filter_map(|s| s.cost.as_mut()));
    for k in costs {
        k.dollars = money(k.gpu_ns);
    }
    e.cost.rate = rate;
    e.cost.no_rate = no_rate;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_read_at_any_size() {
        assert_eq!(dollars(12.345), "$12.35");
        assert_eq!(dollars(0.5), "$0.500");
        assert_eq!(dollars(0.0042), "$0.00420");
        // an hour of one H100 at the list price
        let r = rates::list_price("H100").unwrap();
        assert!((dollars_of(3_600_000_000_000, &r) - 12.29).abs() < 1e-9);
    }
}
