//! `causeway explain`: the incident report: causal chains of GPU stalls ranked by the time they
//! explain, each with its evidence SQL; `--chain ID` prints one chain in full, SQL included.

use std::path::PathBuf;

use anyhow::Context;

use crate::report;
use causeway_analysis::{explain, find_chain};

use crate::window::ScopeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    #[command(flatten)]
    report: ReportArgs,
}

/// What to report on a trace: the flags `explain` and `fleet explain` share.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Chains to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Print one chain in full (id like c1, or its key; g1 for the device view's idle chains), with the
    /// SQL that reproduces its figure.
    #[arg(long, value_name = "ID")]
    chain: Option<String>,
    /// Also write the top chain's picture (or --chain's) as an SVG timeline to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Price GPU time at this many US dollars per GPU-hour, over the config file
    /// (`~/.config/causeway/gpu-rates.json`) and the built-in list prices by GPU model.
    #[arg(long, value_name = "DOLLARS_PER_GPU_HOUR")]
    gpu_rate: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    report_on(store.as_ref(), &args.db.display().to_string(), &args.report)
}

/// The report (or one chain) of `store`, named `label` in the SQL hints.
pub fn report_on(store: &dyn causeway_backends::TraceStore, label: &str, args: &ReportArgs) -> anyhow::Result<i32> {
    // A chain id is a rank among all chains: look it up in all of them.
    let top = if args.chain.is_some() { usize::MAX } else { args.top.max(1) };
    let mut e = explain(store, &args.scope.explain_request(store, top)?)?;
    causeway_analysis::price(&mut e, &causeway_analysis::Rates::load(args.gpu_rate).map_err(anyhow::Error::msg)?);
    // an idle chain of the device view (g1, g2, ...)
    if let Some(c) = args.chain.as_deref().and_then(|id| e.device.as_ref()?.chains.iter().find(|c| c.id == id)) {
        if args.json {
            println!("{}", serde_json::to_string_pretty(c)?);
        } else {
            print!("{}", report::render_idle_chain(c, label));
        }
        return Ok(0);
    }
    let chosen = match args.chain.as_deref() {
        Some(id) => Some(find_chain(&e, id).ok_or_else(|| {
            anyhow::anyhow!("no chain '{id}' in this scope ({} chains: c1..c{})", e.chains_total, e.chains_total)
        })?),
        None => e.chains.first(),
    };
    if let Some(path) = &args.svg {
        write_picture(store, chosen, path)?;
    }
    if let Some(c) = chosen.filter(|_| args.chain.is_some()) {
        if args.json {
            println!("{}", serde_json::to_string_pretty(c)?);
        } else {
            print!("{}", report::render_chain(c, e.first_ns, label));
        }
        return Ok(0);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
    } else {
        print!("{}", report::render(&e, label));
    }
    Ok(0)
}

/// Writes `chain`'s timeline picture to `path` (an error when there is no chain to draw).
fn write_picture(
    store: &dyn causeway_backends::TraceStore,
    chain: Option<&causeway_analysis::Chain>,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let chain = chain.ok_or_else(|| anyhow::anyhow!("--svg: no causal chain in this scope, nothing to draw"))?;
    let picture = causeway_render::chain_picture(store, chain)?
        .ok_or_else(|| anyhow::anyhow!("--svg: chain {} names no event this trace holds", chain.id))?;
    std::fs::write(path, &picture.svg).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!(
        "wrote {}: chain {} ({} calls, {} off-CPU intervals, {} culprit bars)",
        path.display(),
        picture.chain,
        picture.calls,
        picture.off_cpu,
        picture.culprits
    );
    Ok(())
}
