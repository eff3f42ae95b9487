//! Builders for native traces with planted GPU calls and off-CPU intervals, written through
//! `SqliteSink` exactly as the tracer writes them.

#![allow(dead_code)]

use std::path::Path;

use causeway_backends::{EventSink, SqliteSink, StackRecord};
use causeway_model::codes::{op, OpCode};
use causeway_model::{
    Event, GpuSample, KernelName, LaunchConfig, LibraryAttach, NcclCall, PrevState, ProcessCgroup, SchedDetail,
    SessionInfo,
};

pub const MS: i64 = 1_000_000;
pub const US: i64 = 1_000;
/// An arbitrary epoch origin (2026-03-20), so timestamps look like a real trace's.
pub const T0: i64 = 1_774_015_573_000_000_000;

#[derive(Default)]
pub struct Trace {
    pub events: Vec<Event>,
    pub names: Vec<(u32, String)>,
    /// The session's tracer pid (0: unknown).
    pub tracer_pid: u32,
    pub kernel_names: Vec<KernelName>,
    pub launch_configs: Vec<LaunchConfig>,
    pub attachments: Vec<LibraryAttach>,
    pub stacks: Vec<StackRecord>,
    pub nccl: Vec<NcclCall>,
    pub gpu_samples: Vec<GpuSample>,
    /// The processes NVML listed on the GPUs at the samples (`gpu_process_memory`).
    pub gpu_processes: Vec<causeway_model::GpuProcessMemory>,
    pub serving_samples: Vec<causeway_model::ServingSample>,
    pub cgroups: Vec<ProcessCgroup>,
    /// The device's own timeline (`gpu_ops` and the rest).
    pub gpu: causeway_backends::GpuTimelinePart,
}

impl Trace {
    pub fn call(&mut self, pid: u32, tid: u32, code: OpCode, ts: i64, dur: i64) -> &mut Event {
        self.events.push(Event {
            ts_ns: ts,
            dur_ns: dur,
            pid,
            tid,
            cpu: 0,
            source: code.source,
            op: code.op,
            comm: "train".into(),
            ..Default::default()
        });
        self.events.last_mut().unwrap()
    }

    /// A runtime call with its driver call nested inside (entry 1 us later, ending 1 us earlier).
    pub fn nested_call(&mut self, pid: u32, tid: u32, outer: OpCode, inner: OpCode, ts: i64, dur: i64) {
        self.call(pid, tid, outer, ts, dur);
        self.call(pid, tid, inner, ts + US, (dur - 2 * US).max(0));
    }

    /// An off-CPU interval `[out, inn]` of `tid`, written at switch-in like the tracer does.
    #[allow(clippy::too_many_arguments)]
    pub fn off_cpu(
        &mut self,
        pid: u32,
        tid: u32,
        out: i64,
        inn: i64,
        cpu: i32,
        state: PrevState,
        next: (u32, u32, &str),
        wake: i64,
        waker: (u32, u32),
    ) {
        self.events.push(Event {
            ts_ns: inn,
            dur_ns: inn - out,
            pid,
            tid,
            cpu,
            source: 3,
            op: 1,
            arg1: pid as i64,
            comm: "train".into(),
            sched: Some(SchedDetail {
                prev_state: state,
                next_pid: next.0,
                next_tid: next.1,
                next_comm: next.2.into(),
                wake_ts_ns: wake,
                waker_pid: waker.0,
                waker_tid: waker.1,
            }),
            ..Default::default()
        });
    }

    /// A device op of `kind` on `device`/`stream` from `start` for `dur`, launched by `tid` with a
    /// call spanning `[launch, launch + launch_dur]` (tid 0: no record of the call).
    #[allow(clippy::too_many_arguments)]
    pub fn device_op(
        &mut self,
        pid: u32,
        tid: u32,
        kind: causeway_model::GpuOpKind,
        stream: u32,
        start: i64,
        dur: i64,
        launch: i64,
        launch_dur: i64,
    ) {
        let correlation = self.gpu.ops.len() as u32 + 1;
        self.gpu.ops.push(causeway_model::GpuOp {
            pid,
            device: 0,
            context: 1,
            stream,
            kind,
            start_ns: start,
            end_ns: start + dur,
            correlation,
            name: if kind == causeway_model::GpuOpKind::Kernel { "_Z4stepPf".into() } else { "stream".into() },
            bytes: 0,
            launch_tid: tid,
            launch_start_ns: if tid == 0 { 0 } else { launch },
            launch_end_ns: if tid == 0 { 0 } else { launch + launch_dur },
            launch_cbid: 0,
            launch_event_id: 0,
        });
    }

    pub fn preempted(&mut self, pid: u32, tid: u32, out: i64, inn: i64, cpu: i32, by: (u32, u32, &str)) {
        self.off_cpu(pid, tid, out, inn, cpu, PrevState::Preempted, by, 0, (0, 0));
    }

    /// Rank `rank` (pid = tid `pid`, one of two, on CPU `rank`) enters all-reduce `seq` of
    /// communicator 0xc0 at `entry`, then synchronizes until the collective is `done`: the sync
    /// sleeps (woken by the driver's thread, `pid + 1`) when it lasts over 2 ms.
    pub fn allreduce_step(&mut self, pid: u32, rank: i32, seq: i64, entry: i64, done: i64) {
        self.call(pid, pid, op::NCCL_ALL_REDUCE, entry, 20 * US).arg2 = 0x5;
        self.nccl.push(NcclCall {
            pid,
            tid: pid,
            ts_ns: entry,
            op: op::NCCL_ALL_REDUCE.op,
            comm_hash: 0x0bad_cafe,
            comm: 0xc0,
            rank,
            nranks: 2,
            seq,
            count: 16 << 20,
            datatype: 7,
            redop: 0,
            peer: -1,
            device: rank,
        });
        let sync_start = entry + 30 * US;
        self.call(pid, pid, op::CUDA_STREAM_SYNC, sync_start, done - sync_start);
        if done - sync_start > 2 * MS {
            let driver = (0, 0, "swapper/0");
            self.off_cpu(pid, pid, sync_start + 10 * US, done, rank, PrevState::Sleeping, driver, done, (pid, pid + 1));
        }
    }

    pub fn block(&mut self, pid: u32, code: OpCode, ts: i64, dur: i64, bytes: i64, dev: i64) {
        let comm = self.names.iter().find(|n| n.0 == pid).map(|n| n.1.clone()).unwrap_or_else(|| "train".into());
        self.events.push(Event {
            ts_ns: ts,
            dur_ns: dur,
            pid,
            tid: pid,
            cpu: 0,
            source: code.source,
            op: code.op,
            arg0: bytes,
            arg1: dev,
            comm,
            ..Default::default()
        });
    }

    pub fn fork(&mut self, pid: u32, ts: i64, child: u32) {
        self.events.push(Event {
            ts_ns: ts,
            pid,
            tid: pid,
            source: 3,
            op: 7,
            arg1: child as i64,
            comm: "train".into(),
            ..Default::default()
        });
    }

    /// Write the trace through `SqliteSink` and finish it.
    pub fn write(mut self, path: &Path) {
        self.events.sort_by_key(|e| e.ts_ns);
        let session = SessionInfo {
            started_at_ns: T0,
            tool_version: "test".into(),
            tracer_pid: self.tracer_pid,
            ..Default::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let mut sink: Box<dyn EventSink> = Box::new(SqliteSink::create(path, session).unwrap());
            for (pid, name) in &self.names {
                sink.write_process_name(*pid, name.clone(), T0).await.unwrap();
            }
            sink.write_kernel_names(std::mem::take(&mut self.kernel_names)).await.unwrap();
            sink.write_launch_configs(std::mem::take(&mut self.launch_configs)).await.unwrap();
            sink.write_attachments(std::mem::take(&mut self.attachments)).await.unwrap();
            sink.write_stacks(std::mem::take(&mut self.stacks)).await.unwrap();
            sink.write_nccl_calls(std::mem::take(&mut self.nccl)).await.unwrap();
            let processes = std::mem::take(&mut self.gpu_processes);
            sink.write_gpu_samples(std::mem::take(&mut self.gpu_samples), processes).await.unwrap();
            sink.write_serving_samples(std::mem::take(&mut self.serving_samples)).await.unwrap();
            sink.write_process_cgroups(std::mem::take(&mut self.cgroups)).await.unwrap();
            if !self.gpu.is_empty() {
                sink.write_gpu_timeline(std::mem::take(&mut self.gpu)).await.unwrap();
            }
            let last = self.events.iter().map(|e| e.ts_ns).max().unwrap_or(T0);
            for chunk in self.events.chunks(10_000) {
                sink.write_batch(chunk.to_vec()).await.unwrap();
            }
            sink.finish(last + 1).await.unwrap();
        });
    }
}

/// A training loop on `pid`/`tid`: each iteration is `launches` launches 20 us apart (runtime around
/// driver), then a stream sync of `sync_dur(i)` (runtime around driver), then `gap` of host work
/// before the next iteration. Returns the start of each iteration's sync.
#[allow(clippy::too_many_arguments)]
pub fn training_loop(
    t: &mut Trace,
    pid: u32,
    tid: u32,
    start: i64,
    iterations: usize,
    gap: i64,
    launches: usize,
    sync_dur: &dyn Fn(usize) -> i64,
) -> Vec<i64> {
    let mut syncs = Vec::new();
    let mut ts = start;
    for i in 0..iterations {
        for k in 0..launches as i64 {
            t.nested_call(pid, tid, op::CUDA_LAUNCH_KERNEL, op::CU_LAUNCH_KERNEL, ts + k * 20 * US, 8 * US);
        }
        let sync = ts + launches as i64 * 20 * US;
        syncs.push(sync);
        t.nested_call(pid, tid, op::CUDA_STREAM_SYNC, op::CU_STREAM_SYNCHRONIZE, sync, sync_dur(i));
        ts = sync + sync_dur(i) + gap;
    }
    syncs
}
pub mod kernel_trace;
