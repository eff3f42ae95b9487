//! `causeway annotate`: label a step, epoch or task of a traced workload from a shell or a script,
//! through the label socket `causeway trace` opens (`causeway_probes::LabelMessage` is the
//! protocol; the Python helper `python/causeway.py` speaks it from inside the workload).
//!
//! Three forms: `annotate step 812 begin` ... `annotate step 812 end` (two halves, stamped when
//! they arrive, or at `--at-ns`); `annotate step 812 --begin-ns A --end-ns B` (an interval that
//! happened, CLOCK_MONOTONIC ns); `annotate task 3 -- CMD ARGS` (runs CMD and labels its run, as
//! CMD's process; exits with CMD's status).

use std::path::PathBuf;

use causeway_probes::{default_socket_path, monotonic_ns, send_labels, LabelMessage};

#[derive(clap::Args)]
pub struct Args {
    /// step, epoch or task.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(causeway_model::codes::label_kinds()))]
    kind: String,
    /// The step, epoch or task number.
    #[arg(allow_hyphen_values = true)]
    index: i64,
    /// begin or end: one half of a label sent in two (omit with --begin-ns/--end-ns or a command).
    #[arg(value_parser = ["begin", "end"])]
    at: Option<String>,
    /// With begin/end: the instant, CLOCK_MONOTONIC ns (default: when the trace receives it).
    #[arg(long, value_name = "NS", requires = "at")]
    at_ns: Option<i64>,
    /// The start of an interval that already happened, CLOCK_MONOTONIC ns.
    #[arg(long, value_name = "NS", requires = "end_ns", conflicts_with = "at")]
    begin_ns: Option<i64>,
    /// The end of that interval, CLOCK_MONOTONIC ns.
    #[arg(long, value_name = "NS", requires = "begin_ns")]
    end_ns: Option<i64>,
    /// The process the label belongs to (default: the one that ran `causeway annotate`, e.g. the
    /// workload's script; with a command, the command's).
    #[arg(long)]
    pid: Option<u32>,
    /// Its thread (default: the process's main thread).
    #[arg(long)]
    tid: Option<u32>,
    /// The trace's label socket (default: $CAUSEWAY_LABELS, else the trace's default path).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// A command to run and label, after `--`.
    #[arg(last = true, conflicts_with_all = ["at", "begin_ns"])]
    command: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let socket = args.socket.clone().unwrap_or_else(default_socket_path);
    let parent = std::os::unix::process::parent_id();
    let base = LabelMessage {
        kind: args.kind.clone(),
        index: args.index,
        pid: Some(args.pid.unwrap_or(parent)),
        tid: args.tid,
        reply: true,
        ..Default::default()
    };
    if !args.command.is_empty() {
        return run_labeled(&args, base, &socket);
    }
    let message = match (&args.at, args.begin_ns, args.end_ns) {
        (Some(at), _, _) => LabelMessage { at: Some(at.clone()), ts_ns: args.at_ns, ..base },
        (None, Some(b), Some(e)) => LabelMessage { begin_ns: Some(b), end_ns: Some(e), ..base },
        _ => anyhow::bail!("say `begin` or `end`, give --begin-ns and --end-ns, or a command after `--`"),
    };
    send_labels(&socket, &[message])?;
    Ok(0)
}

/// Run the command and label its run as its own process's; its exit status is ours.
fn run_labeled(args: &Args, base: LabelMessage, socket: &std::path::Path) -> anyhow::Result<i32> {
    let begin = monotonic_ns();
    let mut child = std::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run `{}`: {e}", args.command.join(" ")))?;
    let pid = args.pid.unwrap_or(child.id());
    let status = child.wait()?;
    let message = LabelMessage { begin_ns: Some(begin), end_ns: Some(monotonic_ns()), pid: Some(pid), ..base };
    if let Err(e) = send_labels(socket, &[message]) {
        eprintln!("causeway: warning: the run was not labeled: {e:#}");
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
