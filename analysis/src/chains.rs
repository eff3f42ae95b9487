//! Causal chains: the attributed time of many calls (or gaps) aggregated per (op, cause, culprit),
//! with severity, a timeline of the worst cases, recommendations that follow from the cause, and
//! evidence (event ids and a SQL query that reproduces the headline figure).
//!
//! Severity: the rules are named thresholds in [`crate::severity`] (`share` is the chain's
//! fraction of all slow-call time for slow-call chains, of the thread's GPU-feeding span for gap,
//! sync and allocator chains, of the launch span for a throughput drop). "No host cause" (on-CPU or
//! GPU), GPU waits, preemptions of spinning waits while the GPU was still busy (`spin_gpu_busy`),
//! "no scheduler data" chains, and unfreed memory are always LOW.
//!
//! Ranking: a throughput drop is a symptom, never a cause: it comes after every HIGH or MEDIUM chain
//! that names a cause and before the LOW ones, whatever its own severity. Otherwise severity first;
//! within a severity a straggler chain comes first (the other ranks' waits are its effect, and its
//! own thread's causes are in it); then stall time, then the stable key. Ids are `c1`, `c2`, ... in that order
//! (stable for the same DB and request); `key` names the chain independently of rank.

use std::collections::{BTreeMap, BTreeSet};

use causeway_model::time::fmt_ns;
use causeway_store::EventId;

use crate::attribution::{Cause, Culprit, Part};
use crate::evidence::CulpritKey;

/// How bad a chain is (see the module doc for the thresholds).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    High,
    Medium,
    Low,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::High => "HIGH",
            Severity::Medium => "MEDIUM",
            Severity::Low => "LOW",
        }
    }
}

/// What kind of finding a chain is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChainKind {
    /// Slow calls of one op, one cause, one culprit.
    SlowCalls,
    /// Long gaps between the GPU calls of a feeding thread (host-side starvation).
    FeedingGap,
    /// The launch rate fell.
    ThroughputDrop,
    /// A synchronization after nearly every launch.
    SyncStorm,
    /// Allocation latency growing over the run.
    AllocatorLatency,
    /// Allocations never freed.
    AllocatorImbalance,
    /// Many cudaFree calls.
    FreeStorm,
    /// One rank reached a communicator's NCCL collectives late, again and again: the other ranks
    /// waited for it.
    Straggler,
    /// A call that had not returned when the trace ended: a hang outranks any slowness.
    Hang,
    /// A process's CUDA calls failed (an error and its story): ranked with the hangs.
    CudaError,
    /// The GPU reported an Xid error: ranked with the hangs and errors.
    GpuFault,
    /// Copies or collectives ran over a GPU link that was not whole: a PCIe link below its
    /// maximum generation or width while the GPU was busy, NVLink errors rising.
    DegradedLink,
    /// A GPU's memory held by a context whose process is gone, or a process's memory that kept
    /// rising (NVML's per-process memory).
    GpuMemory,
}

/// One step of a chain's timeline, with real timestamps.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TimelineStep {
    pub ts_ns: i64,
    pub dur_ns: i64,
    /// `CUDA`, `DRIVER`, `HOST`, `IO`.
    pub layer: String,
    pub what: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<EventId>,
}

/// How to check a chain's headline figure.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Evidence {
    /// The worst calls (or the events bounding the worst gaps), worst first.
    pub event_ids: Vec<EventId>,
    /// Read-only SQL over this DB; returns one row with the column `value`.
    pub sql: String,
    /// What the SQL returns: the headline figure.
    pub value: i64,
    /// Unit of `value`: `ns` or `bytes`.
    pub unit: String,
}

/// One causal chain.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Chain {
    /// `c1`, `c2`, ... in rank order.
    pub id: String,
    /// Stable name of the chain: kind/op/cause/culprit.
    pub key: String,
    pub severity: Severity,
    pub kind: ChainKind,
    pub op: String,
    /// An attribution cause (`preempted`, `sleep`, `host_compute`, ...) or a detector's finding
    /// (`launch_rate_drop`, `sync_after_launch`, `allocation_latency_growth`, `unfreed_allocations`, `free_storm`).
    pub cause: String,
    pub cause_text: String,
    pub culprit: Option<Culprit>,
    /// The process (and thread) concerned.
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// Slow calls (or gaps, syncs, allocations) this chain covers.
    pub calls: u64,
    /// Time explained, ns.
    pub stall_ns: i64,
    /// Fraction of `share_of`.
    pub share: f64,
    pub share_of: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op_p50_ns: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op_p99_ns: Option<i64>,
    /// What, who, how much, the share: the headline without its severity ([`Chain::headline`],
    /// at most [`HEADLINE_MAX`] characters with it).
    pub summary: String,
    /// Further facts, whole: the caveats and bounds of the headline's figure (what a spinning
    /// wait's preemption can have delayed, the kernels), block requests, page allocations, what
    /// the DB lacks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// For off-CPU causes: on which CPUs the time was lost, most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<CpuTime>,
    /// For slow kernel launches: which kernels they launched, most of this chain's time first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<crate::kernels::ChainKernel>,
    pub timeline: Vec<TimelineStep>,
    /// The call stacks behind the chain's worst calls (traces recorded with stacks), most calls
    /// first, with the user's own Python line where the stack has Python frames.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<crate::stacks::StackShare>,
    pub recommendations: Vec<String>,
    pub evidence: Evidence,
    /// With the device's own timeline: how much of `stall_ns` fell while the GPU sat idle (what
    /// it can have cost the GPU); `None` without a device timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_idle_ns: Option<i64>,
    /// What it cost in GPU time (and money once priced): measured from `gpu_idle_ns`, else
    /// estimated from its headline figure ([`crate::cost`]); `None` when that figure is no time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::GpuCost>,
}

impl Chain {
    /// The chain's one headline, what explain, the report, the Perfetto export and MCP show:
    /// `HIGH 14 slow cudaStreamSync calls of pid 1833 (train): 62.09 ms preempted by backup-rsync
    /// (pid 1829) on CPU 0 (35.2% of slow-call time)`, at most [`HEADLINE_MAX`] characters.
    pub fn headline(&self) -> String {
        format!("{} {}", self.severity.as_str(), self.summary)
    }

    /// One line naming the chain: `c1 HIGH cudaStreamSynchronize: preempted ... (culprit: hog (pid
    /// 9, tid 9))`, what a picture or a timeline track is titled.
    pub fn title(&self) -> String {
        let culprit = match &self.culprit {
            Some(_) => format!(" (culprit: {})", culprit_words(&self.culprit)),
            None => String::new(),
        };
        format!("{} {} {}: {}{culprit}", self.id, self.severity.as_str(), self.op, self.cause_text)
    }
}

/// Time a chain lost on one CPU.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct CpuTime {
    pub cpu: i32,
    pub ns: i64,
}

/// The CPUs of a group, most time first (unknown CPUs, -1, left out).
pub fn cpu_times(cpus: &BTreeMap<i32, i64>) -> Vec<CpuTime> {
    let mut v: Vec<CpuTime> = cpus.iter().filter(|(c, _)| **c >= 0).map(|(&cpu, &ns)| CpuTime { cpu, ns }).collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.cpu.cmp(&b.cpu)));
    v
}

/// Severity of an attributed chain (slow calls or gaps): LOW without a host cause, else by
/// [`crate::severity::SLOW_CALLS`] or [`crate::severity::FEEDING_GAPS`].
pub fn attributed_severity(kind: ChainKind, cause: Cause, share: f64, stall_ns: i64) -> Severity {
    if !cause.is_host_cause() {
        return Severity::Low;
    }
    match kind {
        ChainKind::FeedingGap => crate::severity::FEEDING_GAPS.grade(share, stall_ns),
        _ => crate::severity::SLOW_CALLS.grade(share, stall_ns),
    }
}

/// Accumulates attributed parts into chains for one subject (an op's slow calls, a thread's gaps).
/// What it keeps per group is bounded, whatever the number of intervals added (each group's worst
/// [`WORST_KEPT`], its per-CPU and per-kernel sums), unless it keeps every interval's span
/// ([`ChainAccumulator::keeping_spans`]).
#[derive(Debug, Default)]
pub struct ChainAccumulator {
    groups: BTreeMap<(Cause, CulpritKey), Group>,
    keep_spans: bool,
    device_idle: Option<std::sync::Arc<Vec<(i64, i64)>>>,
}

/// The worst intervals a group keeps: a chain shows five, and the stacks of 64.
pub const WORST_KEPT: usize = 64;

/// One (cause, culprit) group under way.
#[derive(Debug, Default)]
pub struct Group {
    pub stall_ns: i64,
    /// Calls or gaps with time in this group.
    pub count: u64,
    /// The worst of them, most of this cause's ns first, then by id, at most [`WORST_KEPT`]:
    /// (ns of this cause, the interval's id, interval start, interval duration).
    pub worst: Vec<(i64, EventId, i64, i64)>,
    pub cpus: BTreeMap<i32, i64>,
    /// The worst parts, for the timeline: (ns, part).
    pub worst_parts: Vec<(i64, Part)>,
    /// The kernels of the slow launches in the group: per kernel, (calls, ns of this cause).
    pub kernels: BTreeMap<String, (u64, i64)>,
    /// Every interval's (pid, start, end), when the accumulator keeps them.
    pub spans: Vec<(u32, i64, i64)>,
    /// With the device's idle intervals: the parts' time that fell inside them.
    pub gpu_idle_ns: Option<i64>,
}

fn sort_worst(worst: &mut Vec<(i64, EventId, i64, i64)>) {
    worst.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    worst.truncate(WORST_KEPT);
}

/// The culprit key of a part, as the evidence SQL groups it.
pub fn culprit_key(part: &Part) -> CulpritKey {
    match (&part.culprit, part.cause) {
        (Some((p, t, c)), Cause::Preempted) => CulpritKey::TookCpu(*p, *t, c.clone()),
        (None, Cause::Preempted) => CulpritKey::TookCpu(0, 0, String::new()),
        (_, Cause::NetworkWait) => CulpritKey::Peer(part.peer),
        // Who ends a D-state wait is the I/O completion path, not a cause: I/O waits are one group,
        // whose culprit is the process keeping the device busy (found from the block requests).
        (_, Cause::Uninterruptible) => CulpritKey::None,
        (Some((p, t, _)), Cause::Sleep | Cause::StoppedOrOther) => CulpritKey::Woke(*p, *t),
        (None, Cause::Sleep | Cause::StoppedOrOther) => CulpritKey::Woke(0, 0),
        _ => CulpritKey::None,
    }
}

impl ChainAccumulator {
    /// An accumulator whose groups keep every interval's span (what the throttle of a GPU-time
    /// group is measured over): memory that grows with the intervals added.
    pub fn keeping_spans() -> ChainAccumulator {
        ChainAccumulator { keep_spans: true, ..Default::default() }
    }

    /// Also measure each part against the device's idle intervals (sorted, disjoint), when the
    /// trace has a device timeline: what a group's time can have cost the GPU.
    pub fn measuring_device_idle(mut self, idle: Option<std::sync::Arc<Vec<(i64, i64)>>>) -> ChainAccumulator {
        self.device_idle = idle;
        self
    }

    /// Add the parts of one interval of process `pid` (`id` names it: the call, or the call
    /// ending a gap), and the kernel it ran when it is a launch.
    #[allow(clippy::too_many_arguments)]
    pub fn add(&mut self, id: &EventId, pid: u32, start: i64, dur: i64, parts: &[Part], kernel: Option<&str>) {
        let mut per_group: BTreeMap<(Cause, CulpritKey), i64> = BTreeMap::new();
        for p in parts {
            let key = (p.cause, culprit_key(p));
            *per_group.entry(key.clone()).or_default() += p.ns;
            let g = self.groups.entry(key).or_default();
            g.stall_ns += p.ns;
            if let Some(idle) = &self.device_idle {
                // a remainder's span is its whole interval: it cannot have cost more than its ns
                *g.gpu_idle_ns.get_or_insert(0) += crate::device_idle::overlap_with(idle, p.start, p.end).min(p.ns);
            }
            if p.cpu >= 0 {
                *g.cpus.entry(p.cpu).or_default() += p.ns;
            }
            g.worst_parts.push((p.ns, p.clone()));
            if g.worst_parts.len() > 64 {
                g.worst_parts.sort_by_key(|p| std::cmp::Reverse(p.0));
                g.worst_parts.truncate(16);
            }
        }
        for (key, ns) in per_group {
            let g = self.groups.get_mut(&key).expect("group exists");
            g.count += 1;
            g.worst.push((ns, id.clone(), start, dur));
            if g.worst.len() >= 2 * WORST_KEPT {
                sort_worst(&mut g.worst);
            }
            if let Some(k) = kernel {
                match g.kernels.get_mut(k) {
                    Some(e) => *e = (e.0 + 1, e.1 + ns),
                    None => {
                        g.kernels.insert(k.to_owned(), (1, ns));
                    }
                }
            }
            if self.keep_spans {
                g.spans.push((pid, start, start.saturating_add(dur)));
            }
        }
    }

    /// The ids of every group's worst intervals (those its chain will show).
    pub fn worst_ids(&mut self) -> BTreeSet<EventId> {
        let mut ids = BTreeSet::new();
        for g in self.groups.values_mut() {
            sort_worst(&mut g.worst);
            ids.extend(g.worst.iter().map(|w| w.1.clone()));
        }
        ids
    }

    pub fn into_groups(self) -> impl Iterator<Item = ((Cause, CulpritKey), Group)> {
        self.groups.into_iter().map(|(k, mut g)| {
            sort_worst(&mut g.worst);
            g.worst_parts.sort_by_key(|p| std::cmp::Reverse(p.0));
            g.worst_parts.truncate(8);
            (k, g)
        })
    }
}

/// The culprit of a group, with its name (a task's, or a network peer's label from `peer_of`).
pub fn culprit_of(
    key: &CulpritKey,
    name_of: &dyn Fn(u32, u32) -> String,
    peer_of: &dyn Fn(i64) -> String,
) -> Option<Culprit> {
    match key {
        CulpritKey::TookCpu(0, 0, _) | CulpritKey::Woke(0, 0) | CulpritKey::None | CulpritKey::Peer(0) => None,
        CulpritKey::Peer(k) => {
            Some(Culprit { pid: 0, tid: 0, comm: peer_of(*k), role: "network_peer".into(), place: String::new() })
        }
        CulpritKey::TookCpu(p, t, c) => {
            let comm = if c.is_empty() { name_of(*p, *t) } else { c.clone() };
            Some(Culprit { pid: *p, tid: *t, comm, role: "took_cpu".into(), place: String::new() })
        }
        CulpritKey::Woke(p, t) => {
            Some(Culprit { pid: *p, tid: *t, comm: name_of(*p, *t), role: "woke_thread".into(), place: String::new() })
        }
    }
}

/// Stable key text of a chain.
pub fn chain_key(kind: ChainKind, op: &str, cause: Cause, culprit: &CulpritKey) -> String {
    let who = match culprit {
        CulpritKey::None => "-".to_string(),
        CulpritKey::TookCpu(p, t, c) => format!("{p}:{t}:{c}"),
        CulpritKey::Woke(p, t) => format!("woke:{p}:{t}"),
        CulpritKey::Peer(k) => format!("peer:{k}"),
    };
    let kind = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    format!("{kind}/{op}/{}/{who}", cause.as_str())
}

/// The cause of a hang chain naming the rank that never entered the collective the others waited in.
pub(crate) const RANK_NEVER_ARRIVED: &str = "rank_never_arrived";

/// Sort chains by severity, stall, key; number them `c1`, `c2`, ...
pub fn rank(chains: &mut [Chain]) {
    // A throughput drop is a symptom: the chains that name a cause (HIGH or MEDIUM) come first.
    // A hang is what the trace is about when there is one: it comes before any slowness.
    let group = |c: &Chain| match (c.kind, c.severity) {
        // the rank that never arrived before the ranks it left waiting, and a GPU that failed
        // before the errors it caused
        (ChainKind::Hang, _) if c.cause == RANK_NEVER_ARRIVED => -2,
        (ChainKind::GpuFault, Severity::High) => -2,
        (ChainKind::Hang | ChainKind::CudaError | ChainKind::GpuFault, _) => -1,
        (ChainKind::ThroughputDrop, _) => 1,
        (_, Severity::Low) => 2,
        _ => 0,
    };
    chains.sort_by(|a, b| {
        group(a)
            .cmp(&group(b))
            .then(a.severity.cmp(&b.severity))
            .then((b.kind == ChainKind::Straggler).cmp(&(a.kind == ChainKind::Straggler)))
            .then(b.stall_ns.cmp(&a.stall_ns))
            .then(a.key.cmp(&b.key))
    });
    for (i, c) in chains.iter_mut().enumerate() {
        c.id = format!("c{}", i + 1);
        fit_headline(c);
    }
}

/// Who a culprit is, in words.
pub fn culprit_words(c: &Option<Culprit>) -> String {
    match c {
        Some(c) if c.role == "network_peer" => format!("peer {}", c.comm),
        Some(c) if c.comm.is_empty() && c.place.is_empty() => format!("pid {} tid {}", c.pid, c.tid),
        Some(c) if c.comm.is_empty() => format!("pid {} tid {} in {}", c.pid, c.tid, c.place),
        Some(c) if c.place.is_empty() => format!("{} (pid {}, tid {})", c.comm, c.pid, c.tid),
        Some(c) => format!("{} (pid {}, tid {}, in {})", c.comm, c.pid, c.tid, c.place),
        None => "-".into(),
    }
}

/// Recommendations that follow from a cause (and the op it slowed).
pub fn recommendations(kind: ChainKind, cause: Cause, op: &str, culprit: &Option<Culprit>, pid: u32) -> Vec<String> {
    let who = culprit_words(culprit);
    let same_process = culprit.as_ref().is_some_and(|c| c.pid == pid);
    let mut r = Vec::new();
    match cause {
        Cause::Preempted => {
            if let Some(c) = culprit {
                if same_process {
                    r.push(format!("{who} is a thread of the same process competing for the CPU: cap intra-op threads (torch.set_num_threads, OMP_NUM_THREADS) or the DataLoader num_workers below the free cores"));
                } else {
                    r.push(format!("Move {who} off the feeding thread's CPUs (taskset -cp / a cpuset cgroup) or lower its priority (renice +19 -p {}, or chrt --idle)", c.pid));
                }
            }
            r.push(format!("Pin the thread that calls {op} to a dedicated core (taskset, or isolcpus / a cpuset for the training job)"));
        }
        Cause::RunqueueWait => {
            r.push("The thread was woken but waited for a CPU: the CPUs are oversubscribed; keep runnable threads below the core count (torch.set_num_threads, OMP_NUM_THREADS, DataLoader num_workers)".into());
            r.push("Give the feeding thread a dedicated core or a higher priority (taskset, renice -n -5)".into());
        }
        Cause::Sleep => {
            if culprit.is_some() {
                r.push(format!("The thread slept until {who} woke it: if that is a DataLoader worker, raise num_workers and prefetch_factor, use persistent_workers=True and pin_memory=True, and profile the dataset's __getitem__"));
            } else {
                r.push("Find what the thread waited on: `causeway timeline --around EVENT_ID` on the listed events".into());
            }
        }
        Cause::NetworkWait => {
            let peer = if culprit.is_some() { who.clone() } else { "its peer".to_string() };
            r.push(format!("The thread waited on {peer} inside socket calls: check that end's latency (its load, its distance, TCP retransmits: `causeway stats` lists them per peer) and fetch ahead of use (a background thread or a prefetching DataLoader) so the wait overlaps GPU work"));
        }
        Cause::Uninterruptible => {
            r.push("Uninterruptible waits are block I/O or page faults: move the dataset to local NVMe or page cache (warm it), avoid swap, read with larger requests".into());
        }
        Cause::StoppedOrOther => r.push("The thread was stopped or traced: check for debuggers, SIGSTOP, or cgroup freezing".into()),
        Cause::OffCpuUnrecorded => {
            r.push("This DB records off-CPU intervals but not who took the CPU nor why: re-record with `causeway trace` to name the culprit".into());
            r.push(format!("Meanwhile pin the thread that calls {op} to a dedicated core (taskset) and renice background jobs"));
        }
        Cause::PageAllocPressure => {
            r.push("The process allocated many pages during the call: allocate pinned host buffers once and reuse them (pin_memory=True, cudaHostAlloc), avoid fresh tensors per batch".into());
            r.push("Check host memory pressure (free memory, THP compaction, swap)".into());
        }
        Cause::OnCpuOrGpu => {
            let o = op.to_ascii_lowercase();
            if o.contains("sync") {
                r.push("The wait was the GPU finishing queued work, not the host: profile the kernels (Nsight Systems / Compute) or overlap with more work".into());
            } else if o.contains("memcpy") {
                r.push("Copies from pageable host memory are staged and slow: use pinned memory (pin_memory=True, cudaHostAlloc) with cudaMemcpyAsync on a non-default stream".into());
            } else if o.contains("alloc") || o.contains("free") {
                r.push("Avoid device allocation in the loop: let the caching allocator reuse blocks (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)".into());
            } else {
                r.push("No host-side cause: the time was spent inside the CUDA library or waiting on the GPU; profile the GPU side".into());
            }
        }
        Cause::HostCompute => {
            r.push("The feeding thread was busy on the CPU between GPU calls: move data loading and preprocessing off the training thread (DataLoader num_workers > 0, persistent_workers=True, pin_memory=True)".into());
            r.push("Profile the training loop's Python (py-spy dump / record on the feeding thread) and batch or vectorize the host work; CUDA graphs cut launch overhead".into());
        }
        Cause::NoSchedData => r.push("The DB holds no scheduler events for this thread at that time: re-record with `causeway trace` to attribute it".into()),
        Cause::GpuWait => r.push(format!("{op} slept until the GPU finished: the GPU work itself is long; profile the kernels (Nsight Systems) or overlap more host work before synchronizing")),
        Cause::SpinGpuBusy => {
            r.push(format!("{op} spun while the GPU was still busy: the GPU work set the pace, not the task that took the CPU; profile the kernels (Nsight Systems) or overlap more host work before synchronizing"));
            r.push("If other work needs that CPU, cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) (or CU_CTX_SCHED_BLOCKING_SYNC) makes the wait sleep instead of spin".into());
        }
    }
    if kind == ChainKind::FeedingGap && !matches!(cause, Cause::HostCompute) {
        r.push("The GPU had at most the work queued before each gap: deeper prefetching (prefetch_factor, CUDA streams) hides host stalls".into());
    }
    r
}

/// One-line summary of an attributed chain; `subject` names the thread or process ("tid 2233 (python3)").
#[allow(clippy::too_many_arguments)]
pub fn attributed_summary(
    kind: ChainKind,
    op: &str,
    subject: &str,
    pid: u32,
    cause: Cause,
    culprit: &Option<Culprit>,
    calls: u64,
    stall_ns: i64,
    share: f64,
    cpus: &BTreeMap<i32, i64>,
) -> String {
    let on_cpu = match cpus.iter().max_by_key(|(_, ns)| **ns) {
        Some((cpu, _)) if cause == Cause::Preempted => format!(" on CPU {cpu}"),
        _ => String::new(),
    };
    let who = culprit_short(culprit, pid);
    let what = match (cause, culprit) {
        (Cause::Preempted, Some(_)) => format!("preempted by {who}{on_cpu}"),
        (Cause::Uninterruptible, Some(c)) if c.role == "issued_io" => {
            format!("in D state while {who} kept the disk busy")
        }
        (Cause::NetworkWait, Some(_)) => format!("asleep in socket calls to {who}"),
        (Cause::Sleep, Some(_)) => format!("asleep until woken by {who}"),
        (Cause::Uninterruptible, Some(_)) => format!("in D state until woken by {who}"),
        _ => cause.short().to_string(),
    };
    match kind {
        ChainKind::FeedingGap => {
            format!(
                "{subject} made no GPU call in {calls} gaps: {} {what} ({:.1}% of its span)",
                fmt_ns(stall_ns),
                share * 100.0
            )
        }
        _ => format!(
            "{calls} slow {op} calls of {subject}: {} {what} ({:.1}% of slow-call time)",
            fmt_ns(stall_ns),
            share * 100.0
        ),
    }
}

/// Who a culprit is, as a headline names it: the process (`backup-rsync (pid 9912)`), or the
/// thread when it is one of the chain's own process's (`mockgpu-stream (tid 3535)`); the tid and
/// the container are in the chain's `culprit`.
pub fn culprit_short(c: &Option<Culprit>, pid: u32) -> String {
    match c {
        Some(c) if c.role == "network_peer" => format!("peer {}", c.comm),
        Some(c) if c.comm.is_empty() => format!("pid {} tid {}", c.pid, c.tid),
        Some(c) if c.pid == pid && c.tid != pid => format!("{} (tid {})", c.comm, c.tid),
        Some(c) => format!("{} (pid {})", c.comm, c.pid),
        None => "-".into(),
    }
}

/// The most characters a chain's headline ([`Chain::headline`]: its severity and summary) may
/// have, to be read in five seconds: what, who, how much, the share. Caveats and bounds are in the
/// chain's `details`, whole.
pub const HEADLINE_MAX: usize = 160;

/// Holds a chain's headline to [`HEADLINE_MAX`] (every chain passes here, in [`rank`]): a summary
/// too long keeps its leading "; " clauses that fit and moves the others, whole and in order, to
/// the front of `details`; a first clause that alone is too long is cut at a word with "…" and the
/// whole summary goes to `details`.
pub fn fit_headline(c: &mut Chain) {
    let room = HEADLINE_MAX - c.severity.as_str().len() - 1;
    if let Some((head, moved)) = split_to_fit(&c.summary, room) {
        c.summary = head;
        c.details.splice(0..0, moved);
    }
}

/// A text's "; " clauses, outside parentheses (a "; " inside "(...)" belongs to its clause).
fn clauses(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b';' if depth <= 0 && bytes.get(i + 1) == Some(&b' ') && i >= start => {
                out.push(&text[start..i]);
                start = i + 2;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// A text cut to `room` characters as [`fit_headline`] cuts a summary: the head and what moves to
/// the details; `None` when it fits.
pub fn split_to_fit(text: &str, room: usize) -> Option<(String, Vec<String>)> {
    let len = |s: &str| s.chars().count();
    if len(text) <= room {
        return None;
    }
    let clauses = clauses(text);
    let mut head = clauses[0].to_string();
    if len(&head) > room {
        let limit = head.char_indices().nth(room - 1).map_or(head.len(), |(i, _)| i);
        let cut = head[..limit].rfind(' ').filter(|&i| i > limit / 2).unwrap_or(limit);
        return Some((format!("{}…", head[..cut].trim_end_matches([',', ':', ' '])), vec![text.to_string()]));
    }
    let mut i = 1;
    while i < clauses.len() && len(&head) + 2 + len(clauses[i]) <= room {
        head.push_str("; ");
        head.push_str(clauses[i]);
        i += 1;
    }
    Some((head, clauses[i..].iter().map(|s| s.to_string()).collect()))
}

#[cfg(test)]
mod tests {
    use super::split_to_fit;

    #[test]
    fn a_long_summary_keeps_its_leading_clauses_and_moves_the_rest_whole() {
        let text = "GPU 0 reported Xid 79: GPU has fallen off the bus; the trace does not map processes to GPUs (trace with --gpu-timeline; every process is considered); pid 7 failed";
        let (head, moved) = split_to_fit(text, 60).unwrap();
        assert_eq!(head, "GPU 0 reported Xid 79: GPU has fallen off the bus");
        assert_eq!(
            moved,
            [
                "the trace does not map processes to GPUs (trace with --gpu-timeline; every process is considered)",
                "pid 7 failed"
            ]
        );
        assert!(split_to_fit(text, 400).is_none());
    }

    #[test]
    fn a_first_clause_too_long_is_cut_at_a_word_and_kept_whole_in_the_details() {
        let text = "one two three four five six seven eight nine ten; eleven";
        let (head, moved) = split_to_fit(text, 20).unwrap();
        assert_eq!(head, "one two three four…");
        assert!(head.chars().count() <= 20);
        assert_eq!(moved, [text]);
    }
}
