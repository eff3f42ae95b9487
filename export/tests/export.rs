//! Every bundled investigation (and an Ingero DB) exported in both formats and decoded back: the
//! protobuf with Perfetto's own message definitions, the JSON with a JSON parser. The slices must
//! be the trace's calls and off-CPU intervals, counted by SQL over the same DB; every track's
//! slices must nest; every chain's evidence event must be the end of a flow from that chain's
//! annotation; every preemption's culprit slice must flow into an off-CPU slice; and every call's
//! timestamps must be the trace's own nanoseconds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use causeway_analysis::{explain, ExplainRequest};
use causeway_backends::{open_store, QueryLimits, TraceStore};
use causeway_export::{export, ExportRequest, ExportSummary, Format};
use causeway_model::codes::GPU_CALL_SOURCES;
use causeway_store::EventFilter;
use perfetto_protos::trace::Trace;
use perfetto_protos::track_event::track_event::Type;
use protobuf::Message;
use serde_json::Value;

fn investigations() -> Vec<PathBuf> {
    causeway_testdata::investigation_traces()
}

fn count(store: &dyn TraceStore, sql: &str) -> u64 {
    let r = store.query(sql, &QueryLimits::default()).unwrap();
    r.rows[0][0].as_u64().unwrap()
}

/// What SQL says the export must hold: GPU calls and off-CPU rows.
fn expected(store: &dyn TraceStore) -> (u64, u64) {
    let sources: Vec<String> = GPU_CALL_SOURCES.iter().map(|s| s.to_string()).collect();
    let calls = count(store, &format!("SELECT count(*) FROM events WHERE source IN ({})", sources.join(",")));
    let off = count(store, "SELECT count(*) FROM events WHERE source = 3 AND op = 1");
    (calls, off)
}

/// event id -> (ts, ts + dur) of every GPU call.
fn call_times(store: &dyn TraceStore) -> HashMap<String, (i64, i64)> {
    let mut m = HashMap::new();
    let filter = EventFilter { sources: Some(GPU_CALL_SOURCES.to_vec()), ..Default::default() };
    store
        .scan_events(&filter, &mut |e| {
            m.insert(e.id.to_string(), (e.event.ts_ns, e.event.ts_ns + e.event.dur_ns));
        })
        .unwrap();
    m
}

/// The evidence event ids of each chain explain finds.
fn evidence(store: &dyn TraceStore) -> Vec<(String, Vec<String>)> {
    let ex = explain(store, &ExplainRequest { top: 50, ..Default::default() }).unwrap();
    ex.chains.iter().map(|c| (c.id.clone(), c.evidence.event_ids.iter().map(|i| i.to_string()).collect())).collect()
}

fn export_to_vec(store: &dyn TraceStore, format: Format, chunk_events: u64) -> (Vec<u8>, ExportSummary) {
    let mut out = Vec::new();
    let req = ExportRequest { chunk_events, ..Default::default() };
    let s = export(store, &req, format, &mut out).unwrap();
    (out, s)
}

/// A decoded slice begin.
#[derive(Debug, Clone)]
struct Begin {
    track: String,
    ts: i64,
    name: String,
    cat: String,
    event_id: Option<String>,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
}

/// Checks nesting per track (ends in order, never before their begin, every begin ended) and
/// returns the begins with the end time of each.
fn check_nesting(events: &[(String, char, i64, Option<Begin>)], what: &str) -> Vec<(Begin, i64)> {
    let mut open: HashMap<&str, Vec<Begin>> = HashMap::new();
    let mut done = Vec::new();
    for (track, kind, ts, begin) in events {
        match kind {
            'B' => {
                let b = begin.clone().unwrap();
                if let Some(top) = open.get(track.as_str()).and_then(|s| s.last()) {
                    assert!(b.ts >= top.ts, "{what}: track {track}: a slice begins before its parent");
                }
                open.entry(track).or_default().push(b);
            }
            'E' => {
                let b = open
                    .get_mut(track.as_str())
                    .and_then(|s| s.pop())
                    .unwrap_or_else(|| panic!("{what}: track {track}: an end without a begin at {ts}"));
                assert!(*ts >= b.ts, "{what}: track {track}: {} ends before it begins", b.name);
                if let Some(parent) = open.get(track.as_str()).and_then(|s| s.last()) {
                    assert!(parent.ts <= b.ts, "{what}: {track}: improper nesting");
                }
                done.push((b, *ts));
            }
            'I' => done.push((begin.clone().unwrap(), *ts)),
            _ => {}
        }
    }
    for (track, stack) in open {
        assert!(stack.is_empty(), "{what}: track {track}: {} slices never ended", stack.len());
    }
    done
}

fn decode_perfetto(bytes: &[u8]) -> Vec<(String, char, i64, Option<Begin>)> {
    let trace = Trace::parse_from_bytes(bytes).expect("the export decodes as Perfetto's Trace message");
    assert!(!trace.packet.is_empty());
    assert_eq!(trace.packet[0].sequence_flags(), 1, "the first packet clears the incremental state");
    let mut named: HashMap<u64, String> = HashMap::new();
    let mut out = Vec::new();
    for p in &trace.packet {
        assert_eq!(p.trusted_packet_sequence_id(), 1);
        if p.has_track_descriptor() {
            let d = p.track_descriptor();
            named.insert(d.uuid(), d.name().to_string());
        }
        if !p.has_track_event() {
            continue;
        }
        let e = p.track_event();
        let track = format!("{:#x}", e.track_uuid());
        assert!(named.contains_key(&e.track_uuid()), "a track event before its track's descriptor");
        let ts = p.timestamp() as i64;
        match e.type_() {
            Type::TYPE_SLICE_BEGIN | Type::TYPE_INSTANT => {
                let event_id =
                    e.debug_annotations.iter().find(|a| a.name() == "event_id").map(|a| a.string_value().to_string());
                let b = Begin {
                    track: track.clone(),
                    ts,
                    name: e.name().to_string(),
                    cat: e.categories.first().cloned().unwrap_or_default(),
                    event_id,
                    flows_out: e.flow_ids.clone(),
                    flows_in: e.terminating_flow_ids.clone(),
                };
                let kind = if e.type_() == Type::TYPE_INSTANT { 'I' } else { 'B' };
                out.push((track, kind, ts, Some(b)));
            }
            Type::TYPE_SLICE_END => out.push((track, 'E', ts, None)),
            _ => {}
        }
    }
    out
}

fn decode_chrome(bytes: &[u8]) -> Vec<(String, char, i64, Option<Begin>)> {
    let v: Value = serde_json::from_slice(bytes).expect("the export parses as JSON");
    let origin = v["otherData"]["origin_unix_ns"].as_i64().unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let ns = |e: &Value| origin + (e["ts"].as_f64().unwrap() * 1000.0).round() as i64;
    // flows: the JSON form writes them as s/f events right after the slice they bind to
    let mut out: Vec<(String, char, i64, Option<Begin>)> = Vec::new();
    let mut last_begin: Option<usize> = None;
    for e in events {
        let track = format!("{}/{}", e["pid"], e["tid"]);
        match e["ph"].as_str().unwrap() {
            ph @ ("B" | "i") => {
                let b = Begin {
                    track: track.clone(),
                    ts: ns(e),
                    name: e["name"].as_str().unwrap().to_string(),
                    cat: e["cat"].as_str().unwrap().to_string(),
                    event_id: e["args"]["event_id"].as_str().map(str::to_string),
                    flows_out: vec![],
                    flows_in: vec![],
                };
                out.push((track, if ph == "B" { 'B' } else { 'I' }, b.ts, Some(b)));
                last_begin = Some(out.len() - 1);
            }
            "E" => {
                out.push((track, 'E', ns(e), None));
                last_begin = None;
            }
            ph @ ("s" | "f") => {
                let i = last_begin.expect("a flow event follows the slice it binds to");
                let b = out[i].3.as_mut().unwrap();
                assert_eq!(b.track, track, "a flow event on another track than its slice");
                assert_eq!(b.ts, ns(e), "a flow event at another time than its slice's begin");
                let id = e["id"].as_u64().unwrap();
                if ph == "s" {
                    b.flows_out.push(id);
                } else {
                    assert_eq!(e["bp"], "e");
                    b.flows_in.push(id);
                }
            }
            "C" | "M" => last_begin = None,
            other => panic!("unexpected phase {other}"),
        }
    }
    out
}

fn check(path: &Path, format: Format, chunk_events: u64) {
    let store = open_store(path).unwrap();
    let what = format!("{} {format:?} chunk {chunk_events}", path.display());
    let (bytes, summary) = export_to_vec(store.as_ref(), format, chunk_events);
    let decoded = match format {
        Format::Perfetto => decode_perfetto(&bytes),
        Format::Chrome => decode_chrome(&bytes),
    };
    let slices = check_nesting(&decoded, &what);
    let (calls, off_cpu) = expected(store.as_ref());
    let gpu_cats: HashSet<String> =
        GPU_CALL_SOURCES.iter().map(|&s| causeway_model::codes::source_name(s).into_owned()).collect();
    let exported_calls = slices.iter().filter(|(b, _)| gpu_cats.contains(&b.cat)).count() as u64;
    let exported_off = slices.iter().filter(|(b, _)| b.cat == "off_cpu").count() as u64;
    assert_eq!(exported_calls, calls, "{what}: call slices");
    assert_eq!(exported_off, off_cpu, "{what}: off-CPU slices");
    assert_eq!((summary.calls, summary.off_cpu), (calls, off_cpu), "{what}: summary");

    // every call slice at the trace's own nanoseconds, begin and end
    let times = call_times(store.as_ref());
    for (b, end) in slices.iter().filter(|(b, _)| gpu_cats.contains(&b.cat)) {
        let id = b.event_id.as_ref().expect("a call slice names its event");
        assert_eq!(times.get(id), Some(&(b.ts, *end)), "{what}: call {id} times");
    }

    // flows: every start has exactly one end
    let mut starts: BTreeMap<u64, &Begin> = BTreeMap::new();
    let mut ends: BTreeMap<u64, &Begin> = BTreeMap::new();
    for (b, _) in &slices {
        for f in &b.flows_out {
            assert!(starts.insert(*f, b).is_none(), "{what}: flow {f} starts twice");
        }
        for f in &b.flows_in {
            assert!(ends.insert(*f, b).is_none(), "{what}: flow {f} ends twice");
        }
    }
    assert_eq!(starts.keys().collect::<Vec<_>>(), ends.keys().collect::<Vec<_>>(), "{what}: unmatched flows");

    // each preemption's culprit flows into an off-CPU slice at the same instant
    let culprits: Vec<&Begin> = slices.iter().map(|(b, _)| b).filter(|b| b.cat == "culprit").collect();
    assert_eq!(culprits.len() as u64, summary.culprit_slices);
    for c in &culprits {
        let to = ends[&c.flows_out[0]];
        assert_eq!(to.cat, "off_cpu", "{what}: a culprit's flow ends at {}", to.name);
        assert_eq!(to.ts, c.ts);
        assert_eq!(to.name, "off-CPU: preempted");
    }

    // each chain's evidence events are flow ends from that chain's annotation
    let chains = evidence(store.as_ref());
    assert_eq!(summary.chains, chains.len() as u64, "{what}: chains annotated");
    for (chain, ids) in &chains {
        let mark = slices
            .iter()
            .map(|(b, _)| b)
            .find(|b| b.cat == "chain" && b.name.starts_with(&format!("{chain} ")))
            .unwrap_or_else(|| panic!("{what}: no annotation for chain {chain}"));
        let targets: HashSet<&str> =
            mark.flows_out.iter().filter_map(|f| ends.get(f)).filter_map(|b| b.event_id.as_deref()).collect();
        for id in ids {
            assert!(targets.contains(id.as_str()), "{what}: chain {chain}: no flow to evidence event {id}");
        }
    }
}

#[test]
fn every_investigation_exports_to_perfetto_and_decodes_back() {
    for path in investigations() {
        check(&path, Format::Perfetto, 250_000);
    }
}

#[test]
fn every_investigation_exports_to_chrome_json_and_parses_back() {
    for path in investigations() {
        check(&path, Format::Chrome, 250_000);
    }
}

#[test]
fn small_windows_give_the_same_export_as_one() {
    // windows of ~100 events: the state carried across windows (open slices, flows, rates) must
    // give the same slices, flows and counts as one window
    for path in investigations() {
        check(&path, Format::Perfetto, 100);
        let store = open_store(&path).unwrap();
        let (_, one) = export_to_vec(store.as_ref(), Format::Perfetto, 10_000_000);
        let (_, many) = export_to_vec(store.as_ref(), Format::Perfetto, 100);
        assert!(many.windows > one.windows, "{}: {} windows", path.display(), many.windows);
        let strip = |s: ExportSummary| ExportSummary { windows: 0, ..s };
        assert_eq!(strip(one), strip(many), "{}", path.display());
    }
}

#[test]
fn an_ingero_db_exports_with_its_calls_and_intervals() {
    let db = causeway_testdata::ingero_db("pytorch-dataloader-starvation.db");
    check(&db, Format::Perfetto, 250_000);
    check(&db, Format::Chrome, 250_000);
}

#[test]
fn a_pid_filter_keeps_that_process_only() {
    let path = investigations().into_iter().find(|p| p.to_string_lossy().contains("cpu-contention")).unwrap();
    let store = open_store(&path).unwrap();
    let pid = count(
        store.as_ref(),
        "SELECT pid FROM events WHERE source IN (1, 4) GROUP BY pid ORDER BY count(*) DESC LIMIT 1",
    ) as u32;
    let mut out = Vec::new();
    let req = ExportRequest { pid: Some(pid), ..Default::default() };
    let s = export(store.as_ref(), &req, Format::Chrome, &mut out).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let calls =
        count(store.as_ref(), &format!("SELECT count(*) FROM events WHERE source IN (1, 4, 8, 9) AND pid = {pid}"));
    assert_eq!(s.calls, calls);
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] == "B" && e["cat"] != "culprit" && e["cat"] != "chain" {
            assert_eq!(e["pid"].as_u64(), Some(u64::from(pid)), "{e}");
        }
    }
}
