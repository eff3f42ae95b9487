//! The time window of a trace as the read commands take it: `--since`, `--from`, `--to`, resolved
//! against the trace's own first and last event, or `--steps`, the span of a step range.

use causeway_analysis::{resolve_window, step_window, ExplainRequest};
use causeway_backends::{TraceInfo, TraceStore};
use causeway_model::time::{parse_duration_ns, TimeWindow};

/// `--since`/`--from`/`--to`/`--steps`, shared by the commands that document them alike
/// (`#[command(flatten)]`).
#[derive(clap::Args)]
pub struct WindowArgs {
    /// Only the last DUR of the trace, counted back from its own last event (e.g. 30s, 5m).
    #[arg(long, value_name = "DUR")]
    pub since: Option<String>,
    /// Window start: unix ns, +DUR after the first event, or -DUR before the last.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Window end: unix ns, +DUR after the first event, or -DUR before the last.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Only these steps: 812, 80-119, or epoch:3 / task:2-5 (the workload's labels, else the steps
    /// inferred from the trace; `causeway steps` lists them).
    #[arg(long, value_name = "RANGE", conflicts_with_all = ["since", "from", "to"])]
    pub steps: Option<String>,
}

/// The part of a trace a read command looks at: its window and, optionally, one process.
#[derive(clap::Args)]
pub struct ScopeArgs {
    #[command(flatten)]
    pub window: WindowArgs,
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
}

impl WindowArgs {
    /// The window these flags name in `store` (`pid`: whose steps `--steps` counts; every
    /// process's when `None`).
    pub fn resolve(&self, store: &dyn TraceStore, pid: Option<u32>) -> anyhow::Result<TimeWindow> {
        if let Some(spec) = &self.steps {
            return Ok(step_window(store, spec, pid)?);
        }
        window_of(store.info(), self.since.as_deref(), self.from.as_deref(), self.to.as_deref())
    }
}

impl ScopeArgs {
    /// The window of this scope in `store`.
    pub fn window(&self, store: &dyn TraceStore) -> anyhow::Result<TimeWindow> {
        self.window.resolve(store, self.pid)
    }

    /// What explain judges slowness by ([`causeway_analysis::judged_by`]).
    pub fn judge_by(&self) -> Option<TimeWindow> {
        causeway_analysis::judged_by(self.window.steps.as_deref())
    }

    /// The explain request of this scope in `store`, keeping `top` chains.
    pub fn explain_request(&self, store: &dyn TraceStore, top: usize) -> anyhow::Result<ExplainRequest> {
        Ok(ExplainRequest { window: self.window(store)?, pid: self.pid, top, judge_by: self.judge_by() })
    }
}

/// The window that `--since DUR`, `--from T` and `--to T` name in this trace.
pub fn window_of(
    info: &TraceInfo,
    since: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
) -> anyhow::Result<TimeWindow> {
    let since = since.map(parse_duration_ns).transpose().map_err(anyhow::Error::msg)?;
    Ok(resolve_window(info, since, from, to)?)
}
