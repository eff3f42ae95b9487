//! The footprint tables (`trace --footprint`) in every engine: what a sink wrote reads back exactly
//! (each table in its promised order, appended parts kept), converts into every engine, cuts to one
//! process, and is described with the SQL of each figure; a trace without them reads empty.

use std::path::Path;

use causeway_backends::*;
use causeway_model::{FootprintCpu, FootprintExec, FootprintFd, FootprintPart, FootprintRequest, FootprintSyscall};

use super::{file, rt, session};

/// Two parts, as two looks of a tracer would write them (rows already in the reading order).
fn parts() -> (FootprintPart, FootprintPart) {
    let sys = |at: i64, pid: u32, request: u32, nr: u32, name: &str, calls: i64| FootprintSyscall {
        seen_at_ns: at,
        pid,
        request,
        nr,
        name: name.into(),
        calls,
        errors: calls / 3,
        total_ns: calls * 1500,
        max_ns: 9000,
        bytes: if nr <= 1 { calls * 64 } else { 0 },
    };
    let first = FootprintPart {
        syscalls: vec![
            sys(1_000, 40, 0, 0, "read", 7),
            sys(1_000, 40, 1, 257, "openat", 3),
            sys(1_000, 41, 1, 59, "execve", 1),
        ],
        cpu: vec![FootprintCpu { seen_at_ns: 1_000, pid: 40, request: 1, on_cpu_ns: 12_345, switches: 4 }],
        fds: vec![FootprintFd {
            pid: 40,
            tid: 40,
            fd: 5,
            kind: "file".into(),
            how: "open".into(),
            name: "/tmp/notes.sqlite".into(),
            opened_ns: 900,
            closed_ns: 950,
            flags: 0o2101102,
            request: 1,
            bytes_read: 100,
            bytes_written: 8192,
            reads: 1,
            writes: 2,
            exec_mapped: false,
        }],
        requests: vec![FootprintRequest {
            pid: 40,
            request: 1,
            fd: 0,
            begin_ns: 800,
            end_ns: 990,
            bytes_in: 90,
            bytes_out: 60,
            head_in: r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"query"}}\n"#.into(),
            head_out: "{\"result\": 'é'}".into(),
        }],
        execs: vec![FootprintExec {
            ts_ns: 970,
            pid: 41,
            ppid: 40,
            request: 1,
            filename: "/usr/bin/echo".into(),
            argv: "echo hello".into(),
        }],
    };
    let second = FootprintPart {
        syscalls: vec![sys(2_000, 40, 0, 0, "read", 2)],
        cpu: vec![FootprintCpu { seen_at_ns: 2_000, pid: 40, request: 0, on_cpu_ns: 5, switches: 1 }],
        fds: vec![
            FootprintFd {
                pid: 40,
                fd: 6,
                kind: "socket".into(),
                how: "connect".into(),
                name: "127.0.0.1:5432".into(),
                opened_ns: 960,
                flags: 2,
                request: 1,
                bytes_read: 5,
                bytes_written: 5,
                reads: 1,
                writes: 1,
                ..Default::default()
            },
            FootprintFd {
                pid: 41,
                fd: -1,
                kind: "library".into(),
                how: "maps".into(),
                name: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                exec_mapped: true,
                ..Default::default()
            },
        ],
        requests: Vec::new(),
        execs: Vec::new(),
    };
    (first, second)
}

/// Both parts as one, in the reading order of each table.
fn merged() -> FootprintPart {
    let (a, b) = parts();
    let mut m = a.clone();
    m.syscalls.extend(b.syscalls);
    m.cpu.extend(b.cpu);
    m.fds.extend(b.fds);
    m.fds.sort_by(|x, y| (x.pid, x.opened_ns, x.fd, &x.name).cmp(&(y.pid, y.opened_ns, y.fd, &y.name)));
    m
}

fn write(path: &Path, b: Engine) {
    rt().block_on(async {
        let mut sink = create_sink(path, session(1), Some(b)).unwrap();
        sink.write_batch(SyntheticTrace::new(5, 1_000_000_000).take(50)).await.unwrap();
        let (first, second) = parts();
        sink.write_footprint(first).await.unwrap();
        sink.write_footprint(FootprintPart::default()).await.unwrap();
        sink.write_footprint(second).await.unwrap();
        sink.finish(2_000_000_000).await.unwrap();
    });
}

pub fn round_trips_converts_and_cuts(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "fp");
    write(&path, b);
    let store = open_store(&path).unwrap();
    let want = merged();
    assert_eq!(store.footprint().unwrap(), want, "{}: read back", b.name());
    let schema = store.describe_schema().unwrap();
    for t in ["footprint_syscalls", "footprint_cpu", "footprint_fds", "footprint_requests", "footprint_execs"] {
        let d = schema.tables.iter().find(|d| d.name == t).unwrap_or_else(|| panic!("{t} not described"));
        assert!(!d.meaning.is_empty() && d.columns.iter().all(|c| !c.meaning.is_empty()), "{t}: {d:?}");
    }
    for (figure, _) in causeway_model::footprint::FIGURE_SQL {
        assert!(schema.notes.iter().any(|n| n.starts_with(&format!("footprint figure {figure} "))), "{figure}");
    }
    // each figure's SQL runs on the engine (pid 40)
    for (figure, _) in causeway_model::footprint::FIGURE_SQL {
        let sql = causeway_model::footprint::figure_sql(figure, 40).unwrap();
        let r = store.query(&sql, &QueryLimits::default()).unwrap_or_else(|e| panic!("{figure}: {e}"));
        assert!(!r.rows.is_empty() || matches!(figure, "children" | "off_cpu" | "libraries"), "{figure}: no rows");
    }
    for to in Engine::ALL.into_iter().filter(|e| is_built(*e)) {
        let out = dir.path().join(format!("conv_{}.{}", b.name(), to.extension()));
        let report = convert(&path, &out, Some(to), &mut |_, _| {}).unwrap();
        assert_eq!(report.footprint_rows, 11);
        assert_eq!(open_store(&out).unwrap().footprint().unwrap(), want, "{} -> {}", b.name(), to.name());
        let cut_path = dir.path().join(format!("cut_{}.{}", b.name(), to.extension()));
        let scope = CutScope { pid: Some(41), ..Default::default() };
        cut(&path, &cut_path, Some(to), &scope, &mut |_, _| {}).unwrap();
        let c = open_store(&cut_path).unwrap().footprint().unwrap();
        assert!(c.syscalls.iter().all(|s| s.pid == 41) && c.fds.iter().all(|f| f.pid == 41), "{c:?}");
        assert_eq!(
            (c.syscalls.len(), c.cpu.len(), c.fds.len(), c.execs.len(), c.requests.len()),
            (1, 0, 1, 1, 0),
            "{c:?}"
        );
    }
    // a trace written without them reads empty
    let plain = file(dir.path(), b, "plain");
    rt().block_on(async {
        let mut sink = create_sink(&plain, session(1), Some(b)).unwrap();
        sink.write_batch(SyntheticTrace::new(6, 1_000_000_000).take(10)).await.unwrap();
        sink.finish(2_000_000_000).await.unwrap();
    });
    assert!(open_store(&plain).unwrap().footprint().unwrap().is_empty());
}
