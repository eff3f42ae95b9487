//! One conformance suite for every storage engine: the same test functions run against SQLite
//! always and DuckDB under the `duckdb` feature (`conformance!` below makes one module per engine),
//! so a behaviour that differs fails the suite on that engine.
//!
//! Covered: write and read back exactly (ids, order, scheduler detail, stacks, names, losses,
//! sessions, launch configurations, kernel names, attachments: see `launch_tables/`; the device
//! timeline and the launching calls of its ops: see `gpu_timeline/`), every typed query and its filters (full, streamed, slim and per-thread names), the duration summary (scanned, and computed in DuckDB's SQL)
//! against the Rust definition, the schema description, appending sessions, guarded SQL with its
//! limits, and bad input (missing, empty, garbage files, directories, foreign files).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use causeway_backends::summary::{nearest_rank, summarize_by_scan};
use causeway_backends::SyntheticTrace;
use causeway_backends::*;
use causeway_model::codes::{op, OpCode, Source};
use causeway_model::time::TimeWindow;
use causeway_model::{Event, LossCounter, LossKind, SessionInfo};

mod footprint;
mod gpu_timeline;
mod guard_common;
mod launch_tables;
mod nvml_tables;

const N: usize = 20_000;

fn session(at: i64) -> SessionInfo {
    SessionInfo {
        started_at_ns: at,
        tool_version: "conformance".into(),
        kernel: "6.18".into(),
        hostname: "h".into(),
        node: "n1".into(),
        pid_filter: "4821".into(),
        command: "python3 train.py".into(),
        flags: "stacks=true".into(),
        gpu_model: "H100".into(),
        gpu_driver: "570".into(),
        cuda_version: "12.8".into(),
        tracer_pid: 9999,
        ..Default::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn file(dir: &Path, b: Engine, name: &str) -> PathBuf {
    dir.join(format!("{name}.{}", b.extension()))
}

/// A finished trace of `N` synthetic events (written in chunks, not in time order), a stack, two
/// process names, loss counters and [`launch_tables::Fixture`] (most launches with a launch
/// configuration); returns the events as the store must give them back.
fn write_trace(path: &Path, b: Engine, seed: u64) -> Vec<StoredEvent> {
    let mut events = SyntheticTrace::new(seed, 1_000_000_000).take(N);
    let fixture = launch_tables::Fixture::new();
    let timeline = gpu_timeline::Fixture::new();
    fixture.tag_launches(&mut events);
    // Threads renamed half-way (as worker threads are right after they start), so a thread's first
    // and latest names differ.
    for e in events.iter_mut().skip(N / 2).filter(|e| !e.comm.is_empty()) {
        e.comm = format!("worker-{}", e.tid % 3);
    }
    // a few GPU calls that failed, and one still in flight at the end (the rows a `failed` filter reads)
    let gpu: Vec<usize> =
        (0..events.len()).filter(|&i| causeway_model::codes::is_gpu_call_source(events[i].source)).collect();
    for (k, &i) in gpu.iter().step_by(97).enumerate() {
        events[i].ret_code = if k == 0 { causeway_model::codes::RET_IN_FLIGHT } else { 2 };
    }
    let summary = rt().block_on(async {
        let mut sink = create_sink(path, session(1), Some(b)).unwrap();
        for chunk in events.chunks(777) {
            sink.write_batch(chunk.to_vec()).await.unwrap();
        }
        let stack =
            StackRecord { hash: 99, ips: "[\"0x1\"]".into(), frames: "[{\"s\":\"main+0x1\",\"f\":\"a.out\"}]".into() };
        sink.write_stacks(vec![stack.clone(), stack]).await.unwrap();
        sink.write_process_name(4821, "python3".into(), 5).await.unwrap();
        sink.write_process_name(4821, "python3.12".into(), 6).await.unwrap();
        sink.write_process_name(77, "backup-rsync".into(), 7).await.unwrap();
        fixture.write(&mut sink).await;
        timeline.write(&mut sink).await;
        sink.add_loss(3, LossKind::RingReserve, 17);
        sink.add_loss(1, LossKind::Decode, 2);
        sink.flush().await.unwrap();
        sink.add_loss(3, LossKind::RingReserve, 3);
        sink.finish(2_000_000_000).await.unwrap()
    });
    assert_eq!(summary.events_written, N as u64);
    let mut stored: Vec<StoredEvent> =
        events.into_iter().enumerate().map(|(i, e)| StoredEvent { id: EventId::Int(i as i64 + 1), event: e }).collect();
    stored.sort_by_key(|s| (s.event.ts_ns, s.id.clone()));
    stored
}

fn filtered(all: &[StoredEvent], keep: impl Fn(&Event) -> bool) -> Vec<StoredEvent> {
    all.iter().filter(|s| keep(&s.event)).cloned().collect()
}

pub fn write_read_back_exactly(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "t");
    let expected = write_trace(&path, b, 3);
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 1, "only the trace file is left: {names:?}");
    let store = open_store(&path).unwrap();
    assert_eq!(store.engine(), b);
    let info = store.info();
    assert_eq!(info.format, TraceFormat::Native { schema_version: 1 });
    assert_eq!(info.events, N as u64);
    assert_eq!(info.first_ns, expected[0].event.ts_ns);
    assert_eq!(info.last_ns, expected.iter().map(|s| s.event.ts_ns).max().unwrap());
    assert!(info.missing.is_empty(), "{:?}", info.missing);
    assert!(!info.sampled);
    for t in [
        "events",
        "sessions",
        "stack_traces",
        "process_names",
        "loss_counters",
        "ops",
        "sources",
        "loss_kinds",
        "launch_configs",
        "kernel_names",
        "attachments",
        "nccl_calls",
        "gpu_samples",
        "gpu_process_memory",
        "serving_samples",
        "net_peers",
        "process_ranks",
        "process_cgroups",
        "gpu_ops",
        "gpu_clock_syncs",
        "gpu_devices",
        "gpu_timeline_notes",
        "gpu_op_kinds",
    ] {
        assert!(info.has_table(t), "{t} missing");
    }
    for c in
        ["id", "timestamp", "duration", "prev_state", "next_comm", "waker_tid", "session_id", "node", "launch_config"]
    {
        assert!(info.has_column(c), "{c} missing");
    }
    let back = store.events(&EventFilter::default()).unwrap();
    assert_eq!(back.len(), expected.len());
    assert_eq!(back, expected, "events, ids and order");
    assert!(back.iter().any(|e| e.event.sched.is_some()), "scheduler detail round-trips");
    launch_tables::assert_reads_back(store.as_ref(), &back);
    gpu_timeline::assert_reads_back(store.as_ref());
    let stacks = store.stacks(&[99, 5]).unwrap();
    assert_eq!(stacks.len(), 1);
    assert_eq!(stacks[&99].ips, "[\"0x1\"]");
    assert!(stacks[&99].frames.contains("main+0x1"));
    let names = store.process_names().unwrap();
    assert_eq!(names, BTreeMap::from([(77, "backup-rsync".to_string()), (4821, "python3.12".to_string())]));
    let mut losses = store.loss_counters().unwrap();
    losses.sort_by_key(|l| (l.source, l.kind.as_str()));
    let got: Vec<(u8, LossKind, u64)> = losses.iter().map(|l| (l.source, l.kind, l.count)).collect();
    assert_eq!(got, vec![(1, LossKind::Decode, 2), (3, LossKind::RingReserve, 20)]);
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.len(), 1);
    let mut want = session(1);
    want.id = sessions[0].id;
    want.stopped_at_ns = 2_000_000_000;
    assert_eq!(sessions[0], want);
    assert!(store.aggregates(&TimeWindow::default()).unwrap().is_empty(), "native traces have no aggregates");
}

pub fn typed_queries_and_filters(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "t");
    let all = write_trace(&path, b, 5);
    // the engine, and the trait's defaults over the engine's required methods: the same answers
    let stores: [(&str, Box<dyn TraceStore>); 2] =
        [("engine", open_store(&path).unwrap()), ("defaults", Box::new(RequiredOnly(open_store(&path).unwrap())))];
    for (label, store) in stores {
        let (first, last) = (store.info().first_ns, store.info().last_ns);
        let mid = first + (last - first) / 2;
        let pid = all[N / 2].event.pid;
        let tids: Vec<u32> = all.iter().map(|s| s.event.tid).take(3).collect();
        let window = TimeWindow { from_ns: Some(first + (last - first) / 4), to_ns: Some(mid) };
        let ops = vec![op::CUDA_LAUNCH_KERNEL, op::SCHED_SWITCH];
        let gpu_and_steps: Vec<u8> =
            causeway_model::codes::GPU_CALL_SOURCES.iter().copied().chain([Source::Step.code()]).collect();
        let syncs = vec![op::CUDA_STREAM_SYNC, op::CUDA_DEVICE_SYNC, op::CU_CTX_SYNCHRONIZE];
        let cases: Vec<(&str, EventFilter, Vec<StoredEvent>)> = vec![
            ("all", EventFilter::default(), all.clone()),
            (
                "window",
                EventFilter::window(window),
                filtered(&all, |e| e.ts_ns >= window.from_ns.unwrap() && e.ts_ns <= mid),
            ),
            (
                "from only",
                EventFilter::window(TimeWindow { from_ns: Some(mid), to_ns: None }),
                filtered(&all, |e| e.ts_ns >= mid),
            ),
            ("pid", EventFilter { pid: Some(pid), ..Default::default() }, filtered(&all, |e| e.pid == pid)),
            (
                "tids",
                EventFilter { tids: Some(tids.clone()), ..Default::default() },
                filtered(&all, |e| tids.contains(&e.tid)),
            ),
            ("no tids", EventFilter { tids: Some(vec![]), ..Default::default() }, vec![]),
            (
                "sources",
                EventFilter { sources: Some(vec![3]), ..Default::default() },
                filtered(&all, |e| e.source == 3),
            ),
            (
                "ops",
                EventFilter { ops: Some(ops.clone()), ..Default::default() },
                filtered(&all, |e| ops.contains(&OpCode::new(e.source, e.op))),
            ),
            ("no ops", EventFilter { ops: Some(vec![]), ..Default::default() }, vec![]),
            // what explain reads: the GPU calls (and step labels) of a process in a window, and
            // the synchronizing calls (a finished SQLite trace answers both from its call blocks)
            (
                "GPU calls",
                EventFilter { window, pid: Some(pid), sources: Some(gpu_and_steps.clone()), ..Default::default() },
                filtered(&all, |e| {
                    e.ts_ns >= window.from_ns.unwrap()
                        && e.ts_ns <= mid
                        && e.pid == pid
                        && gpu_and_steps.contains(&e.source)
                }),
            ),
            // the calls that did not return success (errors, calls in flight at the end): a
            // finished SQLite trace answers through its partial index
            (
                "failed GPU calls",
                EventFilter { sources: Some(gpu_and_steps.clone()), failed: true, ..Default::default() },
                filtered(&all, |e| gpu_and_steps.contains(&e.source) && e.ret_code != 0),
            ),
            (
                "synchronizing calls of some threads",
                EventFilter { tids: Some(tids.clone()), ops: Some(syncs.clone()), ..Default::default() },
                filtered(&all, |e| tids.contains(&e.tid) && syncs.contains(&OpCode::new(e.source, e.op))),
            ),
            (
                "everything",
                EventFilter {
                    window,
                    pid: Some(pid),
                    tids: None,
                    sources: Some(vec![1, 3, 4]),
                    ops: Some(ops.clone()),
                    failed: false,
                },
                filtered(&all, |e| {
                    e.ts_ns >= window.from_ns.unwrap()
                        && e.ts_ns <= mid
                        && e.pid == pid
                        && [1, 3, 4].contains(&e.source)
                        && ops.contains(&OpCode::new(e.source, e.op))
                }),
            ),
        ];
        for (what, f, want) in cases {
            assert!(what.starts_with("no") || !want.is_empty() || what == "everything", "{what}: empty fixture");
            let what = format!("{what} ({label})");
            assert_eq!(store.events(&f).unwrap(), want, "events: {what}");
            let mut rows = Vec::new();
            let n = store.scan_durations(&f, &mut |r| rows.push(*r)).unwrap();
            assert_eq!(n as usize, want.len(), "scan count: {what}");
            rows.sort_by_key(|r| (r.ts_ns, r.op.source, r.op.op, r.pid, r.dur_ns));
            let mut w: Vec<DurationRow> = want
                .iter()
                .map(|s| DurationRow {
                    op: OpCode::new(s.event.source, s.event.op),
                    pid: s.event.pid,
                    ts_ns: s.event.ts_ns,
                    dur_ns: s.event.dur_ns,
                })
                .collect();
            w.sort_by_key(|r| (r.ts_ns, r.op.source, r.op.op, r.pid, r.dur_ns));
            assert_eq!(rows, w, "scan rows: {what}");
            let mut streamed = Vec::new();
            let n = store.scan_events(&f, &mut |e| streamed.push(e)).unwrap();
            assert_eq!((n as usize, &streamed), (want.len(), &want), "scan_events: {what}");
            // Kept rows only: every other thread, and of those the events ending in an odd microsecond.
            let keep = |tid: u32, ts: i64, dur: i64| tid % 2 == 1 && ((ts + dur) / 1000) % 2 == 1;
            let mut kept = Vec::new();
            let n = store.scan_events_kept(&f, &keep, &mut |e| kept.push(e)).unwrap();
            let want_kept: Vec<StoredEvent> =
                want.iter().filter(|s| keep(s.event.tid, s.event.ts_ns, s.event.dur_ns)).cloned().collect();
            assert_eq!((n as usize, &kept), (want_kept.len(), &want_kept), "scan_events_kept: {what}");
            if what.starts_with("everything") {
                assert!(
                    !want_kept.is_empty() && want_kept.len() < want.len(),
                    "the keep test must keep some rows, not all"
                );
            }
            let mut switches = Vec::new();
            let n = store.scan_switches_kept(&f, &keep, &mut |r| switches.push(r)).unwrap();
            // in no guaranteed order (SQLite's switch index gives thread, then time)
            switches.sort_by_key(|r| (r.ts, r.id.clone()));
            let mut want_switches: Vec<SwitchRow> = want_kept.iter().cloned().map(SwitchRow::of).collect();
            want_switches.sort_by_key(|r| (r.ts, r.id.clone()));
            assert_eq!((n as usize, &switches), (want_kept.len(), &want_switches), "scan_switches_kept: {what}");
            let mut slim = Vec::new();
            let n = store.scan_slim(&f, &mut |r| slim.push(r)).unwrap();
            assert_eq!(n as usize, want.len(), "scan_slim count: {what}");
            slim.sort_by_key(|r| (r.ts, r.id.clone()));
            let w: Vec<SlimEvent> = want
                .iter()
                .map(|s| SlimEvent {
                    id: s.id.clone(),
                    ts: s.event.ts_ns,
                    dur: s.event.dur_ns,
                    pid: s.event.pid,
                    tid: s.event.tid,
                    op: OpCode::new(s.event.source, s.event.op),
                    arg0: s.event.arg0,
                    arg2: s.event.arg2,
                })
                .collect();
            assert_eq!(slim, w, "scan_slim rows: {what}");
            let (mut first, mut last) = (std::collections::HashMap::new(), std::collections::HashMap::new());
            for s in want.iter().filter(|s| !s.event.comm.is_empty()) {
                first.entry(s.event.tid).or_insert_with(|| s.event.comm.clone());
                last.insert(s.event.tid, s.event.comm.clone());
            }
            assert_eq!(store.thread_comms(&f, false).unwrap(), first, "first comm per thread: {what}");
            assert_eq!(store.thread_comms(&f, true).unwrap(), last, "latest comm per thread: {what}");
            let pm = [1, 500, 900, 950, 990, 1000];
            let summary = store.duration_summary(&f, &pm, true).unwrap();
            let scanned = summarize_by_scan(store.as_ref(), &f, &pm, true).unwrap();
            assert_eq!(summary, scanned, "duration summary: {what}");
            #[cfg(feature = "duckdb")]
            if b == Engine::DuckDb {
                let duck = causeway_backends::duckdb::DuckDbStore::open(&path).unwrap();
                let in_sql = causeway_backends::duckdb::summary::summarize_in_engine(&duck, &f, &pm, true).unwrap();
                assert_eq!(in_sql, scanned, "duration summary computed in DuckDB: {what}");
            }
        }
        // events_by_id: found ones in id order, unknown and text ids absent.
        let ids = vec![EventId::Int(7), EventId::Int(3), EventId::Int(N as i64 + 50), EventId::Text("n:1".into())];
        let mut got = store.events_by_id(&ids).unwrap();
        got.sort_by_key(|s| s.id.clone());
        let mut want: Vec<StoredEvent> =
            all.iter().filter(|s| [EventId::Int(3), EventId::Int(7)].contains(&s.id)).cloned().collect();
        want.sort_by_key(|s| s.id.clone());
        assert_eq!(got, want);
        assert!(store.events_by_id(&[]).unwrap().is_empty());
    }
}

/// A store with only the required methods of [`TraceStore`] and the reads of the side tables,
/// delegated to an engine: every projection of `events` it answers comes from the trait's defaults
/// over `scan_events`.
struct RequiredOnly(Box<dyn TraceStore>);

impl TraceStore for RequiredOnly {
    fn engine(&self) -> Engine {
        self.0.engine()
    }
    fn info(&self) -> &TraceInfo {
        self.0.info()
    }
    fn sessions(&self) -> causeway_backends::Result<Vec<SessionInfo>> {
        self.0.sessions()
    }
    fn process_names(&self) -> causeway_backends::Result<BTreeMap<u32, String>> {
        self.0.process_names()
    }
    fn loss_counters(&self) -> causeway_backends::Result<Vec<LossCounter>> {
        self.0.loss_counters()
    }
    fn scan_events(&self, filter: &EventFilter, f: &mut dyn FnMut(StoredEvent)) -> causeway_backends::Result<u64> {
        self.0.scan_events(filter, f)
    }
    fn stacks(&self, hashes: &[i64]) -> causeway_backends::Result<BTreeMap<i64, StackRecord>> {
        self.0.stacks(hashes)
    }
    fn launch_configs(&self) -> causeway_backends::Result<Vec<causeway_model::LaunchConfig>> {
        self.0.launch_configs()
    }
    fn kernel_names(&self) -> causeway_backends::Result<Vec<causeway_model::KernelName>> {
        self.0.kernel_names()
    }
    fn net_peers(&self) -> causeway_backends::Result<Vec<causeway_model::NetPeer>> {
        self.0.net_peers()
    }
    fn attachments(&self) -> causeway_backends::Result<Vec<causeway_model::LibraryAttach>> {
        self.0.attachments()
    }
    fn nccl_calls(
        &self,
        window: &causeway_model::time::TimeWindow,
    ) -> causeway_backends::Result<Vec<causeway_model::NcclCall>> {
        self.0.nccl_calls(window)
    }
    fn gpu_samples(
        &self,
        window: &causeway_model::time::TimeWindow,
    ) -> causeway_backends::Result<Vec<causeway_model::GpuSample>> {
        self.0.gpu_samples(window)
    }
    fn gpu_process_memory(
        &self,
        window: &causeway_model::time::TimeWindow,
    ) -> causeway_backends::Result<Vec<causeway_model::GpuProcessMemory>> {
        self.0.gpu_process_memory(window)
    }
    fn serving_samples(
        &self,
        window: &causeway_model::time::TimeWindow,
    ) -> causeway_backends::Result<Vec<causeway_model::ServingSample>> {
        self.0.serving_samples(window)
    }
    fn process_ranks(&self) -> causeway_backends::Result<Vec<causeway_model::ProcessRank>> {
        self.0.process_ranks()
    }
    fn query(&self, sql: &str, limits: &QueryLimits) -> causeway_backends::Result<QueryResult> {
        self.0.query(sql, limits)
    }
    fn describe_schema(&self) -> causeway_backends::Result<SchemaDescription> {
        self.0.describe_schema()
    }
}

pub fn summary_is_nearest_rank(b: Engine) {
    // Durations 1..=20 of one op: p95 is rank 19 (integer ceil), which float arithmetic gets wrong.
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "r");
    let events: Vec<Event> = (1..=20)
        .map(|i| Event {
            ts_ns: 1_000 + i,
            dur_ns: i * 1000,
            pid: 1,
            tid: 1,
            source: 1,
            op: 1,
            cpu: 0,
            ..Default::default()
        })
        .collect();
    rt().block_on(async {
        let mut sink = create_sink(&path, session(1), Some(b)).unwrap();
        sink.write_batch(events).await.unwrap();
        sink.finish(5).await.unwrap();
    });
    let store = open_store(&path).unwrap();
    let s = store.duration_summary(&EventFilter::default(), &[500, 900, 950, 990], false).unwrap();
    assert_eq!(s.events, 20);
    assert_eq!((s.first_ns, s.last_ns), (1_001, 1_020));
    assert_eq!(s.ops.len(), 1);
    assert_eq!(s.ops[0].percentiles, vec![10_000, 18_000, 19_000, 20_000]);
    assert_eq!(s.ops[0].sum_ns, 210_000);
    let sorted: Vec<i64> = (1..=20).map(|i| i * 1000).collect();
    assert_eq!(nearest_rank(&sorted, 950), Some(19_000));
    let empty = store
        .duration_summary(&EventFilter::window(TimeWindow { from_ns: Some(5_000), to_ns: None }), &[500], true)
        .unwrap();
    assert_eq!(empty, summary::DurationSummary::default());
}

pub fn schema_description(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "t");
    write_trace(&path, b, 7);
    let store = open_store(&path).unwrap();
    let d = store.describe_schema().unwrap();
    assert_eq!(d.engine, b.name());
    assert_eq!(d.format, TraceFormat::Native { schema_version: 1 });
    let events = d.tables.iter().find(|t| t.name == "events").expect("events described");
    assert_eq!(events.rows, N as u64);
    assert!(!events.meaning.is_empty());
    let cols: Vec<&str> = events.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cols.len(), 30, "{cols:?}");
    assert_eq!(cols.last(), Some(&"launch_config"), "added at the end");
    assert!(events.columns.iter().find(|c| c.name == "timestamp").is_some_and(|c| !c.meaning.is_empty()));
    let names: Vec<&str> = d.tables.iter().map(|t| t.name.as_str()).collect();
    for t in ["loss_counters", "ops", "process_names", "sessions", "stack_traces"] {
        assert!(names.contains(&t), "{t} not described: {names:?}");
    }
    assert_eq!(d.tables.iter().find(|t| t.name == "process_names").unwrap().rows, 2);
    let launch = d.codes.iter().find(|c| c.source == 1 && c.name == "cudaLaunchKernel").expect("code described");
    assert!(launch.events > 0);
    assert_eq!(d.codes.iter().map(|c| c.events).sum::<u64>(), N as u64);
}

pub fn sessions_append(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "t");
    for i in 0..3i64 {
        rt().block_on(async {
            let mut sink = create_sink(&path, session(10 + i), Some(b)).unwrap();
            sink.write_batch(SyntheticTrace::new(i as u64, 1_000 + i * 1_000_000_000).take(100)).await.unwrap();
            sink.add_loss(1, LossKind::SinkBackpressure, 1);
            sink.finish(20 + i).await.unwrap();
        });
    }
    let store = open_store(&path).unwrap();
    assert_eq!(store.info().events, 300);
    let s = store.sessions().unwrap();
    assert_eq!(
        s.iter().map(|s| (s.started_at_ns, s.stopped_at_ns)).collect::<Vec<_>>(),
        vec![(10, 20), (11, 21), (12, 22)]
    );
    let ids: std::collections::BTreeSet<i64> = s.iter().map(|s| s.id).collect();
    assert_eq!(ids.len(), 3, "distinct session ids");
    let l = store.loss_counters().unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].source, l[0].kind, l[0].count), (1, LossKind::SinkBackpressure, 3), "summed over sessions");
    let all = store.events(&EventFilter::default()).unwrap();
    let ids: std::collections::BTreeSet<EventId> = all.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 300, "ids stay unique across sessions");
    // what the last finish packed holds every session's events: the GPU calls and the whole
    // trace's summary read the same as the rows
    let gpu = EventFilter { sources: Some(causeway_model::codes::GPU_CALL_SOURCES.to_vec()), ..Default::default() };
    let mut slim = Vec::new();
    store.scan_slim(&gpu, &mut |c| slim.push(c)).unwrap();
    slim.sort_by_key(|c| (c.ts, c.id.clone()));
    let by_rows: Vec<SlimEvent> = store.events(&gpu).unwrap().iter().map(SlimEvent::of).collect();
    assert!(by_rows.len() > 100 && slim == by_rows, "{} calls scanned, {} rows", slim.len(), by_rows.len());
    let pm = [500, 990];
    let scanned = summarize_by_scan(store.as_ref(), &EventFilter::default(), &pm, true).unwrap();
    assert_eq!(store.duration_summary(&EventFilter::default(), &pm, true).unwrap(), scanned);
    assert_eq!(scanned.events, 300);
    assert!(store.summarizes_whole_trace_from_packed(), "the last finish packed the sorted durations");
}

pub fn guarded_sql_and_limits(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "t");
    write_trace(&path, b, 9);
    let before = std::fs::read(&path).unwrap();
    let store = open_store(&path).unwrap();
    let q = |sql: &str, l: &QueryLimits| store.query(sql, l);
    let r = q("SELECT count(*) AS n FROM events", &QueryLimits::default()).unwrap();
    assert_eq!(r.columns, vec!["n"]);
    assert_eq!(r.rows, vec![vec![serde_json::json!(N)]]);
    let r = q(
        "SELECT o.name, count(*) AS n, sum(e.duration) AS total FROM events e JOIN ops o ON o.source_id = e.source \
         AND o.op_id = e.op GROUP BY o.name ORDER BY n DESC, o.name",
        &QueryLimits::default(),
    )
    .unwrap();
    assert!(!r.truncated && !r.rows.is_empty());
    assert!(r.rows[0][2].is_i64(), "sums are integers: {:?}", r.rows[0]);
    let r = q("SELECT id, timestamp, comm FROM events ORDER BY timestamp, id", &QueryLimits::with_rows(10)).unwrap();
    assert_eq!((r.rows.len(), r.truncated), (10, true));
    assert_eq!(
        r.rows[0][0],
        serde_json::json!(store.events(&EventFilter::default()).unwrap()[0].id.to_string().parse::<i64>().unwrap())
    );
    let tiny = QueryLimits { max_bytes: 300, ..Default::default() };
    let r = q("SELECT * FROM events", &tiny).unwrap();
    assert!(r.truncated && r.rows.len() < 5, "byte cap");
    let r = q("SELECT * FROM events WHERE pid = -1", &QueryLimits::default()).unwrap();
    assert!(r.rows.is_empty() && !r.truncated && r.columns.len() == 30);
    for bad in [
        "DELETE FROM events",
        "DROP TABLE events",
        "SELECT 1; SELECT 2",
        "ATTACH 'x.db' AS x",
        "PRAGMA writable_schema=1",
    ] {
        match q(bad, &QueryLimits::default()) {
            Err(StoreError::Refused(_)) => {}
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(matches!(q("SELECT nosuchcolumn FROM events", &QueryLimits::default()), Err(StoreError::Query(_))));
    let slow = QueryLimits { timeout_ms: 300, ..Default::default() };
    let t = std::time::Instant::now();
    let heavy = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c, events";
    assert!(q(heavy, &slow).is_err(), "stopped");
    assert!(t.elapsed().as_secs() < 5, "stopped in time: {:?}", t.elapsed());
    let cancel = causeway_backends::guard::QueryCancel::new();
    cancel.cancel();
    let r = q("SELECT count(*) FROM events", &QueryLimits::default().cancellable(&cancel));
    assert!(matches!(r, Err(StoreError::Query(ref m)) if m.contains("cancel")), "{r:?}");
    drop(store);
    assert_eq!(std::fs::read(&path).unwrap(), before, "queries leave the file byte-identical");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no file appeared beside the trace");
}

/// `under_way`: each look replaces the session's rows; a session left unfinished (a killed tracer)
/// keeps its last look, read back as written; a finished one has none.
fn under_way_is_the_last_look(b: Engine) {
    fn with_writer<W: EngineWriter>(path: &Path, looks: &[(i64, Vec<Event>)], finish: bool) {
        let mut w = W::create(path, &session(1)).unwrap();
        w.write_batches([&SyntheticTrace::new(3, 1_000_000_000).take(100)[..]]).unwrap();
        for (at, events) in looks {
            w.write_under_way(*at, events).unwrap();
        }
        if finish {
            w.finish(2_000_000_000).unwrap();
        } // else dropped: the connection closes, the session is never finished
    }
    let call = |tid: u32| Event {
        ts_ns: 1_000_000_000 + i64::from(tid),
        dur_ns: 3_000_000_000,
        pid: 40,
        tid,
        cpu: -1,
        source: op::CUDA_STREAM_SYNC.source,
        op: op::CUDA_STREAM_SYNC.op,
        ret_code: causeway_model::codes::RET_IN_FLIGHT,
        comm: "python".into(),
        ..Default::default()
    };
    let sleep = Event {
        ts_ns: 4_999_000_000,
        source: op::SCHED_SWITCH.source,
        op: op::SCHED_SWITCH.op,
        ret_code: 0,
        sched: Some(causeway_model::SchedDetail {
            prev_state: causeway_model::PrevState::Sleeping,
            next_comm: "swapper/1".into(),
            ..Default::default()
        }),
        ..call(41)
    };
    let looks = vec![(4_000_000_000, vec![call(41), sleep.clone(), call(42)]), (5_000_000_000, vec![call(41), sleep])];
    let dir = tempfile::tempdir().unwrap();
    for finish in [false, true] {
        let path = file(dir.path(), b, &format!("under_way_{finish}"));
        match b {
            Engine::Sqlite => with_writer::<SqliteWriter>(&path, &looks, finish),
            #[cfg(feature = "duckdb")]
            Engine::DuckDb => with_writer::<causeway_backends::duckdb::DuckDbWriter>(&path, &looks, finish),
            #[allow(unreachable_patterns)]
            _ => unreachable!(),
        }
        let rows = open_store(&path).unwrap().under_way().unwrap();
        if finish {
            assert!(rows.is_empty(), "a finished session's last look is in events: {rows:?}");
        } else {
            let want: Vec<UnderWayRow> =
                looks[1].1.iter().map(|e| UnderWayRow { seen_at_ns: 5_000_000_000, event: e.clone() }).collect();
            assert_eq!(rows, want, "the last look, exactly");
        }
    }
}

pub fn bad_input(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let missing = file(dir.path(), b, "missing");
    assert!(matches!(open_store(&missing).err(), Some(StoreError::NotFound(_))));
    let empty = file(dir.path(), b, "empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(open_store(&empty).err(), Some(StoreError::NotATrace { .. })));
    let garbage = file(dir.path(), b, "garbage");
    std::fs::write(&garbage, vec![0x5au8; 70_000]).unwrap();
    assert!(matches!(open_store(&garbage).err(), Some(StoreError::NotATrace { .. })));
    let sub = dir.path().join(format!("d.{}", b.extension()));
    std::fs::create_dir(&sub).unwrap();
    assert!(matches!(open_store(&sub).err(), Some(StoreError::NotATrace { .. })));
    // Writing into something that is not one of our traces is refused, and the file is untouched.
    let before = std::fs::read(&garbage).unwrap();
    assert!(create_sink(&garbage, session(1), Some(b)).is_err());
    assert_eq!(std::fs::read(&garbage).unwrap(), before);
    // Every error is one line.
    for p in [&missing, &empty, &garbage] {
        let msg = open_store(p).err().unwrap().to_string();
        assert!(!msg.contains('\n') && msg.contains(&*p.file_name().unwrap().to_string_lossy()), "{msg}");
    }
}

macro_rules! conformance {
    ($engine:ident, $backend:expr) => {
        mod $engine {
            use super::*;
            const B: Engine = $backend;
            #[test]
            fn write_read_back_exactly() {
                super::write_read_back_exactly(B)
            }
            #[test]
            fn typed_queries_and_filters() {
                super::typed_queries_and_filters(B)
            }
            #[test]
            fn summary_is_nearest_rank() {
                super::summary_is_nearest_rank(B)
            }
            #[test]
            fn schema_description() {
                super::schema_description(B)
            }
            #[test]
            fn sessions_append() {
                super::sessions_append(B)
            }
            #[test]
            fn guarded_sql_and_limits() {
                super::guarded_sql_and_limits(B)
            }
            #[test]
            fn bad_input() {
                super::bad_input(B)
            }
            #[test]
            fn under_way_is_the_last_look() {
                super::under_way_is_the_last_look(B)
            }
            #[test]
            fn older_trace_reads_empty_then_gains_launch_tables() {
                launch_tables::older_trace_reads_empty_then_gains_them(B)
            }
            #[test]
            fn convert_keeps_launch_tables() {
                launch_tables::convert_keeps_them(B)
            }
            #[test]
            fn older_gpu_samples_read_the_link_columns_as_not_reported_then_gain_them() {
                nvml_tables::older_gpu_samples_gain_the_later_columns(B)
            }
            #[test]
            fn gpu_ops_name_their_launching_calls() {
                gpu_timeline::launches_resolve(B)
            }
            #[test]
            fn a_trace_without_gpu_ops_says_so() {
                gpu_timeline::missing_without_ops(B)
            }
            #[test]
            fn convert_and_cut_keep_the_gpu_timeline() {
                gpu_timeline::convert_and_cut_keep_it(B)
            }
            #[test]
            fn footprint_round_trips_converts_and_cuts() {
                footprint::round_trips_converts_and_cuts(B)
            }
        }
    };
}

conformance!(sqlite, Engine::Sqlite);
#[cfg(feature = "duckdb")]
conformance!(duckdb, Engine::DuckDb);

/// Without the feature, DuckDB files are refused with a message that says how to get the engine.
#[cfg(not(feature = "duckdb"))]
#[test]
fn duckdb_needs_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.duckdb");
    let e = create_sink(&p, session(1), None).err().expect("refused").to_string();
    assert!(e.contains("duckdb` feature"), "{e}");
}
