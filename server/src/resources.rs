//! Resources under `causeway://`: the traces served, and per trace its session info, its live
//! schema, its chain index and each chain by id (JSON, strings sanitized like tool answers).
//!
//! - `causeway://traces`: what `list_traces` returns.
//! - `causeway://traces/{trace}/session`: the trace's sessions, span and event counts.
//! - `causeway://traces/{trace}/schema` (and `causeway://schema` for the first trace): `describe_schema`.
//! - `causeway://traces/{trace}/chains`: every chain of the whole trace (id, severity, op, summary).
//! - `causeway://traces/{trace}/chains/{chain_id}`: one chain in full, evidence SQL included.

use causeway_analysis::find_chain;
use causeway_model::time::TimeWindow;
use rmcp::model::{Resource, ResourceContents, ResourceTemplate};
use schemars::JsonSchema;
use serde::Serialize;

use crate::answers;
use crate::args::{Detail, ListArgs, SchemaArgs};
use crate::sanitize::{sanitize_str, UNTRUSTED_NOTE};
use crate::tools::finish;
use crate::traces::{TraceRef, TraceSet};

const PREFIX: &str = "causeway://traces";
const JSON: &str = "application/json";
/// Timeline steps kept in a chain resource.
const RESOURCE_TIMELINE_STEPS: usize = 40;

/// Why a read failed: no such resource (a protocol error), or the trace failed to answer.
#[derive(Debug, PartialEq)]
pub enum ReadError {
    NotFound(String),
    Failed(String),
}

fn resource(uri: String, name: String, title: String, description: String) -> Resource {
    Resource::new(uri, name).with_title(title).with_description(description).with_mime_type(JSON)
}

/// The concrete resources: the trace list, then session, schema and chain index of each trace.
pub fn list(set: &TraceSet) -> Vec<Resource> {
    let mut out = vec![resource(
        PREFIX.into(),
        "traces".into(),
        "Traces served".into(),
        "The trace DBs of this server with sessions, spans and event counts.".into(),
    )];
    for e in set.entries() {
        let n = &e.name;
        out.push(resource(
            format!("{PREFIX}/{n}/session"),
            format!("{n}-session"),
            format!("Session info of {n}"),
            format!("Sessions, format, span and event counts of trace {n}."),
        ));
        out.push(resource(
            format!("{PREFIX}/{n}/schema"),
            format!("{n}-schema"),
            format!("Schema of {n}"),
            format!("Tables, columns and code meanings of trace {n}, from the live DB."),
        ));
        out.push(resource(
            format!("{PREFIX}/{n}/chains"),
            format!("{n}-chains"),
            format!("Causal chains of {n}"),
            format!("Every causal chain of trace {n}: id, severity, op, cause and summary."),
        ));
    }
    out
}

pub fn templates() -> Vec<ResourceTemplate> {
    let t = |uri: &str, name: &str, title: &str, d: &str| {
        ResourceTemplate::new(uri, name).with_title(title).with_description(d).with_mime_type(JSON)
    };
    vec![
        t("causeway://traces/{trace}/chains/{chain_id}", "chain", "A causal chain by id", "One chain of a trace (ids from get_causal_chains over the whole trace, e.g. c1), with timeline and evidence SQL."),
        t("causeway://traces/{trace}/schema", "schema", "Schema of a trace", "Tables, columns and code meanings of a trace, from the live DB."),
        t("causeway://traces/{trace}/session", "session", "Session info of a trace", "Sessions, format, span and event counts of a trace."),
    ]
}

/// One line per chain in the chain index.
#[derive(Serialize, JsonSchema)]
struct ChainIndexEntry {
    id: String,
    uri: String,
    severity: String,
    op: String,
    cause: String,
    stall_ns: i64,
    summary: String,
}

#[derive(Serialize, JsonSchema)]
struct ChainIndex {
    summary: String,
    trace: String,
    verdict: String,
    chains: Vec<ChainIndexEntry>,
    untrusted: String,
}

#[derive(Serialize, JsonSchema)]
struct ChainResource {
    summary: String,
    trace: String,
    chain: causeway_analysis::Chain,
    untrusted: String,
}

/// Read one resource: its JSON text.
pub fn read(set: &TraceSet, uri: &str) -> Result<ResourceContents, ReadError> {
    let not_found = || {
        ReadError::NotFound(format!(
            "no resource {}: see resources/list and resources/templates/list",
            sanitize_str(uri, 300)
        ))
    };
    let cancel = causeway_backends::QueryCancel::new();
    let text = if uri == PREFIX {
        finish(&answers::list_traces(set, ListArgs { offset: None, limit: Some(500) }, &cancel).map_err(ReadError::Failed)?)
    } else if uri == "causeway://schema" {
        finish(&answers::describe_schema(set, SchemaArgs { detail: Some(Detail::Full), ..Default::default() }, &cancel).map_err(ReadError::Failed)?)
    } else {
        let rest = uri.strip_prefix(PREFIX).and_then(|r| r.strip_prefix('/')).ok_or_else(not_found)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let entry = set.resolve(Some(&TraceRef::Name(parts[0].to_string()))).map_err(|_| not_found())?;
        let trace = Some(TraceRef::Index(entry.index as u64));
        match parts[1..] {
            ["session"] => {
                let mut all = answers::list_traces(set, ListArgs { offset: Some(entry.index), limit: Some(1) }, &cancel).map_err(ReadError::Failed)?;
                all.traces.retain(|t| t.index == entry.index);
                all.summary = format!("trace {}", entry.name);
                finish(&all)
            }
            ["schema"] => finish(&answers::describe_schema(set, SchemaArgs { trace, table: None, detail: Some(Detail::Full) }, &cancel).map_err(ReadError::Failed)?),
            ["chains"] => {
                let e = set.explanation(&entry, TimeWindow::ALL, None).map_err(ReadError::Failed)?;
                let chains = e
                    .chains
                    .iter()
                    .map(|c| ChainIndexEntry {
                        id: c.id.clone(),
                        uri: format!("{PREFIX}/{}/chains/{}", entry.name, c.id),
                        severity: c.severity.as_str().into(),
                        op: c.op.clone(),
                        cause: c.cause.clone(),
                        stall_ns: c.stall_ns,
                        summary: c.summary.clone(),
                    })
                    .collect::<Vec<_>>();
                let summary = format!("{} chain(s) in trace {}", chains.len(), entry.name);
                finish(&ChainIndex { summary, trace: entry.name.clone(), verdict: e.verdict.clone(), chains, untrusted: UNTRUSTED_NOTE.into() })
            }
            ["chains", id] => {
                let e = set.explanation(&entry, TimeWindow::ALL, None).map_err(ReadError::Failed)?;
                let mut chain = find_chain(&e, id).ok_or_else(not_found)?.clone();
                let mut summary = format!("chain {} of trace {}: {}", chain.id, entry.name, chain.summary);
                if crate::chains::cut_timelines(std::slice::from_mut(&mut chain), RESOURCE_TIMELINE_STEPS) {
                    summary.push_str(&format!(" (timeline cut to {RESOURCE_TIMELINE_STEPS} steps: get_timeline around an evidence event shows the rest)"));
                }
                finish(&ChainResource { summary, trace: entry.name.clone(), chain, untrusted: UNTRUSTED_NOTE.into() })
            }
            _ => return Err(not_found()),
        }
    }
    .map_err(ReadError::Failed)?;
    Ok(ResourceContents::text(text.text, uri).with_mime_type(JSON))
}
