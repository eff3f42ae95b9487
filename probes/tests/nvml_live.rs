//! Live NVML sampling: mock-cuda's `libnvidia-ml.so.1` loaded at run time by the tracer while it
//! traces a steady workload whose GPU is throttled for a planted window (`MOCK_GPU_THROTTLE`, read
//! by the mock GPU and the mock NVML alike) and reports an Xid: the samples arrive at the asked
//! rate with the window's reasons and clock, the Xid is a `gpu_xid` event, and the attachments say
//! what NVML saw. The samples carry the PCIe link (`MOCK_NVML_PCIE`) and the NVLink errors planted
//! at a time (`MOCK_NVML_NVLINK_CRC`), and each lists the processes NVML names (`MOCK_NVML_PIDS`: one
//! that is gone, whose memory grows, and this test's own) with whether they still exist. Without
//! NVML the trace goes on and says so.

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
    std::env::set_var("MOCK_NVML_PCIE", "3:8");
    std::env::set_var("MOCK_NVML_NVLINK_CRC", format!("{}:7", t0 + 900));
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let me = std::process::id();
    std::env::set_var("MOCK_NVML_PIDS", format!("{gone_pid}:100:0:50,{me}:200:0"));
    let (r, c, w) = run_traced(&["steady", "--ms", "1800"], |o| {
        o.nvml = NvmlOptions { hz: 20, lib: Some(lib.clone()) };
    });
    for knob in ["MOCK_GPU_THROTTLE", "MOCK_NVML_XID", "MOCK_NVML_PCIE", "MOCK_NVML_NVLINK_CRC", "MOCK_NVML_PIDS"] {
        std::env::remove_var(knob);
    }
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
    // the link as planted (gen 3 x8 of gen 5 x16), the NVLink errors from their time on
    assert!(
        s.iter()
            .all(|x| (x.pcie_link_gen, x.pcie_link_gen_max, x.pcie_link_width, x.pcie_link_width_max) == (3, 5, 8, 16)),
        "{:?}",
        s[0]
    );
    let planted = (t0 + 900) * 1_000_000;
    for x in s.iter().filter(|x| (x.ts_ns - planted).abs() > 60_000_000) {
        let want = if x.ts_ns > planted { 7 } else { 0 };
        assert_eq!(
            (x.nvlink_crc_flit_errors, x.nvlink_crc_data_errors, x.nvlink_replay_errors, x.nvlink_recovery_errors),
            (want, 0, 0, 0),
            "at {} ms",
            x.ts_ns / 1_000_000 - t0
        );
    }
    assert!(s.iter().any(|x| x.nvlink_errors() == 7) && s.iter().any(|x| x.nvlink_errors() == 0));
    // both planted processes at every sample: the one that is gone, growing 50 MiB/s, and this one
    let p = &c.gpu_processes;
    assert_eq!(p.len(), 2 * s.len(), "two processes per sample");
    let gone: Vec<_> = p.iter().filter(|x| x.pid == gone_pid).collect();
    let mine: Vec<_> = p.iter().filter(|x| x.pid == me).collect();
    assert!(gone.iter().all(|x| x.alive == 0 && x.gpu == 0 && x.contexts == 1), "{:?}", gone[0]);
    assert!(mine.iter().all(|x| x.alive == 1 && x.used_bytes == 200 << 20), "{:?}", mine[0]);
    let (first, last) = (gone[0], gone[gone.len() - 1]);
    let grew = (last.used_bytes - first.used_bytes) as f64 / (1 << 20) as f64;
    let secs = (last.ts_ns - first.ts_ns) as f64 / 1e9;
    assert!(first.used_bytes >= 100 << 20 && (grew - 50.0 * secs).abs() < 10.0, "{grew} MiB in {secs} s");
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
