//! Live NVML sampling: mock-cuda's `libnvidia-ml.so.1` loaded at run time by the tracer while it
//! traces a steady workload whose GPU is throttled for a planted window (`MOCK_GPU_THROTTLE`, read
//! by the mock GPU and the mock NVML alike) and reports an Xid: the samples arrive at the asked
//! rate with the window's reasons and clock, the Xid is a `gpu_xid` event, and the attachments say
//! what NVML saw. Without NVML the trace goes on and says so.

mod common;

use causeway_model::codes::op;
use causeway_probes::NvmlOptions;
use common::*;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn gpu_samples_show_a_planted_throttle_and_an_xid() {
    require_root();
    let lib = mock_build().join("libnvidia-ml.so.1");
    let t0 = now_ms();
    let (from, to) = (t0 + 600, t0 + 1_200);
    // the environment is the workload's and the tracer's: both read the planted window
    std::env::set_var("MOCK_GPU_THROTTLE", format!("{from}:{to}:0x40:4"));
    std::env::set_var("MOCK_NVML_XID", format!("{}:79", t0 + 900));
    let (r, c, w) = run_traced(&["steady", "--ms", "1800"], |o| {
        o.nvml = NvmlOptions { hz: 20, lib: Some(lib.clone()) };
    });
    std::env::remove_var("MOCK_GPU_THROTTLE");
    std::env::remove_var("MOCK_NVML_XID");
    assert_eq!(r.command_exit, Some(0));
    assert_eq!(w.values.get("ERRORS").map(String::as_str), Some("0"));
    let s = &c.gpu_samples;
    // 20 Hz over about 1.8 s of tracing (and the trace's start and end around it)
    assert!(s.len() >= 25 && s.len() <= 120, "{} samples", s.len());
    assert!(s.windows(2).all(|p| p[0].ts_ns <= p[1].ts_ns));
    assert!(s
        .iter()
        .all(|x| x.gpu == 0 && x.sm_clock_max_mhz == 1980 && x.mem_total_bytes > 0 && x.power_limit_mw == 700_000));
    let inside = |ts: i64| ts >= from * 1_000_000 + 60_000_000 && ts <= to * 1_000_000 - 60_000_000;
    let outside = |ts: i64| ts <= from * 1_000_000 - 60_000_000 || ts >= to * 1_000_000 + 60_000_000;
    let hot: Vec<_> = s.iter().filter(|x| inside(x.ts_ns)).collect();
    assert!(hot.len() >= 5, "{} samples inside the window", hot.len());
    assert!(
        hot.iter().all(|x| x.throttle_reasons == 0x40 && x.sm_clock_mhz == 495 && x.temperature_c == 91),
        "{hot:?}"
    );
    let cool: Vec<_> = s.iter().filter(|x| outside(x.ts_ns)).collect();
    assert!(!cool.is_empty() && cool.iter().all(|x| x.throttle_reasons == 0 && x.sm_clock_mhz == 1980), "{cool:?}");
    // the planted Xid, once
    let xid: Vec<_> = c.events.iter().filter(|e| op::GPU_XID.is(e.source, e.op)).collect();
    assert_eq!(xid.len(), 1, "{xid:?}");
    assert_eq!((xid[0].arg0, xid[0].gpu_id), (79, 0));
    let nvml = c.attachments.iter().find(|a| a.kind == "nvml").expect("an nvml attachment row");
    assert!(nvml.complete && nvml.note.starts_with("NVML (driver"), "{nvml:?}");
    assert!(nvml.symbols.iter().any(|g| g.contains("H100")), "{nvml:?}");
}

#[test]
fn without_nvml_the_trace_goes_on_and_says_so() {
    require_root();
    let (r, c, _) = run_traced(&["steady", "--ms", "200"], |o| {
        o.nvml = NvmlOptions { hz: 10, lib: Some("/nonexistent/libnvidia-ml.so.1".into()) };
    });
    assert_eq!(r.command_exit, Some(0));
    assert!(c.gpu_samples.is_empty());
    assert!(!c.events.is_empty());
    let nvml = c.attachments.iter().find(|a| a.kind == "nvml").expect("an nvml attachment row");
    assert!(!nvml.complete && nvml.note.starts_with("no NVML"), "{nvml:?}");
    assert!(r.notes.iter().any(|n| n.starts_with("no NVML")), "{:?}", r.notes);
}
