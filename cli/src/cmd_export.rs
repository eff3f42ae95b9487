//! `causeway export`: the trace as a timeline for Perfetto UI, `chrome://tracing` or HTA (the
//! `causeway-export` crate does the work; this is its command line).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use causeway_export::{export, ExportRequest, Format};

use crate::window::WindowArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    /// `perfetto` (Perfetto's protobuf trace) or `chrome` (JSON Trace Event Format).
    #[arg(long, default_value = "perfetto", value_parser = parse_format)]
    format: Format,
    /// Output file (default: the trace's path with `.perfetto-trace` or `.json`); `-` for stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only this process's threads.
    #[arg(long)]
    pid: Option<u32>,
    #[command(flatten)]
    window: WindowArgs,
    /// Leave out the causal chains' annotations (skips running explain over the trace).
    #[arg(long)]
    no_chains: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| format!("unknown format {s:?}: perfetto or chrome"))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let window = args.window.resolve(store.as_ref(), args.pid)?;
    let req = ExportRequest { window, pid: args.pid, chains: !args.no_chains, ..Default::default() };
    let out = args.out.clone().unwrap_or_else(|| args.db.with_extension(args.format.extension()));
    let summary = if out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut w = BufWriter::new(stdout.lock());
        let s = export(store.as_ref(), &req, args.format, &mut w)?;
        w.flush()?;
        s
    } else {
        // written beside the target, then renamed: a failed export leaves no half file
        let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("cannot write in {}", dir.display()))?;
        let mut w = BufWriter::new(tmp.reopen()?);
        let s = export(store.as_ref(), &req, args.format, &mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        tmp.persist(&out).with_context(|| format!("cannot write {}", out.display()))?;
        s
    };
    if out.as_os_str() != "-" {
        eprintln!(
            "wrote {}: {} threads, {} calls, {} off-CPU intervals ({} preemptions with the task that took the CPU), {} socket calls, {} chains, {} other events, {} counter values",
            out.display(),
            summary.threads,
            summary.calls,
            summary.off_cpu,
            summary.preemption_flows,
            summary.socket_calls,
            summary.chains,
            summary.instants,
            summary.counter_values
        );
        if summary.device_ops > 0 {
            eprintln!(
                "the device's own timeline: {} ops on their streams' tracks, {} flows from the calls that launched them, {} idle gaps over 1 ms named by their cause",
                summary.device_ops, summary.launch_flows, summary.idle_gaps
            );
        }
        let how = match args.format {
            Format::Perfetto => "open it in Perfetto UI (Open trace file), or load it in trace_processor",
            Format::Chrome => {
                "open it in Perfetto UI or chrome://tracing; ts are microseconds from otherData.origin_unix_ns"
            }
        };
        eprintln!("{how}");
    }
    Ok(0)
}
