//! What was still going on when a trace ended. Events are written when they end (a call at its
//! return, an off-CPU interval at the switch back in), so a call that never returned and a thread
//! asleep since long ago would leave no trace at all: exactly the hang a user traced to find. At
//! the end of a trace, before the probes go, every live thread of the traced processes is looked up
//! in the two maps that hold what is under way:
//! - `cw_inflight` (task storage, read by a pidfd of the thread): its calls in flight. Each becomes
//!   a call event whose `ret_code` is [`RET_IN_FLIGHT`] and whose duration runs to the end of the
//!   trace (it took at least that long);
//! - `cw_offcpu` (by tid): the off-CPU interval it is in. It becomes a `sched_switch` event whose
//!   switch-in is the end of the trace, with its state, the task that took its CPU and its waker.
//!
//! So every answer sees a hung call as the slowest call of its thread, explained by what the
//! thread went through, and `explain` names it first.
//!
//! While the trace runs, the same read every [`LOOK_EVERY`] (`--in-flight-every`) keeps the calls
//! in flight for [`LONG_IN_FLIGHT_NS`] or more and their threads' open off-CPU intervals
//! ([`worth_keeping`]) and replaces the session's `under_way` rows with them: a hang is in the
//! trace while it is still being written, and stays there if the tracer is killed. The layouts read here are the C structs'
//! (checked there by `_Static_assert`s: `ebpf/common.bpf.h`, `ebpf/sched.bpf.c`).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use causeway_model::codes::{Source, LONG_IN_FLIGHT_NS, RET_IN_FLIGHT};
use causeway_model::Event;

use crate::decode::Decoder;
use crate::wire::{CallRec, Record, SwitchRec};

/// How often a running trace writes out what is under way, by default.
pub const LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// What a look during the trace keeps of a [`Snapshot`]'s events: the calls in flight for
/// [`LONG_IN_FLIGHT_NS`] or more, and the open off-CPU intervals of their threads (a call a few ms
/// old is a step under way, not news).
pub fn worth_keeping(events: Vec<Event>) -> Vec<Event> {
    let long = |e: &Event| e.ret_code == RET_IN_FLIGHT && e.sched.is_none() && e.dur_ns >= LONG_IN_FLIGHT_NS;
    let tids: std::collections::HashSet<u32> = events.iter().filter(|e| long(e)).map(|e| e.tid).collect();
    events.into_iter().filter(|e| long(e) || (e.sched.is_some() && tids.contains(&e.tid))).collect()
}

/// `struct cw_stash`: size and field offsets.
const STASH_SIZE: usize = 88;
/// `struct cw_slots`: five stashes, then the thread state.
const SLOTS: usize = 5;
const SLOTS_SIZE: usize = 448;
/// The slot of the calls that name kernels (not calls: never in flight as an event).
const SLOT_NAME: usize = 2;
/// `struct cw_offcpu`.
const OFFCPU_SIZE: usize = 64;

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The calls in flight in one thread's slots (`struct cw_slots` bytes), as call records ending at
/// `now` (monotonic ns).
pub fn calls_of(slots: &[u8], pid: u32, tid: u32, now: u64) -> Vec<CallRec> {
    let mut out = Vec::new();
    if slots.len() < SLOTS_SIZE {
        return out;
    }
    for i in (0..SLOTS).filter(|&i| i != SLOT_NAME) {
        let s = &slots[i * STASH_SIZE..(i + 1) * STASH_SIZE];
        let (ts, op, source) = (u64_at(s, 0), u16::from_ne_bytes([s[40], s[41]]), s[42]);
        if ts == 0 || op == 0 || source == 0 || ts > now {
            continue;
        }
        let (a0, a1, a2) = (u64_at(s, 8), u64_at(s, 16), u64_at(s, 24));
        // an NCCL stash holds the element count, the communicator and the stream; its event says
        // bytes (unknown here), elements and stream
        let (arg0, arg1, arg2) = if source == Source::Nccl.code() { (0, a0, a2) } else { (a0, a1, a2) };
        out.push(CallRec {
            source,
            op,
            cpu: u32::MAX,
            pid,
            tid,
            ts,
            dur: now - ts,
            arg0,
            arg1,
            arg2,
            ret: RET_IN_FLIGHT as i64,
            stack_id: -1,
            py_stack: 0,
            comm: String::new(),
        });
    }
    out
}

/// The off-CPU interval a thread is in (`struct cw_offcpu` bytes), closed at `now`.
pub fn off_cpu_of(o: &[u8], pid: u32, tid: u32, now: u64) -> Option<SwitchRec> {
    if o.len() < OFFCPU_SIZE {
        return None;
    }
    let ts_out = u64_at(o, 0);
    if ts_out == 0 || ts_out > now {
        return None;
    }
    let comm = |b: &[u8]| {
        let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    Some(SwitchRec {
        prev_state: o[36],
        cpu: u32_at(o, 32),
        pid,
        tid,
        ts_out,
        ts_in: now,
        wake_ts: u64_at(o, 8),
        next_pid: u32_at(o, 16),
        next_tid: u32_at(o, 20),
        waker_pid: u32_at(o, 24),
        waker_tid: u32_at(o, 28),
        comm: String::new(),
        next_comm: comm(&o[37..53]),
    })
}

/// `bpf(BPF_MAP_LOOKUP_ELEM)` of `key` into `value`; false when absent or refused.
fn lookup(map: RawFd, key: &[u8], value: &mut [u8]) -> bool {
    #[repr(C)]
    struct Attr {
        map_fd: u32,
        pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let attr =
        Attr { map_fd: map as u32, pad: 0, key: key.as_ptr() as u64, value: value.as_mut_ptr() as u64, flags: 0 };
    // SAFETY: the kernel reads `key` (the map's key size, which the caller's buffer has) and
    // writes the map's value size into `value` (the caller's buffer is that size).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            1, /* BPF_MAP_LOOKUP_ELEM */
            &attr as *const Attr,
            std::mem::size_of::<Attr>(),
        )
    };
    rc == 0
}

/// A pidfd of thread `tid` (`PIDFD_THREAD`, Linux 6.9+), the key of task storage.
pub(crate) fn thread_pidfd(tid: u32) -> Option<OwnedFd> {
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::pid_t, PIDFD_THREAD) };
    // SAFETY: a new fd owned by nothing else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What the end of a trace found under way.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The calls in flight and the open off-CPU intervals, as events ending now.
    pub events: Vec<Event>,
    /// Threads whose calls could not be read (no `PIDFD_THREAD` before Linux 6.9).
    pub unreadable: u64,
}

/// Read every live thread of `pids`: `inflight` and `offcpu` are the maps' fds.
pub fn snapshot(pids: &[u32], inflight: Option<RawFd>, offcpu: Option<RawFd>) -> Snapshot {
    // bpf_ktime_get_ns's clock
    let now = crate::labels::monotonic_ns().max(0) as u64;
    let mut decoder = Decoder::new();
    let mut snap = Snapshot::default();
    let mut slots = vec![0u8; SLOTS_SIZE];
    let mut off = vec![0u8; OFFCPU_SIZE];
    for &pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        let mut tids: Vec<u32> = tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse().ok()).collect();
        tids.sort_unstable();
        for tid in tids {
            let mut recs: Vec<Record> = Vec::new();
            if let Some(map) = inflight {
                match thread_pidfd(tid) {
                    Some(fd) => {
                        use std::os::fd::AsRawFd;
                        let key = fd.as_raw_fd().to_ne_bytes();
                        if lookup(map, &key, &mut slots) {
                            recs.extend(calls_of(&slots, pid, tid, now).into_iter().map(Record::Call));
                        }
                    }
                    None => snap.unreadable += 1,
                }
            }
            if let Some(map) = offcpu {
                if lookup(map, &tid.to_ne_bytes(), &mut off) {
                    recs.extend(off_cpu_of(&off, pid, tid, now).map(Record::Switch));
                }
            }
            snap.events.extend(recs.into_iter().filter_map(|r| decoder.event(r)));
        }
    }
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stash(slots: &mut [u8], i: usize, ts: u64, op: u16, source: u8, args: [u64; 3]) {
        let s = &mut slots[i * STASH_SIZE..(i + 1) * STASH_SIZE];
        s[0..8].copy_from_slice(&ts.to_ne_bytes());
        for (k, a) in args.iter().enumerate() {
            s[8 + 8 * k..16 + 8 * k].copy_from_slice(&a.to_ne_bytes());
        }
        s[40..42].copy_from_slice(&op.to_ne_bytes());
        s[42] = source;
    }

    #[test]
    fn the_calls_in_flight_are_the_busy_slots_but_the_naming_one() {
        let mut slots = vec![0u8; SLOTS_SIZE];
        // a runtime sync (slot 0) wrapping a driver sync (slot 1); a name lookup (slot 2); an
        // NCCL all-reduce (slot 3)
        stash(&mut slots, 0, 1_000, 5, 1, [0, 0, 0x5]);
        stash(&mut slots, 1, 1_500, 9, 4, [0, 0, 0x5]);
        stash(&mut slots, 2, 1_600, 0, 0, [7, 0, 0]);
        stash(&mut slots, 3, 900, 1, 9, [1024, 0xc0, 0x6]);
        let calls = calls_of(&slots, 10, 11, 10_000);
        let got: Vec<(u8, u16, u64, u64, u64, u64, i64)> =
            calls.iter().map(|c| (c.source, c.op, c.ts, c.dur, c.arg1, c.arg2, c.ret)).collect();
        assert_eq!(
            got,
            vec![(1, 5, 1_000, 9_000, 0, 0x5, -1), (4, 9, 1_500, 8_500, 0, 0x5, -1), (9, 1, 900, 9_100, 1024, 0x6, -1)]
        );
        assert!(calls_of(&slots[..100], 10, 11, 10_000).is_empty(), "short: nothing");
        assert!(calls_of(&slots, 10, 11, 950).len() == 1, "a slot stamped after now is not read");
    }

    #[test]
    fn an_open_off_cpu_interval_closes_at_the_end() {
        let mut o = vec![0u8; OFFCPU_SIZE];
        o[0..8].copy_from_slice(&5_000u64.to_ne_bytes());
        o[16..20].copy_from_slice(&9912u32.to_ne_bytes());
        o[20..24].copy_from_slice(&9913u32.to_ne_bytes());
        o[32..36].copy_from_slice(&1u32.to_ne_bytes());
        o[36] = 1; // interruptible sleep
        o[37..50].copy_from_slice(b"backup-rsync\0");
        let s = off_cpu_of(&o, 10, 11, 9_000).unwrap();
        assert_eq!((s.ts_out, s.ts_in, s.cpu, s.prev_state, s.next_tid), (5_000, 9_000, 1, 1, 9913));
        assert_eq!(s.next_comm, "backup-rsync");
        assert!(off_cpu_of(&[0u8; OFFCPU_SIZE], 10, 11, 9_000).is_none(), "none open");
    }
}
