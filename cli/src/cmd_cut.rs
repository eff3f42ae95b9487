//! `causeway cut`: one window (and process) of a trace as a standalone trace file, to share an
//! incident without the rest of a long recording (`causeway_backends::cut` says what it keeps).

use std::path::PathBuf;

use causeway_backends::{cut, CutScope, Engine};
use causeway_model::time::fmt_ns;

use crate::window::WindowArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace to cut from (Ingero DB, native SQLite or DuckDB trace); opened read-only.
    #[arg(long)]
    db: PathBuf,
    /// New trace to write; must not exist. `.duckdb` writes DuckDB, anything else SQLite.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    window: WindowArgs,
    /// Only this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Engine of the new trace, sqlite or duckdb, overriding the extension of --out.
    #[arg(long, value_parser = Engine::parse)]
    backend: Option<Engine>,
    /// Print what was written as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let window = args.window.resolve(store.as_ref(), args.pid)?;
    anyhow::ensure!(
        !window.is_all() || args.pid.is_some(),
        "nothing to cut: give a window (--from/--to or --since) or --pid; `causeway convert` copies a whole trace"
    );
    drop(store);
    let scope = CutScope { window, pid: args.pid };
    let report = cut(&args.db, &args.out, args.backend, &scope, &mut |_, _| {})?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let span = match (window.from_ns, window.to_ns) {
            (Some(a), Some(b)) => format!(" ({} of trace)", fmt_ns(b - a)),
            _ => String::new(),
        };
        eprintln!(
            "wrote {}: {} events{span}, {} stacks, {} NCCL calls, {} GPU samples ({} process memory rows), {} serving samples, {} device ops; event ids as in {}",
            report.to.display(),
            report.events,
            report.stacks,
            report.nccl_calls,
            report.gpu_samples,
            report.gpu_process_memory,
            report.serving_samples,
            report.gpu_ops,
            args.db.display()
        );
    }
    Ok(0)
}
