//! The network end to end (root, eBPF): a GPU feeding loop that fetches every batch over TCP
//! (`tests/network/feeder.py`) from an untraced server on loopback that answers five steps 300 ms
//! late. The trace holds every socket call of the traced thread with its bytes, latency and peer
//! (`net_peers`), the TCP state changes of its socket, and the untraced server's traffic counted
//! in the kernel; `explain` names the slow peer as the network wait behind the feeding gaps, with
//! SQL that reproduces the figure. In a network namespace whose nftables drop a fifth of the
//! segments reaching the server at random (this kernel has no netem), the traced socket's
//! retransmits are recorded with its peer.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{causeway, query_rows, query_u64, repo, require_root_to};

const BATCH: u64 = 256 << 10;

/// The untraced server's process, killed when dropped: a test that fails before the feeder
/// hangs up must not leave it waiting on its client (and holding the harness's pipes).
struct Server(Child);

impl Server {
    /// Waits for the server to leave after its client hung up.
    fn wait(&mut self) {
        let status = self.0.wait().unwrap();
        assert!(status.success(), "the server failed: {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The untraced server (`feeder.py serve`, optionally inside `netns`) and the port it listens on.
fn start_server(netns: Option<&str>, delay: &[&str]) -> (Server, u16) {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "python3"]);
            c
        }
        None => Command::new("python3"),
    };
    let mut child = cmd
        .arg(repo().join("tests/network/feeder.py"))
        .arg("serve")
        .args(delay)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().strip_prefix("port ").unwrap_or_else(|| panic!("server said {line:?}")).parse().unwrap();
    (Server(child), port)
}

/// `causeway trace` of the feeding loop (`prefix` runs it, e.g. in a namespace) into `db`.
fn trace_feeder(db: &Path, prefix: &[&str], port: u16, steps: u32, upload: u32) -> String {
    trace_feeder_with(db, &[], prefix, port, steps, upload)
}

/// [`trace_feeder`] with more `trace` options.
fn trace_feeder_with(db: &Path, options: &[&str], prefix: &[&str], port: u16, steps: u32, upload: u32) -> String {
    let build = causeway_testdata::mock_cuda_build();
    let out = causeway()
        .args(["trace", "--nvml-hz", "0", "--no-labels", "--no-serving"])
        .args(options)
        .arg("--db")
        .arg(db)
        .arg("--")
        .args(prefix)
        .arg("python3")
        .arg(repo().join("tests/network/feeder.py"))
        .args(["feed", "--port", &port.to_string(), "--steps", &steps.to_string(), "--upload", &upload.to_string()])
        .arg("--libcudart")
        .arg(build.join("libcudart.so.12"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(&format!("steps {steps}")), "the feeder did not finish: {stdout}\n{stderr}");
    stderr.into_owned()
}

#[test]
fn a_slow_peer_is_named_as_the_network_wait_behind_the_feeding_gaps() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("net.db");
    let (mut server, port) = start_server(None, &["--delay-steps", "50-54", "--delay-ms", "300"]);
    let stderr = trace_feeder(&db, &[], port, 200, 0);
    server.wait();

    // one internet peer, the server, named by every TCP call of the feeder (the interpreter may
    // also talk over a Unix socket of its host, e.g. NSS asking systemd-userdb who root is when
    // HOME is unset: that is traffic too, with its own peer, and left out here)
    let peers = query_rows(&db, "SELECT peer, family, address, port FROM net_peers WHERE family IN (2, 10)");
    assert_eq!(peers.len(), 1, "{peers:?}\n{stderr}");
    assert_eq!(
        (peers[0][1].as_u64(), peers[0][2].as_str(), peers[0][3].as_u64()),
        (Some(2), Some("127.0.0.1"), Some(port.into()))
    );
    let peer = peers[0][0].as_i64().unwrap();
    // the trace says the network was recorded whole
    let row = query_rows(&db, "SELECT complete, note, symbols FROM attachments WHERE kind = 'network'");
    assert_eq!(row.len(), 1, "{row:?}");
    assert_eq!((row[0][0].as_i64(), row[0][1].as_str()), (Some(1), Some("")), "{row:?}");
    assert!(row[0][2].as_str().unwrap().contains("sys_exit"), "{row:?}");
    let sends =
        query_rows(&db, "SELECT count(*), sum(arg0), min(arg2), max(arg2) FROM events WHERE source = 7 AND op = 1 AND arg2 IN (SELECT peer FROM net_peers WHERE family IN (2, 10))");
    assert_eq!(sends[0][0].as_u64(), Some(200), "one 8-byte request per step: {sends:?}");
    assert_eq!(sends[0][1].as_u64(), Some(1600));
    assert_eq!((sends[0][2].as_i64(), sends[0][3].as_i64()), (Some(peer), Some(peer)));
    // every byte of every batch came through a receive of the traced thread
    let received =
        query_u64(&db, &format!("SELECT sum(arg0) FROM events WHERE source = 7 AND op = 2 AND arg2 = {peer}"));
    assert_eq!(received, 200 * BATCH);
    // the five planted answers: five receives that waited 300 ms (and no other)
    let slow = query_u64(
        &db,
        &format!("SELECT count(*) FROM events WHERE source = 7 AND op = 2 AND duration >= 290000000 AND arg2 = {peer}"),
    );
    assert_eq!(slow, 5, "{stderr}");
    assert_eq!(
        query_u64(
            &db,
            &format!("SELECT count(*) FROM events WHERE source = 7 AND op = 3 AND ret_code = 0 AND arg2 = {peer}")
        ),
        1,
        "one connect"
    );
    // the connect's handshake: SYN_SENT, then ESTABLISHED, on the peer's socket
    let states = query_rows(&db, "SELECT arg0, arg1, arg2 FROM events WHERE source = 6 AND op = 2 ORDER BY timestamp");
    assert!(states.len() >= 2, "{states:?}");
    assert_eq!((states[0][1].as_i64(), states[1][1].as_i64()), (Some(2), Some(1)), "{states:?}");
    assert!(states.iter().all(|s| s[2].as_i64() == Some(peer)));
    // the untraced server's batches, counted in the kernel
    let untraced = query_u64(&db, "SELECT COALESCE(sum(arg0), 0) FROM events WHERE source = 7 AND op = 20");
    assert!(untraced >= 200 * BATCH, "untraced sends counted {untraced} bytes");

    let out = causeway().args(["explain", "--json", "--db"]).arg(&db).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let chain = v["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cause"] == "network_wait")
        .unwrap_or_else(|| panic!("no network_wait chain in {:#}", v["chains"]));
    assert_eq!(chain["id"], "c1", "the slow peer is the top finding: {:#}", v["chains"]);
    assert_eq!(chain["kind"], "feeding_gap");
    assert_eq!(chain["culprit"]["comm"], format!("127.0.0.1:{port}"));
    assert_eq!(chain["culprit"]["role"], "network_peer");
    // the five late batches (a gap the busy host stretched past 10 ms may join them)
    assert!(chain["calls"].as_u64().unwrap() >= 5, "{chain:#}");
    let stall = chain["stall_ns"].as_i64().unwrap();
    assert!(stall >= 5 * 290_000_000, "{stall}");
    // the evidence SQL recomputes the figure from the trace
    assert_eq!(chain["evidence"]["value"].as_i64(), Some(stall));
    let sql = chain["evidence"]["sql"].as_str().unwrap();
    assert_eq!(query_u64(&db, sql) as i64, stall);

    let stats = causeway().args(["stats", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains(&format!("127.0.0.1:{port}")) && text.contains("untraced processes:"), "{text}");

    // the exports draw each socket call as a slice named by its peer, with the wait inside it
    let json = dir.path().join("net.json");
    let out = causeway()
        .args(["export", "--format", "chrome", "--no-chains", "--db"])
        .arg(&db)
        .arg("--out")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let name = format!("net_recv 127.0.0.1:{port}");
    let begins =
        v["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == name.as_str() && e["ph"] == "B").count();
    let receives = query_u64(&db, "SELECT count(*) FROM events WHERE source = 7 AND op = 2");
    assert_eq!(begins as u64, receives, "one slice per receive");
    // and the timeline around a late receive names the peer
    let late = query_u64(&db, "SELECT id FROM events WHERE source = 7 AND op = 2 ORDER BY duration DESC LIMIT 1");
    let out = causeway().args(["timeline", "--db"]).arg(&db).args(["--around", &late.to_string()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("net_recv with 127.0.0.1:{port}")), "{text}");
}

/// A network namespace, removed when dropped.
struct Netns(&'static str);

impl Netns {
    fn new(name: &'static str) -> Netns {
        // one a killed run left behind
        let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("ip").args(["netns", "add", name]));
        ok(Command::new("ip").args(["-n", name, "link", "set", "lo", "up"]));
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", self.0]).status();
    }
}

#[test]
fn retransmits_of_a_traced_socket_are_recorded_with_its_peer() {
    require_root_to("trace with eBPF and make a network namespace");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("loss.db");
    let ns = Netns::new("cw-test-loss");
    let (mut server, port) = start_server(Some(ns.0), &[]);
    // a fifth of the segments reaching the server's port, dropped at random on arrival (a drop on
    // the way out is reported to the sender, which sends again without a retransmit)
    let rules = dir.path().join("loss.nft");
    std::fs::write(
        &rules,
        format!(
            "table inet cwloss {{\n chain in {{\n  type filter hook input priority 0; policy accept;\n  \
             tcp dport {port} tcp flags & (syn | fin | rst) == 0 numgen random mod 100 < 20 drop\n }}\n}}\n"
        ),
    )
    .unwrap();
    let nft = Command::new("ip").args(["netns", "exec", ns.0, "nft", "-f"]).arg(&rules).output().unwrap();
    assert!(nft.status.success(), "nft: {}", String::from_utf8_lossy(&nft.stderr));
    // the feeder uploads 64 KiB per step: its own segments are the ones lost and sent again
    let stderr = trace_feeder(&db, &["ip", "netns", "exec", ns.0], port, 40, 65536);
    server.wait();

    let peer = query_u64(&db, &format!("SELECT peer FROM net_peers WHERE address = '127.0.0.1' AND port = {port}"));
    let feeder = query_u64(&db, "SELECT pid FROM events WHERE source = 7 AND op = 3");
    let retransmits = query_rows(&db, "SELECT pid, arg2 FROM events WHERE source = 6 AND op = 1");
    assert!(!retransmits.is_empty(), "no retransmit recorded\n{stderr}");
    for r in &retransmits {
        assert_eq!((r[0].as_u64(), r[1].as_u64()), (Some(feeder), Some(peer)), "{retransmits:?}");
    }
    let stats = causeway().args(["stats", "--json", "--db"]).arg(&db).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let row = &v["network"]["peers"][0];
    assert_eq!(row["peer"], format!("127.0.0.1:{port}"));
    assert_eq!(row["retransmits"].as_u64(), Some(retransmits.len() as u64));
}

#[test]
fn without_the_network_probes_the_trace_says_the_network_was_not_recorded() {
    require_root_to("trace with eBPF");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("quiet.db");
    let (mut server, port) = start_server(None, &[]);
    let stderr = trace_feeder_with(&db, &["--no-network"], &[], port, 20, 0);
    server.wait();
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE source IN (6, 7)"), 0, "{stderr}");
    // cudaMalloc, then a cudaMemcpy and a cudaDeviceSynchronize per step
    assert_eq!(query_u64(&db, "SELECT count(*) FROM events WHERE source = 1"), 41, "the CUDA calls are all there");
    let note = query_rows(&db, "SELECT note FROM attachments WHERE kind = 'network'");
    assert_eq!(note.len(), 1);
    assert!(note[0][0].as_str().unwrap().contains("network not recorded"), "{note:?}");
    let stats = causeway().args(["stats", "--db"]).arg(&db).output().unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains("coverage: pid 0 (network): network not recorded"), "{text}");
}
