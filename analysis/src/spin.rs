//! Spin-waits: whether a call that waits for the GPU waited on the CPU (spinning) or asleep, and
//! what a preemption inside a spinning wait can have cost.
//!
//! **The policy.** A CUDA context waits for the GPU according to its host scheduling policy, the
//! low three bits of the flags of `cudaSetDeviceFlags`, `cuCtxCreate`, `cuDevicePrimaryCtxSetFlags`
//! and `cuCtxSetFlags` ([`codes::sets_sched_flags`], flags in `arg0`): spin (1), yield (2),
//! blocking sync (4), or auto (0, the default), which spins while the process has no more active
//! contexts than the host has logical CPUs, and yields otherwise ([`SchedPolicy::spins`]).
//!
//! - The policy in force at a call is that of the process's latest flag-setting call that started
//!   before it (by timestamp, then id), over the whole trace whatever the window; none recorded:
//!   auto.
//! - Contexts: the process's `cuCtxCreate` calls that started before the call, at least 1 (the
//!   primary context the runtime uses is not created by `cuCtxCreate`).
//! - Host CPUs: the trace records no CPU count, so it is the number of distinct `cpu` values among
//!   the trace's `sched_switch` rows (a CPU on which no traced thread was ever switched is not
//!   counted: a lower bound, which makes auto spin less often, never more).
//! - What the trace saw beats what the flags say: a call during which its thread went to sleep
//!   voluntarily (a `sched_switch` row of state S overlapping it) did not spin, whatever the flags
//!   (the flags may have been set before the trace began, or by a call that was not traced).
//!
//! **The bound.** While a spinning thread is preempted, the GPU keeps working. The preemption
//! delays the call's return only if the GPU finished while the thread was off the CPU, and then by
//! at most that off-CPU interval; and then the thread returns as soon as it is switched back in,
//! so that interval is the call's last, ending within [`SPIN_RETURN_EPSILON_NS`] of the return.
//! So in a slow synchronizing call ([`GpuRole::Sync`], [`GpuRole::SyncCopy`]) that spun, only the
//! last preempted interval, and only when it ends within the epsilon of the return, stays
//! [`Cause::Preempted`] with its culprit: at most that much can have delayed the return. Every
//! other preempted piece overlapped GPU work and becomes [`Cause::SpinGpuBusy`] (the task that
//! took the CPU is kept on the part, for the text, but not blamed). Under yield and blocking sync
//! nothing changes: a sleep inside a sync is the GPU wait, the run-queue wait after the wake-up a
//! host cause.
//!
//! [`crate::evidence::spin_wait_cte`] computes the same per-call decision in SQL.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{self, op, GpuRole, OpCode, SchedPolicy};
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::PrevState;
use causeway_store::{EventFilter, EventId, QueryLimits, SlimEvent, TraceStore};

use crate::attribution::{Call, Cause, OffCpu, Part};
use crate::AnalysisError;

/// How soon after its last switch-in a spinning call returns when the GPU finished while it was off
/// the CPU: the runtime sees the completion at its next poll, then returns through the uretprobe
/// (microseconds). 200 us leaves room for a busy host; a preemption that ended earlier than this
/// before the return was followed by more waiting, so the GPU was still busy when it ended.
pub const SPIN_RETURN_EPSILON_NS: i64 = 200_000;

/// The ops whose `arg0` sets the scheduling policy, in code order.
pub fn sched_flag_ops() -> Vec<OpCode> {
    codes::OPS.iter().map(|e| OpCode::new(e.0, e.1)).filter(|&c| codes::sets_sched_flags(c)).collect()
}

/// How one call waited for the GPU, and why we think so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitMode {
    /// The policy in force (auto when no flags were recorded).
    pub policy: SchedPolicy,
    /// Whether a flag-setting call was recorded before the call.
    pub flags_recorded: bool,
    /// The process's contexts at the call (at least 1) and the host CPUs seen in the trace.
    pub contexts: usize,
    pub cpus: usize,
    /// The thread slept voluntarily during the call: it did not spin.
    pub slept: bool,
    /// The verdict: the thread spun on the CPU while it waited.
    pub spins: bool,
}

impl WaitMode {
    /// `auto -> spin`, `spin`, `auto -> yield`, `blocking_sync`, ...: the policy and what it came to.
    pub fn policy_words(&self) -> String {
        let came_to = match self.policy {
            SchedPolicy::Auto if self.policy.spins(self.cpus, self.contexts) => " -> spin",
            SchedPolicy::Auto => " -> yield",
            _ => "",
        };
        format!("{}{came_to}", self.policy.as_str())
    }

    /// Where the policy came from, in words.
    pub fn reason(&self) -> String {
        let flags = if self.flags_recorded {
            "set by the process's latest flag-setting call"
        } else {
            "no scheduling flags recorded: the default"
        };
        let mut s = format!("scheduling {} ({flags}", self.policy_words());
        if self.policy == SchedPolicy::Auto {
            s.push_str(&format!(
                "; {} context(s), {} CPU(s) seen in the trace's sched_switch rows",
                self.contexts, self.cpus
            ));
        }
        s.push(')');
        if self.slept {
            s.push_str(", but the thread slept inside the call: it blocked, it did not spin");
        }
        s
    }
}

/// The scheduling flags and context creations of the processes with slow waits, and the host's CPUs.
#[derive(Debug, Clone, Default)]
pub struct SchedPolicies {
    /// Per pid: `(ts, id, flags)` of each flag-setting call, sorted by (ts, id).
    flags: HashMap<u32, Vec<(i64, EventId, i64)>>,
    /// Per pid: start of each `cuCtxCreate`, sorted.
    contexts: HashMap<u32, Vec<i64>>,
    /// Distinct CPUs of the trace's `sched_switch` rows.
    pub cpus: usize,
}

impl SchedPolicies {
    /// Read the flag-setting calls of `pids` over the whole trace, and count the CPUs.
    pub fn load(store: &dyn TraceStore, pids: &BTreeSet<u32>) -> Result<SchedPolicies, AnalysisError> {
        let mut out = SchedPolicies::default();
        let filter = EventFilter { window: TimeWindow::ALL, ops: Some(sched_flag_ops()), ..Default::default() };
        let mut calls = Vec::new();
        store.scan_slim(&filter, &mut |c| {
            if pids.contains(&c.pid) {
                calls.push(c);
            }
        })?;
        out.add_calls(&calls);
        if store.info().has_column("cpu") {
            let r = store.query(&host_cpus_sql(), &QueryLimits::with_rows(1))?;
            out.cpus = r.rows.first().and_then(|row| row.first()).and_then(|v| v.as_i64()).unwrap_or(0).max(0) as usize;
        }
        Ok(out)
    }

    /// Policies from flag-setting calls (any order) on a host with `cpus` CPUs.
    #[cfg(test)]
    fn from_calls(calls: &[Call], cpus: usize) -> SchedPolicies {
        let mut out = SchedPolicies { cpus, ..Default::default() };
        let rows: Vec<SlimEvent> = calls
            .iter()
            .map(|c| SlimEvent {
                id: EventId::Int(c.id.0),
                ts: c.ts,
                dur: c.dur,
                pid: c.pid,
                tid: c.tid,
                op: c.op,
                arg0: c.arg0,
                arg2: 0,
            })
            .collect();
        out.add_calls(&rows);
        out
    }

    fn add_calls(&mut self, calls: &[SlimEvent]) {
        for c in calls.iter().filter(|c| codes::sets_sched_flags(c.op)) {
            self.flags.entry(c.pid).or_default().push((c.ts, c.id.clone(), c.arg0));
            if c.op == op::CU_CTX_CREATE {
                self.contexts.entry(c.pid).or_default().push(c.ts);
            }
        }
        for v in self.flags.values_mut() {
            v.sort();
        }
        for v in self.contexts.values_mut() {
            v.sort_unstable();
        }
    }

    /// How `call` waited, given its thread's off-CPU intervals `offs` (sorted by start).
    pub fn wait_mode(&self, call: &Call, offs: &[OffCpu]) -> WaitMode {
        let latest = self.flags.get(&call.pid).and_then(|v| v[..v.partition_point(|f| f.0 < call.ts)].last());
        let policy = latest.map(|f| SchedPolicy::from_flags(f.2)).unwrap_or(SchedPolicy::Auto);
        let created = self.contexts.get(&call.pid).map(|v| v.partition_point(|&t| t < call.ts)).unwrap_or(0);
        let contexts = created.max(1);
        // The same rows the SQL tests: state S, switched in after the call began, out before it ended.
        let slept = offs.iter().any(|o| {
            o.end > call.ts
                && o.start < call.end()
                && o.sched.as_ref().is_some_and(|s| s.prev_state == PrevState::Sleeping)
        });
        let spins = !slept && policy.spins(self.cpus, contexts);
        WaitMode { policy, flags_recorded: latest.is_some(), contexts, cpus: self.cpus, slept, spins }
    }
}

/// `SELECT` of the host's CPUs as this module counts them.
pub fn host_cpus_sql() -> String {
    format!("SELECT COUNT(DISTINCT cpu) FROM events WHERE {} AND cpu >= 0", op::SCHED_SWITCH.sql(""))
}

/// Whether `code` is a call whose preempted time is bounded when it spins.
pub fn is_spin_bounded_op(code: OpCode) -> bool {
    matches!(codes::gpu_role(code), GpuRole::Sync | GpuRole::SyncCopy)
}

/// Bound the preempted parts of a call that spun and ended at `call_end` (see the module doc): the
/// last preempted part stays [`Cause::Preempted`] when it ends within [`SPIN_RETURN_EPSILON_NS`]
/// of the return; every other preempted part becomes [`Cause::SpinGpuBusy`], keeping its culprit.
pub fn bound_spin_wait(parts: &mut [Part], call_end: i64) {
    let last = parts
        .iter()
        .enumerate()
        .filter(|(_, p)| p.cause == Cause::Preempted)
        .max_by_key(|(_, p)| p.end)
        .filter(|(_, p)| p.end >= call_end - SPIN_RETURN_EPSILON_NS)
        .map(|(i, _)| i);
    for (i, p) in parts.iter_mut().enumerate() {
        if p.cause == Cause::Preempted && Some(i) != last {
            p.cause = Cause::SpinGpuBusy;
        }
    }
}

/// What a culprit's preemptions of spinning waits came to, over the slow calls of one op.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpinShare {
    /// Calls that spun and that this culprit preempted.
    pub calls: u64,
    /// All the time the culprit held the CPU while those calls spun.
    pub preempted_ns: i64,
    /// Of which the part that can have delayed the returns (the last preemptions).
    pub bounded_ns: i64,
    /// And the part that overlapped GPU work.
    pub overlap_ns: i64,
    /// The policies, in words (`auto -> spin`, `spin`).
    pub policies: BTreeSet<String>,
}

/// What spinning did to the slow calls of one op, gathered call by call (explain keeps the worst
/// calls only): each culprit's [`SpinShare`] (the spinning calls it preempted), who held the CPU
/// while the calls spun on a busy GPU, and how the calls waited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpSpinFacts {
    /// Per culprit, as the parts carry it.
    pub shares: BTreeMap<(u32, u32, String), SpinShare>,
    /// `spin_gpu_busy` ns per task that held the CPU (`(0, 0, "")`: not recorded).
    pub busy_by: BTreeMap<(u32, u32, String), i64>,
    /// [`WaitMode::reason`] of the calls that spun or slept.
    pub reasons: BTreeSet<String>,
}

impl OpSpinFacts {
    /// One slow call: its parts and how it waited.
    pub fn add(&mut self, parts: &[Part], wait: Option<WaitMode>) {
        for p in parts.iter().filter(|p| p.cause == Cause::SpinGpuBusy) {
            let who = p.culprit.clone().unwrap_or((0, 0, String::new()));
            *self.busy_by.entry(who).or_default() += p.ns;
        }
        if let Some(w) = wait.filter(|w| w.spins || w.slept) {
            self.reasons.insert(w.reason());
        }
        let Some(w) = wait.filter(|w| w.spins) else { return };
        let culprits: BTreeSet<&(u32, u32, String)> = parts
            .iter()
            .filter(|p| matches!(p.cause, Cause::Preempted | Cause::SpinGpuBusy))
            .filter_map(|p| p.culprit.as_ref())
            .collect();
        for c in culprits {
            let mine = |p: &&Part| p.culprit.as_ref() == Some(c);
            let bounded: i64 = parts.iter().filter(|p| p.cause == Cause::Preempted).filter(mine).map(|p| p.ns).sum();
            let overlap: i64 = parts.iter().filter(|p| p.cause == Cause::SpinGpuBusy).filter(mine).map(|p| p.ns).sum();
            if bounded + overlap > 0 {
                let s = self.shares.entry(c.clone()).or_default();
                s.calls += 1;
                s.bounded_ns += bounded;
                s.overlap_ns += overlap;
                s.preempted_ns += bounded + overlap;
                s.policies.insert(w.policy_words());
            }
        }
    }
}

impl SpinShare {
    /// "N of these calls spun on the CPU (scheduling: auto -> spin); of 41 ms preempted by X, at
    /// most 3.2 ms can have delayed the return (...); 37.8 ms overlapped GPU work".
    pub fn words(&self, op: &str, who: &str) -> String {
        let policies: Vec<&str> = self.policies.iter().map(String::as_str).collect();
        format!(
            "{} of these {op} calls spun on the CPU (scheduling: {}); of {} preempted by {who}, at most {} can have delayed the return (a call's last preemption, when it ended within {} of the return: the GPU may have finished during it); {} overlapped GPU work",
            self.calls,
            policies.join(", "),
            fmt_ns(self.preempted_ns),
            fmt_ns(self.bounded_ns),
            fmt_ns(SPIN_RETURN_EPSILON_NS),
            fmt_ns(self.overlap_ns)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::SchedDetail;

    const MS: i64 = 1_000_000;
    const US: i64 = 1_000;

    fn call(id: i64, pid: u32, code: OpCode, ts: i64, dur: i64, arg0: i64) -> Call {
        Call { id: crate::attribution::CallId(id), ts, dur, pid, tid: pid, op: code, arg0 }
    }

    fn off(start: i64, end: i64, state: PrevState, by: u32) -> OffCpu {
        let sched = SchedDetail {
            prev_state: state,
            next_pid: by,
            next_tid: by,
            next_comm: format!("task{by}"),
            ..Default::default()
        };
        OffCpu { id: EventId::Int(start), pid: 1, tid: 1, start, end, cpu: 0, sched: Some(sched), socket_peer: None }
    }

    fn parts_of(c: &Call, offs: &[OffCpu]) -> Vec<Part> {
        crate::attribution::attribute_call(c, offs, None, &[]).parts
    }

    fn ns(parts: &[Part], cause: Cause) -> i64 {
        parts.iter().filter(|p| p.cause == cause).map(|p| p.ns).sum()
    }

    #[test]
    fn only_the_last_preemption_ending_at_the_return_can_have_delayed_it() {
        // A 48 ms sync: preempted 2..20 ms by task 9, then 25..45.9 ms by task 8, returning at 46 ms
        // (the second preemption ends 100 us before the return: within the epsilon).
        let c = call(1, 1, op::CUDA_STREAM_SYNC, 0, 46 * MS, 0);
        let offs = [off(2 * MS, 20 * MS, PrevState::Preempted, 9), off(25 * MS, 45_900 * US, PrevState::Preempted, 8)];
        let mut parts = parts_of(&c, &offs);
        bound_spin_wait(&mut parts, c.end());
        assert_eq!(ns(&parts, Cause::Preempted), 20_900 * US);
        assert_eq!(parts.iter().find(|p| p.cause == Cause::Preempted).unwrap().culprit.as_ref().unwrap().0, 8);
        assert_eq!(ns(&parts, Cause::SpinGpuBusy), 18 * MS);
        // The culprit is kept on the overlapping part for the text, not blamed.
        assert_eq!(parts.iter().find(|p| p.cause == Cause::SpinGpuBusy).unwrap().culprit.as_ref().unwrap().0, 9);
        assert_eq!(ns(&parts, Cause::OnCpuOrGpu), 46 * MS - 18 * MS - 20_900 * US);
    }

    #[test]
    fn a_preemption_followed_by_more_spinning_explains_nothing() {
        // The preemption ends 300 us before the return: more than the epsilon, so the GPU was still busy.
        let c = call(1, 1, op::CU_CTX_SYNCHRONIZE, 0, 10 * MS, 0);
        let offs = [off(MS, 10 * MS - SPIN_RETURN_EPSILON_NS - 100 * US, PrevState::Preempted, 9)];
        let mut parts = parts_of(&c, &offs);
        bound_spin_wait(&mut parts, c.end());
        assert_eq!(ns(&parts, Cause::Preempted), 0);
        assert_eq!(ns(&parts, Cause::SpinGpuBusy), 9 * MS - 300 * US);
        // Exactly at the epsilon it still counts.
        let offs = [off(MS, 10 * MS - SPIN_RETURN_EPSILON_NS, PrevState::Preempted, 9)];
        let mut parts = parts_of(&c, &offs);
        bound_spin_wait(&mut parts, c.end());
        assert_eq!((ns(&parts, Cause::Preempted), ns(&parts, Cause::SpinGpuBusy)), (9 * MS - 200 * US, 0));
    }

    #[test]
    fn the_policy_in_force_is_the_latest_flags_before_the_call() {
        let pid = 7;
        // Auto by default; blocking sync from 100 ms; spin from 200 ms; a second context at 300 ms.
        let flags = [
            call(10, pid, op::CUDA_SET_DEVICE_FLAGS, 100 * MS, US, 4),
            call(11, pid, op::CU_CTX_SET_FLAGS, 200 * MS, US, 0x1 | 0x8),
            call(12, pid, op::CU_CTX_CREATE, 300 * MS, US, 0),
            call(13, pid, op::CU_CTX_CREATE, 301 * MS, US, 0),
            call(14, 99, op::CUDA_SET_DEVICE_FLAGS, 0, US, 4), // another process
        ];
        let p = SchedPolicies::from_calls(&flags, 2);
        let at = |ts: i64| p.wait_mode(&call(1, pid, op::CUDA_STREAM_SYNC, ts, MS, 0), &[]);
        let w = at(50 * MS);
        assert_eq!((w.policy, w.flags_recorded, w.contexts, w.spins), (SchedPolicy::Auto, false, 1, true));
        assert_eq!(w.policy_words(), "auto -> spin");
        let w = at(100 * MS); // flags set by a call that started at the same instant: not yet in force
        assert_eq!(w.policy, SchedPolicy::Auto);
        let w = at(150 * MS);
        assert_eq!((w.policy, w.spins), (SchedPolicy::BlockingSync, false));
        assert_eq!((at(250 * MS).policy, at(250 * MS).spins), (SchedPolicy::Spin, true));
        // cuCtxCreate with flags 0: auto again, now with 2 contexts on 2 CPUs (spins), then 3 on 2 (yields).
        let w = at(300 * MS + 500 * US);
        assert_eq!((w.policy, w.contexts, w.spins), (SchedPolicy::Auto, 1, true));
        let w = at(302 * MS);
        assert_eq!((w.policy, w.contexts, w.spins), (SchedPolicy::Auto, 2, true));
        let p1 = SchedPolicies::from_calls(&flags, 1);
        let w = p1.wait_mode(&call(1, pid, op::CUDA_STREAM_SYNC, 302 * MS, MS, 0), &[]);
        assert_eq!((w.spins, w.policy_words()), (false, "auto -> yield".to_string()));
    }

    #[test]
    fn a_thread_that_slept_in_the_call_did_not_spin() {
        let p = SchedPolicies::from_calls(&[], 8);
        let c = call(1, 1, op::CUDA_STREAM_SYNC, 0, 10 * MS, 0);
        let offs = [off(MS, 2 * MS, PrevState::Preempted, 9), off(3 * MS, 9 * MS, PrevState::Sleeping, 0)];
        let w = p.wait_mode(&c, &offs);
        assert!(w.slept && !w.spins, "{w:?}");
        assert!(w.reason().contains("it did not spin"), "{}", w.reason());
        // A sleep before the call does not count.
        let w = p.wait_mode(&c, &[off(-5 * MS, 0, PrevState::Sleeping, 0), off(MS, 2 * MS, PrevState::Preempted, 9)]);
        assert!(!w.slept && w.spins);
    }

    #[test]
    fn a_culprits_share_of_spinning_waits() {
        let spin = WaitMode {
            policy: SchedPolicy::Auto,
            flags_recorded: false,
            contexts: 1,
            cpus: 4,
            slept: false,
            spins: true,
        };
        let block = WaitMode { spins: false, policy: SchedPolicy::BlockingSync, ..spin };
        let c = call(1, 1, op::CUDA_STREAM_SYNC, 0, 46 * MS, 0);
        let offs = [off(2 * MS, 20 * MS, PrevState::Preempted, 9), off(25 * MS, 45_900 * US, PrevState::Preempted, 9)];
        let mut spun = parts_of(&c, &offs);
        bound_spin_wait(&mut spun, c.end());
        let blocked = parts_of(&c, &offs);
        let who = (9, 9, "task9".to_string());
        let mut facts = OpSpinFacts::default();
        facts.add(&spun, Some(spin));
        facts.add(&blocked, Some(block));
        let s = &facts.shares[&who];
        assert_eq!((s.calls, s.preempted_ns, s.bounded_ns, s.overlap_ns), (1, 38_900 * US, 20_900 * US, 18 * MS));
        // the spinning call's time on a busy GPU is the culprit's; the blocking call did not spin
        assert_eq!(facts.busy_by.get(&who), Some(&(18 * MS)));
        assert_eq!(facts.reasons.len(), 1, "{:?}", facts.reasons);
        let text = s.words("cudaStreamSync", "task9");
        assert!(
            text.contains("(scheduling: auto -> spin); of 38.90 ms preempted by task9, at most 20.90 ms"),
            "{text}"
        );
        assert!(text.ends_with("18.00 ms overlapped GPU work"), "{text}");
        assert!(!facts.shares.contains_key(&(8, 8, "task8".into())), "{:?}", facts.shares.keys());
    }
}
