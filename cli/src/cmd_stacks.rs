//! `causeway stacks`: the call stacks behind GPU calls, ranked by count and by time, with native
//! frames demangled and Python frames as `file:line in function`; under a stack of a thread
//! without Python frames of its own, the Python stacks its calls borrowed from the threads they
//! ran for.

use std::path::PathBuf;

use anyhow::Context;
use causeway_analysis::{top_stacks, StackSummary, StacksRequest};
use causeway_model::codes;
use causeway_model::time::fmt_ns;

use crate::window::WindowArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    /// Only calls of this op (e.g. cudaLaunchKernel).
    #[arg(long, value_name = "NAME")]
    op: Option<String>,
    /// Only launches of kernels whose name contains this text, case-insensitively (e.g. gemm).
    #[arg(long, value_name = "TEXT")]
    kernel: Option<String>,
    /// Only this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Stacks per ranking.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Frames printed per stack (JSON has them all).
    #[arg(long, default_value_t = 12)]
    frames: usize,
    #[command(flatten)]
    window: WindowArgs,
}

fn print_stack(rank: usize, s: &StackSummary, frames: usize) {
    let ops: Vec<String> = s.ops.iter().map(|(o, n)| format!("{o} x{n}")).collect();
    println!(
        "#{rank} stack {:#018x}: {} calls, {} total, max {} [{}] pids {:?}",
        s.stack_hash,
        s.calls,
        fmt_ns(s.total_ns),
        fmt_ns(s.max_ns),
        ops.join(", "),
        s.pids
    );
    if !s.resolved {
        println!("    (no stack_traces row for this hash)");
    }
    for f in s.frames.iter().take(frames) {
        match &f.lib {
            Some(lib) => println!("    {}  [{lib}]", f.text),
            None => println!("    {}", f.text),
        }
    }
    if s.frames.len() > frames {
        println!("    … {} more frames", s.frames.len() - frames);
    }
    for b in &s.borrowed {
        println!("  {} of these calls: {}", b.calls, b.stack.words);
        for f in b.stack.frames.iter().take(frames) {
            println!("    {}", f.text);
        }
        if b.stack.frames.len() > frames {
            println!("    … {} more frames", b.stack.frames.len() - frames);
        }
    }
    if s.borrow_ambiguous > 0 {
        println!(
            "  {} of these calls: made by a thread without Python frames, for one of two or more Python threads (ambiguous: nothing borrowed)",
            s.borrow_ambiguous
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let window = args.window.resolve(store.as_ref(), args.pid)?;
    let op = args
        .op
        .as_deref()
        .map(|n| codes::op_by_name(n).with_context(|| format!("unknown op '{n}' (e.g. cudaLaunchKernel)")))
        .transpose()?;
    let r = top_stacks(
        store.as_ref(),
        &StacksRequest { window, pid: args.pid, op, kernel: args.kernel.clone(), top: args.top },
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    if let Some(k) = causeway_analysis::kernel_filter_words(&r) {
        println!("{k}");
    }
    let mut lent = Vec::new();
    if r.calls_borrowed > 0 {
        lent.push(format!("{} borrowed the Python stack of the thread they ran for", r.calls_borrowed));
    }
    if r.calls_ambiguous > 0 {
        lent.push(format!(
            "{} could have run for two or more Python threads (ambiguous: nothing borrowed)",
            r.calls_ambiguous
        ));
    }
    let borrowed = if lent.is_empty() {
        String::new()
    } else {
        format!("; of the calls of threads without Python frames, {}", lent.join(", "))
    };
    println!(
        "{} calls{}, {} with a stack, {} distinct stacks{borrowed}",
        r.calls,
        r.op.as_ref().map(|o| format!(" of {o}")).unwrap_or_default(),
        r.calls_with_stack,
        r.distinct_stacks
    );
    println!("\nby count:");
    for (i, s) in r.by_count.iter().enumerate() {
        print_stack(i + 1, s, args.frames);
    }
    println!("\nby time:");
    for (i, s) in r.by_time.iter().enumerate() {
        print_stack(i + 1, s, args.frames);
    }
    Ok(0)
}
