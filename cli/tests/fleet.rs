//! The fleet as users run it: `causeway ship` processes against a real PostgreSQL catalog (started by
//! `scripts/fleet-catalog.sh`), killed with SIGKILL mid-way and run again (exactly once), a catalog
//! server frozen with SIGSTOP under a shipper and resumed (no loss), `causeway trace --ship` of a
//! real (mock-NCCL) job whose straggler `causeway fleet stragglers` then names, the read side's
//! refusals, and `trace --ship` through a catalog stopped inside a mid-run and a final flush's
//! commit (waited out, exactly once) and for longer than the retry bound (exit 3, what is missing,
//! one `causeway ship` completes it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use causeway_backends::SyntheticJob;
use causeway_testdata::FleetCatalog;
use common::ok;

mod common;

const MS: i64 = 1_000_000;

fn job(straggler: u32) -> SyntheticJob {
    SyntheticJob {
        world: 4,
        steps: 200,
        period_ns: 10 * MS,
        start_ns: 1_790_000_000_000_000_000,
        comm_hash: 0x0a11_0ced,
        launches_per_step: 10,
        transfer_ns: 2 * MS,
        straggler: Some((straggler, 50, 69, 25 * MS)),
    }
}

fn causeway(catalog: &FleetCatalog, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_causeway"));
    c.envs(catalog.env()).env_remove("CAUSEWAY_LAKE").args(args);
    c
}

fn ship(catalog: &FleetCatalog, db: &Path, extra: &[&str]) -> Command {
    let data = catalog.data_path();
    let mut args = vec!["ship", "--db", db.to_str().unwrap(), "--lake"];
    let lake = catalog.ship_lake();
    args.push(&lake);
    args.extend(["--data-path", data.to_str().unwrap()]);
    args.extend(extra);
    let mut c = causeway(catalog, &args);
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    c
}

fn nodes(catalog: &FleetCatalog) -> serde_json::Value {
    let out = causeway(catalog, &["fleet", "nodes", "--json", "--lake", &catalog.read_lake()]).output().unwrap();
    serde_json::from_str(&ok(out, "fleet nodes")).unwrap()
}

fn flushes_of(catalog: &FleetCatalog, node: &str) -> i64 {
    let out = causeway(catalog, &["fleet", "nodes", "--json", "--lake", &catalog.read_lake()]).output().unwrap();
    if !out.status.success() {
        return 0;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v.as_array().and_then(|a| a.iter().find(|n| n["node"] == node)).and_then(|n| n["flushes"].as_i64()).unwrap_or(0)
}

fn wait_for_flush(catalog: &FleetCatalog, node: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while flushes_of(catalog, node) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the shipper ended before its first flush was seen");
        assert!(Instant::now() < deadline, "no flush of {node} within 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(pids: &[u32], sig: i32) {
    for &p in pids {
        // SAFETY: kill has no memory preconditions; the pids are the catalog's own processes.
        unsafe { libc::kill(p as i32, sig) };
    }
}

fn lake_count(catalog: &FleetCatalog, sql: &str) -> i64 {
    let out = causeway(catalog, &["fleet", "query", "--json", "--lake", &catalog.read_lake(), sql]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(out, sql)).unwrap();
    v["rows"][0][0].as_i64().unwrap_or_else(|| panic!("{sql}: {v}"))
}

fn local_count(catalog: &FleetCatalog, db: &Path, sql: &str) -> i64 {
    let out = causeway(catalog, &["query", "--json", "--db", db.to_str().unwrap(), sql]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(out, sql)).unwrap();
    v["rows"][0][0].as_i64().unwrap_or_else(|| panic!("{sql}: {v}"))
}

#[test]
fn shippers_resume_after_sigkill_and_wait_out_a_frozen_catalog() {
    let catalog = FleetCatalog::start("fleet-cli");
    let dir = tempfile::tempdir().unwrap();
    let job = job(2);
    let traces: Vec<PathBuf> = (0..4u32)
        .map(|r| {
            let p = dir.path().join(format!("rank{r}.db"));
            job.write_node(&p, &format!("gpu-{r}"), &[(r, 0, None)], 0).unwrap();
            p
        })
        .collect();

    // gpu-0: killed with SIGKILL after its first commit, then run again to the end
    let mut first = ship(&catalog, &traces[0], &["--batch", "60"]).spawn().unwrap();
    wait_for_flush(&catalog, "gpu-0", &mut first);
    first.kill().unwrap();
    let _ = first.wait();
    let partial = lake_count(&catalog, "SELECT count(*) FROM events WHERE node = 'gpu-0'");
    assert!(partial < 400, "killed mid-way, {partial} events already there");
    let text = ok(ship(&catalog, &traces[0], &["--batch", "60"]).output().unwrap(), "ship after kill");
    assert!(text.contains("node gpu-0"), "{text}");

    // gpu-1: the whole catalog server frozen under the shipper, then thawed
    let mut frozen = ship(&catalog, &traces[1], &["--batch", "60"]).spawn().unwrap();
    wait_for_flush(&catalog, "gpu-1", &mut frozen);
    let server = catalog.server_pids();
    assert!(server.len() >= 2, "postmaster and its children: {server:?}");
    signal(&server, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(2));
    let alive = frozen.try_wait().unwrap().is_none();
    signal(&server, libc::SIGCONT);
    assert!(alive, "the shipper waits for a frozen catalog instead of failing");
    let out = frozen.wait_with_output().unwrap();
    ok(out, "ship across a frozen catalog");

    // the other two at once
    let a = ship(&catalog, &traces[2], &[]).spawn().unwrap();
    let b = ship(&catalog, &traces[3], &[]).spawn().unwrap();
    ok(a.wait_with_output().unwrap(), "ship gpu-2");
    ok(b.wait_with_output().unwrap(), "ship gpu-3");

    // exactly once everywhere: 200 all-reduces + 200 syncs per rank, no id twice; the small tables
    // once too (gpu-0's second shipper replaced what the first had written)
    for (r, trace) in traces.iter().enumerate() {
        let q = |what: &str| lake_count(&catalog, &format!("SELECT {what} FROM events WHERE node = 'gpu-{r}'"));
        assert_eq!(q("count(*)"), 400, "gpu-{r}");
        assert_eq!(q("count(DISTINCT id)"), 400, "gpu-{r}");
        for table in ["sessions", "process_names", "process_ranks"] {
            let local = local_count(&catalog, trace, &format!("SELECT count(*) FROM {table}"));
            assert!(local > 0 || table == "process_names", "{table} of gpu-{r}");
            let lake = lake_count(&catalog, &format!("SELECT count(*) FROM {table} WHERE node = 'gpu-{r}'"));
            assert_eq!(lake, local, "{table} of gpu-{r}");
        }
    }
    // housekeeping (compaction, snapshot expiry, file cleanup) keeps every row exactly once
    let out =
        causeway(&catalog, &["fleet", "maintain", "--keep", "0s", "--lake", &catalog.ship_lake()]).output().unwrap();
    let text = ok(out, "fleet maintain");
    assert!(text.contains("merge adjacent files") && text.contains("delete unreferenced files"), "{text}");
    assert!(text.contains("summarize collectives") && text.contains("collectives read from their rows"), "{text}");
    assert_eq!(lake_count(&catalog, "SELECT count(*) FROM events"), 1600);
    assert_eq!(lake_count(&catalog, "SELECT count(DISTINCT node || ':' || id) FROM events"), 1600);
    let n = nodes(&catalog);
    assert_eq!(n.as_array().unwrap().len(), 4, "{n}");
    assert!(n.as_array().unwrap().iter().all(|x| x["finished"] == true), "{n}");

    // the straggler across the four nodes, in text and JSON
    let out = causeway(&catalog, &["fleet", "stragglers", "--lake", &catalog.read_lake()]).output().unwrap();
    let text = ok(out, "fleet stragglers");
    assert!(text.contains("rank 2 (node gpu-2"), "{text}");
    assert!(text.contains("#50-#69 (20 collectives"), "{text}");
    assert!(text.contains("gpu-0: ") && text.contains(" ± "), "every node's offset and bound: {text}");
    let out = causeway(&catalog, &["fleet", "stragglers", "--json", "--lake", &catalog.read_lake()]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(out, "stragglers --json")).unwrap();
    assert_eq!(v["stragglers"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["stragglers"][0]["late_collectives"], 20);
    assert_eq!(v["clocks"].as_array().unwrap().len(), 4);
    // what it cost, per node and per job: every other rank's wait, priced at the rate given
    let waited = v["stragglers"][0]["waited_ns"].as_i64().unwrap();
    assert_eq!(v["stragglers"][0]["cost"]["gpus"], 3, "the three ranks that waited: {v}");
    let out = causeway(&catalog, &["fleet", "costs", "--json", "--gpu-rate", "2", "--lake", &catalog.read_lake()])
        .output()
        .unwrap();
    let c: serde_json::Value = serde_json::from_str(&ok(out, "fleet costs --json")).unwrap();
    assert_eq!(c["per_node"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(c["per_node"][0]["name"], "gpu-2");
    assert_eq!((c["per_node"][0]["straggler_gpu_ns"].as_i64(), c["gpu_ns"].as_i64()), (Some(waited), Some(waited)));
    assert_eq!(c["per_job"].as_array().unwrap().len(), 1, "one job: {c}");
    let dollars = c["per_node"][0]["dollars"].as_f64().unwrap();
    assert!((dollars - waited as f64 / 3.6e12 * 2.0).abs() < 1e-9, "{c}");
    let out = causeway(&catalog, &["fleet", "costs", "--lake", &catalog.read_lake()]).output().unwrap();
    let text = ok(out, "fleet costs");
    assert!(text.contains("per node:") && text.contains("per job:") && text.contains("gpu-2"), "{text}");

    // a real MCP client (the Python MCP SDK) asks `causeway mcp --lake` for the straggler
    let venv = std::env::var_os("CAUSEWAY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/causeway/venv"));
    let out = Command::new(venv.join("bin/python"))
        .arg(causeway_testdata::repo_root().join("tests/mcp/fleet_client.py"))
        .args([env!("CARGO_BIN_EXE_causeway"), &catalog.read_lake(), "gpu-2", "2", "50", "69"])
        .envs(catalog.env())
        .output()
        .expect("run the MCP client (scripts/install-test-deps.sh installs it)");
    ok(out, "the fleet MCP client");

    // the read side: guarded SQL, no catalog internals, files or writes
    for bad in [
        "SELECT * FROM ducklake_list_files('lake', 'events')",
        "SELECT * FROM read_parquet('/etc/passwd')",
        "SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT 1')",
        "CALL ducklake_expire_snapshots('lake', older_than => now())",
        "DELETE FROM events",
    ] {
        let out = causeway(&catalog, &["fleet", "query", "--lake", &catalog.read_lake(), bad]).output().unwrap();
        assert!(!out.status.success(), "{bad} was run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("refused") || err.contains("not allowed") || err.contains("read-only"), "{bad}: {err}");
    }
    // and a password in the lake string is refused before anything connects
    let out =
        causeway(&catalog, &["fleet", "nodes", "--lake", "postgres:host=127.0.0.1 password=hunter2"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("PGPASSWORD") && !err.contains("hunter2"), "{err}");
}

#[test]
fn trace_ships_while_tracing_and_the_fleet_names_the_straggler() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test traces with eBPF and must run as root (CI does)");
    let catalog = FleetCatalog::start("fleet-trace");
    let build = causeway_testdata::mock_cuda_build();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("job.db");
    let lake = catalog.ship_lake();
    let data = catalog.data_path();
    let out = causeway(
        &catalog,
        &[
            "trace",
            "--nvml-hz",
            "0",
            "--node",
            "gpu-a",
            "--db",
            db.to_str().unwrap(),
            "--ship",
            &lake,
            "--ship-data-path",
            data.to_str().unwrap(),
            "--ship-interval",
            "500ms",
            "--",
            build.join("nccl_ranks").to_str().unwrap(),
            "--ranks",
            "2",
            "--steps",
            "400",
            "--straggler",
            "1",
            "--late-mode",
            "input",
            "--late-from",
            "10",
            "--late-to",
            "29",
            "--late-us",
            "20000",
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("shipped to the lake as node gpu-a"), "{stderr}");
    assert!(!stderr.contains("not shipped yet"), "{stderr}");
    let out = causeway(&catalog, &["fleet", "stragglers", "--json", "--lake", &catalog.read_lake()]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(out, "fleet stragglers")).unwrap();
    // the lake's answer is the one-host analysis of the local trace, figure for figure (one node:
    // its clock offset shifts every rank alike), and it names the planted straggler
    let store = causeway_backends::open_store(&db).unwrap();
    let local = causeway_analysis::find_stragglers(&store.nccl_calls(&Default::default()).unwrap());
    let remote = v["stragglers"].as_array().unwrap();
    assert_eq!(remote.len(), local.len(), "{v}");
    let (s, l) = (&remote[0], &local[0]);
    assert_eq!((s["node"].as_str(), s["rank"].as_i64()), (Some("gpu-a"), Some(1)), "{v}");
    assert_eq!(l.rank, 1);
    assert_eq!(s["late_collectives"].as_u64(), Some(l.late.len() as u64), "{v}");
    assert_eq!(s["waited_ns"].as_i64(), Some(l.waited_ns()), "{v}");
    // its cost: the other rank's GPU held for what it waited; priced only where the lake names the
    // GPU model (this trace sampled no NVML: no rate, none guessed)
    assert_eq!((s["cost"]["gpu_ns"].as_i64(), s["cost"]["gpus"].as_i64()), (Some(l.waited_ns()), Some(1)), "{v}");
    assert!(v["rate"]["none"].as_str().is_some_and(|w| w.starts_with("no rate")), "{v}");
    assert!(s["cost"].get("dollars").is_none(), "{v}");
    // most of the 20 planted collectives: the mock ranks run in real time on the test machine, and
    // on two busy cores a planted step's neighbour can take its lateness (one run found 17, the
    // steps at the range's ends and one inside it missing)
    let planted = l.late.iter().filter(|c| (10..=29).contains(&c.seq)).count();
    assert!(planted >= 15, "the planted steps 10-29 are late: {}", l.seq_ranges());
    // shipped while tracing: several flushes, not one at the end
    let n = nodes(&catalog);
    assert!(n[0]["flushes"].as_i64().unwrap() >= 2, "{n}\n{stderr}");
    // the drill-down: the node's own report, read from the lake, names the straggler too
    let out = causeway(&catalog, &["fleet", "explain", "--json", "--node", "gpu-a", "--lake", &catalog.read_lake()])
        .output()
        .unwrap();
    let e: serde_json::Value = serde_json::from_str(&ok(out, "fleet explain")).unwrap();
    assert!(e["gpu_calls"].as_u64().unwrap() > 0, "{e}");
    assert!(e["chains"].as_array().unwrap().iter().any(|c| c["kind"] == "straggler"), "{}", e["verdict"]);
    // the lake's collectives are the trace's, one for one
    let local = ok(
        causeway(&catalog, &["query", "--json", "--db", db.to_str().unwrap(), "SELECT count(*) FROM nccl_calls"])
            .output()
            .unwrap(),
        "local count",
    );
    let local: serde_json::Value = serde_json::from_str(&local).unwrap();
    assert_eq!(lake_count(&catalog, "SELECT count(*) FROM nccl_calls"), local["rows"][0][0].as_i64().unwrap());
    // the small tables changed while shipping (the processes appeared, the session stopped): the
    // lake holds their final rows, once
    let local_count = |sql: &str| local_count(&catalog, &db, sql);
    assert_eq!(lake_count(&catalog, "SELECT count(*) FROM sessions WHERE node = 'gpu-a'"), 1);
    assert_eq!(lake_count(&catalog, "SELECT count(*) FROM sessions WHERE node = 'gpu-a' AND stopped_at > 0"), 1);
    let names = local_count("SELECT count(*) FROM process_names");
    assert!(names >= 2, "the two ranks' processes at least: {names}");
    assert_eq!(lake_count(&catalog, "SELECT count(*) FROM process_names WHERE node = 'gpu-a'"), names);
    assert_eq!(
        lake_count(&catalog, "SELECT count(*) FROM process_ranks WHERE node = 'gpu-a'"),
        local_count("SELECT count(*) FROM process_ranks")
    );
}

/// How a test's catalog outage ends: restarted after a second, or not before the shipper gives up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outage {
    Restarted,
    PastTheBound,
}

/// `trace --ship` of a short one-rank job whose shipper stops inside the commit of its first
/// mid-run (`mid`) or final (`final`) flush (`CAUSEWAY_TEST_SHIP_PAUSE`), while the test stops the
/// catalog; the catalog comes back per `outage`. Returns the exit status and the trace's stderr.
fn trace_through_an_outage(
    catalog: &FleetCatalog,
    dir: &Path,
    node: &str,
    pause: &str,
    outage: Outage,
) -> (Option<i32>, String) {
    let hook = dir.join(format!("{node}.hook"));
    std::fs::create_dir_all(&hook).unwrap();
    let db = dir.join(format!("{node}.db"));
    let log = dir.join(format!("{node}.log"));
    let build = causeway_testdata::mock_cuda_build();
    let (lake, data) = (catalog.ship_lake(), catalog.data_path());
    let retry_for = if outage == Outage::Restarted { "60s" } else { "2s" };
    let mut child = causeway(
        catalog,
        &[
            "trace",
            "--nvml-hz",
            "0",
            "--quiet",
            "--node",
            node,
            "--db",
            db.to_str().unwrap(),
            "--ship",
            &lake,
            "--ship-data-path",
            data.to_str().unwrap(),
            "--ship-tier",
            "all",
            "--ship-interval",
            "200ms",
            "--ship-retry-for",
            retry_for,
            "--",
            build.join("nccl_ranks").to_str().unwrap(),
            "--ranks",
            "1",
            "--steps",
            "300",
        ],
    )
    .env(causeway_fleet::TEST_PAUSE_ENV, format!("{pause}:{}", hook.display()))
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !hook.join("paused").exists() {
        let done = child.try_wait().unwrap();
        assert!(
            done.is_none() && Instant::now() < deadline,
            "{node}: the {pause} flush never started ({done:?}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // the flush's rows are written, its commit not sent: the catalog goes away under it
    catalog.stop_server();
    std::fs::write(hook.join("resume"), b"").unwrap();
    if outage == Outage::Restarted {
        std::thread::sleep(Duration::from_secs(1));
        catalog.start_server();
    }
    let status = child.wait().unwrap();
    if outage == Outage::PastTheBound {
        catalog.start_server();
    }
    (status.code(), std::fs::read_to_string(&log).unwrap())
}

#[test]
fn trace_ship_waits_out_a_restarting_catalog_and_says_what_it_could_not_ship() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test traces with eBPF and must run as root (CI does)");
    let catalog = FleetCatalog::start("fleet-outage");
    let dir = tempfile::tempdir().unwrap();

    // the catalog stopped in a mid-run flush's commit, then in the final one's, and back within the
    // bound: the trace exits 0 and the lake gets everything
    for (node, pause) in [("gpu-mid", "mid"), ("gpu-final", "final")] {
        let (code, stderr) = trace_through_an_outage(&catalog, dir.path(), node, pause, Outage::Restarted);
        assert_eq!(code, Some(0), "{node}: {stderr}");
        assert!(stderr.contains(&format!("shipped to the lake as node {node}")), "{node}: {stderr}");
        assert!(stderr.contains("retrying"), "{node}: the outage was met and waited out: {stderr}");
    }

    // stopped for longer than the bound: exit 3 and one line saying what is missing and how to ship it
    let (code, stderr) = trace_through_an_outage(&catalog, dir.path(), "gpu-gone", "final", Outage::PastTheBound);
    let db = dir.path().join("gpu-gone.db");
    assert_eq!(code, Some(3), "{stderr}");
    let line = stderr.lines().find(|l| l.contains("not shipped")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("the lake lacks") && line.contains("of node gpu-gone's trace"), "{line}");
    assert!(line.contains(&format!("`causeway ship --db {}", db.display())), "{line}");
    // the lake knows it is behind, and where the rest is
    let n = nodes(&catalog);
    let gone = n.as_array().unwrap().iter().find(|x| x["node"] == "gpu-gone").unwrap_or_else(|| panic!("{n}"));
    assert_eq!(gone["finished"], false, "{n}");
    assert_eq!(gone["behind"].as_array().unwrap().len(), 1, "{n}");
    assert_eq!(gone["behind"][0]["local_path"], db.to_str().unwrap(), "{n}");
    let out = causeway(&catalog, &["fleet", "nodes", "--lake", &catalog.read_lake()]).output().unwrap();
    let text = ok(out, "fleet nodes");
    assert!(text.contains("gpu-gone: behind: the lake lacks") && text.contains("causeway ship --db"), "{text}");
    // one `causeway ship` completes it
    ok(ship(&catalog, &db, &["--tier", "all"]).output().unwrap(), "ship after the outage");

    // every node's rows exactly once, the same as its local trace
    let counts = |sql: &str| -> Vec<(String, i64, i64)> {
        let out =
            causeway(&catalog, &["fleet", "query", "--json", "--lake", &catalog.read_lake(), sql]).output().unwrap();
        let v: serde_json::Value = serde_json::from_str(&ok(out, sql)).unwrap();
        let rows = v["rows"].as_array().unwrap().iter();
        rows.map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap(), r[2].as_i64().unwrap())).collect()
    };
    let events = counts("SELECT node, count(*), count(DISTINCT id) FROM events GROUP BY node ORDER BY node");
    let nccl = counts("SELECT node, count(*), count(DISTINCT timestamp) FROM nccl_calls GROUP BY node ORDER BY node");
    let sessions = counts(
        "SELECT node, count(*), count(*) FILTER (WHERE stopped_at > 0) FROM sessions GROUP BY node ORDER BY node",
    );
    let names: Vec<&str> = events.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["gpu-final", "gpu-gone", "gpu-mid"]);
    for (i, node) in names.iter().enumerate() {
        let local = rusqlite::Connection::open(dir.path().join(format!("{node}.db"))).unwrap();
        let count = |sql: &str| local.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
        let local_events = count("SELECT count(*) FROM events");
        assert!(local_events > 0, "{node}");
        assert_eq!((events[i].1, events[i].2), (local_events, local_events), "{node}: every event once");
        let local_nccl = count("SELECT count(*) FROM nccl_calls");
        let local_times = count("SELECT count(DISTINCT timestamp) FROM nccl_calls");
        assert_eq!((nccl[i].1, nccl[i].2), (local_nccl, local_times), "{node}: every NCCL call once");
        assert_eq!((sessions[i].1, sessions[i].2), (1, 1), "{node}: its session once, stopped");
    }
    let n = nodes(&catalog);
    assert!(n.as_array().unwrap().iter().all(|x| x["finished"] == true && x["behind"] == serde_json::json!([])), "{n}");
}

/// A job whose rank 2 never enters all-reduce #41, traced with `--ship`: the lake's `fleet hangs`
/// names the collective, the ranks waiting in it and the rank that never arrived, with its node,
/// as the one-host explain does.
#[test]
fn a_hang_shipped_to_the_lake_names_the_rank_that_never_arrived_and_its_node() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test traces with eBPF and must run as root (CI does)");
    let catalog = FleetCatalog::start("fleet-hang");
    let build = causeway_testdata::mock_cuda_build();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("hung.db");
    let (lake, data) = (catalog.ship_lake(), catalog.data_path());
    let log = dir.path().join("hung.log");
    let status = causeway(
        &catalog,
        &[
            "trace",
            "--duration",
            "3s",
            "--kill-on-stop",
            "--nvml-hz",
            "0",
            "--node",
            "gpu-h",
            "--db",
            db.to_str().unwrap(),
            "--ship",
            &lake,
            "--ship-data-path",
            data.to_str().unwrap(),
            "--",
            build.join("nccl_ranks").to_str().unwrap(),
            "--ranks",
            "3",
            "--steps",
            "2000",
            "--bytes",
            "1048576",
            "--stuck",
            "2",
            "--stuck-at",
            "40",
        ],
    )
    .env_remove("MOCK_NCCL_TIMEOUT_S")
    .stdout(std::process::Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap())
    .status()
    .unwrap();
    // the ranks outlive their parent (the command the trace ended): killed when the test ends
    struct Ranks(Vec<u32>);
    impl Drop for Ranks {
        fn drop(&mut self) {
            signal(&self.0, libc::SIGKILL);
        }
    }
    let pids = ok(
        causeway(&catalog, &["query", "--json", "--db", db.to_str().unwrap(), "SELECT DISTINCT pid FROM nccl_calls"])
            .output()
            .unwrap(),
        "pids",
    );
    let pids: serde_json::Value = serde_json::from_str(&pids).unwrap();
    let _ranks =
        Ranks(pids["rows"].as_array().unwrap().iter().filter_map(|r| r[0].as_u64()).map(|p| p as u32).collect());
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    let out = causeway(&catalog, &["fleet", "hangs", "--json", "--lake", &catalog.read_lake()]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(out, "fleet hangs")).unwrap();
    let hangs = v.as_array().unwrap();
    assert_eq!(hangs.len(), 1, "{v}");
    let h = &hangs[0];
    assert_eq!(h["seq"].as_i64(), Some(41), "{h}");
    let ranks =
        |k: &str| -> Vec<i64> { h[k].as_array().unwrap().iter().map(|r| r["rank"].as_i64().unwrap()).collect() };
    assert_eq!(ranks("waiting"), [0, 1], "{h}");
    assert_eq!(ranks("missing"), [2], "{h}");
    assert_eq!(h["missing"][0]["node"], "gpu-h");
    assert_eq!(h["missing"][0]["last_seq"].as_i64(), Some(40), "{h}");
    // what it cost so far: the two waiting ranks' calls in flight, as their stored rows say, charged
    // to the node of the rank that never arrived
    let held = ok(
        causeway(
            &catalog,
            &[
                "fleet",
                "query",
                "--json",
                "--lake",
                &catalog.read_lake(),
                &format!(
                    "SELECT sum(d)::BIGINT FROM (SELECT pid, max(duration) AS d FROM events WHERE ret_code = -1
                     AND source IN (1, 4, 9) AND pid IN ({}, {}) GROUP BY pid)",
                    h["waiting"][0]["pid"], h["waiting"][1]["pid"]
                ),
            ],
        )
        .output()
        .unwrap(),
        "the waiting ranks' calls in flight",
    );
    let held: serde_json::Value = serde_json::from_str(&held).unwrap();
    let held = held["rows"][0][0].as_i64().unwrap();
    assert_eq!((h["cost"]["gpu_ns"].as_i64(), h["cost"]["gpus"].as_i64()), (Some(held), Some(2)), "{h}");
    let out = causeway(&catalog, &["fleet", "costs", "--json", "--lake", &catalog.read_lake()]).output().unwrap();
    let c: serde_json::Value = serde_json::from_str(&ok(out, "fleet costs --json")).unwrap();
    assert_eq!(c["per_node"][0]["name"], "gpu-h", "{c}");
    assert_eq!((c["per_node"][0]["hangs"].as_i64(), c["per_node"][0]["hang_gpu_ns"].as_i64()), (Some(1), Some(held)));
    // the same collective as the one-host explain names
    let out = causeway(&catalog, &["explain", "--json", "--db", db.to_str().unwrap()]).output().unwrap();
    let e: serde_json::Value = serde_json::from_str(&ok(out, "explain")).unwrap();
    let c = &e["chains"][0];
    assert_eq!(c["cause"], "rank_never_arrived", "{c}");
    assert!(c["op"].as_str().unwrap().ends_with("#41"), "{c}");
}
