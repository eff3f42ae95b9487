//! `causeway footprint`: what the traced processes touched (`trace --footprint`), as tables: per
//! process its syscalls by kind, files, sockets and peers, children, libraries and CPU time on and
//! off, then the requests it served; `--sql` prints the SQL that recomputes each figure.

use std::path::PathBuf;

use causeway_analysis::{footprint, Footprint, FootprintRequest, ProcessFootprint, TouchedFile};
use causeway_model::time::fmt_utc;

use crate::table::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (recorded with `trace --footprint`).
    #[arg(long)]
    db: PathBuf,
    /// Only this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Rows per list (syscall kinds, files, sockets, libraries, children, requests).
    #[arg(long, default_value_t = 15)]
    top: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Also print the SQL that recomputes each figure (for the first process).
    #[arg(long)]
    sql: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let f = footprint(store.as_ref(), &FootprintRequest { pid: args.pid, top: args.top })?;
    if args.json {
        println!("{}", serde_json::to_string(&f)?);
        return Ok(0);
    }
    print!("{}", render(&args.db, &f, args.sql));
    Ok(0)
}

fn ms(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn more(shown: usize, all: usize, what: &str) -> String {
    if all > shown {
        format!("  ... {} more {what} (--top)\n", all - shown)
    } else {
        String::new()
    }
}

fn files_table(files: &[TouchedFile], socket: bool) -> Table {
    let mut t = Table::new(&[
        if socket { "PEER / ADDRESS" } else { "PATH" },
        "HOW",
        ">OPENS",
        ">BYTES READ",
        ">BYTES WRITTEN",
        ">READS",
        ">WRITES",
    ]);
    for f in files {
        t.row(vec![
            f.name.clone(),
            f.how.clone(),
            f.opens.to_string(),
            f.bytes_read.to_string(),
            f.bytes_written.to_string(),
            f.reads.to_string(),
            f.writes.to_string(),
        ]);
    }
    t
}

/// `pid 41 (python3, child of 40): python3 train.py`; the parentheses left out of a process the
/// trace has no name for and no parent of.
fn process_heading(p: &ProcessFootprint) -> String {
    let about: Vec<String> = [(!p.name.is_empty()).then(|| p.name.clone()), p.parent.map(|q| format!("child of {q}"))]
        .into_iter()
        .flatten()
        .collect();
    let about = if about.is_empty() { String::new() } else { format!(" ({})", about.join(", ")) };
    let program = if p.program.is_empty() { String::new() } else { format!(": {}", p.program) };
    format!("pid {}{about}{program}\n", p.pid)
}

fn process(p: &ProcessFootprint) -> String {
    let mut out = String::new();
    out.push_str(&process_heading(p));
    let o = &p.off_cpu;
    if p.on_cpu_ns == 0 && p.switches == 0 && o.intervals == 0 {
        out.push_str("  CPU: none recorded (the trace saw no time of it on or off a CPU)\n");
    } else {
        out.push_str(&format!(
            "  CPU: {} ms on ({} switches out); off: {} ms asleep, {} ms preempted, {} ms uninterruptible, {} ms other\n",
            ms(p.on_cpu_ns),
            p.switches,
            ms(o.sleeping_ns),
            ms(o.preempted_ns),
            ms(o.uninterruptible_ns),
            ms(o.other_ns)
        ));
    }
    out.push_str(&format!(
        "\n  syscalls: {} calls of {} kinds, {} ms in the kernel\n",
        p.syscall_calls,
        p.syscall_kinds,
        ms(p.syscall_ns)
    ));
    let mut t = Table::new(&["SYSCALL", ">CALLS", ">ERRORS", ">TOTAL ms", ">MAX us", ">BYTES"]);
    for s in &p.syscalls {
        t.row(vec![
            s.name.clone(),
            s.calls.to_string(),
            s.errors.to_string(),
            ms(s.total_ns),
            format!("{:.1}", s.max_ns as f64 / 1e3),
            s.bytes.to_string(),
        ]);
    }
    out.push_str(&indent(&t.render()));
    out.push_str(&more(p.syscalls.len(), p.syscall_kinds, "kinds"));
    if !p.files.is_empty() {
        out.push_str(&format!("\n  files ({}):\n", p.file_count));
        out.push_str(&indent(&files_table(&p.files, false).render()));
        out.push_str(&more(p.files.len(), p.file_count, "files"));
    }
    if !p.sockets.is_empty() {
        out.push_str(&format!("\n  sockets ({}):\n", p.socket_count));
        out.push_str(&indent(&files_table(&p.sockets, true).render()));
        out.push_str(&more(p.sockets.len(), p.socket_count, "sockets"));
    }
    if !p.children.is_empty() {
        out.push_str(&format!("\n  children ({}):\n", p.child_count));
        let mut t = Table::new(&[">PID", "STARTED", "RAN"]);
        for c in &p.children {
            t.row(vec![c.pid.to_string(), fmt_utc(c.started_ns), c.ran.join(" ; ")]);
        }
        out.push_str(&indent(&t.render()));
        out.push_str(&more(p.children.len(), p.child_count, "children"));
    }
    if !p.libraries.is_empty() {
        out.push_str(&format!("\n  libraries mapped ({}):\n", p.library_count));
        for l in &p.libraries {
            out.push_str(&format!("    {l}\n"));
        }
        out.push_str(&more(p.libraries.len(), p.library_count, "libraries"));
    }
    out
}

/// The first three, and how many more.
fn few(names: &[String]) -> String {
    let mut s = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 3 {
        s.push_str(&format!(" (+{})", names.len() - 3));
    }
    s
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

pub fn render(db: &std::path::Path, f: &Footprint, sql: bool) -> String {
    let mut out = format!("causeway footprint {}\n", db.display());
    if !f.recorded {
        out.push_str("no footprint in this trace: record one with `causeway trace --footprint`\n");
        return out;
    }
    for p in &f.processes {
        out.push('\n');
        out.push_str(&process(p));
    }
    if !f.requests.is_empty() {
        out.push_str(&format!(
            "\nrequests ({}; a read on stdin or an accepted socket to the next write back):\n",
            f.request_count
        ));
        let mut t =
            Table::new(&[">PID", ">#", "REQUEST", ">MS", ">IN", ">OUT", ">SYSCALLS", "TOP SYSCALLS", "OPENED", "RAN"]);
        for q in &f.requests {
            let dur = if q.end_ns > 0 { ms(q.end_ns - q.begin_ns) } else { "open".into() };
            t.row(vec![
                q.pid.to_string(),
                q.request.to_string(),
                q.what.clone(),
                dur,
                q.bytes_in.to_string(),
                q.bytes_out.to_string(),
                q.syscalls.to_string(),
                q.top_syscalls.join(", "),
                few(&q.opened),
                q.ran.join(", "),
            ]);
        }
        out.push_str(&t.render());
        out.push_str(&more(f.requests.len(), f.request_count, "requests"));
    }
    if sql {
        out.push_str("\nSQL of each figure:\n");
        for s in &f.sql {
            out.push_str(&format!("  {}: {}\n", s.figure, s.sql));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_a_name_or_cpu_time_says_so_instead_of_empty_figures() {
        let named = ProcessFootprint {
            pid: 41,
            name: "python3".into(),
            parent: Some(40),
            program: "python3 train.py".into(),
            ..Default::default()
        };
        assert_eq!(process_heading(&named), "pid 41 (python3, child of 40): python3 train.py\n");
        let unnamed = ProcessFootprint { pid: 42, parent: Some(40), ..Default::default() };
        assert_eq!(process_heading(&unnamed), "pid 42 (child of 40)\n");
        assert_eq!(process_heading(&ProcessFootprint { pid: 43, ..Default::default() }), "pid 43\n");
        let text = process(&unnamed);
        assert!(text.contains("CPU: none recorded"), "{text}");
        let ran = ProcessFootprint { pid: 44, on_cpu_ns: 2_000_000, switches: 3, ..Default::default() };
        assert!(process(&ran).contains("CPU: 2.000 ms on (3 switches out)"), "{}", process(&ran));
    }
}
