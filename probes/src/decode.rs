//! Ring records to [`Event`]s: the monotonic BPF clock to the unix epoch, wire fields to the event
//! model's columns (see `causeway_model::codes` for what each arg means per op).

use causeway_model::codes::op;
use causeway_model::{Event, PrevState, SchedDetail};

use crate::wire::{self, CallRec, Record};

/// `clock` now, ns.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Unix time now, ns (0 before 1970): when the tracer read something itself (a sample, an
/// attach), in the clock the events are stored in.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Offset from CLOCK_MONOTONIC (what `bpf_ktime_get_ns` reads) to CLOCK_REALTIME, measured once.
pub fn mono_to_realtime_offset() -> i64 {
    // the sample with the tightest bracket wins
    (0..5)
        .map(|_| {
            let a = clock_ns(libc::CLOCK_MONOTONIC);
            let r = clock_ns(libc::CLOCK_REALTIME);
            let b = clock_ns(libc::CLOCK_MONOTONIC);
            (b - a, r - (a + (b - a) / 2))
        })
        .min()
        .map(|(_, off)| off)
        .unwrap_or(0)
}

/// Which `causeway_model::Source` a record's loss is charged to, from its raw bytes (a record that
/// does not decode still says its kind, and a call its source, in its first two bytes): calls and
/// launches to their own source (runtime, driver, graphs), block requests to 5, socket calls to 7
/// and TCP events to 6, name facts to 1 (they come from the CUDA libraries), the scheduler and
/// process records to 3.
pub fn loss_source(buf: &[u8]) -> u8 {
    match buf.first() {
        Some(&wire::REC_CALL) | Some(&wire::REC_LAUNCH) | Some(&wire::REC_NCCL) => {
            buf.get(1).copied().filter(|s| *s < 16).unwrap_or(1)
        }
        Some(&wire::REC_BLOCK) => 5,
        Some(&wire::REC_NET) => 7,
        Some(&wire::REC_TCP) => 6,
        Some(&wire::REC_NAME) => 1,
        _ => 3,
    }
}

pub struct Decoder {
    pub offset_ns: i64,
    /// tid -> comm: call records carry the comm only on a thread's first call; switch, wake-up and
    /// process records keep it fresh.
    comms: std::collections::HashMap<u32, String>,
    /// Socket peers met so far by their raw (family, address, port), with their `net_peers` key:
    /// a socket call finds its peer with one lookup; only a new peer is formatted and hashed.
    peers: std::collections::HashMap<(u16, [u8; 16], u16), i64>,
    /// Peers met since [`Decoder::take_new_peers`] last took them (an IPv4 peer met through both an
    /// IPv4 and a dual-stack socket comes twice, under one key: the table keeps it once).
    new_peers: Vec<causeway_model::NetPeer>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::with_offset(mono_to_realtime_offset())
    }

    pub fn with_offset(offset_ns: i64) -> Decoder {
        Decoder { offset_ns, comms: Default::default(), peers: Default::default(), new_peers: Vec::new() }
    }

    /// The peers met for the first time since the last call (`net_peers` rows to write).
    pub(crate) fn take_new_peers(&mut self) -> Vec<causeway_model::NetPeer> {
        std::mem::take(&mut self.new_peers)
    }

    /// The `net_peers` key of a record's peer (0: the socket had none).
    fn peer_key(&mut self, n: &wire::NetRec) -> i64 {
        if n.family == 0 {
            return 0;
        }
        let new = &mut self.new_peers;
        *self.peers.entry((n.family, n.addr, n.dport)).or_insert_with(|| {
            let p = n.peer();
            let key = p.peer;
            new.push(p);
            key
        })
    }

    fn comm_of(&mut self, tid: u32, comm: String) -> String {
        if comm.is_empty() {
            if let Some(c) = self.comms.get(&tid) {
                return c.clone();
            }
            return std::fs::read_to_string(format!("/proc/{tid}/comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
        }
        if self.comms.get(&tid) != Some(&comm) {
            if self.comms.len() > 100_000 {
                self.comms.clear();
            }
            self.comms.insert(tid, comm.clone());
        }
        comm
    }

    fn t(&self, mono: u64) -> i64 {
        (mono as i64).saturating_add(self.offset_ns)
    }

    fn call(&mut self, mut c: CallRec, launch_config: i64) -> Event {
        c.comm = self.comm_of(c.tid, std::mem::take(&mut c.comm));
        Event {
            ts_ns: self.t(c.ts),
            dur_ns: c.dur as i64,
            pid: c.pid,
            tid: c.tid,
            cpu: c.cpu as i32,
            source: c.source,
            op: c.op,
            arg0: c.arg0 as i64,
            arg1: c.arg1 as i64,
            arg2: c.arg2 as i64,
            ret_code: c.ret as i32,
            comm: c.comm,
            launch_config,
            ..Default::default()
        }
    }

    /// The event a record stands for; None for the records that are not events (kernel-name facts,
    /// the loader's notifications and Python code objects, which the session handles itself).
    pub fn event(&mut self, rec: Record) -> Option<Event> {
        let event = match rec {
            Record::Call(c) => self.call(c, 0),
            Record::Launch(c, cfg) => self.call(c, cfg.to_model().key()),
            Record::Nccl(c, _) => self.call(c, 0),
            Record::Name(_) | Record::Dl(_) | Record::PyCode(_) | Record::Fp(_) => return None,
            Record::Switch(mut s) => {
                s.comm = self.comm_of(s.tid, std::mem::take(&mut s.comm));
                Event {
                    ts_ns: self.t(s.ts_in),
                    dur_ns: s.ts_in.saturating_sub(s.ts_out) as i64,
                    pid: s.pid,
                    tid: s.tid,
                    cpu: s.cpu as i32,
                    source: op::SCHED_SWITCH.source,
                    op: op::SCHED_SWITCH.op,
                    arg1: s.pid as i64,
                    comm: s.comm,
                    sched: Some(SchedDetail {
                        prev_state: PrevState::from_code(s.prev_state as i64),
                        next_pid: s.next_pid,
                        next_tid: s.next_tid,
                        next_comm: s.next_comm,
                        wake_ts_ns: if s.wake_ts == 0 { 0 } else { self.t(s.wake_ts) },
                        waker_pid: s.waker_pid,
                        waker_tid: s.waker_tid,
                    }),
                    ..Default::default()
                }
            }
            Record::Wakeup(w) => Event {
                ts_ns: self.t(w.ts),
                pid: w.pid,
                tid: w.tid,
                cpu: w.cpu as i32,
                source: op::SCHED_WAKEUP.source,
                op: op::SCHED_WAKEUP.op,
                arg1: w.wakee_pid as i64,
                arg2: w.wakee_tid as i64,
                comm: w.comm,
                ..Default::default()
            },
            Record::Proc(mut p) => {
                if p.what == wire::PROC_EXEC {
                    p.comm = self.comm_of(p.tid, std::mem::take(&mut p.comm));
                }
                let code = match p.what {
                    wire::PROC_FORK => op::PROCESS_FORK,
                    wire::PROC_EXEC => op::PROCESS_EXEC,
                    wire::PROC_EXIT => op::PROCESS_EXIT,
                    // the wire parser admits no other kind
                    _ => op::OOM_KILL, // wire::PROC_OOM
                };
                Event {
                    ts_ns: self.t(p.ts),
                    pid: p.pid,
                    tid: p.tid,
                    cpu: p.cpu as i32,
                    source: code.source,
                    op: code.op,
                    arg0: if p.what == wire::PROC_EXIT { p.exit_code as i64 } else { 0 },
                    arg1: p.child_pid as i64,
                    arg2: p.child_tid as i64,
                    comm: p.comm,
                    ..Default::default()
                }
            }
            Record::Block(b) => {
                let code = match b.op {
                    1 => op::BLOCK_READ,
                    2 => op::BLOCK_WRITE,
                    _ => op::BLOCK_DISCARD,
                };
                Event {
                    ts_ns: self.t(b.ts),
                    dur_ns: b.dur as i64,
                    pid: b.pid,
                    tid: b.tid,
                    cpu: b.cpu as i32,
                    source: code.source,
                    op: code.op,
                    arg0: b.bytes as i64,
                    arg1: b.dev as i64,
                    arg2: b.sector as i64,
                    comm: b.comm,
                    ..Default::default()
                }
            }
            Record::Net(n) => {
                let code = match (n.tcp, n.op) {
                    (false, 1) => op::NET_SEND,
                    (false, 2) => op::NET_RECV,
                    (false, 3) => op::NET_CONNECT,
                    (false, _) => op::NET_ACCEPT,
                    (true, 1) => op::TCP_RETRANSMIT,
                    (true, _) => op::TCP_STATE,
                };
                let peer = self.peer_key(&n);
                let (arg0, arg1, ret_code) = match (n.tcp, n.op) {
                    // retransmit: the socket's state; state change: old, new
                    (true, 1) => (n.fd as i64, 0, 0),
                    (true, _) => (n.fd as i64, n.ret, 0),
                    // accept: the new connection's fd
                    (false, 4) => (0, n.ret.max(-1), n.ret.min(0) as i32),
                    (false, _) => (n.ret.max(0), n.fd as i64, n.ret.min(0) as i32),
                };
                Event {
                    ts_ns: self.t(n.ts),
                    dur_ns: n.dur as i64,
                    pid: n.pid,
                    tid: n.tid,
                    cpu: n.cpu as i32,
                    source: code.source,
                    op: code.op,
                    arg0,
                    arg1,
                    arg2: peer,
                    ret_code,
                    comm: n.comm,
                    ..Default::default()
                }
            }
        };
        Some(event)
    }
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

/// FNV-1a 64 over the instruction pointers of a stack and, when it has Python frames, their own
/// hash (the `stack_hash` key: one `stack_traces` row per distinct native + Python stack).
pub fn stack_hash(ips: &[u64], python: Option<u64>) -> i64 {
    let mut h = causeway_model::fnv::Fnv1a64::new();
    for ip in ips {
        h.write(&ip.to_le_bytes());
    }
    if let Some(p) = python {
        h.write(b"py");
        h.write(&p.to_le_bytes());
    }
    ((h.finish() & i64::MAX as u64) as i64).max(1) /* positive, never 0 (0 = no stack) */
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{CallRec, SwitchRec};

    #[test]
    fn graph_launch_keeps_source_8_and_switch_keeps_its_interval() {
        let mut d = Decoder::with_offset(1_000);
        let c = CallRec {
            source: 8,
            op: 4,
            cpu: 0,
            pid: 1,
            tid: 2,
            ts: 10,
            dur: 5,
            arg0: 0,
            arg1: 0,
            arg2: 0,
            ret: 0,
            stack_id: -1,
            py_stack: 0,
            comm: "x".into(),
        };
        let e = d.event(Record::Call(c.clone())).unwrap();
        assert_eq!((e.source, e.op, e.ts_ns, e.end_ns()), (8, 4, 1_010, 1_015));
        assert_eq!(e.launch_config, 0);
        // later calls of the thread come without a comm: the decoder remembers it
        let e = d.event(Record::Call(CallRec { comm: String::new(), ..c })).unwrap();
        assert_eq!(e.comm, "x");
        let s = SwitchRec {
            prev_state: 1,
            cpu: 3,
            pid: 7,
            tid: 8,
            ts_out: 100,
            ts_in: 250,
            wake_ts: 200,
            next_pid: 9,
            next_tid: 10,
            waker_pid: 11,
            waker_tid: 12,
            comm: "gpu".into(),
            next_comm: "hog".into(),
        };
        let e = d.event(Record::Switch(s)).unwrap();
        assert_eq!(e.off_cpu_interval(), (1_100, 1_250));
        let sd = e.sched.unwrap();
        assert_eq!((sd.prev_state, sd.wake_ts_ns, sd.next_comm.as_str()), (PrevState::Sleeping, 1_200, "hog"));
    }

    #[test]
    fn losses_of_undecodable_records_go_to_their_source() {
        assert_eq!(loss_source(&[wire::REC_CALL, 4, 0]), 4, "a driver call");
        assert_eq!(loss_source(&[wire::REC_LAUNCH, 8]), 8, "a graph launch");
        assert_eq!(loss_source(&[wire::REC_BLOCK]), 5);
        assert_eq!(loss_source(&[wire::REC_SWITCH]), 3);
        assert_eq!(loss_source(&[]), 3);
    }

    #[test]
    fn realtime_offset_is_plausible() {
        let off = mono_to_realtime_offset();
        assert!(off > 1_600_000_000 * 1_000_000_000i64 - 10i64.pow(18), "{off}");
    }
}
