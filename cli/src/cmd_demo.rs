//! `causeway demo`: explain one of the investigations bundled in `investigations/` (traces Causeway
//! recorded on planted faults), with no root, no GPU and no server, and say how to open it from an
//! MCP client.

use std::path::{Path, PathBuf};

use crate::report;
use anyhow::Context;
use causeway_analysis::{explain, ExplainRequest};

#[derive(clap::Args)]
pub struct Args {
    /// Which investigation (a folder of investigations/); `--list` shows them.
    #[arg(default_value = "cpu-contention")]
    name: String,
    /// List the bundled investigations.
    #[arg(long)]
    list: bool,
    /// Where the investigations are (default: ./investigations, else the source tree's).
    #[arg(long, env = "CAUSEWAY_INVESTIGATIONS")]
    dir: Option<PathBuf>,
}

fn investigations_dir(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let candidates = explicit
        .into_iter()
        .chain([PathBuf::from("investigations"), Path::new(env!("CARGO_MANIFEST_DIR")).join("../investigations")]);
    for c in candidates {
        if c.is_dir() {
            return Ok(c);
        }
    }
    anyhow::bail!("no investigations folder found: run from the repository root or pass --dir")
}

fn list(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("trace.db").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// The "What was planted" paragraph of an investigation's README.
fn planted(readme: &str) -> Option<String> {
    let rest = readme.split("## What was planted").nth(1)?;
    Some(rest.split("\n## ").next()?.trim().to_string())
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let dir = investigations_dir(args.dir)?;
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let names = list(&dir)?;
    if args.list {
        for n in &names {
            println!("{n}");
        }
        return Ok(0);
    }
    if !names.contains(&args.name) {
        anyhow::bail!("no investigation '{}' in {} (there are: {})", args.name, dir.display(), names.join(", "));
    }
    let db = dir.join(&args.name).join("trace.db");
    let readme = std::fs::read_to_string(dir.join(&args.name).join("README.md")).unwrap_or_default();
    let store = causeway_backends::open_store(&db).with_context(|| format!("opening {}", db.display()))?;
    let e = explain(store.as_ref(), &ExplainRequest::new(Default::default(), None, 5))?;
    println!("Causeway demo: the bundled investigation '{}' ({})", args.name, db.display());
    if let Some(p) = planted(&readme) {
        println!("\nWhat was planted: {p}\n");
    }
    print!("{}", report::render(&e, &db.display().to_string()));
    let abs = &db;
    println!("\nNext:");
    println!(
        "  causeway explain --db {} --chain c1      # one chain in full, with the SQL that proves it",
        db.display()
    );
    println!("  causeway demo --list                      # the other investigations: {}", names.join(", "));
    println!("  Open it from an MCP client (Claude Code, Cursor, ollmcp): the server is");
    println!("    causeway mcp --db {}", abs.display());
    println!("  e.g. `claude mcp add causeway -- causeway mcp --db {}`, or see mcp.json.example.", abs.display());
    Ok(0)
}
