//! Shared by the live tests: builds mock-cuda, an in-memory EventSink, running a workload under the
//! tracer, and parsing the counts the workload prints.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use causeway_backends::{EventSink, SinkSummary, StackRecord};
use causeway_model::{Event, KernelName, LaunchConfig, LibraryAttach, LossKind};
use causeway_probes::{TraceOptions, TraceReport};

pub fn root() -> PathBuf {
    causeway_testdata::repo_root()
}

/// `make -C mock-cuda`, once per test binary.
pub fn mock_build() -> PathBuf {
    causeway_testdata::mock_cuda_build()
}

/// The Python of the test venv (scripts/install-test-deps.sh installs the CUDA runtime and NCCL
/// wheels into it; `CAUSEWAY_VENV` overrides where).
pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("CAUSEWAY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/causeway/venv"));
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} missing: run scripts/install-test-deps.sh (installs the CUDA runtime and NCCL wheels into a venv)",
        py.display()
    );
    py
}

/// Refuse to run silently without privileges: these tests trace for real.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(uid, 0, "the live eBPF tests must run as root (they load BPF programs and attach uprobes)");
}

#[derive(Default)]
pub struct Collected {
    pub events: Vec<Event>,
    pub losses: BTreeMap<(u8, String), u64>,
    pub stacks: Vec<StackRecord>,
    pub names: BTreeMap<u32, String>,
    pub launch_configs: BTreeMap<i64, LaunchConfig>,
    pub kernel_names: BTreeMap<(u32, i64), KernelName>,
    pub attachments: Vec<LibraryAttach>,
    pub nccl_calls: Vec<causeway_model::NcclCall>,
    pub gpu_samples: Vec<causeway_model::GpuSample>,
    /// The processes NVML listed at those samples.
    pub gpu_processes: Vec<causeway_model::GpuProcessMemory>,
    /// What `--gpu-timeline` delivered, every part in order.
    pub gpu_timeline: Vec<causeway_backends::GpuTimelinePart>,
    pub serving_samples: Vec<causeway_model::ServingSample>,
    pub net_peers: Vec<causeway_model::NetPeer>,
    pub process_ranks: Vec<causeway_model::ProcessRank>,
    pub process_cgroups: Vec<causeway_model::ProcessCgroup>,
    /// What `--footprint` recorded, every part in order.
    pub footprint: Vec<causeway_model::FootprintPart>,
    pub finished: bool,
    /// Refuse every stack and process-name write (a sink whose side tables fail).
    pub refuse_side_writes: bool,
}

fn refused() -> causeway_backends::Result<()> {
    Err(causeway_backends::StoreError::Engine("refused by the test sink".into()))
}

/// An EventSink that keeps everything in memory; `capacity_batches` > 0 makes try_write_batch
/// refuse (and count) once that many batches were taken, to exercise back-pressure.
#[derive(Clone, Default)]
pub struct MemSink(pub Arc<Mutex<Collected>>);

#[async_trait::async_trait]
impl EventSink for MemSink {
    async fn write_batch(&mut self, events: Vec<Event>) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().events.extend(events);
        Ok(())
    }
    fn try_write_batch(&mut self, events: Vec<Event>) -> bool {
        self.0.lock().unwrap().events.extend(events);
        true
    }
    async fn write_stacks(&mut self, stacks: Vec<StackRecord>) -> causeway_backends::Result<()> {
        let mut c = self.0.lock().unwrap();
        if c.refuse_side_writes {
            return refused();
        }
        c.stacks.extend(stacks);
        Ok(())
    }
    async fn write_process_name(&mut self, pid: u32, name: String, _seen_at_ns: i64) -> causeway_backends::Result<()> {
        let mut c = self.0.lock().unwrap();
        if c.refuse_side_writes {
            return refused();
        }
        c.names.insert(pid, name);
        Ok(())
    }
    async fn write_launch_configs(&mut self, configs: Vec<LaunchConfig>) -> causeway_backends::Result<()> {
        let mut c = self.0.lock().unwrap();
        for cfg in configs {
            c.launch_configs.insert(cfg.key(), cfg);
        }
        Ok(())
    }
    async fn write_net_peers(&mut self, peers: Vec<causeway_model::NetPeer>) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().net_peers.extend(peers);
        Ok(())
    }
    async fn write_kernel_names(&mut self, names: Vec<KernelName>) -> causeway_backends::Result<()> {
        let mut c = self.0.lock().unwrap();
        for k in names {
            c.kernel_names.insert((k.pid, k.handle), k);
        }
        Ok(())
    }
    async fn write_attachments(&mut self, rows: Vec<LibraryAttach>) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().attachments.extend(rows);
        Ok(())
    }
    async fn write_nccl_calls(&mut self, calls: Vec<causeway_model::NcclCall>) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().nccl_calls.extend(calls);
        Ok(())
    }
    async fn write_gpu_samples(
        &mut self,
        samples: Vec<causeway_model::GpuSample>,
        processes: Vec<causeway_model::GpuProcessMemory>,
    ) -> causeway_backends::Result<()> {
        let mut c = self.0.lock().unwrap();
        c.gpu_samples.extend(samples);
        c.gpu_processes.extend(processes);
        Ok(())
    }
    async fn write_gpu_timeline(&mut self, part: causeway_backends::GpuTimelinePart) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().gpu_timeline.push(part);
        Ok(())
    }
    async fn write_under_way(&mut self, _: i64, _: Vec<causeway_model::Event>) -> causeway_backends::Result<()> {
        Ok(())
    }
    async fn write_serving_samples(
        &mut self,
        samples: Vec<causeway_model::ServingSample>,
    ) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().serving_samples.extend(samples);
        Ok(())
    }
    async fn write_process_cgroups(
        &mut self,
        cgroups: Vec<causeway_model::ProcessCgroup>,
    ) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().process_cgroups.extend(cgroups);
        Ok(())
    }
    async fn write_process_ranks(&mut self, ranks: Vec<causeway_model::ProcessRank>) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().process_ranks.extend(ranks);
        Ok(())
    }
    async fn write_footprint(&mut self, part: causeway_model::FootprintPart) -> causeway_backends::Result<()> {
        self.0.lock().unwrap().footprint.push(part);
        Ok(())
    }
    fn add_loss(&mut self, source: u8, kind: LossKind, n: u64) {
        *self.0.lock().unwrap().losses.entry((source, kind.as_str().to_string())).or_default() += n;
    }
    async fn flush(&mut self) -> causeway_backends::Result<()> {
        Ok(())
    }
    async fn finish(self: Box<Self>, _stopped_at_ns: i64) -> causeway_backends::Result<SinkSummary> {
        let mut c = self.0.lock().unwrap();
        c.finished = true;
        Ok(SinkSummary { events_written: c.events.len() as u64, ..Default::default() })
    }
}

/// What a workload printed.
#[derive(Debug, Default)]
pub struct Workload {
    pub pid: u32,
    pub calls: BTreeMap<String, u64>,
    pub threads: BTreeMap<String, u32>,
    pub values: BTreeMap<String, String>,
}

impl Workload {
    pub fn parse(text: &str) -> Workload {
        let mut w = Workload::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["PID", p] => w.pid = p.parse().unwrap(),
                ["CALLS", name, n] => {
                    w.calls.insert(name.to_string(), n.parse().unwrap());
                }
                ["THREAD", name, tid] => {
                    w.threads.insert(name.to_string(), tid.parse().unwrap());
                }
                [k, v] => {
                    w.values.insert(k.to_string(), v.to_string());
                }
                _ => {}
            }
        }
        w
    }
    pub fn calls(&self, names: &[&str]) -> u64 {
        names.iter().map(|n| self.calls.get(*n).copied().unwrap_or(0)).sum()
    }
}

/// A run of a Python script (under the test venv's Python) that calls a pip wheel's library
/// through ctypes and prints `PID <pid>` first.
pub struct WheelRun {
    pub report: TraceReport,
    pub sink: MemSink,
    /// The script's stdout.
    pub text: String,
    pub pid: u32,
    /// Where the library ending in the wheel's suffix is in `report.libraries`.
    pub lib: usize,
}

/// Check that `check`'s host-wide discovery finds the library `suffix` of a pip wheel beside the
/// venv's Python (returning what it found), then trace `probes/tests/py/<script> args`, with no
/// library named: the library is found when the process maps it. Fails the test unless the script
/// exits 0 and the library was attached.
pub fn trace_wheel_script(suffix: &str, script: &str, args: &[String]) -> (causeway_probes::FoundLibrary, WheelRun) {
    let py = venv_python();
    let options = causeway_probes::DiscoveryOptions {
        site_packages: causeway_probes::site_packages_of_program(&py),
        ..Default::default()
    };
    let found = causeway_probes::discover(&options);
    let wheel = found
        .iter()
        .find(|f| f.path.to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("pip wheel {suffix} not discovered: {found:?}"))
        .clone();

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let mut command =
        vec![py.to_string_lossy().into(), root().join("probes/tests/py").join(script).to_string_lossy().into()];
    command.extend(args.iter().cloned());
    let opts = TraceOptions { command, command_stdout: Some(out.clone()), ..Default::default() };
    let sink = MemSink::default();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(causeway_probes::trace(opts, Box::new(sink.clone()), |_| {})).expect("trace");
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert_eq!(report.command_exit, Some(0), "python failed: {text}");
    let pid: u32 = text.lines().find_map(|l| l.strip_prefix("PID ")).unwrap().trim().parse().unwrap();
    let lib = report
        .libraries
        .iter()
        .position(|l| l.path.to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("{suffix} not attached: {:?}", report.libraries));
    (wheel, WheelRun { report, sink, text, pid, lib })
}

/// Run `argv` (a workload in mock-cuda/build) under the tracer with the mock libraries.
pub fn run_traced(argv: &[&str], tweak: impl FnOnce(&mut TraceOptions)) -> (TraceReport, Collected, Workload) {
    run_traced_into(MemSink::default(), argv, tweak)
}

/// [`run_traced`] into a given sink.
pub fn run_traced_into(
    sink: MemSink,
    argv: &[&str],
    tweak: impl FnOnce(&mut TraceOptions),
) -> (TraceReport, Collected, Workload) {
    let build = mock_build();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout.txt");
    let mut cmd = vec![build.join(argv[0]).to_string_lossy().into_owned()];
    cmd.extend(argv[1..].iter().map(|s| s.to_string()));
    let mut opts = TraceOptions {
        command: cmd,
        command_stdout: Some(out.clone()),
        cuda_libs: vec![build.join("libcudart.so.12")],
        ..Default::default()
    };
    tweak(&mut opts);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let report = rt.block_on(causeway_probes::trace(opts, Box::new(sink.clone()), |_| {})).expect("trace");
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let w = Workload::parse(&text);
    let c = std::mem::take(&mut *sink.0.lock().unwrap());
    (report, c, w)
}

pub fn count(events: &[Event], pid: u32, source: u8, op: u16) -> u64 {
    events.iter().filter(|e| e.pid == pid && e.source == source && e.op == op).count() as u64
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

use causeway_model::codes::op;
use causeway_model::OpCode;

/// (runtime op, workload call names, driver op it calls)
pub const RUNTIME_OPS: &[(OpCode, &[&str], Option<OpCode>)] = &[
    (op::CUDA_LAUNCH_KERNEL, &["cudaLaunchKernel", "cudaLaunchKernel_ptsz"], Some(op::CU_LAUNCH_KERNEL)),
    (op::CUDA_MEMCPY, &["cudaMemcpy"], Some(op::CU_MEMCPY)),
    (op::CUDA_MEMCPY_ASYNC, &["cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"], Some(op::CU_MEMCPY_ASYNC)),
    (op::CUDA_MEMCPY_2D, &["cudaMemcpy2D"], Some(op::CU_MEMCPY)),
    (op::CUDA_MEMCPY_2D_ASYNC, &["cudaMemcpy2DAsync"], Some(op::CU_MEMCPY_ASYNC)),
    (op::CUDA_MEMCPY_PEER, &["cudaMemcpyPeer"], Some(op::CU_MEMCPY)),
    (op::CUDA_MEMCPY_PEER_ASYNC, &["cudaMemcpyPeerAsync"], Some(op::CU_MEMCPY_ASYNC)),
    (op::CUDA_MALLOC, &["cudaMalloc"], Some(op::CU_MEM_ALLOC)),
    (op::CUDA_MALLOC_MANAGED, &["cudaMallocManaged"], Some(op::CU_MEM_ALLOC_MANAGED)),
    (op::CUDA_FREE, &["cudaFree"], Some(op::CU_MEM_FREE)),
    (op::CUDA_STREAM_SYNC, &["cudaStreamSynchronize", "cudaStreamSynchronize_ptsz"], Some(op::CU_STREAM_SYNCHRONIZE)),
    (op::CUDA_DEVICE_SYNC, &["cudaDeviceSynchronize"], Some(op::CU_CTX_SYNCHRONIZE)),
    (op::CUDA_EVENT_SYNC, &["cudaEventSynchronize"], None),
    (op::GRAPH_LAUNCH, &["cudaGraphLaunch"], None),
];

/// Every runtime op's count equals what the workload made, every driver op's count equals the
/// runtime calls that forward to it, and every such runtime call contains exactly one driver call
/// of its kind on the same thread: ts_rt <= ts_drv and end_drv <= end_rt.
pub fn assert_exact_and_nested(w: &Workload, events: &[Event]) {
    let pid = w.pid;
    assert!(pid != 0, "workload printed no PID");
    let mut driver_expected: BTreeMap<OpCode, u64> = BTreeMap::new();
    for (rt, names, drv) in RUNTIME_OPS {
        let want = w.calls(names);
        let got = count(events, pid, rt.source, rt.op);
        assert_eq!(got, want, "{}: traced {got}, workload made {want}", rt.name());
        if let Some(d) = drv {
            *driver_expected.entry(*d).or_default() += want;
        }
    }
    for (d, want) in &driver_expected {
        let got = count(events, pid, d.source, d.op);
        assert_eq!(got, *want, "{}: traced {got}, expected {want}", d.name());
    }
    for (rt, _, drv) in RUNTIME_OPS {
        let Some(d) = drv else { continue };
        for r in events.iter().filter(|e| e.pid == pid && e.source == rt.source && e.op == rt.op) {
            let inside = events
                .iter()
                .filter(|e| {
                    e.tid == r.tid
                        && e.source == d.source
                        && e.op == d.op
                        && e.ts_ns >= r.ts_ns
                        && e.end_ns() <= r.end_ns()
                })
                .count();
            assert_eq!(
                inside,
                1,
                "{} at {} ({} ns) contains {inside} {} calls",
                rt.name(),
                r.ts_ns,
                r.dur_ns,
                d.name()
            );
        }
    }
}

/// The op a probed symbol's calls are stored under, and its library (from the one probe table).
pub fn symbol_op(symbol: &str) -> Option<(OpCode, causeway_probes::ProbeLib)> {
    causeway_probes::CUDA_PROBES.iter().find(|p| p.symbols.contains(&symbol)).and_then(|p| p.op().map(|o| (o, p.lib)))
}

/// The library of an op's probes.
fn op_lib(code: OpCode) -> Option<causeway_probes::ProbeLib> {
    causeway_probes::CUDA_PROBES.iter().find(|p| p.op() == Some(code)).map(|p| p.lib)
}

/// Events of `pid` that are not a runtime or driver call inside a call of a library above it (an
/// NCCL call, a runtime call) on the same thread: what the program itself called.
pub fn top_level(events: &[Event], pid: u32) -> Vec<&Event> {
    use causeway_probes::ProbeLib;
    let of = |lib: ProbeLib| -> Vec<&Event> {
        events.iter().filter(|e| e.pid == pid && op_lib(OpCode::new(e.source, e.op)) == Some(lib)).collect()
    };
    let (nccl, runtime) = (of(ProbeLib::Nccl), of(ProbeLib::Runtime));
    let inside = |outer: &[&Event], e: &Event| {
        outer.iter().any(|r| r.tid == e.tid && r.ts_ns <= e.ts_ns && e.end_ns() <= r.end_ns())
    };
    events
        .iter()
        .filter(|e| e.pid == pid)
        .filter(|e| match op_lib(OpCode::new(e.source, e.op)) {
            Some(ProbeLib::Nccl | ProbeLib::Cupti) => true,
            Some(ProbeLib::Runtime) => !inside(&nccl, e),
            Some(ProbeLib::Driver) => !inside(&runtime, e) && !inside(&nccl, e),
            None => false,
        })
        .collect()
}

/// Every probed CUDA function the workload says it called (CALLS lines, by symbol) was recorded
/// exactly that many times at the top level, under the op of the table row that probes the symbol.
pub fn assert_calls_exact(w: &Workload, events: &[Event]) {
    let mut want: BTreeMap<OpCode, u64> = BTreeMap::new();
    for (sym, n) in &w.calls {
        // calls no probe records as an event (stream/event creation, module loads, the name
        // calls) are left out
        if let Some((code, _)) = symbol_op(sym).filter(|_| *n > 0) {
            *want.entry(code).or_default() += n;
        }
    }
    let mut got: BTreeMap<OpCode, u64> = BTreeMap::new();
    for e in top_level(events, w.pid) {
        *got.entry(OpCode::new(e.source, e.op)).or_default() += 1;
    }
    got.retain(|c, _| want.contains_key(c));
    let named =
        |m: &BTreeMap<OpCode, u64>| m.iter().map(|(c, n)| (c.name().into_owned(), *n)).collect::<BTreeMap<_, _>>();
    assert_eq!(named(&got), named(&want), "top-level calls per op: traced (left) vs made by the workload (right)");
}
