//! The processes' GPU memory from NVML (`gpu_process_memory`: at every sample, each process NVML
//! lists on a GPU with the memory its context uses, and whether `/proc/PID` still existed): per
//! (GPU, pid) its figures for `stats`, the contexts left behind by processes that are gone, and
//! the memory that keeps rising over a long trace.
//!
//! A context is **left behind** when NVML lists it after its process is gone: the row says so
//! (`alive` 0: `/proc/PID` absent at the sample), or, where the tracer could not tell (`alive`
//! -1: another pid namespace), the trace saw the process exit ([`ZOMBIE_GRACE_NS`] before). It is
//! named only when it lasts at least [`ZOMBIE_MIN_NS`] over two samples or more: a context being
//! torn down as its process exits is not one.
//!
//! Memory **keeps rising** when, over at least [`GROWTH_MIN_SAMPLES`] samples spanning
//! [`GROWTH_MIN_NS`] while the process lived, the nearest-rank median of each quarter of them is
//! above the quarter's before, and the last quarter's above the first by [`GROWTH_MIN_BYTES`] or
//! more: a model loaded at the start and a caching allocator that levels off do not.

use std::collections::BTreeMap;

use causeway_model::GpuProcessMemory;

use crate::stats::nearest_ranks_unsorted;

/// How long after a traced process's exit NVML may still list its context while the driver tears
/// it down (only where the tracer could not look in `/proc`).
pub const ZOMBIE_GRACE_NS: i64 = 1_000_000_000;
/// A context left behind is named when it outlives its process this long.
pub const ZOMBIE_MIN_NS: i64 = 1_000_000_000;
/// Growth is judged over this many samples of a process at least...
pub const GROWTH_MIN_SAMPLES: usize = 20;
/// ...spanning at least this long...
pub const GROWTH_MIN_NS: i64 = 2_000_000_000;
/// ...and named when its last quarter's median is this much above its first quarter's.
pub const GROWTH_MIN_BYTES: i64 = 64 << 20;

/// `1.2 GiB`, `380.0 MiB`, `12.0 KiB`, `512 B` (-1: `?`).
pub(crate) fn fmt_bytes(b: i64) -> String {
    let a = b.unsigned_abs() as f64;
    let sign = if b < 0 { "-" } else { "" };
    if b == -1 {
        "?".into()
    } else if a >= (1u64 << 30) as f64 {
        format!("{sign}{:.1} GiB", a / (1u64 << 30) as f64)
    } else if a >= (1u64 << 20) as f64 {
        format!("{sign}{:.1} MiB", a / (1u64 << 20) as f64)
    } else if a >= 1024.0 {
        format!("{sign}{:.1} KiB", a / 1024.0)
    } else {
        format!("{sign}{a:.0} B")
    }
}

/// One process's memory on one GPU over the samples held (`stats`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ProcessGpuMemory {
    /// NVML device index.
    pub gpu: i32,
    /// The process as NVML names it.
    pub pid: u32,
    /// The process's name where the trace knows it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Samples that listed it.
    pub samples: u64,
    /// The most it used, bytes (-1: not reported).
    pub peak_bytes: i64,
    /// What it used at its first sample, bytes.
    pub first_bytes: i64,
    /// What it used at its last sample, bytes.
    pub last_bytes: i64,
    /// Samples taken after its process was gone (`alive` = 0).
    pub gone_samples: u64,
}

/// Every (GPU, pid)'s rows, by time.
fn by_process(rows: &[GpuProcessMemory]) -> BTreeMap<(i32, u32), Vec<&GpuProcessMemory>> {
    let mut m: BTreeMap<(i32, u32), Vec<&GpuProcessMemory>> = BTreeMap::new();
    for r in rows {
        m.entry((r.gpu, r.pid)).or_default().push(r);
    }
    for v in m.values_mut() {
        v.sort_by_key(|r| r.ts_ns);
    }
    m
}

/// Per (GPU, pid), its figures, by GPU then pid.
pub fn per_process(rows: &[GpuProcessMemory]) -> Vec<ProcessGpuMemory> {
    by_process(rows)
        .into_iter()
        .map(|((gpu, pid), v)| ProcessGpuMemory {
            gpu,
            pid,
            name: String::new(),
            samples: v.len() as u64,
            peak_bytes: v.iter().map(|r| r.used_bytes).max().unwrap_or(-1),
            first_bytes: v.first().map_or(-1, |r| r.used_bytes),
            last_bytes: v.last().map_or(-1, |r| r.used_bytes),
            gone_samples: v.iter().filter(|r| r.alive == 0).count() as u64,
        })
        .collect()
}

/// A context NVML listed after its process was gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    pub gpu: i32,
    pub pid: u32,
    /// When the trace saw the process exit (a traced process), unix ns.
    pub exit_ns: Option<i64>,
    /// The first and last sample that listed it gone, and how many did.
    pub first_gone_ns: i64,
    pub last_gone_ns: i64,
    pub gone_samples: usize,
    /// What it held at the last of them, bytes (-1: not reported).
    pub bytes: i64,
    /// Whether the rows said `/proc/PID` was absent (else only the exit event says it is gone).
    pub proc_absent: bool,
}

impl LeftBehind {
    /// How long it outlived its process: from the exit (or the first sample that found it gone).
    pub fn held_ns(&self) -> i64 {
        self.last_gone_ns - self.exit_ns.unwrap_or(self.first_gone_ns)
    }
}

/// The contexts left behind (see the module doc); `exits`: when the trace saw each traced process
/// exit.
pub fn left_behind(rows: &[GpuProcessMemory], exits: &BTreeMap<u32, i64>) -> Vec<LeftBehind> {
    let mut out = Vec::new();
    for ((gpu, pid), v) in by_process(rows) {
        let exit_ns = exits.get(&pid).copied();
        let gone: Vec<&&GpuProcessMemory> = v
            .iter()
            .filter(|r| r.alive == 0 || (r.alive == -1 && exit_ns.is_some_and(|x| r.ts_ns > x + ZOMBIE_GRACE_NS)))
            .collect();
        let (Some(first), Some(last)) = (gone.first(), gone.last()) else { continue };
        // an exit seen after the rows that found it gone belongs to another process of that pid
        let exit_ns = exit_ns.filter(|x| *x <= first.ts_ns);
        let lb = LeftBehind {
            gpu,
            pid,
            exit_ns,
            first_gone_ns: first.ts_ns,
            last_gone_ns: last.ts_ns,
            gone_samples: gone.len(),
            bytes: last.used_bytes,
            proc_absent: gone.iter().any(|r| r.alive == 0),
        };
        if lb.gone_samples >= 2 && lb.held_ns() >= ZOMBIE_MIN_NS && lb.bytes != 0 {
            out.push(lb);
        }
    }
    out
}

/// A process whose memory kept rising.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Growth {
    pub gpu: i32,
    pub pid: u32,
    /// The nearest-rank median of each quarter of its samples, bytes.
    pub quarters: [i64; 4],
    /// Its first and last sample: (unix ns, bytes).
    pub first: (i64, i64),
    pub last: (i64, i64),
    pub samples: usize,
}

impl Growth {
    /// The rise from the first sample to the last, bytes.
    pub fn rise(&self) -> i64 {
        self.last.1 - self.first.1
    }
}

/// The processes whose memory kept rising (see the module doc).
pub fn growths(rows: &[GpuProcessMemory]) -> Vec<Growth> {
    let mut out = Vec::new();
    for ((gpu, pid), v) in by_process(rows) {
        let v: Vec<&&GpuProcessMemory> = v.iter().filter(|r| r.alive != 0 && r.used_bytes >= 0).collect();
        let (Some(first), Some(last)) = (v.first(), v.last()) else { continue };
        if v.len() < GROWTH_MIN_SAMPLES || last.ts_ns - first.ts_ns < GROWTH_MIN_NS {
            continue;
        }
        let n = v.len();
        let quarters: [i64; 4] = std::array::from_fn(|q| {
            let mut part: Vec<i64> = v[q * n / 4..(q + 1) * n / 4].iter().map(|r| r.used_bytes).collect();
            nearest_ranks_unsorted(&mut part, &[500]).map_or(-1, |p| p[0])
        });
        let rising = quarters.windows(2).all(|w| w[1] > w[0]);
        if rising && quarters[3] - quarters[0] >= GROWTH_MIN_BYTES {
            out.push(Growth {
                gpu,
                pid,
                quarters,
                first: (first.ts_ns, first.used_bytes),
                last: (last.ts_ns, last.used_bytes),
                samples: n,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const MIB: i64 = 1 << 20;

    fn row(ts_ms: i64, gpu: i32, pid: u32, mib: i64, alive: i32) -> GpuProcessMemory {
        GpuProcessMemory { ts_ns: ts_ms * MS, gpu, pid, used_bytes: mib * MIB, contexts: 1, alive }
    }

    #[test]
    fn a_context_that_outlives_its_process_is_named_and_a_teardown_is_not() {
        let mut rows = Vec::new();
        for k in 0..40 {
            let t = k * 100;
            // pid 7 (traced, exits at 1 s): listed gone from 1.1 s to 4 s
            rows.push(row(t, 0, 7, 900, i32::from(t <= 1_000)));
            // pid 8 (traced, exits at 2 s): gone in one sample only, as its context is torn down
            if t <= 2_100 {
                rows.push(row(t, 0, 8, 500, i32::from(t <= 2_000)));
            }
            // pid 9 (untraced, another pid namespace: alive -1): never named without an exit
            rows.push(row(t, 1, 9, 100, -1));
            // pid 10 (traced, another namespace): listed 3 s after its exit at 0.5 s
            rows.push(row(t, 1, 10, 64, -1));
        }
        let exits = BTreeMap::from([(7, 1_000 * MS), (8, 2_000 * MS), (10, 500 * MS)]);
        let lb = left_behind(&rows, &exits);
        assert_eq!(lb.len(), 2, "{lb:?}");
        assert_eq!((lb[0].pid, lb[0].bytes, lb[0].exit_ns, lb[0].proc_absent), (7, 900 * MIB, Some(1_000 * MS), true));
        assert_eq!((lb[0].held_ns(), lb[0].gone_samples), (2_900 * MS, 29));
        // pid 10: the samples more than a second after its exit (1.6 s on)
        assert_eq!((lb[1].pid, lb[1].first_gone_ns, lb[1].proc_absent), (10, 1_600 * MS, false));
        assert_eq!(lb[1].held_ns(), 3_400 * MS);
        let stats = per_process(&rows);
        let seven = stats.iter().find(|p| p.pid == 7).unwrap();
        assert_eq!((seven.samples, seven.peak_bytes, seven.gone_samples), (40, 900 * MIB, 29));
    }

    #[test]
    fn memory_that_keeps_rising_is_growth_and_a_load_that_levels_off_is_not() {
        let mut rows = Vec::new();
        for k in 0..50i64 {
            let t = k * 100;
            rows.push(row(t, 0, 7, 1_000 + 4 * k, 1)); // +40 MiB/s for 5 s
            rows.push(row(t, 0, 8, if k < 5 { 100 * k } else { 8_000 }, 1)); // a model loaded, then flat
            rows.push(row(t, 0, 9, 1_000 + k, 1)); // rising, but 49 MiB in all
        }
        let g = growths(&rows);
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!((g[0].pid, g[0].samples, g[0].rise()), (7, 50, 196 * MIB));
        assert!(g[0].quarters.windows(2).all(|w| w[1] > w[0]));
        // too short a trace says nothing
        let short: Vec<GpuProcessMemory> = rows.iter().filter(|r| r.ts_ns < 1_500 * MS).cloned().collect();
        assert!(growths(&short).is_empty());
    }
}
