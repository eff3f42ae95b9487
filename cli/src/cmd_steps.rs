//! `causeway steps`: a workload's steps (epochs, tasks) as it labeled them, or as inferred from
//! the trace: their durations, the slow ranges against the median, and what explains each.

use std::fmt::Write;
use std::path::PathBuf;

use causeway_analysis::{explain, slow_threshold};
use causeway_model::time::{fmt_ns, fmt_since};

use crate::window::ScopeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Also list every step with its duration (slow ones marked).
    #[arg(long)]
    list: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let request = args.scope.explain_request(store.as_ref(), 1)?;
    let e = explain(store.as_ref(), &request)?;
    let mut report = e.steps;
    if args.list {
        report.list_steps(store.as_ref(), request.window, args.scope.pid, usize::MAX)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    let mut o = String::new();
    for n in &report.notes {
        let _ = writeln!(o, "{n}");
    }
    for s in &report.series {
        let _ = writeln!(
            o,
            "pid {}: {} {}s, median {}, p90 {}, longest {}; {}",
            s.pid,
            s.count,
            s.kind,
            fmt_ns(s.p50_ns),
            fmt_ns(s.p90_ns),
            fmt_ns(s.max_ns),
            s.how
        );
        if s.slow.is_empty() {
            let _ = writeln!(o, "   no slow {}s (slow: at least {})", s.kind, fmt_ns(slow_threshold(s.p50_ns)));
        }
        for r in &s.slow {
            let _ = writeln!(o, "   {}  {}", fmt_since(r.start_ns, e.first_ns), r.summary);
            if let Some(key) = &r.chain_key {
                let _ = writeln!(
                    o,
                    "      chain: causeway explain --db {} --steps {}-{} --pid {} --chain {key}",
                    args.db.display(),
                    r.first,
                    r.last,
                    s.pid
                );
            }
        }
        let _ = writeln!(o, "   sql: {}", s.sql);
        for st in &s.steps {
            let slow = st.dur_ns >= slow_threshold(s.p50_ns);
            let _ = writeln!(
                o,
                "   {:>6}  {}  {:>10}{}",
                st.index,
                fmt_since(st.start_ns, e.first_ns),
                fmt_ns(st.dur_ns),
                if slow { "  slow" } else { "" }
            );
        }
    }
    print!("{o}");
    Ok(0)
}
