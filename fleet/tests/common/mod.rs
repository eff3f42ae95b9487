//! What the fleet's lake tests share: the synthetic eight-rank job they ship and its nodes' clocks.

#![allow(dead_code)] // each test binary uses its own part

use causeway_backends::SyntheticJob;
use causeway_fleet::LakeSpec;

/// The job's start, unix ns.
pub const T0: i64 = 1_790_000_000_000_000_000;
pub const MS: i64 = 1_000_000;
/// How far node-K's clock is off (ns): the offsets the cross-host answers must see through.
pub const SKEWS: [i64; 8] = [0, 2_500_000, -4_000_000, 7_000_000, -1_200_000, 3_300_000, 800_000, -6_000_000];

/// A job of eight ranks, 200 steps of 10 ms, starting `start_ns` after [`T0`]; `straggler`: the
/// rank that comes 30 ms late to the collectives of steps `first..=last`.
pub fn eight_rank_job(start_ns: i64, comm_hash: i64, (rank, first, last): (u32, i64, i64)) -> SyntheticJob {
    SyntheticJob {
        world: 8,
        steps: 200,
        period_ns: 10 * MS,
        start_ns: T0 + start_ns,
        comm_hash,
        launches_per_step: 10,
        transfer_ns: 2 * MS,
        straggler: Some((rank, first, last, 30 * MS)),
    }
}

pub fn lake(s: &str) -> LakeSpec {
    LakeSpec::parse(s).unwrap()
}
