//! `capture_trace` as an MCP task (the `io.modelcontextprotocol/tasks` extension, SEP-2663, as rmcp
//! 3.9 implements it), and the user's confirmation of a capture by elicitation.
//!
//! A client that declared the tasks extension (at `initialize`, or in the request's `_meta`) gets
//! a task for `tools/call capture_trace` at once (`resultType: "task"`): the capture runs in the
//! session's [`rmcp::task_manager::TaskManager`]; `tasks/get` shows it `working` with the
//! capture's progress as its `statusMessage`, then `completed` with the tool's result (an
//! `isError` result too: a refused or failed capture), `failed` when it ran past its time limit,
//! or `cancelled` after `tasks/cancel` (the capture stops at once; the shorter trace it recorded
//! stays in `list_traces`). Any other client gets today's blocking call, with progress.
//!
//! Before a capture starts, a client that declared elicitation is asked to confirm it (what is
//! traced, for how long): over a 2025 protocol by `elicitation/create`, and in a task of a
//! 2026-07-28 client by the task's `input_required` state (answered with `tasks/update`). A
//! decline or cancel ends the call with an `isError` result and nothing recorded. A client that
//! cannot be asked keeps the operator's opt-in (`--allow-capture`) as the only gate.

use std::time::{Duration, Instant};

use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::Value;

use crate::handler::{error_result, log_outcome, CausewayServer};
use crate::tools::{self, CallCtx};

/// How often a capture's task takes its progress into its status message.
const STATUS_EVERY: Duration = Duration::from_millis(500);
/// How long the user has to answer the confirmation.
const CONFIRM_LIMIT: Duration = Duration::from_secs(300);
/// How long a finished capture's task stays readable (from its creation; and as long again once
/// finished).
const TASK_TTL_MS: u64 = 30 * 60 * 1000;
/// The key of the confirmation in a task's `inputRequests`.
const CONFIRM_KEY: &str = "confirm_capture";

/// How this request's client can be asked to confirm.
#[derive(Clone)]
pub struct Asker {
    peer: Peer<RoleServer>,
    /// The client declared elicitation (form mode).
    elicitation: bool,
    /// The session speaks a protocol before 2026-07-28 (server-to-client requests allowed).
    legacy: bool,
}

impl Asker {
    pub fn of(ctx: &RequestContext<RoleServer>) -> Asker {
        let elicitation = ctx.client_capabilities().is_some_and(|c| c.elicitation.is_some());
        let legacy = ctx.protocol_version().is_none_or(|v| v.as_str() < ProtocolVersion::V_2026_07_28.as_str());
        Asker { peer: ctx.peer.clone(), elicitation, legacy }
    }
}

/// What the user is asked: the capture the arguments describe.
fn question(args: &Value) -> String {
    let secs = args.get("duration_s").and_then(Value::as_f64).unwrap_or(crate::capture::DEFAULT_DURATION.as_secs_f64());
    let what = match (args.get("pids").and_then(Value::as_array), args.get("command").and_then(Value::as_array)) {
        (_, Some(c)) if !c.is_empty() => {
            let argv: Vec<String> =
                c.iter().map(|a| a.as_str().map(str::to_string).unwrap_or_else(|| a.to_string())).collect();
            format!("launch and trace `{}`", crate::sanitize::sanitize_str(&argv.join(" "), 300))
        }
        (Some(p), _) if !p.is_empty() => {
            format!(
                "trace the running process(es) {}",
                crate::sanitize::sanitize_str(&Value::Array(p.clone()).to_string(), 300)
            )
        }
        _ => "record a trace".to_string(),
    };
    format!(
        "An agent asks Causeway to {what} with eBPF (CUDA calls, the scheduler, block I/O) for {secs} s, into a new trace on this host. Allow it?"
    )
}

fn elicit_params(args: &Value) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .required_bool_with("confirm", |b| b.title("Record this trace").description("true to record it"))
        .build()
        .expect("a one-boolean schema is valid");
    ElicitRequestParams::FormElicitationParams { meta: None, message: question(args), requested_schema: schema }
}

/// What the user answered, as an outcome: allowed, or why not.
fn allowed(r: ElicitResult) -> Result<(), String> {
    match r.action {
        ElicitationAction::Accept
            if r.content.as_ref().and_then(|c| c.get("confirm")).and_then(Value::as_bool) != Some(false) =>
        {
            tracing::info!("capture_trace: the user allowed the capture");
            Ok(())
        }
        ElicitationAction::Accept => Err("the user did not confirm the capture: nothing was recorded".into()),
        ElicitationAction::Decline => Err("the user declined the capture: nothing was recorded".into()),
        ElicitationAction::Cancel => Err("the user cancelled the capture: nothing was recorded".into()),
        _ => Err("the user did not allow the capture: nothing was recorded".into()),
    }
}

/// Ask the user to confirm the capture `args` describe where the client can be asked (in a task
/// of a 2026-07-28 client, through `task`); Ok when it may go ahead, Err with the refusal.
pub async fn confirm(args: &Value, asker: &Asker, task: Option<&TaskContext>) -> Result<(), String> {
    if !asker.elicitation {
        return Ok(()); // the operator's --allow-capture is the gate
    }
    let params = elicit_params(args);
    if asker.legacy {
        let ask = asker.peer.send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params)));
        return match tokio::time::timeout(CONFIRM_LIMIT, ask).await {
            Ok(Ok(ClientResult::ElicitResult(r))) => allowed(r),
            Ok(Ok(_)) => Err("the client answered the confirmation with something else: nothing was recorded".into()),
            Ok(Err(e)) => Err(format!("the capture could not be confirmed ({e}): nothing was recorded")),
            Err(_) => Err(format!("no confirmation within {} s: nothing was recorded", CONFIRM_LIMIT.as_secs())),
        };
    }
    let Some(task) = task else {
        return Ok(()); // a 2026 call outside a task: not asked
    };
    let ask = task.request_input(CONFIRM_KEY, InputRequest::Elicitation(ElicitRequest::new(params)));
    match tokio::time::timeout(CONFIRM_LIMIT, ask).await {
        Ok(Ok(v)) => match serde_json::from_value::<ElicitResult>(v) {
            Ok(r) => allowed(r),
            Err(e) => Err(format!("the confirmation is not an elicitation result ({e}): nothing was recorded")),
        },
        Ok(Err(_)) => Err("the task was cancelled before the capture was confirmed: nothing was recorded".into()),
        Err(_) => Err(format!("no confirmation within {} s: nothing was recorded", CONFIRM_LIMIT.as_secs())),
    }
}

/// Outside a task: ask where the client can be asked.
pub async fn confirm_capture(args: &Value, ctx: &RequestContext<RoleServer>) -> Result<(), String> {
    confirm(args, &Asker::of(ctx), None).await
}

/// Start `capture_trace` as a task of this session: its seed state, for `CreateTaskResult`.
pub fn start_capture(server: &CausewayServer, args: Value, ctx: &RequestContext<RoleServer>) -> CreateTaskResult {
    let asker = Asker::of(ctx);
    let server = server.clone();
    let opts = TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(STATUS_EVERY.as_millis() as u64)
        .with_status_message(format!("{}: starting", crate::capture::NAME));
    let tasks = server.1.tasks.clone();
    let task = tasks.spawn(opts, move |tctx| {
        Box::pin(async move {
            let started = Instant::now();
            let r = run_capture(&server, args, &asker, &tctx).await;
            if let Ok(r) = &r {
                log_outcome(crate::capture::NAME, &Ok(r.clone()), started);
            }
            r
        })
    });
    tracing::info!("{}: running as task {}", crate::capture::NAME, task.task_id);
    CreateTaskResult::new(task)
}

async fn run_capture(
    server: &CausewayServer,
    args: Value,
    asker: &Asker,
    tctx: &TaskContext,
) -> Result<CallToolResult, TaskExit> {
    if let Err(refused) = confirm(&args, asker, Some(tctx)).await {
        if tctx.is_cancel_requested() {
            return Err(TaskExit::Cancelled);
        }
        return Ok(error_result(refused));
    }
    let Some(spec) = server.0.tools.iter().find(|t| t.tool.name == crate::capture::NAME) else {
        return Err(TaskExit::Error(McpError::invalid_params("capture_trace is not offered", None)));
    };
    let timeout = server.0.request_timeout.max(spec.min_timeout);
    let call_ctx = CallCtx { cancel: Default::default(), progress: Default::default() };
    let (cancel, reports) = (call_ctx.cancel.clone(), call_ctx.progress.clone());
    let state = server.0.clone();
    let mut job = tokio::task::spawn_blocking(move || {
        tools::call_with(&state.tools, &state.traces, crate::capture::NAME, args, &call_ctx)
    });
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(STATUS_EVERY);
    let mut seen = 0;
    let mut cancelled = false;
    let outcome = loop {
        tokio::select! {
            r = &mut job => break r.map_err(|e| TaskExit::Error(McpError::internal_error(format!("capture_trace failed: {e}"), None)))?,
            _ = tctx.cancelled(), if !cancelled => {
                // the capture stops at once and finishes its (shorter) trace; the task is cancelled
                cancelled = true;
                cancel.cancel();
                tctx.set_status_message(format!("{}: cancelled, finishing the trace", crate::capture::NAME));
                tracing::info!("{}: task cancelled by the client", crate::capture::NAME);
            }
            _ = &mut deadline => {
                cancel.cancel();
                return Err(TaskExit::Error(McpError::internal_error(
                    format!("capture_trace ran past this server's limit of {} s and was stopped", timeout.as_secs()),
                    None,
                )));
            }
            _ = tick.tick() => {
                if let Some((n, r)) = reports.newer_than(seen) {
                    seen = n;
                    tctx.set_status_message(r.message);
                }
            }
        }
    };
    if cancelled {
        return Err(TaskExit::Cancelled);
    }
    crate::handler::answer_result(outcome).map_err(TaskExit::Error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_says_what_is_traced_and_for_how_long() {
        let q = question(&serde_json::json!({"command": ["sleep", "30"], "duration_s": 5}));
        assert!(q.contains("`sleep 30`") && q.contains("5 s"), "{q}");
        let q = question(&serde_json::json!({"pids": [42]}));
        assert!(q.contains("[42]") && q.contains("10 s"), "{q}");
    }

    #[test]
    fn only_an_accepted_confirmation_allows_the_capture() {
        let mut yes = ElicitResult::new(ElicitationAction::Accept);
        yes.content = Some(serde_json::json!({"confirm": true}));
        assert!(allowed(yes).is_ok());
        let mut no = ElicitResult::new(ElicitationAction::Accept);
        no.content = Some(serde_json::json!({"confirm": false}));
        assert!(allowed(no).is_err());
        assert!(allowed(ElicitResult::new(ElicitationAction::Decline)).unwrap_err().contains("declined"));
        assert!(allowed(ElicitResult::new(ElicitationAction::Cancel)).unwrap_err().contains("cancelled"));
    }
}
