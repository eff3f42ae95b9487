//! `causeway`: the command-line front end. Each subcommand lives in its own `cmd_*` module with an
//! `Args` struct and a `run` function; this file only parses arguments, dispatches, and turns any
//! error into one line on stderr and a non-zero exit.

mod cmd_annotate;
mod cmd_check;
mod cmd_convert;
mod cmd_cut;
mod cmd_demo;
mod cmd_explain;
mod cmd_export;
#[cfg(feature = "duckdb")]
mod cmd_fleet;
mod cmd_footprint;
mod cmd_gpu_window;
mod cmd_mcp;
#[cfg(feature = "duckdb")]
mod cmd_merge;
mod cmd_query;
mod cmd_report;
mod cmd_serving;
#[cfg(feature = "duckdb")]
mod cmd_ship;
mod cmd_stacks;
mod cmd_stats;
mod cmd_steps;
mod cmd_timeline;
mod cmd_trace;
mod host_lock;
mod metrics_http;
mod report;
mod table;
mod window;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "causeway",
    version,
    about = "Why did the GPU stall? Per-call attribution of CUDA stalls from eBPF traces."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Explain a bundled investigation (a trace recorded on a planted fault): no root, GPU or server needed.
    Demo(cmd_demo::Args),
    /// Exact per-op statistics of a trace (count, sum, avg, min, max, nearest-rank p50/p90/p95/p99).
    Stats(cmd_stats::Args),
    /// Run read-only SQL on a trace, with a row cap and a timeout.
    Query(cmd_query::Args),
    /// The incident report: causal chains of GPU stalls, ranked, each with SQL that reproduces its figure.
    Explain(cmd_explain::Args),
    /// The incident report as one self-contained HTML file: verdict, chains with their timeline pictures, percentiles, histograms.
    Report(cmd_report::Args),
    /// The workload's steps (labeled, else inferred from the trace): durations, slow ranges, and what explains each.
    Steps(cmd_steps::Args),
    /// A serving engine's own metrics (vLLM, SGLang, TGI, Triton): latency baselines and spikes, the queue, prefill and decode steps, and what the calls say about each spike.
    Serving(cmd_serving::Args),
    /// Top call stacks of GPU calls by count and by time, demangled, Python frames as `file:line in function` (the line being executed).
    Stacks(cmd_stacks::Args),
    /// What each thread of a process did, in order, with the off-CPU intervals between.
    Timeline(cmd_timeline::Args),
    /// Record a trace: CUDA runtime/driver calls and what the kernel did to those threads, into a database.
    Trace(Box<cmd_trace::Args>),
    /// Open (or close) a window on the device timeline of a running process `trace --pid P --gpu-timeline` attached.
    GpuWindow(cmd_gpu_window::Args),
    /// Label a step, epoch or task of a traced workload (`step 812 begin` ... `step 812 end`, or `task 3 -- CMD`).
    Annotate(cmd_annotate::Args),
    /// What the traced processes touched (`trace --footprint`): syscalls by kind, files, sockets, children, libraries, CPU, requests.
    Footprint(cmd_footprint::Args),
    /// What this host can trace and what is missing, with the fix.
    Check(cmd_check::Args),
    /// The MCP server for agents (Claude Code, Cursor, ollmcp): tools, prompts, resources over stdio or HTTP.
    Mcp(cmd_mcp::Args),
    /// Cut a window (and a process) out of a trace as a standalone trace file, to share an incident.
    Cut(cmd_cut::Args),
    /// Write a trace as a timeline for Perfetto UI or chrome://tracing: threads, calls, off-CPU time, who took the CPU, chains.
    Export(cmd_export::Args),
    /// Convert a trace (Ingero DB, native SQLite or DuckDB) into a new native SQLite or DuckDB trace.
    Convert(cmd_convert::Args),
    /// Ship a trace into a fleet lake (DuckLake on PostgreSQL), exactly once; again to ship what was added.
    #[cfg(feature = "duckdb")]
    Ship(cmd_ship::Args),
    /// Questions across hosts, over a lake: nodes, clocks, stragglers at collectives, per-rank waits.
    #[cfg(feature = "duckdb")]
    Fleet(cmd_fleet::Args),
    /// Many nodes' traces into one lake file on this machine (no server), each under its node: `fleet` and `mcp` read it with --lake ducklake:FILE.
    #[cfg(feature = "duckdb")]
    Merge(cmd_merge::Args),
}

/// The command line, with `--version` naming the storage engines this binary carries: the DuckDB
/// version and whether it is compiled in or linked (and from where), since the fleet's extensions
/// load only into the exact version. That line (a read of /proc/self/maps) is made only when
/// `--version` is on the command line, not at every start.
fn parse_cli() -> Cli {
    let mut command = Cli::command();
    if std::env::args_os().any(|a| a == "--version") {
        let engines = {
            #[cfg(feature = "duckdb")]
            {
                causeway_backends::duckdb::engine_version()
            }
            #[cfg(not(feature = "duckdb"))]
            {
                "no DuckDB (a SQLite-only build)".to_string()
            }
        };
        let sqlite = causeway_backends::sqlite_library_version();
        let long = format!("{}\nSQLite {sqlite} (compiled in); {engines}", env!("CARGO_PKG_VERSION"));
        // clap keeps a &'static str; the line is made once per process.
        command = command.long_version(&*Box::leak(long.into_boxed_str()));
    }
    Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
}

/// The log filter when CAUSEWAY_LOG is not set: warnings, except aya's loader, whose one warning on
/// a working setup says that the task-storage map `cw_inflight` (used only by the BPF programs, and
/// loaded on purpose with `allow_unsupported_maps`) is "unsupported in Aya": true of aya's Rust
/// wrappers, harmless here, and read by users as a fault. Real load failures are errors, not
/// warnings, and are reported by `trace` and `check` themselves.
const DEFAULT_LOG_FILTER: &str = "warn,aya::bpf=error";

fn main() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let cli = parse_cli();
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("CAUSEWAY_LOG").unwrap_or_else(|_| DEFAULT_LOG_FILTER.into());
    // `causeway mcp` also sends its log to the clients that ask for it (logging/setLevel)
    let to_clients = matches!(cli.command, Command::Mcp(_)).then(causeway_server::client_log_layer);
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter))
        .with(to_clients)
        .init();
    let result = match cli.command {
        Command::Demo(a) => cmd_demo::run(a),
        Command::Stats(a) => cmd_stats::run(a),
        Command::Query(a) => cmd_query::run(a),
        Command::Explain(a) => cmd_explain::run(a),
        Command::Report(a) => cmd_report::run(a),
        Command::Stacks(a) => cmd_stacks::run(a),
        Command::Steps(a) => cmd_steps::run(a),
        Command::Serving(a) => cmd_serving::run(a),
        Command::Timeline(a) => cmd_timeline::run(a),
        Command::Mcp(a) => cmd_mcp::run(a),
        Command::Trace(a) => cmd_trace::run(*a),
        Command::Annotate(a) => cmd_annotate::run(a),
        Command::Footprint(a) => cmd_footprint::run(a),
        Command::GpuWindow(a) => cmd_gpu_window::run(a),
        Command::Check(a) => cmd_check::run(a),
        Command::Convert(a) => cmd_convert::run(a),
        Command::Export(a) => cmd_export::run(a),
        Command::Cut(a) => cmd_cut::run(a),
        #[cfg(feature = "duckdb")]
        Command::Ship(a) => cmd_ship::run(a),
        #[cfg(feature = "duckdb")]
        Command::Fleet(a) => cmd_fleet::run(a),
        #[cfg(feature = "duckdb")]
        Command::Merge(a) => cmd_merge::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("causeway: error: {msg}");
            std::process::exit(1);
        }
    }
}
