//! The inputs of every tool, as schemars types: their JSON Schemas are the tools' `inputSchema`s
//! (and the files in `tool-schemas/`). Unknown fields are refused so that a misspelt argument comes
//! back as an error the model can fix, not as a silently ignored filter.

use causeway_backends::EventId;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::traces::TraceRef;

/// Default and largest `top_n` of chains and stacks.
pub const DEFAULT_TOP: usize = 5;
pub const MAX_TOP: usize = 50;
/// Default and largest row count of `run_sql`.
pub const DEFAULT_ROWS: usize = 100;
pub const MAX_ROWS: usize = 10_000;

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckArgs {
    /// "brief" (default): every check and the libraries found; "full": also which probed
    /// functions each library exports.
    pub detail: Option<Detail>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Traces skipped before the first listed (default 0).
    pub offset: Option<usize>,
    /// Traces listed (default 5, at most 500); the summary names every trace.
    pub limit: Option<usize>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only the last DURATION of the trace, counted back from its own last event, e.g. "30s", "5m".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last (e.g. "+10s").
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps instead of a time window: "812", "80-119", or "epoch:3" / "task:2-5" (the workload's labels, else the steps inferred from the trace; get_steps lists them).
    pub steps: Option<String>,
    /// Only events of this process.
    pub pid: Option<u32>,
    /// Only these ops, by name (e.g. ["cudaStreamSync", "sched_switch"]).
    pub ops: Option<Vec<String>>,
    /// Also give the figures per process (busiest first).
    pub per_process: Option<bool>,
    /// "op" (default): figures per op. "kernel": also per kernel name over every kernel launch op, in stats.kernels: count and nearest-rank percentiles of the host-side launch call, the launch APIs used, the distinct grid/block/shared-memory/cluster configurations.
    pub group_by: Option<GroupBy>,
    /// Processes shown with per_process, and kernels with group_by "kernel" (default 10, at most 200).
    pub limit: Option<usize>,
}

/// How much of each item an answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Detail {
    /// The figures and the summary of each item, sized for a small context.
    Brief,
    /// Everything.
    Full,
}

/// How get_trace_stats groups its figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// Per op.
    Op,
    /// Per op, and per kernel name over the kernel launches.
    Kernel,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChainsArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only the last DURATION of the trace, e.g. "30s".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps instead of a time window: "812", "80-119", or "epoch:3" / "task:2-5" (the workload's labels, else the steps inferred from the trace; get_steps lists them).
    pub steps: Option<String>,
    /// Only this process.
    pub pid: Option<u32>,
    /// Chains returned, worst first (default 5, at most 50).
    pub top_n: Option<usize>,
    /// Only chains at least this severe: "HIGH", "MEDIUM" or "LOW".
    pub min_severity: Option<String>,
    /// Only chains about this op (e.g. "cudaStreamSync").
    pub op: Option<String>,
    /// Only the chain with this id ("c1") or key, in full detail.
    pub chain_id: Option<String>,
    /// "brief" (default without chain_id): each chain's figures, culprit, CPUs, summary and
    /// evidence (SQL, value, first event ids); "full" (default with chain_id): also its timeline,
    /// stacks, kernels, details and recommendations, and the scope's severity rules.
    pub detail: Option<Detail>,
    /// Timeline steps kept per chain (default 12, at most 2000); get_timeline shows the rest.
    pub timeline_steps: Option<usize>,
    /// Also return the first chain's evidence as a picture (an SVG timeline: threads as rows, calls,
    /// off-CPU intervals by cause, the task that took the CPU) in an image content block.
    pub picture: Option<bool>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StacksArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only the last DURATION of the trace, e.g. "30s".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps instead of a time window: "812", "80-119", or "epoch:3" / "task:2-5" (the workload's labels, else the steps inferred from the trace; get_steps lists them).
    pub steps: Option<String>,
    /// Only this process.
    pub pid: Option<u32>,
    /// Only calls of this op (default: every GPU call).
    pub op: Option<String>,
    /// Only launches of kernels whose name (demangled or mangled) contains this text, case-insensitively, e.g. "gemm"; get_trace_stats with group_by "kernel" lists the names.
    pub kernel: Option<String>,
    /// Stacks per ranking (by count, by time; default 3, at most 50).
    pub top_n: Option<usize>,
    /// Frames kept per stack, innermost first (default 10, at most 128).
    pub max_frames: Option<usize>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimelineArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Center on this event id (from a chain's evidence.event_ids) and its process. Default when no
    /// window is given: the worst event of the top chain.
    pub around: Option<EventId>,
    /// Milliseconds shown on each side of `around` (default 50).
    pub around_ms: Option<f64>,
    /// Window start (with `to`, instead of `around`): unix ns, "+DUR" or "-DUR".
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps instead of a time window: "812", "80-119", or "epoch:3" / "task:2-5" (the workload's labels, else the steps inferred from the trace; get_steps lists them).
    pub steps: Option<String>,
    /// Only this process.
    pub pid: Option<u32>,
    /// Only this thread.
    pub tid: Option<u32>,
    /// Entries per thread (default 8, at most 2000).
    pub limit: Option<usize>,
    /// Threads shown, those with GPU calls first (default 3, at most 64).
    pub max_threads: Option<usize>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepsArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only steps that start in the last DURATION of the trace, e.g. "30s".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps: "812", "80-119", or "epoch:3" / "task:2-5".
    pub steps: Option<String>,
    /// Only this process's steps.
    pub pid: Option<u32>,
    /// Also list the steps themselves (index, start, duration), at most `limit` per series.
    pub list: Option<bool>,
    /// Steps listed per series with list (default 200, at most 5000).
    pub limit: Option<usize>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuIdleArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only the last DURATION of the trace, e.g. "30s".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps: "812", "80-119", or "epoch:3" / "task:2-5".
    pub steps: Option<String>,
    /// Only this process.
    pub pid: Option<u32>,
    /// Idle gaps shorter than this many milliseconds are counted, not explained one by one
    /// (default 1, at least 0.01).
    pub min_gap_ms: Option<f64>,
    /// Gaps listed, longest first (default 10, at most 20).
    pub top_n: Option<usize>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServingArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only the last DURATION of the trace, e.g. "30s".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps: "812", "80-119", or "epoch:3" / "task:2-5".
    pub steps: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSqlArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// One read-only SQL statement (SELECT / WITH). Tables and codes: describe_schema.
    pub sql: String,
    /// Rows returned (default 100, at most 10000); more sets `truncated`.
    pub limit: Option<usize>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchemaArgs {
    /// Trace name or 0-based index from list_traces (default: the first).
    pub trace: Option<TraceRef>,
    /// Only this table (its columns in full, with their meanings); without it, every table.
    pub table: Option<String>,
    /// "brief" (default without table): tables with their column names and types, the codes
    /// present in events; "full" (default with table): column meanings and every code defined.
    pub detail: Option<Detail>,
}

/// One side of a comparison: a trace and a window of it.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareSide {
    /// Trace name or 0-based index from list_traces.
    pub trace: Option<TraceRef>,
    /// Only the last DURATION of the trace, e.g. "30s".
    pub since: Option<String>,
    /// Window start: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub from: Option<String>,
    /// Window end: unix ns, "+DUR" after the first event, or "-DUR" before the last.
    pub to: Option<String>,
    /// Only these steps instead of a time window: "812", "80-119", or "epoch:3" / "task:2-5" (the workload's labels, else the steps inferred from the trace; get_steps lists them).
    pub steps: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareArgs {
    /// The reference run (default: trace 0; with a single trace, its first half).
    pub baseline: Option<CompareSide>,
    /// The run to compare (default: trace 1; with a single trace, its second half).
    pub candidate: Option<CompareSide>,
    /// Only this process (on both sides).
    pub pid: Option<u32>,
    /// Only these ops, by name.
    pub ops: Option<Vec<String>>,
    /// Chain changes listed (default 3, at most 50).
    pub top_n: Option<usize>,
    /// Ops listed, largest p99 change first (default 6, at most 500).
    pub limit: Option<usize>,
}

/// `top_n` clamped to 1..=MAX_TOP.
pub fn top(n: Option<usize>) -> usize {
    n.unwrap_or(DEFAULT_TOP).clamp(1, MAX_TOP)
}

/// `capture_trace` (only with `--allow-capture`): what to trace, and for how long.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    /// Running processes to trace (their children are followed). At most 64.
    pub pids: Option<Vec<u32>>,
    /// A program to launch and trace, then its arguments, e.g. ["train", "--iters", "300"]. The program
    /// must be on this server's allow-list (see the tool description); it runs without a shell, and is
    /// stopped when the window ends.
    pub command: Option<Vec<String>>,
    /// Seconds to record (default 10, 1 to 120). A launched command that exits sooner ends the trace.
    pub duration_s: Option<f64>,
    /// Also record the user stack of every CUDA call (default false).
    pub stacks: Option<bool>,
}
