//! The tracer writing through the real `SqliteSink`: what the workload made is in the database, the
//! scheduler detail columns survive the round trip, and losses under overload are stored with the
//! trace (produced = stored + lost, read back from the file).

mod common;

use causeway_backends::{open_store, EventFilter, QueryLimits, SqliteSink};
use causeway_model::SessionInfo;
use causeway_probes::TraceOptions;

fn trace_to_db(
    argv: &[&str],
    tweak: impl FnOnce(&mut TraceOptions),
) -> (tempfile::TempDir, std::path::PathBuf, causeway_probes::TraceReport, common::Workload) {
    let build = common::mock_build();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("trace.db");
    let out = dir.path().join("out.txt");
    let mut cmd = vec![build.join(argv[0]).to_string_lossy().into_owned()];
    cmd.extend(argv[1..].iter().map(|s| s.to_string()));
    let mut opts = TraceOptions {
        command: cmd.clone(),
        command_stdout: Some(out.clone()),
        cuda_libs: vec![build.join("libcudart.so.12")],
        ..Default::default()
    };
    tweak(&mut opts);
    let session = SessionInfo { command: cmd.join(" "), tool_version: "test".into(), ..Default::default() };
    let sink = SqliteSink::create(&db, session).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(causeway_probes::trace(opts, Box::new(sink), |_| {})).expect("trace");
    let w = common::Workload::parse(&std::fs::read_to_string(&out).unwrap());
    (dir, db, report, w)
}

fn scalar(store: &dyn causeway_backends::TraceStore, sql: &str) -> i64 {
    let r = store.query(sql, &QueryLimits::default()).unwrap_or_else(|e| panic!("{sql}: {e}"));
    r.rows[0][0].as_i64().unwrap_or_else(|| panic!("{sql}: {:?}", r.rows))
}

#[test]
fn a_traced_training_loop_lands_in_sqlite_exactly() {
    common::require_root();
    let (_d, db, report, w) = trace_to_db(&["train", "--iters", "25", "--churn", "2"], |_| {});
    assert_eq!(report.command_exit, Some(0));
    let store = open_store(&db).unwrap();
    let q = |s: u8, o: u16| {
        scalar(&*store, &format!("SELECT count(*) FROM events WHERE pid = {} AND source = {s} AND op = {o}", w.pid))
    };
    assert_eq!(q(1, 3) as u64, w.calls(&["cudaLaunchKernel"]));
    assert_eq!(q(4, 1) as u64, w.calls(&["cudaLaunchKernel"]));
    assert_eq!(q(1, 1) as u64, w.calls(&["cudaMalloc"]));
    assert_eq!(q(1, 5) as u64, w.calls(&["cudaStreamSynchronize"]));
    let all = store.events(&EventFilter { pid: Some(w.pid), ..Default::default() }).unwrap();
    let sw: Vec<_> = all.iter().filter(|e| e.event.sched.is_some()).collect();
    assert!(!sw.is_empty(), "no sched_switch rows read back");
    assert!(sw.iter().all(|e| !e.event.sched.as_ref().unwrap().next_comm.is_empty()));
    assert!(store.loss_counters().unwrap().iter().all(|l| l.count == 0));
}

#[test]
fn losses_under_overload_are_stored_with_the_trace() {
    common::require_root();
    let iters = 100_000u64;
    let (_d, db, report, w) = trace_to_db(&["launchloop", "--iters", &iters.to_string()], |o| {
        o.ring_cuda_bytes = 64 << 10;
        o.reader_delay_us = 20_000;
        o.host_probes = false;
    });
    assert_eq!(report.command_exit, Some(0));
    let store = open_store(&db).unwrap();
    let produced = 2 * w.calls(&["cudaLaunchKernel"]);
    let stored = scalar(
        &*store,
        &format!(
            "SELECT count(*) FROM events WHERE pid = {} AND ((source = 1 AND op = 3) OR (source = 4 AND op = 1))",
            w.pid
        ),
    ) as u64;
    let lost: u64 =
        store.loss_counters().unwrap().iter().filter(|l| l.source == 1 || l.source == 4).map(|l| l.count).sum();
    assert!(lost > 0, "no loss stored under overload");
    assert_eq!(stored + lost, produced, "stored {stored} + lost {lost} != produced {produced}");
}
