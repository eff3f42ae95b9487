//! The time window of a trace as the read commands take it: `--since`, `--from`, `--to`, resolved
//! against the trace's own first and last event.

use causeway_analysis::resolve_window;
use causeway_backends::TraceInfo;
use causeway_model::time::{parse_duration_ns, TimeWindow};

/// `--since`/`--from`/`--to`, shared by the commands that document them alike (`#[command(flatten)]`).
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
    pub fn resolve(&self, info: &TraceInfo) -> anyhow::Result<TimeWindow> {
        window_of(info, self.since.as_deref(), self.from.as_deref(), self.to.as_deref())
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
