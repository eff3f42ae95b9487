//! The tables NVML fills while tracing: `gpu_samples` ([`GpuSample`] per GPU and sample period) and
//! `gpu_process_memory` ([`GpuProcessMemory`] per process NVML lists on a GPU then). Their DDL is
//! in [`crate::schema::NATIVE_DDL`]; here what every engine shares: the columns `gpu_samples`
//! gained after its first version ([`LATER_GPU_SAMPLE_COLUMNS`], always last; a trace recorded
//! before them reads them as -1 and gains them when appended to), the INSERTs with their
//! parameters, the SELECTs, the checked decoding of their rows, and what their columns mean.

use std::path::Path;

use causeway_model::time::TimeWindow;
use causeway_model::{GpuProcessMemory, GpuSample};

use crate::cuda_tables::{fits_i32, fits_u32, window_clause};
use crate::schema::SqlParam;
use crate::Result;

/// The columns of `gpu_samples`' first version, in table order.
const FIRST_GPU_SAMPLE_COLUMNS: [&str; 19] = [
    "timestamp",
    "gpu",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "throttle_reasons",
    "temperature_c",
    "power_mw",
    "power_limit_mw",
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "pcie_tx_kbps",
    "pcie_rx_kbps",
    "nvlink_tx_kib",
    "nvlink_rx_kib",
    "ecc_corrected",
    "ecc_uncorrected",
];

/// Columns added to `gpu_samples` after its first version (always last, in this order), with
/// their DDL: added when a session is appended to an older trace; readers read their absence, and
/// a NULL (a fleet lake's rows shipped by an older version), as -1, "not reported".
pub const LATER_GPU_SAMPLE_COLUMNS: [(&str, &str); 8] = [
    ("pcie_link_gen", "INTEGER NOT NULL DEFAULT -1"),
    ("pcie_link_gen_max", "INTEGER NOT NULL DEFAULT -1"),
    ("pcie_link_width", "INTEGER NOT NULL DEFAULT -1"),
    ("pcie_link_width_max", "INTEGER NOT NULL DEFAULT -1"),
    ("nvlink_crc_flit_errors", "INTEGER NOT NULL DEFAULT -1"),
    ("nvlink_crc_data_errors", "INTEGER NOT NULL DEFAULT -1"),
    ("nvlink_replay_errors", "INTEGER NOT NULL DEFAULT -1"),
    ("nvlink_recovery_errors", "INTEGER NOT NULL DEFAULT -1"),
];

/// Every column of `gpu_samples`, in table order.
const GPU_SAMPLE_WIDTH: usize = 27;

fn gpu_sample_columns() -> impl Iterator<Item = &'static str> {
    FIRST_GPU_SAMPLE_COLUMNS.into_iter().chain(LATER_GPU_SAMPLE_COLUMNS.iter().map(|(c, _)| *c))
}

/// Appends one GPU sample.
pub(crate) fn insert_gpu_sample_sql() -> String {
    let columns: Vec<&str> = gpu_sample_columns().collect();
    format!("INSERT INTO gpu_samples ({}) VALUES ({})", columns.join(", "), vec!["?"; columns.len()].join(", "))
}

/// The GPU samples of a window, by time then GPU; `has` says which columns the table has (a later
/// column it lacks reads as -1, and so does a NULL in one it has).
pub(crate) fn select_gpu_samples_sql(window: &TimeWindow, has: &dyn Fn(&str) -> bool) -> String {
    let mut select: Vec<String> = FIRST_GPU_SAMPLE_COLUMNS.iter().map(|c| c.to_string()).collect();
    for (c, _) in LATER_GPU_SAMPLE_COLUMNS {
        select.push(if has(c) { format!("COALESCE({c}, -1) AS {c}") } else { format!("-1 AS {c}") });
    }
    format!("SELECT {} FROM gpu_samples {} ORDER BY timestamp, gpu", select.join(", "), window_clause(window))
}

/// The parameters of [`insert_gpu_sample_sql`], in order.
pub(crate) fn gpu_sample_params(s: &GpuSample) -> [SqlParam<'static>; GPU_SAMPLE_WIDTH] {
    let i = |v: i32| SqlParam::Int(i64::from(v));
    [
        SqlParam::Int(s.ts_ns),
        i(s.gpu),
        i(s.sm_clock_mhz),
        i(s.sm_clock_max_mhz),
        i(s.mem_clock_mhz),
        SqlParam::Int(s.throttle_reasons),
        i(s.temperature_c),
        SqlParam::Int(s.power_mw),
        SqlParam::Int(s.power_limit_mw),
        i(s.util_gpu_pct),
        i(s.util_mem_pct),
        SqlParam::Int(s.mem_used_bytes),
        SqlParam::Int(s.mem_total_bytes),
        SqlParam::Int(s.pcie_tx_kbps),
        SqlParam::Int(s.pcie_rx_kbps),
        SqlParam::Int(s.nvlink_tx_kib),
        SqlParam::Int(s.nvlink_rx_kib),
        SqlParam::Int(s.ecc_corrected),
        SqlParam::Int(s.ecc_uncorrected),
        i(s.pcie_link_gen),
        i(s.pcie_link_gen_max),
        i(s.pcie_link_width),
        i(s.pcie_link_width_max),
        SqlParam::Int(s.nvlink_crc_flit_errors),
        SqlParam::Int(s.nvlink_crc_data_errors),
        SqlParam::Int(s.nvlink_replay_errors),
        SqlParam::Int(s.nvlink_recovery_errors),
    ]
}

/// A row of [`select_gpu_samples_sql`]: the 32-bit columns must fit.
pub(crate) fn gpu_sample_from(db: &Path, r: [i64; GPU_SAMPLE_WIDTH]) -> Result<GpuSample> {
    let small = |column: &str, v: i64| fits_i32(db, "gpu_samples", column, v);
    Ok(GpuSample {
        ts_ns: r[0],
        gpu: small("gpu", r[1])?,
        sm_clock_mhz: small("sm_clock_mhz", r[2])?,
        sm_clock_max_mhz: small("sm_clock_max_mhz", r[3])?,
        mem_clock_mhz: small("mem_clock_mhz", r[4])?,
        throttle_reasons: r[5],
        temperature_c: small("temperature_c", r[6])?,
        power_mw: r[7],
        power_limit_mw: r[8],
        util_gpu_pct: small("util_gpu_pct", r[9])?,
        util_mem_pct: small("util_mem_pct", r[10])?,
        mem_used_bytes: r[11],
        mem_total_bytes: r[12],
        pcie_tx_kbps: r[13],
        pcie_rx_kbps: r[14],
        nvlink_tx_kib: r[15],
        nvlink_rx_kib: r[16],
        ecc_corrected: r[17],
        ecc_uncorrected: r[18],
        pcie_link_gen: small("pcie_link_gen", r[19])?,
        pcie_link_gen_max: small("pcie_link_gen_max", r[20])?,
        pcie_link_width: small("pcie_link_width", r[21])?,
        pcie_link_width_max: small("pcie_link_width_max", r[22])?,
        nvlink_crc_flit_errors: r[23],
        nvlink_crc_data_errors: r[24],
        nvlink_replay_errors: r[25],
        nvlink_recovery_errors: r[26],
    })
}

/// Appends one process's memory on a GPU at a sample.
pub(crate) const INSERT_GPU_PROCESS_MEMORY_SQL: &str =
    "INSERT INTO gpu_process_memory (timestamp, gpu, pid, used_bytes, contexts, alive) VALUES (?, ?, ?, ?, ?, ?)";

/// The processes' memory of a window, by time, GPU and pid.
pub(crate) fn select_gpu_process_memory_sql(window: &TimeWindow) -> String {
    format!(
        "SELECT timestamp, gpu, pid, used_bytes, contexts, alive FROM gpu_process_memory {} ORDER BY timestamp, gpu, pid",
        window_clause(window)
    )
}

/// The parameters of [`INSERT_GPU_PROCESS_MEMORY_SQL`], in order.
pub(crate) fn gpu_process_memory_params(m: &GpuProcessMemory) -> [SqlParam<'static>; 6] {
    [
        SqlParam::Int(m.ts_ns),
        SqlParam::Int(i64::from(m.gpu)),
        SqlParam::Int(i64::from(m.pid)),
        SqlParam::Int(m.used_bytes),
        SqlParam::Int(i64::from(m.contexts)),
        SqlParam::Int(i64::from(m.alive)),
    ]
}

/// A row of [`select_gpu_process_memory_sql`]: the pid and the small columns must fit.
pub(crate) fn gpu_process_memory_from(db: &Path, r: [i64; 6]) -> Result<GpuProcessMemory> {
    let small = |column: &str, v: i64| fits_i32(db, "gpu_process_memory", column, v);
    Ok(GpuProcessMemory {
        ts_ns: r[0],
        gpu: small("gpu", r[1])?,
        pid: fits_u32(db, "gpu_process_memory", "pid", r[2])?,
        used_bytes: r[3],
        contexts: small("contexts", r[4])?,
        alive: small("alive", r[5])?,
    })
}

/// What the tables mean (None for another table).
pub(crate) fn table_meaning(table: &str) -> Option<&'static str> {
    Some(match table {
        "gpu_samples" => "the GPUs' own state sampled through NVML while tracing (default 10 Hz): clocks, throttle reasons, temperature, power, utilization, memory, PCIe / NVLink traffic, the PCIe link's generation and width against their maximum, NVLink error counters, ECC errors; -1 = not reported by the device",
        "gpu_process_memory" => "the processes NVML listed on each GPU at each sample (running compute and graphics contexts) with the device memory each used, and whether the process still existed then (alive = 0: a context its process left behind); join gpu_samples on (timestamp, gpu)",
        _ => return None,
    })
}

/// What a column of these tables means (None for another).
pub(crate) fn column_meaning(table: &str, column: &str) -> Option<&'static str> {
    Some(match (table, column) {
        ("gpu_samples", "timestamp") => "unix ns when the sample was read",
        ("gpu_samples", "gpu") => "NVML device index (events.gpu_id of the calls that addressed it)",
        ("gpu_samples", "sm_clock_mhz") => "SM clock, MHz",
        ("gpu_samples", "sm_clock_max_mhz") => "the SM clock's maximum, MHz",
        ("gpu_samples", "mem_clock_mhz") => "memory clock, MHz",
        ("gpu_samples", "throttle_reasons") => "NVML clock event reasons bitmask: 0x1 gpu_idle, 0x2 applications_clocks_setting, 0x4 sw_power_cap, 0x8 hw_slowdown, 0x10 sync_boost, 0x20 sw_thermal_slowdown, 0x40 hw_thermal_slowdown, 0x80 hw_power_brake_slowdown, 0x100 display_clock_setting",
        ("gpu_samples", "temperature_c") => "GPU temperature, degrees C",
        ("gpu_samples", "power_mw") => "power draw, mW",
        ("gpu_samples", "power_limit_mw") => "enforced power limit, mW",
        ("gpu_samples", "util_gpu_pct") => "percent of the last sample period a kernel ran",
        ("gpu_samples", "util_mem_pct") => "percent of the last sample period device memory was read or written",
        ("gpu_samples", "mem_used_bytes") => "device memory in use, bytes",
        ("gpu_samples", "mem_total_bytes") => "device memory, bytes",
        ("gpu_samples", "pcie_tx_kbps") | ("gpu_samples", "pcie_rx_kbps") => "PCIe transmit / receive throughput, KB/s",
        ("gpu_samples", "nvlink_tx_kib") | ("gpu_samples", "nvlink_rx_kib") => "NVLink data transmitted / received since the driver loaded, KiB (cumulative: subtract consecutive samples)",
        ("gpu_samples", "ecc_corrected") | ("gpu_samples", "ecc_uncorrected") => "corrected / uncorrected ECC errors since the driver loaded (volatile counters)",
        ("gpu_samples", "pcie_link_gen") | ("gpu_samples", "pcie_link_width") => "the PCIe link's current generation / width in lanes (an idle GPU lowers its link on purpose: compare with the maximum only while it is busy)",
        ("gpu_samples", "pcie_link_gen_max") | ("gpu_samples", "pcie_link_width_max") => "the highest PCIe generation / widest link this device and system can run",
        ("gpu_samples", "nvlink_crc_flit_errors") | ("gpu_samples", "nvlink_crc_data_errors") => "NVLink CRC errors of flow-control units / of data since the driver loaded, summed over the device's links (cumulative: subtract consecutive samples)",
        ("gpu_samples", "nvlink_replay_errors") | ("gpu_samples", "nvlink_recovery_errors") => "NVLink data-link replays / recoveries since the driver loaded, summed over the device's links (cumulative)",
        ("gpu_process_memory", "timestamp") => "unix ns of the sample (the gpu_samples row of the same GPU)",
        ("gpu_process_memory", "gpu") => "NVML device index",
        ("gpu_process_memory", "pid") => "the process as NVML names it (the host's pid namespace)",
        ("gpu_process_memory", "used_bytes") => "device memory the process's context used, bytes (-1: NVML did not say)",
        ("gpu_process_memory", "contexts") => "which lists named it: 1 compute, 2 graphics, 3 both",
        ("gpu_process_memory", "alive") => "whether /proc/PID existed at the sample: 1 yes, 0 no (the process is gone, its context is not), -1 not known (the tracer saw another pid namespace)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_without_the_later_columns_reads_them_as_not_reported() {
        let all = select_gpu_samples_sql(&TimeWindow::ALL, &|_| true);
        assert!(all.contains("COALESCE(pcie_link_gen, -1) AS pcie_link_gen"), "{all}");
        let old =
            select_gpu_samples_sql(&TimeWindow::ALL, &|c| !c.starts_with("pcie_link") && !c.starts_with("nvlink_r"));
        assert!(old.contains("-1 AS pcie_link_gen,") && !old.contains("COALESCE(pcie_link"), "{old}");
        assert!(old.contains("COALESCE(nvlink_crc_flit_errors, -1)"), "{old}");
        assert_eq!(gpu_sample_columns().count(), GPU_SAMPLE_WIDTH);
        assert_eq!(insert_gpu_sample_sql().matches('?').count(), GPU_SAMPLE_WIDTH);
        let db = Path::new("t.db");
        let mut row = [-1i64; GPU_SAMPLE_WIDTH];
        row[0] = 5;
        row[1] = 0;
        let s = gpu_sample_from(db, row).unwrap();
        assert_eq!((s.pcie_link_gen, s.nvlink_errors()), (-1, -1));
        row[19] = 1 << 40;
        assert!(gpu_sample_from(db, row).is_err(), "a link generation that does not fit");
    }

    #[test]
    fn every_column_has_a_meaning() {
        for c in gpu_sample_columns() {
            assert!(column_meaning("gpu_samples", c).is_some(), "{c}");
        }
        for c in ["timestamp", "gpu", "pid", "used_bytes", "contexts", "alive"] {
            assert!(column_meaning("gpu_process_memory", c).is_some(), "{c}");
        }
    }
}
