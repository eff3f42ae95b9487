//! A synthetic trace with the device's own timeline, written by the SQLite engine's writer as `trace
//! --gpu-timeline` writes one (the engine resolves each op's launching call at finish): a training
//! loop whose host launches a 1 ms kernel every 1.1 ms on stream 7, late three times because a
//! hog preempted the launching thread (each a GPU idle gap over 1 ms), plus a copy, a memset and a
//! graph launch of three kernels on stream 13, and the synchronizations of a second thread.
//! Shared by `export/tests/device.rs` and `render/tests/device.rs` (included by path).

#![allow(dead_code)]

use std::path::Path;

use causeway_backends::{EngineWriter, GpuTimelinePart, SqliteWriter};
use causeway_model::codes::{op, OpCode};
use causeway_model::{Event, GpuOp, GpuOpKind, PrevState, SchedDetail, SessionInfo};

pub const MS: i64 = 1_000_000;
pub const US: i64 = 1_000;
/// An arbitrary epoch origin (2026-03-20), so timestamps look like a real trace's.
pub const T0: i64 = 1_774_015_573_000_000_000;
pub const PID: u32 = 4000;
pub const TID: u32 = 4821;
pub const SYNC_TID: u32 = 4822;
pub const HOG: (u32, u32, &str) = (9912, 9912, "backup-rsync");
pub const STEPS: usize = 200;
/// The steps the hog made late, and by how much.
pub const LATE: [(usize, i64); 3] = [(40, 5 * MS), (120, 38 * MS), (160, 2 * MS)];
const PERIOD: i64 = 1100 * US;
const KERNEL: i64 = MS;

#[derive(Default)]
pub struct Trace {
    pub events: Vec<Event>,
    pub names: Vec<(u32, String)>,
    pub gpu: GpuTimelinePart,
}

impl Trace {
    pub fn call(&mut self, tid: u32, code: OpCode, ts: i64, dur: i64) {
        let comm = if tid == SYNC_TID { "sync-worker" } else { "train" };
        self.events.push(Event {
            ts_ns: ts,
            dur_ns: dur,
            pid: PID,
            tid,
            cpu: 0,
            source: code.source,
            op: code.op,
            comm: comm.into(),
            ..Default::default()
        });
    }

    pub fn preempted(&mut self, tid: u32, out: i64, inn: i64, by: (u32, u32, &str)) {
        self.events.push(Event {
            ts_ns: inn,
            dur_ns: inn - out,
            pid: PID,
            tid,
            cpu: 1,
            source: 3,
            op: 1,
            arg1: i64::from(PID),
            comm: "train".into(),
            sched: Some(SchedDetail {
                prev_state: PrevState::Preempted,
                next_pid: by.0,
                next_tid: by.1,
                next_comm: by.2.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    /// A device op launched by `tid` with a call spanning `[launch, launch + launch_dur]`.
    #[allow(clippy::too_many_arguments)]
    pub fn device_op(
        &mut self,
        tid: u32,
        kind: GpuOpKind,
        stream: u32,
        name: &str,
        bytes: i64,
        start: i64,
        dur: i64,
        launch: (i64, i64),
    ) {
        let correlation = self.gpu.ops.len() as u32 + 1;
        self.gpu.ops.push(GpuOp {
            pid: PID,
            device: 0,
            context: 1,
            stream,
            kind,
            start_ns: start,
            end_ns: start + dur,
            correlation,
            name: name.into(),
            bytes,
            launch_tid: tid,
            launch_start_ns: launch.0,
            launch_end_ns: launch.0 + launch.1,
            launch_cbid: 0,
            launch_event_id: 0,
        });
    }

    /// Writes the trace with the SQLite engine's writer and finishes it.
    pub fn write(mut self, path: &Path) {
        self.events.sort_by_key(|e| e.ts_ns);
        let session = SessionInfo { started_at_ns: T0, tool_version: "test".into(), ..Default::default() };
        let mut w = SqliteWriter::create(path, &session).unwrap();
        for (pid, name) in &self.names {
            w.write_process_name(*pid, name, T0).unwrap();
        }
        if !self.gpu.is_empty() {
            w.write_gpu_timeline(&self.gpu).unwrap();
        }
        let last = self.events.iter().map(|e| e.ts_ns + e.dur_ns).max().unwrap_or(T0);
        w.write_batches(self.events.chunks(10_000)).unwrap();
        w.finish(last + 1).unwrap();
    }
}

/// The training loop's host side and, with `timeline`, its device side; returns the trace.
pub fn training(timeline: bool) -> Trace {
    training_late(timeline, &LATE)
}

/// The training loop, made late at each step of `lates` by its hog preemption.
pub fn training_late(timeline: bool, lates: &[(usize, i64)]) -> Trace {
    let mut t = Trace { names: vec![(PID, "train".into())], ..Default::default() };
    let late = |i: usize| lates.iter().filter(|(at, _)| i >= *at).map(|(_, by)| by).sum::<i64>();
    let host = |i: usize| T0 + i as i64 * PERIOD + late(i);
    let mut free = 0;
    for i in 0..STEPS {
        let h = host(i);
        // a runtime launch around its driver launch: the op's call is the outer one
        t.call(TID, op::CUDA_LAUNCH_KERNEL, h, 10 * US);
        t.call(TID, op::CU_LAUNCH_KERNEL, h + US, 8 * US);
        let start = (h + 15 * US).max(free);
        if timeline {
            t.device_op(TID, GpuOpKind::Kernel, 7, "_Z4stepPf", 0, start, KERNEL, (h + 2 * US, 6 * US));
        }
        free = start + KERNEL;
        if let Some((_, by)) = lates.iter().find(|(at, _)| *at == i + 1) {
            // the hog takes the CPU 20 us after this step's kernel ends, until the next launch
            let out = free + 20 * US;
            t.preempted(TID, out, out + by, HOG);
        }
        if i == 10 || i == 90 {
            // a copy and a memset on stream 13, each from its own call
            t.call(TID, op::CUDA_MEMCPY_ASYNC, h + 30 * US, 10 * US);
            t.call(TID, op::CUDA_MEMSET_ASYNC, h + 50 * US, 10 * US);
            if timeline {
                t.device_op(TID, GpuOpKind::Memcpy, 13, "HtoD", 4 << 20, h + 45 * US, 300 * US, (h + 32 * US, 6 * US));
                t.device_op(TID, GpuOpKind::Memset, 13, "", 1 << 20, h + 400 * US, 50 * US, (h + 52 * US, 6 * US));
            }
        }
        if i == 150 {
            // one graph launch runs three kernels
            t.call(TID, op::GRAPH_LAUNCH, h + 30 * US, 20 * US);
            if timeline {
                for k in 0..3 {
                    let s = h + 60 * US + k * 200 * US;
                    t.device_op(TID, GpuOpKind::Kernel, 13, "_Z5graphv", 0, s, 150 * US, (h + 32 * US, 16 * US));
                }
            }
        }
        if i % 50 == 49 {
            // another thread waits for the stream
            let s = h + 100 * US;
            t.call(SYNC_TID, op::CUDA_STREAM_SYNC, s, free - s + 20 * US);
            if timeline {
                t.device_op(
                    SYNC_TID,
                    GpuOpKind::Sync,
                    7,
                    "stream",
                    0,
                    s + 2 * US,
                    free - s + 10 * US,
                    (s + US, free - s + 15 * US),
                );
            }
        }
    }
    t
}
