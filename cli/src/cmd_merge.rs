//! `causeway merge`: the traces of many nodes into one lake on this machine, with no server: a
//! DuckLake whose catalog is a DuckDB file (`--out`) and whose data are Parquet files beside it.
//! Every trace keeps its node and its own identity (nothing is collapsed across nodes: pids, ids and
//! timestamps stay each node's own), so every `causeway fleet` question and `causeway mcp --lake`
//! answer over it as over a shipped fleet, with `--lake ducklake:FILE`.
//!
//! A node is one host: two inputs recorded on different hosts under one node name are refused
//! before anything is written (`--node TRACE=NODE` files one under a name of its own), and the
//! shipper refuses a trace of another host than the node's traces already in the lake.
//!
//! Each trace is shipped by the fleet's own [`Shipper`] (rows and watermark in one transaction), so a
//! merge run again adds only what is new and never a trace twice. The clocks are the one
//! difference: no catalog server was there when the traces were recorded, so no offset is measured;
//! `fleet clock` says so and cross-checks the nodes with the ends of their collectives instead.

use std::path::PathBuf;

use anyhow::Context;
use causeway_backends::TraceFormat;
use causeway_fleet::{node_and_host, LakeSpec, ShipOptions, ShipReport, Shipper, Tier};

#[derive(clap::Args)]
pub struct Args {
    /// The lake to write: a DuckDB catalog file, created if missing (an existing one gets the new
    /// traces added). Read it with `--lake ducklake:FILE`.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The node traces (native SQLite or DuckDB, finished or still being written; `causeway
    /// convert` an Ingero DB first). Each is filed under the node it recorded (`trace --node`,
    /// default its host name) unless `--node` names another.
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// File one trace under another node than the one it recorded (repeat for several): two hosts
    /// that recorded the same name (cloned machines, containers) must be told apart, since a node
    /// is one host (one clock, one drill-down).
    #[arg(long = "node", value_name = "TRACE=NODE")]
    nodes: Vec<String>,
    /// all (every event) or summary (collectives, synchronizing calls, aggregates of everything).
    #[arg(long, default_value = "all")]
    tier: String,
    /// Where a new lake keeps its Parquet files (default: FILE.files/ beside the catalog file).
    #[arg(long, value_name = "DIR")]
    data_path: Option<PathBuf>,
    /// Events per transaction at most.
    #[arg(long, default_value_t = 200_000)]
    batch: i64,
    /// Print one JSON object: the lake and each trace's report.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let tier = Tier::parse(&args.tier)?;
    let renamed = node_names(&args.traces, &args.nodes)?;
    // Every input is looked at before anything is written: a wrong file, or two hosts under one
    // node, fails the merge whole (the lake's own traces are checked as each trace is added).
    let mut filed = FiledNodes::default();
    for (t, rename) in args.traces.iter().zip(&renamed) {
        let store = causeway_backends::open_store(t).with_context(|| format!("{}: cannot be merged", t.display()))?;
        if let TraceFormat::Ingero { version } = &store.info().format {
            anyhow::bail!(
                "{}: an Ingero DB (schema {version}): `causeway convert` it to a native trace first, then merge that",
                t.display()
            );
        }
        let first = store.sessions()?.into_iter().next().unwrap_or_default();
        filed.add(t, node_and_host(rename.as_deref(), &first.node, &first.hostname))?;
    }
    let out = if args.out.is_absolute() { args.out.clone() } else { std::env::current_dir()?.join(&args.out) };
    let lake = LakeSpec::file(&out)?;
    let mut reports: Vec<(PathBuf, ShipReport)> = Vec::new();
    for (t, node) in args.traces.iter().zip(&renamed) {
        let opts = ShipOptions {
            tier,
            batch_rows: args.batch,
            data_path: args.data_path.clone(),
            node: node.clone(),
            ..Default::default()
        };
        // one shipper at a time: a catalog file has one writer
        let report = Shipper::open(&lake, t, &opts)
            .and_then(|mut s| s.ship_all())
            .with_context(|| format!("merging {} into {}", t.display(), out.display()))?;
        reports.push((t.clone(), report));
    }
    let read_with = format!("ducklake:{}", out.display());
    if args.json {
        let traces: Vec<serde_json::Value> = reports
            .iter()
            .map(|(p, r)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["path"] = serde_json::json!(p.display().to_string());
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"lake": read_with, "traces": traces}))?);
        return Ok(0);
    }
    let mut nodes: Vec<&str> = reports.iter().map(|(_, r)| r.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for (p, r) in &reports {
        let rows: Vec<String> = r.rows.iter().map(|(t, n)| format!("{n} {t}")).collect();
        println!(
            "{} -> node {} (trace {}, tier {}): {}; events up to id {} of {}",
            p.display(),
            r.node,
            r.trace_uid,
            r.tier,
            if rows.is_empty() { "nothing new (merged before)".to_string() } else { rows.join(", ") },
            r.shipped.events,
            r.local.events
        );
    }
    println!(
        "merged {} trace(s) of {} node(s) into {}; ask it with --lake '{read_with}' (causeway fleet nodes|stragglers|waits|clock|explain|query, causeway mcp)",
        reports.len(),
        nodes.len(),
        out.display()
    );
    println!("clocks: not measured (no catalog server was there when the traces were recorded): `causeway fleet clock` cross-checks them with the collectives");
    Ok(0)
}

/// Each trace's node from `--node TRACE=NODE` (`None`: the one it recorded), in the traces' order.
fn node_names(traces: &[PathBuf], renames: &[String]) -> anyhow::Result<Vec<Option<String>>> {
    let canonical = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let inputs: Vec<PathBuf> = traces.iter().map(|t| canonical(t)).collect();
    let mut names = vec![None; traces.len()];
    for r in renames {
        let Some((trace, node)) = r.rsplit_once('=').filter(|(t, n)| !t.is_empty() && !n.trim().is_empty()) else {
            anyhow::bail!("--node {r}: expected TRACE=NODE (a trace of this merge and the node to file it under)");
        };
        let want = canonical(std::path::Path::new(trace));
        let Some(k) = inputs.iter().position(|p| *p == want) else {
            anyhow::bail!("--node {r}: {trace} is not one of the traces to merge");
        };
        names[k] = Some(node.trim().to_string());
    }
    Ok(names)
}

/// The node each input is filed under, with its host: two hosts under one node are refused.
#[derive(Default)]
struct FiledNodes<'a>(std::collections::BTreeMap<String, (String, &'a PathBuf)>);

impl<'a> FiledNodes<'a> {
    fn add(&mut self, trace: &'a PathBuf, (node, host): (String, String)) -> anyhow::Result<()> {
        match self.0.get(&node) {
            Some((other, earlier)) if *other != host => anyhow::bail!(
                "{} and {} were recorded on two hosts (`{other}` and `{host}`) under one node, `{node}`: a node \
                 is one host (one clock, one drill-down); file one under a name of its own with --node {}=NAME",
                earlier.display(),
                trace.display(),
                trace.display()
            ),
            Some(_) => Ok(()),
            None => {
                self.0.insert(node, (host, trace));
                Ok(())
            }
        }
    }
}
