//! `trace --footprint`: what the traced processes touched, from `ebpf/footprint.bpf.c`. The
//! kernel counts every syscall per (pid, request, syscall) and every descriptor's bytes; the ring
//! brings only what names things (opens, connects, accepts, binds, execs, a request's first and
//! last I/O). [`Footprint`] turns both into the rows of `causeway_model::footprint`:
//!
//! - each look ([`Footprint::look`], every second and at the end) reads `cw_fp_sys` and writes
//!   what each key gained since the last look (`footprint_syscalls`, and the CPU time kept under
//!   the pseudo syscall `CW_FP_NR_CPU` into `footprint_cpu`); a key that did not change since the
//!   last look and can change no more (its process is gone, or serves another request now) is
//!   deleted from the map, so a server answering requests for days keeps it small (an entry the
//!   kernel makes again later starts from zero, and its rows still add up);
//! - a descriptor's row (`footprint_fds`) is written at its close (the close record carries its
//!   counters), and at the end for those still open or whose process exited with them;
//! - a duplicated descriptor's row (`how` = `dup`) named as its original; under `trace --pid`,
//!   what the process held at the attach (`how` = `before_attach`, [`Footprint::adopt`]);
//! - a request's row (`footprint_requests`) when its answer is written, or at the end;
//! - the libraries a process mapped executable: the files it opened and mmapped with PROT_EXEC
//!   (the kernel marks the descriptor), and what `/proc/PID/maps` shows at each look (the program
//!   and the loader, which the kernel maps itself, and what was mapped before an attach).

use std::collections::{HashMap, HashSet};

use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuHashMap};
use aya::Ebpf;
use causeway_model::footprint::syscall_name;
use causeway_model::{FootprintCpu, FootprintExec, FootprintFd, FootprintPart, FootprintRequest, FootprintSyscall};

use crate::footprint_names::{file_label, kind_of, proc_fd_name, sockaddr_label, std_name, text_of};
use crate::wire::{fp, FpRec};

/// CW_FP_NR_CPU: the pseudo syscall under which a process's CPU time is kept.
const NR_CPU: u32 = 0xffff;

/// `struct cw_fp_key`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FpKey {
    pub pid: u32,
    pub request: u32,
    pub nr: u32,
    pub pad: u32,
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for FpKey {}

/// `struct cw_fp_val`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FpVal {
    pub calls: u64,
    pub errors: u64,
    pub ns: u64,
    pub max_ns: u64,
    pub bytes: u64,
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for FpVal {}

/// `struct cw_fp_fdkey`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FpFdKey {
    pub pid: u32,
    pub fd: i32,
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for FpFdKey {}

/// `struct cw_fp_fd`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FpFdVal {
    pub opened: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub reads: u64,
    pub writes: u64,
    pub request: u32,
    pub flags: u32,
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for FpFdVal {}

/// `struct cw_fp_state`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FpState {
    pub request: u32,
    pub fd: i32,
    pub open: u8,
    pub inherited: u8,
    pub pad: [u8; 6],
}
// SAFETY: plain old data, no padding.
unsafe impl aya::Pod for FpState {}

/// The footprint's maps, taken out of the object when `--footprint` loaded it.
pub(crate) struct FpMaps {
    sys: PerCpuHashMap<MapData, FpKey, FpVal>,
    fds: BpfHashMap<MapData, FpFdKey, FpFdVal>,
    state: BpfHashMap<MapData, u32, FpState>,
}

impl FpMaps {
    pub(crate) fn take(ebpf: &mut Ebpf) -> anyhow::Result<FpMaps> {
        let mut take = |name: &str| ebpf.take_map(name).ok_or_else(|| anyhow::anyhow!("map {name} missing"));
        Ok(FpMaps {
            sys: PerCpuHashMap::try_from(take("cw_fp_sys")?)?,
            fds: BpfHashMap::try_from(take("cw_fp_fds")?)?,
            state: BpfHashMap::try_from(take("cw_fp_state")?)?,
        })
    }

    /// Every key's value, summed over the CPUs (the max: the largest).
    fn syscalls(&self) -> Vec<(FpKey, FpVal)> {
        self.sys
            .iter()
            .filter_map(|r| r.ok())
            .map(|(k, per_cpu)| {
                let v = per_cpu.iter().fold(FpVal::default(), |a, v| FpVal {
                    calls: a.calls + v.calls,
                    errors: a.errors + v.errors,
                    ns: a.ns + v.ns,
                    max_ns: a.max_ns.max(v.max_ns),
                    bytes: a.bytes + v.bytes,
                });
                (k, v)
            })
            .collect()
    }

    /// The request each process's work counts under now (0: none).
    fn requests_now(&self) -> HashMap<u32, u32> {
        self.state
            .iter()
            .filter_map(|r| r.ok())
            .map(|(pid, s)| (pid, if s.open != 0 || s.inherited != 0 { s.request } else { 0 }))
            .collect()
    }
}

/// A process is gone (its pid may be reused later: a new process is a new key soon enough).
fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The user-space side of the footprint: rows not written yet, and what is needed to make them.
pub(crate) struct Footprint {
    offset_ns: i64,
    /// Each key's cumulative value at the last look.
    last: HashMap<FpKey, FpVal>,
    /// Descriptors whose open (connect, accept, bind) was seen and whose close was not yet.
    open: HashMap<(u32, i32), FootprintFd>,
    /// What /proc named a descriptor used without a seen open, while its process lived.
    proc_names: HashMap<(u32, i32), String>,
    /// Requests begun and not answered yet.
    requests: HashMap<u32, FootprintRequest>,
    /// Executable files already written per process (from /proc/PID/maps or an exec-mapped open).
    libraries: HashSet<(u32, String)>,
    /// Rows to write.
    pending: FootprintPart,
}

impl Footprint {
    pub(crate) fn new() -> Footprint {
        Footprint {
            offset_ns: crate::decode::mono_to_realtime_offset(),
            last: HashMap::new(),
            open: HashMap::new(),
            proc_names: HashMap::new(),
            requests: HashMap::new(),
            libraries: HashSet::new(),
            pending: FootprintPart::default(),
        }
    }

    fn t(&self, mono: u64) -> i64 {
        if mono == 0 {
            0
        } else {
            (mono as i64).saturating_add(self.offset_ns)
        }
    }

    /// The ring's footprint records, in the order they came.
    pub(crate) fn on_records(&mut self, recs: Vec<FpRec>) {
        for r in recs {
            let ts = self.t(r.ts);
            match r.what {
                fp::OPEN | fp::CONNECT | fp::BIND | fp::ACCEPT => {
                    let (how, (name, flags)) = match r.what {
                        fp::OPEN => ("open", (text_of(&r.text), r.flags as i64)),
                        fp::CONNECT => ("connect", sockaddr_label(&r.text)),
                        fp::BIND => ("bind", sockaddr_label(&r.text)),
                        _ => {
                            let p = causeway_model::NetPeer::of_raw(r.family, &r.addr, r.port);
                            ("accept", (p.label(), i64::from(r.family)))
                        }
                    };
                    let key = (r.pid, r.fd);
                    if r.what != fp::OPEN {
                        // a connect or bind keeps the descriptor's counters (it may have been used before)
                        if let Some(prev) = self.open.get_mut(&key) {
                            if prev.how != "open" {
                                prev.how = how.into();
                                prev.name = name;
                                prev.kind = "socket".into();
                                prev.flags = flags;
                                continue;
                            }
                        }
                    }
                    let row = FootprintFd {
                        pid: r.pid,
                        tid: r.tid,
                        fd: r.fd,
                        kind: if r.what == fp::OPEN { "file".into() } else { "socket".into() },
                        how: how.into(),
                        name,
                        opened_ns: ts,
                        flags,
                        request: r.request,
                        ..Default::default()
                    };
                    if let Some(stale) = self.open.insert(key, row) {
                        // its close was never seen (the kernel sends one when the number is reused)
                        self.pending.fds.push(stale);
                    }
                }
                fp::CLOSE => {
                    let key = (r.pid, r.fd);
                    let mut row = self.open.remove(&key).unwrap_or_else(|| {
                        let name = self
                            .proc_names
                            .remove(&key)
                            .or_else(|| file_label(r.family, &r.addr))
                            .unwrap_or_else(|| std_name(r.fd));
                        FootprintFd {
                            pid: r.pid,
                            fd: r.fd,
                            how: "inherited".into(),
                            name,
                            opened_ns: self.t(r.opened),
                            request: r.request,
                            ..Default::default()
                        }
                    });
                    self.fill_counters(&mut row, r.flags, r.bytes_read, r.bytes_written, r.reads, r.writes);
                    row.closed_ns = if r.ret == 1 { ts } else { 0 };
                    self.push_fd(row);
                }
                fp::DUP => {
                    // the copy is named as its original (bytes through either are its file's)
                    let from = (r.pid, r.ret as i32);
                    let (name, flags) = match self.open.get(&from) {
                        Some(o) => (o.name.clone(), o.flags),
                        None => (
                            self.proc_names
                                .get(&from)
                                .cloned()
                                .or_else(|| file_label(r.family, &r.addr))
                                .or_else(|| proc_fd_name(r.pid, r.fd))
                                .unwrap_or_else(|| std_name(from.1)),
                            0,
                        ),
                    };
                    let row = FootprintFd {
                        pid: r.pid,
                        tid: r.tid,
                        fd: r.fd,
                        kind: kind_of(&name, r.flags, "dup").into(),
                        how: "dup".into(),
                        name,
                        opened_ns: ts,
                        flags,
                        request: r.request,
                        ..Default::default()
                    };
                    if let Some(stale) = self.open.insert((r.pid, r.fd), row) {
                        self.pending.fds.push(stale);
                    }
                }
                fp::EXEC => {
                    let argv = r.text2.split(|&b| b == 0).filter(|a| !a.is_empty()).map(text_of);
                    self.pending.execs.push(FootprintExec {
                        ts_ns: ts,
                        pid: r.pid,
                        ppid: r.ppid,
                        request: r.request,
                        filename: text_of(&r.text),
                        argv: argv.collect::<Vec<_>>().join(" "),
                    });
                }
                fp::REQ_BEGIN => {
                    let q = FootprintRequest {
                        pid: r.pid,
                        request: r.request,
                        fd: r.fd,
                        begin_ns: ts,
                        bytes_in: r.ret,
                        head_in: text_of(&r.text),
                        ..Default::default()
                    };
                    self.requests.insert(r.request, q);
                }
                fp::REQ_END => {
                    if let Some(mut q) = self.requests.remove(&r.request) {
                        q.end_ns = ts;
                        q.bytes_out = r.ret;
                        q.head_out = text_of(&r.text);
                        self.pending.requests.push(q);
                    }
                }
                _ => {}
            }
        }
    }

    /// `trace --pid`: what `pid` holds open as the trace attaches, named now and counted from now
    /// on (`how` = `before_attach`; `footprint_names.rs`). A descriptor the kernel saw opened
    /// since the attach keeps its own entry; one it saw only used gets the flags /proc tells (an
    /// accepted connection's requests). A note when it held more than were named.
    pub(crate) fn adopt(&mut self, maps: &mut FpMaps, pid: u32) -> Option<String> {
        let (held, total) = crate::footprint_names::held_descriptors(pid);
        let named = held.len();
        for h in held {
            let key = FpFdKey { pid, fd: h.fd };
            let val = match maps.fds.get(&key, 0) {
                Ok(v) if v.opened != 0 => continue,
                Ok(v) => FpFdVal { flags: v.flags | h.fd_flags as u32, ..v },
                Err(_) => FpFdVal { flags: h.fd_flags as u32, ..Default::default() },
            };
            if maps.fds.insert(key, val, 0).is_err() {
                continue; // the table is full: the kernel counts that
            }
            let row = FootprintFd {
                pid,
                fd: h.fd,
                kind: h.kind.into(),
                how: "before_attach".into(),
                name: h.name,
                flags: h.flags,
                ..Default::default()
            };
            self.open.entry((pid, h.fd)).or_insert(row);
        }
        (total > named).then(|| {
            format!("footprint: pid {pid} held {total} descriptors at the attach; the first {named} were named")
        })
    }

    fn fill_counters(&self, row: &mut FootprintFd, flags: u64, br: u64, bw: u64, reads: u64, writes: u64) {
        row.bytes_read = br as i64;
        row.bytes_written = bw as i64;
        row.reads = reads as i64;
        row.writes = writes as i64;
        row.exec_mapped = flags & fp::F_EXEC != 0;
        row.kind = kind_of(&row.name, flags, &row.how).into();
        if row.how == "open" && row.kind == "other" {
            row.kind = "file".into();
        }
    }

    fn push_fd(&mut self, row: FootprintFd) {
        if row.exec_mapped {
            self.libraries.insert((row.pid, row.name.clone()));
        }
        self.pending.fds.push(row);
    }

    /// A look at the kernel's aggregates at `now_ns`: what each key gained since the last look;
    /// at the end (`last`) every descriptor and request still open too.
    pub(crate) fn look(&mut self, maps: &mut FpMaps, now_ns: i64, traced: &[u32], last: bool) {
        let requests_now = maps.requests_now();
        let mut stale = Vec::new();
        for (k, v) in maps.syscalls() {
            let before = self.last.get(&k).copied().unwrap_or_default();
            let gained = FpVal {
                calls: v.calls.saturating_sub(before.calls),
                errors: v.errors.saturating_sub(before.errors),
                ns: v.ns.saturating_sub(before.ns),
                max_ns: v.max_ns,
                bytes: v.bytes.saturating_sub(before.bytes),
            };
            if gained.calls == 0 && gained.ns == 0 {
                // unchanged for a whole look: forget it if it can change no more
                let moved_on = requests_now.get(&k.pid).copied().unwrap_or(0) != k.request;
                if !last && (moved_on || gone(k.pid)) {
                    stale.push(k);
                }
                continue;
            }
            self.last.insert(k, v);
            if k.nr == NR_CPU {
                self.pending.cpu.push(FootprintCpu {
                    seen_at_ns: now_ns,
                    pid: k.pid,
                    request: k.request,
                    on_cpu_ns: gained.ns as i64,
                    switches: gained.calls as i64,
                });
            } else {
                self.pending.syscalls.push(FootprintSyscall {
                    seen_at_ns: now_ns,
                    pid: k.pid,
                    request: k.request,
                    nr: k.nr,
                    name: syscall_name(k.nr),
                    calls: gained.calls as i64,
                    errors: gained.errors as i64,
                    total_ns: gained.ns as i64,
                    max_ns: gained.max_ns as i64,
                    bytes: gained.bytes as i64,
                });
            }
        }
        for k in stale {
            let _ = maps.sys.remove(&k);
            self.last.remove(&k);
        }
        // the request state of processes gone (a child inherits its parent's while it lives)
        for pid in requests_now.keys().filter(|&&p| gone(p)) {
            let _ = maps.state.remove(pid);
        }
        // descriptors: name the inherited ones while their process lives; write out those whose
        // process is gone (they were closed with it), and at the end every one
        let fds: Vec<(FpFdKey, FpFdVal)> = maps.fds.iter().filter_map(|r| r.ok()).collect();
        for (k, v) in fds {
            let key = (k.pid, k.fd);
            let is_gone = gone(k.pid);
            if v.opened == 0 && !is_gone && !self.open.contains_key(&key) && !self.proc_names.contains_key(&key) {
                if let Some(n) = proc_fd_name(k.pid, k.fd) {
                    self.proc_names.insert(key, n);
                }
            }
            if !(last || is_gone) {
                continue;
            }
            let mut row = self.open.remove(&key).unwrap_or_else(|| FootprintFd {
                pid: k.pid,
                fd: k.fd,
                how: "inherited".into(),
                name: self.proc_names.remove(&key).unwrap_or_else(|| std_name(k.fd)),
                opened_ns: self.t(v.opened),
                request: v.request,
                ..Default::default()
            });
            self.fill_counters(&mut row, u64::from(v.flags), v.bytes_read, v.bytes_written, v.reads, v.writes);
            self.push_fd(row);
            if is_gone {
                let _ = maps.fds.remove(&k);
            }
        }
        // the libraries the processes map now
        for &pid in traced {
            self.read_maps(pid);
        }
        if last {
            for (_, row) in std::mem::take(&mut self.open) {
                self.push_fd(row);
            }
            let mut open: Vec<FootprintRequest> = self.requests.drain().map(|(_, q)| q).collect();
            open.sort_by_key(|q| q.request);
            self.pending.requests.extend(open);
        }
    }

    /// The executable file mappings of `pid` not written before, as `library` rows (`how` = maps).
    fn read_maps(&mut self, pid: u32) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return };
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(_range), Some(perms)) = (f.next(), f.next()) else { continue };
            let path = f.nth(3).unwrap_or("");
            if !perms.contains('x') || !path.starts_with('/') {
                continue;
            }
            if self.libraries.insert((pid, path.to_string())) {
                self.pending.fds.push(FootprintFd {
                    pid,
                    fd: -1,
                    kind: "library".into(),
                    how: "maps".into(),
                    name: path.to_string(),
                    exec_mapped: true,
                    ..Default::default()
                });
            }
        }
    }

    /// The rows made since the last call.
    pub(crate) fn take(&mut self) -> FootprintPart {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of process 7 in request 1.
    fn rec(what: u8, fd: i32, text: &[u8]) -> FpRec {
        FpRec {
            what,
            family: 0,
            pid: 7,
            tid: 7,
            ppid: 1,
            ts: 10,
            ret: 1,
            fd,
            request: 1,
            flags: 0,
            opened: 0,
            bytes_read: 0,
            bytes_written: 0,
            reads: 0,
            writes: 0,
            port: 0,
            addr: [0; 16],
            comm: "srv".into(),
            text: text.to_vec(),
            text2: Vec::new(),
        }
    }

    #[test]
    fn a_close_finishes_its_open_and_a_request_its_begin() {
        let mut f = Footprint::new();
        let mut close = rec(fp::CLOSE, 5, b"");
        (close.bytes_read, close.bytes_written, close.reads, close.writes) = (100, 4096, 2, 1);
        f.on_records(vec![
            rec(fp::REQ_BEGIN, 0, b"{\"method\":\"tools/call\"}"),
            rec(fp::OPEN, 5, b"/tmp/a.db\0"),
            close,
            rec(fp::REQ_END, 1, b"{\"result\":1}"),
        ]);
        let p = f.take();
        assert_eq!(p.fds.len(), 1);
        let row = &p.fds[0];
        assert_eq!((row.name.as_str(), row.kind.as_str(), row.how.as_str()), ("/tmp/a.db", "file", "open"));
        assert_eq!((row.bytes_read, row.bytes_written, row.reads, row.writes), (100, 4096, 2, 1));
        assert!(row.closed_ns > 0 && row.opened_ns > 0);
        assert_eq!(p.requests.len(), 1);
        assert_eq!(p.requests[0].head_in, "{\"method\":\"tools/call\"}");
        assert_eq!(p.requests[0].head_out, "{\"result\":1}");
    }

    #[test]
    fn a_copy_is_named_as_its_original_and_an_unopened_pipe_by_its_inode() {
        let mut f = Footprint::new();
        let mut dup = rec(fp::DUP, 9, b"");
        dup.ret = 5; // dup2(5, 9)
        let mut close_copy = rec(fp::CLOSE, 9, b"");
        close_copy.bytes_written = 12;
        // a pipe nothing opened, closed: the kernel sends its type and inode
        let mut close_pipe = rec(fp::CLOSE, 3, b"");
        close_pipe.family = 0o1;
        close_pipe.addr[..8].copy_from_slice(&4242u64.to_ne_bytes());
        f.on_records(vec![rec(fp::OPEN, 5, b"/var/log/a.log\0"), dup, close_copy, close_pipe]);
        let p = f.take();
        let copy = p.fds.iter().find(|r| r.fd == 9).unwrap();
        assert_eq!((copy.name.as_str(), copy.how.as_str(), copy.kind.as_str()), ("/var/log/a.log", "dup", "file"));
        assert_eq!(copy.bytes_written, 12);
        let pipe = p.fds.iter().find(|r| r.fd == 3).unwrap();
        assert_eq!((pipe.name.as_str(), pipe.kind.as_str()), ("pipe:[4242]", "pipe"));
    }
}
