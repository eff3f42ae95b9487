//! The device's own timeline in both export formats, decoded back: one track per (process, device,
//! stream) holding every kernel, copy and memset exactly once (by its demangled name), each
//! thread's synchronizations on their own track, exactly one flow into each op from the slice of
//! the call that launched it (three from a graph launch), and every idle gap over 1 ms on the
//! device's idle track named by its top cause, as `device_view` explains it. Windows of 100
//! events give the same export; a trace without a device timeline gets no device track.

mod gpu_trace;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use causeway_analysis::{device_view, idle_part_words, DEFAULT_GAP_NS};
use causeway_backends::{open_store, TraceStore};
use causeway_export::{export, ExportRequest, ExportSummary, Format};
use causeway_model::time::TimeWindow;
use causeway_model::{GpuOp, GpuOpKind};
use gpu_trace::{training, training_late, MS, PID, SYNC_TID};
use perfetto_protos::trace::Trace;
use perfetto_protos::track_event::track_event::Type;
use protobuf::Message;
use serde_json::Value;

/// A decoded slice: its track's name, span, name, category, args (as text) and flows.
#[derive(Debug, Clone, PartialEq)]
struct Decoded {
    track: String,
    start: i64,
    end: i64,
    name: String,
    cat: String,
    args: BTreeMap<String, String>,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

fn written(timeline: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device.db");
    training(timeline).write(&path);
    (dir, path)
}

fn export_to(store: &dyn TraceStore, format: Format, chunk_events: u64) -> (Vec<u8>, ExportSummary) {
    let mut out = Vec::new();
    let req = ExportRequest { chunk_events, ..Default::default() };
    let s = export(store, &req, format, &mut out).unwrap();
    (out, s)
}

/// Pairs each track's begins and ends (in file order, as nested) into slices.
fn pair(events: Vec<(String, Option<Decoded>, i64)>) -> Vec<Decoded> {
    let mut open: HashMap<String, Vec<Decoded>> = HashMap::new();
    let mut out = Vec::new();
    for (track, begin, ts) in events {
        match begin {
            Some(b) => open.entry(track).or_default().push(b),
            None => {
                let mut b = open.get_mut(&track).and_then(Vec::pop).expect("an end after its begin");
                assert!(ts >= b.start, "{track}: {} ends before it begins", b.name);
                b.end = ts;
                out.push(b);
            }
        }
    }
    assert!(open.values().all(Vec::is_empty), "slices never ended");
    out
}

/// Each track's parent uuid by the track's name.
type Parents = HashMap<String, Option<u64>>;

/// The Perfetto export's slices, the parent of every track and each process's track uuid.
fn decode_perfetto(bytes: &[u8]) -> (Vec<Decoded>, Parents, HashMap<u32, u64>) {
    let trace = Trace::parse_from_bytes(bytes).unwrap();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut parents: Parents = HashMap::new();
    let mut processes: HashMap<u32, u64> = HashMap::new();
    let mut events = Vec::new();
    for p in &trace.packet {
        if p.has_track_descriptor() {
            let d = p.track_descriptor();
            if d.process.is_some() {
                processes.insert(d.process.pid() as u32, d.uuid());
            }
            names.insert(d.uuid(), d.name().to_string());
            parents.insert(d.name().to_string(), d.has_parent_uuid().then(|| d.parent_uuid()));
        }
        if !p.has_track_event() {
            continue;
        }
        let e = p.track_event();
        let track = names.get(&e.track_uuid()).cloned().expect("a track event after its track's descriptor");
        let ts = p.timestamp() as i64;
        match e.type_() {
            Type::TYPE_SLICE_BEGIN => {
                let args = e
                    .debug_annotations
                    .iter()
                    .map(|a| {
                        let v =
                            if a.has_int_value() { a.int_value().to_string() } else { a.string_value().to_string() };
                        (a.name().to_string(), v)
                    })
                    .collect();
                let b = Decoded {
                    track: track.clone(),
                    start: ts,
                    end: ts,
                    name: e.name().to_string(),
                    cat: e.categories.first().cloned().unwrap_or_default(),
                    args,
                    flows_out: e.flow_ids.clone(),
                    flows_in: e.terminating_flow_ids.clone(),
                };
                events.push((track, Some(b), ts));
            }
            Type::TYPE_SLICE_END => events.push((track, None, ts)),
            _ => {}
        }
    }
    (pair(events), parents, processes)
}

/// The Chrome JSON export's slices (the device tracks named by their `thread_name`).
fn decode_chrome(bytes: &[u8]) -> Vec<Decoded> {
    let v: Value = serde_json::from_slice(bytes).unwrap();
    let origin = v["otherData"]["origin_unix_ns"].as_i64().unwrap();
    let ns = |e: &Value| origin + (e["ts"].as_f64().unwrap() * 1000.0).round() as i64;
    let all = v["traceEvents"].as_array().unwrap();
    let key = |e: &Value| format!("{}/{}", e["pid"], e["tid"]);
    let names: HashMap<String, String> = all
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (key(e), e["args"]["name"].as_str().unwrap().to_string()))
        .collect();
    let mut events: Vec<(String, Option<Decoded>, i64)> = Vec::new();
    for e in all {
        let track = names.get(&key(e)).cloned().unwrap_or_else(|| key(e));
        match e["ph"].as_str().unwrap() {
            "B" => {
                let args = e["args"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                    .collect();
                let b = Decoded {
                    track: track.clone(),
                    start: ns(e),
                    end: ns(e),
                    name: e["name"].as_str().unwrap().to_string(),
                    cat: e["cat"].as_str().unwrap().to_string(),
                    args,
                    flows_out: vec![],
                    flows_in: vec![],
                };
                events.push((track, Some(b), ns(e)));
            }
            "E" => events.push((track, None, ns(e))),
            ph @ ("s" | "f") => {
                // a flow event follows the begin it binds to
                let b = events.last_mut().and_then(|x| x.1.as_mut()).expect("a flow after its slice");
                assert_eq!((b.track.as_str(), b.start), (track.as_str(), ns(e)));
                let id = e["id"].as_u64().unwrap();
                if ph == "s" {
                    b.flows_out.push(id)
                } else {
                    b.flows_in.push(id)
                }
            }
            _ => {}
        }
    }
    pair(events)
}

fn ops_of(store: &dyn TraceStore) -> Vec<GpuOp> {
    let mut ops = Vec::new();
    store.scan_gpu_ops(&TimeWindow::ALL, &mut |g| ops.push(g)).unwrap();
    ops
}

/// What the export must show of an op: its track, span and slice name.
fn expected_slice(op: &GpuOp) -> (String, i64, i64, String) {
    let (track, name) = match op.kind {
        GpuOpKind::Kernel => {
            let full = causeway_model::demangle::demangle(&op.name);
            (format!("GPU {} stream {}", op.device, op.stream), causeway_analysis::short_kernel_name(&full))
        }
        GpuOpKind::Memcpy => (format!("GPU {} stream {}", op.device, op.stream), format!("memcpy {}", op.name)),
        GpuOpKind::Memset => (format!("GPU {} stream {}", op.device, op.stream), "memset".into()),
        GpuOpKind::Sync => (format!("GPU {} syncs: sync-worker ({SYNC_TID})", op.device), format!("{} sync", op.name)),
    };
    (track, op.start_ns, op.end_ns, name)
}

/// Every device expectation of the export against the trace.
fn check_device(store: &dyn TraceStore, slices: &[Decoded], summary: &ExportSummary, what: &str) {
    let ops = ops_of(store);
    assert!(ops.iter().all(|o| o.launch_event_id > 0), "the engine resolved every op's launching call");
    let is_op = |d: &&Decoded| d.cat.starts_with("gpu_") && d.cat != "gpu_idle";
    let mut exported: Vec<(String, i64, i64, String)> =
        slices.iter().filter(is_op).map(|d| (d.track.clone(), d.start, d.end, d.name.clone())).collect();
    let mut expected: Vec<(String, i64, i64, String)> = ops.iter().map(expected_slice).collect();
    exported.sort();
    expected.sort();
    assert_eq!(exported, expected, "{what}: every op exactly once, on its track, by its demangled name");
    assert!(exported.iter().any(|e| e.3 == "step"), "{what}: `_Z4stepPf` is shown as `step`");
    assert_eq!(summary.device_ops, ops.len() as u64, "{what}");

    // flows: every start has exactly one end
    let mut starts: HashMap<u64, &Decoded> = HashMap::new();
    let mut ends: HashMap<u64, &Decoded> = HashMap::new();
    for d in slices {
        for f in &d.flows_out {
            assert!(starts.insert(*f, d).is_none(), "{what}: flow {f} starts twice");
        }
        for f in &d.flows_in {
            assert!(ends.insert(*f, d).is_none(), "{what}: flow {f} ends twice");
        }
    }
    let mut a: Vec<u64> = starts.keys().copied().collect();
    let mut b: Vec<u64> = ends.keys().copied().collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b, "{what}: unmatched flows");
    // exactly one flow into each op, from the slice of the call that launched it
    let mut launched: HashMap<String, usize> = HashMap::new();
    for d in slices.iter().filter(is_op) {
        assert_eq!(d.flows_in.len(), 1, "{what}: {} at {} has {} flows in", d.name, d.start, d.flows_in.len());
        let call = starts[&d.flows_in[0]];
        let launch = &d.args["launch_event_id"];
        assert_eq!(call.args.get("event_id"), Some(launch), "{what}: {} flows from its launching call", d.name);
        *launched.entry(launch.clone()).or_default() += 1;
    }
    assert_eq!(summary.launch_flows, ops.len() as u64, "{what}");
    let graph = slices.iter().find(|d| d.name.starts_with("cudaGraphLaunch")).expect("the graph launch's slice");
    assert_eq!(graph.flows_out.len(), 3, "{what}: one flow to each kernel of the graph");
    assert_eq!(launched[&graph.args["event_id"]], 3);

    // the idle gaps over 1 ms, named by their top cause as the device view explains them
    let view = device_view(store, TimeWindow::ALL, None, DEFAULT_GAP_NS).unwrap().unwrap();
    assert_eq!(view.gaps_total, gpu_trace::LATE.len(), "{what}: {:#?}", view.gaps);
    let idle: Vec<&Decoded> = slices.iter().filter(|d| d.cat == "gpu_idle").collect();
    assert_eq!(idle.len(), view.gaps_total, "{what}");
    assert_eq!(summary.idle_gaps, view.gaps_total as u64);
    for g in &view.gaps {
        let s = idle
            .iter()
            .find(|d| (d.start, d.end) == (g.start_ns, g.end_ns))
            .unwrap_or_else(|| panic!("{what}: no slice for the gap at {}", g.start_ns));
        assert_eq!(s.track, "GPU 0 idle");
        let top = &g.parts[0];
        assert_eq!(s.name, idle_part_words(top.cause, top.culprit.as_ref()), "{what}");
        assert!(s.name.contains("preempted by backup-rsync (pid 9912)"), "{what}: {}", s.name);
        assert_eq!(s.args["summary"], g.summary);
        assert_eq!(s.args["idle_ns"], g.idle_ns.to_string());
    }
}

#[test]
fn the_device_timeline_exports_to_perfetto_with_its_flows_and_gaps() {
    let (_dir, path) = written(true);
    let store = open_store(&path).unwrap();
    let (bytes, summary) = export_to(store.as_ref(), Format::Perfetto, 250_000);
    let (slices, parents, processes) = decode_perfetto(&bytes);
    check_device(store.as_ref(), &slices, &summary, "perfetto");
    for track in ["GPU 0 stream 7", "GPU 0 stream 13", "GPU 0 idle", &format!("GPU 0 syncs: sync-worker ({SYNC_TID})")]
    {
        assert_eq!(parents.get(track), Some(&Some(processes[&PID])), "{track} is a track of its process");
    }
}

#[test]
fn the_device_timeline_exports_to_chrome_json_with_its_flows_and_gaps() {
    let (_dir, path) = written(true);
    let store = open_store(&path).unwrap();
    let (bytes, summary) = export_to(store.as_ref(), Format::Chrome, 250_000);
    let slices = decode_chrome(&bytes);
    check_device(store.as_ref(), &slices, &summary, "chrome");
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let idle = v["traceEvents"].as_array().unwrap().iter().find(|e| e["args"]["name"] == "GPU 0 idle").unwrap();
    assert_eq!(idle["pid"].as_u64(), Some(u64::from(PID)), "the idle track is a thread of its process");
}

#[test]
fn small_windows_give_the_same_device_timeline_as_one() {
    let (_dir, path) = written(true);
    let store = open_store(&path).unwrap();
    let (one, s1) = export_to(store.as_ref(), Format::Perfetto, 10_000_000);
    let (many, s2) = export_to(store.as_ref(), Format::Perfetto, 100);
    assert!(s2.windows > s1.windows, "{} windows", s2.windows);
    let slices = decode_perfetto(&many).0;
    check_device(store.as_ref(), &slices, &s2, "100 events a window");
    let strip = |s: ExportSummary| ExportSummary { windows: 0, ..s };
    assert_eq!(strip(s1), strip(s2));
    // the same slices (flow ids aside: they are numbered as written)
    let key = |v: Vec<Decoded>| {
        let mut k: Vec<(String, i64, i64, String, usize, usize)> =
            v.into_iter().map(|d| (d.track, d.start, d.end, d.name, d.flows_out.len(), d.flows_in.len())).collect();
        k.sort();
        k
    };
    assert_eq!(key(decode_perfetto(&one).0), key(slices));
}

#[test]
fn a_trace_without_a_device_timeline_gets_no_device_track() {
    let (_dir, with) = written(true);
    let (_dir2, without) = written(false);
    let with = open_store(&with).unwrap();
    let without = open_store(&without).unwrap();
    let (bytes, summary) = export_to(without.as_ref(), Format::Perfetto, 250_000);
    assert_eq!((summary.device_ops, summary.launch_flows, summary.idle_gaps), (0, 0, 0));
    let (slices, parents, _) = decode_perfetto(&bytes);
    assert!(!parents.keys().any(|t| t.starts_with("GPU ")), "{:?}", parents.keys().collect::<Vec<_>>());
    let calls =
        slices.iter().filter(|d| d.args.contains_key("event_id") && !["off_cpu", "culprit"].contains(&d.cat.as_str()));
    assert!(calls.clone().count() > 0);
    assert!(calls.into_iter().all(|d| d.flows_out.is_empty()), "no flow leaves a call");
    // the host side is the same with the timeline
    let host = |v: Vec<Decoded>| {
        let mut k: Vec<(String, i64, i64, String)> = v
            .into_iter()
            .filter(|d| !d.cat.starts_with("gpu_") && d.cat != "chain")
            .map(|d| (d.track, d.start, d.end, d.name))
            .collect();
        k.sort();
        k
    };
    let (with_bytes, with_summary) = export_to(with.as_ref(), Format::Perfetto, 250_000);
    assert_eq!(host(decode_perfetto(&with_bytes).0), host(slices));
    assert_eq!((with_summary.calls, with_summary.off_cpu), (summary.calls, summary.off_cpu));
}

#[test]
fn every_gap_over_1_ms_is_named_beyond_the_twenty_the_analysis_lists() {
    // 30 late steps, 1.5 to 4.4 ms each: the device view of the whole trace lists the 20 longest
    let lates: Vec<(usize, i64)> = (0..30).map(|k| (5 + 6 * k, 1_500_000 + k as i64 * 100_000)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gaps.db");
    training_late(true, &lates).write(&path);
    let store = open_store(&path).unwrap();
    let view = device_view(store.as_ref(), TimeWindow::ALL, None, DEFAULT_GAP_NS).unwrap().unwrap();
    assert_eq!((view.gaps_total, view.gaps.len()), (30, 20));
    for chunk in [250_000, 100] {
        let (bytes, summary) = export_to(store.as_ref(), Format::Perfetto, chunk);
        let idle: Vec<Decoded> = decode_perfetto(&bytes).0.into_iter().filter(|d| d.cat == "gpu_idle").collect();
        assert_eq!((idle.len(), summary.idle_gaps), (30, 30), "chunk {chunk}");
        for d in &idle {
            assert!(d.name.contains("preempted by backup-rsync"), "chunk {chunk}: {} at {}", d.name, d.start);
            assert!(d.end - d.start > MS);
        }
        for g in &view.gaps {
            let d = idle.iter().find(|d| (d.start, d.end) == (g.start_ns, g.end_ns)).unwrap();
            assert_eq!(d.args["summary"], g.summary, "chunk {chunk}: the same explanation as the whole view's");
        }
    }
}
