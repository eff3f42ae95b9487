//! `causeway fleet`: questions only a fleet answers, over a lake the hosts shipped to: the nodes,
//! their clocks, the straggler at each collective, every rank's waits, what the stalls cost per
//! node and per job. Every cross-host answer
//! lists the clock offset and bound of each node it compares.

use causeway_fleet::{Access, Fleet, FleetCosts, LakeSpec, NodeClock, TraceBehind};
use causeway_model::time::{fmt_ns, fmt_utc};

use crate::cmd_ship::{signed, LakeArgs};
use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Every node: traces, ranks, events shipped, time range, last flush, losses.
    Nodes(Common),
    /// Each node's clock against the catalog server's: offset, bound, spread, and the cross-check
    /// with when collectives completed.
    Clock(Common),
    /// The rank that entered collectives late, again and again: by how much, in which episodes,
    /// and what it cost the others.
    Stragglers(Common),
    /// Per rank and communicator: how long it waited at collectives for the last rank in.
    Waits(Common),
    /// What the stragglers and the hangs cost, per node and per job: GPU time (every waiting
    /// rank's) and money at the lake's GPU rate.
    Costs(Common),
    /// The collectives a job hangs at: per communicator, the ranks that entered its last
    /// collective and still wait (a call in flight when their trace ended) and the ranks that never
    /// did, with their node and what each was doing instead.
    Hangs(Common),
    /// Each node's exact p50/p90/p99 of every GPU op beside the whole fleet's, outliers marked
    /// (fleets without collectives: inference servers).
    Ops(Common),
    /// The per-host report of one node, read from the lake (its shipped rows: `summary` holds the
    /// collectives and synchronizing calls, `all` or a shipped window everything): the drill-down
    /// after `stragglers`, over an episode's window.
    Explain(ExplainArgs),
    /// Housekeeping (one instance, the shipping role): flush inlined rows, merge small files, expire
    /// old snapshots, delete unreferenced files.
    Maintain(MaintainArgs),
    /// Read-only SQL over the whole lake (tables by bare name: events, nccl_calls, clock_samples,
    /// ...), through the SQL guard, with a row cap and a timeout.
    Query(QueryArgs),
}

#[derive(clap::Args)]
struct ExplainArgs {
    #[command(flatten)]
    lake: LakeArgs,
    /// The node (`fleet nodes` lists them).
    #[arg(long)]
    node: String,
    /// Which of the node's traces, when it shipped several (`fleet query "SELECT * FROM ship_traces"`).
    #[arg(long, value_name = "UID")]
    trace_uid: Option<String>,
    #[command(flatten)]
    report: crate::cmd_explain::ReportArgs,
}

#[derive(clap::Args)]
struct MaintainArgs {
    #[command(flatten)]
    common: Common,
    /// Keep this much snapshot history (time travel), e.g. 7d, 12h.
    #[arg(long, default_value = "7d")]
    keep: String,
}

#[derive(clap::Args)]
struct QueryArgs {
    #[command(flatten)]
    common: Common,
    /// Row cap (at most 10000).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Time limit, e.g. 30s.
    #[arg(long, default_value = "30s")]
    timeout: String,
    /// The SQL (one read-only statement).
    sql: String,
}

#[derive(clap::Args)]
struct Common {
    #[command(flatten)]
    lake: LakeArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// US dollars per GPU-hour for the stragglers' and hangs' cost, over the config file
    /// (`~/.config/causeway/gpu-rates.json`) and the built-in list prices by GPU model.
    #[arg(long, value_name = "DOLLARS")]
    gpu_rate: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let (common, what) = match args.what {
        What::Query(q) => return run_query(&q),
        What::Maintain(m) => return run_maintain(&m),
        What::Explain(e) => return run_explain(&e),
        What::Nodes(c) => (c, Answer::Nodes),
        What::Clock(c) => (c, Answer::Clock),
        What::Stragglers(c) => (c, Answer::Stragglers),
        What::Waits(c) => (c, Answer::Waits),
        What::Costs(c) => (c, Answer::Costs),
        What::Hangs(c) => (c, Answer::Hangs),
        What::Ops(c) => (c, Answer::Ops),
    };
    let lake = LakeSpec::parse(&common.lake.lake)?;
    let fleet = Fleet::new(causeway_fleet::connect(&lake, &Access::Read)?)?;
    let json = common.json;
    match what {
        Answer::Nodes => {
            let nodes = fleet.nodes()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&nodes)?);
                return Ok(0);
            }
            let mut t = Table::new(&[
                "node", "ranks", "traces", "tier", "events", "nccl", "from", "to", "flushes", "shipped", "lost",
            ]);
            for n in &nodes {
                t.row(vec![
                    n.node.clone(),
                    n.ranks.clone(),
                    n.traces.to_string(),
                    n.tiers.clone(),
                    n.events.to_string(),
                    n.nccl_calls.to_string(),
                    n.first_ns.map(fmt_utc).unwrap_or_default(),
                    n.last_ns.map(fmt_utc).unwrap_or_default(),
                    n.flushes.to_string(),
                    if n.finished { "to its end".into() } else { "behind".into() },
                    n.lost.to_string(),
                ]);
            }
            print!("{}", t.render());
            for n in &nodes {
                for b in &n.behind {
                    println!("{}", behind_line(&n.node, b));
                }
            }
        }
        Answer::Clock => {
            let clocks = fleet.clocks()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&clocks)?);
                return Ok(0);
            }
            print_clocks(&clocks);
        }
        Answer::Stragglers => {
            let mut stragglers = fleet.stragglers()?;
            let clocks = fleet.clocks()?;
            let rates = causeway_analysis::Rates::load(common.gpu_rate).map_err(anyhow::Error::msg)?;
            let rate = fleet.price(&mut stragglers, &rates)?;
            if json {
                let rate = match &rate {
                    Ok(r) => serde_json::to_value(r)?,
                    Err(why) => serde_json::json!({ "none": why }),
                };
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"stragglers": stragglers, "clocks": clocks, "rate": rate})
                    )?
                );
                return Ok(0);
            }
            if stragglers.is_empty() {
                println!("no straggler: no rank entered two or more collectives late (beyond max(1 ms, period/10, the clocks' bounds))");
            }
            for s in &stragglers {
                println!(
                    "rank {} (node {}, pid {}) of communicator {:#x} ({} ranks) was late at {} collectives: median {} late, max {}, the others waited {} in total, {} net of its own waits for them (period {}); worst stretch #{}-#{} ({} late): {} net",
                    s.rank,
                    s.node,
                    s.pid,
                    s.comm_hash,
                    s.nranks,
                    s.late_collectives,
                    fmt_ns(s.median_late_ns),
                    fmt_ns(s.max_late_ns),
                    fmt_ns(s.waited_ns),
                    fmt_ns(s.net_waited_ns),
                    fmt_ns(s.period_ns),
                    s.worst_stretch.first_seq,
                    s.worst_stretch.last_seq,
                    s.worst_stretch.late,
                    fmt_ns(s.worst_stretch.net_ns)
                );
                println!("  cost: {}", s.cost.words());
                for e in &s.episodes {
                    println!(
                        "  #{}-#{} ({} collectives, {} to {}): median {} late, max {}, waited {}",
                        e.first_seq,
                        e.last_seq,
                        e.collectives,
                        fmt_utc(e.from_ns),
                        fmt_utc(e.to_ns),
                        fmt_ns(e.median_late_ns),
                        fmt_ns(e.max_late_ns),
                        fmt_ns(e.waited_ns)
                    );
                }
            }
            if !stragglers.is_empty() {
                match &rate {
                    Ok(r) => println!("priced at ${}/GPU-hour ({})", r.dollars_per_gpu_hour, r.source),
                    Err(why) => println!("cost in GPU time only: {why}"),
                }
            }
            print_clocks(&clocks);
        }
        Answer::Waits => {
            let waits = fleet.waits()?;
            let clocks = fleet.clocks()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&serde_json::json!({"waits": waits, "clocks": clocks}))?);
                return Ok(0);
            }
            let mut t =
                Table::new(&["comm", "rank", "node", "pid", "collectives", "last in", "waited", "median", "max"]);
            for w in &waits {
                t.row(vec![
                    format!("{:#x}", w.comm_hash),
                    w.rank.to_string(),
                    w.node.clone(),
                    w.pid.to_string(),
                    w.collectives.to_string(),
                    w.times_last.to_string(),
                    fmt_ns(w.waited_ns),
                    fmt_ns(w.median_wait_ns),
                    fmt_ns(w.max_wait_ns),
                ]);
            }
            print!("{}", t.render());
            print_clocks(&clocks);
        }
        Answer::Costs => {
            let rates = causeway_analysis::Rates::load(common.gpu_rate).map_err(anyhow::Error::msg)?;
            let costs = fleet.costs(&rates)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&costs)?);
                return Ok(0);
            }
            print_costs(&costs);
        }
        Answer::Hangs => {
            let mut hangs = fleet.hangs()?;
            let rates = causeway_analysis::Rates::load(common.gpu_rate).map_err(anyhow::Error::msg)?;
            let rate = fleet.price_hangs(&mut hangs, &rates)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&hangs)?);
                return Ok(0);
            }
            if hangs.is_empty() {
                println!("no hang: no communicator has ranks waiting at a collective that others never entered");
            }
            for h in &hangs {
                println!("HANG {}", h.summary);
                let mut t = Table::new(&["rank", "node", "pid", ">last #", "state", ">in flight for"]);
                for (state, ranks) in [("waiting", &h.waiting), ("never entered", &h.missing)] {
                    for r in ranks {
                        t.row(vec![
                            r.rank.to_string(),
                            r.node.clone(),
                            r.pid.to_string(),
                            r.last_seq.to_string(),
                            match &r.in_flight {
                                Some(c) => format!("{state}: in {}", c.op),
                                None => format!("{state}: no call in flight"),
                            },
                            r.in_flight.as_ref().map(|c| fmt_ns(c.running_ns)).unwrap_or_default(),
                        ]);
                    }
                }
                print!("{}", t.render());
                println!("  cost so far: {}", h.cost.words());
                println!("  drill down: causeway fleet explain --lake LAKE --node NODE (each node's hang, its thread and code)");
            }
            if !hangs.is_empty() {
                match &rate {
                    Ok(r) => println!("priced at ${}/GPU-hour ({})", r.dollars_per_gpu_hour, r.source),
                    Err(why) => println!("cost in GPU time only: {why}"),
                }
            }
        }
        Answer::Ops => {
            let ops = fleet.op_distributions()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&ops)?);
                return Ok(0);
            }
            let mut t = Table::new(&["op", "node", ">calls", ">p50", ">p90", ">p99", ">fleet p50", ">fleet p99", ""]);
            for o in &ops {
                t.row(vec![
                    o.op.clone(),
                    o.node.clone(),
                    o.calls.to_string(),
                    fmt_ns(o.p50_ns),
                    fmt_ns(o.p90_ns),
                    fmt_ns(o.p99_ns),
                    fmt_ns(o.fleet_p50_ns),
                    fmt_ns(o.fleet_p99_ns),
                    if o.outlier { "OUTLIER".into() } else { String::new() },
                ]);
            }
            print!("{}", t.render());
        }
    }
    Ok(0)
}

fn run_explain(a: &ExplainArgs) -> anyhow::Result<i32> {
    let lake = LakeSpec::parse(&a.lake.lake)?;
    let store = causeway_fleet::node_store(&lake, &a.node, a.trace_uid.as_deref())?;
    let label = format!("lake node {}", a.node);
    crate::cmd_explain::report_on(&store, &label, &a.report)
}

fn run_maintain(m: &MaintainArgs) -> anyhow::Result<i32> {
    let lake = LakeSpec::parse(&m.common.lake.lake)?;
    let keep = causeway_model::time::parse_duration_ns(&m.keep).map_err(|e| anyhow::anyhow!("--keep: {e}"))?;
    let steps = causeway_fleet::maintain(&lake, std::time::Duration::from_nanos(keep.max(0) as u64))?;
    if m.common.json {
        println!("{}", serde_json::to_string_pretty(&steps)?);
    } else {
        for s in &steps {
            match &s.summarized {
                Some(d) => println!(
                    "{}: {:.2} s ({} collectives read from their rows, {} summaries kept)",
                    s.step, s.seconds, d.collectives, d.summaries
                ),
                None => println!("{}: {:.2} s", s.step, s.seconds),
            }
        }
    }
    Ok(0)
}

/// The answers that need the alignment views.
enum Answer {
    Nodes,
    Clock,
    Stragglers,
    Waits,
    Costs,
    Hangs,
    Ops,
}

fn run_query(q: &QueryArgs) -> anyhow::Result<i32> {
    let lake = &LakeSpec::parse(&q.common.lake.lake)?;
    let timeout_ns = causeway_model::time::parse_duration_ns(&q.timeout).map_err(anyhow::Error::msg)?;
    let limits = causeway_backends::QueryLimits {
        timeout_ms: (timeout_ns / 1_000_000).max(1) as u64,
        ..causeway_backends::QueryLimits::with_rows(q.limit)
    };
    let result = causeway_fleet::query(lake, &q.sql, &limits)?;
    if q.common.json {
        println!("{}", serde_json::to_string(&result)?);
        return Ok(0);
    }
    crate::cmd_query::print_table(&result);
    Ok(0)
}

/// One trace the lake lacks the end of: what is missing as far as the lake knows, and where the
/// command that ships it runs.
fn behind_line(node: &str, b: &TraceBehind) -> String {
    let mut missing = Vec::new();
    if b.events_missing > 0 {
        missing.push(format!("{} events", b.events_missing));
    }
    if b.nccl_calls_missing > 0 {
        missing.push(format!("{} NCCL calls", b.nccl_calls_missing));
    }
    let lacks =
        if missing.is_empty() { "its end".to_string() } else { format!("at least {} and its end", missing.join(", ")) };
    let last = b.last_shipped_ns.map_or("no flush yet".to_string(), |t| format!("last flush {}", fmt_utc(t)));
    format!(
        "{node}: behind: the lake lacks {lacks} of trace {} ({} flushes, {last}, events to id {}); a tracer still \
         running ships it, else on host {}: causeway ship --db {}",
        b.trace_uid, b.flushes, b.events_shipped, b.hostname, b.local_path
    )
}

fn print_costs(costs: &FleetCosts) {
    let money = |d: Option<f64>| d.map(causeway_analysis::dollars).unwrap_or_else(|| "-".into());
    println!(
        "what stalls cost (a straggler: every other rank's wait for it; a hang: the waiting ranks' calls in flight)"
    );
    for (what, rows) in [("node", &costs.per_node), ("job", &costs.per_job)] {
        println!("per {what}:");
        let mut t =
            Table::new(&[what, ">stragglers", ">their GPU time", ">hangs", ">their GPU time", ">GPU time", ">cost"]);
        for c in rows {
            t.row(vec![
                c.name.clone(),
                c.stragglers.to_string(),
                fmt_ns(c.straggler_gpu_ns),
                c.hangs.to_string(),
                fmt_ns(c.hang_gpu_ns),
                fmt_ns(c.gpu_ns),
                money(c.dollars),
            ]);
        }
        print!("{}", t.render());
    }
    if costs.hangs_on_several_nodes > 0 {
        println!(
            "{} hang(s) with ranks missing on several nodes: counted per job only (no one node to charge)",
            costs.hangs_on_several_nodes
        );
    }
    println!(
        "total: {} of GPU time{}",
        fmt_ns(costs.gpu_ns),
        costs.dollars.map(|d| format!(", {}", causeway_analysis::dollars(d))).unwrap_or_default()
    );
    match (&costs.rate, &costs.no_rate) {
        (Some(r), _) => println!("priced at ${}/GPU-hour ({})", r.dollars_per_gpu_hour, r.source),
        (_, Some(why)) => println!("cost in GPU time only: {why}"),
        _ => {}
    }
}

fn print_clocks(clocks: &[NodeClock]) {
    println!("clocks (catalog server minus node; applied in views, stored timestamps unchanged):");
    for c in clocks {
        let kernel = match (c.kernel_synced, c.kernel_esterror_us) {
            (Some(true), Some(e)) => format!("kernel synchronised, est. error {e} us"),
            (Some(false), _) => "kernel NOT synchronised".to_string(),
            _ => "kernel state unknown".to_string(),
        };
        let check = match c.residual_ns {
            Some(r) if c.disagrees => format!(
                "; DISAGREES with the collectives: after alignment its completions sit {} from the fleet's ({} collectives)",
                signed(r),
                c.residual_collectives
            ),
            Some(r) => format!("; collectives agree ({} residual over {})", signed(r), c.residual_collectives),
            None => String::new(),
        };
        if !c.measured {
            // a merged lake (no catalog server) or a node that has not flushed yet
            println!("  {}: not measured (no flush sampled a catalog server's clock): taken as +0{check}", c.node);
            continue;
        }
        println!(
            "  {}: {} ± {} ({} flushes, spread {}; {kernel}){check}",
            c.node,
            signed(c.offset_ns),
            fmt_ns(c.error_ns),
            c.flushes,
            fmt_ns(c.spread_ns)
        );
    }
}
