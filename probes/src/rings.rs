//! The tracer's two loops besides the session itself: the ring reader thread (poll the three BPF
//! rings, decode, batch, send; the loader's notifications at once on their own channel) and the
//! in-kernel aggregates turned into summary events once a second.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_model::codes::op;
use causeway_model::Event;

use crate::decode::{loss_source, now_ns, stack_hash, Decoder};
use crate::loader::{Probes, Rings};
use crate::nccl::NcclTracker;
use crate::python::{PyCodes, PyStack};
use crate::wire::{self, cnt};

#[derive(Default)]
pub(crate) struct Msg {
    pub events: Vec<Event>,
    pub stacks: Vec<StackMsg>,
    /// maps of processes, read by the reader when it first saw their calls (they may be gone now)
    pub maps: Vec<(u32, Vec<crate::symbols::Mapping>)>,
    /// launch configurations not sent before
    pub launch_configs: Vec<causeway_model::LaunchConfig>,
    /// kernel-name facts
    pub names: Vec<wire::NameRec>,
    /// what the batch's NCCL calls did (`nccl_calls`)
    pub nccl: Vec<causeway_model::NcclCall>,
    /// socket peers not sent before (`net_peers`)
    pub peers: Vec<causeway_model::NetPeer>,
    /// what traced processes touched (`trace --footprint`)
    pub footprint: Vec<wire::FpRec>,
}

/// A stack not sent before: its hash, the process, the native instruction pointers (innermost
/// first; empty when the native stack could not be read) and the Python frames, if any.
pub(crate) struct StackMsg {
    pub hash: i64,
    pub pid: u32,
    pub ips: Vec<u64>,
    pub python: Option<PyStack>,
}

impl Msg {
    fn with_capacity() -> Msg {
        Msg { events: Vec::with_capacity(8192), ..Default::default() }
    }
}

/// The in-kernel aggregates since the last call, as summary events.
pub(crate) fn summary_events(
    probes: &Probes,
    prev: &mut [u64],
    prev_pages: &mut HashMap<u32, (u64, u64)>,
) -> Vec<Event> {
    let now = now_ns();
    let c = probes.counters();
    let d = |i: u32| c[i as usize].saturating_sub(prev[i as usize]) as i64;
    let mut out = Vec::new();
    let mk = |code: causeway_model::OpCode, pid: u32, arg0: i64, arg1: i64| Event {
        ts_ns: now,
        pid,
        cpu: -1,
        source: code.source,
        op: code.op,
        arg0,
        arg1,
        ..Default::default()
    };
    if d(cnt::SWITCH_OTHER) > 0 {
        let mut e = mk(op::SCHED_SWITCH_SUMMARY, 0, 0, d(cnt::SWITCH_OTHER));
        e.dur_ns = d(cnt::SWITCH_OTHER_NS);
        out.push(e);
    }
    if d(cnt::WAKEUP_OTHER) > 0 {
        out.push(mk(op::SCHED_WAKEUP_SUMMARY, 0, 0, d(cnt::WAKEUP_OTHER)));
    }
    if d(cnt::BLOCK_OTHER) > 0 {
        out.push(mk(op::BLOCK_SUMMARY, 0, d(cnt::BLOCK_OTHER_BYTES), d(cnt::BLOCK_OTHER)));
    }
    if d(cnt::PAGE_OTHER) > 0 {
        out.push(mk(op::MM_PAGE_ALLOC_SUMMARY, 0, d(cnt::PAGE_OTHER_BYTES), d(cnt::PAGE_OTHER)));
    }
    if d(cnt::NET_SEND_OTHER) > 0 {
        out.push(mk(op::NET_SEND_SUMMARY, 0, d(cnt::NET_SEND_OTHER_BYTES), d(cnt::NET_SEND_OTHER)));
    }
    if d(cnt::NET_RECV_OTHER) > 0 {
        out.push(mk(op::NET_RECV_SUMMARY, 0, d(cnt::NET_RECV_OTHER_BYTES), d(cnt::NET_RECV_OTHER)));
    }
    if d(cnt::TCP_RETRANS_OTHER) > 0 {
        out.push(mk(op::TCP_RETRANSMIT_SUMMARY, 0, 0, d(cnt::TCP_RETRANS_OTHER)));
    }
    for (pid, p) in probes.pages() {
        let (pc, pb) = prev_pages.get(&pid).copied().unwrap_or((0, 0));
        if p.count > pc {
            out.push(mk(op::MM_PAGE_ALLOC_SUMMARY, pid, (p.bytes - pb) as i64, (p.count - pc) as i64));
            prev_pages.insert(pid, (p.count, p.bytes));
        }
    }
    prev.copy_from_slice(&c);
    out
}

/// The ring reader thread: poll the three rings, decode, batch, send. Launch configurations go out
/// once each, name facts with the batch, the loader's notifications at once on their own channel
/// (a stopped process waits for them). After `stop` it drains the rings once more completely and
/// ends (closing the channels).
pub(crate) fn read_rings(
    mut rings: Rings,
    tx: tokio::sync::mpsc::Sender<Msg>,
    dl_tx: tokio::sync::mpsc::UnboundedSender<wire::DlRec>,
    stop: Arc<AtomicBool>,
    errors: Arc<std::sync::Mutex<[u64; 16]>>,
    delay: Duration,
) {
    use std::os::fd::AsRawFd;
    let mut decoder = Decoder::new();
    let mut nccl = NcclTracker::default();
    let mut seen_stacks: HashSet<i64> = HashSet::new();
    let mut py_codes = PyCodes::default();
    let mut seen_configs: HashSet<i64> = HashSet::new();
    let mut mapped: HashSet<u32> = HashSet::new();
    let mut batch = Msg::with_capacity();
    let mut last_send = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let mut fds = [rings.sched.as_raw_fd(), rings.cuda.as_raw_fd(), rings.host.as_raw_fd()]
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        if !stopping && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if !stopping {
            // SAFETY: three valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 3, 10) };
        }
        // sched first: a call's off-CPU intervals are read before the call itself
        for which in 0..3 {
            let ring = match which {
                0 => &mut rings.sched,
                1 => &mut rings.cuda,
                _ => &mut rings.host,
            };
            while let Some(item) = ring.next() {
                let rec = match wire::parse(&item) {
                    Ok(rec) => rec,
                    Err(_) => {
                        errors.lock().unwrap()[loss_source(&item) as usize] += 1;
                        continue;
                    }
                };
                let call = match &rec {
                    wire::Record::Dl(d) => {
                        let _ = dl_tx.send(d.clone());
                        continue;
                    }
                    wire::Record::Name(n) => {
                        let mut n = n.clone();
                        if n.name.is_empty() && n.carries_name() && n.other != 0 {
                            // BPF could not read the string (its page was not resident yet): the
                            // process is alive and paused in or just after the call; read it here
                            n.name = read_process_string(n.pid, n.other, wire::NAME_MAX).unwrap_or_default();
                        }
                        batch.names.push(n);
                        continue;
                    }
                    wire::Record::Launch(c, cfg) => {
                        let cfg = cfg.to_model();
                        if seen_configs.insert(cfg.key()) {
                            batch.launch_configs.push(cfg);
                        }
                        Some(c)
                    }
                    wire::Record::Call(c) | wire::Record::Nccl(c, _) => Some(c),
                    wire::Record::PyCode(p) => {
                        py_codes.add(p.clone());
                        continue;
                    }
                    wire::Record::Fp(f) => {
                        batch.footprint.push(f.clone());
                        continue;
                    }
                    _ => None,
                };
                let mut stack = None;
                if let Some(c) = call {
                    if mapped.insert(c.pid) {
                        if let Ok(m) = crate::symbols::read_maps(c.pid) {
                            batch.maps.push((c.pid, m));
                        }
                    }
                    let mut ips = Vec::new();
                    if let (Some(st), true) = (rings.stacks.as_ref(), c.stack_id >= 0) {
                        if let Ok(trace) = st.get(&(c.stack_id as u32), 0) {
                            ips = trace.frames().iter().map(|f| f.ip).collect();
                        }
                    }
                    let python = match (rings.py_stacks.as_ref(), c.py_stack) {
                        (Some(m), key) if key != 0 => py_codes.stack(key, |k| m.get(&k, 0).ok()),
                        _ => None,
                    };
                    if !ips.is_empty() || python.is_some() {
                        let h = stack_hash(&ips, python.map(|(_, h)| h));
                        if seen_stacks.insert(h) {
                            let python = python.map(|(p, _)| p.clone());
                            batch.stacks.push(StackMsg { hash: h, pid: c.pid, ips, python });
                        }
                        stack = Some(h);
                    }
                }
                let nccl_args = match &rec {
                    wire::Record::Nccl(_, a) => Some(*a),
                    _ => None,
                };
                if let Some(mut e) = decoder.event(rec) {
                    if let Some(h) = stack {
                        e.stack_hash = h;
                    }
                    match nccl_args {
                        Some(a) => batch.nccl.push(nccl.call(&mut e, &a, &mut read_process_words)),
                        None => nccl.observe(&e),
                    }
                    if op::PROCESS_EXIT.is(e.source, e.op) && e.pid == e.tid {
                        nccl.forget(e.pid);
                    }
                    batch.events.push(e);
                    batch.peers.extend(decoder.take_new_peers());
                }
                if batch.events.len() >= 8192 {
                    if tx.blocking_send(std::mem::replace(&mut batch, Msg::with_capacity())).is_err() {
                        return;
                    }
                    last_send = Instant::now();
                }
            }
        }
        let pending = !batch.events.is_empty()
            || !batch.names.is_empty()
            || !batch.launch_configs.is_empty()
            || !batch.footprint.is_empty();
        if pending && (stopping || last_send.elapsed() >= Duration::from_millis(50)) {
            if tx.blocking_send(std::mem::replace(&mut batch, Msg::with_capacity())).is_err() {
                return;
            }
            last_send = Instant::now();
        }
        if stopping {
            return;
        }
    }
}

/// `n` 8-byte words at `addr` of another process's memory.
fn read_process_words(pid: u32, addr: u64, n: usize) -> Option<Vec<i64>> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; n * 8];
    mem.read_exact_at(&mut buf, addr).ok()?;
    Some(buf.chunks_exact(8).map(|w| i64::from_ne_bytes(w.try_into().unwrap_or_default())).collect())
}

/// A NUL-terminated string of at most `max` bytes from another process's memory (page faults are
/// taken by the kernel on our behalf, unlike in a BPF program).
fn read_process_string(pid: u32, addr: u64, max: usize) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; max];
    let mut got = 0;
    // read page by page: the string may end right before an unmapped page
    while got < max {
        let page_left = 4096 - ((addr as usize + got) % 4096);
        let want = page_left.min(max - got);
        let n = mem.read_at(&mut buf[got..got + want], addr + got as u64).ok()?;
        if n == 0 {
            break;
        }
        if let Some(end) = buf[got..got + n].iter().position(|&b| b == 0) {
            buf.truncate(got + end);
            return String::from_utf8(buf).ok().filter(|s| !s.is_empty());
        }
        got += n;
    }
    None
}
