//! The tool catalogue: name, title, description, annotations, input and output schemas of every
//! tool, and the dispatch from a `tools/call` to its implementation in [`crate::answers`].
//! Everything here is independent of the transport, so tests call tools in-process. The catalogue
//! is read-only unless the server was started with `--allow-capture`: then `capture_trace` joins it
//! ([`catalogue_with`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use causeway_backends::QueryCancel;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::answers;
use crate::args::*;
use crate::capture::{self, CaptureConfig};
use crate::compare::CompareOutput;
use crate::gpu_window;
use crate::outputs::*;
use crate::sanitize::{sanitize_json, MAX_STRING_CHARS};
use crate::schema_style;
use crate::traces::TraceSet;

/// Largest answer a tool may give, in bytes of JSON text (a default call stays far below:
/// about 32 KB; this bounds calls that raise their limits).
pub const RESPONSE_CAP_BYTES: usize = 1 << 20;

/// A finished answer: the structured content and the same JSON as text (summary first).
#[derive(Debug, Clone)]
pub struct Answer {
    pub structured: Value,
    pub text: String,
    /// Image content blocks after the text: (MIME type, base64 data).
    pub images: Vec<(String, String)>,
}

/// Why a call produced no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// No tool of that name: a protocol error.
    UnknownTool(String),
    /// The tool ran and failed (bad arguments, missing DB, bad SQL...): an `isError` result.
    Failed(String),
}

/// One progress report of a tool: `progress` rises from one report to the next.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressReport {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: String,
}

/// Where a running tool posts its progress; the handler forwards each new report to the client
/// (when it sent a `progressToken`). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Mutex<(u64, Option<ProgressReport>)>>);

impl Progress {
    pub fn report(&self, progress: f64, total: Option<f64>, message: String) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.0 += 1;
        slot.1 = Some(ProgressReport { progress, total, message });
    }

    /// The latest report when it is newer than `seen` (a sequence number), with its number.
    pub fn newer_than(&self, seen: u64) -> Option<(u64, ProgressReport)> {
        let slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (slot.0 > seen).then(|| (slot.0, slot.1.clone().expect("a report comes with its number")))
    }
}

/// What a running call may use besides its arguments: cancellation and progress.
#[derive(Clone, Default)]
pub struct CallCtx {
    pub cancel: QueryCancel,
    pub progress: Progress,
}

pub(crate) type Runner = Box<dyn Fn(&TraceSet, Value, &CallCtx) -> Result<Answer, String> + Send + Sync>;

/// One tool: its description for `tools/list` and how to run it.
pub struct ToolSpec {
    pub tool: Tool,
    /// Runs long enough on big traces to deserve progress notifications.
    pub long_running: bool,
    /// Posts its own [`Progress`] reports (instead of the handler's elapsed-time ticks).
    pub own_progress: bool,
    /// Runs at least this long when asked to (the request time limit is raised to it).
    pub min_timeout: Duration,
    run: Runner,
}

impl ToolSpec {
    /// A read-only tool that `run` answers (see [`catalogue`] for the others); the fleet tools'.
    #[cfg(feature = "fleet")]
    pub(crate) fn new(tool: Tool, long_running: bool, run: Runner) -> ToolSpec {
        ToolSpec { tool, long_running, own_progress: false, min_timeout: Duration::ZERO, run }
    }
}

/// A read-only, idempotent, closed-world tool's description with its input and output schemas in
/// the portable style of [`schema_style`].
pub(crate) fn read_only_tool<I: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &'static str,
    description: &'static str,
) -> Tool {
    let annotations =
        ToolAnnotations::with_title(title).read_only(true).destructive(false).idempotent(true).open_world(false);
    let mut tool = Tool::new(name, description, Arc::new(JsonObject::new()))
        .with_title(title)
        .with_input_schema::<I>()
        .with_output_schema::<O>()
        .with_annotations(annotations);
    tool.input_schema = Arc::new(schema_style::input((*tool.input_schema).clone()));
    tool.output_schema = tool.output_schema.map(|o| Arc::new(schema_style::output((*o).clone())));
    tool
}

fn spec<I, O>(
    name: &'static str,
    title: &'static str,
    description: &'static str,
    long_running: bool,
    run: fn(&TraceSet, I, &QueryCancel) -> Result<O, String>,
) -> ToolSpec
where
    I: DeserializeOwned + JsonSchema + 'static,
    O: Serialize + JsonSchema + 'static,
{
    let tool = read_only_tool::<I, O>(name, title, description);
    let run: Runner = Box::new(move |set, args, ctx| finish(&run(set, parse_args(name, args)?, &ctx.cancel)?));
    ToolSpec { tool, long_running, own_progress: false, min_timeout: Duration::ZERO, run }
}

/// `spec`, whose answer also carries the output's SVG pictures as image content blocks.
fn with_pictures(
    mut spec: ToolSpec,
    run: fn(&TraceSet, ChainsArgs, &QueryCancel) -> Result<ChainsOutput, String>,
) -> ToolSpec {
    let name = spec.tool.name.clone();
    spec.run = Box::new(move |set, args, ctx| {
        let out = run(set, parse_args(&name, args)?, &ctx.cancel)?;
        let mut answer = finish(&out)?;
        answer.images = out.pictures.iter().map(|svg| ("image/svg+xml".to_string(), BASE64.encode(svg))).collect();
        Ok(answer)
    });
    spec
}

pub(crate) fn parse_args<I: DeserializeOwned>(name: &str, args: Value) -> Result<I, String> {
    let args = if args.is_null() { Value::Object(Default::default()) } else { args };
    serde_json::from_value(args).map_err(|e| format!("invalid arguments for {name}: {e}; see its inputSchema"))
}

/// `capture_trace`: writes a new trace file, attaches probes and may launch an allow-listed program,
/// so it is not read-only; it never changes or deletes existing data (not destructive); every call
/// records a new trace (not idempotent); it acts on this host only, never the network (closed world).
fn capture_spec(config: Arc<CaptureConfig>) -> ToolSpec {
    let annotations = ToolAnnotations::with_title(capture::TITLE)
        .read_only(false)
        .destructive(false)
        .idempotent(false)
        .open_world(false);
    let mut tool = Tool::new(capture::NAME, config.description(), Arc::new(JsonObject::new()))
        .with_title(capture::TITLE)
        .with_input_schema::<CaptureArgs>()
        .with_output_schema::<CaptureOutput>()
        .with_annotations(annotations);
    tool.input_schema = Arc::new(schema_style::input((*tool.input_schema).clone()));
    tool.output_schema = tool.output_schema.map(|o| Arc::new(schema_style::output((*o).clone())));
    let run: Runner =
        Box::new(move |set, args, ctx| finish(&capture::capture(&config, set, parse_args(capture::NAME, args)?, ctx)?));
    ToolSpec {
        tool,
        long_running: true,
        own_progress: true,
        min_timeout: capture::MAX_DURATION + capture::SETUP_MARGIN,
        run,
    }
}

/// `open_gpu_window`: changes what a running tracer records (not read-only), never deletes (not
/// destructive), opens a new window each call (not idempotent), this host only (closed world).
fn gpu_window_spec() -> ToolSpec {
    let annotations = ToolAnnotations::with_title(gpu_window::TITLE)
        .read_only(false)
        .destructive(false)
        .idempotent(false)
        .open_world(false);
    let mut tool = Tool::new(gpu_window::NAME, gpu_window::DESCRIPTION, Arc::new(JsonObject::new()))
        .with_title(gpu_window::TITLE)
        .with_input_schema::<gpu_window::GpuWindowArgs>()
        .with_output_schema::<gpu_window::GpuWindowOutput>()
        .with_annotations(annotations);
    tool.input_schema = Arc::new(schema_style::input((*tool.input_schema).clone()));
    tool.output_schema = tool.output_schema.map(|o| Arc::new(schema_style::output((*o).clone())));
    let run: Runner = Box::new(|_, args, _| finish(&gpu_window::open(parse_args(gpu_window::NAME, args)?)?));
    ToolSpec { tool, long_running: false, own_progress: false, min_timeout: std::time::Duration::ZERO, run }
}

/// Every tool of a server: the read-only catalogue, plus `capture_trace` and `open_gpu_window`
/// when capture is allowed.
pub fn catalogue_with(capture: Option<Arc<CaptureConfig>>) -> Vec<ToolSpec> {
    let mut tools = catalogue();
    if let Some(config) = capture {
        tools.push(capture_spec(config));
        tools.push(gpu_window_spec());
    }
    tools
}

/// The read-only tools, in the order `tools/list` gives them.
pub fn catalogue() -> Vec<ToolSpec> {
    vec![
        spec::<ListArgs, ListTracesOutput>("list_traces", "List the trace databases",
            "The trace DBs this server was given, with their names (the `trace` argument of every other tool), \
             format, event counts, time span, sessions, and what each does not record. Start here when several traces are served.",
            false, answers::list_traces),
        spec::<StatsArgs, StatsOutput>("get_trace_stats", "Per-op statistics of a trace",
            "Exact per-op figures of a trace (count, sum, avg, min, max, nearest-rank p50/p90/p95/p99 in microseconds), \
             with window (since/from/to), pid and op filters, optional per-process figures, group_by \"kernel\" for per-kernel \
             figures of the launch calls (host-side launch time, launch APIs, grid/block/shared-memory/cluster configurations), \
             loss counters, what the trace could not see (stats.coverage: runtimes without symbols, calls before a late \
             attach), and the note when the DB holds only a sample (true totals then in stats.sampled). Call it first.",
            true, answers::get_trace_stats),
        with_pictures(spec::<ChainsArgs, ChainsOutput>("get_causal_chains", "Causal chains: why the GPU stalled",
            "The causal engine's chains, worst first: each names the op, the cause (preempted, sleep, host_compute, ...), \
             the culprit task, how many calls and how much stall time it explains and its share, a timeline, \
             the call stacks behind its worst calls (with the user's Python line, when traced with stacks; for calls \
             of a thread that runs no Python, such as autograd's, the line borrowed from the Python thread they ran for), \
             recommendations, and evidence (event ids and a SQL query whose `value` reproduces the headline figure: \
             verify it with run_sql). Filters: window, pid, op, min_severity, chain_id; top_n (default 5). \
             picture: true adds the first chain's evidence as an SVG timeline in an image content block.",
            true, answers::get_causal_chains), answers::get_causal_chains),
        spec::<StepsArgs, StepsOutput>("get_steps", "Training steps: which were slow and why",
            "The workload's steps (epochs, tasks) as it labeled them while traced, or, without labels, inferred from \
             the trace (the period of one thread's synchronizing calls and collectives; said so in `origin` and `how`): \
             per series the count and nearest-rank p50/p90/max duration, the slow ranges (at least 1.5 x the median) \
             with what explains each (the top chain inside the range, judged against the whole scope's calls), and SQL \
             listing the steps. list: true adds the steps themselves. Every other tool takes `steps` (\"80-119\") as its window.",
            true, answers::get_steps),
        spec::<ServingArgs, ServingOutput>("get_serving", "Serving engine: latency spikes and why",
            "For a traced vLLM, SGLang, TGI or Triton (found from its command line, its metrics endpoint scraped while \
             tracing): each latency's (TTFT, inter-token, end-to-end, queue) requests, exact mean, p99 as a histogram \
             bucket bound, and baseline (the median scrape-interval mean); the most requests running / waiting and \
             KV-cache use; the spikes (intervals >= 3x the baseline, with the stalled intervals in front) each tied \
             to the top chain of its window and to the engine thread's prefill-heavy and decode-heavy steps there \
             against their baselines, with SQL over serving_samples recomputing the spike.",
            true, answers::get_serving),
        spec::<GpuIdleArgs, GpuIdleOutput>("get_gpu_idle", "When the GPU itself sat idle, and why",
            "From the device's own timeline (traces recorded with --gpu-timeline: CUPTI's record of every kernel, \
             copy and memset): each device's busy share, and every idle gap at least min_gap_ms long (default 1) \
             explained by what delayed the work that ended it: the launching thread's own story in the gap (preempted \
             by whom, run-queue wait, a sleep and who woke it, I/O, network, host work), a synchronize that drained the \
             queue, the launch itself, or a dependency on the device; a host cause is charged only with idle time it \
             overlapped. Idle time by cause and culprit, each with SQL that recomputes it (run_sql). Start here for \
             \"why did the GPU stall\".",
            true, answers::get_gpu_idle),
        spec::<StacksArgs, StacksOutput>("get_stacks", "Top call stacks of GPU calls",
            "The call stacks of GPU calls ranked by count and by total time (native frames demangled, Python frames \
             as `file:line in function`, the line being executed), with window, pid, op and kernel-name filters; top_n (default 3), max_frames (default 10). \
             Calls of a thread without Python frames of its own (autograd's device thread, a pin-memory thread) list, \
             under `borrowed`, the Python stack of the thread they ran for (blocked in loss.backward(), say) with the evidence.",
            true, answers::get_stacks),
        spec::<TimelineArgs, TimelineOutput>("get_timeline", "What each thread did, in order",
            "The calls, off-CPU intervals (with who took the CPU when the DB records it), wakeups, I/O and page \
             allocations of each thread around an event (`around`: an id from a chain's evidence) or in a from/to \
             window; a call recorded with a stack says where it was made (`file:line in function`; `stack_borrowed` \
             when it is the line of the Python thread it ran for). Without either, centers on the worst event of the top chain. limit entries per thread (default 8), max_threads (default 3).",
            true, answers::get_timeline),
        spec::<crate::footprint::FootprintArgs, crate::footprint::FootprintOutput>("get_footprint",
            "What a traced process touched",
            "Traces recorded with --footprint: per process its syscalls, files, sockets, children, libraries, CPU; a server's requests.",
            true, crate::footprint::get_footprint),
        spec::<RunSqlArgs, RunSqlOutput>("run_sql", "Read-only SQL on a trace",
            "Runs one read-only SQL statement (SELECT/WITH) on a trace through the SQL guard, on a read-only \
             connection, with a row limit (default 100) and a 30 s time limit. Use it to verify a chain's evidence.sql \
             and to answer what no other tool does. Tables, columns and codes: describe_schema. Order by timestamp, not id.",
            true, answers::run_sql),
        spec::<SchemaArgs, SchemaOutput>("describe_schema", "Tables, columns and codes of a trace",
            "The live schema of a trace DB: its tables with row counts, columns with types and meaning, and the \
             meaning of every (source, op) code present with its event count, plus notes on time semantics. \
             Read it before writing SQL. `table` narrows to one table.",
            false, answers::describe_schema),
        spec::<CompareArgs, CompareOutput>("compare_traces", "Compare two runs or two windows",
            "Two traces, or two windows of one trace, side by side: per-op count, p50, p90, p99 and their change in \
             percent, and the chains that appeared, disappeared or changed (matched by key). Default: trace 0 vs \
             trace 1, or with a single trace its first half vs its second half.",
            true, answers::compare_traces),
        spec::<CheckArgs, CheckOutput>("get_check", "What this host can trace",
            "What this host can trace with `causeway trace`: kernel, BTF, uprobe support, tracefs, privileges, the BPF \
             object loading and host tracepoints attaching (tested live), and the CUDA libraries found; each missing \
             item with its fix.",
            true, answers::get_check),
    ]
}

/// Run tool `name` with JSON arguments.
pub fn call(
    tools: &[ToolSpec],
    set: &TraceSet,
    name: &str,
    args: Value,
    cancel: &QueryCancel,
) -> Result<Answer, CallError> {
    call_with(tools, set, name, args, &CallCtx { cancel: cancel.clone(), progress: Progress::default() })
}

/// Run tool `name` with JSON arguments, cancellation and a place for progress reports.
pub fn call_with(
    tools: &[ToolSpec],
    set: &TraceSet,
    name: &str,
    args: Value,
    ctx: &CallCtx,
) -> Result<Answer, CallError> {
    let spec = tools.iter().find(|t| t.tool.name == name).ok_or_else(|| CallError::UnknownTool(name.to_string()))?;
    let answer = (spec.run)(set, args, ctx)
        .map_err(|e| CallError::Failed(crate::sanitize::sanitize_str(&e, MAX_STRING_CHARS)))?;
    if answer.text.len() > RESPONSE_CAP_BYTES {
        return Err(CallError::Failed(format!(
            "the answer is {} KB, over this server's cap of {} KB: lower `limit`/`top_n`, narrow the window (since/from/to) or filter by pid/op",
            answer.text.len() / 1024,
            RESPONSE_CAP_BYTES / 1024
        )));
    }
    Ok(answer)
}

/// Sanitize every string of an output and render its text with `summary` first.
pub fn finish<T: Serialize>(out: &T) -> Result<Answer, String> {
    let mut structured =
        serde_json::to_value(out).map_err(|e| format!("internal error: cannot encode the answer: {e}"))?;
    sanitize_json(&mut structured, MAX_STRING_CHARS);
    let text = summary_first_text(&structured);
    Ok(Answer { structured, text, images: Vec::new() })
}

/// JSON text of a value whose top-level keys `summary`, `trace`, `verdict`, `truncated`, `omitted` and `hint`
/// come first (an agent that reads the start of a long answer sees them).
pub fn summary_first_text(v: &Value) -> String {
    const FIRST: [&str; 6] = ["summary", "trace", "verdict", "truncated", "omitted", "hint"];
    let Value::Object(map) = v else { return v.to_string() };
    let mut parts: Vec<String> = Vec::with_capacity(map.len());
    let key_val = |k: &str, v: &Value| format!("{}:{}", Value::String(k.to_string()), v);
    for k in FIRST {
        if let Some(val) = map.get(k) {
            parts.push(key_val(k, val));
        }
    }
    for (k, val) in map {
        if !FIRST.contains(&k.as_str()) {
            parts.push(key_val(k, val));
        }
    }
    format!("{{{}}}", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_annotated_read_only_closed_world_with_both_schemas() {
        let tools = catalogue();
        assert_eq!(tools.len(), 13);
        for t in &tools {
            let a = t.tool.annotations.as_ref().expect("annotations");
            assert_eq!(a.read_only_hint, Some(true), "{}", t.tool.name);
            assert_eq!(a.open_world_hint, Some(false), "{}", t.tool.name);
            assert!(t.tool.title.is_some());
            assert_eq!(t.tool.input_schema.get("type"), Some(&Value::from("object")), "{}", t.tool.name);
            assert!(t.tool.output_schema.is_some(), "{}", t.tool.name);
        }
    }

    #[test]
    fn capture_is_listed_only_when_allowed_and_is_not_read_only() {
        assert!(catalogue_with(None).iter().all(|t| t.tool.name != capture::NAME));
        let config = Arc::new(CaptureConfig::new(Vec::new(), None).unwrap());
        let tools = catalogue_with(Some(config));
        assert_eq!(tools.len(), 15);
        let t = tools.iter().find(|t| t.tool.name == capture::NAME).expect("capture_trace is listed");
        let a = t.tool.annotations.as_ref().expect("annotations");
        assert_eq!(
            (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint),
            (Some(false), Some(false), Some(false), Some(false))
        );
        assert!(t.own_progress && t.min_timeout > capture::MAX_DURATION);
        let set = TraceSet::open(&[]);
        let e = call(&catalogue(), &set, capture::NAME, Value::Null, &QueryCancel::new()).unwrap_err();
        assert_eq!(e, CallError::UnknownTool(capture::NAME.into()));
    }

    #[test]
    fn progress_reports_are_seen_once_each() {
        let p = Progress::default();
        assert!(p.newer_than(0).is_none());
        p.report(1.0, Some(10.0), "a".into());
        let (seq, r) = p.newer_than(0).unwrap();
        assert_eq!((r.progress, r.total, r.message.as_str()), (1.0, Some(10.0), "a"));
        assert!(p.newer_than(seq).is_none());
        p.report(2.0, None, "b".into());
        assert_eq!(p.newer_than(seq).unwrap().1.message, "b");
    }

    #[test]
    fn text_leads_with_the_summary_and_matches_the_structure() {
        let v = serde_json::json!({"a": 1, "hint": "h", "summary": "s", "z": [1, 2]});
        let text = summary_first_text(&v);
        assert!(text.starts_with(r#"{"summary":"s","hint":"h""#), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    }

    #[test]
    fn bad_arguments_and_unknown_tools_are_reported() {
        let tools = catalogue();
        let set = TraceSet::open(&[]);
        let cancel = QueryCancel::new();
        let e = call(&tools, &set, "run_sql", serde_json::json!({"sq": "x"}), &cancel).unwrap_err();
        let CallError::Failed(msg) = e else { panic!("{e:?}") };
        assert!(msg.contains("unknown field `sq`"), "{msg}");
        assert_eq!(
            call(&tools, &set, "nope", Value::Null, &cancel).unwrap_err(),
            CallError::UnknownTool("nope".into())
        );
        let e = call(&tools, &set, "get_trace_stats", Value::Null, &cancel).unwrap_err();
        assert!(matches!(e, CallError::Failed(m) if m.contains("--db")));
    }
}
