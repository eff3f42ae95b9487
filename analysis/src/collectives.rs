//! Stragglers at NCCL collectives, from the `nccl_calls` rows alone (pure; `explain/straggler.rs`
//! adds what the late rank's thread went through).
//!
//! Every rank calls a communicator's collectives in the same order, so (`comm_hash`, `seq`) names
//! one collective on every rank, and the ranks' entry times into it are comparable (ranks traced on
//! one host share its clock). A collective completes only when its last rank arrives: the others
//! wait, on the GPU, from their own entry to the last one's. For each collective the last rank is
//! **late** by the time between its entry and the entry before it, and the others **waited**
//! `sum(last entry - their entry)`. A collective counts as late when that lateness is at least
//! [`LATE_FLOOR_NS`] and at least `1/LATE_PERIOD_DIVISOR` of the communicator's median period (the
//! nearest-rank median time between consecutive collectives): jitter below that is noise. A rank
//! that is the late one in [`MIN_LATE`] collectives or more is a straggler of that communicator.

use std::collections::BTreeMap;

use causeway_model::codes::{is_nccl_collective, Source};
use causeway_model::NcclCall;

use crate::attribution::OpDistribution;

/// Lateness below this is never late (entry jitter of ranks that share a host).
pub const LATE_FLOOR_NS: i64 = 1_000_000;
/// Late from this fraction of the communicator's median period between collectives.
pub const LATE_PERIOD_DIVISOR: i64 = 10;
/// A rank late this often is a straggler.
pub const MIN_LATE: usize = 2;

/// One rank's entry into one collective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub pid: u32,
    pub tid: u32,
    pub rank: i32,
    pub ts_ns: i64,
    /// The entry of this rank's previous collective on the communicator (None for its first).
    pub prev_ts_ns: Option<i64>,
}

/// One collective on which a rank was late.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateCollective {
    pub seq: i64,
    pub op: u16,
    /// Elements of the collective (as the late rank passed them).
    pub count: i64,
    /// The late rank's entry.
    pub late: Arrival,
    /// The other ranks' entries, earliest first.
    pub others: Vec<Arrival>,
    /// Late rank's entry minus the entry before it.
    pub late_ns: i64,
    /// Sum over the other ranks of (late entry - their entry).
    pub waited_ns: i64,
}

/// A rank that reached a communicator's collectives late, again and again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Straggler {
    pub comm_hash: i64,
    /// Ranks of the communicator (as its init said; -1 unknown).
    pub nranks: i32,
    pub pid: u32,
    pub tid: u32,
    pub rank: i32,
    /// Collectives of the communicator matched across at least two ranks.
    pub collectives: u64,
    /// The communicator's median period between collectives (nearest rank).
    pub period_ns: i64,
    /// From the first entry to the last entry of the communicator's collectives, per other rank:
    /// what the waits are a share of.
    pub others_span_ns: i64,
    /// Other ranks in the communicator's collectives.
    pub other_ranks: u32,
    /// Its late collectives, in sequence order.
    pub late: Vec<LateCollective>,
    /// What it waited for the other ranks at THEIR late collectives of this communicator: on a
    /// jittery host every rank is late now and then, and this much of its own lateness is paid
    /// back.
    pub waited_for_others_ns: i64,
    /// The same, per collective: (seq, ns), by seq.
    pub waited_for_others: Vec<(i64, i64)>,
}

/// A straggler's worst stretch: the run of collectives where being late outweighs being on time
/// the most (each late collective +1, each on-time one -1), and the other ranks' net wait in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Stretch {
    pub first_seq: i64,
    pub last_seq: i64,
    /// Late collectives in it.
    pub late: usize,
    /// What the others waited for it there, less what it waited for them there (never below 0).
    pub net_ns: i64,
}

/// The worst stretch of a rank's late collectives `late` ((seq, what the others waited for it),
/// by seq), net of `paid_back` ((seq, what it waited for them at their late entries)): Kadane over
/// the late collectives, the on-time ones between two of them counted against. The one definition:
/// the fleet's stragglers use it too.
pub fn worst_stretch(late: &[(i64, i64)], paid_back: &[(i64, i64)]) -> Stretch {
    let (mut best, mut best_at) = (0i64, (0usize, 0usize));
    let (mut cur, mut start) = (0i64, 0usize);
    for i in 0..late.len() {
        let between = if i == 0 { 0 } else { late[i].0 - late[i - 1].0 - 1 };
        if i == 0 || cur - between <= 0 {
            (cur, start) = (1, i);
        } else {
            cur += 1 - between;
        }
        if cur > best {
            (best, best_at) = (cur, (start, i));
        }
    }
    let Some(first) = late.get(best_at.0) else {
        return Stretch { first_seq: 0, last_seq: 0, late: 0, net_ns: 0 };
    };
    let (a, b) = (first.0, late[best_at.1].0);
    let waited: i64 = late[best_at.0..=best_at.1].iter().map(|l| l.1).sum();
    let paid: i64 = paid_back.iter().filter(|(seq, _)| (a..=b).contains(seq)).map(|w| w.1).sum();
    Stretch { first_seq: a, last_seq: b, late: best_at.1 - best_at.0 + 1, net_ns: (waited - paid).max(0) }
}

impl Straggler {
    /// What the other ranks waited for it in total.
    pub fn waited_ns(&self) -> i64 {
        self.late.iter().map(|l| l.waited_ns).sum()
    }

    /// What the other ranks waited for it beyond what it waited for them (never below 0): a
    /// straggler's cost to the job, with the communicator's symmetric jitter taken out.
    pub fn net_waited_ns(&self) -> i64 {
        (self.waited_ns() - self.waited_for_others_ns).max(0)
    }

    /// Its worst stretch (see [`Stretch`]): a planted or real slowdown is a dense run of late
    /// collectives; a busy host's jitter makes a rank late now and then, scattered, so its stretches
    /// stay short and their net wait small.
    pub fn worst_stretch(&self) -> Stretch {
        let late: Vec<(i64, i64)> = self.late.iter().map(|l| (l.seq, l.waited_ns)).collect();
        worst_stretch(&late, &self.waited_for_others)
    }

    /// The late collectives' sequence numbers as ranges: `#11-#30, #34`.
    pub fn seq_ranges(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.late.len() {
            let mut j = i;
            while j + 1 < self.late.len() && self.late[j + 1].seq == self.late[j].seq + 1 {
                j += 1;
            }
            out.push(if i == j {
                format!("#{}", self.late[i].seq)
            } else {
                format!("#{}-#{}", self.late[i].seq, self.late[j].seq)
            });
            i = j + 1;
        }
        out.join(", ")
    }
}

/// The stragglers of every communicator in `calls` (any order), the most waited-for first.
pub fn find_stragglers(calls: &[NcclCall]) -> Vec<Straggler> {
    let nccl = Source::Nccl.code();
    // (comm, seq) -> the ranks' calls
    let mut instances: BTreeMap<(i64, i64), Vec<&NcclCall>> = BTreeMap::new();
    for c in calls.iter().filter(|c| c.comm_hash != 0 && c.seq > 0 && is_nccl_collective(nccl, c.op)) {
        instances.entry((c.comm_hash, c.seq)).or_default().push(c);
    }
    let mut by_comm: BTreeMap<i64, Vec<(i64, Vec<&NcclCall>)>> = BTreeMap::new();
    for ((comm, seq), mut v) in instances {
        // one entry per process (a process calls a collective once per communicator handle)
        v.sort_by_key(|c| (c.ts_ns, c.pid, c.tid));
        v.dedup_by_key(|c| c.pid);
        if v.len() >= 2 {
            by_comm.entry(comm).or_default().push((seq, v));
        }
    }
    let mut out = Vec::new();
    for (comm_hash, instances) in by_comm {
        out.extend(comm_stragglers(comm_hash, &instances));
    }
    out.sort_by(|a, b| b.waited_ns().cmp(&a.waited_ns()).then(a.pid.cmp(&b.pid)));
    out
}

/// The stragglers of one communicator: `instances` are (seq, entries earliest first), by seq.
fn comm_stragglers(comm_hash: i64, instances: &[(i64, Vec<&NcclCall>)]) -> Vec<Straggler> {
    // the period: between the first entries of consecutive collectives
    let mut gaps: Vec<i64> = instances
        .windows(2)
        .filter(|w| w[1].0 == w[0].0 + 1)
        .map(|w| w[1].1[0].ts_ns - w[0].1[0].ts_ns)
        .filter(|g| *g > 0)
        .collect();
    let period_ns = if gaps.is_empty() { 0 } else { OpDistribution::from_durations(&mut gaps).p50 };
    let threshold = LATE_FLOOR_NS.max(period_ns / LATE_PERIOD_DIVISOR);
    // each rank's entry per seq, for the previous entry
    let mut entry_of: BTreeMap<(u32, i64), i64> = BTreeMap::new();
    for (seq, v) in instances {
        for c in v {
            entry_of.insert((c.pid, *seq), c.ts_ns);
        }
    }
    let arrival = |c: &NcclCall, seq: i64| Arrival {
        pid: c.pid,
        tid: c.tid,
        rank: c.rank,
        ts_ns: c.ts_ns,
        prev_ts_ns: entry_of.get(&(c.pid, seq - 1)).copied(),
    };
    let mut late_by_pid: BTreeMap<u32, Vec<LateCollective>> = BTreeMap::new();
    let mut first_last: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    for (seq, v) in instances {
        for c in v {
            let e = first_last.entry(c.pid).or_insert((c.ts_ns, c.ts_ns));
            e.0 = e.0.min(c.ts_ns);
            e.1 = e.1.max(c.ts_ns);
        }
        let (last, before) = (v[v.len() - 1], v[v.len() - 2]);
        let late_ns = last.ts_ns - before.ts_ns;
        if late_ns < threshold {
            continue;
        }
        let others: Vec<Arrival> = v[..v.len() - 1].iter().map(|c| arrival(c, *seq)).collect();
        let waited_ns = others.iter().map(|o| last.ts_ns - o.ts_ns).sum();
        late_by_pid.entry(last.pid).or_default().push(LateCollective {
            seq: *seq,
            op: last.op,
            count: last.count,
            late: arrival(last, *seq),
            others,
            late_ns,
            waited_ns,
        });
    }
    let ranks = first_last.len() as u32;
    // what each rank waited for the others at their late collectives (all of them, also those of
    // ranks late too rarely to be stragglers)
    let mut waited_for_others: BTreeMap<u32, BTreeMap<i64, i64>> = BTreeMap::new();
    for l in late_by_pid.values().flatten() {
        for o in &l.others {
            *waited_for_others.entry(o.pid).or_default().entry(l.seq).or_default() += l.late.ts_ns - o.ts_ns;
        }
    }
    late_by_pid
        .into_iter()
        .filter(|(_, late)| late.len() >= MIN_LATE)
        .map(|(pid, late)| {
            let others_span_ns =
                first_last.iter().filter(|(p, _)| **p != pid).map(|(_, (a, b))| b - a).sum::<i64>().max(1);
            let first = &late[0].late;
            let nranks = instances.iter().flat_map(|(_, v)| v.iter()).find(|c| c.pid == pid).map_or(-1, |c| c.nranks);
            Straggler {
                comm_hash,
                nranks,
                pid,
                tid: first.tid,
                rank: first.rank,
                collectives: instances.len() as u64,
                period_ns,
                others_span_ns,
                other_ranks: ranks.saturating_sub(1),
                late,
                waited_for_others_ns: waited_for_others.get(&pid).map_or(0, |w| w.values().sum()),
                waited_for_others: waited_for_others
                    .get(&pid)
                    .map(|w| w.iter().map(|(k, v)| (*k, *v)).collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::op;

    const MS: i64 = 1_000_000;

    fn call(pid: u32, rank: i32, seq: i64, ts_ns: i64) -> NcclCall {
        NcclCall {
            pid,
            tid: pid,
            ts_ns,
            op: op::NCCL_ALL_REDUCE.op,
            comm_hash: 77,
            comm: 0xc0,
            rank,
            nranks: 3,
            seq,
            count: 1 << 20,
            datatype: 7,
            redop: 0,
            peer: -1,
            device: rank,
        }
    }

    /// Three ranks, a collective every 10 ms; rank 2 is `late(seq)` ms late.
    fn run(late: impl Fn(i64) -> i64) -> Vec<NcclCall> {
        let mut v = Vec::new();
        for seq in 1..=40 {
            let t = seq * 10 * MS;
            v.push(call(100, 0, seq, t));
            v.push(call(101, 1, seq, t + 100_000));
            v.push(call(102, 2, seq, t + 200_000 + late(seq) * MS));
        }
        v
    }

    #[test]
    fn the_late_rank_is_found_with_its_collectives_and_the_others_wait() {
        let s = find_stragglers(&run(|seq| if (11..=30).contains(&seq) { 8 } else { 0 }));
        assert_eq!(s.len(), 1, "{s:?}");
        let s = &s[0];
        assert_eq!((s.pid, s.rank, s.nranks, s.other_ranks, s.collectives), (102, 2, 3, 2, 40));
        assert_eq!(s.late.len(), 20);
        assert_eq!(s.seq_ranges(), "#11-#30");
        // late by 8.1 ms each after rank 1; rank 0 waited 8.2 ms, rank 1 8.1 ms
        assert!(s.late.iter().all(|l| l.late_ns == 8 * MS + 100_000));
        assert_eq!(s.waited_ns(), 20 * (16 * MS + 300_000));
        assert_eq!(s.late[0].late.prev_ts_ns, Some(10 * 10 * MS + 200_000));
        assert_eq!(s.late[0].others.iter().map(|a| a.rank).collect::<Vec<_>>(), vec![0, 1]);
        // the period is the median time between collectives: 10 ms (late ones shift the last rank only)
        assert_eq!(s.period_ns, 10 * MS);
    }

    #[test]
    fn what_a_rank_waited_for_the_others_is_taken_out_of_its_wait() {
        // rank 2 is 8 ms late at #11-#30 (the straggler); rank 0 is 5 ms late at #31-#33 (jitter)
        let mut v = run(|seq| if (11..=30).contains(&seq) { 8 } else { 0 });
        for c in &mut v {
            if c.pid == 100 && (31..=33).contains(&c.seq) {
                c.ts_ns += 5 * MS;
            }
        }
        let s = find_stragglers(&v);
        let late2 = s.iter().find(|s| s.pid == 102).expect("rank 2");
        let late0 = s.iter().find(|s| s.pid == 100).expect("rank 0 (late 3 times)");
        // at rank 0's late entries rank 2 entered 5 ms - 0.2 ms before it, three times
        assert_eq!(late2.waited_for_others_ns, 3 * (5 * MS - 200_000));
        assert_eq!(late2.net_waited_ns(), late2.waited_ns() - 3 * (5 * MS - 200_000));
        // rank 0 waited for rank 2 at each of rank 2's late entries: more than the others waited
        // for it, so its net is 0
        assert_eq!(late0.waited_for_others_ns, 20 * (8 * MS + 200_000));
        assert_eq!(late0.net_waited_ns(), 0);
        // the straggler's worst stretch is its planted run, paid nothing back there
        let e = late2.worst_stretch();
        assert_eq!((e.first_seq, e.last_seq, e.late), (11, 30, 20));
        assert_eq!(e.net_ns, late2.waited_ns());
        // rank 0's is its three late collectives, where rank 2 waited for it: 15 ms less 3 x 0.2 ms each
        let e0 = late0.worst_stretch();
        assert_eq!((e0.first_seq, e0.last_seq, e0.late), (31, 33, 3));
    }

    #[test]
    fn scattered_lateness_makes_short_stretches_and_a_dense_run_one_long_one() {
        // late at every 4th collective (a busy host's jitter), then at #21-#30 but #25
        let mut late: Vec<i64> = (1..=20).filter(|s| s % 4 == 0).collect();
        late.extend((21..=30).filter(|s| *s != 25));
        let s = find_stragglers(&run(|seq| if late.contains(&seq) { 3 } else { 0 }));
        let e = s[0].worst_stretch();
        assert_eq!((e.first_seq, e.last_seq, e.late), (20, 30, 10), "#20 joins the run (one on-time between)");
        let scattered = find_stragglers(&run(|seq| if seq % 4 == 0 { 3 } else { 0 }));
        assert_eq!(scattered[0].worst_stretch().late, 1, "each late collective alone is a stretch of one");
    }

    #[test]
    fn jitter_below_the_threshold_and_a_single_late_collective_are_not_stragglers() {
        assert!(find_stragglers(&run(|_| 0)).is_empty());
        // 0.9 ms late every time: under the 1 ms floor
        let v: Vec<NcclCall> = run(|_| 0)
            .into_iter()
            .map(|mut c| {
                if c.pid == 102 {
                    c.ts_ns += 700_000;
                }
                c
            })
            .collect();
        assert!(find_stragglers(&v).is_empty());
        // once late: not a straggler
        assert!(find_stragglers(&run(|seq| if seq == 7 { 20 } else { 0 })).is_empty());
    }

    #[test]
    fn unmatched_and_unknown_communicators_are_left_out() {
        let mut v = run(|seq| if seq > 20 { 5 } else { 0 });
        for c in &mut v {
            c.comm_hash = 0;
        }
        assert!(find_stragglers(&v).is_empty(), "hash 0: not matched across ranks");
        // only one rank traced: nothing to compare
        let one: Vec<NcclCall> = run(|_| 9).into_iter().filter(|c| c.pid == 102).collect();
        assert!(find_stragglers(&one).is_empty());
    }
}
