//! `causeway mcp`: the MCP server for agents (Claude Code, Cursor, ollmcp...) over stdio, or over
//! streamable HTTP at `/mcp` with `--http ADDR`. Logs go to stderr only; stdout is the protocol.
//! With `--allow-capture` it also offers `capture_trace`: the agent may then record new traces of
//! running pids, or of the programs listed with `--capture-allow`, into `--capture-dir`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use causeway_server::{CaptureConfig, Extras};
use causeway_server::{HttpOptions, DEFAULT_MAX_BODY_BYTES, DEFAULT_RESPONSE_CAP_BYTES, TOKEN_ENV};

#[derive(clap::Args)]
pub struct Args {
    /// Trace database to serve (repeatable: tools then take a `trace` argument, by name or index).
    #[arg(long = "db", value_name = "PATH")]
    dbs: Vec<PathBuf>,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio (e.g. 127.0.0.1:8765). A
    /// non-loopback address needs a bearer token in CAUSEWAY_MCP_TOKEN.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Also accept this Host header value over HTTP (repeatable; loopback names are always accepted).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Also accept this browser Origin over HTTP, e.g. https://app.example.com:443 (repeatable).
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// Time limit of one request, e.g. 60s, 5m.
    #[arg(long, default_value = "60s", value_name = "DUR")]
    timeout: String,
    /// Largest HTTP request body, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES, value_name = "BYTES")]
    max_body: usize,
    /// Offer the capture_trace tool: the agent may record new traces (eBPF, root) of running pids, or
    /// of the programs listed with --capture-allow, for at most 120 s each.
    #[arg(long)]
    allow_capture: bool,
    /// A program capture_trace may launch (repeatable; with --allow-capture). Run without a shell,
    /// arguments as a list; never allow a shell or an interpreter, which would allow anything.
    #[arg(long = "capture-allow", value_name = "PROGRAM")]
    capture_allow: Vec<PathBuf>,
    /// Where capture_trace writes new traces (default: a new private directory under the temp dir).
    #[arg(long, value_name = "DIR")]
    capture_dir: Option<PathBuf>,
    /// Also serve a fleet lake (`postgres:...`, the read-only role, password from PGPASSWORD or
    /// PGPASSFILE; or `ducklake:FILE`, a merged lake): the fleet tools (nodes, stragglers, collective
    /// waits, clocks, SQL over the lake) and every node as a trace named `node:NAME` for the per-host
    /// tools.
    #[arg(long, env = "CAUSEWAY_LAKE", value_name = "LAKE")]
    lake: Option<String>,
    /// Write the JSON Schemas of every tool's input and output into DIR and exit.
    #[arg(long, value_name = "DIR")]
    write_schemas: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(dir) = &args.write_schemas {
        let n = causeway_server::schemas::write(dir)?;
        eprintln!("causeway mcp: wrote {n} schemas into {}", dir.display());
        return Ok(0);
    }
    if !args.allow_capture && (!args.capture_allow.is_empty() || args.capture_dir.is_some()) {
        anyhow::bail!("--capture-allow and --capture-dir need --allow-capture");
    }
    if args.dbs.is_empty() && !args.allow_capture && args.lake.is_none() {
        anyhow::bail!(
            "give at least one --db PATH (a Causeway trace or an Ingero DB), --lake LAKE, or --allow-capture to record one"
        );
    }
    let capture =
        if args.allow_capture { Some(CaptureConfig::new(args.capture_allow, args.capture_dir)?) } else { None };
    let ns = causeway_model::time::parse_duration_ns(&args.timeout).map_err(anyhow::Error::msg)?;
    let request_timeout = Duration::from_nanos(ns.max(1_000_000) as u64);
    match args.http {
        None => causeway_server::run_stdio(&args.dbs, request_timeout, Extras { capture, lake: args.lake })?,
        Some(bind) => {
            let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
            let opts = HttpOptions {
                bind,
                token,
                extra_hosts: args.allow_hosts,
                extra_origins: args.allow_origins,
                max_body_bytes: args.max_body,
                response_cap_bytes: DEFAULT_RESPONSE_CAP_BYTES,
                request_timeout,
            };
            causeway_server::run_http(&args.dbs, opts, Extras { capture, lake: args.lake })?
        }
    }
    Ok(0)
}
