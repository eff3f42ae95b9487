//! One node's trace read back from the lake (`node_store`) answers every `TraceStore` question
//! exactly as the local trace it was shipped from: events, ids and order, every filter, stacks,
//! names, losses, sessions, the CUDA and NCCL side tables, the device timeline with its launching
//! calls, the nearest-rank summary, the explain report, and guarded SQL (with the lake's own
//! functions refused).

mod common;

use causeway_backends::{open_store, EventFilter, QueryLimits, SyntheticJob, SyntheticTrace, TraceStore};
use causeway_fleet::{node_store, ShipOptions, Shipper, Tier};
use causeway_model::codes::op;
use causeway_model::time::TimeWindow;
use causeway_testdata::FleetCatalog;
use common::lake;

/// A host trace (SyntheticTrace: launches, syncs, copies, scheduler detail, block I/O) plus the
/// NCCL ranks of a job, in one SQLite file.
fn write_rich_trace(path: &std::path::Path) {
    let job = SyntheticJob {
        world: 2,
        steps: 50,
        period_ns: 10_000_000,
        start_ns: 1_000_000_000,
        comm_hash: 0x77,
        launches_per_step: 3,
        transfer_ns: 1_000_000,
        straggler: Some((1, 10, 20, 5_000_000)),
    };
    job.write_node(path, "rich", &[(0, 0, Some(100)), (1, 0, Some(101))], 9).unwrap();
    // append the host trace as a second session of the same file
    let events = SyntheticTrace::new(5, 1_000_000_000).take(20_000);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let session = causeway_model::SessionInfo {
            started_at_ns: 1_000_000_000,
            tool_version: "test".into(),
            node: "rich".into(),
            ..Default::default()
        };
        let mut sink = causeway_backends::create_sink(path, session, None).unwrap();
        sink.write_process_name(4821, "python3".into(), 1_000_000_000).await.unwrap();
        // a serving engine's scrapes, shipped in two flushes (the batches below)
        let scrape = |k: i64, metric: &str, le: Option<f64>, value: f64| causeway_model::ServingSample {
            ts_ns: 1_000_000_000 + k * 100_000_000,
            pid: 4821,
            engine: "vllm".into(),
            metric: metric.into(),
            labels: r#"{"model_name":"m"}"#.into(),
            le,
            value,
        };
        let serving: Vec<causeway_model::ServingSample> = (0..8)
            .flat_map(|k| {
                [
                    scrape(k, "vllm:num_requests_waiting", None, (k % 3) as f64),
                    scrape(k, "vllm:time_to_first_token_seconds_bucket", Some(0.25), 2.0 * k as f64),
                    scrape(k, "vllm:time_to_first_token_seconds_count", None, 3.0 * k as f64),
                    scrape(k, "vllm:time_to_first_token_seconds_sum", None, 0.125 * k as f64),
                ]
            })
            .collect();
        sink.write_serving_samples(serving).await.unwrap();
        // NVML's samples of two GPUs with their link health, and the processes on them
        for k in 0..10i64 {
            let ts_ns = 1_000_000_000 + k * 100_000_000;
            let sample = |gpu: i32| causeway_model::GpuSample {
                ts_ns,
                gpu,
                util_gpu_pct: 90,
                pcie_link_gen: if gpu == 1 { 1 } else { 5 },
                pcie_link_gen_max: 5,
                pcie_link_width: 16,
                pcie_link_width_max: 16,
                nvlink_crc_flit_errors: k * i64::from(gpu),
                nvlink_crc_data_errors: 0,
                nvlink_replay_errors: -1,
                nvlink_recovery_errors: 0,
                ..Default::default()
            };
            let proc = |gpu: i32, pid: u32| causeway_model::GpuProcessMemory {
                ts_ns,
                gpu,
                pid,
                used_bytes: (k + 1) << 30,
                contexts: 1,
                alive: i32::from(k < 8),
            };
            sink.write_gpu_samples(vec![sample(0), sample(1)], vec![proc(0, 4821), proc(1, 4821), proc(1, 99)])
                .await
                .unwrap();
        }
        for c in events.chunks(5000) {
            sink.write_batch(c.to_vec()).await.unwrap();
        }
        sink.write_gpu_timeline(device_timeline(&events)).await.unwrap();
        sink.write_footprint(footprint()).await.unwrap();
        sink.finish(2_000_000_000).await.unwrap();
    });
}

/// What a traced server touched (`trace --footprint`): a row or two of each footprint table.
fn footprint() -> causeway_model::FootprintPart {
    use causeway_model::{FootprintCpu, FootprintExec, FootprintFd, FootprintRequest, FootprintSyscall};
    let call = |request: u32, nr: u32, name: &str, calls: i64| FootprintSyscall {
        seen_at_ns: 1_500_000_000,
        pid: 4821,
        request,
        nr,
        name: name.into(),
        calls,
        total_ns: calls * 900,
        max_ns: 2_000,
        bytes: if nr == 0 { calls * 64 } else { 0 },
        ..Default::default()
    };
    causeway_model::FootprintPart {
        syscalls: vec![call(0, 0, "read", 12), call(1, 257, "openat", 3), call(1, 42, "connect", 1)],
        cpu: vec![FootprintCpu { seen_at_ns: 1_500_000_000, pid: 4821, request: 1, on_cpu_ns: 3_000_000, switches: 4 }],
        fds: vec![
            FootprintFd {
                pid: 4821,
                fd: 5,
                kind: "file".into(),
                how: "open".into(),
                name: "/data/notes.sqlite".into(),
                opened_ns: 1_200_000_000,
                request: 1,
                bytes_written: 8192,
                writes: 2,
                ..Default::default()
            },
            FootprintFd {
                pid: 4821,
                fd: 4,
                kind: "socket".into(),
                how: "before_attach".into(),
                name: "127.0.0.1:8080".into(),
                flags: 2,
                ..Default::default()
            },
        ],
        requests: vec![FootprintRequest {
            pid: 4821,
            request: 1,
            fd: 6,
            begin_ns: 1_200_000_000,
            end_ns: 1_250_000_000,
            bytes_in: 180,
            bytes_out: 120,
            head_in: "POST /mcp HTTP/1.1".into(),
            head_out: "HTTP/1.1 200 OK".into(),
        }],
        execs: vec![FootprintExec {
            ts_ns: 1_230_000_000,
            pid: 4900,
            ppid: 4821,
            request: 1,
            filename: "/usr/bin/echo".into(),
            argv: "echo hello".into(),
        }],
    }
}

/// A device timeline over the host trace: a kernel per launch of its first 2,000 events (each
/// naming its launch once the trace is finished), a calibration, the devices, notes.
fn device_timeline(events: &[causeway_model::Event]) -> causeway_backends::GpuTimelinePart {
    use causeway_model::{GpuClockSync, GpuDevice, GpuOp, GpuOpKind, GpuTimelineNote};
    let ops: Vec<GpuOp> = events[..2000]
        .iter()
        .filter(|e| op::CUDA_LAUNCH_KERNEL.is(e.source, e.op))
        .map(|e| GpuOp {
            pid: e.pid,
            device: 0,
            context: 1,
            stream: 7,
            kind: GpuOpKind::Kernel,
            start_ns: e.ts_ns + e.dur_ns + 5_000,
            end_ns: e.ts_ns + e.dur_ns + 90_000,
            correlation: (e.ts_ns / 1000) as u32,
            name: "_Z4gemmIfEvPKfi".into(),
            bytes: 0,
            launch_tid: e.tid,
            launch_start_ns: e.ts_ns + 50,
            launch_end_ns: e.ts_ns + e.dur_ns - 50,
            launch_cbid: GpuOp::RUNTIME_CBID_BASE + 211,
            launch_event_id: 0,
        })
        .collect();
    let pid = ops[0].pid;
    let note =
        |ts_ns: i64, kind: &str| GpuTimelineNote { pid, ts_ns, kind: kind.into(), count: 0, detail: kind.into() };
    causeway_backends::GpuTimelinePart {
        clock_syncs: vec![GpuClockSync { pid, cupti_ns: 77, trace_ns: events[0].ts_ns, error_ns: 700 }],
        devices: vec![GpuDevice { pid, device: 0, uuid: "GPU-1".into(), name: "H100".into(), nvml_index: 0 }],
        notes: vec![note(events[0].ts_ns, "started"), note(events[1999].ts_ns, "stopped")],
        ops,
    }
}

#[test]
fn a_node_in_the_lake_reads_like_its_local_trace() {
    let catalog = FleetCatalog::start("fleet-store");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rich.db");
    write_rich_trace(&path);
    let opts =
        ShipOptions { tier: Tier::All, data_path: Some(catalog.data_path()), batch_rows: 7_000, ..Default::default() };
    Shipper::open(&lake(&catalog.ship_lake()), &path, &opts).unwrap().ship_all().unwrap();

    let local = open_store(&path).unwrap();
    let remote = node_store(&lake(&catalog.read_lake()), "rich", None).unwrap();
    let (l, r) = (local.info(), remote.info());
    assert_eq!((l.events, l.first_ns, l.last_ns, l.sampled), (r.events, r.first_ns, r.last_ns, r.sampled));
    assert_eq!(r.format, l.format);
    assert!(r.missing.is_empty(), "{:?}", r.missing);

    let all = EventFilter::default();
    let back = remote.events(&all).unwrap();
    assert_eq!(back.len(), 20_000 + 2 * 50 * 5);
    assert!(back == local.events(&all).unwrap(), "events, ids and order");
    let window = TimeWindow { from_ns: Some(1_100_000_000), to_ns: Some(1_300_000_000) };
    for f in [
        EventFilter::window(window),
        EventFilter { pid: Some(4821), ..Default::default() },
        EventFilter { tids: Some(vec![4822, 4823]), ..Default::default() },
        EventFilter { sources: Some(vec![9]), ..Default::default() },
        EventFilter { ops: Some(vec![op::CUDA_STREAM_SYNC, op::SCHED_SWITCH]), window, ..Default::default() },
    ] {
        let (a, b) = (remote.events(&f).unwrap(), local.events(&f).unwrap());
        assert!(a == b, "events differ for {f:?}: {} vs {} rows", a.len(), b.len());
        // a scan's order is the engine's: compare the same rows by id
        let (mut a, mut b) = (Vec::new(), Vec::new());
        remote.scan_slim(&f, &mut |e| a.push(e)).unwrap();
        local.scan_slim(&f, &mut |e| b.push(e)).unwrap();
        a.sort_by(|x, y| x.id.cmp(&y.id));
        b.sort_by(|x, y| x.id.cmp(&y.id));
        assert!(a == b, "slim scans differ for {f:?}: {} vs {} rows", a.len(), b.len());
    }
    assert_eq!(remote.sessions().unwrap(), local.sessions().unwrap());
    assert_eq!(remote.process_names().unwrap(), local.process_names().unwrap());
    assert_eq!(remote.loss_counters().unwrap(), local.loss_counters().unwrap());
    assert_eq!(remote.nccl_calls(&TimeWindow::ALL).unwrap(), local.nccl_calls(&TimeWindow::ALL).unwrap());
    assert_eq!(remote.process_ranks().unwrap(), local.process_ranks().unwrap());
    let samples = local.gpu_samples(&TimeWindow::ALL).unwrap();
    assert!(samples.len() == 20 && samples.iter().any(|s| s.pcie_link_gen == 1), "fixture: GPU samples");
    assert_eq!(remote.gpu_samples(&TimeWindow::ALL).unwrap(), samples, "GPU samples with their link columns");
    let procs = local.gpu_process_memory(&TimeWindow::ALL).unwrap();
    assert_eq!(procs.len(), 30, "fixture: processes' memory");
    assert_eq!(remote.gpu_process_memory(&TimeWindow::ALL).unwrap(), procs, "processes' memory, exactly once");
    let gpu_ops = |s: &dyn TraceStore, w: &TimeWindow| {
        let mut v = Vec::new();
        s.scan_gpu_ops(w, &mut |o| v.push(o)).unwrap();
        v
    };
    let ops = gpu_ops(local.as_ref(), &TimeWindow::ALL);
    assert!(ops.len() > 50 && ops.iter().all(|o| o.launch_event_id > 0), "fixture: every op names its launch");
    assert_eq!(gpu_ops(remote_ref(&remote), &TimeWindow::ALL), ops, "device ops, exactly once, launches resolved");
    assert_eq!(gpu_ops(remote_ref(&remote), &window), gpu_ops(local.as_ref(), &window));
    assert_eq!(remote.gpu_clock_syncs().unwrap(), local.gpu_clock_syncs().unwrap());
    assert_eq!(remote.gpu_devices().unwrap(), local.gpu_devices().unwrap());
    assert_eq!(remote.gpu_timeline_notes().unwrap(), local.gpu_timeline_notes().unwrap());
    let footprint = local.footprint().unwrap();
    assert_eq!((footprint.syscalls.len(), footprint.fds.len(), footprint.execs.len()), (3, 2, 1), "fixture: footprint");
    assert_eq!(remote.footprint().unwrap(), footprint, "the footprint tables, exactly once");
    let serving = local.serving_samples(&TimeWindow::ALL).unwrap();
    assert_eq!(serving.len(), 32);
    assert_eq!(remote.serving_samples(&TimeWindow::ALL).unwrap(), serving, "serving samples, exactly once");
    assert_eq!(remote.thread_comms(&all, true).unwrap(), local.thread_comms(&all, true).unwrap());
    let per_mille = [500, 900, 990];
    assert_eq!(
        remote.duration_summary(&all, &per_mille, false).unwrap(),
        local.duration_summary(&all, &per_mille, false).unwrap(),
        "nearest-rank figures"
    );

    // the analyses over it: the same report
    let req = causeway_analysis::ExplainRequest::default();
    let a = causeway_analysis::explain(remote_ref(&remote), &req).unwrap();
    let b = causeway_analysis::explain(local.as_ref(), &req).unwrap();
    assert_eq!(serde_json::to_value(&a.chains).unwrap(), serde_json::to_value(&b.chains).unwrap());
    assert!(a.chains.iter().any(|c| c.kind == causeway_analysis::ChainKind::Straggler), "{:?}", a.chains.len());

    // guarded SQL over the node's views: answers, and the lake's functions are refused
    let q = |sql: &str| remote.query(sql, &QueryLimits::default());
    let n = q("SELECT count(*) FROM events WHERE source = 9").unwrap();
    assert_eq!(n.rows[0][0], serde_json::json!(100));
    for bad in
        ["SELECT * FROM ducklake_snapshots('lake')", "SELECT * FROM lake.events", "SELECT * FROM read_parquet('x')"]
    {
        assert!(q(bad).is_err(), "{bad} answered");
    }
}

fn remote_ref(s: &causeway_backends::duckdb::DuckDbStore) -> &dyn TraceStore {
    s
}

/// A DuckDB trace ships its side tables whole: its `rowid`s count from 0, SQLite's from 1, and the
/// watermarks of `nccl_calls`, `gpu_samples`, `serving_samples` and the device timeline's tables
/// must take the first row of each too.
#[test]
fn a_duckdb_trace_ships_the_first_row_of_every_watermarked_table() {
    let catalog = FleetCatalog::start("fleet-store-duckdb");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("rich.db");
    write_rich_trace(&sqlite);
    let path = dir.path().join("rich.duckdb");
    causeway_backends::convert(&sqlite, &path, Some(causeway_backends::Engine::DuckDb), &mut |_, _| {}).unwrap();
    let opts =
        ShipOptions { tier: Tier::All, data_path: Some(catalog.data_path()), batch_rows: 7_000, ..Default::default() };
    Shipper::open(&lake(&catalog.ship_lake()), &path, &opts).unwrap().ship_all().unwrap();
    let local = open_store(&path).unwrap();
    let remote = node_store(&lake(&catalog.read_lake()), "rich", None).unwrap();
    let all = TimeWindow::ALL;
    assert_eq!(remote.nccl_calls(&all).unwrap(), local.nccl_calls(&all).unwrap());
    assert_eq!(remote.gpu_samples(&all).unwrap(), local.gpu_samples(&all).unwrap());
    let procs = local.gpu_process_memory(&all).unwrap();
    assert_eq!(remote.gpu_process_memory(&all).unwrap(), procs, "every process memory row, the first included");
    assert_eq!(remote.serving_samples(&all).unwrap(), local.serving_samples(&all).unwrap());
    let ops = |s: &dyn TraceStore| {
        let mut v = Vec::new();
        s.scan_gpu_ops(&all, &mut |o| v.push(o)).unwrap();
        v
    };
    let local_ops = ops(local.as_ref());
    assert!(!local_ops.is_empty());
    assert_eq!(ops(remote_ref(&remote)), local_ops, "every device op, the first included");
    assert_eq!(remote.gpu_timeline_notes().unwrap(), local.gpu_timeline_notes().unwrap());
    assert_eq!(remote.footprint().unwrap(), local.footprint().unwrap(), "every footprint row, the first included");
}
