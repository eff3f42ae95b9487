//! `causeway timeline`: what each thread of a process did, in order, with the off-CPU intervals
//! between, around one event or over a window: the view that checks a chain.

use std::path::PathBuf;

use causeway_analysis::{resolve_window, step_window};
use causeway_analysis::{timeline, TimelineRequest, DEFAULT_AROUND_NS};
use causeway_backends::EventId;
use causeway_model::time::{fmt_ns, parse_duration_ns};

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    /// Center on this event id (an integer, or `node:seq` in Ingero v0.9+ DBs); shows its process.
    #[arg(long, value_name = "EVENT_ID", conflicts_with_all = ["from", "to", "steps"])]
    around: Option<String>,
    /// Time shown on each side of --around (e.g. 50ms).
    #[arg(long, value_name = "DUR")]
    span: Option<String>,
    /// Window start: unix ns, +DUR after the first event, or -DUR before the last.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    from: Option<String>,
    /// Window end.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    to: Option<String>,
    /// The window of these steps instead (812, 80-119, epoch:3; `causeway steps` lists them).
    #[arg(long, value_name = "RANGE", conflicts_with_all = ["from", "to"])]
    steps: Option<String>,
    /// Only this thread.
    #[arg(long)]
    tid: Option<u32>,
    /// Only this process (with --from/--to).
    #[arg(long)]
    pid: Option<u32>,
    /// Entries per thread.
    #[arg(long, default_value_t = 200)]
    limit: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let around = args.around.as_deref().map(|s| match s.parse::<i64>() {
        Ok(i) => EventId::Int(i),
        Err(_) => EventId::Text(s.into()),
    });
    if around.is_none() && args.steps.is_none() && (args.from.is_none() || args.to.is_none()) {
        anyhow::bail!("give --around EVENT_ID, both --from and --to, or --steps");
    }
    let window = match &args.steps {
        Some(spec) => step_window(store.as_ref(), spec, args.pid)?,
        None => resolve_window(store.info(), None, args.from.as_deref(), args.to.as_deref())?,
    };
    let around_ns = args
        .span
        .as_deref()
        .map(parse_duration_ns)
        .transpose()
        .map_err(anyhow::Error::msg)?
        .unwrap_or(DEFAULT_AROUND_NS);
    let req = TimelineRequest { around, around_ns, window, pid: args.pid, tid: args.tid, limit: args.limit.max(1) };
    let r = timeline(store.as_ref(), &req)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    println!("{} .. {} ({})", r.from_ns, r.to_ns, fmt_ns(r.to_ns - r.from_ns));
    for t in &r.threads {
        println!("\npid {} tid {} {}", t.pid, t.tid, t.comm);
        for e in &t.entries {
            let mark = if r.around.as_ref() == Some(&e.id) { ">" } else { " " };
            let indent = if e.depth > 0 { "    " } else { "" };
            println!(
                "{mark} {:+.6} s  {:<8} {indent}{}  (event {})",
                (e.ts_ns - r.from_ns) as f64 / 1e9,
                e.kind,
                e.detail,
                e.id
            );
            if !e.stack.is_empty() {
                println!("  {:>10}  {:<8} {indent}  at {}", "", "", e.stack.join(" ← "));
            }
        }
        if t.truncated {
            println!("  … cut at {} entries", args.limit);
        }
    }
    for d in &r.devices {
        match d.device {
            -1 => println!(
                "\npid {} stream {}: the host's waits on the device (CUPTI's synchronization records)",
                d.pid, d.stream
            ),
            dev => println!("\npid {} GPU {dev} stream {} (the device's own timeline)", d.pid, d.stream),
        }
        for o in &d.ops {
            let launched = if o.launch_event_id > 0 {
                format!("  (launched by event {})", o.launch_event_id)
            } else {
                String::new()
            };
            println!(
                "  {:+.6} s  {:<8} {} for {}{launched}",
                (o.start_ns - r.from_ns) as f64 / 1e9,
                o.kind.name(),
                o.name,
                fmt_ns(o.end_ns - o.start_ns)
            );
        }
        if d.truncated {
            println!("  … cut at {} ops", args.limit);
        }
    }
    for n in &r.notes {
        println!("\nnote: {n}");
    }
    Ok(0)
}
