//! The GPUs' own state as NVML reports it while tracing: one [`GpuSample`] per GPU and sample period
//! (`gpu_samples`: clocks, throttle reasons, temperature, power, utilization, memory, PCIe and
//! NVLink traffic and link health, ECC counts) and one [`GpuProcessMemory`] per process NVML lists
//! on a GPU then (`gpu_process_memory`), with the names of NVML's clock event reasons.

/// One sample of a GPU's own state, read through NVML while tracing (`gpu_samples`). A value the
/// device does not report is -1.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GpuSample {
    /// When it was read, unix ns.
    pub ts_ns: i64,
    /// NVML device index.
    pub gpu: i32,
    /// SM clock, MHz.
    pub sm_clock_mhz: i32,
    /// The SM clock's maximum, MHz.
    pub sm_clock_max_mhz: i32,
    /// Memory clock, MHz.
    pub mem_clock_mhz: i32,
    /// Clock event (throttle) reasons, NVML's bitmask ([`throttle_reason_names`]).
    pub throttle_reasons: i64,
    /// GPU temperature, °C.
    pub temperature_c: i32,
    /// Power draw, mW.
    pub power_mw: i64,
    /// Enforced power limit, mW.
    pub power_limit_mw: i64,
    /// Percent of the sample period a kernel ran.
    pub util_gpu_pct: i32,
    /// Percent of the sample period device memory was read or written.
    pub util_mem_pct: i32,
    /// Device memory in use, bytes.
    pub mem_used_bytes: i64,
    /// Device memory, bytes.
    pub mem_total_bytes: i64,
    /// PCIe transmit throughput, KB/s.
    pub pcie_tx_kbps: i64,
    /// PCIe receive throughput, KB/s.
    pub pcie_rx_kbps: i64,
    /// NVLink data transmitted since the driver loaded, KiB (cumulative).
    pub nvlink_tx_kib: i64,
    /// NVLink data received since the driver loaded, KiB (cumulative).
    pub nvlink_rx_kib: i64,
    /// Corrected ECC errors since the driver loaded (volatile counter).
    pub ecc_corrected: i64,
    /// Uncorrected ECC errors since the driver loaded (volatile counter).
    pub ecc_uncorrected: i64,
    /// The PCIe link's current generation (an idle GPU lowers its link on purpose).
    pub pcie_link_gen: i32,
    /// The highest PCIe generation this device and system can run.
    pub pcie_link_gen_max: i32,
    /// The PCIe link's current width, lanes.
    pub pcie_link_width: i32,
    /// The PCIe link's widest.
    pub pcie_link_width_max: i32,
    /// NVLink data-link CRC errors of flow-control units since the driver loaded, summed over the
    /// device's links (cumulative).
    pub nvlink_crc_flit_errors: i64,
    /// NVLink data-link CRC errors of data, summed over the links (cumulative).
    pub nvlink_crc_data_errors: i64,
    /// NVLink data-link transmit replays, summed over the links (cumulative).
    pub nvlink_replay_errors: i64,
    /// NVLink data-link recoveries, summed over the links (cumulative).
    pub nvlink_recovery_errors: i64,
}

impl GpuSample {
    /// Whether the PCIe link ran below its maximum generation or width (both reported).
    pub fn pcie_degraded(&self) -> bool {
        (self.pcie_link_gen > 0 && self.pcie_link_gen_max > self.pcie_link_gen)
            || (self.pcie_link_width > 0 && self.pcie_link_width_max > self.pcie_link_width)
    }

    /// The NVLink error counters summed (-1 when none is reported).
    pub fn nvlink_errors(&self) -> i64 {
        let v = [
            self.nvlink_crc_flit_errors,
            self.nvlink_crc_data_errors,
            self.nvlink_replay_errors,
            self.nvlink_recovery_errors,
        ];
        if v.iter().all(|x| *x < 0) {
            -1
        } else {
            v.iter().filter(|x| **x > 0).sum()
        }
    }
}

/// What a process held on a GPU at one NVML sample (`gpu_process_memory`): NVML's running compute
/// and graphics processes of the device, with the memory each uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GpuProcessMemory {
    /// When the device was read, unix ns (the same as its `gpu_samples` row).
    pub ts_ns: i64,
    /// NVML device index.
    pub gpu: i32,
    /// The process as NVML names it (the host's pid namespace).
    pub pid: u32,
    /// Device memory the process's context uses, bytes (-1: NVML does not say).
    pub used_bytes: i64,
    /// Which lists named it: 1 compute, 2 graphics, 3 both.
    pub contexts: i32,
    /// Whether `/proc/PID` existed when the device was read: 1 yes, 0 no (the process is gone and
    /// its context is not), -1 not known (the tracer sees another pid namespace than NVML's).
    pub alive: i32,
}

/// NVML's clock event (throttle) reasons: (bit, name, meaning).
pub const THROTTLE_REASONS: [(i64, &str, &str); 9] = [
    (0x1, "gpu_idle", "nothing running on the GPU: clocks lowered on purpose"),
    (0x2, "applications_clocks_setting", "clocks limited by the applications clocks setting"),
    (0x4, "sw_power_cap", "software power cap: the power draw reached the limit"),
    (0x8, "hw_slowdown", "hardware slowdown (HW thermal, power brake or an external signal)"),
    (0x10, "sync_boost", "sync boost: clocks held down to match other GPUs of the group"),
    (0x20, "sw_thermal_slowdown", "software thermal slowdown: the GPU or memory ran too hot"),
    (0x40, "hw_thermal_slowdown", "hardware thermal slowdown: the GPU ran too hot"),
    (0x80, "hw_power_brake_slowdown", "hardware power brake: an external power brake asserted"),
    (0x100, "display_clock_setting", "clocks limited by the display clock setting"),
];

/// The reasons that slow the GPU's work: every reason but idle and the clock settings, which lower
/// clocks only while nothing needs them or by the user's choice.
pub const SLOWING_REASONS: i64 = 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80;

/// The names of the reasons set in `bits` ([`THROTTLE_REASONS`]), unknown bits as `0x...`.
pub fn throttle_reason_names(bits: i64) -> Vec<String> {
    let mut out: Vec<String> =
        THROTTLE_REASONS.iter().filter(|(b, _, _)| bits & b != 0).map(|(_, n, _)| n.to_string()).collect();
    let known: i64 = THROTTLE_REASONS.iter().map(|r| r.0).sum();
    if bits & !known != 0 {
        out.push(format!("{:#x}", bits & !known));
    }
    out
}
