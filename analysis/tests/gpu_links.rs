//! The GPU's links and memory as explain and stats read them from NVML's samples (synthetic traces
//! written through the SQLite sink): a PCIe link below its maximum while the GPU is busy during
//! copies is named with its GPU and copies, and one lowered by an idle GPU is not; NVLink errors
//! rising during slow all-reduces name the GPU and the collectives, and rising during all-reduces
//! that were no slower name nothing; a context left behind by a process that exited and memory
//! that kept rising with allocations never freed are named, a clean run names neither. Every
//! chain's SQL gives its figure, and the link rules' SQL picks the rows the Rust picks.

mod common;

use causeway_analysis::{
    busy_sql, compute_stats, degraded_sql, explain, is_busy, Chain, ChainKind, ExplainRequest, Explanation, Severity,
    StatsRequest,
};
use causeway_backends::{open_store, QueryLimits, TraceStore};
use causeway_model::codes::op;
use causeway_model::{GpuProcessMemory, GpuSample};
use common::{Trace, MS, T0};

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

fn sample(at: i64, gpu: i32, util: i32, gen: i32, errors: i64) -> GpuSample {
    GpuSample {
        ts_ns: T0 + at,
        gpu,
        util_gpu_pct: util,
        pcie_tx_kbps: if util > 0 { 850_000 } else { 0 },
        pcie_rx_kbps: if util > 0 { 2_400_000 } else { 0 },
        mem_total_bytes: 80 * GIB,
        pcie_link_gen: gen,
        pcie_link_gen_max: 5,
        pcie_link_width: 16,
        pcie_link_width_max: 16,
        nvlink_crc_flit_errors: errors,
        nvlink_crc_data_errors: 0,
        nvlink_replay_errors: errors / 2,
        nvlink_recovery_errors: 0,
        ..Default::default()
    }
}

fn explained(t: Trace) -> (tempfile::TempDir, Box<dyn TraceStore>, Explanation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    t.write(&path);
    let store = open_store(&path).unwrap();
    let e = explain(store.as_ref(), &ExplainRequest::default()).unwrap();
    (dir, store, e)
}

fn value(store: &dyn TraceStore, sql: &str) -> i64 {
    let r = store.query(sql, &QueryLimits::default()).unwrap();
    r.rows[0][0].as_i64().unwrap_or_else(|| panic!("{sql}: {:?}", r.rows))
}

/// The chain of `cause` (of `pid`, when given), checked: its SQL gives its figure, its headline is
/// short.
fn the_chain<'a>(store: &dyn TraceStore, e: &'a Explanation, cause: &str) -> &'a Chain {
    of_pid(store, e, cause, None)
}

fn of_pid<'a>(store: &dyn TraceStore, e: &'a Explanation, cause: &str, pid: Option<u32>) -> &'a Chain {
    let c = e.chains.iter().find(|c| c.cause == cause && pid.is_none_or(|p| p == c.pid)).unwrap_or_else(|| {
        panic!("no {cause} chain in {:?}", e.chains.iter().map(|c| (&c.cause, &c.summary)).collect::<Vec<_>>())
    });
    assert_eq!(value(store, &c.evidence.sql), c.evidence.value, "{}", c.evidence.sql);
    assert!(c.headline().chars().count() <= causeway_analysis::HEADLINE_MAX, "a short headline: {}", c.headline());
    c
}

fn named(e: &Explanation, kind: ChainKind) -> Vec<&Chain> {
    e.chains.iter().filter(|c| c.kind == kind).collect()
}

/// pid 4242 copies 64 MiB every 50 ms for 3 s (10 ms each, 40 ms from 1 s to 2 s); NVML every
/// 100 ms at `util`, its link at gen 1 over that second (`gen1_all_along`: the whole trace).
fn copies(util: i32, gen1_all_along: bool) -> Trace {
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    let slow = |at: i64| (1_000 * MS..2_000 * MS).contains(&at);
    for k in 0..60 {
        let at = k * 50 * MS;
        let dur = if slow(at) { 40 * MS } else { 10 * MS };
        t.call(4242, 4242, op::CUDA_MEMCPY, T0 + at, dur).arg0 = 64 * MIB;
    }
    for k in 0..31 {
        let at = k * 100 * MS;
        let gen = if gen1_all_along || slow(at) { 1 } else { 5 };
        t.gpu_samples.push(sample(at, 0, util, gen, -1));
    }
    t
}

#[test]
fn a_pcie_link_below_its_maximum_while_busy_names_the_gpu_and_its_copies() {
    let (_d, store, e) = explained(copies(97, false));
    let c = the_chain(store.as_ref(), &e, "pcie_link_degraded");
    assert_eq!(
        (c.kind, c.op.as_str(), c.pid, c.severity),
        (ChainKind::DegradedLink, "PCIe link", 4242, Severity::High)
    );
    assert!(
        c.summary.starts_with("GPU 0's PCIe link ran at gen 1 x16 (max gen 5 x16) for 1.000 s while busy"),
        "{}",
        c.summary
    );
    // the copies that ran over it: the 20 slow ones and those that touch the second's edges
    assert!((20..=22).contains(&c.calls), "{} copies", c.calls);
    assert_eq!(c.evidence.value, 10, "the busy samples below the maximum");
    let over = &c.details[0];
    assert!(
        over.contains("cudaMemcpy") && over.contains("train (pid 4242)") && over.contains("against 10.00 ms"),
        "{over}"
    );
    assert!(c.details.iter().any(|d| d.contains("does not map processes to GPUs")), "{:?}", c.details);
    // stats: the link per GPU
    let s = compute_stats(store.as_ref(), &StatsRequest::default()).unwrap();
    let l = &s.gpus[0].link;
    assert_eq!(
        (l.pcie_link_gen_max, l.pcie_link_gen_busy_min, l.busy_samples, l.pcie_degraded_busy_samples),
        (5, 1, 31, 10)
    );
    assert_eq!(l.pcie_degraded_busy_ns, 1_000 * MS);
}

#[test]
fn a_link_lowered_by_an_idle_gpu_is_not_named() {
    // the same copies, NVML saying the GPU did nothing (an idle GPU lowers its link on purpose)
    let (_d, store, e) = explained(copies(0, true));
    assert!(
        named(&e, ChainKind::DegradedLink).is_empty(),
        "{:?}",
        e.chains.iter().map(|c| &c.summary).collect::<Vec<_>>()
    );
    let s = compute_stats(store.as_ref(), &StatsRequest::default()).unwrap();
    let l = &s.gpus[0].link;
    assert_eq!((l.busy_samples, l.pcie_degraded_busy_samples, l.pcie_link_gen_busy_min), (0, 0, -1));
}

#[test]
fn a_busy_link_below_its_maximum_all_along_is_named_without_a_comparison() {
    let (_d, store, e) = explained(copies(97, true));
    let c = the_chain(store.as_ref(), &e, "pcie_link_degraded");
    // 64 MiB in 10 ms is more than half of what gen 1 x16 carries: those copies were the link's
    assert_eq!((c.severity, c.calls, c.evidence.value), (Severity::High, 60, 31));
    assert!(c.details[0].contains("none of them ran without it to compare"), "{}", c.details[0]);
}

/// Two ranks, 100 all-reduces 30 ms apart (2 ms each, `slow_ms` from step 40 to 59); GPU 0's
/// NVLink errors rise by 5 a sample from 1.2 s to 1.8 s.
fn all_reduces(slow_ms: i64) -> Trace {
    let mut t = Trace { names: vec![(100, "rank0".into()), (200, "rank1".into())], ..Default::default() };
    for step in 0..100 {
        let entry = T0 + step * 30 * MS;
        let took = if (40..60).contains(&step) { slow_ms * MS } else { 2 * MS };
        t.allreduce_step(100, 0, step, entry, entry + took);
        t.allreduce_step(200, 1, step, entry + 100_000, entry + took);
    }
    for k in 0..31 {
        let at = k * 100 * MS;
        let errors = 5 * (at.clamp(1_200 * MS, 1_800 * MS) - 1_200 * MS) / (100 * MS);
        t.gpu_samples.push(sample(at, 0, 97, 5, errors));
        t.gpu_samples.push(sample(at, 1, 97, 5, 0));
    }
    t
}

#[test]
fn nvlink_errors_during_slow_all_reduces_name_the_gpu_and_the_collectives() {
    let (_d, store, e) = explained(all_reduces(20));
    let c = the_chain(store.as_ref(), &e, "nvlink_errors");
    assert_eq!((c.kind, c.op.as_str(), c.severity), (ChainKind::DegradedLink, "NVLink", Severity::High));
    assert!(c.summary.starts_with("GPU 0's NVLink counted"), "{}", c.summary);
    assert!(c.summary.contains("40 ncclAllReduce ran: median 19.90 ms against 1.90 ms"), "{}", c.summary);
    // the errors: 5 a sample over 6 samples, of which the collectives saw those of their steps;
    // crc + replay (the replays half the CRC count)
    assert_eq!(c.evidence.value, 45, "{}", c.evidence.sql);
    assert!(c.calls >= 30, "both ranks' slow all-reduces: {}", c.calls);
    assert!(named(&e, ChainKind::DegradedLink).iter().all(|c| !c.key.contains("gpu:1")), "GPU 1 counted no error");
    let s = compute_stats(store.as_ref(), &StatsRequest::default()).unwrap();
    assert_eq!((s.gpus[0].link.nvlink_errors, s.gpus[1].link.nvlink_errors), (45, 0));
}

#[test]
fn nvlink_errors_during_all_reduces_that_were_no_slower_name_nothing() {
    let (_d, _store, e) = explained(all_reduces(2));
    assert!(named(&e, ChainKind::DegradedLink).is_empty(), "{:?}", named(&e, ChainKind::DegradedLink));
}

#[test]
fn the_link_rules_sql_picks_the_rows_the_rust_picks() {
    let mut t = copies(97, false);
    let odd = [(0, 0, 1), (9, 99_999, 1), (10, 0, 2), (0, 100_000, 3), (50, 0, -1), (0, 50_000, 4)];
    for (i, (util, kbps, gen)) in odd.into_iter().enumerate() {
        let mut s = sample(3_500 * MS + i as i64 * MS, 0, util, gen, -1);
        (s.pcie_tx_kbps, s.pcie_rx_kbps) = (kbps / 2, kbps - kbps / 2);
        t.gpu_samples.push(s);
    }
    let samples = t.gpu_samples.clone();
    let (_d, store, _) = explained(t);
    let rust = samples.iter().filter(|s| is_busy(s)).count() as i64;
    assert_eq!(value(store.as_ref(), &format!("SELECT count(*) FROM gpu_samples WHERE {}", busy_sql())), rust);
    let rust = samples.iter().filter(|s| s.pcie_degraded()).count() as i64;
    assert_eq!(value(store.as_ref(), &format!("SELECT count(*) FROM gpu_samples WHERE {}", degraded_sql())), rust);
}

/// pid 4242 (traced) allocates 16 MiB every 100 ms for 4 s, freeing them (`leaks`: every other
/// one kept) and exits at 4 s; NVML lists it every 100 ms until 7 s, its memory what it holds
/// (`left`: its context still listed, gone from /proc, after the exit); pid 999 (not traced) is
/// listed gone all along when `untraced_gone`.
fn memory(leaks: bool, left: bool, untraced_gone: bool) -> Trace {
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    let mut held = 300 * MIB;
    for k in 0..40i64 {
        let at = T0 + k * 100 * MS;
        let ptr = 0x7f00_0000_0000 + k * 0x100_0000;
        let e = t.call(4242, 4242, op::CUDA_MALLOC, at, 50_000);
        (e.arg0, e.arg2) = (16 * MIB, ptr);
        held += 16 * MIB;
        if !leaks || k % 2 == 1 {
            t.call(4242, 4242, op::CUDA_FREE, at + MS, 20_000).arg2 = ptr;
            held -= 16 * MIB;
        }
        t.gpu_processes.push(GpuProcessMemory {
            ts_ns: at + 2 * MS,
            gpu: 0,
            pid: 4242,
            used_bytes: held,
            contexts: 1,
            alive: 1,
        });
    }
    t.call(4242, 4242, op::PROCESS_EXIT, T0 + 4_000 * MS, 0);
    for k in 0..71i64 {
        let at = T0 + k * 100 * MS + 2 * MS;
        t.gpu_samples.push(sample(at - T0, 0, 97, 5, -1));
        if left && k > 40 {
            t.gpu_processes.push(GpuProcessMemory {
                ts_ns: at,
                gpu: 0,
                pid: 4242,
                used_bytes: held,
                contexts: 1,
                alive: 0,
            });
        }
        if untraced_gone {
            t.gpu_processes.push(GpuProcessMemory {
                ts_ns: at,
                gpu: 0,
                pid: 999,
                used_bytes: GIB,
                contexts: 1,
                alive: 0,
            });
        }
    }
    t
}

#[test]
fn a_context_left_behind_after_its_process_exited_names_the_gpu_pid_bytes_and_how_long() {
    let (_d, store, e) = explained(memory(false, true, true));
    let c = of_pid(store.as_ref(), &e, "memory_left_behind", Some(4242));
    assert_eq!((c.kind, c.evidence.value), (ChainKind::GpuMemory, 300 * MIB));
    assert_eq!(
        c.summary,
        "GPU 0 still held 300.0 MiB for pid 4242 (train) 3.002 s after it exited (exited with code 0), still at the trace's last sample"
    );
    let untraced = [of_pid(store.as_ref(), &e, "memory_left_behind", Some(999))];
    assert!(
        untraced[0]
            .summary
            .starts_with("GPU 0 held 1.0 GiB for pid 999, a process that was gone (/proc/999 absent), for 7.000 s"),
        "{}",
        untraced[0].summary
    );
    assert!(untraced[0].details.iter().any(|d| d.contains("was not traced")), "{:?}", untraced[0].details);
    // stats: each process's peak per GPU, and how many samples found it gone
    let s = compute_stats(store.as_ref(), &StatsRequest::default()).unwrap();
    let m: Vec<(u32, i64, u64)> = s.gpu_memory.iter().map(|m| (m.pid, m.peak_bytes, m.gone_samples)).collect();
    assert_eq!(m, [(999, GIB, 71), (4242, 300 * MIB, 30)]);
}

#[test]
fn memory_that_kept_rising_names_its_allocations_never_freed() {
    let (_d, store, e) = explained(memory(true, false, false));
    let c = the_chain(store.as_ref(), &e, "memory_growth");
    assert_eq!((c.pid, c.severity, c.calls), (4242, Severity::Medium, 20));
    assert!(
        c.summary.starts_with("GPU 0: pid 4242 (train)'s memory rose from 316.0 MiB to 620.0 MiB over 3.900 s"),
        "{}",
        c.summary
    );
    // the allocations left behind: the first detail, whole
    assert!(
        c.details[0].ends_with("20 of its allocations in the trace (320.0 MiB) were never freed, the largest 16.0 MiB"),
        "{:?}",
        c.details
    );
    assert_eq!(c.evidence.event_ids.len(), 5, "the largest unfreed allocations, whose stacks explain shows");
    assert!(named(&e, ChainKind::GpuMemory).iter().all(|c| c.cause != "memory_left_behind"));
}

#[test]
fn a_clean_run_names_neither() {
    let (_d, _store, e) = explained(memory(false, false, false));
    assert!(named(&e, ChainKind::GpuMemory).is_empty(), "{:?}", named(&e, ChainKind::GpuMemory));
}

#[test]
fn a_busy_degraded_link_whose_copies_were_not_slow_is_not_named() {
    // 4 KiB read back every 50 ms in 100 us (41 MB/s: far below what gen 1 x16 carries), none slow
    let mut t = Trace { names: vec![(4242, "train".into())], ..Default::default() };
    for k in 0..60 {
        t.call(4242, 4242, op::CUDA_MEMCPY, T0 + k * 50 * MS, 100_000).arg0 = 4096;
    }
    for k in 0..31 {
        t.gpu_samples.push(sample(k * 100 * MS, 0, 97, 1, -1));
    }
    let (_d, store, e) = explained(t);
    assert!(named(&e, ChainKind::DegradedLink).is_empty(), "{:?}", named(&e, ChainKind::DegradedLink));
    let s = compute_stats(store.as_ref(), &StatsRequest::default()).unwrap();
    assert_eq!(s.gpus[0].link.pcie_degraded_busy_samples, 31, "the link itself was below its maximum");
}
