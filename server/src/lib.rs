//! The MCP server of Causeway (rmcp): the tools, prompts and resources an agent uses to find out why
//! GPU work stalled, over stdio or hardened streamable HTTP. Every figure comes from the library
//! functions the CLI calls too (`causeway_analysis`, `causeway_backends`, `causeway_probes`); this
//! crate only resolves arguments, bounds answers and sanitizes traced strings.
//!
//! - [`traces`]: the DBs served (`--db`, several allowed), by name or index.
//! - [`args`], [`outputs`], [`compare`]: the schemars types of tool inputs and outputs.
//! - [`tools`]: the catalogue and dispatch; [`answers`]: what each tool does.
//! - `fleet_tools` (feature `fleet`): the fleet's tools over a lake, and its nodes as traces.
//! - [`capture`]: `capture_trace`, recording a new trace from the agent (opt-in: `--allow-capture`).
//! - [`prompts`], [`resources`]: prompts from `prompts/*.md`, resources under `causeway://`.
//! - [`handler`]: the rmcp `ServerHandler` (timeouts, cancellation, progress), per session.
//! - [`live`]: resource subscriptions (a trace still being written tells when its chains change);
//!   [`client_log`]: the server's log to the client (`logging/setLevel`); [`tasks`]:
//!   `capture_trace` as an MCP task, and the user's confirmation of a capture by elicitation.
//! - [`stdio`], [`http`]: the transports; [`schemas`]: the generated `tool-schemas/`, in the
//!   portable style of [`schema_style`].
//! - [`sanitize`]: untrusted traced strings made safe to show.
//!
//! The modules are private but two: [`tools`] (the catalogue and a direct `call`, for tests and
//! embedders) and [`schemas`] (the generated `tool-schemas/`); the rest of the API is re-exported
//! here.

mod answers;
mod args;
mod capture;
mod chains;
mod client_log;
mod compare;
#[cfg(feature = "fleet")]
mod fleet_tools;
mod footprint;
mod gpu_window;
mod handler;
mod http;
mod live;
mod outputs;
mod prompts;
mod resources;
mod sanitize;
mod schema_style;
pub mod schemas;
mod stdio;
mod tasks;
pub mod tools;
mod traces;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use capture::CaptureConfig;
pub use client_log::client_log_layer;
pub use handler::{CausewayServer, DEFAULT_REQUEST_TIMEOUT};
pub use http::{HttpOptions, DEFAULT_MAX_BODY_BYTES, DEFAULT_RESPONSE_CAP_BYTES, TOKEN_ENV};
pub use traces::TraceSet;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().worker_threads(2).max_blocking_threads(16).build()?)
}

/// What a server serves besides its trace files.
#[derive(Default)]
pub struct Extras {
    /// Offer `capture_trace` under this configuration.
    pub capture: Option<capture::CaptureConfig>,
    /// A fleet lake (`postgres:...`, read-only role): the fleet tools, and each node as a trace
    /// `node:NAME` (cargo feature `fleet`).
    pub lake: Option<String>,
}

fn server(dbs: &[PathBuf], request_timeout: Duration, extras: Extras) -> anyhow::Result<CausewayServer> {
    let traces = traces::TraceSet::open(dbs);
    #[cfg_attr(not(feature = "fleet"), allow(unused_mut))]
    let mut tools = tools::catalogue_with(extras.capture.map(Arc::new));
    if let Some(lake) = extras.lake {
        #[cfg(feature = "fleet")]
        {
            let lake = Arc::new(causeway_fleet::LakeReader::new(causeway_fleet::LakeSpec::parse(&lake)?));
            let n = fleet_tools::add_nodes(&traces, &lake).map_err(anyhow::Error::msg)?;
            tracing::info!("serving {n} nodes of the lake");
            tools.extend(fleet_tools::catalogue(lake));
        }
        #[cfg(not(feature = "fleet"))]
        anyhow::bail!("--lake {lake}: this build has no fleet support (build with the `duckdb` feature)");
    }
    Ok(CausewayServer::with_tools(traces, request_timeout, tools))
}

/// Serve the given traces over stdin/stdout until stdin closes.
pub fn run_stdio(dbs: &[PathBuf], request_timeout: Duration, extras: Extras) -> anyhow::Result<()> {
    let server = server(dbs, request_timeout, extras)?;
    runtime()?.block_on(stdio::serve(server))
}

/// Serve the given traces over streamable HTTP until ctrl-c or SIGTERM.
pub fn run_http(dbs: &[PathBuf], opts: HttpOptions, extras: Extras) -> anyhow::Result<()> {
    http::check_bind(&opts)?;
    let server = server(dbs, opts.request_timeout, extras)?;
    runtime()?.block_on(http::serve(server, opts))
}
