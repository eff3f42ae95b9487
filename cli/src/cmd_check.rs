//! `causeway check`: what this host can trace and what is missing, each with its fix. Loads the
//! probes for real (then detaches). Exit 0 when tracing works, 1 when a required item is missing.

use causeway_probes::{mount_tracefs, tracefs_mounted};

use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Mount tracefs at /sys/kernel/tracing first if it is not mounted (Causeway does not need it;
    /// bpftrace does).
    #[arg(long)]
    pub mount_tracefs: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.mount_tracefs && tracefs_mounted().is_none() {
        if let Err(e) = mount_tracefs() {
            eprintln!("causeway: could not mount tracefs: {e}");
        }
    }
    let r = causeway_probes::host_check();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("kernel {}: {}", r.kernel, if r.can_trace { "can trace" } else { "CANNOT trace" });
        let mut t = Table::new(&["check", "ok", "detail", "fix"]);
        for i in &r.items {
            let ok = if i.ok {
                "yes"
            } else if i.required {
                "NO"
            } else {
                "no"
            };
            t.row(vec![i.name.clone(), ok.into(), i.detail.clone(), i.fix.clone().unwrap_or_default()]);
        }
        println!("{}", t.render());
        for (l, c) in r.cuda_libraries.iter().zip(&r.coverage) {
            println!("CUDA library: {} ({:?}, {})", l.path.display(), l.kind, l.how);
            match &c.error {
                Some(e) => println!("  not readable: {e}"),
                None => println!(
                    "  probes {} symbols; launch paths: {}; not exported: {}",
                    c.probed.len(),
                    if c.launch_symbols.is_empty() { "none".to_string() } else { c.launch_symbols.join(", ") },
                    if c.missing.is_empty() { "none".to_string() } else { c.missing.join(", ") }
                ),
            }
        }
    }
    Ok(if r.can_trace { 0 } else { 1 })
}
