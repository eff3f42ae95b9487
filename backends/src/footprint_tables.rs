//! What the traced processes touched (`trace --footprint`, `causeway_model::footprint`): five
//! tables, `footprint_syscalls`, `footprint_cpu`, `footprint_fds`, `footprint_requests` and
//! `footprint_execs`, all appended. Their DDL is in [`crate::schema::NATIVE_DDL`]; this module
//! holds, once for every engine, each table's columns (integers, then texts), its INSERT with the
//! parameters of a row, its SELECT in the order [`crate::TraceStore::footprint`] promises, the
//! checked decoding of its rows, and the meaning of every table and column.

use std::path::Path;

use causeway_model::{FootprintCpu, FootprintExec, FootprintFd, FootprintPart, FootprintRequest, FootprintSyscall};

use crate::cuda_tables::{damaged, fits_i32, fits_u32};
use crate::schema::SqlParam;
use crate::Result;

/// One footprint table: its columns (the integers, then the texts) and its reading order.
pub(crate) struct Table {
    pub name: &'static str,
    pub ints: &'static [&'static str],
    pub texts: &'static [&'static str],
    order: &'static str,
}

/// The five tables, in [`FootprintPart`]'s order.
pub(crate) const TABLES: [Table; 5] = [
    Table {
        name: "footprint_syscalls",
        ints: &["seen_at", "pid", "request", "nr", "calls", "errors", "total_ns", "max_ns", "bytes"],
        texts: &["name"],
        order: "seen_at, pid, request, nr",
    },
    Table {
        name: "footprint_cpu",
        ints: &["seen_at", "pid", "request", "on_cpu_ns", "switches"],
        texts: &[],
        order: "seen_at, pid, request",
    },
    Table {
        name: "footprint_fds",
        ints: &[
            "pid",
            "tid",
            "fd",
            "opened_ns",
            "closed_ns",
            "flags",
            "request",
            "bytes_read",
            "bytes_written",
            "reads",
            "writes",
            "exec_mapped",
        ],
        texts: &["kind", "how", "name"],
        order: "pid, opened_ns, fd, name, closed_ns",
    },
    Table {
        name: "footprint_requests",
        ints: &["pid", "request", "fd", "begin_ns", "end_ns", "bytes_in", "bytes_out"],
        texts: &["head_in", "head_out"],
        order: "pid, request",
    },
    Table {
        name: "footprint_execs",
        ints: &["ts_ns", "pid", "ppid", "request"],
        texts: &["filename", "argv"],
        order: "ts_ns, pid, filename",
    },
];

impl Table {
    /// Appends one row.
    pub(crate) fn insert_sql(&self) -> String {
        let cols: Vec<&str> = self.ints.iter().chain(self.texts).copied().collect();
        format!("INSERT INTO {} ({}) VALUES ({})", self.name, cols.join(", "), vec!["?"; cols.len()].join(", "))
    }

    /// Every row, integers first, in the table's order.
    pub(crate) fn select_sql(&self) -> String {
        let cols: Vec<&str> = self.ints.iter().chain(self.texts).copied().collect();
        format!("SELECT {} FROM {} ORDER BY {}", cols.join(", "), self.name, self.order)
    }

    /// Columns in a row.
    pub(crate) fn width(&self) -> usize {
        self.ints.len() + self.texts.len()
    }
}

/// A row as read: its integers and its texts.
pub(crate) type RawRow = (Vec<i64>, Vec<String>);

/// Each table with the parameters of each of its rows (in [`Table::insert_sql`]'s order, which is
/// the table's own column order: DuckDB may append them as they are).
pub(crate) fn part_rows(part: &FootprintPart) -> Vec<(&'static Table, Vec<Vec<SqlParam<'_>>>)> {
    let i = SqlParam::Int;
    let u = |v: u32| SqlParam::Int(i64::from(v));
    vec![
        (
            &TABLES[0],
            part.syscalls
                .iter()
                .map(|s| {
                    vec![
                        i(s.seen_at_ns),
                        u(s.pid),
                        u(s.request),
                        u(s.nr),
                        i(s.calls),
                        i(s.errors),
                        i(s.total_ns),
                        i(s.max_ns),
                        i(s.bytes),
                        SqlParam::Text(&s.name),
                    ]
                })
                .collect(),
        ),
        (
            &TABLES[1],
            part.cpu
                .iter()
                .map(|c| vec![i(c.seen_at_ns), u(c.pid), u(c.request), i(c.on_cpu_ns), i(c.switches)])
                .collect(),
        ),
        (
            &TABLES[2],
            part.fds
                .iter()
                .map(|f| {
                    vec![
                        u(f.pid),
                        u(f.tid),
                        i(i64::from(f.fd)),
                        i(f.opened_ns),
                        i(f.closed_ns),
                        i(f.flags),
                        u(f.request),
                        i(f.bytes_read),
                        i(f.bytes_written),
                        i(f.reads),
                        i(f.writes),
                        i(i64::from(f.exec_mapped)),
                        SqlParam::Text(&f.kind),
                        SqlParam::Text(&f.how),
                        SqlParam::Text(&f.name),
                    ]
                })
                .collect(),
        ),
        (
            &TABLES[3],
            part.requests
                .iter()
                .map(|q| {
                    vec![
                        u(q.pid),
                        u(q.request),
                        i(i64::from(q.fd)),
                        i(q.begin_ns),
                        i(q.end_ns),
                        i(q.bytes_in),
                        i(q.bytes_out),
                        SqlParam::Text(&q.head_in),
                        SqlParam::Text(&q.head_out),
                    ]
                })
                .collect(),
        ),
        (
            &TABLES[4],
            part.execs
                .iter()
                .map(|e| {
                    vec![
                        i(e.ts_ns),
                        u(e.pid),
                        u(e.ppid),
                        u(e.request),
                        SqlParam::Text(&e.filename),
                        SqlParam::Text(&e.argv),
                    ]
                })
                .collect(),
        ),
    ]
}

/// The part the rows of the five tables (each as [`Table::select_sql`] reads them) make.
pub(crate) fn part_from(db: &Path, tables: [Vec<RawRow>; 5]) -> Result<FootprintPart> {
    let [syscalls, cpu, fds, requests, execs] = tables;
    let u = |t: &str, c: &str, v: i64| fits_u32(db, t, c, v);
    let check = |t: &Table, r: &RawRow| {
        if r.0.len() == t.ints.len() && r.1.len() == t.texts.len() {
            Ok(())
        } else {
            Err(damaged(db, format!("{}: a row of the wrong width", t.name)))
        }
    };
    let mut part = FootprintPart::default();
    for (n, mut t) in syscalls {
        check(&TABLES[0], &(n.clone(), t.clone()))?;
        let tb = "footprint_syscalls";
        part.syscalls.push(FootprintSyscall {
            seen_at_ns: n[0],
            pid: u(tb, "pid", n[1])?,
            request: u(tb, "request", n[2])?,
            nr: u(tb, "nr", n[3])?,
            calls: n[4],
            errors: n[5],
            total_ns: n[6],
            max_ns: n[7],
            bytes: n[8],
            name: t.remove(0),
        });
    }
    for (n, t) in cpu {
        check(&TABLES[1], &(n.clone(), t))?;
        let tb = "footprint_cpu";
        part.cpu.push(FootprintCpu {
            seen_at_ns: n[0],
            pid: u(tb, "pid", n[1])?,
            request: u(tb, "request", n[2])?,
            on_cpu_ns: n[3],
            switches: n[4],
        });
    }
    for (n, t) in fds {
        check(&TABLES[2], &(n.clone(), t.clone()))?;
        let tb = "footprint_fds";
        let [kind, how, name]: [String; 3] = t.try_into().map_err(|_| damaged(db, "footprint_fds texts".into()))?;
        part.fds.push(FootprintFd {
            pid: u(tb, "pid", n[0])?,
            tid: u(tb, "tid", n[1])?,
            fd: fits_i32(db, tb, "fd", n[2])?,
            opened_ns: n[3],
            closed_ns: n[4],
            flags: n[5],
            request: u(tb, "request", n[6])?,
            bytes_read: n[7],
            bytes_written: n[8],
            reads: n[9],
            writes: n[10],
            exec_mapped: n[11] != 0,
            kind,
            how,
            name,
        });
    }
    for (n, t) in requests {
        check(&TABLES[3], &(n.clone(), t.clone()))?;
        let tb = "footprint_requests";
        let [head_in, head_out]: [String; 2] =
            t.try_into().map_err(|_| damaged(db, "footprint_requests texts".into()))?;
        part.requests.push(FootprintRequest {
            pid: u(tb, "pid", n[0])?,
            request: u(tb, "request", n[1])?,
            fd: fits_i32(db, tb, "fd", n[2])?,
            begin_ns: n[3],
            end_ns: n[4],
            bytes_in: n[5],
            bytes_out: n[6],
            head_in,
            head_out,
        });
    }
    for (n, t) in execs {
        check(&TABLES[4], &(n.clone(), t.clone()))?;
        let tb = "footprint_execs";
        let [filename, argv]: [String; 2] = t.try_into().map_err(|_| damaged(db, "footprint_execs texts".into()))?;
        part.execs.push(FootprintExec {
            ts_ns: n[0],
            pid: u(tb, "pid", n[1])?,
            ppid: u(tb, "ppid", n[2])?,
            request: u(tb, "request", n[3])?,
            filename,
            argv,
        });
    }
    Ok(part)
}

/// What a footprint table is for ([`crate::schema::table_meaning`]).
pub(crate) fn table_meaning(table: &str) -> Option<&'static str> {
    Some(match table {
        "footprint_syscalls" => "trace --footprint: every syscall of the traced processes, counted in the kernel per (pid, request, syscall) and written at each look (every second) as what the key gained since the last one: sum calls, errors, total_ns and bytes over the rows; max_ns is the longest call up to that look (take MAX). Calls per kind: SELECT name, sum(calls), sum(total_ns) FROM footprint_syscalls WHERE pid = P GROUP BY name",
        "footprint_cpu" => "trace --footprint: the traced processes' time on a CPU per (pid, request), from the context switches, written at each look as what it gained (sum the rows); their time off the CPU is in events (sched_switch rows, by prev_state)",
        "footprint_fds" => "trace --footprint: every file, socket or other descriptor a traced process opened (or duplicated: dup; held when trace --pid attached: before_attach; used without an open the trace saw: inherited), with the bytes read and written through it, one row each, written at its close or at the end; kind 'library' = a file mapped executable (how 'maps': seen in /proc/PID/maps)",
        "footprint_requests" => "trace --footprint: the requests a traced server answered: a read returning bytes on stdin (fd 0) or on an accepted socket while it served none began one; its next write to stdout or that socket answered it; footprint_syscalls, footprint_cpu, footprint_fds and footprint_execs rows carry the request they were made in",
        "footprint_execs" => "trace --footprint: every program a traced process (or a child it started: children are traced) ran, with its arguments",
        _ => return None,
    })
}

/// What a footprint column means ([`crate::schema::column_meaning`]).
pub(crate) fn column_meaning(table: &str, column: &str) -> Option<&'static str> {
    if !table.starts_with("footprint_") {
        return None;
    }
    Some(match (table, column) {
        (_, "seen_at") => "unix ns of the look that read the kernel's counters",
        (_, "pid") => "the traced process",
        (_, "request") => "the request (footprint_requests.request) it was made in; 0 = outside any request",
        ("footprint_syscalls", "nr") => "the syscall's number (x86_64)",
        ("footprint_syscalls", "name") => "the syscall's name",
        ("footprint_syscalls", "calls") => "calls that returned since the previous look",
        ("footprint_syscalls", "errors") => "of which returned an error",
        ("footprint_syscalls", "total_ns") => "their time from entry to return, ns, summed",
        ("footprint_syscalls", "max_ns") => "the longest single call up to this look, ns (take MAX over rows)",
        ("footprint_syscalls", "bytes") => "bytes the reads and writes among them moved (their positive returns)",
        ("footprint_cpu", "on_cpu_ns") => "time its threads ran on a CPU since the previous look, ns",
        ("footprint_cpu", "switches") => "times its threads left a CPU since the previous look",
        ("footprint_fds", "tid") => "the thread that opened it (0: not seen)",
        ("footprint_fds", "fd") => "the descriptor number (-1 for a library row read from /proc/PID/maps)",
        ("footprint_fds", "kind") => "file, socket, pipe, library (mapped executable) or other",
        ("footprint_fds", "how") => "open, connect, accept, bind, dup (a copy made by dup, dup2, dup3 or fcntl F_DUPFD: named as its original), before_attach (open when trace --pid attached: named from /proc, opened_ns 0, bytes from the attach on), inherited (no open seen), maps (/proc/PID/maps)",
        ("footprint_fds", "name") => "the path as opened; a socket's peer (connect, accept) or local address (bind), e.g. 127.0.0.1:5432; what /proc named an inherited one (pipe:[123]) or stdin/stdout/stderr; one held at an attach as /proc names it, a TCP or UDP socket by its peer (listening: its local address)",
        ("footprint_fds", "opened_ns") => "unix ns of its open (0: before the trace)",
        ("footprint_fds", "closed_ns") => "unix ns of its close (0: still open at the end, or closed unseen with its process)",
        ("footprint_fds", "flags") => "the open's O_* flags, or a socket's address family (2 IPv4, 10 IPv6, 1 Unix)",
        ("footprint_fds", "bytes_read") => "bytes read through it (read, readv, pread64, preadv, recvfrom, recvmsg)",
        ("footprint_fds", "bytes_written") => "bytes written through it (write, writev, pwrite64, pwritev, sendto, sendmsg, sendfile)",
        ("footprint_fds", "reads") => "read calls that moved bytes",
        ("footprint_fds", "writes") => "write calls that moved bytes",
        ("footprint_fds", "exec_mapped") => "1: mapped executable (mmap with PROT_EXEC): a library or the program",
        ("footprint_requests", "fd") => "where it came: 0 stdin, else the accepted socket",
        ("footprint_requests", "begin_ns") => "unix ns the read that began it returned",
        ("footprint_requests", "end_ns") => "unix ns the write that answered it returned (0: unanswered while traced)",
        ("footprint_requests", "bytes_in") => "bytes of the read that began it",
        ("footprint_requests", "bytes_out") => "bytes of the write that answered it",
        ("footprint_requests", "head_in") => "its first bytes (up to 255; \\n and other controls escaped): a JSON-RPC request's method, an HTTP request's headers and its body's start",
        ("footprint_requests", "head_out") => "the answer's first bytes (up to 128)",
        ("footprint_execs", "ts_ns") => "unix ns of the exec",
        ("footprint_execs", "ppid") => "its parent",
        ("footprint_execs", "filename") => "the program's path as exec'd",
        ("footprint_execs", "argv") => "its arguments, space-separated (up to 256 bytes)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_is_described_and_the_rows_fit_their_tables() {
        for t in &TABLES {
            assert!(table_meaning(t.name).is_some(), "{}", t.name);
            for c in t.ints.iter().chain(t.texts) {
                assert!(column_meaning(t.name, c).is_some(), "{}.{c}", t.name);
            }
        }
        let part = FootprintPart {
            syscalls: vec![FootprintSyscall::default()],
            cpu: vec![FootprintCpu::default()],
            fds: vec![FootprintFd::default()],
            requests: vec![FootprintRequest::default()],
            execs: vec![FootprintExec::default()],
        };
        for (t, rows) in part_rows(&part) {
            assert_eq!(rows.len(), 1);
            assert_eq!(rows[0].len(), t.width(), "{}", t.name);
        }
    }
}
