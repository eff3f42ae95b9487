//! The SQLite engine end to end: what a sink writes, the store reads back unchanged (scheduler
//! detail, stacks, names, sessions, loss counters), and the file it leaves is self-contained.

use causeway_backends::EngineWriter;
use causeway_backends::SyntheticTrace;
use causeway_backends::*;
use causeway_model::codes::{op, OpCode};
use causeway_model::time::TimeWindow;
use causeway_model::{LossKind, SessionInfo};

fn session(at: i64) -> SessionInfo {
    SessionInfo {
        started_at_ns: at,
        tool_version: "test".into(),
        kernel: "6.18".into(),
        pid_filter: "4821".into(),
        ..Default::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn events_come_back_exactly_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let mut synth = SyntheticTrace::new(3, 1_000_000_000);
    let events = synth.take(10_000);
    let mut expected = events.clone();
    expected.sort_by_key(|e| (e.ts_ns, e.tid, e.source, e.op));
    let summary = rt().block_on(async {
        let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(&path, session(1)).unwrap());
        for chunk in events.chunks(777) {
            sink.write_batch(chunk.to_vec()).await.unwrap();
        }
        sink.write_stacks(vec![StackRecord {
            hash: 99,
            ips: "[\"0x1\"]".into(),
            frames: "[{\"s\":\"main+0x1\",\"f\":\"a.out\"}]".into(),
        }])
        .await
        .unwrap();
        sink.write_process_name(4821, "python3".into(), 5).await.unwrap();
        sink.add_loss(3, LossKind::RingReserve, 17);
        sink.add_loss(1, LossKind::Decode, 2);
        sink.finish(2_000_000_000).await.unwrap()
    });
    assert_eq!(summary.events_written, 10_000);
    for side in ["t.db-wal", "t.db-shm"] {
        assert!(!dir.path().join(side).exists(), "{side} left behind");
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.info().format, TraceFormat::Native { schema_version: 1 });
    assert_eq!(store.info().events, 10_000);
    // everything a native trace records but a device timeline (none written)
    assert_eq!(store.info().missing, [NO_DEVICE_TIMELINE]);
    let mut back: Vec<_> = store.events(&EventFilter::default()).unwrap().into_iter().map(|s| s.event).collect();
    assert!(back.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns), "events come back in time order");
    back.sort_by_key(|e| (e.ts_ns, e.tid, e.source, e.op));
    assert_eq!(back, expected);
    assert!(back.iter().any(|e| e.sched.is_some()), "scheduler detail round-trips");
    let stacks = store.stacks(&[99, 5]).unwrap();
    assert_eq!(stacks.len(), 1);
    assert!(stacks[&99].frames.contains("main+0x1"));
    assert_eq!(store.process_names().unwrap().get(&4821).map(String::as_str), Some("python3"));
    let losses = store.loss_counters().unwrap();
    assert!(losses.iter().any(|l| l.source == 3 && l.kind == LossKind::RingReserve && l.count == 17));
    assert!(losses.iter().any(|l| l.source == 1 && l.kind == LossKind::Decode && l.count == 2));
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!((sessions[0].started_at_ns, sessions[0].stopped_at_ns), (1, 2_000_000_000));
    assert_eq!(sessions[0].pid_filter, "4821");
}

#[test]
fn filters_select_what_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let mut w = SqliteWriter::create(&path, &session(0)).unwrap();
    let events = SyntheticTrace::new(9, 0).take(5_000);
    w.write_batches([events.as_slice()]).unwrap();
    w.finish(1).unwrap();
    let store = SqliteStore::open(&path).unwrap();
    let mut sorted = events.clone();
    sorted.sort_by_key(|e| (e.ts_ns, e.tid, e.source, e.op));
    let mid = sorted[2_500].ts_ns;
    let f = EventFilter {
        window: TimeWindow { from_ns: Some(mid), to_ns: None },
        ops: Some(vec![op::CUDA_LAUNCH_KERNEL, op::SCHED_SWITCH]),
        tids: Some(vec![4822]),
        ..Default::default()
    };
    let want: Vec<_> = sorted
        .iter()
        .filter(|e| e.ts_ns >= mid && e.tid == 4822)
        .filter(|e| [op::CUDA_LAUNCH_KERNEL, op::SCHED_SWITCH].contains(&OpCode::new(e.source, e.op)))
        .cloned()
        .collect();
    let mut got: Vec<_> = store.events(&f).unwrap().into_iter().map(|s| s.event).collect();
    got.sort_by_key(|e| (e.ts_ns, e.tid, e.source, e.op));
    assert!(!want.is_empty());
    assert_eq!(got, want);
    let mut n = 0;
    let counted = store
        .scan_durations(&f, &mut |r| {
            assert!(r.ts_ns >= mid);
            n += 1;
        })
        .unwrap();
    assert_eq!((counted, n), (want.len() as u64, want.len()));
    let by_id = store.events_by_id(&[EventId::Int(1), EventId::Int(3)]).unwrap();
    assert_eq!(by_id.len(), 2);
}

#[test]
fn a_second_trace_appends_a_session_and_foreign_dbs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    for i in 0..2 {
        let mut w = SqliteWriter::create(&path, &session(i)).unwrap();
        w.write_batches([SyntheticTrace::new(i as u64 + 1, 0).take(10).as_slice()]).unwrap();
        w.finish(10).unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.sessions().unwrap().len(), 2);
    assert_eq!(store.info().events, 20);
    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE events (timestamp, pid, tid, source, op, duration)")
        .unwrap();
    let err = SqliteWriter::create(&foreign, &session(0)).err().expect("must refuse");
    assert!(err.to_string().contains("not a Causeway trace"), "{err}");
}

/// A finished trace records its extent so opening it does not count ten million rows; a session
/// appended later, or a recorded extent that no longer matches the rows, is counted again.
#[test]
fn the_extent_recorded_at_finish_is_the_counted_one_and_never_stale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let recorded = |path: &std::path::Path| -> Option<String> {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("SELECT value FROM schema_info WHERE key = 'finished_extent'", [], |r| r.get(0))
            .ok()
    };
    let counted = |path: &std::path::Path| -> (u64, i64, i64) {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*), min(timestamp), max(timestamp) FROM events", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap()
    };
    let info = |path: &std::path::Path| {
        let i = SqliteStore::open(path).unwrap().info().clone();
        (i.events, i.first_ns, i.last_ns)
    };
    for (i, n) in [(0u64, 500usize), (1, 300)] {
        let mut w = SqliteWriter::create(&path, &session(i as i64)).unwrap();
        // the writer forgets the extent as soon as it opens the trace
        assert_eq!(recorded(&path), None);
        w.write_batches([SyntheticTrace::new(i + 7, 1_000 * i as i64).take(n).as_slice()]).unwrap();
        w.finish(10).unwrap();
        assert!(recorded(&path).is_some());
        assert_eq!(info(&path), counted(&path));
    }
    assert_eq!(info(&path).0, 800);
    // the recorded extent is what opening reads (the rows are not counted again): one that ends
    // at the trace's last id is believed, even when planted
    let c = rusqlite::Connection::open(&path).unwrap();
    let max_id: i64 = c.query_row("SELECT max(id) FROM events", [], |r| r.get(0)).unwrap();
    c.execute("UPDATE schema_info SET value = ?1 WHERE key = 'finished_extent'", [format!("801 1 2 {max_id}")])
        .unwrap();
    assert_eq!(info(&path), (801, 1, 2));
    // a recorded extent whose last id is not the trace's is not believed
    c.execute("UPDATE schema_info SET value = '5 1 2 3' WHERE key = 'finished_extent'", []).unwrap();
    drop(c);
    assert_eq!(info(&path), counted(&path));
}

/// A finished trace packs its GPU calls into `call_blocks`, in time order, and `scan_slim` reads
/// them there (in that order: no sort here); a
/// writer that opens the trace again drops them (the trace reads through SQL until it finishes
/// and packs them again), and a damaged block is an error that says where, not a panic.
#[test]
fn call_blocks_hold_every_gpu_call_and_are_rebuilt_after_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    let gpu: Vec<u8> = causeway_model::codes::GPU_CALL_SOURCES.to_vec();
    let filter = EventFilter { sources: Some(gpu.clone()), ..Default::default() };
    let in_blocks = |path: &std::path::Path| -> Option<i64> {
        rusqlite::Connection::open(path).unwrap().query_row("SELECT sum(calls) FROM call_blocks", [], |r| r.get(0)).ok()
    };
    let gpu_rows = |path: &std::path::Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM events WHERE source IN (1, 4, 8, 9, 10)", [], |r| r.get(0))
            .unwrap()
    };
    let slim_by_sql_and_blocks = |path: &std::path::Path| {
        let store = SqliteStore::open(path).unwrap();
        let mut slim = Vec::new();
        store.scan_slim(&filter, &mut |c| slim.push(c)).unwrap();
        let by_sql: Vec<SlimEvent> = store.events(&filter).unwrap().iter().map(SlimEvent::of).collect();
        (slim, by_sql)
    };
    // the step rows (labels, and the calls that can end a step) have blocks of their own
    let step_filter = EventFilter { ops: Some(causeway_model::codes::step_ops()), pid: None, ..Default::default() };
    let step_rows = |path: &std::path::Path| -> (Option<i64>, Vec<SlimEvent>, Vec<SlimEvent>) {
        let in_step_blocks = rusqlite::Connection::open(path)
            .unwrap()
            .query_row("SELECT sum(calls) FROM step_blocks", [], |r| r.get(0))
            .ok();
        let store = SqliteStore::open(path).unwrap();
        let mut slim = Vec::new();
        store.scan_slim(&step_filter, &mut |c| slim.push(c)).unwrap();
        let by_sql: Vec<SlimEvent> = store.events(&step_filter).unwrap().iter().map(SlimEvent::of).collect();
        (in_step_blocks, slim, by_sql)
    };
    for (i, n) in [(0u64, 150_000usize), (1, 2_000)] {
        let mut w = SqliteWriter::create(&path, &session(i as i64)).unwrap();
        assert_eq!(in_blocks(&path), None, "a writer that opens the trace drops its blocks");
        assert_eq!(step_rows(&path).0, None, "and its step blocks");
        w.write_batches([SyntheticTrace::new(i + 3, 10_000_000_000 * i as i64).take(n).as_slice()]).unwrap();
        w.finish(10).unwrap();
        // 150,000 events hold more GPU calls than one block
        assert_eq!(in_blocks(&path), Some(gpu_rows(&path)));
        let (slim, by_sql) = slim_by_sql_and_blocks(&path);
        assert!(slim.len() > 65_536 && slim == by_sql, "{} calls from the blocks, {} by SQL", slim.len(), by_sql.len());
        let (in_step_blocks, slim, by_sql) = step_rows(&path);
        assert!(
            !slim.is_empty() && slim == by_sql,
            "{} step rows from the blocks, {} by SQL",
            slim.len(),
            by_sql.len()
        );
        assert_eq!(in_step_blocks, Some(by_sql.len() as i64), "the step blocks hold the step rows only");
    }
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute("UPDATE call_blocks SET data = substr(data, 1, 100) WHERE block = 1", []).unwrap();
    drop(c);
    let err = SqliteStore::open(&path).unwrap().scan_slim(&filter, &mut |_| ()).unwrap_err().to_string();
    assert!(err.contains("call_blocks: block 1: cut short"), "{err}");
}

/// A reader of the live trace (the shipper of `trace --ship` between polls, a live `causeway mcp`)
/// keeps SQLite from leaving WAL mode: finishing waits for it to let go, and a reader that never
/// does leaves a readable WAL-mode file, never a failed trace.
#[test]
fn a_reader_attached_at_finish_never_fails_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    // A reader that lets go after 300 ms: the file ends self-contained.
    let path = dir.path().join("brief.db");
    let mut w = SqliteWriter::create(&path, &session(0)).unwrap();
    w.write_batches([SyntheticTrace::new(1, 0).take(1_000).as_slice()]).unwrap();
    let reader = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let n: i64 = reader.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1_000);
    let let_go = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(reader);
    });
    assert_eq!(w.finish(10).unwrap(), 1_000);
    let_go.join().unwrap();
    assert!(!dir.path().join("brief.db-wal").exists(), "the WAL is checkpointed away once the reader left");
    assert_eq!(SqliteStore::open(&path).unwrap().info().events, 1_000);

    // A reader that holds on: the trace still finishes, every event readable.
    let path = dir.path().join("held.db");
    let mut w = SqliteWriter::create(&path, &session(0)).unwrap();
    w.write_batches([SyntheticTrace::new(2, 0).take(500).as_slice()]).unwrap();
    let reader = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let _: i64 = reader.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap();
    assert_eq!(w.finish(10).unwrap(), 500);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.info().events, 500);
    assert_eq!(store.sessions().unwrap()[0].stopped_at_ns, 10);
    drop(reader);
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bp.db");
    let mut sink = SqliteSink::with_queue(&path, session(0), 1).unwrap();
    let mut synth = SyntheticTrace::new(5, 0);
    let (mut queued, mut dropped) = (0u64, 0u64);
    for _ in 0..200 {
        let batch = synth.take(2_000);
        let n = batch.len() as u64;
        if sink.try_write_batch(batch) {
            queued += n
        } else {
            dropped += n
        }
    }
    assert!(dropped > 0, "a one-batch queue never filled");
    let summary = rt().block_on(Box::new(sink).finish(1)).unwrap();
    assert_eq!(summary.events_written, queued);
    let store = SqliteStore::open(&path).unwrap();
    let lost: u64 =
        store.loss_counters().unwrap().iter().filter(|l| l.kind == LossKind::SinkBackpressure).map(|l| l.count).sum();
    // produced = stored + counted lost
    assert_eq!(store.info().events + lost, 400_000);
}

#[test]
fn the_schema_describes_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let mut w = SqliteWriter::create(&path, &session(0)).unwrap();
    w.write_batches([SyntheticTrace::new(1, 0).take(1000).as_slice()]).unwrap();
    w.finish(1).unwrap();
    let d = SqliteStore::open(&path).unwrap().describe_schema().unwrap();
    let events = d.tables.iter().find(|t| t.name == "events").unwrap();
    assert_eq!(events.rows, 1000);
    let next_comm = events.columns.iter().find(|c| c.name == "next_comm").unwrap();
    assert!(next_comm.meaning.contains("took the CPU"));
    let launch = d.codes.iter().find(|c| c.name == "cudaLaunchKernel").unwrap();
    assert!(launch.events > 400);
    assert!(d.tables.iter().any(|t| t.name == "prev_states" && t.rows == 5));
    // Ingero DB: names for codes its stale lookup table lacks still come out right.
    let ingero = causeway_testdata::ingero_db("sample-cluster.db");
    let d = SqliteStore::open(&ingero).unwrap().describe_schema().unwrap();
    assert!(d.codes.iter().any(|c| c.source == 5 && c.op == 1 && c.name == "block_read" && c.events == 98));
    assert!(d.notes.iter().any(|n| n.contains("who took the CPU")));
}
