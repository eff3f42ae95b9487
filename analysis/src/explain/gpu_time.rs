//! The explain stage for slow calls whose time is the GPU's: a slow synchronizing call (or graph
//! launch) whose remaining time after the host causes overlapped a throttled GPU is a
//! `gpu_throttled` chain that names the throttle reason and the clock drop (from the NVML samples);
//! and when GPU time is most of the slow-call time ([`crate::severity::GPU_BOUND`]), the GPU-time
//! chains that say so (the largest, and every throttled one) are graded like a cause (at most MEDIUM
//! unless a throttle says why the GPU was slower), so the first line says the GPU itself was slower,
//! and small host causes are not MEDIUM on their own.

use causeway_model::codes::{gpu_role, op_by_name, GpuRole, OpCode, Source};
use causeway_model::time::fmt_ns;

use crate::attribution::{is_gpu_wait_op, Cause};
use crate::chains::{Chain, ChainKind, Group, Severity};
use crate::gpu_state::GpuState;
use crate::severity::{GPU_BOUND, SLOW_CALLS};

/// The chain's cause when its GPU time ran on a throttled GPU.
pub(super) const GPU_THROTTLED: &str = "gpu_throttled";

/// Causes whose time is the GPU's, not the host's, in a call that waits for the GPU.
fn is_gpu_time(cause: Cause) -> bool {
    matches!(cause, Cause::GpuWait | Cause::SpinGpuBusy | Cause::OnCpuOrGpu)
}

/// Ops whose slow time can be GPU time: synchronizations, synchronous copies, graph launches.
fn waits_for_gpu(op: OpCode) -> bool {
    is_gpu_wait_op(op) || (op.source == Source::CudaGraph.code() && gpu_role(op) == GpuRole::Launch)
}

/// The calls of a group whose GPU time ran on a throttled GPU, as the facts that say so, over
/// every call's span (the group keeps them when [`keeps_spans`] says so).
pub(super) fn throttle_of(
    gpu: &GpuState,
    op: OpCode,
    cause: Cause,
    group: &Group,
) -> Option<crate::gpu_state::ThrottleFacts> {
    if gpu.is_empty() || !is_gpu_time(cause) || !waits_for_gpu(op) {
        return None;
    }
    let facts = gpu.throttle_facts(&group.spans)?;
    // most of the calls' time on a throttled GPU
    let total: i64 = group.spans.iter().map(|(_, a, b)| b - a).sum();
    (facts.throttled_ns * 2 >= total).then_some(facts)
}

/// Whether the slow calls of `op` can be a throttled GPU's chain: their groups keep every call's
/// span for [`throttle_of`].
pub(super) fn keeps_spans(gpu: &GpuState, op: OpCode) -> bool {
    !gpu.is_empty() && waits_for_gpu(op)
}

/// Make `chain` (GPU time of slow calls) the throttled GPU's chain.
pub(super) fn name_throttle(chain: &mut Chain, facts: &crate::gpu_state::ThrottleFacts) {
    chain.cause = GPU_THROTTLED.into();
    chain.cause_text = "the GPU ran throttled (NVML clock event reasons): the same work took longer".into();
    // the headline: how much, how many calls, the share; the throttle's reason, clocks,
    // temperature and power are the first detail, whole
    let words = facts.words();
    let gpu = words.split_once(": ").map_or(words.as_str(), |(gpu, _)| gpu);
    chain.summary = format!(
        "{} slow {} calls: {} waiting for {gpu} ({:.1}% of slow-call time)",
        chain.calls,
        chain.op,
        fmt_ns(chain.stall_ns),
        chain.share * 100.0,
    );
    chain
        .details
        .splice(0..0, [format!("{words}; {} of the calls' time overlapped the throttle", fmt_ns(facts.throttled_ns))]);
    chain.details.push(format!("the throttled GPU samples: {}", facts.sql()));
    chain.recommendations = vec![
        "The GPU slowed itself down: check its cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER), the power limit (nvidia-smi -pl), and the node's other GPUs for the same reasons".into(),
        "A host-side fix will not help these calls: their time is the GPU's".into(),
    ];
}

/// The GPU-bound rule over every chain, given all slow-call time in scope.
pub(super) fn grade(chains: &mut [Chain], slow_time_ns: i64) {
    if slow_time_ns <= 0 {
        return;
    }
    let gpu_chain = |c: &Chain| {
        c.kind == ChainKind::SlowCalls
            && (c.cause == GPU_THROTTLED
                || c.cause == Cause::GpuWait.as_str()
                || c.cause == Cause::SpinGpuBusy.as_str()
                || (c.cause == Cause::OnCpuOrGpu.as_str() && op_by_name(&c.op).is_some_and(is_gpu_wait_op)))
    };
    let gpu_ns: i64 = chains.iter().filter(|c| gpu_chain(c)).map(|c| c.stall_ns).sum();
    let gpu_share = gpu_ns as f64 / slow_time_ns as f64;
    if !GPU_BOUND.gpu_bound(gpu_share) {
        return;
    }
    let note = format!(
        "{:.1}% of slow-call time is GPU time ({}): the GPU, not the host, is where the time went",
        gpu_share * 100.0,
        fmt_ns(gpu_ns)
    );
    // the headline: the largest GPU-time chain (every throttled one is a finding of its own)
    let headline =
        chains.iter().enumerate().filter(|(_, c)| gpu_chain(c)).max_by_key(|(_, c)| c.stall_ns).map(|(i, _)| i);
    for (i, c) in chains.iter_mut().enumerate() {
        if gpu_chain(c) && (Some(i) == headline || c.cause == GPU_THROTTLED) {
            // why the GPU was slower is known only from a throttle: without one, at most MEDIUM
            let graded = SLOW_CALLS.grade(c.share, c.stall_ns);
            c.severity = if c.cause == GPU_THROTTLED { graded } else { graded.max(Severity::Medium) };
            c.details.push(note.clone());
        } else if c.kind == ChainKind::SlowCalls
            && c.severity == Severity::Medium
            && c.share < GPU_BOUND.host_medium_pct as f64 / 100.0
        {
            c.severity = Severity::Low;
            c.details.push(format!("{note}; this host cause explains {:.1}% of it: LOW", c.share * 100.0));
        }
    }
}
