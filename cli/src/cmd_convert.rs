//! `causeway convert`: any readable trace (Ingero DB, native SQLite, native DuckDB) into a new
//! native SQLite or DuckDB trace, losslessly for what the native schema holds (see
//! `causeway_backends::convert` for what carries over and how Ingero's text ids become integers).
//! Shows a progress bar on stderr when it is a terminal and the trace is large.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use causeway_backends::convert;
use causeway_backends::Engine;

#[derive(clap::Args)]
pub struct Args {
    /// Trace to read (Ingero DB, native SQLite or DuckDB trace); opened read-only.
    #[arg(long)]
    from: PathBuf,
    /// New trace to write; must not exist. `.duckdb` writes DuckDB, anything else SQLite.
    #[arg(long)]
    to: PathBuf,
    /// Engine of the new trace, sqlite or duckdb, overriding the extension of --to.
    #[arg(long, value_parser = Engine::parse)]
    backend: Option<Engine>,
    /// Print what was written as one JSON object.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Events below which no bar is drawn (the conversion takes well under a second).
const BAR_MIN_EVENTS: u64 = 200_000;

/// A one-line progress bar redrawn in place on stderr.
struct Bar {
    on: bool,
    started: Instant,
    drawn: Instant,
}

impl Bar {
    fn draw(&mut self, done: u64, total: u64) {
        if !self.on || total < BAR_MIN_EVENTS || (done < total && self.drawn.elapsed().as_millis() < 100) {
            return;
        }
        self.drawn = Instant::now();
        let width = 30usize;
        let frac = if total == 0 { 1.0 } else { done as f64 / total as f64 };
        let full = ((frac * width as f64) as usize).min(width);
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-6);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{}{}] {:>3.0}%  {done}/{total} events  {:.2} M events/s ",
            "=".repeat(full),
            " ".repeat(width - full),
            frac * 100.0,
            rate / 1e6
        );
        if done >= total {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let backend = args.backend;
    let mut bar =
        Bar { on: !args.quiet && std::io::stderr().is_terminal(), started: Instant::now(), drawn: Instant::now() };
    let t = Instant::now();
    let report = convert(&args.from, &args.to, backend, &mut |done, total| bar.draw(done, total))?;
    let secs = t.elapsed().as_secs_f64();
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["seconds"] = serde_json::json!((secs * 1000.0).round() / 1000.0);
        println!("{v}");
    } else {
        println!(
            "{} -> {} ({}): {} events, {} sessions, {} stacks, {} process names, {} launch configurations, {} kernel names, \
             {} NCCL calls, {} GPU samples ({} process memory rows), {} serving samples, {} device ops, {} process ranks, {} library attachments, {} loss counters, {} aggregate rows in {:.2} s{}",
            report.from.display(),
            report.to.display(),
            report.backend,
            report.events,
            report.sessions,
            report.stacks,
            report.process_names,
            report.launch_configs,
            report.kernel_names,
            report.nccl_calls,
            report.gpu_samples,
            report.gpu_process_memory,
            report.serving_samples,
            report.gpu_ops,
            report.process_ranks,
            report.attachments,
            report.loss_rows,
            report.aggregate_rows,
            secs,
            if report.ids_renumbered {
                "; text event ids (node:seq) were renumbered 1..n in time order"
            } else {
                ""
            }
        );
    }
    Ok(0)
}
