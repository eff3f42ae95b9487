//! What each traced process touched (`trace --footprint`): its syscalls by kind, the files and
//! sockets it opened with their bytes, the libraries it mapped, the children it started and what
//! they ran, its time on and off the CPU, and the requests it served, each figure recomputed from
//! stored rows by the SQL of [`causeway_model::footprint::FIGURE_SQL`] (`footprint_*` tables, and
//! `events` for the forks and the off-CPU intervals). `causeway footprint` and the MCP
//! `get_footprint` shape it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{op, PrevState};
use causeway_model::footprint::{figure_sql, FIGURE_SQL};
use causeway_model::FootprintPart;
use causeway_store::{EventFilter, Result, TraceStore};

/// What to answer.
#[derive(Debug, Clone)]
pub struct FootprintRequest {
    /// One process (default: every process with a footprint).
    pub pid: Option<u32>,
    /// Rows per list (syscall kinds, files, sockets, libraries, children, requests).
    pub top: usize,
}

impl Default for FootprintRequest {
    fn default() -> Self {
        FootprintRequest { pid: None, top: 10 }
    }
}

/// Syscalls of one kind.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct SyscallKind {
    pub name: String,
    pub calls: i64,
    pub errors: i64,
    /// Time from entry to return, summed, ns.
    pub total_ns: i64,
    /// The longest call, ns.
    pub max_ns: i64,
    /// Bytes read or written (reads and writes only).
    pub bytes: i64,
}

/// A file, socket or other descriptor target, its opens summed.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TouchedFile {
    /// The path; a socket's peer or bound address.
    pub name: String,
    /// file, socket, pipe, other.
    pub kind: String,
    /// open, connect, accept, bind, dup, before_attach, inherited (`FootprintFd::how`).
    pub how: String,
    /// Times opened (connected, accepted; a duplicate or a descriptor held at an attach counts once).
    pub opens: i64,
    pub bytes_read: i64,
    pub bytes_written: i64,
    pub reads: i64,
    pub writes: i64,
}

/// A child process it started.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Child {
    pub pid: u32,
    /// When it was forked (unix ns).
    pub started_ns: i64,
    /// The programs it ran (exec), in order; empty: it ran its parent's code.
    pub ran: Vec<String>,
}

/// Time off the CPU by why the thread left it (events' sched_switch rows).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct OffCpu {
    /// Preempted while runnable.
    pub preempted_ns: i64,
    /// Asleep (waiting on I/O, a lock, a timer, a read).
    pub sleeping_ns: i64,
    /// Uninterruptible (D state: disk, page faults).
    pub uninterruptible_ns: i64,
    /// Other states.
    pub other_ns: i64,
    pub intervals: i64,
}

/// One traced process's footprint.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ProcessFootprint {
    pub pid: u32,
    pub name: String,
    /// The process that forked it, when traced.
    pub parent: Option<u32>,
    /// What it exec'd (its program and arguments), when seen.
    pub program: String,
    /// Every syscall, all kinds.
    pub syscall_calls: i64,
    pub syscall_ns: i64,
    /// Kinds, most calls first (at most `top`).
    pub syscalls: Vec<SyscallKind>,
    pub syscall_kinds: usize,
    /// Files, pipes and other descriptors, most bytes first (at most `top`).
    pub files: Vec<TouchedFile>,
    pub file_count: usize,
    /// Sockets with their peers, most bytes first (at most `top`).
    pub sockets: Vec<TouchedFile>,
    pub socket_count: usize,
    /// Files mapped executable (at most `top`, by name).
    pub libraries: Vec<String>,
    pub library_count: usize,
    /// Children it started (at most `top`, by start).
    pub children: Vec<Child>,
    pub child_count: usize,
    /// Time its threads ran on a CPU, ns (context switches; 0 without --footprint).
    pub on_cpu_ns: i64,
    pub switches: i64,
    pub off_cpu: OffCpu,
}

/// One request a traced server answered.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct RequestFootprint {
    pub pid: u32,
    pub request: u32,
    pub begin_ns: i64,
    /// 0: unanswered while traced.
    pub end_ns: i64,
    pub bytes_in: i64,
    pub bytes_out: i64,
    /// The JSON-RPC method read from its first bytes (`tools/call query`), else its first bytes.
    pub what: String,
    /// Syscalls made in it (the server's and its children's).
    pub syscalls: i64,
    /// Its kinds with the most calls: `openat x3`.
    pub top_syscalls: Vec<String>,
    /// Files and sockets opened in it.
    pub opened: Vec<String>,
    /// Programs run in it.
    pub ran: Vec<String>,
    /// CPU time in it, ns.
    pub on_cpu_ns: i64,
}

/// The SQL that recomputes a figure.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct FigureSql {
    pub figure: String,
    pub sql: String,
}

/// What the traced processes touched.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Footprint {
    /// Whether the trace has a footprint (traced with --footprint).
    pub recorded: bool,
    pub processes: Vec<ProcessFootprint>,
    /// Requests, in order (at most `top` per process: the longest).
    pub requests: Vec<RequestFootprint>,
    pub request_count: usize,
    /// The SQL of each figure, for the first process (`{pid}` replaced).
    pub sql: Vec<FigureSql>,
}

/// The JSON-RPC method (and tool name) of a request's first bytes, else the bytes themselves.
pub fn request_words(head: &str) -> String {
    let field = |key: &str, from: usize| -> Option<(usize, String)> {
        let pat = format!("\"{key}\"");
        let at = head[from..].find(&pat)? + from + pat.len();
        let rest = head[at..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
        let end = rest.find('"')?;
        Some((at, rest[..end].to_string()))
    };
    match field("method", 0) {
        Some((at, m)) => match (m.as_str(), field("name", at)) {
            ("tools/call" | "prompts/get", Some((_, n))) => format!("{m} {n}"),
            _ => m,
        },
        None => head.chars().take(60).collect(),
    }
}

/// The name (`comm`) the kernel gives a process that exec'd `filename`: the file's base name, cut
/// to 15 bytes (at a character boundary).
fn comm_of_program(filename: &str) -> String {
    let base = filename.rsplit('/').next().unwrap_or(filename);
    let mut end = base.len().min(15);
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    base[..end].to_string()
}

/// The footprint of the trace's processes (or one of them).
pub fn footprint(store: &dyn TraceStore, req: &FootprintRequest) -> Result<Footprint> {
    let part: FootprintPart = store.footprint()?;
    let names = store.process_names()?;
    let mut pids: BTreeSet<u32> = part
        .syscalls
        .iter()
        .map(|s| s.pid)
        .chain(part.fds.iter().map(|f| f.pid))
        .chain(part.cpu.iter().map(|c| c.pid))
        .chain(part.execs.iter().map(|e| e.pid))
        .collect();
    let recorded = !pids.is_empty();
    if let Some(p) = req.pid {
        pids.retain(|&x| x == p);
    }
    // forks (parent -> children) and off-CPU intervals, from events
    let mut parent: HashMap<u32, u32> = HashMap::new();
    let mut children: BTreeMap<u32, Vec<(i64, u32)>> = BTreeMap::new();
    let forks = EventFilter { ops: Some(vec![op::PROCESS_FORK]), ..Default::default() };
    store.scan_events(&forks, &mut |e| {
        let child = e.event.arg1 as u32;
        if child != e.event.pid {
            parent.insert(child, e.event.pid);
            children.entry(e.event.pid).or_default().push((e.event.ts_ns, child));
        }
    })?;
    let mut processes = Vec::new();
    let top = req.top.max(1);
    for &pid in &pids {
        let mut p = ProcessFootprint { pid, parent: parent.get(&pid).copied(), ..Default::default() };
        let exec = part.execs.iter().rev().find(|e| e.pid == pid);
        if let Some(e) = exec {
            p.program = if e.argv.is_empty() { e.filename.clone() } else { e.argv.clone() };
        }
        p.name = match names.get(&pid).filter(|n| !n.is_empty()) {
            Some(n) => n.clone(),
            // a process the trace saw no name of (a child that exited before its first event
            // named it) is named as the kernel named it: by its program, else its parent's name
            None => exec
                .map(|e| comm_of_program(&e.filename))
                .or_else(|| p.parent.and_then(|q| names.get(&q).cloned()))
                .unwrap_or_default(),
        };
        // syscalls by kind
        let mut kinds: BTreeMap<&str, SyscallKind> = BTreeMap::new();
        for s in part.syscalls.iter().filter(|s| s.pid == pid) {
            let k = kinds.entry(&s.name).or_insert_with(|| SyscallKind { name: s.name.clone(), ..Default::default() });
            k.calls += s.calls;
            k.errors += s.errors;
            k.total_ns += s.total_ns;
            k.max_ns = k.max_ns.max(s.max_ns);
            k.bytes += s.bytes;
        }
        let mut kinds: Vec<SyscallKind> = kinds.into_values().collect();
        p.syscall_calls = kinds.iter().map(|k| k.calls).sum();
        p.syscall_ns = kinds.iter().map(|k| k.total_ns).sum();
        kinds.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.name.cmp(&b.name)));
        p.syscall_kinds = kinds.len();
        kinds.truncate(top);
        p.syscalls = kinds;
        // descriptors
        let mut files: BTreeMap<(String, String), TouchedFile> = BTreeMap::new();
        let mut sockets: BTreeMap<(String, String), TouchedFile> = BTreeMap::new();
        let mut libraries: BTreeSet<&str> = BTreeSet::new();
        for f in part.fds.iter().filter(|f| f.pid == pid) {
            if f.exec_mapped {
                libraries.insert(&f.name);
            }
            let into = match f.kind.as_str() {
                "socket" => &mut sockets,
                "file" | "pipe" | "other" => &mut files,
                _ => continue,
            };
            let key =
                if f.kind == "socket" { (f.how.clone(), f.name.clone()) } else { (String::new(), f.name.clone()) };
            let t = into.entry(key).or_insert_with(|| TouchedFile {
                name: f.name.clone(),
                kind: f.kind.clone(),
                how: f.how.clone(),
                ..Default::default()
            });
            t.opens += 1;
            t.bytes_read += f.bytes_read;
            t.bytes_written += f.bytes_written;
            t.reads += f.reads;
            t.writes += f.writes;
        }
        let by_bytes = |mut v: Vec<TouchedFile>| {
            v.sort_by(|a, b| {
                (b.bytes_read + b.bytes_written)
                    .cmp(&(a.bytes_read + a.bytes_written))
                    .then_with(|| a.name.cmp(&b.name))
            });
            v
        };
        let mut files = by_bytes(files.into_values().collect());
        let mut sockets = by_bytes(sockets.into_values().collect());
        (p.file_count, p.socket_count, p.library_count) = (files.len(), sockets.len(), libraries.len());
        files.truncate(top);
        sockets.truncate(top);
        (p.files, p.sockets) = (files, sockets);
        p.libraries = libraries.into_iter().take(top).map(str::to_string).collect();
        // children and what they ran
        let kids = children.get(&pid).cloned().unwrap_or_default();
        p.child_count = kids.len();
        p.children = kids
            .into_iter()
            .take(top)
            .map(|(ts, c)| Child {
                pid: c,
                started_ns: ts,
                ran: part
                    .execs
                    .iter()
                    .filter(|e| e.pid == c)
                    .map(|e| if e.argv.is_empty() { e.filename.clone() } else { e.argv.clone() })
                    .collect(),
            })
            .collect();
        // CPU
        for c in part.cpu.iter().filter(|c| c.pid == pid) {
            p.on_cpu_ns += c.on_cpu_ns;
            p.switches += c.switches;
        }
        let switches = EventFilter { pid: Some(pid), ops: Some(vec![op::SCHED_SWITCH]), ..Default::default() };
        let o = &mut p.off_cpu;
        store.scan_events(&switches, &mut |e| {
            let d = e.event.dur_ns;
            o.intervals += 1;
            match e.event.sched.as_ref().map(|s| s.prev_state) {
                Some(PrevState::Preempted) => o.preempted_ns += d,
                Some(PrevState::Sleeping) => o.sleeping_ns += d,
                Some(PrevState::Uninterruptible) => o.uninterruptible_ns += d,
                _ => o.other_ns += d,
            }
        })?;
        processes.push(p);
    }
    // requests: the longest `top` of each process, in order
    let mut requests = Vec::new();
    let mut request_count = 0;
    for &pid in &pids {
        let mut mine: Vec<RequestFootprint> = part
            .requests
            .iter()
            .filter(|q| q.pid == pid)
            .map(|q| {
                let mut kinds: BTreeMap<&str, i64> = BTreeMap::new();
                for s in part.syscalls.iter().filter(|s| s.request == q.request) {
                    *kinds.entry(&s.name).or_default() += s.calls;
                }
                let mut top_kinds: Vec<(&str, i64)> = kinds.iter().map(|(k, v)| (*k, *v)).collect();
                top_kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
                RequestFootprint {
                    pid,
                    request: q.request,
                    begin_ns: q.begin_ns,
                    end_ns: q.end_ns,
                    bytes_in: q.bytes_in,
                    bytes_out: q.bytes_out,
                    what: request_words(&q.head_in),
                    syscalls: kinds.values().sum(),
                    top_syscalls: top_kinds.iter().take(3).map(|(k, n)| format!("{k} x{n}")).collect(),
                    opened: part
                        .fds
                        .iter()
                        .filter(|f| f.request == q.request && f.opened_ns > 0 && !f.exec_mapped)
                        .map(|f| f.name.clone())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    ran: part.execs.iter().filter(|e| e.request == q.request).map(|e| e.filename.clone()).collect(),
                    on_cpu_ns: part.cpu.iter().filter(|c| c.request == q.request).map(|c| c.on_cpu_ns).sum(),
                }
            })
            .collect();
        request_count += mine.len();
        if mine.len() > top {
            mine.sort_by_key(|q| std::cmp::Reverse(if q.end_ns > 0 { q.end_ns - q.begin_ns } else { i64::MAX }));
            mine.truncate(top);
            mine.sort_by_key(|q| q.request);
        }
        requests.extend(mine);
    }
    let sql = match processes.first() {
        Some(p) => FIGURE_SQL
            .iter()
            .filter_map(|(f, _)| figure_sql(f, p.pid).map(|sql| FigureSql { figure: f.to_string(), sql }))
            .collect(),
        None => Vec::new(),
    };
    Ok(Footprint { recorded, processes, requests, request_count, sql })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unnamed_process_is_named_by_its_program_as_the_kernel_would() {
        assert_eq!(comm_of_program("/usr/bin/python3.12"), "python3.12");
        assert_eq!(comm_of_program("a-program-with-a-long-name"), "a-program-with-");
        assert_eq!(comm_of_program("/opt/ééééééééé"), "ééééééé"); // 15 bytes would split an é
        assert_eq!(comm_of_program("/bin/"), "");
    }

    #[test]
    fn a_json_rpc_request_says_its_method_and_tool() {
        assert_eq!(
            request_words(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"query","arguments":{}}}"#),
            "tools/call query"
        );
        assert_eq!(request_words(r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize"}"#), "initialize");
        assert_eq!(request_words("GET /health HTTP/1.1"), "GET /health HTTP/1.1");
    }
}
