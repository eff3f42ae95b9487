//! The outputs of every tool, as schemars types: their JSON Schemas are the tools' `outputSchema`s.
//! Each answer leads with a one-line `summary`; a default answer is sized for a model with a small
//! context (about 6,000 characters): lists are cut with `truncated`, and `omitted` says what was left
//! out and which arguments get it; answers with traced strings carry `untrusted`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use causeway_analysis::Chain;
use causeway_analysis::ServingReport;
use causeway_analysis::StacksReport;
use causeway_analysis::StepReport;
use causeway_analysis::TimelineReport;
use causeway_analysis::TraceStats;
use causeway_backends::{SchemaDescription, TraceFormat};
use causeway_model::SessionInfo;
use causeway_probes::CheckReport;
use schemars::JsonSchema;
use serde::Serialize;

#[derive(Debug, Serialize, JsonSchema)]
pub struct CheckOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub report: CheckReport,
}

/// One DB this server was given.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TraceListing {
    /// 0-based index (a valid `trace` argument).
    pub index: usize,
    /// Short name (a valid `trace` argument).
    pub name: String,
    pub path: PathBuf,
    /// False when the DB cannot be opened; `error` says why.
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<TraceFormat>,
    /// Rows in `events`.
    pub events: u64,
    pub first_ns: i64,
    pub last_ns: i64,
    /// Seconds from the first to the last event.
    pub span_s: f64,
    /// True when `events` is a sample (Ingero selective storage; true totals in get_trace_stats).
    pub sampled: bool,
    /// Trace runs recorded in the DB (first 5).
    pub sessions: Vec<SessionInfo>,
    pub sessions_total: usize,
    /// What this DB does not record.
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ListTracesOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub traces: Vec<TraceListing>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct StatsOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    pub stats: TraceStats,
    /// Processes found (more than `stats.processes` when truncated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_total: Option<usize>,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ChainsOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    /// One sentence: the worst finding of the whole scope.
    pub verdict: String,
    /// Worst first; ids (`c1`...) rank every chain of the scope and stay stable across filters.
    /// With detail "brief" a chain's timeline, stacks, kernels, details and recommendations are
    /// empty and its evidence keeps its first event ids (`omitted` says so).
    pub chains: Vec<Chain>,
    /// Chains matching the filters (more than `chains` when truncated).
    pub chains_matching: usize,
    /// Chains in the scope before filters.
    pub chains_total: usize,
    /// True when chains were left out (top_n) or a chain's timeline was cut (timeline_steps).
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub slow_call_rule: String,
    pub severity_rules: Vec<String>,
    pub gpu_calls: u64,
    pub slow_calls: u64,
    pub slow_time_ns: i64,
    pub missing: Vec<String>,
    pub notes: Vec<String>,
    /// The scope's steps (labeled by the workload, else inferred) and the slow ranges with what
    /// explains them; get_steps lists the steps themselves.
    pub steps: StepReport,
    /// The serving engines in scope (their own metrics: latency baselines and spikes with what
    /// the calls say about each); get_serving has the figures.
    pub serving: ServingReport,
    /// The device's own view (traces recorded with --gpu-timeline): busy share, idle gaps by host
    /// cause; get_gpu_idle has every gap and the SQL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<causeway_analysis::DeviceView>,
    pub untrusted: String,
    /// SVG pictures for image content blocks (`picture: true`), not part of the JSON.
    #[serde(skip)]
    #[schemars(skip)]
    pub pictures: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct StepsOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    pub steps: StepReport,
    /// True when a series' step list was cut to `limit`.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct GpuIdleOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    /// The device view: each device's busy share, the idle gaps explained, the idle time by cause
    /// with the SQL behind each figure; absent when the trace has no device timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<causeway_analysis::DeviceView>,
    /// True when gaps were left out (top_n).
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ServingOutput {
    pub summary: String,
    pub trace: String,
    pub serving: ServingReport,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct StacksOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    pub stacks: StacksReport,
    /// True when some stacks were cut to `max_frames`.
    pub frames_cut: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TimelineOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    pub timeline: TimelineReport,
    /// Threads in the window (more than `timeline.threads` when truncated).
    pub threads_total: usize,
    /// True when threads or entries were cut.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct RunSqlOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    pub columns: Vec<String>,
    /// Cells: integers, floats, text (sanitized, cut at 512 chars), null; blobs as hex.
    #[schemars(schema_with = "sql_rows_schema")]
    pub rows: Vec<Vec<serde_json::Value>>,
    pub row_count: usize,
    /// True when the row limit or the size cap cut the result.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SchemaOutput {
    pub summary: String,
    /// What this answer left out, each with the arguments that get it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    pub schema: SchemaDescription,
    /// With detail "brief": each table's columns as "name TYPE, ..." (its `columns` then empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub columns: BTreeMap<String, String>,
    pub untrusted: String,
}

/// A CUDA library probed during a capture.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CapturedLibrary {
    pub path: PathBuf,
    /// How it was found (explicit, ldconfig, maps:PID...).
    pub how: String,
    /// Symbols probed in it.
    pub symbols: usize,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CaptureOutput {
    pub summary: String,
    /// Name of the new trace: the `trace` argument of every other tool.
    pub trace: String,
    /// Its 0-based index (also a valid `trace` argument).
    pub index: usize,
    /// The new DB file.
    pub path: PathBuf,
    /// Seconds the capture took, probe loading and the DB's finish included.
    pub duration_s: f64,
    /// Events stored.
    pub events_written: u64,
    /// Events counted lost, all places together (details in losses; also stored in the trace).
    pub lost: u64,
    pub events_by_op: BTreeMap<String, u64>,
    pub losses: Vec<causeway_model::LossCounter>,
    /// Processes traced (the pids given, the command, their children).
    pub traced_pids: Vec<u32>,
    /// The launched program (canonical path) and its arguments; empty with pids only.
    pub command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_pid: Option<u32>,
    /// Exit status of the command when it ended within the window (128+N: killed by signal N).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_exit: Option<i32>,
    /// True when the command still ran at the end of the window and was stopped (SIGTERM, then SIGKILL).
    pub command_stopped: bool,
    /// Where the command's stdout went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_stdout: Option<PathBuf>,
    pub libraries: Vec<CapturedLibrary>,
    /// Host tracepoints attached.
    pub host_probes: Vec<String>,
    /// What was skipped or went wrong without stopping the capture.
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub untrusted: String,
}

/// Rows of SQL cells: each an integer, a number, a string or null.
pub(crate) fn sql_rows_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {
            "type": "array",
            "items": {"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}, {"type": "null"}]}
        }
    })
}
