//! The conformance tests of `events.launch_config` and the `launch_configs`, `kernel_names`,
//! `attachments` and `nccl_calls` tables, for every engine (listed in `conformance!`): what a sink writes reads back
//! exactly (configurations stored once per key, a later kernel name replacing an earlier one, 0 as
//! NULL), a trace recorded before them reads as empty and gains them when a session is appended,
//! `convert` carries them across engines with their sessions, and Ingero DBs have none.

use std::path::Path;

use causeway_backends::convert;
use causeway_backends::*;
use causeway_model::codes::{op, OpCode};
use causeway_model::time::TimeWindow;
use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, NcclCall, NetPeer, ProcessCgroup,
    ProcessRank, ServingSample,
};

use super::{file, rt, session, write_trace, N};

/// What `write_trace` writes besides events, and what a store must read back.
pub struct Fixture {
    pub configs: Vec<LaunchConfig>,
    /// The kernel names, call by call: the same (pid, handle) is renamed across calls and twice in one call.
    pub name_calls: Vec<Vec<KernelName>>,
    /// What `kernel_names()` must return, by (pid, handle).
    pub names: Vec<KernelName>,
    pub attachments: Vec<LibraryAttach>,
    /// NCCL call details, in time order (written out of order, in two calls).
    pub nccl: Vec<NcclCall>,
    /// GPU samples of two GPUs, in (time, gpu) order.
    pub gpu: Vec<GpuSample>,
    /// The processes NVML listed at those samples, in (time, gpu, pid) order.
    pub procs: Vec<GpuProcessMemory>,
    /// Process ranks as `process_ranks()` returns them (by pid, the last per pid).
    pub ranks: Vec<ProcessRank>,
    /// Process cgroups as `process_cgroups()` returns them (by pid, the last per pid).
    pub cgroups: Vec<ProcessCgroup>,
    /// A serving engine's samples in (time, pid, metric, labels, le) order: a gauge, a histogram's
    /// buckets, sum and count, fractional values and bounds.
    pub serving: Vec<ServingSample>,
    /// Socket peers by key: IPv4, IPv6 (a mapped IPv4 one reads as IPv4) and a Unix socket.
    pub peers: Vec<NetPeer>,
}

/// The side tables added after the first native schema (an older trace lacks them all).
const SIDE_TABLES: [&str; 14] = [
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
];

fn cfg(grid: [u32; 3], block: [u32; 3], shared_mem_bytes: u32, cluster: [u32; 3]) -> LaunchConfig {
    LaunchConfig { grid, block, shared_mem_bytes, cluster }
}

fn kernel(pid: u32, handle: i64, name: &str, mangled: &str, how: &str) -> KernelName {
    KernelName { pid, handle, name: name.into(), mangled: mangled.into(), how: how.into() }
}

impl Fixture {
    pub fn new() -> Fixture {
        let configs = vec![
            cfg([4096, 1, 1], [256, 1, 1], 0, [1, 1, 1]),
            cfg([132, 8, 2], [128, 2, 1], 49_152, [2, 1, 1]),
            // Values past i32: stored as 64-bit integers, read back unchanged.
            cfg([u32::MAX, 65_535, 65_535], [1024, 1, 1], u32::MAX, [8, 1, 1]),
        ];
        let handle = 0x7f00_0000_1000i64;
        let name_calls = vec![
            vec![
                kernel(4821, handle, "old_name", "old_name", "elf"),
                kernel(4821, handle + 0x100, "vector_add(float*, float*, int)", "_Z10vector_addPfS_i", "register"),
                kernel(77, handle, "same handle, other process", "other", "module"),
            ],
            vec![
                kernel(4821, handle, "interim", "interim", "elf"),
                kernel(4821, handle, "gemm<float>(float const*, int)", "_Z4gemmIfEvPKfi", "register"),
                kernel(4821, -5, "negative handle", "neg", "library"),
            ],
        ];
        let names = vec![
            kernel(77, handle, "same handle, other process", "other", "module"),
            kernel(4821, -5, "negative handle", "neg", "library"),
            kernel(4821, handle, "gemm<float>(float const*, int)", "_Z4gemmIfEvPKfi", "register"),
            kernel(4821, handle + 0x100, "vector_add(float*, float*, int)", "_Z10vector_addPfS_i", "register"),
        ];
        let attachments = vec![
            LibraryAttach {
                pid: 4821,
                path: "/usr/lib/x86_64-linux-gnu/libcudart.so.12".into(),
                kind: "runtime".into(),
                how: "maps".into(),
                attached_at_ns: 1_000_000_100,
                complete: true,
                symbols: vec!["cudaLaunchKernel".into(), "cudaMemcpyAsync".into()],
                missing: vec![],
                note: String::new(),
            },
            LibraryAttach {
                pid: 4821,
                path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
                kind: "driver".into(),
                how: "loaded".into(),
                attached_at_ns: 1_000_000_200,
                complete: false,
                symbols: vec!["cuLaunchKernel".into()],
                missing: vec!["cuLaunchKernelEx".into(), "sym \"quoted\", with, commas".into()],
                note: "attached after the process started: calls before it are unknown".into(),
            },
            LibraryAttach {
                pid: 77,
                path: String::new(),
                kind: "runtime_static".into(),
                how: "explicit".into(),
                attached_at_ns: 1_000_000_300,
                complete: false,
                symbols: vec![],
                missing: vec![],
                note: "runtime statically linked without symbols: only driver calls are visible".into(),
            },
        ];
        let nccl_call = |ts_ns: i64, tid: u32, op: OpCode, seq: i64, peer: i32| NcclCall {
            pid: 4821,
            tid,
            ts_ns,
            op: op.op,
            comm_hash: -0x1234_5678_9abc_def0,
            comm: 0x5555_0000_1000,
            rank: 1,
            nranks: 8,
            seq,
            count: 16 << 20,
            datatype: 7,
            redop: if op == op::NCCL_ALL_REDUCE { 0 } else { -1 },
            peer,
            device: 1,
        };
        let nccl = vec![
            nccl_call(1_000_000_010, 4821, op::NCCL_COMM_INIT_RANK, 0, -1),
            nccl_call(1_000_000_500, 4821, op::NCCL_ALL_REDUCE, 1, -1),
            nccl_call(1_000_000_900, 4822, op::NCCL_SEND, 1, 2),
            nccl_call(1_000_001_500, 4821, op::NCCL_ALL_REDUCE, 2, -1),
        ];
        let sample = |ts_ns: i64, gpu: i32, reasons: i64| GpuSample {
            ts_ns,
            gpu,
            sm_clock_mhz: if reasons == 0 { 1980 } else { 495 },
            sm_clock_max_mhz: 1980,
            mem_clock_mhz: 2619,
            throttle_reasons: reasons,
            temperature_c: 91,
            power_mw: 700_000,
            power_limit_mw: 700_000,
            util_gpu_pct: 97,
            util_mem_pct: -1,
            mem_used_bytes: 80 << 30,
            mem_total_bytes: 81_559 << 20,
            pcie_tx_kbps: 123_456,
            pcie_rx_kbps: 654_321,
            nvlink_tx_kib: i64::MAX - 1,
            nvlink_rx_kib: 0,
            ecc_corrected: 2,
            ecc_uncorrected: 0,
            pcie_link_gen: if gpu == 0 { 1 } else { 5 },
            pcie_link_gen_max: 5,
            pcie_link_width: if reasons == 0 { 16 } else { 8 },
            pcie_link_width_max: 16,
            nvlink_crc_flit_errors: ts_ns / 100_000_000,
            nvlink_crc_data_errors: -1,
            nvlink_replay_errors: 0,
            nvlink_recovery_errors: i64::MAX,
        };
        let proc = |ts_ns: i64, gpu: i32, pid: u32, used_bytes: i64, alive: i32| GpuProcessMemory {
            ts_ns,
            gpu,
            pid,
            used_bytes,
            contexts: if pid == 77 { 3 } else { 1 },
            alive,
        };
        let procs = vec![
            proc(1_000_000_000, 0, 77, 300 << 20, 1),
            proc(1_000_000_000, 0, 4821, 70 << 30, 1),
            proc(1_000_000_000, 1, 4821, -1, -1),
            proc(1_100_000_000, 0, 4821, 71 << 30, 0),
        ];
        let gpu = vec![
            sample(1_000_000_000, 0, 0),
            sample(1_000_000_000, 1, 0x40),
            sample(1_100_000_000, 0, 0x20 | 0x4),
            sample(1_100_000_000, 1, 0x1),
        ];
        let rank = |pid: u32, rank: i32, launcher: &str, job: &str| ProcessRank {
            pid,
            rank,
            local_rank: rank % 4,
            world_size: 8,
            local_world_size: -1,
            launcher: launcher.into(),
            job: job.into(),
        };
        let ranks = vec![rank(77, 0, "slurm", "991"), rank(4821, 3, "torch", "run \"7\"")];
        let id = "3f2a1b9c0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
        let mut web = ProcessCgroup::from_path(4821, 9001, &format!("/system.slice/docker-{id}.scope"));
        web.container = "web 'quoted'".into();
        let cgroups = vec![ProcessCgroup::from_path(77, 2, "/user.slice/user-0.slice/session-3.scope"), web];
        let served = |ts_ns: i64, metric: &str, le: Option<f64>, value: f64| ServingSample {
            ts_ns,
            pid: 7001,
            engine: "vllm".into(),
            metric: metric.into(),
            labels: r#"{"engine":"0","model_name":"m"}"#.into(),
            le,
            value,
        };
        let ttft = "vllm:time_to_first_token_seconds";
        let serving = vec![
            served(1_000_000_000, "vllm:kv_cache_usage_perc", None, 0.4375),
            served(1_000_000_000, "vllm:num_requests_waiting", None, 3.0),
            served(1_000_000_000, &format!("{ttft}_bucket"), Some(0.005), 0.0),
            served(1_000_000_000, &format!("{ttft}_bucket"), Some(0.04), 7.0),
            served(1_000_000_000, &format!("{ttft}_bucket"), Some(2.5), 9.0),
            served(1_000_000_000, &format!("{ttft}_count"), None, 10.0),
            served(1_000_000_000, &format!("{ttft}_sum"), None, 12.625),
            served(1_100_000_000, "vllm:num_requests_waiting", None, 0.0),
        ];
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        let mut mapped = [0u8; 16];
        mapped[10..].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 2]);
        let mut peers = vec![
            NetPeer::of_raw(2, &[10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 29500),
            NetPeer::of_raw(10, &v6, 8000),
            NetPeer::of_raw(10, &mapped, 29501),
            NetPeer::of_raw(1, &[0; 16], 0),
        ];
        assert_eq!((peers[2].family, peers[2].address.as_str()), (2, "10.0.0.2"), "a mapped IPv4 peer is IPv4");
        assert_eq!(peers[1].label(), "[::1]:8000");
        peers.sort_by_key(|p| p.peer);
        Fixture { configs, name_calls, names, attachments, nccl, gpu, procs, ranks, cgroups, serving, peers }
    }

    /// Give three launches in four a configuration (so launches without one stay 0).
    pub fn tag_launches(&self, events: &mut [Event]) {
        for (i, e) in events.iter_mut().enumerate() {
            if OpCode::new(e.source, e.op) == op::CUDA_LAUNCH_KERNEL && i % 4 != 0 {
                e.launch_config = self.configs[i % self.configs.len()].key();
            }
        }
    }

    /// Write everything through a sink: the configurations twice (in two calls and repeated in one),
    /// the names call by call, the attachments in two calls.
    pub async fn write(&self, sink: &mut Box<dyn EventSink>) {
        let c = &self.configs;
        sink.write_launch_configs(vec![c[0], c[1], c[0]]).await.unwrap();
        sink.write_launch_configs(vec![c[2], c[1]]).await.unwrap();
        for call in &self.name_calls {
            sink.write_kernel_names(call.clone()).await.unwrap();
        }
        sink.write_attachments(self.attachments[..1].to_vec()).await.unwrap();
        sink.write_attachments(self.attachments[1..].to_vec()).await.unwrap();
        sink.write_nccl_calls(vec![self.nccl[2].clone(), self.nccl[0].clone()]).await.unwrap();
        sink.write_nccl_calls(vec![self.nccl[3].clone(), self.nccl[1].clone()]).await.unwrap();
        let p = &self.procs;
        sink.write_gpu_samples(vec![self.gpu[2].clone(), self.gpu[0].clone()], vec![p[3].clone(), p[1].clone()])
            .await
            .unwrap();
        sink.write_gpu_samples(vec![self.gpu[3].clone(), self.gpu[1].clone()], vec![p[2].clone(), p[0].clone()])
            .await
            .unwrap();
        sink.write_serving_samples(self.serving.iter().rev().cloned().collect()).await.unwrap();
        // twice, the second time with one again: a key is written once
        sink.write_net_peers(self.peers[..3].to_vec()).await.unwrap();
        sink.write_net_peers(self.peers[2..].iter().rev().cloned().collect()).await.unwrap();
        // 4821 first with a stale row (replaced twice: across calls and within one)
        let stale = ProcessRank { rank: 9, ..self.ranks[1].clone() };
        sink.write_process_ranks(vec![stale.clone()]).await.unwrap();
        sink.write_process_ranks(vec![stale, self.ranks[1].clone(), self.ranks[0].clone()]).await.unwrap();
        let stale = ProcessCgroup { container: "old".into(), ..self.cgroups[1].clone() };
        sink.write_process_cgroups(vec![stale]).await.unwrap();
        sink.write_process_cgroups(vec![self.cgroups[1].clone(), self.cgroups[0].clone()]).await.unwrap();
    }

    /// The configurations as `launch_configs()` returns them (by key).
    pub fn configs_by_key(&self) -> Vec<LaunchConfig> {
        let mut c = self.configs.clone();
        c.sort_by_key(|c| c.key());
        c
    }
}

fn count(store: &dyn TraceStore, sql: &str) -> i64 {
    let r = store.query(sql, &QueryLimits::default()).unwrap();
    r.rows[0][0].as_i64().unwrap_or_else(|| panic!("{sql}: {:?}", r.rows))
}

/// A store holding `write_trace`'s data reads back the fixture exactly, with 0 stored as NULL.
pub fn assert_reads_back(store: &dyn TraceStore, all: &[StoredEvent]) {
    let fx = Fixture::new();
    assert_eq!(store.launch_configs().unwrap(), fx.configs_by_key(), "launch configurations, once per key");
    assert_eq!(store.kernel_names().unwrap(), fx.names, "kernel names, the last per (pid, handle)");
    assert_eq!(store.attachments().unwrap(), fx.attachments, "attachments");
    assert_eq!(store.nccl_calls(&TimeWindow::ALL).unwrap(), fx.nccl, "NCCL calls, in time order");
    let window = TimeWindow { from_ns: Some(1_000_000_500), to_ns: Some(1_000_000_900) };
    assert_eq!(store.nccl_calls(&window).unwrap(), fx.nccl[1..3], "NCCL calls of a window, both ends included");
    assert_eq!(store.gpu_samples(&TimeWindow::ALL).unwrap(), fx.gpu, "GPU samples, by time then GPU");
    assert_eq!(store.gpu_process_memory(&TimeWindow::ALL).unwrap(), fx.procs, "processes' memory, by time, GPU, pid");
    assert_eq!(store.serving_samples(&TimeWindow::ALL).unwrap(), fx.serving, "serving samples, in order");
    assert_eq!(store.net_peers().unwrap(), fx.peers, "socket peers, by key, once each");
    assert_eq!(store.process_ranks().unwrap(), fx.ranks, "process ranks, the last per pid");
    assert_eq!(store.process_cgroups().unwrap(), fx.cgroups, "process cgroups, the last per pid");
    let later = TimeWindow { from_ns: Some(1_000_000_001), to_ns: None };
    assert_eq!(store.gpu_samples(&later).unwrap(), fx.gpu[2..], "GPU samples of a window");
    assert_eq!(store.gpu_process_memory(&later).unwrap(), fx.procs[3..], "processes' memory of a window");
    assert_eq!(store.serving_samples(&later).unwrap(), fx.serving[7..], "serving samples of a window");
    let tagged = all.iter().filter(|s| s.event.launch_config != 0).count();
    assert!(tagged > 100 && tagged < N / 2, "fixture: some launches carry a configuration ({tagged})");
    let null = count(store, "SELECT count(*) FROM events WHERE launch_config IS NULL");
    assert_eq!(null as usize, N - tagged, "0 is stored as NULL");
    let keys: std::collections::BTreeSet<i64> = fx.configs.iter().map(|c| c.key()).collect();
    assert!(all.iter().all(|s| s.event.launch_config == 0 || keys.contains(&s.event.launch_config)));
    let joined = count(store, "SELECT count(*) FROM events e JOIN launch_configs c ON c.key = e.launch_config");
    assert_eq!(joined as usize, tagged, "every launch finds its configuration by key");
}

/// Make a trace look recorded before the tables and the column existed.
fn make_older(path: &Path, b: Engine) {
    let drops: String = SIDE_TABLES.iter().map(|t| format!("DROP TABLE {t}; ")).collect();
    let sql = &format!("{drops}ALTER TABLE events DROP COLUMN launch_config;");
    match b {
        Engine::Sqlite => rusqlite::Connection::open(path).unwrap().execute_batch(sql).unwrap(),
        Engine::DuckDb => {
            #[cfg(feature = "duckdb")]
            {
                let c = ::duckdb::Connection::open(path).unwrap();
                c.execute_batch(sql).unwrap();
                c.execute_batch("CHECKPOINT").unwrap();
            }
            #[cfg(not(feature = "duckdb"))]
            panic!("DuckDB traces need the duckdb feature");
        }
    }
}

fn zeroed(all: &[StoredEvent]) -> Vec<StoredEvent> {
    let mut v = all.to_vec();
    for s in &mut v {
        s.event.launch_config = 0;
    }
    v
}

pub fn older_trace_reads_empty_then_gains_them(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "old");
    let all = write_trace(&path, b, 11);
    make_older(&path, b);
    let store = open_store(&path).unwrap();
    assert!(!store.info().has_column("launch_config"));
    for t in SIDE_TABLES {
        assert!(!store.info().has_table(t), "{t} was dropped");
    }
    assert!(store.nccl_calls(&TimeWindow::ALL).unwrap().is_empty());
    assert!(store.gpu_samples(&TimeWindow::ALL).unwrap().is_empty());
    assert!(store.gpu_process_memory(&TimeWindow::ALL).unwrap().is_empty());
    assert!(store.serving_samples(&TimeWindow::ALL).unwrap().is_empty());
    assert!(store.net_peers().unwrap().is_empty());
    assert!(store.process_ranks().unwrap().is_empty());
    assert!(store.process_cgroups().unwrap().is_empty());
    assert!(store.launch_configs().unwrap().is_empty());
    assert!(store.kernel_names().unwrap().is_empty());
    assert!(store.attachments().unwrap().is_empty());
    assert_eq!(store.scan_gpu_ops(&TimeWindow::ALL, &mut |_| {}).unwrap(), 0);
    assert!(store.gpu_clock_syncs().unwrap().is_empty() && store.gpu_devices().unwrap().is_empty());
    assert!(store.gpu_timeline_notes().unwrap().is_empty());
    assert_eq!(store.info().missing, [NO_DEVICE_TIMELINE], "an older trace has no device timeline");
    assert_eq!(store.events(&EventFilter::default()).unwrap(), zeroed(&all), "launch_config reads as 0");
    let d = store.describe_schema().unwrap();
    assert_eq!(d.tables.iter().find(|t| t.name == "events").unwrap().columns.len(), 29);
    drop(store);
    // A new session appended to the older trace adds the column and the tables.
    let fx = Fixture::new();
    let key = fx.configs[1].key();
    let after = all.iter().map(|s| s.event.ts_ns).max().unwrap() + 1_000;
    let launches: Vec<Event> = (0..10)
        .map(|i| Event {
            ts_ns: after + i,
            dur_ns: 1_000,
            pid: 4821,
            tid: 4821,
            source: 1,
            op: op::CUDA_LAUNCH_KERNEL.op,
            launch_config: if i % 2 == 0 { key } else { 0 },
            ..Default::default()
        })
        .collect();
    rt().block_on(async {
        let mut sink = create_sink(&path, session(2), Some(b)).unwrap();
        sink.write_batch(launches.clone()).await.unwrap();
        fx.write(&mut sink).await;
        sink.finish(6_000_000_000).await.unwrap();
    });
    let store = open_store(&path).unwrap();
    assert!(store.info().has_column("launch_config"));
    assert_eq!(store.launch_configs().unwrap(), fx.configs_by_key());
    assert_eq!(store.kernel_names().unwrap(), fx.names);
    assert_eq!(store.attachments().unwrap(), fx.attachments);
    assert_eq!(store.nccl_calls(&TimeWindow::ALL).unwrap(), fx.nccl);
    assert_eq!(store.gpu_samples(&TimeWindow::ALL).unwrap(), fx.gpu);
    assert_eq!(store.gpu_process_memory(&TimeWindow::ALL).unwrap(), fx.procs);
    assert_eq!(store.serving_samples(&TimeWindow::ALL).unwrap(), fx.serving);
    assert_eq!(store.net_peers().unwrap(), fx.peers);
    assert_eq!(store.process_ranks().unwrap(), fx.ranks);
    assert_eq!(store.process_cgroups().unwrap(), fx.cgroups);
    let back = store.events(&EventFilter::default()).unwrap();
    assert_eq!(back.len(), N + 10);
    assert_eq!(back[..N], zeroed(&all)[..], "the older session's events still read as 0");
    let new: Vec<Event> = back[N..].iter().map(|s| s.event.clone()).collect();
    assert_eq!(new, launches, "the new session's launches carry their configuration");
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.len(), 2);
    let tagged =
        count(store.as_ref(), &format!("SELECT count(*) FROM attachments WHERE session_id = {}", sessions[1].id));
    assert_eq!(tagged, 3, "attachments carry the id of the session that wrote them");
    let d = store.describe_schema().unwrap();
    let events = d.tables.iter().find(|t| t.name == "events").unwrap();
    assert_eq!(events.columns.last().map(|c| c.name.as_str()), Some("launch_config"), "added last");
    for t in SIDE_TABLES {
        let table = d.tables.iter().find(|x| x.name == t).unwrap_or_else(|| panic!("{t} not described"));
        assert!(!table.meaning.is_empty(), "{t} has a meaning");
        assert!(
            table.columns.iter().all(|c| !c.meaning.is_empty()),
            "{t}: every column has a meaning: {:?}",
            table.columns
        );
    }
}

fn backends() -> Vec<Engine> {
    Engine::ALL.into_iter().filter(|b| causeway_backends::is_built(*b)).collect()
}

/// `(session_id, pid, attached_at)` of every attachment, as stored.
fn attachment_sessions(store: &dyn TraceStore) -> Vec<Vec<serde_json::Value>> {
    store
        .query(
            "SELECT session_id, pid, attached_at FROM attachments ORDER BY session_id, attached_at",
            &QueryLimits::default(),
        )
        .unwrap()
        .rows
}

pub fn convert_keeps_them(b: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let path = file(dir.path(), b, "src");
    write_trace(&path, b, 13);
    // A second session with attachments of its own: conversion keeps whose they are.
    let fx = Fixture::new();
    rt().block_on(async {
        let mut sink = create_sink(&path, session(3), Some(b)).unwrap();
        sink.write_attachments(fx.attachments[1..].to_vec()).await.unwrap();
        sink.finish(7).await.unwrap();
    });
    let src = open_store(&path).unwrap();
    let events = src.events(&EventFilter::default()).unwrap();
    let stored = attachment_sessions(src.as_ref());
    assert_eq!(stored.len(), 5);
    assert_ne!(stored[0][0], stored[4][0], "fixture: two sessions have attachments");
    for to in backends() {
        let out = file(dir.path(), to, &format!("converted-{}", b.name()));
        let report = convert(&path, &out, Some(to), &mut |_, _| {}).unwrap();
        assert_eq!(
            (
                report.launch_configs,
                report.kernel_names,
                report.attachments,
                report.nccl_calls,
                report.gpu_samples,
                report.gpu_process_memory,
                report.process_ranks
            ),
            (3, 4, 5, 4, 4, 4, 2),
            "{} -> {}",
            b.name(),
            to.name()
        );
        let conv = open_store(&out).unwrap();
        assert_eq!(conv.events(&EventFilter::default()).unwrap(), events, "{} -> {}: events", b.name(), to.name());
        assert_eq!(conv.launch_configs().unwrap(), src.launch_configs().unwrap());
        assert_eq!(conv.kernel_names().unwrap(), fx.names);
        assert_eq!(conv.nccl_calls(&TimeWindow::ALL).unwrap(), fx.nccl);
        assert_eq!(conv.gpu_samples(&TimeWindow::ALL).unwrap(), fx.gpu);
        assert_eq!(conv.gpu_process_memory(&TimeWindow::ALL).unwrap(), fx.procs);
        assert_eq!(conv.process_ranks().unwrap(), fx.ranks);
        assert_eq!(conv.process_cgroups().unwrap(), fx.cgroups);
        assert_eq!(conv.attachments().unwrap(), src.attachments().unwrap());
        assert_eq!(attachment_sessions(conv.as_ref()), stored, "{} -> {}: attachment sessions", b.name(), to.name());
    }
    // A trace recorded before the tables converts into one where they are empty.
    let old = file(dir.path(), b, "old");
    write_trace(&old, b, 17);
    make_older(&old, b);
    for to in backends() {
        let out = file(dir.path(), to, &format!("old-converted-{}", b.name()));
        let report = convert(&old, &out, Some(to), &mut |_, _| {}).unwrap();
        assert_eq!((report.launch_configs, report.kernel_names, report.attachments), (0, 0, 0));
        let conv = open_store(&out).unwrap();
        assert!(conv.launch_configs().unwrap().is_empty() && conv.kernel_names().unwrap().is_empty());
        assert!(conv.attachments().unwrap().is_empty());
        assert!(!conv.info().has_column("launch_config"), "reports only the original's columns");
        assert!(conv.events(&EventFilter::default()).unwrap().iter().all(|s| s.event.launch_config == 0));
    }
}

/// Every shared Ingero DB: no launch tables, every launch_config 0, and a conversion writes none.
#[test]
fn ingero_dbs_have_no_launch_tables() {
    let dir = crate::guard_common::ingero_dir();
    let tmp = tempfile::tempdir().unwrap();
    for name in crate::guard_common::DBS {
        let db = dir.join(name);
        let store = open_store(&db).unwrap();
        assert!(matches!(store.info().format, TraceFormat::Ingero { .. }), "{name}");
        assert!(store.launch_configs().unwrap().is_empty(), "{name}");
        assert!(store.kernel_names().unwrap().is_empty(), "{name}");
        assert!(store.attachments().unwrap().is_empty(), "{name}");
        // no device timeline: the defaults, and the trace says so
        assert_eq!(store.scan_gpu_ops(&TimeWindow::ALL, &mut |_| {}).unwrap(), 0, "{name}");
        assert!(store.gpu_devices().unwrap().is_empty() && store.gpu_timeline_notes().unwrap().is_empty());
        assert!(store.info().missing.iter().any(|m| m == NO_DEVICE_TIMELINE), "{name}");
        let events = store.events(&EventFilter::default()).unwrap();
        assert!(!events.is_empty() && events.iter().all(|s| s.event.launch_config == 0), "{name}");
        if *name == "sample-cluster.db" {
            for to in backends() {
                let out = file(tmp.path(), to, "ingero");
                let report = convert(&db, &out, Some(to), &mut |_, _| {}).unwrap();
                assert_eq!((report.launch_configs, report.kernel_names, report.attachments), (0, 0, 0));
                let conv = open_store(&out).unwrap();
                assert!(conv.info().has_table("launch_configs"), "a native trace has the tables");
                assert!(conv.launch_configs().unwrap().is_empty() && conv.attachments().unwrap().is_empty());
                assert_eq!(conv.events(&EventFilter::default()).unwrap().len(), events.len());
            }
        }
    }
}
