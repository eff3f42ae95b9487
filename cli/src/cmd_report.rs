//! `causeway report`: the incident report as one self-contained HTML file a person opens (the
//! verdict, the ranked chains with their timeline pictures, per-op percentiles, histograms).

use std::path::PathBuf;

use anyhow::Context;

use crate::window::ScopeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    /// The HTML file to write.
    #[arg(long, value_name = "FILE")]
    html: PathBuf,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Chains in the report.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Price GPU time at this many US dollars per GPU-hour, over the config file
    /// (`~/.config/causeway/gpu-rates.json`) and the built-in list prices by GPU model.
    #[arg(long, value_name = "DOLLARS_PER_GPU_HOUR")]
    gpu_rate: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let rates = causeway_analysis::Rates::load(args.gpu_rate).map_err(anyhow::Error::msg)?;
    let req = args.scope.explain_request(store.as_ref(), args.top.max(1))?;
    let report = causeway_render::html_report_priced(store.as_ref(), &req, &rates)?;
    std::fs::write(&args.html, &report.html).with_context(|| format!("cannot write {}", args.html.display()))?;
    eprintln!(
        "wrote {}: {}{} chains ({} pictured), {} histograms; open it in a browser (it fetches nothing)",
        args.html.display(),
        if report.device { "the GPU's idle gaps and their causes, " } else { "" },
        report.chains,
        report.pictures,
        report.histograms
    );
    Ok(0)
}
