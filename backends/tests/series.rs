//! A trace written as a series of files (rollover by size, retention by total size, a restart)
//! reads as the same trace written as one file: the same events with the same ids, the same
//! sessions, names, stacks and loss totals, the same device timeline with the same launching calls,
//! through the typed scans and through guarded SQL; each part is a standalone trace; nothing is
//! lost at a rollover.

use std::path::Path;

use causeway_backends::sqlite::series::list_parts;
use causeway_backends::*;
use causeway_model::time::TimeWindow;
use causeway_model::{Event, GpuClockSync, GpuDevice, GpuOp, GpuOpKind, GpuTimelineNote, LossKind, SessionInfo};

fn session(at: i64) -> SessionInfo {
    SessionInfo { started_at_ns: at, tool_version: "test".into(), hostname: "h1".into(), ..Default::default() }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

const EVENTS: usize = 60_000;

/// The device timeline of one batch of events: a kernel for each of its first five launches, its API
/// span the launch's own, with a calibration, its process's device (once) and a note.
fn timeline_of(events: &[Event], first: bool) -> GpuTimelinePart {
    let launch = causeway_model::codes::op::CUDA_LAUNCH_KERNEL;
    let ops: Vec<GpuOp> = events
        .iter()
        .filter(|e| launch.is(e.source, e.op))
        .take(5)
        .map(|e| GpuOp {
            pid: e.pid,
            device: 0,
            context: 1,
            stream: 7,
            kind: GpuOpKind::Kernel,
            start_ns: e.ts_ns + e.dur_ns + 10_000,
            end_ns: e.ts_ns + e.dur_ns + 60_000,
            correlation: e.ts_ns as u32,
            name: "_Z4gemmIfEvPKfi".into(),
            bytes: 0,
            launch_tid: e.tid,
            launch_start_ns: e.ts_ns + 100,
            launch_end_ns: e.ts_ns + e.dur_ns - 100,
            launch_cbid: GpuOp::RUNTIME_CBID_BASE + 211,
            launch_event_id: 0,
        })
        .collect();
    let at = events[0].ts_ns;
    GpuTimelinePart {
        devices: if first {
            let pids: std::collections::BTreeSet<u32> = ops.iter().map(|o| o.pid).collect();
            pids.into_iter()
                .map(|pid| GpuDevice { pid, device: 0, uuid: "GPU-1".into(), name: "H100".into(), nvml_index: 0 })
                .collect()
        } else {
            Vec::new()
        },
        clock_syncs: vec![GpuClockSync { pid: events[0].pid, cupti_ns: at / 2, trace_ns: at, error_ns: 900 }],
        notes: vec![GpuTimelineNote {
            pid: events[0].pid,
            ts_ns: at,
            kind: "dropped".into(),
            count: 1,
            detail: "one".into(),
        }],
        ops,
    }
}

/// Write the same events, stacks, names, losses and device timeline into `sink`, losses spread
/// between batches; each timeline part after the flush that commits its launches (so a series
/// holds them in the same part, where they are resolved).
fn write_all(mut sink: Box<dyn EventSink>, seed: u64) -> SinkSummary {
    let mut synth = SyntheticTrace::new(seed, 1_000_000_000);
    let events = synth.take(EVENTS);
    rt().block_on(async {
        for (i, chunk) in events.chunks(500).enumerate() {
            sink.write_batch(chunk.to_vec()).await.unwrap();
            if i % 10 == 0 {
                sink.write_stacks(vec![StackRecord {
                    hash: 1000 + i as i64,
                    ips: format!("[\"0x{i:x}\"]"),
                    frames: format!("[{{\"s\":\"f{i}+0x1\",\"f\":\"a.out\"}}]"),
                }])
                .await
                .unwrap();
                sink.write_process_name(4000 + i as u32, format!("proc-{i}"), i as i64).await.unwrap();
                sink.add_loss(3, LossKind::RingReserve, 7);
                sink.add_loss(1, LossKind::Decode, 1);
                sink.flush().await.unwrap();
                sink.write_gpu_timeline(timeline_of(chunk, i == 0)).await.unwrap();
            }
        }
        sink.finish(9_000_000_000).await.unwrap()
    })
}

fn small_parts() -> RollPolicy {
    RollPolicy { max_part_bytes: 256 << 10, ..RollPolicy::default() }
}

fn sql(store: &dyn TraceStore, q: &str) -> Vec<Vec<serde_json::Value>> {
    store.query(q, &QueryLimits::default()).unwrap_or_else(|e| panic!("{q}: {e}")).rows
}

fn events_in_part(path: &Path) -> u64 {
    let part = SqliteStore::open(path).unwrap_or_else(|e| panic!("{} opens alone: {e}", path.display()));
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok", "{} passes the integrity check", path.display());
    part.info().events
}

#[test]
fn a_series_reads_as_the_same_trace_as_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.db");
    let series = dir.path().join("series");
    let single = write_all(Box::new(SqliteSink::create(&one, session(1)).unwrap()), 5);
    let tiny_parts = RollPolicy { max_part_bytes: 128 << 10, ..RollPolicy::default() };
    let rolled = write_all(create_series_sink(&series, session(1), tiny_parts).unwrap(), 5);
    assert_eq!(single.events_written, EVENTS as u64);
    assert_eq!(rolled.events_written, EVENTS as u64, "nothing lost at a rollover");
    assert_eq!(rolled.losses, single.losses);

    let parts = list_parts(&series).unwrap();
    assert!(parts.len() > 11, "more parts than SQLite's default of 10 attached databases: {}", parts.len());
    let per_part: Vec<u64> = parts.iter().map(|(_, p)| events_in_part(p)).collect();
    assert_eq!(per_part.iter().sum::<u64>(), EVENTS as u64, "produced = stored across the parts: {per_part:?}");
    for (_, p) in &parts {
        let part = SqliteStore::open(p).unwrap();
        assert_eq!(part.sessions().unwrap().len(), 1);
        // every part names the stacks and processes seen before it (a standalone trace)
        assert!(part.stacks(&[1000]).unwrap().contains_key(&1000), "{} carries the first stack", p.display());
        assert_eq!(part.process_names().unwrap().get(&4000).map(String::as_str), Some("proc-0"));
        assert!(!part.gpu_devices().unwrap().is_empty(), "{} carries the devices", p.display());
    }

    let a = SqliteStore::open(&one).unwrap();
    let b = SqliteStore::open(&series).unwrap();
    assert_eq!(b.info().path, series);
    assert_eq!(
        (b.info().events, b.info().first_ns, b.info().last_ns),
        (a.info().events, a.info().first_ns, a.info().last_ns)
    );
    assert!(b.info().missing.is_empty(), "{:?}", b.info().missing);
    assert_eq!(
        b.events(&EventFilter::default()).unwrap(),
        a.events(&EventFilter::default()).unwrap(),
        "same events, same ids"
    );
    let mid = (a.info().first_ns + a.info().last_ns) / 2;
    let window = EventFilter::window(TimeWindow { from_ns: Some(mid - 50_000_000), to_ns: Some(mid + 50_000_000) });
    assert_eq!(b.events(&window).unwrap(), a.events(&window).unwrap());
    let (sa, sb) = (a.sessions().unwrap(), b.sessions().unwrap());
    assert_eq!(sb.len(), 1, "one session across the parts: {sb:?}");
    assert_eq!(
        (sb[0].id, sb[0].started_at_ns, sb[0].stopped_at_ns),
        (sa[0].id, sa[0].started_at_ns, sa[0].stopped_at_ns)
    );
    assert_eq!(b.loss_counters().unwrap(), a.loss_counters().unwrap(), "each part's share sums to the session's");
    assert_eq!(b.process_names().unwrap(), a.process_names().unwrap());
    let hashes: Vec<i64> = (0..120).map(|i| 1000 + i).collect();
    assert_eq!(b.stacks(&hashes).unwrap(), a.stacks(&hashes).unwrap());
    // the device timeline: the same ops, each part's resolved against its own events as one file's
    let ops = |s: &SqliteStore, w: &TimeWindow| {
        let mut v = Vec::new();
        s.scan_gpu_ops(w, &mut |o| v.push(o)).unwrap();
        v
    };
    let one_ops = ops(&a, &TimeWindow::ALL);
    assert_eq!(one_ops.len(), 5 * EVENTS / 500 / 10, "fixture: five launches per timeline part");
    let launches: Vec<EventId> = one_ops.iter().map(|o| EventId::Int(o.launch_event_id)).collect();
    let calls = a.events_by_id(&launches).unwrap();
    assert_eq!(calls.len(), one_ops.len(), "every op names its launch");
    for c in &calls {
        assert!(one_ops.iter().any(|o| o.launch_start_ns == c.event.ts_ns + 100 && o.launch_tid == c.event.tid));
    }
    assert_eq!(ops(&b, &TimeWindow::ALL), one_ops);
    let w = TimeWindow { from_ns: Some(mid - 50_000_000), to_ns: Some(mid + 50_000_000) };
    assert_eq!(ops(&b, &w), ops(&a, &w));
    assert_eq!(b.gpu_clock_syncs().unwrap(), a.gpu_clock_syncs().unwrap());
    assert_eq!(b.gpu_devices().unwrap(), a.gpu_devices().unwrap(), "the carried devices once each");
    assert_eq!(b.gpu_timeline_notes().unwrap(), a.gpu_timeline_notes().unwrap());
    assert_eq!(
        b.duration_summary(&window, &[500, 990], true).unwrap(),
        a.duration_summary(&window, &[500, 990], true).unwrap()
    );
    let ids = [EventId::Int(1), EventId::Int(EVENTS as i64 / 2), EventId::Int(EVENTS as i64)];
    let by_id = |s: &SqliteStore| {
        let mut found = s.events_by_id(&ids).unwrap();
        found.sort_by(|x, y| x.id.cmp(&y.id));
        found
    };
    assert_eq!(by_id(&b), by_id(&a));
    for q in [
        "SELECT count(*), count(DISTINCT id), sum(duration), min(timestamp), max(timestamp) FROM events",
        "SELECT source, kind, count FROM loss_counters ORDER BY source, kind",
        "SELECT count(*) FROM sessions",
        "SELECT count(*) FROM stack_traces",
        "SELECT op, count(*) FROM events WHERE source = 1 GROUP BY op ORDER BY op",
        "SELECT count(*), sum(launch_event_id), min(start_ns), max(end_ns) FROM gpu_ops",
        "SELECT pid, device, uuid FROM gpu_devices ORDER BY pid, device",
    ] {
        assert_eq!(sql(&b, q), sql(&a, q), "{q}");
    }

    // guarded SQL cannot change how the parts are joined
    for hostile in ["DROP VIEW events", "DETACH DATABASE part_1", "CREATE TEMP VIEW x AS SELECT 1"] {
        assert!(b.query(hostile, &QueryLimits::default()).is_err(), "{hostile} is refused");
    }
    assert_eq!(sql(&b, "SELECT count(*) FROM events")[0][0], EVENTS as u64);

    // `cut` (and `convert`) read the series as one trace
    let whole = dir.path().join("whole.db");
    let report = cut(&series, &whole, None, &CutScope::default(), &mut |_, _| {}).unwrap();
    assert_eq!(report.events, EVENTS as u64);
    let c = SqliteStore::open(&whole).unwrap();
    assert_eq!(c.events(&window).unwrap(), a.events(&window).unwrap());
    assert_eq!(ops(&c, &TimeWindow::ALL), one_ops, "the device timeline, its launches resolved again");
}

#[test]
fn retention_removes_the_oldest_parts_and_a_restart_continues_the_series() {
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("series");
    let policy = RollPolicy { max_total_bytes: Some(4 * (256 << 10)), ..small_parts() };
    let first = write_all(create_series_sink(&series, session(1), policy).unwrap(), 7);
    assert_eq!(first.events_written, EVENTS as u64);
    let parts = list_parts(&series).unwrap();
    assert!(parts[0].0 > 1, "the oldest parts were removed: {parts:?}");
    let on_disk: u64 = std::fs::read_dir(&series).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    // a finished part may stand over its size by the last commit group; the live part is kept
    assert!(on_disk <= 6 * (256 << 10), "the series stays near its size: {on_disk} bytes in {parts:?}");
    let kept: u64 = parts.iter().map(|(_, p)| events_in_part(p)).sum();
    let store = SqliteStore::open(&series).unwrap();
    assert_eq!(store.info().events, kept);
    assert!(kept < EVENTS as u64);
    let note = store.info().missing.join(" ");
    assert!(note.contains(&format!("starts at part {}", parts[0].0)) && note.contains("retention"), "{note}");

    // a restart (without retention this time, so its first part stays): a new part, a new
    // session, ids going on
    let last_id = sql(&store, "SELECT max(id) FROM events")[0][0].as_i64().unwrap();
    drop(store);
    let second = write_all(create_series_sink(&series, session(20_000_000_000), small_parts()).unwrap(), 8);
    assert_eq!(second.events_written, EVENTS as u64);
    let store = SqliteStore::open(&series).unwrap();
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.last().map(|s| s.id), Some(2), "{sessions:?}");
    let min_new = sql(&store, "SELECT min(id) FROM events WHERE session_id = 2")[0][0].as_i64().unwrap();
    assert_eq!(min_new, last_id + 1, "event ids go on across the restart");
    let distinct = sql(&store, "SELECT count(*) = count(DISTINCT id) FROM events");
    assert_eq!(distinct[0][0], 1);
}

#[test]
fn bad_series_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = SqliteStore::open(&empty).err().expect("an empty directory is no trace").to_string();
    assert!(err.contains("without trace parts"), "{err}");
    let policy = RollPolicy { max_total_bytes: Some(1000), ..small_parts() };
    let err = create_series_sink(&dir.path().join("s"), session(1), policy).err().expect("refused").to_string();
    assert!(err.contains("below one part"), "{err}");
    let file = dir.path().join("file.db");
    std::fs::write(&file, b"x").unwrap();
    let err = create_series_sink(&file, session(1), small_parts()).err().expect("refused").to_string();
    assert!(err.contains("is a file"), "{err}");
}

#[test]
fn a_restart_removes_what_a_cut_short_rollover_left() {
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("series");
    let first = write_all(create_series_sink(&series, session(1), small_parts()).unwrap(), 9);
    let parts = list_parts(&series).unwrap();
    let next = parts.last().unwrap().0 + 1;
    // a kill during a rollover: the next part created without its tables, and an empty file after it
    rusqlite::Connection::open(series.join(format!("{next:06}.db")))
        .unwrap()
        .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE half (x)")
        .unwrap();
    std::fs::write(series.join(format!("{:06}.db", next + 1)), b"").unwrap();
    // read before the restart: the parts before the cut-short one, and a note saying so
    let store = SqliteStore::open(&series).unwrap();
    assert_eq!(store.info().events, first.events_written);
    let note = store.info().missing.join(" ");
    assert!(note.contains(&format!("part {next}")) && note.contains("holds no table"), "{note}");
    drop(store);
    let second = write_all(create_series_sink(&series, session(2), small_parts()).unwrap(), 10);
    let store = SqliteStore::open(&series).unwrap();
    assert_eq!(store.info().events, first.events_written + second.events_written);
    assert_eq!(store.sessions().unwrap().len(), 2);
    let after = list_parts(&series).unwrap();
    assert_eq!(
        after.iter().find(|(s, _)| *s >= next).map(|p| p.0),
        Some(next),
        "the series goes on at the cut-short number"
    );
}

/// Leave a hot rollback journal beside `path`, as a writer killed in the middle of a
/// rollback-journal transaction leaves it (a Causeway writer makes one: the switch of a finished
/// part out of WAL mode). A child process, so that its lock dies with it, as a killed writer's;
/// the page is changed and changed back, so the file itself holds the committed trace, and
/// `synchronous=OFF` writes the journal's magic at once (a writer killed after its journal's sync).
fn leave_hot_journal(path: &Path) {
    let script = "import os, sqlite3, sys\n\
                  c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                  c.execute('PRAGMA journal_mode=DELETE')\n\
                  c.execute('PRAGMA synchronous=OFF')\n\
                  c.execute('BEGIN IMMEDIATE')\n\
                  c.execute(\"UPDATE schema_info SET value = value || 'x'\")\n\
                  c.execute('UPDATE schema_info SET value = substr(value, 1, length(value) - 1)')\n\
                  os._exit(0)\n";
    let status = std::process::Command::new("python3").arg("-c").arg(script).arg(path).status().unwrap();
    assert!(status.success());
    let refused = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0)));
    assert!(
        matches!(&refused, Err(rusqlite::Error::SqliteFailure(e, _)) if e.extended_code == 776),
        "the fixture leaves a hot journal (SQLITE_READONLY_ROLLBACK on a plain read-only open): {refused:?}"
    );
}

#[test]
fn a_part_killed_while_leaving_wal_mode_reads_and_the_series_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let series = dir.path().join("series");
    let first = write_all(create_series_sink(&series, session(1), small_parts()).unwrap(), 11);
    let parts = list_parts(&series).unwrap();
    assert!(parts.len() >= 3, "{parts:?}");
    // an older part and the newest: the restart reads the newest part's last ids
    for (_, p) in [&parts[1], parts.last().unwrap()] {
        leave_hot_journal(p);
    }
    let store = SqliteStore::open(&series).unwrap();
    assert_eq!(store.info().events, first.events_written);
    let alone = SqliteStore::open(&parts[1].1).unwrap();
    assert!(alone.info().events > 0);
    drop((store, alone));
    let second = write_all(create_series_sink(&series, session(2), small_parts()).unwrap(), 12);
    let store = SqliteStore::open(&series).unwrap();
    assert_eq!(store.info().events, first.events_written + second.events_written);
    let distinct = sql(&store, "SELECT count(*) = count(DISTINCT id) FROM events");
    assert_eq!(distinct[0][0], 1, "event ids go on past the part that was cut short");
}
