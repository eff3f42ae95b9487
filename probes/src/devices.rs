//! Which GPU each CUDA call used: every call event gets `gpu_id`, the NVML index of the device its
//! thread had current, and each process's devices go to `gpu_devices` the first time it queues,
//! waits for, allocates on or communicates through one (so a throttle, a fault or a degraded link
//! of one GPU is matched only to the calls and processes that used it).
//!
//! A thread's current device is the CUDA device ordinal of its last successful `cudaSetDevice`
//! (events are decoded in each thread's order); before one, the runtime's default, ordinal 0 —
//! assumed only where it is certain: the process sees one GPU, or it was started under the trace
//! (a launched command and its children); otherwise unknown (-1). Context switches through the
//! driver API (`cuCtxSetCurrent`) are not followed.
//!
//! An ordinal is mapped to NVML's index from the process's `CUDA_VISIBLE_DEVICES` (indexes, UUIDs
//! or their prefixes; MIG instances are unknown) over CUDA's device order: NVML and
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` both enumerate by PCI bus id, and CUDA's default
//! (`FASTEST_FIRST`) gives the same order on a host whose GPUs are all one model; on a mixed host
//! without `PCI_BUS_ID` the order is not known (-1). The device timeline, when on, names each
//! device's UUID and replaces the guess with the fact ([`DeviceMap::learn`]).

use std::collections::{HashMap, HashSet};

use causeway_model::codes::{gpu_role, is_gpu_call_source, op, GpuRole, OpCode};
use causeway_model::{Event, GpuDevice};

/// One GPU as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NvmlGpu {
    pub index: i32,
    pub uuid: String,
    pub name: String,
}

/// CUDA ordinal -> NVML index for a process whose environment is `environ`, on a host whose NVML
/// lists `gpus` (by index). `None`: the order cannot be known; an entry -1: that device unknown.
pub(crate) fn ordinals(environ: &[u8], gpus: &[NvmlGpu]) -> Option<Vec<i32>> {
    let var = |k: &str| causeway_model::environ_var(environ, k).and_then(|v| std::str::from_utf8(v).ok());
    let by_bus = var("CUDA_DEVICE_ORDER").is_some_and(|o| o.trim() == "PCI_BUS_ID");
    let one_model = gpus.windows(2).all(|w| w[0].name == w[1].name);
    let order_known = by_bus || one_model;
    match var("CUDA_VISIBLE_DEVICES") {
        None => order_known.then(|| gpus.iter().map(|g| g.index).collect()),
        Some(list) => {
            let mut out = Vec::new();
            // CUDA stops at the first entry it cannot use
            for entry in list.split(',').map(str::trim) {
                let nvml = if let Ok(k) = entry.parse::<usize>() {
                    if !order_known {
                        -1
                    } else {
                        match gpus.get(k) {
                            Some(g) => g.index,
                            None => break,
                        }
                    }
                } else if entry.starts_with("GPU-") {
                    let matching: Vec<&NvmlGpu> = gpus.iter().filter(|g| g.uuid.starts_with(entry)).collect();
                    match matching.as_slice() {
                        [g] => g.index,
                        _ => break,
                    }
                } else if entry.starts_with("MIG-") {
                    -1
                } else {
                    break;
                };
                out.push(nvml);
            }
            Some(out)
        }
    }
}

/// A process's ordinal map (from its environment) and whether its threads start on ordinal 0 for
/// certain (it sees one GPU, or began under the trace).
fn process(pid: u32, gpus: &[NvmlGpu], started_under_trace: bool) -> (Option<Vec<i32>>, bool) {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let map = ordinals(&environ, gpus);
    let one = map.as_ref().is_some_and(|m| m.len() == 1);
    (map, one || started_under_trace)
}

/// The per-trace state: each process's ordinal map, each thread's current device.
#[derive(Debug, Default)]
pub(crate) struct DeviceMap {
    gpus: Vec<NvmlGpu>,
    /// pid -> (ordinal -> NVML index; `None`: order unknown), and whether ordinal 0 is certain
    /// before a `cudaSetDevice`.
    procs: HashMap<u32, (Option<Vec<i32>>, bool)>,
    /// tid -> the ordinal of its last successful `cudaSetDevice`.
    current: HashMap<u32, i32>,
    /// (pid, ordinal) already written to `gpu_devices`.
    written: HashSet<(u32, i32)>,
    /// (pid, ordinal) -> NVML index, as the device timeline named them.
    learned: HashMap<(u32, i32), i32>,
}

/// Calls that use the current device's GPU (not a query, a flag or a mapping).
fn uses_device(code: OpCode) -> bool {
    matches!(gpu_role(code), GpuRole::Launch | GpuRole::Sync | GpuRole::SyncCopy | GpuRole::Alloc | GpuRole::Collective)
}

impl DeviceMap {
    /// Over the GPUs NVML lists (none: every `gpu_id` stays unknown).
    pub(crate) fn new(gpus: Vec<NvmlGpu>) -> DeviceMap {
        DeviceMap { gpus, ..Default::default() }
    }

    /// Set each GPU call's `gpu_id` in `events` (one batch, in order) and return the devices
    /// processes used for the first time. `started_under_trace(pid)`: the process began under the
    /// trace (its threads start on ordinal 0).
    pub(crate) fn stamp(&mut self, events: &mut [Event], started_under_trace: impl Fn(u32) -> bool) -> Vec<GpuDevice> {
        let mut new = Vec::new();
        if self.gpus.is_empty() {
            return new;
        }
        for e in events.iter_mut().filter(|e| is_gpu_call_source(e.source)) {
            if op::CUDA_SET_DEVICE.is(e.source, e.op) && e.ret_code == 0 {
                self.current.insert(e.tid, e.arg0 as i32);
            }
            let gpus = &self.gpus;
            let (map, zero_certain) =
                self.procs.entry(e.pid).or_insert_with(|| process(e.pid, gpus, started_under_trace(e.pid)));
            let ordinal = match self.current.get(&e.tid) {
                Some(&o) => o,
                None if *zero_certain => 0,
                None => {
                    e.gpu_id = -1;
                    continue;
                }
            };
            let nvml = match self.learned.get(&(e.pid, ordinal)) {
                Some(&i) => Some(i),
                None => map.as_ref().and_then(|m| usize::try_from(ordinal).ok().and_then(|o| m.get(o))).copied(),
            };
            e.gpu_id = nvml.unwrap_or(-1);
            if let Some(index) = nvml.filter(|i| *i >= 0) {
                if uses_device(OpCode::new(e.source, e.op)) && self.written.insert((e.pid, ordinal)) {
                    let g = self.gpus.iter().find(|g| g.index == index);
                    new.push(GpuDevice {
                        pid: e.pid,
                        device: ordinal,
                        uuid: g.map(|g| g.uuid.clone()).unwrap_or_default(),
                        name: g.map(|g| g.name.clone()).unwrap_or_default(),
                        nvml_index: index,
                    });
                }
            }
        }
        new
    }

    /// Read a process's environment while it is sure to exist (held at its dlopen of a CUDA
    /// library): a short job may have exited by the time its first calls are decoded.
    pub(crate) fn observe(&mut self, pid: u32, started_under_trace: bool) {
        if !self.gpus.is_empty() && !self.procs.contains_key(&pid) {
            let entry = process(pid, &self.gpus, started_under_trace);
            self.procs.insert(pid, entry);
        }
    }

    /// The device timeline's devices (UUIDs from the driver itself): the facts replace the
    /// environment's guess for later calls of those processes.
    pub(crate) fn learn(&mut self, devices: &[GpuDevice]) {
        for d in devices.iter().filter(|d| d.nvml_index >= 0 && d.device >= 0) {
            self.learned.insert((d.pid, d.device), d.nvml_index);
            self.written.insert((d.pid, d.device));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(names: &[&str]) -> Vec<NvmlGpu> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| NvmlGpu { index: i as i32, uuid: format!("GPU-{i}aaa-bbbb"), name: n.to_string() })
            .collect()
    }

    #[test]
    fn visible_devices_by_index_uuid_and_order() {
        let h100s = host(&["H100", "H100", "H100", "H100"]);
        assert_eq!(ordinals(b"", &h100s), Some(vec![0, 1, 2, 3]));
        assert_eq!(ordinals(b"X=1\0CUDA_VISIBLE_DEVICES=2,0\0", &h100s), Some(vec![2, 0]));
        assert_eq!(ordinals(b"CUDA_VISIBLE_DEVICES=GPU-3aaa\0", &h100s), Some(vec![3]));
        // CUDA stops at an entry it cannot use
        assert_eq!(ordinals(b"CUDA_VISIBLE_DEVICES=1,7,2\0", &h100s), Some(vec![1]));
        assert_eq!(ordinals(b"CUDA_VISIBLE_DEVICES=MIG-abc\0", &h100s), Some(vec![-1]));
        // a mixed host: CUDA's default order is its fastest first, not NVML's
        let mixed = host(&["H100", "A10"]);
        assert_eq!(ordinals(b"", &mixed), None);
        assert_eq!(ordinals(b"CUDA_VISIBLE_DEVICES=1\0", &mixed), Some(vec![-1]));
        assert_eq!(ordinals(b"CUDA_DEVICE_ORDER=PCI_BUS_ID\0CUDA_VISIBLE_DEVICES=1\0", &mixed), Some(vec![1]));
        assert_eq!(ordinals(b"CUDA_VISIBLE_DEVICES=GPU-1aaa\0", &mixed), Some(vec![1]), "a UUID is exact");
    }

    fn call(tid: u32, code: OpCode, arg0: i64) -> Event {
        Event { pid: u32::MAX - 1, tid, source: code.source, op: code.op, arg0, ..Default::default() }
    }

    #[test]
    fn each_thread_keeps_its_own_current_device() {
        let mut m = DeviceMap::new(host(&["H100", "H100"]));
        // a pid with no /proc entry: no environment, every GPU visible
        let mut events = vec![
            call(1, op::CUDA_LAUNCH_KERNEL, 0),
            call(2, op::CUDA_SET_DEVICE, 1),
            call(2, op::CUDA_LAUNCH_KERNEL, 0),
            call(1, op::CUDA_STREAM_SYNC, 0),
        ];
        let new = m.stamp(&mut events, |_| true);
        let gpus: Vec<i32> = events.iter().map(|e| e.gpu_id).collect();
        assert_eq!(gpus, [0, 1, 1, 0]);
        let used: Vec<(i32, i32)> = new.iter().map(|d| (d.device, d.nvml_index)).collect();
        assert_eq!(used, [(0, 0), (1, 1)], "one row per device used, the set itself not counted");
        // a process attached to (not started under the trace) with two GPUs: unknown until it sets one
        let mut m = DeviceMap::new(host(&["H100", "H100"]));
        let mut events = vec![call(1, op::CUDA_LAUNCH_KERNEL, 0), call(1, op::CUDA_SET_DEVICE, 1)];
        m.stamp(&mut events, |_| false);
        assert_eq!((events[0].gpu_id, events[1].gpu_id), (-1, 1));
    }

    #[test]
    fn the_device_timeline_replaces_the_guess() {
        let mut m = DeviceMap::new(host(&["H100", "H100"]));
        let pid = u32::MAX - 1;
        m.learn(&[GpuDevice { pid, device: 0, uuid: "GPU-1aaa-bbbb".into(), name: "H100".into(), nvml_index: 1 }]);
        let mut events = vec![call(1, op::CUDA_LAUNCH_KERNEL, 0)];
        let new = m.stamp(&mut events, |_| true);
        assert_eq!(events[0].gpu_id, 1);
        assert!(new.is_empty(), "the device timeline wrote that row");
    }
}
