//! `get_footprint`: what the traced processes touched (traces recorded with `trace --footprint`),
//! within the answer budget: a few rows per list by default, `top_n` for more, `pid` for one
//! process, and what was left out said in `omitted`.

use causeway_analysis::{footprint, Footprint, FootprintRequest};
use causeway_backends::QueryCancel;
use causeway_model::time::fmt_ns;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::answers::{store_of, untrusted};
use crate::traces::TraceRef;
use crate::traces::TraceSet;

/// Rows per list of a default answer, and the most `top_n` gives.
const DEFAULT_TOP: usize = 5;
const MAX_TOP: usize = 100;
/// Processes described whole in a default answer (the others are listed by pid).
const DEFAULT_PROCESSES: usize = 2;

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FootprintArgs {
    pub trace: Option<TraceRef>,
    pub pid: Option<u32>,
    /// Rows per list (default 5).
    pub top_n: Option<usize>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FootprintOutput {
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
    pub trace: String,
    /// Per process: syscalls, files, sockets, children, libraries, CPU; requests; sql.
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub footprint: Footprint,
    pub untrusted: String,
}

pub fn get_footprint(set: &TraceSet, a: FootprintArgs, _: &QueryCancel) -> Result<FootprintOutput, String> {
    let entry = set.resolve(a.trace.as_ref())?;
    let store = store_of(&entry)?;
    let top = a.top_n.unwrap_or(DEFAULT_TOP).clamp(1, MAX_TOP);
    let mut f = footprint(store.as_ref(), &FootprintRequest { pid: a.pid, top }).map_err(|e| e.to_string())?;
    let mut omitted = Vec::new();
    if !f.recorded {
        let summary = "no footprint in this trace: it was recorded without `causeway trace --footprint`".to_string();
        return Ok(FootprintOutput {
            summary,
            omitted,
            trace: entry.name.clone(),
            footprint: f,
            untrusted: untrusted(),
        });
    }
    if a.pid.is_none() && f.processes.len() > DEFAULT_PROCESSES {
        // the busiest processes whole; the rest by pid
        f.processes.sort_by_key(|p| std::cmp::Reverse(p.syscall_calls));
        let rest: Vec<String> =
            f.processes.drain(DEFAULT_PROCESSES..).map(|p| format!("{} ({})", p.pid, p.name)).collect();
        omitted.push(format!(
            "{} more processes (fewer syscalls): {}; ask for one with pid",
            rest.len(),
            rest.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    for p in &f.processes {
        for (shown, all, what) in [
            (p.syscalls.len(), p.syscall_kinds, "syscall kinds"),
            (p.files.len(), p.file_count, "files"),
            (p.sockets.len(), p.socket_count, "sockets"),
            (p.libraries.len(), p.library_count, "libraries"),
            (p.children.len(), p.child_count, "children"),
        ] {
            if all > shown {
                omitted.push(format!("pid {}: {} more {what}: raise top_n (max {MAX_TOP})", p.pid, all - shown));
            }
        }
    }
    if f.request_count > f.requests.len() {
        omitted.push(format!(
            "{} more requests (the longest are kept): raise top_n (max {MAX_TOP}) or ask for one pid",
            f.request_count - f.requests.len()
        ));
    }
    let summary = match f.processes.first() {
        Some(p) => {
            let top_kind =
                p.syscalls.first().map(|k| format!("; most calls: {} x{}", k.name, k.calls)).unwrap_or_default();
            format!(
                "{} process(es); pid {} ({}): {} syscalls of {} kinds ({} in the kernel){top_kind}; {} files, {} sockets, \
                 {} children, {} libraries; {} on CPU; {} requests. Each figure's SQL is in footprint.sql (run_sql)",
                f.processes.len() + omitted.iter().filter(|o| o.contains("more processes")).count(),
                p.pid,
                p.name,
                p.syscall_calls,
                p.syscall_kinds,
                fmt_ns(p.syscall_ns),
                p.file_count,
                p.socket_count,
                p.child_count,
                p.library_count,
                fmt_ns(p.on_cpu_ns),
                f.request_count
            )
        }
        None => "no process of this trace has a footprint".to_string(),
    };
    Ok(FootprintOutput { summary, omitted, trace: entry.name.clone(), footprint: f, untrusted: untrusted() })
}
