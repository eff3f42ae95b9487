//! Live NCCL tests: mock-cuda's `nccl_ranks` (one process per rank, launched like torchrun, over the
//! mock `libnccl.so.2`) traced for real. Every rank's NCCL and CUDA calls are recorded exactly, with
//! their `nccl_calls` rows: one communicator hash on every rank, each rank's own rank and device,
//! collectives numbered 1..n alike on every rank, element counts, datatypes and reductions as
//! called; send/receive, broadcast/reduce roots, group calls and a split communicator too; and
//! `ncclCommInitAll` in one process gives its ranks from the communicators it returned.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use causeway_model::codes::{op, OpCode};
use causeway_model::NcclCall;
use common::*;

/// Each rank's report (`RANK r ...` lines with the prefix taken off).
fn ranks(stdout: &str) -> BTreeMap<i32, Workload> {
    let mut text: BTreeMap<i32, String> = BTreeMap::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.splitn(3, ' ').collect();
        if let ["RANK", r, rest] = f.as_slice() {
            let t = text.entry(r.parse().unwrap()).or_default();
            t.push_str(rest);
            t.push('\n');
        }
    }
    text.into_iter().map(|(r, t)| (r, Workload::parse(&t))).collect()
}

fn traced(argv: &[&str]) -> (causeway_probes::TraceReport, Collected, BTreeMap<i32, Workload>) {
    let build = mock_build();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout.txt");
    let (r, c, _) = run_traced(argv, |o| o.command_stdout = Some(out.clone()));
    let w = ranks(&std::fs::read_to_string(&out).unwrap());
    assert!(build.join("libnccl.so.2").exists());
    (r, c, w)
}

fn rows(c: &Collected, pid: u32, code: OpCode) -> Vec<&NcclCall> {
    let mut v: Vec<&NcclCall> = c.nccl_calls.iter().filter(|n| n.pid == pid && n.op == code.op).collect();
    v.sort_by_key(|n| n.ts_ns);
    v
}

#[test]
fn every_rank_records_its_collectives_exactly_with_one_communicator() {
    require_root();
    let (r, c, w) = traced(&["nccl_ranks", "--ranks", "2", "--steps", "25", "--extras", "1", "--bytes", "1048576"]);
    assert_eq!(r.command_exit, Some(0));
    assert!(r.losses.is_empty(), "{:?}", r.losses);
    assert_eq!(w.len(), 2, "two ranks reported");
    let mut hashes = BTreeSet::new();
    for (&rank, wl) in &w {
        assert_eq!(wl.values.get("ERRORS").map(String::as_str), Some("0"));
        assert_calls_exact(wl, &c.events);
        assert_eq!(wl.calls(&["ncclAllReduce"]), 26, "25 steps and one on the split communicator");
        // every NCCL event has its row, keyed alike
        let events: Vec<_> = c.events.iter().filter(|e| e.pid == wl.pid && e.source == 9).collect();
        let keyed: BTreeSet<(u32, i64)> =
            c.nccl_calls.iter().filter(|n| n.pid == wl.pid).map(|n| (n.tid, n.ts_ns)).collect();
        assert_eq!(events.len(), keyed.len());
        assert!(events.iter().all(|e| keyed.contains(&(e.tid, e.ts_ns))));
        // init: this rank of 2, on the device the rank set (cudaSetDevice(LOCAL_RANK))
        let init = rows(&c, wl.pid, op::NCCL_COMM_INIT_RANK);
        assert_eq!(init.len(), 1);
        assert_eq!((init[0].rank, init[0].nranks, init[0].device), (rank, 2, rank));
        assert_ne!(init[0].comm_hash, 0);
        hashes.insert(init[0].comm_hash);
        // the step all-reduces: numbered 1..25 on the world communicator, 1 MiB of float32, sum
        let ar: Vec<_> =
            rows(&c, wl.pid, op::NCCL_ALL_REDUCE).into_iter().filter(|n| n.comm_hash == init[0].comm_hash).collect();
        assert_eq!(ar.iter().map(|n| n.seq).collect::<Vec<_>>(), (1..=25).collect::<Vec<_>>());
        assert!(ar.iter().all(|n| (n.count, n.datatype, n.redop, n.rank, n.device) == (262_144, 7, 0, rank, rank)));
        let ev = c.events.iter().find(|e| e.pid == wl.pid && op::NCCL_ALL_REDUCE.is(e.source, e.op)).unwrap();
        assert_eq!((ev.arg0, ev.arg1, ev.gpu_id), (1 << 20, 262_144, rank), "bytes, elements, device");
        // the extras after the loop: broadcast / reduce rooted at 0, one send and one receive
        let bcast = rows(&c, wl.pid, op::NCCL_BROADCAST);
        assert_eq!((bcast.len(), bcast[0].peer, bcast[0].seq), (1, 0, 26));
        let reduce = rows(&c, wl.pid, op::NCCL_REDUCE);
        assert_eq!((reduce.len(), reduce[0].peer, reduce[0].seq), (1, 0, 27));
        let (send, recv) = (rows(&c, wl.pid, op::NCCL_SEND), rows(&c, wl.pid, op::NCCL_RECV));
        assert_eq!((send.len(), send[0].peer, send[0].seq), (1, 1 - rank, 1));
        assert_eq!((recv.len(), recv[0].peer, recv[0].seq), (1, 1 - rank, 1));
        // the split: color rank % 2, a communicator of its own, its all-reduce numbered 1
        let split = rows(&c, wl.pid, op::NCCL_COMM_SPLIT);
        assert_eq!((split.len(), split[0].peer), (1, rank % 2));
        let on_split: Vec<_> =
            rows(&c, wl.pid, op::NCCL_ALL_REDUCE).into_iter().filter(|n| n.comm_hash == split[0].comm_hash).collect();
        assert_eq!(on_split.iter().map(|n| n.seq).collect::<Vec<_>>(), vec![1]);
        assert_eq!(rows(&c, wl.pid, op::NCCL_COMM_DESTROY).len(), 2);
        // the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE, as torchrun sets them); a
        // process is read again after its exec, and the last row for a pid is what the table keeps
        let job = c.process_ranks.iter().rev().find(|p| p.pid == wl.pid).expect("a process_ranks row");
        assert_eq!((job.rank, job.local_rank, job.world_size, job.launcher.as_str()), (rank, rank, 2, "torch"));
    }
    assert_eq!(hashes.len(), 1, "one world communicator on both ranks");
    // the two colors are two communicators
    let splits: BTreeSet<i64> =
        c.nccl_calls.iter().filter(|n| n.op == op::NCCL_COMM_SPLIT.op).map(|n| n.comm_hash).collect();
    assert_eq!(splits.len(), 2);
    // what the trace covers: libnccl attached for both ranks
    let nccl: Vec<_> = c.attachments.iter().filter(|a| a.kind == "nccl").collect();
    assert!(nccl.iter().all(|a| a.path.ends_with("libnccl.so.2")), "{nccl:?}");
    assert!(w.values().all(|wl| nccl.iter().any(|a| a.pid == wl.pid)), "{:?}", c.attachments);
}

#[test]
fn init_all_in_one_process_names_each_rank_and_groups_its_calls() {
    require_root();
    let (r, c, w) = traced(&["nccl_ranks", "--all-in-one", "2", "--steps", "10"]);
    assert_eq!(r.command_exit, Some(0));
    let wl = &w[&0];
    assert_calls_exact(wl, &c.events);
    let init = rows(&c, wl.pid, op::NCCL_COMM_INIT_ALL);
    assert_eq!((init.len(), init[0].nranks), (1, 2));
    assert_ne!(init[0].comm_hash, 0);
    assert_eq!(rows(&c, wl.pid, op::NCCL_GROUP_START).len(), 10);
    assert_eq!(rows(&c, wl.pid, op::NCCL_GROUP_END).len(), 10);
    // one communicator, two ranks on devices 0 and 1, each numbering its all-reduces 1..10
    let ar = rows(&c, wl.pid, op::NCCL_ALL_REDUCE);
    assert_eq!(ar.len(), 20);
    for rank in [0, 1] {
        let mine: Vec<_> = ar.iter().filter(|n| n.rank == rank).collect();
        assert_eq!(mine.iter().map(|n| n.seq).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>(), "rank {rank}");
        assert!(mine.iter().all(|n| n.comm_hash == init[0].comm_hash && n.device == rank && n.nranks == 2));
    }
}
