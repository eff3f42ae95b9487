//! `causeway`: the command-line front end. Each subcommand lives in its own `cmd_*` module with an
//! `Args` struct and a `run` function; this file only parses arguments, dispatches, and turns any
//! error into one line on stderr and a non-zero exit.

mod cmd_query;
mod cmd_stats;
mod table;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "causeway", version, about = "Why did the GPU stall? Per-call attribution of CUDA stalls from eBPF traces.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Exact per-op statistics of a trace (count, sum, avg, min, max, nearest-rank p50/p90/p95/p99).
    Stats(cmd_stats::Args),
    /// Run read-only SQL on a trace, with a row cap and a timeout.
    Query(cmd_query::Args),
}

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAUSEWAY_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Stats(a) => cmd_stats::run(a),
        Command::Query(a) => cmd_query::run(a),
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
