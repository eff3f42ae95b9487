//! The conformance tests of the device timeline (`gpu_ops`, `gpu_clock_syncs`, `gpu_devices`,
//! `gpu_timeline_notes`), for every engine (listed in `conformance!`): what a sink writes reads back
//! in the order the trait gives (ops by start, pid, device, stream, end; a later device row
//! replacing), a window of ops, each op tied at finish to the outermost traced call that launched it
//! (`launch_event_id`), `convert` across engines and back and `cut` keeping them, and the trace
//! saying whether it has a device timeline.

use causeway_backends::*;
use causeway_model::codes::{op, OpCode};
use causeway_model::time::TimeWindow;
use causeway_model::{Event, GpuClockSync, GpuDevice, GpuOp, GpuOpKind, GpuTimelineNote};

use super::{file, rt, session};

const US: i64 = 1_000;
/// Where the launch trace's calls start.
const T: i64 = 1_000_000_000;

#[allow(clippy::too_many_arguments)]
fn gpu_op(
    pid: u32,
    kind: GpuOpKind,
    start_ns: i64,
    end_ns: i64,
    stream: u32,
    launch_tid: u32,
    launch: (i64, i64),
    name: &str,
) -> GpuOp {
    GpuOp {
        pid,
        device: if kind == GpuOpKind::Sync { -1 } else { (stream % 2) as i32 },
        context: 1,
        stream,
        kind,
        start_ns,
        end_ns,
        correlation: (start_ns / 1000 % 100_000) as u32 + stream,
        name: name.into(),
        bytes: if matches!(kind, GpuOpKind::Memcpy | GpuOpKind::Memset) { 1 << 20 } else { 0 },
        launch_tid,
        launch_start_ns: launch.0,
        launch_end_ns: launch.1,
        launch_cbid: if launch_tid == 0 { 0 } else { GpuOp::RUNTIME_CBID_BASE + 211 },
        launch_event_id: 0,
    }
}

/// The ops as `scan_gpu_ops` gives them: by start, pid, device, stream, end.
fn in_trait_order(mut ops: Vec<GpuOp>) -> Vec<GpuOp> {
    ops.sort_by_key(|o| (o.start_ns, o.pid, o.device, o.stream, o.end_ns));
    ops
}

fn scan(store: &dyn TraceStore, window: &TimeWindow) -> Vec<GpuOp> {
    let mut ops = Vec::new();
    let n = store.scan_gpu_ops(window, &mut |o| ops.push(o)).unwrap();
    assert_eq!(n as usize, ops.len(), "the count is the ops handed over");
    ops
}

fn note(pid: u32, ts_ns: i64, kind: &str, count: i64, detail: &str) -> GpuTimelineNote {
    GpuTimelineNote { pid, ts_ns, kind: kind.into(), count, detail: detail.into() }
}

fn device(pid: u32, device: i32, uuid: &str, nvml_index: i32) -> GpuDevice {
    GpuDevice { pid, device, uuid: uuid.into(), name: "NVIDIA H100 80GB HBM3".into(), nvml_index }
}

/// The device timeline `write_trace` writes beside its synthetic events (launched from threads the
/// synthetic trace does not have: every `launch_event_id` is 0), in two parts.
pub struct Fixture {
    pub parts: [GpuTimelinePart; 2],
}

impl Fixture {
    pub fn new() -> Fixture {
        let base = 1_000_050_000;
        let k = GpuOpKind::Kernel;
        let ops_a = vec![
            gpu_op(4821, k, base + 500, base + 900, 7, 999_001, (base - 5_000, base - 4_000), "_Z4gemmIfEvPKfi"),
            // the same start: ordered by pid, then device, stream and end
            gpu_op(4821, k, base, base + 300, 7, 999_001, (base - 9_000, base - 8_000), "_Z10vector_addPfS_i"),
            gpu_op(4821, GpuOpKind::Memcpy, base, base + 200, 8, 999_001, (base - 9_500, base - 9_400), "HtoD"),
            gpu_op(77, k, base, base + 100, 7, 0, (0, 0), "other process"),
        ];
        let ops_b = vec![
            gpu_op(4821, k, base, base + 250, 7, 999_001, (base - 9_000, base - 8_000), "same start, earlier end"),
            gpu_op(4821, GpuOpKind::Memset, base + 2_000_000, base + 2_000_100, 9, 999_002, (base, base + 10), ""),
            gpu_op(
                4821,
                GpuOpKind::Sync,
                base + 3_000_000,
                base + 3_500_000,
                0,
                999_001,
                (base + 2_999_000, base + 3_600_000),
                "context",
            ),
            // a record whose end is before its start reads back as written
            gpu_op(77, k, base + 4_000_000, base + 3_999_000, 3, 0, (0, 0), "ends before it starts"),
        ];
        let sync = |pid, trace_ns: i64| GpuClockSync { pid, cupti_ns: trace_ns - 7_000_000, trace_ns, error_ns: 1_500 };
        let parts = [
            GpuTimelinePart {
                ops: ops_a,
                clock_syncs: vec![sync(4821, base), sync(77, base + 10)],
                devices: vec![
                    device(4821, 0, "GPU-stale", -1),
                    device(4821, 1, "GPU-22222222-2222-2222-2222-222222222222", 3),
                    device(77, 0, "GPU-33333333-3333-3333-3333-333333333333", 0),
                ],
                notes: vec![note(4821, base - 1, "started", 0, "CUPTI 12.8, /opt/causeway/libcauseway_inject.so")],
            },
            GpuTimelinePart {
                ops: ops_b,
                clock_syncs: vec![sync(4821, base + 5_000_000), sync(4821, base - 1_000)],
                devices: vec![
                    device(4821, 0, "GPU-older", 5),
                    device(4821, 0, "GPU-11111111-1111-1111-1111-111111111111", 1),
                ],
                notes: vec![
                    note(77, base - 1, "started", 0, "CUPTI 12.8"),
                    note(4821, base + 2_500_000, "dropped", 12, "CUPTI dropped 12 records: its buffers were full"),
                    note(4821, base + 9_000_000, "stopped", 0, "the process exited"),
                ],
            },
        ];
        Fixture { parts }
    }

    pub async fn write(&self, sink: &mut Box<dyn EventSink>) {
        for p in &self.parts {
            sink.write_gpu_timeline(p.clone()).await.unwrap();
        }
        sink.write_gpu_timeline(GpuTimelinePart::default()).await.unwrap();
    }

    fn ops(&self) -> Vec<GpuOp> {
        in_trait_order(self.parts.iter().flat_map(|p| p.ops.clone()).collect())
    }

    fn syncs(&self) -> Vec<GpuClockSync> {
        let mut s: Vec<GpuClockSync> = self.parts.iter().flat_map(|p| p.clock_syncs.clone()).collect();
        s.sort_by_key(|s| (s.pid, s.trace_ns));
        s
    }

    fn devices(&self) -> Vec<GpuDevice> {
        let mut last = std::collections::BTreeMap::new();
        for d in self.parts.iter().flat_map(|p| p.devices.clone()) {
            last.insert((d.pid, d.device), d);
        }
        last.into_values().collect()
    }

    fn notes(&self) -> Vec<GpuTimelineNote> {
        let mut n: Vec<GpuTimelineNote> = self.parts.iter().flat_map(|p| p.notes.clone()).collect();
        n.sort_by_key(|n| (n.ts_ns, n.pid, n.kind.clone()));
        n
    }
}

/// A store holding `write_trace`'s data reads back the fixture's device timeline exactly.
pub fn assert_reads_back(store: &dyn TraceStore) {
    let fx = Fixture::new();
    let ops = fx.ops();
    assert_eq!(scan(store, &TimeWindow::ALL), ops, "device ops, by start, pid, device, stream, end");
    let first = ops[0].start_ns;
    let w = TimeWindow { from_ns: Some(first + 1), to_ns: Some(first + 2_000_000) };
    let want: Vec<GpuOp> =
        ops.iter().filter(|o| o.start_ns > first && o.start_ns <= first + 2_000_000).cloned().collect();
    assert_eq!(want.len(), 2, "fixture: the window holds two ops, one on its end");
    assert_eq!(scan(store, &w), want, "device ops of a window, both ends included");
    assert!(scan(store, &TimeWindow { from_ns: Some(ops.last().unwrap().start_ns + 1), to_ns: None }).is_empty());
    assert_eq!(store.gpu_clock_syncs().unwrap(), fx.syncs(), "calibrations, by pid then time");
    assert_eq!(store.gpu_devices().unwrap(), fx.devices(), "devices, the last per (pid, device)");
    assert_eq!(store.gpu_timeline_notes().unwrap(), fx.notes(), "notes, by time");
    assert!(!store.info().missing.iter().any(|m| m == NO_DEVICE_TIMELINE), "{:?}", store.info().missing);
    // guarded SQL reads the tables, and the kinds' lookup table names the codes
    let r = store
        .query(
            "SELECT k.name, count(*) FROM gpu_ops o JOIN gpu_op_kinds k ON k.code = o.kind GROUP BY k.name ORDER BY k.name",
            &QueryLimits::default(),
        )
        .unwrap();
    let got: Vec<(String, i64)> =
        r.rows.iter().map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap())).collect();
    let want = [("kernel", 5), ("memcpy", 1), ("memset", 1), ("sync", 1)].map(|(k, n)| (k.to_string(), n));
    assert_eq!(got, want);
    for t in ["gpu_clock_syncs", "gpu_devices", "gpu_timeline_notes"] {
        assert!(store.query(&format!("SELECT count(*) FROM {t}"), &QueryLimits::default()).is_ok(), "{t} readable");
    }
}

/// The launch trace: (events as written, so their ids are 1.., ops, the ids each op must name).
fn launch_trace() -> (Vec<Event>, Vec<GpuOp>, Vec<i64>) {
    let call = |pid: u32, tid: u32, code: OpCode, ts: i64, dur: i64| Event {
        ts_ns: T + ts,
        dur_ns: dur,
        pid,
        tid,
        source: code.source,
        op: code.op,
        cpu: 0,
        comm: "python3".into(),
        ..Default::default()
    };
    let events = vec![
        // 1: a runtime launch, 2: the driver launch inside it
        call(4821, 100, op::CUDA_LAUNCH_KERNEL, 1_000 * US, 20 * US),
        call(4821, 100, op::CU_LAUNCH_KERNEL, 1_005 * US, 10 * US),
        // 3: a short call just before the next launch (4), on the same thread
        call(4821, 100, op::CUDA_SET_DEVICE, 1_030 * US, US),
        call(4821, 100, op::CUDA_LAUNCH_KERNEL, 1_035 * US, 10 * US),
        // 5: another thread's launch
        call(4821, 200, op::CUDA_LAUNCH_KERNEL, 3_000 * US, 20 * US),
        // 6: an off-CPU interval of the launching thread (not a CUDA call)
        call(4821, 100, op::SCHED_SWITCH, 6_000 * US, 1_000 * US),
        // 7: a graph launch
        call(4821, 100, op::GRAPH_LAUNCH, 7_000 * US, 30 * US),
        // 8: another process's thread with the same tid, starting earlier than 1
        call(77, 100, op::CUDA_LAUNCH_KERNEL, 999 * US, 22 * US),
    ];
    let k = GpuOpKind::Kernel;
    let span = |a: i64, b: i64| (T + a * US, T + b * US);
    let after = |l: (i64, i64), n: i64| (l.1 + 10 * US, l.1 + 10 * US + n);
    let mut ops = Vec::new();
    let mut want = Vec::new();
    let mut add = |pid, kind, stream, tid, launch: (i64, i64), name: &str, id: i64| {
        let (s, e) = after(launch, 5_000);
        ops.push(gpu_op(pid, kind, s, e, stream, tid, launch, name));
        want.push(id);
    };
    add(4821, k, 7, 100, span(1_006, 1_014), "inside both: the runtime call", 1);
    add(4821, k, 8, 100, span(998, 1_012), "2 us early (the clocks): still the runtime call", 1);
    add(4821, k, 7, 100, span(1_036, 1_044), "not the call just before it", 4);
    add(4821, GpuOpKind::Memcpy, 7, 100, span(2_000, 2_010), "HtoD", 0);
    add(4821, k, 9, 100, span(3_005, 3_015), "another thread's call at that time", 0);
    add(4821, GpuOpKind::Sync, 0, 100, span(6_100, 6_200), "stream", 0);
    add(4821, k, 7, 100, span(7_002, 7_020), "graph kernel", 7);
    add(77, k, 7, 100, span(1_000, 1_020), "the other process's", 8);
    let mut zero_tid = gpu_op(4821, GpuOpKind::Memset, T + 4_000 * US, T + 4_001 * US, 7, 0, (0, 0), "");
    zero_tid.launch_event_id = 12_345; // what a writer passed: no launching thread, so no call
    ops.push(zero_tid);
    want.push(0);
    (events, ops, want)
}

/// Write the launch trace into a new file; returns the ops as the store must read them.
fn write_launch_trace(path: &std::path::Path, b: Engine) -> Vec<GpuOp> {
    let (events, ops, want) = launch_trace();
    rt().block_on(async {
        let mut sink = create_sink(path, session(1), Some(b)).unwrap();
        sink.write_batch(events).await.unwrap();
        // the ops arrive in two parts, out of order
        let (a, z) = ops.split_at(4);
        sink.write_gpu_timeline(GpuTimelinePart { ops: z.to_vec(), ..Default::default() }).await.unwrap();
        let part = GpuTimelinePart {
            ops: a.to_vec(),
            clock_syncs: vec![GpuClockSync { pid: 4821, cupti_ns: 5, trace_ns: T, error_ns: 800 }],
            devices: vec![device(4821, 0, "GPU-11111111-1111-1111-1111-111111111111", 0)],
            notes: vec![note(4821, T, "started", 0, "CUPTI 12.8")],
        };
        sink.write_gpu_timeline(part).await.unwrap();
        sink.finish(T + 10_000 * US).await.unwrap();
    });
    let resolved: Vec<GpuOp> = ops.into_iter().zip(want).map(|(o, id)| GpuOp { launch_event_id: id, ..o }).collect();
    in_trait_order(resolved)
}

/// Each op names the outermost traced CUDA call of its process and thread that holds its API span
/// (within the tolerance), 0 when none does.
pub fn launches_resolve(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "launch");
    let want = write_launch_trace(&path, b);
    let store = open_store(&path).unwrap();
    let got = scan(store.as_ref(), &TimeWindow::ALL);
    let names =
        |ops: &[GpuOp]| -> Vec<(String, i64)> { ops.iter().map(|o| (o.name.clone(), o.launch_event_id)).collect() };
    assert_eq!(names(&got), names(&want), "launching calls");
    assert_eq!(got, want);
    // the calls named are the events with those ids
    let ids: Vec<EventId> =
        got.iter().filter(|o| o.launch_event_id != 0).map(|o| EventId::Int(o.launch_event_id)).collect();
    for e in store.events_by_id(&ids).unwrap() {
        assert!(got
            .iter()
            .any(|o| EventId::Int(o.launch_event_id) == e.id && o.pid == e.event.pid && o.launch_tid == e.event.tid));
    }
    // a window of device time
    let w = TimeWindow { from_ns: Some(T + 1_000 * US), to_ns: Some(T + 2_100 * US) };
    let in_w: Vec<GpuOp> =
        want.iter().filter(|o| o.start_ns >= T + 1_000 * US && o.start_ns <= T + 2_100 * US).cloned().collect();
    assert_eq!(in_w.len(), 5, "fixture");
    assert_eq!(scan(store.as_ref(), &w), in_w);
    drop(store);

    // a session appended later: the ops of both sessions are resolved again at its finish, the
    // earlier ones to the same calls
    rt().block_on(async {
        let mut sink = create_sink(&path, session(2), Some(b)).unwrap();
        let late = Event {
            ts_ns: T + 9_000 * US,
            dur_ns: 10 * US,
            pid: 4821,
            tid: 100,
            source: 1,
            op: 3,
            ..Default::default()
        };
        sink.write_batch(vec![late]).await.unwrap();
        let op = gpu_op(
            4821,
            GpuOpKind::Kernel,
            T + 9_020 * US,
            T + 9_030 * US,
            7,
            100,
            (T + 9_001 * US, T + 9_009 * US),
            "late",
        );
        sink.write_gpu_timeline(GpuTimelinePart { ops: vec![op], ..Default::default() }).await.unwrap();
        sink.finish(T + 20_000 * US).await.unwrap();
    });
    let store = open_store(&path).unwrap();
    let got = scan(store.as_ref(), &TimeWindow::ALL);
    assert_eq!(got[..want.len()], want[..]);
    assert_eq!((got.len(), got.last().unwrap().launch_event_id), (want.len() + 1, 9), "the new op names the new call");
}

/// A trace without a device timeline says so, and reads empty.
pub fn missing_without_ops(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "none");
    rt().block_on(async {
        let mut sink = create_sink(&path, session(1), Some(b)).unwrap();
        sink.write_batch(SyntheticTrace::new(1, T).take(100)).await.unwrap();
        // notes alone are no timeline
        let part = GpuTimelinePart {
            notes: vec![note(1, T, "off", 0, "CUPTI is in use by another client")],
            ..Default::default()
        };
        sink.write_gpu_timeline(part).await.unwrap();
        sink.finish(T + 1).await.unwrap();
    });
    let store = open_store(&path).unwrap();
    assert_eq!(store.info().missing, vec![NO_DEVICE_TIMELINE.to_string()]);
    assert!(scan(store.as_ref(), &TimeWindow::ALL).is_empty());
    assert_eq!(store.gpu_timeline_notes().unwrap().len(), 1, "the note that says why");
    let d = store.describe_schema().unwrap();
    assert!(d.notes.iter().any(|n| n.contains("gpu_ops")), "the description says it: {:?}", d.notes);
    for t in ["gpu_ops", "gpu_clock_syncs", "gpu_devices", "gpu_timeline_notes", "gpu_op_kinds"] {
        let table = d.tables.iter().find(|x| x.name == t).unwrap_or_else(|| panic!("{t} not described"));
        assert!(!table.meaning.is_empty(), "{t} has a meaning");
        assert!(table.columns.iter().all(|c| !c.meaning.is_empty() || t == "gpu_op_kinds"), "{t}: {:?}", table.columns);
    }
}

fn built() -> Vec<Engine> {
    Engine::ALL.into_iter().filter(|b| is_built(*b)).collect()
}

fn timeline_of(store: &dyn TraceStore) -> (Vec<GpuOp>, Vec<GpuClockSync>, Vec<GpuDevice>, Vec<GpuTimelineNote>) {
    (
        scan(store, &TimeWindow::ALL),
        store.gpu_clock_syncs().unwrap(),
        store.gpu_devices().unwrap(),
        store.gpu_timeline_notes().unwrap(),
    )
}

/// `convert` into every engine and back keeps the device timeline, launching calls included, and
/// `cut` keeps the ops that started in its window, each naming its call when the cut has it.
pub fn convert_and_cut_keep_it(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let src = file(dir.path(), b, "src");
    let want = write_launch_trace(&src, b);
    let original = timeline_of(open_store(&src).unwrap().as_ref());
    assert_eq!(original.0, want);
    for to in built() {
        let there = file(dir.path(), to, &format!("there-{}", to.name()));
        let report = convert(&src, &there, Some(to), &mut |_, _| {}).unwrap();
        assert_eq!(
            (report.gpu_ops, report.gpu_clock_syncs, report.gpu_devices, report.gpu_timeline_notes),
            (want.len() as u64, 1, 1, 1)
        );
        let back = file(dir.path(), b, &format!("back-{}", to.name()));
        convert(&there, &back, Some(b), &mut |_, _| {}).unwrap();
        for p in [&there, &back] {
            let s = open_store(p).unwrap();
            assert_eq!(timeline_of(s.as_ref()), original, "{} -> {}: {}", b.name(), to.name(), p.display());
            assert!(s.info().missing.is_empty(), "{:?}", s.info().missing);
        }
    }
    // the cut of [1040 us, 2100 us]: the ops that started there (their launches were at 1036 and
    // 2000 us), the call at 1035-1045 us overlaps it and is kept, with its id
    let cut_path = file(dir.path(), b, "cut");
    let scope =
        CutScope { window: TimeWindow { from_ns: Some(T + 1_040 * US), to_ns: Some(T + 2_100 * US) }, pid: None };
    let report = cut(&src, &cut_path, None, &scope, &mut |_, _| {}).unwrap();
    let kept: Vec<GpuOp> =
        want.iter().filter(|o| o.start_ns >= T + 1_040 * US && o.start_ns <= T + 2_100 * US).cloned().collect();
    assert_eq!(kept.iter().map(|o| o.launch_event_id).collect::<Vec<_>>(), [4, 0], "fixture");
    assert_eq!(report.gpu_ops, 2);
    let c = open_store(&cut_path).unwrap();
    assert_eq!(scan(c.as_ref(), &TimeWindow::ALL), kept);
    assert_eq!(c.gpu_devices().unwrap(), original.2, "the process's devices");
    assert_eq!(c.gpu_clock_syncs().unwrap(), original.1, "the calibration before the window");
    assert_eq!(c.gpu_timeline_notes().unwrap(), original.3, "the state the window starts in");
    // a cut whose window starts after the launching call: the op names none
    let late = file(dir.path(), b, "late-cut");
    let scope =
        CutScope { window: TimeWindow { from_ns: Some(T + 1_050 * US), to_ns: Some(T + 1_060 * US) }, pid: Some(4821) };
    cut(&src, &late, None, &scope, &mut |_, _| {}).unwrap();
    let ops = scan(open_store(&late).unwrap().as_ref(), &TimeWindow::ALL);
    assert_eq!(
        ops.iter().map(|o| (o.name.as_str(), o.launch_event_id)).collect::<Vec<_>>(),
        [("not the call just before it", 0)]
    );
}
