//! The GPUs' own state while tracing, read through NVML: a sampler thread reads every GPU of the
//! host at a fixed rate (clocks, throttle reasons, temperature, power, utilization, memory, PCIe
//! and NVLink traffic, the PCIe link's generation and width against their maximum, NVLink error
//! counters, ECC counts) into [`GpuSample`]s, and the processes NVML lists on each GPU with the
//! memory they use into [`GpuProcessMemory`] rows (whether `/proc/PID` still existed then: a
//! context whose process is gone); between samples it waits on NVML's event set for Xid errors,
//! which become `gpu_xid` events (source 2). NVML is loaded at run time
//! (`nvml-wrapper`): a host without it traces as before, and the trace says why it has no GPU
//! samples (an `attachments` row of kind `nvml`).
//!
//! Every GPU is sampled, not only the traced processes' (a host runs one job's ranks on its GPUs;
//! a call's `gpu_id` names the GPU its thread set current).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_model::codes::op;
use causeway_model::{Event, GpuProcessMemory, GpuSample, LibraryAttach};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{FieldValueSample, ProcessInfo};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use crate::decode::now_ns;

/// NVML's library file, found by the dynamic loader's search path.
pub const DEFAULT_NVML_LIB: &str = "libnvidia-ml.so.1";

/// `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` / `_RX` (nvml.h): cumulative NVLink data, KiB.
const NVLINK_DATA_TX: u32 = 138;
const NVLINK_DATA_RX: u32 = 139;
/// `NVML_FI_DEV_NVLINK_{CRC_FLIT,CRC_DATA,REPLAY,RECOVERY}_ERROR_COUNT_TOTAL` (nvml.h): each error
/// counter summed over the device's links, cumulative.
const NVLINK_ERROR_TOTALS: [u32; 4] = [38, 45, 52, 59];
/// The per-link counters of the same four, for a device whose totals are not fields.
const NVLINK_ERROR_COUNTERS: [ErrorCounter; 4] =
    [ErrorCounter::DlCrcFlit, ErrorCounter::DlCrcData, ErrorCounter::DlReplay, ErrorCounter::DlRecovery];
/// `NVML_NVLINK_MAX_LINKS` (nvml.h).
const NVLINK_MAX_LINKS: u32 = 18;

/// How the GPUs are sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlOptions {
    /// Samples per second of every GPU (0: NVML is not used).
    pub hz: u32,
    /// The NVML library (default [`DEFAULT_NVML_LIB`]).
    pub lib: Option<PathBuf>,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        NvmlOptions { hz: 10, lib: None }
    }
}

/// What the sampler sends the trace loop.
pub(crate) enum GpuMsg {
    /// One sample of every GPU, and the processes each listed then.
    Samples(Vec<GpuSample>, Vec<GpuProcessMemory>),
    Xid(Event),
}

/// The running sampler: stop it to join its thread.
pub(crate) struct GpuSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Each sampled GPU's UUID (`GPU-...`) and NVML index.
    pub(crate) uuids: Vec<(String, i32)>,
    /// Each sampled GPU's PCI address and NVML index (the kernel log's Xid lines name the address).
    pub(crate) addresses: Vec<(crate::kmsg::PciAddress, i32)>,
    /// Every GPU NVML lists, by index (the calls' devices are mapped onto them).
    pub(crate) gpus: Vec<crate::devices::NvmlGpu>,
}

impl GpuSampler {
    /// Stop sampling and wait for the thread (its last samples are sent before it ends).
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start sampling as `opts` says. Returns the sampler (None when NVML is off or missing) and the
/// `attachments` row that says what the trace has of the GPUs' state.
pub(crate) fn start(
    opts: &NvmlOptions,
    tx: tokio::sync::mpsc::UnboundedSender<GpuMsg>,
) -> (Option<GpuSampler>, LibraryAttach) {
    let lib = opts.lib.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_NVML_LIB));
    let mut row = LibraryAttach {
        pid: 0,
        path: lib.display().to_string(),
        kind: "nvml".into(),
        how: "dlopen".into(),
        attached_at_ns: now_ns(),
        ..Default::default()
    };
    if opts.hz == 0 {
        row.note = "no NVML: GPU sampling is off (--nvml-hz 0)".into();
        return (None, row);
    }
    let nvml = match Nvml::builder().lib_path(lib.as_os_str()).init() {
        Ok(n) => n,
        Err(e) => {
            row.note = format!("no NVML: {} could not be used ({e}): the trace has no GPU samples", lib.display());
            return (None, row);
        }
    };
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            row.note = format!("no NVML: no GPU could be counted ({e}): the trace has no GPU samples");
            return (None, row);
        }
    };
    let names: Vec<String> =
        (0..count).map(|i| nvml.device_by_index(i).and_then(|d| d.name()).unwrap_or_else(|_| "?".into())).collect();
    // each GPU's UUID: the device timeline's devices name theirs, which gives their NVML index
    let uuids: Vec<(String, i32)> =
        (0..count).filter_map(|i| nvml.device_by_index(i).and_then(|d| d.uuid()).ok().map(|u| (u, i as i32))).collect();
    let addresses: Vec<(crate::kmsg::PciAddress, i32)> = (0..count)
        .filter_map(|i| {
            let pci = nvml.device_by_index(i).and_then(|d| d.pci_info()).ok()?;
            Some((crate::kmsg::parse_address(&pci.bus_id)?, i as i32))
        })
        .collect();
    let gpus: Vec<crate::devices::NvmlGpu> = (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            Some(crate::devices::NvmlGpu { index: i as i32, uuid: d.uuid().ok()?, name: names[i as usize].clone() })
        })
        .collect();
    let driver = nvml.sys_driver_version().unwrap_or_default();
    row.complete = true;
    row.symbols = names.iter().enumerate().map(|(i, n)| format!("GPU {i}: {n}")).collect();
    row.note = format!(
        "NVML (driver {driver}): {count} GPU(s) sampled {} times a second; Xid errors recorded as gpu_xid events",
        opts.hz
    );
    let stop = Arc::new(AtomicBool::new(false));
    let period = Duration::from_nanos(1_000_000_000 / u64::from(opts.hz.max(1)));
    let thread_stop = stop.clone();
    let thread = std::thread::Builder::new()
        .name("causeway-nvml".into())
        .spawn(move || sample_loop(nvml, count, period, thread_stop, tx))
        .ok();
    (Some(GpuSampler { stop, thread, uuids, addresses, gpus }), row)
}

/// Sample every `period` until `stop`; between samples wait for Xid events.
fn sample_loop(
    nvml: Nvml,
    count: u32,
    period: Duration,
    stop: Arc<AtomicBool>,
    tx: tokio::sync::mpsc::UnboundedSender<GpuMsg>,
) {
    let devices: Vec<(i32, Device)> =
        (0..count).filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i as i32, d))).collect();
    let max_sm: Vec<i32> = devices.iter().map(|(_, d)| opt_u32(d.max_clock_info(Clock::SM))).collect();
    let nvlink: Vec<NvlinkErrors> = devices.iter().map(|(_, d)| NvlinkErrors::of(d)).collect();
    let sees_nvml_pids = in_initial_pid_namespace();
    // one event set for every GPU that can report Xid errors
    let mut events = nvml.create_event_set().ok();
    for (_, d) in &devices {
        if let Some(set) = events.take() {
            events = match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(s) => Some(s),
                Err(_) => nvml.create_event_set().ok(),
            };
        }
    }
    let mut next = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if Instant::now() >= next || stopping {
            let ts = now_ns();
            let samples: Vec<GpuSample> = devices
                .iter()
                .zip(&max_sm)
                .zip(&nvlink)
                .map(|(((i, d), &max), errors)| sample(ts, *i, d, max, errors))
                .collect();
            let procs: Vec<GpuProcessMemory> =
                devices.iter().flat_map(|(i, d)| processes(ts, *i, d, sees_nvml_pids)).collect();
            if tx.send(GpuMsg::Samples(samples, procs)).is_err() || stopping {
                return;
            }
            next += period;
            if next < Instant::now() {
                next = Instant::now() + period; // fell behind: skip, do not burst
            }
        }
        let wait = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(50));
        match events.as_ref().map(|set| set.wait(wait.as_millis().max(1) as u32)) {
            Some(Ok(ev)) => {
                let gpu = ev.device.index().map_or(-1, |i| i as i32);
                let xid = ev.event_data.map_or(0, |x| match x {
                    nvml_wrapper::enums::event::XidError::Value(v) => v as i64,
                    nvml_wrapper::enums::event::XidError::Unknown => -1,
                });
                let e = Event {
                    ts_ns: now_ns(),
                    cpu: -1,
                    source: op::GPU_XID.source,
                    op: op::GPU_XID.op,
                    arg0: xid,
                    gpu_id: gpu,
                    ..Default::default()
                };
                if tx.send(GpuMsg::Xid(e)).is_err() {
                    return;
                }
            }
            Some(Err(NvmlError::Timeout)) => {}
            // no event set, or it broke: sleep instead
            _ => std::thread::sleep(wait),
        }
    }
}

fn opt_u32(r: Result<u32, NvmlError>) -> i32 {
    r.ok().and_then(|v| i32::try_from(v).ok()).unwrap_or(-1)
}

fn opt_u64(r: Result<u64, NvmlError>) -> i64 {
    r.ok().and_then(|v| i64::try_from(v).ok()).unwrap_or(-1)
}

/// A field value as a number, -1 when it failed or is of no integer type.
fn field_value(v: &Result<FieldValueSample, NvmlError>) -> i64 {
    use nvml_wrapper::enums::device::SampleValue;
    match v.as_ref().ok().and_then(|s| s.value.as_ref().ok()) {
        Some(SampleValue::U64(x)) => i64::try_from(*x).unwrap_or(-1),
        Some(SampleValue::U32(x)) => i64::from(*x),
        Some(SampleValue::I64(x)) => *x,
        _ => -1,
    }
}

/// How a device's NVLink error counters are read, decided once: as the four totals NVML sums over
/// the links (field values), else link by link over its active links, else not at all (-1: no
/// NVLink, or a driver that does not report them).
enum NvlinkErrors {
    Totals,
    PerLink(Vec<u32>),
    None,
}

impl NvlinkErrors {
    fn of(d: &Device) -> NvlinkErrors {
        let ids: Vec<FieldId> = NVLINK_ERROR_TOTALS.iter().map(|&f| FieldId(f)).collect();
        if d.field_values_for(&ids).is_ok_and(|v| v.iter().any(|x| field_value(x) >= 0)) {
            return NvlinkErrors::Totals;
        }
        let active: Vec<u32> =
            (0..NVLINK_MAX_LINKS).filter(|&l| d.link_wrapper_for(l).is_active().unwrap_or(false)).collect();
        let counts =
            active.first().is_some_and(|&l| d.link_wrapper_for(l).error_counter(ErrorCounter::DlCrcFlit).is_ok());
        if counts {
            NvlinkErrors::PerLink(active)
        } else {
            NvlinkErrors::None
        }
    }

    /// The four counters (CRC flit, CRC data, replay, recovery), each -1 when not reported.
    fn read(&self, d: &Device, totals: &[Result<FieldValueSample, NvmlError>]) -> [i64; 4] {
        match self {
            NvlinkErrors::Totals if totals.len() == 4 => std::array::from_fn(|k| field_value(&totals[k])),
            NvlinkErrors::PerLink(links) => std::array::from_fn(|k| {
                let each: Vec<u64> = links
                    .iter()
                    .filter_map(|&l| d.link_wrapper_for(l).error_counter(NVLINK_ERROR_COUNTERS[k]).ok())
                    .collect();
                if each.is_empty() {
                    -1
                } else {
                    i64::try_from(each.iter().sum::<u64>()).unwrap_or(-1)
                }
            }),
            _ => [-1; 4],
        }
    }
}

/// Whether this process sees the host's pid namespace, the one NVML names processes in (its
/// `NSpid` lists one pid): only then does a missing `/proc/PID` mean the process is gone.
fn in_initial_pid_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().find_map(|l| l.strip_prefix("NSpid:")).is_some_and(|v| v.split_whitespace().count() == 1)
    })
}

/// The processes NVML lists on one GPU (compute and graphics, one row per pid), with the memory
/// each uses and whether `/proc/PID` existed then (-1 when `sees_pids` is false).
fn processes(ts_ns: i64, gpu: i32, d: &Device, sees_pids: bool) -> Vec<GpuProcessMemory> {
    let mut out: Vec<GpuProcessMemory> = Vec::new();
    let lists: [(i32, Result<Vec<ProcessInfo>, NvmlError>); 2] =
        [(1, d.running_compute_processes()), (2, d.running_graphics_processes())];
    for (bit, list) in lists {
        for p in list.unwrap_or_default() {
            let used = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => i64::try_from(b).unwrap_or(-1),
                UsedGpuMemory::Unavailable => -1,
            };
            match out.iter_mut().find(|r| r.pid == p.pid) {
                Some(r) => {
                    r.contexts |= bit;
                    r.used_bytes = r.used_bytes.max(used);
                }
                None => out.push(GpuProcessMemory {
                    ts_ns,
                    gpu,
                    pid: p.pid,
                    used_bytes: used,
                    contexts: bit,
                    alive: if !sees_pids {
                        -1
                    } else {
                        i32::from(std::path::Path::new(&format!("/proc/{}", p.pid)).exists())
                    },
                }),
            }
        }
    }
    out
}

/// One sample of one GPU; what it does not report is -1.
fn sample(ts_ns: i64, gpu: i32, d: &Device, sm_clock_max_mhz: i32, errors: &NvlinkErrors) -> GpuSample {
    let util = d.utilization_rates().ok();
    let mem = d.memory_info().ok();
    let (mut nvlink_tx_kib, mut nvlink_rx_kib) = (-1, -1);
    let mut ids = vec![FieldId(NVLINK_DATA_TX), FieldId(NVLINK_DATA_RX)];
    if matches!(errors, NvlinkErrors::Totals) {
        ids.extend(NVLINK_ERROR_TOTALS.iter().map(|&f| FieldId(f)));
    }
    let values = d.field_values_for(&ids).unwrap_or_default();
    if values.len() == ids.len() {
        (nvlink_tx_kib, nvlink_rx_kib) = (field_value(&values[0]), field_value(&values[1]));
    }
    let [crc_flit, crc_data, replay, recovery] = errors.read(d, values.get(2..).unwrap_or_default());
    GpuSample {
        ts_ns,
        gpu,
        sm_clock_mhz: opt_u32(d.clock_info(Clock::SM)),
        sm_clock_max_mhz,
        mem_clock_mhz: opt_u32(d.clock_info(Clock::Memory)),
        throttle_reasons: opt_u64(d.current_throttle_reasons().map(|r| r.bits())),
        temperature_c: opt_u32(d.temperature(TemperatureSensor::Gpu)),
        power_mw: d.power_usage().map_or(-1, i64::from),
        power_limit_mw: d.enforced_power_limit().map_or(-1, i64::from),
        util_gpu_pct: util.as_ref().map_or(-1, |u| u.gpu as i32),
        util_mem_pct: util.as_ref().map_or(-1, |u| u.memory as i32),
        mem_used_bytes: mem.as_ref().map_or(-1, |m| m.used as i64),
        mem_total_bytes: mem.as_ref().map_or(-1, |m| m.total as i64),
        pcie_tx_kbps: d.pcie_throughput(PcieUtilCounter::Send).map_or(-1, i64::from),
        pcie_rx_kbps: d.pcie_throughput(PcieUtilCounter::Receive).map_or(-1, i64::from),
        nvlink_tx_kib,
        nvlink_rx_kib,
        ecc_corrected: opt_u64(d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)),
        ecc_uncorrected: opt_u64(d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)),
        pcie_link_gen: opt_u32(d.current_pcie_link_gen()),
        pcie_link_gen_max: opt_u32(d.max_pcie_link_gen()),
        pcie_link_width: opt_u32(d.current_pcie_link_width()),
        pcie_link_width_max: opt_u32(d.max_pcie_link_width()),
        nvlink_crc_flit_errors: crc_flit,
        nvlink_crc_data_errors: crc_data,
        nvlink_replay_errors: replay,
        nvlink_recovery_errors: recovery,
    }
}
