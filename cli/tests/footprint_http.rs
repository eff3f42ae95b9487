//! What an MCP server over streamable HTTP touched, request by request, end to end (root, eBPF):
//! `tests/footprint/mcp_http_server.py` (http.server, standard library only) answers JSON-RPC
//! POSTs; its tools write an SQLite database file, ask a TCP peer this test runs, and run `echo`.
//! Each request is told apart by time on the connection it came on (the read on an accepted
//! socket that begins it, the write that answers it), and the file, the peer and the subprocess
//! each fall in their own request.
//!
//! - launched under `causeway trace --footprint -- CMD`, one connection per request;
//! - already running, attached with `causeway trace --footprint --pid P` while a keep-alive
//!   connection made before the attach waits for its next request: the descriptors it held are
//!   named from /proc (`before_attach`) and counted from the attach on, the connection's requests
//!   (the first one read by a call in flight at the attach) told apart as the others.
//!
//! No timing is asserted.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{causeway, ok, pong_peer, query_rows, query_u64, repo, require_root_to};
use serde_json::{json, Value};

/// A JSON-RPC request.
fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A tools/call of `tool`.
fn tool_call(id: u64, tool: &str) -> Value {
    request(id, "tools/call", json!({"name": tool, "arguments": {}}))
}

/// POST `msg` to /mcp on `conn` in one write, as a client's transport sends it (`close`: the
/// server closes the connection after answering); the answer's `result` (None: a notification's
/// empty 202).
fn post(conn: &mut BufReader<TcpStream>, msg: &Value, close: bool) -> Option<Value> {
    let body = msg.to_string();
    let close = if close { "Connection: close\r\n" } else { "" };
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{close}\r\n",
        body.len()
    );
    conn.get_mut().write_all(format!("{head}{body}").as_bytes()).unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 20"), "{msg}: {status:?}");
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        conn.read_line(&mut h).unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut b = vec![0u8; len];
    conn.read_exact(&mut b).unwrap();
    if len == 0 {
        return None;
    }
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert!(v.get("error").is_none(), "{msg}: {v}");
    Some(v["result"].clone())
}

/// A new connection to the server.
fn connect(port: u16) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap())
}

/// The text a tools/call answered.
fn text_of(result: Option<Value>) -> String {
    result.unwrap()["content"][0]["text"].as_str().unwrap().to_string()
}

/// The server's arguments after `python3 mcp_http_server.py`.
fn server_args(dir: &Path, peer_port: u16) -> Vec<String> {
    vec![
        repo().join("tests/footprint/mcp_http_server.py").to_string_lossy().into_owned(),
        "--db".into(),
        dir.join("notes.sqlite").to_string_lossy().into_owned(),
        "--port".into(),
        peer_port.to_string(),
        "--log".into(),
        dir.join("calls.log").to_string_lossy().into_owned(),
    ]
}

/// The port the server said it listens on (its first line on `out`).
fn listening(out: &mut impl BufRead) -> u16 {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("{line:?}")).parse().unwrap()
}

/// The request of `server` whose first bytes name tool `tool` (the JSON-RPC body follows the
/// HTTP headers in the head the trace keeps), with the descriptor it came on.
fn request_of(db: &Path, server: u64, tool: &str) -> (u64, i64) {
    let rows = query_rows(
        db,
        &format!(
            "SELECT request, fd FROM footprint_requests WHERE pid = {server} AND head_in LIKE 'POST /mcp%' AND head_in LIKE '%\"name\":\"{tool}\"%'"
        ),
    );
    assert_eq!(rows.len(), 1, "one request calls {tool}: {rows:?}");
    (rows[0][0].as_u64().unwrap(), rows[0][1].as_i64().unwrap())
}

/// The per-request attribution both tests assert: the database file opened in the `query`
/// request, the peer connected in the `fetch` request (its only connect), `echo` run in the `run`
/// request; every request answered by an HTTP response and named by `causeway footprint`.
fn assert_each_tool_in_its_request(db: &Path, dir: &Path, server: u64, peer_port: u16) {
    let notes = dir.join("notes.sqlite");
    let notes = notes.to_str().unwrap();
    let (query, _) = request_of(db, server, "query");
    let (fetch, _) = request_of(db, server, "fetch");
    let (run, _) = request_of(db, server, "run");
    let rows = query_rows(
        db,
        &format!("SELECT request, bytes_written FROM footprint_fds WHERE pid = {server} AND name = '{notes}' AND how = 'open'"),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][0].as_u64(), Some(query), "the database file, opened in the query request");
    assert!(rows[0][1].as_u64().unwrap() >= std::fs::metadata(dir.join("notes.sqlite")).unwrap().len());
    let rows = query_rows(
        db,
        &format!("SELECT request, bytes_written, bytes_read FROM footprint_fds WHERE pid = {server} AND how = 'connect' AND name = '127.0.0.1:{peer_port}'"),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0][0].as_u64(), rows[0][1].as_u64(), rows[0][2].as_u64()), (Some(fetch), Some(5), Some(5)));
    let connects = |request: u64| {
        query_u64(
            db,
            &format!("SELECT coalesce(sum(calls), 0) FROM footprint_syscalls WHERE pid = {server} AND request = {request} AND name = 'connect'"),
        )
    };
    assert_eq!((connects(query), connects(fetch), connects(run)), (0, 1, 0), "connects by request");
    let rows = query_rows(
        db,
        &format!("SELECT request, argv FROM footprint_execs WHERE ppid = {server} AND argv LIKE 'echo%'"),
    );
    assert_eq!(rows, vec![vec![json!(run), json!("echo hello")]], "echo, run in the run request");
    // echo's stdout: a copy (dup2) of the pipe the server reads its answer from, named as /proc
    // names a pipe, so both ends read as one pipe; its bytes on either side
    let child = query_u64(db, &format!("SELECT pid FROM footprint_execs WHERE ppid = {server} AND argv LIKE 'echo%'"));
    let rows = query_rows(
        db,
        &format!(
            "SELECT name, bytes_written, request FROM footprint_fds WHERE pid = {child} AND fd = 1 AND how = 'dup'"
        ),
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    let pipe = rows[0][0].as_str().unwrap();
    assert!(pipe.starts_with("pipe:["), "{rows:?}");
    assert_eq!((rows[0][1].as_u64(), rows[0][2].as_u64()), (Some("hello\n".len() as u64), Some(run)));
    let read_back = query_rows(
        db,
        &format!("SELECT bytes_read, request FROM footprint_fds WHERE pid = {server} AND name = '{pipe}'"),
    );
    assert_eq!(read_back, vec![vec![json!(6), json!(run)]], "the server's end of echo's stdout");
    // each request answered on its connection, with an HTTP response
    let rows = query_rows(
        db,
        &format!("SELECT request, end_ns > begin_ns, head_out FROM footprint_requests WHERE pid = {server} AND request IN ({query}, {fetch}, {run})"),
    );
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r[1], json!(1), "{r:?}");
        assert!(r[2].as_str().unwrap().starts_with("HTTP/1.1 200"), "{r:?}");
    }
    // and `causeway footprint` names them from their heads
    let out = causeway()
        .args(["footprint", "--json", "--top", "1000", "--pid", &server.to_string(), "--db"])
        .arg(db)
        .output()
        .unwrap();
    let f: Value = serde_json::from_str(&ok(out, "causeway footprint --json")).unwrap();
    let named = |request: u64| {
        f["requests"].as_array().unwrap().iter().find(|q| q["request"].as_u64() == Some(request)).unwrap()["what"]
            .clone()
    };
    assert_eq!(
        (named(query), named(fetch), named(run)),
        (json!("tools/call query"), json!("tools/call fetch"), json!("tools/call run"))
    );
}

#[test]
fn an_http_mcp_servers_requests_are_told_apart_on_the_connections_it_accepted() {
    require_root_to("trace an MCP server over HTTP with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("fp.db");
    let (peer_port, peer_thread) = pong_peer();
    let mut tracer = causeway()
        .args(["trace", "--footprint", "--quiet", "--nvml-hz", "0", "--no-labels", "--no-serving", "--db"])
        .arg(&trace)
        .args(["--", "python3"])
        .args(server_args(dir.path(), peer_port))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(tracer.stdout.take().unwrap());
    let port = listening(&mut out);
    // one connection per message, closed by the server after its answer
    let init = post(
        &mut connect(port),
        &request(1, "initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}})),
        true,
    )
    .unwrap();
    let server = init["serverInfo"]["pid"].as_u64().unwrap();
    assert!(post(&mut connect(port), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), true).is_none());
    assert_eq!(
        post(&mut connect(port), &request(2, "tools/list", json!({})), true).unwrap()["tools"][2]["name"],
        "run"
    );
    assert_eq!(text_of(post(&mut connect(port), &tool_call(3, "query"), true)), "1 rows");
    assert_eq!(text_of(post(&mut connect(port), &tool_call(4, "fetch"), true)), "pong");
    assert_eq!(text_of(post(&mut connect(port), &tool_call(5, "run"), true)), "hello");
    drop(tracer.stdin.take()); // the server leaves at the end of its stdin, and the trace with it
    let done = tracer.wait_with_output().unwrap();
    assert!(done.status.success(), "trace failed: {}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(peer_thread.join().unwrap(), vec!["ping".to_string()]);
    let db = trace.as_path();

    assert_each_tool_in_its_request(db, dir.path(), server, peer_port);
    // every message with an id (and the notification) came on a connection the server accepted,
    // each its own, and each request lies within its connection's life (the last one may still
    // be open when the server exits)
    let rows = query_rows(
        db,
        &format!(
            "SELECT r.request, (SELECT count(*) FROM footprint_fds f WHERE f.pid = r.pid AND f.how = 'accept' AND f.fd = r.fd \
             AND f.opened_ns <= r.begin_ns AND (f.closed_ns >= r.end_ns OR f.closed_ns = 0)) FROM footprint_requests r \
             WHERE r.pid = {server} ORDER BY r.request"
        ),
    );
    assert_eq!(rows.len(), 6, "initialize, the notification, tools/list and three calls: {rows:?}");
    assert!(rows.iter().all(|r| r[1] == json!(1)), "each on one accepted connection: {rows:?}");
    assert_eq!(
        query_u64(db, &format!("SELECT count(*) FROM footprint_fds WHERE pid = {server} AND how = 'accept' AND kind = 'socket' AND name LIKE '127.0.0.1:%'")),
        6,
        "six connections accepted, each named by its peer"
    );
}

/// `causeway trace --footprint --pid P --json --db DB` started; returns once it prints its first
/// live figures (the probes are in and P's descriptors read).
fn attach(db: &Path, pid: u32) -> Child {
    let mut tracer = causeway()
        .args(["trace", "--footprint", "--json", "--nvml-hz", "0", "--no-labels", "--no-serving"])
        .args(["--duration", "120s", "--pid", &pid.to_string(), "--db"])
        .arg(db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(tracer.stdout.as_mut().unwrap()).read_line(&mut first).unwrap();
    assert!(first.contains("elapsed_ns"), "the live figures: {first:?}");
    tracer
}

#[test]
fn a_running_http_mcp_server_attached_by_pid_names_what_it_held_and_tells_its_requests_apart() {
    require_root_to("attach to an MCP server with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("fp.db");
    let (peer_port, peer_thread) = pong_peer();
    let mut server_proc = Command::new("python3")
        .args(server_args(dir.path(), peer_port))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let port = listening(&mut BufReader::new(server_proc.stdout.take().unwrap()));
    // before the attach: a keep-alive connection, and a request on it
    let mut kept = connect(port);
    let kept_peer = kept.get_ref().local_addr().unwrap().to_string();
    let init = post(&mut kept, &request(1, "initialize", json!({"protocolVersion": "2025-06-18"})), false).unwrap();
    let server = init["serverInfo"]["pid"].as_u64().unwrap();
    assert_eq!(server, u64::from(server_proc.id()));
    let tracer = attach(&trace, server_proc.id());
    // after: the tools on the kept connection (its handler was blocked reading it at the attach),
    // and tools/list on a new one
    assert_eq!(text_of(post(&mut kept, &tool_call(3, "query"), false)), "1 rows");
    assert_eq!(text_of(post(&mut kept, &tool_call(4, "fetch"), false)), "pong");
    assert_eq!(text_of(post(&mut kept, &tool_call(5, "run"), false)), "hello");
    let mut fresh = connect(port);
    let fresh_peer = fresh.get_ref().local_addr().unwrap().to_string();
    assert_eq!(post(&mut fresh, &request(6, "tools/list", json!({})), true).unwrap()["tools"][0]["name"], "query");
    drop(kept);
    drop(server_proc.stdin.take()); // the server exits; reaped, it ends the trace
    assert!(server_proc.wait().unwrap().success());
    let done = tracer.wait_with_output().unwrap();
    assert!(done.status.success(), "trace failed: {}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(peer_thread.join().unwrap(), vec!["ping".to_string()]);
    let db = trace.as_path();

    assert_each_tool_in_its_request(db, dir.path(), server, peer_port);
    // what it held at the attach, named from /proc: the listening socket, the kept connection
    // (its peer), the log file with the bytes written to it from the attach on
    let held = |name: &str| {
        query_rows(
            db,
            &format!("SELECT kind, opened_ns, bytes_read, bytes_written, fd FROM footprint_fds WHERE pid = {server} AND how = 'before_attach' AND name = '{name}'"),
        )
    };
    let listener = held(&format!("127.0.0.1:{port}"));
    assert_eq!(listener.len(), 1, "the listening socket: {listener:?}");
    assert_eq!((listener[0][0].as_str(), listener[0][1].as_i64()), (Some("socket"), Some(0)), "open before the trace");
    let kept_row = held(&kept_peer);
    assert_eq!(kept_row.len(), 1, "the kept connection, by its peer: {kept_row:?}");
    assert_eq!(kept_row[0][0].as_str(), Some("socket"));
    assert!(kept_row[0][2].as_u64().unwrap() > 0 && kept_row[0][3].as_u64().unwrap() > 0, "{kept_row:?}");
    let log = dir.path().join("calls.log");
    let log_row = held(log.to_str().unwrap());
    assert_eq!(log_row.len(), 1, "the log file: {log_row:?}");
    assert_eq!(log_row[0][0].as_str(), Some("file"));
    assert_eq!(log_row[0][3].as_u64(), Some("called query\ncalled fetch\ncalled run\n".len() as u64));
    // the three calls came on the kept connection (the first read by the call in flight at the
    // attach), tools/list on the new one, accepted under the trace; initialize was before it
    let kept_fd = kept_row[0][4].as_i64().unwrap();
    for tool in ["query", "fetch", "run"] {
        assert_eq!(request_of(db, server, tool).1, kept_fd, "{tool} on the kept connection");
    }
    let fresh_rows = query_rows(
        db,
        &format!("SELECT fd FROM footprint_fds WHERE pid = {server} AND how = 'accept' AND name = '{fresh_peer}'"),
    );
    assert_eq!(fresh_rows.len(), 1, "{fresh_rows:?}");
    let list = query_rows(
        db,
        &format!("SELECT fd FROM footprint_requests WHERE pid = {server} AND head_in LIKE '%tools/list%'"),
    );
    assert_eq!(list, fresh_rows, "tools/list on the connection accepted under the trace");
    assert_eq!(
        query_u64(db, &format!("SELECT count(*) FROM footprint_requests WHERE pid = {server}")),
        4,
        "initialize was answered before the attach"
    );
    // its syscalls and CPU from the attach on, and the libraries it had mapped before it
    assert!(query_u64(db, &format!("SELECT coalesce(sum(on_cpu_ns), 0) FROM footprint_cpu WHERE pid = {server}")) > 0);
    assert!(query_u64(db, &format!("SELECT coalesce(sum(calls), 0) FROM footprint_syscalls WHERE pid = {server}")) > 0);
    let libraries = query_rows(
        db,
        &format!("SELECT DISTINCT name FROM footprint_fds WHERE pid = {server} AND exec_mapped = 1 AND how = 'maps'"),
    );
    assert!(
        libraries.iter().any(|r| r[0].as_str().unwrap().contains("_sqlite3")),
        "the sqlite3 module, imported before the attach, from /proc/PID/maps: {libraries:?}"
    );
}
