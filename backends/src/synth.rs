//! Synthetic traces for tests and benchmarks: a deterministic stream of events shaped like a
//! training process (four threads launching kernels, syncing and copying, with off-CPU intervals,
//! wake-ups and block I/O). Each thread has its own timeline: its calls and off-CPU intervals never
//! overlap, as in a real trace. Same seed, same events; timestamps are not globally ordered (as
//! they are not in a real ring buffer), so readers order by timestamp.

use causeway_model::codes::{op, PrevState};
use causeway_model::{Event, SchedDetail};

/// xorshift64*: small, fast, deterministic.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo).max(1) as u64) as i64
    }
}

/// An endless, time-ordered stream of synthetic events starting at `start_ns`.
pub struct SyntheticTrace {
    rng: Rng,
    /// Per thread (tid = pid + index): when it is next free.
    cursors: [i64; 4],
    pid: u32,
}

/// The benches' synthetic SQLite trace of `n` events (seed 42, sessions from a fixed instant),
/// kept in the temp dir and reused by every bench of that size; the second value says whether
/// it was written now (and how long that took).
pub fn synthetic_sqlite_trace(n: usize) -> crate::Result<(std::path::PathBuf, Option<std::time::Duration>)> {
    use crate::EngineWriter;
    let path = std::env::temp_dir().join(format!("causeway-bench-explain-{n}.db"));
    if path.exists() {
        // kept from an earlier run, perhaps of an older build: given what this build's finish
        // adds to a trace (indexes it lacks are built, once)
        let conn = rusqlite::Connection::open(&path)?;
        crate::sqlite::build_finished_structures_missing(&conn)?;
        return Ok((path, None));
    }
    let t = std::time::Instant::now();
    let tmp = path.with_extension("partial");
    let _ = std::fs::remove_file(&tmp);
    let session = causeway_model::SessionInfo {
        started_at_ns: 1_774_000_000_000_000_000,
        tool_version: "bench".into(),
        ..Default::default()
    };
    let mut w = crate::SqliteWriter::create(&tmp, &session)?;
    let mut gen = SyntheticTrace::new(42, session.started_at_ns);
    let mut left = n;
    while left > 0 {
        let batch = gen.take(left.min(200_000));
        left -= batch.len();
        w.write_batches([batch.as_slice()])?;
    }
    w.finish(gen.take(1)[0].ts_ns)?;
    std::fs::rename(&tmp, &path)?;
    Ok((path, Some(t.elapsed())))
}

/// How many events a bench works on: `CAUSEWAY_BENCH_EVENTS`, else 10,000,000.
pub fn bench_events() -> usize {
    std::env::var("CAUSEWAY_BENCH_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000)
}

/// The benches' trace of [`bench_events`] events ([`synthetic_sqlite_trace`]), opened read-only,
/// with how long writing it took (when it was written now), its events and its size printed.
pub fn open_bench_trace() -> (std::path::PathBuf, crate::SqliteStore) {
    use crate::TraceStore;
    let n = bench_events();
    let (path, written) = synthetic_sqlite_trace(n).expect("the synthetic trace");
    if let Some(t) = written {
        println!("wrote {n} events to {} in {:.1} s", path.display(), t.as_secs_f64());
    }
    let store = crate::SqliteStore::open(&path).expect("open the synthetic trace");
    let size_mib = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0;
    println!("trace: {} events, {size_mib:.1} MiB", store.info().events);
    (path, store)
}

impl SyntheticTrace {
    pub fn new(seed: u64, start_ns: i64) -> SyntheticTrace {
        SyntheticTrace { rng: Rng::new(seed), cursors: [start_ns; 4], pid: 4821 }
    }

    /// The next event. Mix: ~55% cudaLaunchKernel, ~12% cuLaunchKernel, ~8% syncs, ~5% copies,
    /// ~1% allocations, ~14% sched_switch (with scheduler detail), ~3% wake-ups, ~2% block I/O.
    pub fn next_event(&mut self) -> Event {
        let r = self.rng.range(0, 1000);
        // The thread that is free first acts next.
        let idx = (0..4).min_by_key(|&i| self.cursors[i]).unwrap_or(0);
        let start = self.cursors[idx] + self.rng.range(2_000, 20_000);
        let tid = self.pid + idx as u32;
        let mut e = Event {
            ts_ns: start,
            pid: self.pid,
            tid,
            cpu: self.rng.range(0, 8) as i32,
            comm: "python3".into(),
            ..Default::default()
        };
        let (code, dur) = match r {
            0..=549 => (op::CUDA_LAUNCH_KERNEL, self.rng.range(3_000, 12_000) + tail(&mut self.rng, 5_000_000)),
            550..=669 => (op::CU_LAUNCH_KERNEL, self.rng.range(2_000, 8_000)),
            670..=709 => (op::CUDA_STREAM_SYNC, self.rng.range(10_000, 2_000_000)),
            710..=749 => (op::CUDA_DEVICE_SYNC, self.rng.range(20_000, 5_000_000)),
            750..=799 => (op::CUDA_MEMCPY_ASYNC, self.rng.range(5_000, 400_000)),
            800..=809 => (op::CUDA_MALLOC, self.rng.range(100_000, 800_000)),
            810..=949 => (op::SCHED_SWITCH, self.rng.range(5_000, 200_000) + tail(&mut self.rng, 20_000_000)),
            950..=979 => (op::SCHED_WAKEUP, 0),
            _ => (op::BLOCK_READ, self.rng.range(50_000, 3_000_000)),
        };
        e.source = code.source;
        e.op = code.op;
        e.dur_ns = dur;
        // Calls occupy [start, start + dur]; an off-CPU interval is written at switch-in.
        self.cursors[idx] = match code {
            c if c == op::SCHED_SWITCH => {
                e.ts_ns = start + dur;
                start + dur
            }
            c if c == op::SCHED_WAKEUP || c == op::BLOCK_READ => start,
            _ => start + dur,
        };
        match code {
            c if c == op::SCHED_SWITCH => {
                e.arg1 = i64::from(self.pid);
                let preempted = self.rng.range(0, 3) == 0;
                e.sched = Some(SchedDetail {
                    prev_state: if preempted { PrevState::Preempted } else { PrevState::Sleeping },
                    next_pid: 9912,
                    next_tid: 9912,
                    next_comm: "backup-rsync".into(),
                    wake_ts_ns: if preempted { 0 } else { e.ts_ns - self.rng.range(1_000, dur.max(1_001)) },
                    waker_pid: if preempted { 0 } else { self.pid },
                    waker_tid: if preempted { 0 } else { self.pid + 1 },
                });
            }
            c if c == op::SCHED_WAKEUP => {
                e.arg1 = i64::from(self.pid);
                e.arg2 = i64::from(tid);
            }
            c if c == op::BLOCK_READ => {
                e.arg0 = 4096 * self.rng.range(1, 64);
                e.arg1 = (259 << 20) | 1;
            }
            c if c == op::CUDA_LAUNCH_KERNEL => e.arg0 = 0x7f00_0000_1000 + self.rng.range(0, 16) * 0x100,
            c if c == op::CUDA_MALLOC => e.arg0 = 1 << self.rng.range(20, 30),
            c if c == op::CUDA_MEMCPY_ASYNC => {
                e.arg0 = 1 << self.rng.range(12, 26);
                e.arg1 = 1;
            }
            _ => {}
        }
        e
    }

    /// The next `n` events.
    pub fn take(&mut self, n: usize) -> Vec<Event> {
        (0..n).map(|_| self.next_event()).collect()
    }
}

/// A long tail: one time in a hundred, an extra delay up to `max`.
fn tail(rng: &mut Rng, max: i64) -> i64 {
    if rng.range(0, 100) == 0 {
        rng.range(0, max)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_calls_and_off_cpu_intervals_never_overlap() {
        let mut events = SyntheticTrace::new(11, 0).take(20_000);
        events.sort_by_key(|e| e.ts_ns);
        let mut busy_until = std::collections::HashMap::new();
        for e in &events {
            let (start, end) =
                if op::SCHED_SWITCH.is(e.source, e.op) { (e.ts_ns - e.dur_ns, e.ts_ns) } else { (e.ts_ns, e.end_ns()) };
            if op::SCHED_WAKEUP.is(e.source, e.op) || e.source == causeway_model::codes::Source::Io.code() {
                continue;
            }
            let prev = busy_until.insert(e.tid, end).unwrap_or(i64::MIN);
            assert!(start >= prev, "tid {} overlaps: starts {start} before {prev}", e.tid);
        }
    }
}

/// A synthetic distributed training job, one rank at a time, for the fleet's tests and bench: every
/// rank runs `steps` steps of `period_ns`; each step it launches `launches_per_step` kernels, enters
/// an all-reduce on one communicator (rank `r` enters `r * 10 us` after the step starts, the
/// planted straggler `late_ns` later on the planted sequence numbers), and synchronizes until the
/// collective completes (`transfer_ns` after the last rank entered). Timestamps are what the rank's
/// host clock reads: true time plus `skew_ns`.
#[derive(Debug, Clone)]
pub struct SyntheticJob {
    pub world: u32,
    pub steps: i64,
    pub period_ns: i64,
    pub start_ns: i64,
    pub comm_hash: i64,
    pub launches_per_step: u32,
    pub transfer_ns: i64,
    /// (rank, first seq, last seq, extra lateness ns).
    pub straggler: Option<(u32, i64, i64, i64)>,
}

/// One rank's share of a [`SyntheticJob`].
#[derive(Debug, Clone)]
pub struct SyntheticRank {
    pub events: Vec<Event>,
    pub nccl_calls: Vec<causeway_model::NcclCall>,
    pub rank: causeway_model::ProcessRank,
}

/// Every rank of a synthetic job runs as this pid on its own node (pids collide across hosts).
pub const SYNTHETIC_RANK_PID: u32 = 4242;

impl SyntheticJob {
    /// When rank `r` enters the collective of step `seq` (1-based), true time.
    pub fn entry_ns(&self, r: u32, seq: i64) -> i64 {
        let base = self.start_ns + (seq - 1) * self.period_ns;
        let late = match self.straggler {
            Some((sr, a, b, late)) if sr == r && (a..=b).contains(&seq) => late,
            _ => 0,
        };
        base + i64::from(r) * 10_000 + late
    }

    /// When the collective of step `seq` completes, true time.
    pub fn completion_ns(&self, seq: i64) -> i64 {
        (0..self.world).map(|r| self.entry_ns(r, seq)).max().unwrap_or(0) + self.transfer_ns
    }

    /// Rank `r`'s trace as its host (clock off by `skew_ns`) records it.
    pub fn rank(&self, r: u32, skew_ns: i64) -> SyntheticRank {
        let pid = SYNTHETIC_RANK_PID;
        let mut events = Vec::new();
        let mut nccl_calls = Vec::new();
        let ev = |ts: i64, dur: i64, code: causeway_model::codes::OpCode| Event {
            ts_ns: ts + skew_ns,
            dur_ns: dur,
            pid,
            tid: pid,
            cpu: 0,
            source: code.source,
            op: code.op,
            comm: "python3".into(),
            ..Default::default()
        };
        for seq in 1..=self.steps {
            let base = self.start_ns + (seq - 1) * self.period_ns;
            for k in 0..i64::from(self.launches_per_step) {
                let mut e = ev(base + 100_000 + k * 20_000, 5_000, op::CUDA_LAUNCH_KERNEL);
                e.arg0 = 0x7f00_0000_1000;
                events.push(e);
            }
            let enter = self.entry_ns(r, seq);
            let mut e = ev(enter, 20_000, op::NCCL_ALL_REDUCE);
            e.arg0 = 4 << 20;
            e.arg1 = 1 << 20;
            events.push(e);
            nccl_calls.push(causeway_model::NcclCall {
                pid,
                tid: pid,
                ts_ns: enter + skew_ns,
                op: op::NCCL_ALL_REDUCE.op,
                comm_hash: self.comm_hash,
                comm: 0x5500_0000,
                rank: r as i32,
                nranks: self.world as i32,
                seq,
                count: 1 << 20,
                datatype: 7,
                redop: 0,
                peer: -1,
                device: 0,
            });
            let sync_at = enter + 30_000;
            events.push(ev(sync_at, self.completion_ns(seq) - sync_at, op::CUDA_STREAM_SYNC));
        }
        let rank = causeway_model::ProcessRank {
            pid,
            rank: r as i32,
            local_rank: 0,
            world_size: self.world as i32,
            local_world_size: 1,
            launcher: "torch".into(),
            job: "synthetic".into(),
        };
        SyntheticRank { events, nccl_calls, rank }
    }
}

impl SyntheticJob {
    /// Write a native SQLite trace at `path` of `node` holding the given ranks (each with the skew
    /// of its host's clock and, when given, its own pid), with `lost` ring-buffer losses counted.
    pub fn write_node(
        &self,
        path: &std::path::Path,
        node: &str,
        ranks: &[(u32, i64, Option<u32>)],
        lost: u64,
    ) -> Result<(), crate::StoreError> {
        use crate::EventSink;
        let session = causeway_model::SessionInfo {
            started_at_ns: self.start_ns - 1_000_000,
            tool_version: "synthetic".into(),
            node: node.into(),
            hostname: node.into(),
            tracer_pid: 1,
            ..Default::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::StoreError::Engine(e.to_string()))?;
        rt.block_on(async move {
            let mut sink: Box<dyn EventSink> = Box::new(crate::SqliteSink::create(path, session)?);
            let mut last = self.start_ns;
            for &(r, skew, pid) in ranks {
                let mut t = self.rank(r, skew);
                if let Some(pid) = pid {
                    t.events.iter_mut().for_each(|e| (e.pid, e.tid) = (pid, pid));
                    t.nccl_calls.iter_mut().for_each(|c| (c.pid, c.tid) = (pid, pid));
                    t.rank.pid = pid;
                }
                t.events.sort_by_key(|e| e.ts_ns);
                last = last.max(t.events.iter().map(|e| e.ts_ns + e.dur_ns).max().unwrap_or(last));
                sink.write_process_ranks(vec![t.rank]).await?;
                for chunk in t.events.chunks(10_000) {
                    sink.write_batch(chunk.to_vec()).await?;
                }
                sink.write_nccl_calls(t.nccl_calls).await?;
            }
            if lost > 0 {
                sink.add_loss(1, causeway_model::LossKind::RingReserve, lost);
            }
            sink.finish(last + 1).await?;
            Ok(())
        })
    }
}
