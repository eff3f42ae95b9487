//! Ingero DBs of every schema version open through the same TraceStore: v0.8 (integer ids), v0.9
//! (text "node:seq" ids, node/rank columns) from testdata, and v0.10 (events.comm,
//! event_aggregates_5s, annotations), built here with Ingero's v0.10 DDL since no shared DB has it.

use causeway_backends::*;

fn shared(name: &str) -> std::path::PathBuf {
    causeway_testdata::ingero_db(name)
}

#[test]
fn v0_8_and_v0_9_open_with_their_own_ids() {
    let v8 = SqliteStore::open(&shared("pytorch-dataloader-starvation.db")).unwrap();
    assert_eq!(v8.info().format, TraceFormat::Ingero { version: "0.8".into() });
    assert!(v8.info().sampled);
    let first = v8.events(&EventFilter::default()).unwrap();
    assert!(matches!(first[0].id, EventId::Int(_)));
    let v9 = SqliteStore::open(&shared("sample-cluster.db")).unwrap();
    assert_eq!(v9.info().format, TraceFormat::Ingero { version: "0.9".into() });
    assert!(v9.info().has_column("node"));
    let evs = v9.events(&EventFilter::default()).unwrap();
    assert_eq!(evs.len(), 600);
    let EventId::Text(id) = &evs[0].id else { panic!("v0.9 ids are text") };
    assert!(id.contains(':'), "{id}");
    // Time order, not id order.
    assert!(evs.windows(2).all(|w| w[0].event.ts_ns <= w[1].event.ts_ns));
    let again = v9.events_by_id(&[evs[5].id.clone()]).unwrap();
    assert_eq!(again[0].event, evs[5].event);
    assert_eq!(v9.sessions().unwrap().len(), 3);
    assert_eq!(v9.sessions().unwrap()[1].node, "gpu-node-02");
}

#[test]
fn v0_10_reads_comm_and_tolerates_new_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v10.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE events (id TEXT PRIMARY KEY, timestamp INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
           source INTEGER NOT NULL, op INTEGER NOT NULL, duration INTEGER NOT NULL, gpu_id INTEGER NOT NULL DEFAULT 0,
           arg0 INTEGER NOT NULL DEFAULT 0, arg1 INTEGER NOT NULL DEFAULT 0, ret_code INTEGER NOT NULL DEFAULT 0,
           stack_hash INTEGER NOT NULL DEFAULT 0, node TEXT NOT NULL DEFAULT '', rank INTEGER, local_rank INTEGER,
           world_size INTEGER, stack_ips TEXT NOT NULL DEFAULT '', cgroup_id INTEGER NOT NULL DEFAULT 0, comm TEXT NOT NULL DEFAULT '');
         CREATE TABLE schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO schema_info VALUES ('version', '0.10');
         CREATE TABLE event_aggregates_5s (bucket INTEGER, source INTEGER, op INTEGER, pid INTEGER, count INTEGER);
         CREATE TABLE annotations (id INTEGER PRIMARY KEY, timestamp INTEGER, text TEXT);
         INSERT INTO events (id, timestamp, pid, tid, source, op, duration, comm) VALUES
           ('n1:1', 1000, 77, 77, 1, 3, 5000, 'vllm-engine'),
           ('n1:2', 2000, 77, 78, 1, 5, 90000, 'vllm-worker'),
           ('n1:3', 3000, 77, 77, 3, 1, 1500, 'vllm-engine');",
    )
    .unwrap();
    drop(c);
    let before = std::fs::read(&path).unwrap();
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.info().format, TraceFormat::Ingero { version: "0.10".into() });
    assert!(!s.info().missing.iter().any(|m| m.contains("thread names")));
    assert_eq!(s.process_names().unwrap().get(&77).map(String::as_str), Some("vllm-engine"));
    let evs = s.events(&EventFilter::default()).unwrap();
    assert_eq!(evs[1].event.comm, "vllm-worker");
    assert!(evs[2].event.sched.is_none(), "Ingero sched_switch rows carry no preemptor");
    let d = s.describe_schema().unwrap();
    assert!(d.tables.iter().any(|t| t.name == "annotations" && !t.meaning.is_empty()));
    drop(s);
    assert_eq!(before, std::fs::read(&path).unwrap());
    assert!(!dir.path().join("v10.db-shm").exists());
}
