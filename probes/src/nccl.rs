//! NCCL calls as the trace stores them: the ring's `cw_nccl` records (an NCCL call and its
//! arguments) become an [`Event`] of source 9 and an [`NcclCall`] row. A communicator is known by
//! the handle its init call returned in one process; this module follows every traced process's
//! communicators from their creation (the hash of the `ncclUniqueId` all ranks share, this rank,
//! the ranks, the device current on the creating thread) and numbers each communicator's
//! collectives, so that (`comm_hash`, `seq`) names the same collective on every rank.
//!
//! A communicator created before the trace saw it keeps `comm_hash` 0 (its collectives are still
//! numbered, from the first one seen, but are never matched across ranks).

use std::collections::HashMap;

use causeway_model::codes::{is_nccl_collective, op, OpCode};
use causeway_model::fnv::Fnv1a64;
use causeway_model::{Event, NcclCall};

use crate::wire::NcclArgs;

/// One communicator as one process knows it.
#[derive(Debug, Clone, Default)]
struct Comm {
    hash: i64,
    rank: i32,
    nranks: i32,
    device: i32,
    /// Collectives issued so far.
    collectives: i64,
    /// Splits of this communicator so far (a split is collective: every rank counts the same).
    splits: i64,
    /// Point-to-point transfers so far, by (peer, is_send).
    p2p: HashMap<(i32, bool), i64>,
}

/// Follows the communicators of every traced process; see the module docs.
#[derive(Debug, Default)]
pub struct NcclTracker {
    comms: HashMap<(u32, i64), Comm>,
    /// The device each thread made current (`cudaSetDevice`).
    devices: HashMap<u32, i32>,
}

/// A stable hash of a few integers (FNV-1a over their little-endian bytes), never 0.
fn hash_of(parts: &[i64]) -> i64 {
    let mut h = Fnv1a64::new();
    for p in parts {
        h.write(&p.to_le_bytes());
    }
    match h.finish() {
        0 => 1,
        v => v as i64,
    }
}

impl NcclTracker {
    /// Note what a decoded CUDA event tells about NCCL's context (the device a thread set).
    pub fn observe(&mut self, e: &Event) {
        if op::CUDA_SET_DEVICE.is(e.source, e.op) && e.ret_code == 0 {
            if let Ok(d) = i32::try_from(e.arg0) {
                if self.devices.len() > 100_000 {
                    self.devices.clear();
                }
                self.devices.insert(e.tid, d);
            }
        }
    }

    /// Forget a process (it exited or exec'd: its handles mean nothing any more).
    pub fn forget(&mut self, pid: u32) {
        self.comms.retain(|(p, _), _| *p != pid);
    }

    /// Complete an NCCL call's event (`arg0` bytes, `arg1` elements or ranks or the communicator,
    /// `arg2` stream or the communicator returned, `gpu_id` the communicator's device) and give its
    /// `nccl_calls` row. `read_handles(pid, addr, n)` reads `n` communicator handles from the
    /// process (for `ncclCommInitAll`, whose array BPF does not copy); None when it cannot.
    pub fn call(
        &mut self,
        e: &mut Event,
        a: &NcclArgs,
        read_handles: &mut dyn FnMut(u32, u64, usize) -> Option<Vec<i64>>,
    ) -> NcclCall {
        let code = OpCode::new(e.source, e.op);
        let (pid, ok) = (e.pid, e.ret_code == 0);
        let device_of_thread = self.devices.get(&e.tid).copied().unwrap_or(-1);
        let mut row = NcclCall {
            pid,
            tid: e.tid,
            ts_ns: e.ts_ns,
            op: e.op,
            rank: -1,
            nranks: -1,
            datatype: a.datatype,
            redop: a.redop,
            peer: a.peer,
            device: -1,
            ..Default::default()
        };
        // what the probe put where (see the NCCL rows of cuda_table.rs)
        let (count, comm_arg, stream_or_out) = (e.arg0, e.arg1, e.arg2);
        if code == op::NCCL_COMM_INIT_RANK {
            row.comm = stream_or_out;
            row.comm_hash = a.id_hash as i64;
            row.rank = a.rank;
            row.nranks = a.nranks;
            row.device = device_of_thread;
            if ok && row.comm != 0 {
                let c =
                    Comm { hash: row.comm_hash, rank: a.rank, nranks: a.nranks, device: row.device, ..Comm::default() };
                self.comms.insert((pid, row.comm), c);
            }
            (e.arg0, e.arg1, e.arg2) = (0, i64::from(a.nranks), row.comm);
        } else if code == op::NCCL_COMM_INIT_ALL {
            // comms array in arg2, the device list in arg0 (NULL: devices 0..n)
            let n = usize::try_from(a.nranks).unwrap_or(0).min(64);
            row.nranks = a.nranks;
            if ok && n > 0 {
                if let Some(handles) = read_handles(pid, stream_or_out as u64, n) {
                    let devices = match count {
                        0 => None,
                        list => read_handles(pid, list as u64, n.div_ceil(2)),
                    };
                    let hash = hash_of(&[i64::from(pid), handles[0], 0x1a11]);
                    row.comm = handles[0];
                    row.comm_hash = hash;
                    for (i, &h) in handles.iter().enumerate() {
                        // devlist is an int array: two per 8-byte word read
                        let device = match &devices {
                            Some(d) => d.get(i / 2).map_or(-1, |w| (*w >> (32 * (i % 2))) as i32),
                            None => i as i32,
                        };
                        let c = Comm { hash, rank: i as i32, nranks: a.nranks, device, ..Comm::default() };
                        self.comms.insert((pid, h), c);
                    }
                }
            }
            (e.arg0, e.arg1) = (0, i64::from(a.nranks));
        } else if code == op::NCCL_COMM_SPLIT {
            // parent in arg1, the new communicator in arg2, color in peer, key in rank
            let parent = self.comm(pid, comm_arg);
            parent.splits += 1;
            let (parent_hash, split, device) = (parent.hash, parent.splits, parent.device);
            row.comm = stream_or_out;
            row.device = device;
            if parent_hash != 0 && a.peer >= 0 {
                row.comm_hash = hash_of(&[parent_hash, i64::from(a.peer), split]);
            }
            if ok && row.comm != 0 {
                let c = Comm { hash: row.comm_hash, rank: -1, nranks: -1, device, ..Comm::default() };
                self.comms.insert((pid, row.comm), c);
            }
            e.arg0 = 0;
        } else if code == op::NCCL_GROUP_START || code == op::NCCL_GROUP_END {
            (e.arg0, e.arg1, e.arg2) = (0, 0, 0);
        } else {
            // collectives, send/recv, destroy/abort/finalize: the communicator in arg1
            let c = self.comm(pid, comm_arg);
            row.comm = comm_arg;
            row.comm_hash = c.hash;
            row.rank = c.rank;
            row.nranks = c.nranks;
            row.device = c.device;
            let elem = NcclCall::element_bytes(a.datatype);
            if is_nccl_collective(e.source, e.op) {
                c.collectives += 1;
                row.seq = c.collectives;
                row.count = count;
                let per_rank = code == op::NCCL_ALL_GATHER || code == op::NCCL_REDUCE_SCATTER;
                let ranks = if per_rank { i64::from(c.nranks.max(1)) } else { 1 };
                (e.arg0, e.arg1) = (count.saturating_mul(elem).saturating_mul(ranks), count);
            } else if code == op::NCCL_SEND || code == op::NCCL_RECV {
                let n = c.p2p.entry((a.peer, code == op::NCCL_SEND)).or_default();
                *n += 1;
                row.seq = *n;
                row.count = count;
                (e.arg0, e.arg1) = (count.saturating_mul(elem), count);
            } else {
                (e.arg0, e.arg2) = (0, 0);
                if ok && (code == op::NCCL_COMM_DESTROY || code == op::NCCL_COMM_ABORT) {
                    self.comms.remove(&(pid, comm_arg));
                }
            }
        }
        if row.device >= 0 {
            e.gpu_id = row.device;
        }
        row
    }

    /// The communicator `handle` of `pid`, created unknown (hash 0) when its init was not seen.
    fn comm(&mut self, pid: u32, handle: i64) -> &mut Comm {
        self.comms.entry((pid, handle)).or_insert_with(|| Comm { rank: -1, nranks: -1, device: -1, ..Comm::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pid: u32, code: OpCode, arg0: i64, arg1: i64, arg2: i64) -> Event {
        Event { pid, tid: pid, ts_ns: 1, source: code.source, op: code.op, arg0, arg1, arg2, ..Default::default() }
    }
    fn args(id_hash: u64, datatype: i32, peer: i32, nranks: i32, rank: i32) -> NcclArgs {
        NcclArgs { id_hash, datatype, redop: 0, peer, nranks, rank }
    }
    fn no_memory(_: u32, _: u64, _: usize) -> Option<Vec<i64>> {
        None
    }

    #[test]
    fn collectives_are_numbered_per_communicator_and_carry_its_rank() {
        let mut t = NcclTracker::default();
        t.observe(&ev(10, op::CUDA_SET_DEVICE, 3, 0, 0));
        // rank 1 of 4, device 3
        let mut init = ev(10, op::NCCL_COMM_INIT_RANK, 0, 0, 0xc0);
        let r = t.call(&mut init, &args(0xabc, -1, -1, 4, 1), &mut no_memory);
        assert_eq!((r.comm, r.comm_hash, r.rank, r.nranks, r.device), (0xc0, 0xabc, 1, 4, 3));
        assert_eq!((init.arg1, init.arg2, init.gpu_id), (4, 0xc0, 3));
        for want in 1..=3 {
            let mut e = ev(10, op::NCCL_ALL_REDUCE, 1000, 0xc0, 0x5);
            let r = t.call(&mut e, &args(0, 7, -1, -1, -1), &mut no_memory);
            assert_eq!((r.seq, r.comm_hash, r.rank, r.count), (want, 0xabc, 1, 1000));
            assert_eq!((e.arg0, e.arg1, e.arg2, e.gpu_id), (4000, 1000, 0x5, 3), "bytes, elements, stream");
        }
        // all-gather moves count * size * ranks
        let mut g = ev(10, op::NCCL_ALL_GATHER, 10, 0xc0, 0x5);
        let r = t.call(&mut g, &args(0, 9, -1, -1, -1), &mut no_memory);
        assert_eq!((r.seq, g.arg0), (4, 10 * 2 * 4));
        // send and receive are numbered per peer and direction, apart from collectives
        for want in [1, 2] {
            let mut s = ev(10, op::NCCL_SEND, 8, 0xc0, 0x5);
            assert_eq!(t.call(&mut s, &args(0, 7, 2, -1, -1), &mut no_memory).seq, want);
        }
        let mut rv = ev(10, op::NCCL_RECV, 8, 0xc0, 0x5);
        assert_eq!(t.call(&mut rv, &args(0, 7, 2, -1, -1), &mut no_memory).seq, 1);
        // another process's handle with the same value is another communicator: unknown
        let mut other = ev(11, op::NCCL_ALL_REDUCE, 1, 0xc0, 0x5);
        let r = t.call(&mut other, &args(0, 7, -1, -1, -1), &mut no_memory);
        assert_eq!((r.comm_hash, r.rank, r.seq), (0, -1, 1));
    }

    #[test]
    fn a_split_communicator_is_named_alike_on_every_rank_of_its_color() {
        let mut names = Vec::new();
        for (pid, rank) in [(20u32, 0), (21, 1), (22, 2)] {
            let mut t = NcclTracker::default();
            let mut init = ev(pid, op::NCCL_COMM_INIT_RANK, 0, 0, 0xa0);
            t.call(&mut init, &args(0x77, -1, -1, 3, rank), &mut no_memory);
            let mut split = ev(pid, op::NCCL_COMM_SPLIT, 0, 0xa0, 0xb0 + i64::from(rank));
            let r = t.call(&mut split, &args(0, -1, rank % 2, -1, rank), &mut no_memory);
            names.push(r.comm_hash);
            let mut c = ev(pid, op::NCCL_ALL_REDUCE, 1, 0xb0 + i64::from(rank), 0);
            assert_eq!(t.call(&mut c, &args(0, 7, -1, -1, -1), &mut no_memory).comm_hash, r.comm_hash);
        }
        assert_eq!(names[0], names[2], "color 0");
        assert_ne!(names[0], names[1], "color 1 is another communicator");
        assert!(names.iter().all(|&h| h != 0));
    }

    #[test]
    fn init_all_reads_the_handles_and_numbers_the_ranks() {
        let mut t = NcclTracker::default();
        let mut e = ev(30, op::NCCL_COMM_INIT_ALL, 0, 0, 0x1000);
        let mut mem = |pid: u32, addr: u64, n: usize| {
            assert_eq!((pid, addr, n), (30, 0x1000, 2));
            Some(vec![0xd0, 0xd8])
        };
        let r = t.call(&mut e, &args(0, -1, -1, 2, -1), &mut mem);
        assert_eq!((r.comm, r.nranks), (0xd0, 2));
        let mut c = ev(30, op::NCCL_ALL_REDUCE, 1, 0xd8, 0);
        let r2 = t.call(&mut c, &args(0, 7, -1, -1, -1), &mut no_memory);
        assert_eq!((r2.comm_hash, r2.rank, r2.nranks, r2.device, r2.seq), (r.comm_hash, 1, 2, 1, 1));
    }
}
