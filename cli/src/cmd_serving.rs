//! `causeway serving`: the serving engines of a trace (vLLM, SGLang, TGI, Triton) as their own
//! metrics saw them: each latency's baseline and spikes, the queue and the KV cache, the engine
//! thread's prefill-heavy and decode-heavy steps, and what the calls say about each spike.

use std::fmt::Write;
use std::path::PathBuf;

use causeway_analysis::explain;
use causeway_model::time::{fmt_ns, fmt_since};

use crate::window::ScopeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let e = explain(store.as_ref(), &args.scope.explain_request(store.as_ref(), 1)?)?;
    let report = e.serving;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    let mut o = String::new();
    for n in &report.notes {
        let _ = writeln!(o, "{n}");
    }
    for en in &report.engines {
        let _ = writeln!(o, "{}", en.summary);
        let endpoint = if en.endpoint.is_empty() { String::new() } else { format!(" from {}", en.endpoint) };
        let _ = writeln!(o, "   {} scrapes over {}{endpoint}", en.scrapes, fmt_ns(en.last_ns - en.first_ns));
        let gauge = |name: &str, v: Option<f64>, pct: bool| {
            v.map(|v| if pct { format!("{name} {:.0}%", v * 100.0) } else { format!("{name} {v:.0}") })
        };
        let gauges: Vec<String> = [
            gauge("running", en.running_max, false),
            gauge("waiting", en.waiting_max, false),
            gauge("KV cache", en.kv_cache_max, true),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !gauges.is_empty() {
            let _ = writeln!(o, "   most at one scrape: {}", gauges.join(", "));
        }
        for l in &en.latencies {
            let p99 = l.p99_le_s.map(|b| format!(", p99 <= {}", fmt_ns((b * 1e9) as i64))).unwrap_or_default();
            let _ = writeln!(
                o,
                "   {}: {} request(s), mean {}{p99} ({})",
                l.kind.label(),
                l.requests,
                fmt_ns((l.mean_s * 1e9) as i64),
                l.metric
            );
        }
        if en.spikes.is_empty() {
            let _ = writeln!(o, "   no spike ({})", report.spike_rule);
        }
        for s in &en.spikes {
            let _ = writeln!(o, "   {}  {}", fmt_since(s.from_ns, e.first_ns), s.summary);
            if let Some(key) = &s.chain_key {
                let _ = writeln!(
                    o,
                    "      chain: causeway explain --db {} --from {} --to {} --chain {key}",
                    args.db.display(),
                    s.cause_from_ns,
                    s.to_ns
                );
            }
            let _ = writeln!(o, "      sql: {}", s.sql);
        }
    }
    if let Some(st) = &report.engine_steps {
        let _ = writeln!(o, "{}", st.summary);
        let _ = writeln!(o, "   ({})", st.rule);
    }
    print!("{o}");
    Ok(0)
}
