//! What a process touched, end to end (root, eBPF): `causeway trace --footprint` launches a small
//! MCP server written for the test (`tests/footprint/mcp_server.py`, standard library only, no
//! CUDA) and this test is its client over stdio: initialize, tools/list, then one call of each of
//! its tools (`query` writes an SQLite database file, `fetch` asks a TCP peer this test runs,
//! `run` starts `echo` in a subprocess). The trace holds the database file's path and its bytes,
//! the socket's peer and its bytes, the subprocess and what it ran, the syscall counts, the
//! libraries and the CPU time, the requests told apart with the work each did; every figure of
//! `causeway footprint --json` equals what its SQL (`describe_schema` lists it) computes from the
//! stored rows, and the same trace converted to DuckDB answers the same. No timing is asserted.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Stdio;

use common::{causeway, ok, pong_peer, query_rows, query_u64, repo, require_root_to};
use serde_json::{json, Value};

/// `causeway footprint --json` of `db` for `pid`.
fn footprint_json(db: &Path, pid: u64) -> Value {
    let out = causeway()
        .args(["footprint", "--json", "--top", "1000", "--pid", &pid.to_string(), "--db"])
        .arg(db)
        .output()
        .unwrap();
    serde_json::from_str(&ok(out, "causeway footprint --json")).unwrap()
}

/// The rows of footprint figure `figure`'s SQL (from the answer itself) as (first column -> the rest).
fn figure_rows(db: &Path, f: &Value, figure: &str) -> Vec<Vec<Value>> {
    let sql = f["sql"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["figure"] == figure)
        .unwrap_or_else(|| panic!("no SQL for {figure}"))["sql"]
        .as_str()
        .unwrap()
        .to_string();
    query_rows(db, &sql)
}

#[test]
fn an_mcp_servers_footprint_names_its_files_peers_children_and_requests() {
    require_root_to("trace an MCP server with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("fp.db");
    let notes = dir.path().join("notes.sqlite");
    let (port, peer_thread) = pong_peer();
    let mut tracer = causeway()
        .args(["trace", "--footprint", "--quiet", "--nvml-hz", "0", "--no-labels", "--no-serving", "--db"])
        .arg(&trace)
        .arg("--")
        .arg("python3")
        .arg(repo().join("tests/footprint/mcp_server.py"))
        .arg("--db")
        .arg(&notes)
        .args(["--port", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_server = tracer.stdin.take().unwrap();
    let mut from_server = BufReader::new(tracer.stdout.take().unwrap());
    let mut ask = |msg: Value| -> Option<Value> {
        // one write per message, as a client's transport sends it
        to_server.write_all(format!("{msg}\n").as_bytes()).unwrap();
        msg.get("id")?;
        let mut line = String::new();
        from_server.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{msg}: {line:?}: {e}"));
        assert!(v.get("error").is_none(), "{msg}: {v}");
        Some(v["result"].clone())
    };
    let request =
        |id: u64, method: &str, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let init = ask(request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
    ))
    .unwrap();
    let server = init["serverInfo"]["pid"].as_u64().expect("the server says its pid");
    assert!(ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).is_none());
    assert_eq!(ask(request(2, "tools/list", json!({}))).unwrap()["tools"].as_array().unwrap().len(), 3);
    let mut call = |id: u64, tool: &str| {
        let r = ask(request(id, "tools/call", json!({"name": tool, "arguments": {}}))).unwrap();
        r["content"][0]["text"].as_str().unwrap().to_string()
    };
    assert_eq!(call(3, "query"), "1 rows");
    assert_eq!(call(4, "fetch"), "pong");
    assert_eq!(call(5, "run"), "hello");
    drop(to_server); // the server leaves at the end of its input, and the trace with it
    let mut rest = String::new();
    from_server.read_to_string(&mut rest).unwrap();
    let out = tracer.wait_with_output().unwrap();
    assert!(out.status.success(), "trace failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(peer_thread.join().unwrap(), vec!["ping".to_string()]);
    let db = trace.as_path();
    let notes_name = notes.to_str().unwrap();

    // the database file: opened once, in the `query` request, with its bytes
    let rows = query_rows(
        db,
        &format!(
            "SELECT kind, how, bytes_written, bytes_read, request FROM footprint_fds WHERE pid = {server} AND name = '{notes_name}'"
        ),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0][0].as_str(), rows[0][1].as_str()), (Some("file"), Some("open")));
    let written = rows[0][2].as_u64().unwrap();
    let on_disk = std::fs::metadata(&notes).unwrap().len();
    assert!(written >= on_disk && on_disk >= 4096, "{written} bytes written to a file of {on_disk}");
    let query_request = rows[0][4].as_u64().unwrap();
    let head = query_rows(
        db,
        &format!("SELECT head_in, end_ns > begin_ns FROM footprint_requests WHERE request = {query_request}"),
    );
    assert!(head[0][0].as_str().unwrap().contains(r#""name":"query""#), "{head:?}");
    assert_eq!(head[0][1], json!(1));
    assert!(
        query_u64(
            db,
            &format!("SELECT count(*) FROM footprint_fds WHERE pid = {server} AND name = '{notes_name}-journal'")
        ) >= 1,
        "SQLite's rollback journal"
    );

    // the socket: its peer, its bytes both ways, in the `fetch` request
    let rows = query_rows(
        db,
        &format!("SELECT how, bytes_written, bytes_read, (SELECT head_in FROM footprint_requests r WHERE r.request = f.request) FROM footprint_fds f WHERE pid = {server} AND kind = 'socket' AND name = '127.0.0.1:{port}'"),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0][0].as_str(), rows[0][1].as_u64(), rows[0][2].as_u64()), (Some("connect"), Some(5), Some(5)));
    assert!(rows[0][3].as_str().unwrap().contains(r#""name":"fetch""#), "{rows:?}");

    // the subprocess: forked by the server, ran echo, in the `run` request
    let rows = query_rows(
        db,
        &format!("SELECT x.pid, x.filename, x.argv, (SELECT head_in FROM footprint_requests r WHERE r.request = x.request) FROM footprint_execs x WHERE x.ppid = {server} AND x.argv LIKE 'echo%'"),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0][1].as_str().unwrap().ends_with("echo"), "{rows:?}");
    assert_eq!(rows[0][2].as_str(), Some("echo hello"));
    assert!(rows[0][3].as_str().unwrap().contains(r#""name":"run""#), "{rows:?}");
    let child = rows[0][0].as_u64().unwrap();
    assert_eq!(
        query_u64(
            db,
            &format!("SELECT count(*) FROM events WHERE source = 3 AND op = 7 AND pid = {server} AND arg1 = {child}")
        ),
        1,
        "its fork"
    );

    // syscall counts: one connect, the reads of stdin at least one per message, opens
    let calls = |name: &str| {
        query_u64(
            db,
            &format!("SELECT coalesce(sum(calls), 0) FROM footprint_syscalls WHERE pid = {server} AND name = '{name}'"),
        )
    };
    // The `fetch` request made the one connect; outside the requests the interpreter may make
    // more (glibc's NSS asks nscd's socket when HOME is unset and Python looks up the user).
    let fetch_request = query_u64(
        db,
        &format!("SELECT request FROM footprint_requests WHERE pid = {server} AND head_in LIKE '%\"name\":\"fetch\"%'"),
    );
    assert_eq!(
        query_u64(
            db,
            &format!("SELECT coalesce(sum(calls), 0) FROM footprint_syscalls WHERE pid = {server} AND request = {fetch_request} AND name = 'connect'")
        ),
        1,
        "the fetch request's connects"
    );
    assert!(calls("connect") >= 1);
    assert!(calls("read") >= 5, "{} reads", calls("read"));
    assert!(calls("write") >= 5, "{} writes", calls("write"));
    assert!(calls("openat") >= 2, "{} opens", calls("openat"));
    assert!(calls("clone") + calls("clone3") + calls("vfork") + calls("fork") >= 1, "the subprocess's fork");
    let requests = query_rows(
        db,
        &format!("SELECT head_in, end_ns FROM footprint_requests WHERE pid = {server} ORDER BY request"),
    );
    let calls_seen: Vec<&str> =
        requests.iter().filter_map(|r| r[0].as_str()).filter(|h| h.contains("tools/call")).collect();
    assert_eq!(calls_seen.len(), 3, "{requests:?}");
    assert!(requests.iter().all(|r| r[1].as_i64().unwrap() > 0), "every request answered: {requests:?}");

    // what the answer says is what its SQL computes from the rows
    let f = footprint_json(db, server);
    assert_eq!(f["recorded"], json!(true));
    let p = &f["processes"][0];
    assert_eq!(p["pid"].as_u64(), Some(server));
    let by_name: BTreeMap<String, (u64, u64)> = p["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (k["name"].as_str().unwrap().to_string(), (k["calls"].as_u64().unwrap(), k["bytes"].as_u64().unwrap()))
        })
        .collect();
    let by_sql: BTreeMap<String, (u64, u64)> = figure_rows(db, &f, "syscalls")
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), (r[1].as_u64().unwrap(), r[5].as_u64().unwrap())))
        .collect();
    assert_eq!(by_name, by_sql, "syscalls by kind");
    assert_eq!(p["syscall_calls"].as_u64().unwrap(), by_sql.values().map(|v| v.0).sum::<u64>());
    let files: BTreeMap<String, (u64, u64)> = p["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                (t["bytes_read"].as_u64().unwrap(), t["bytes_written"].as_u64().unwrap()),
            )
        })
        .collect();
    let files_sql: BTreeMap<String, (u64, u64)> = figure_rows(db, &f, "files")
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), (r[2].as_u64().unwrap(), r[3].as_u64().unwrap())))
        .collect();
    assert_eq!(files, files_sql, "files");
    assert!(files.contains_key(notes_name));
    let sockets_sql = figure_rows(db, &f, "sockets");
    assert_eq!(p["sockets"].as_array().unwrap().len(), sockets_sql.len());
    assert!(sockets_sql.iter().any(|r| r[1] == json!(format!("127.0.0.1:{port}"))), "{sockets_sql:?}");
    let libraries: Vec<Value> = figure_rows(db, &f, "libraries").into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(p["libraries"].as_array().unwrap(), &libraries, "libraries");
    assert!(
        libraries.iter().any(|l| l.as_str().unwrap().contains("_sqlite3")),
        "the sqlite3 module's library, mapped when `query` imported it: {libraries:?}"
    );
    let children = figure_rows(db, &f, "children");
    assert_eq!(p["child_count"].as_u64(), Some(children.len() as u64));
    assert!(children.iter().any(|r| r[0].as_u64() == Some(child) && r[3] == json!("echo hello")), "{children:?}");
    let ran: Vec<&Value> =
        p["children"].as_array().unwrap().iter().filter(|c| c["pid"].as_u64() == Some(child)).collect();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0]["ran"], json!(["echo hello"]));
    // the child itself: named (by the trace, else as the kernel named it, by its program)
    let c = footprint_json(db, child);
    let c = &c["processes"][0];
    assert_eq!((c["pid"].as_u64(), c["parent"].as_u64()), (Some(child), Some(server)), "{c}");
    assert_eq!(c["name"], json!("echo"), "{c}");
    let cpu = figure_rows(db, &f, "on_cpu");
    assert_eq!(p["on_cpu_ns"].as_u64(), cpu[0][0].as_u64());
    assert!(p["on_cpu_ns"].as_u64().unwrap() > 0, "time on the CPU");
    let off = figure_rows(db, &f, "off_cpu");
    let off_ns: u64 = off.iter().map(|r| r[1].as_u64().unwrap()).sum();
    let o = &p["off_cpu"];
    let off_answer: u64 =
        ["preempted_ns", "sleeping_ns", "uninterruptible_ns", "other_ns"].iter().map(|k| o[k].as_u64().unwrap()).sum();
    assert_eq!(off_answer, off_ns, "off the CPU");
    assert!(o["sleeping_ns"].as_u64().unwrap() > 0, "asleep in its reads of stdin");
    let reqs = figure_rows(db, &f, "requests");
    assert_eq!(f["request_count"].as_u64(), Some(reqs.len() as u64));
    for (q, r) in f["requests"].as_array().unwrap().iter().zip(&reqs) {
        assert_eq!((q["request"].as_u64(), q["syscalls"].as_u64()), (r[0].as_u64(), r[6].as_u64()), "{q} vs {r:?}");
    }
    let query_req = f["requests"].as_array().unwrap().iter().find(|q| q["what"] == "tools/call query").expect("named");
    assert!(query_req["opened"].as_array().unwrap().iter().any(|n| n == notes_name), "{query_req}");

    // the same trace in DuckDB answers the same
    let duck = dir.path().join("fp.duckdb");
    ok(
        causeway().args(["convert", "--quiet", "--from"]).arg(db).arg("--to").arg(&duck).output().unwrap(),
        "convert to duckdb",
    );
    assert_eq!(footprint_json(&duck, server), f, "the DuckDB copy's footprint");

    // and the table says it
    let text = ok(causeway().args(["footprint", "--db"]).arg(db).output().unwrap(), "causeway footprint");
    assert!(
        text.contains(notes_name) && text.contains(&format!("127.0.0.1:{port}")) && text.contains("echo hello"),
        "{text}"
    );
}
