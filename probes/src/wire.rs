//! The ring-buffer records of `ebpf/causeway.h`, decoded from bytes. Field order and sizes mirror
//! the C structs exactly; a record of the wrong size or an unknown kind is a decode error (counted
//! as a loss by the caller, never a panic).

pub const REC_CALL: u8 = 1;
pub const REC_SWITCH: u8 = 2;
pub const REC_WAKEUP: u8 = 3;
pub const REC_PROC: u8 = 4;
pub const REC_BLOCK: u8 = 5;
pub const REC_LAUNCH: u8 = 6;
pub const REC_NAME: u8 = 7;
pub const REC_DL: u8 = 8;
pub const REC_PY_CODE: u8 = 9;
pub const REC_NCCL: u8 = 10;
pub const REC_NET: u8 = 11;
pub const REC_TCP: u8 = 12;
pub const REC_FP: u8 = 13;

pub const PROC_FORK: u8 = 1;
pub const PROC_EXEC: u8 = 2;
pub const PROC_EXIT: u8 = 3;
pub const PROC_OOM: u8 = 4;

/// Indexes into the per-CPU `cw_counters` array (CW_CNT_* in causeway.h).
pub mod cnt {
    pub const LOST_BASE: u32 = 0;
    pub const STASH_FAIL_BASE: u32 = 16;
    pub const SWITCH_OTHER: u32 = 32;
    pub const WAKEUP_OTHER: u32 = 33;
    pub const BLOCK_OTHER: u32 = 34;
    pub const BLOCK_OTHER_BYTES: u32 = 35;
    pub const PAGE_OTHER: u32 = 36;
    pub const PAGE_OTHER_BYTES: u32 = 37;
    pub const SWITCH_OTHER_NS: u32 = 38;
    pub const NAME_LOST: u32 = 39;
    pub const PY_NO_THREAD: u32 = 40;
    pub const PY_TRUNCATED: u32 = 41;
    pub const PY_FAULT: u32 = 42;
    pub const PY_TABLE_FULL: u32 = 43;
    pub const PY_COLLISION: u32 = 44;
    pub const PY_CODE_LOST: u32 = 45;
    pub const NET_SEND_OTHER: u32 = 46;
    pub const NET_SEND_OTHER_BYTES: u32 = 47;
    pub const NET_RECV_OTHER: u32 = 48;
    pub const NET_RECV_OTHER_BYTES: u32 = 49;
    pub const TCP_RETRANS_OTHER: u32 = 50;
    pub const NET_AGAIN: u32 = 51;
    pub const FP_SYS_FULL: u32 = 52;
    pub const FP_FD_FULL: u32 = 53;
    pub const FP_LOST: u32 = 54;
    pub const N: u32 = 55;
}

#[derive(Debug, Clone, PartialEq)]
pub struct CallRec {
    pub source: u8,
    pub op: u16,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ts: u64,
    pub dur: u64,
    pub arg0: u64,
    pub arg1: u64,
    pub arg2: u64,
    pub ret: i64,
    pub stack_id: i32,
    /// Key of the call's Python stack in `cw_py_stacks` (0: none).
    pub py_stack: u32,
    pub comm: String,
}

/// `struct cw_nccl_args`: what an NCCL call says beside its [`CallRec`] (whose `arg0` is the element
/// count, `arg1` the communicator and `arg2` the stream, or the communicator an init returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclArgs {
    /// FNV-1a over the `ncclUniqueId`'s 16 words (ncclCommInitRank*); 0 otherwise.
    pub id_hash: u64,
    pub datatype: i32,
    pub redop: i32,
    /// Peer (send / receive), root (broadcast / reduce) or color (split); -1 otherwise.
    pub peer: i32,
    /// Ranks (init; InitAll: devices); -1 otherwise.
    pub nranks: i32,
    /// This rank (init) or the key (split); -1 otherwise.
    pub rank: i32,
}

/// `struct cw_launch_cfg`: grid, block, dynamic shared memory, cluster (0: none set at the launch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchCfg {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shmem: u32,
    pub cluster: [u32; 3],
}

impl LaunchCfg {
    /// The stored form: a launch that set no cluster runs in clusters of one block.
    pub fn to_model(self) -> causeway_model::LaunchConfig {
        let cluster = if self.cluster == [0; 3] { [1; 3] } else { self.cluster.map(|d| d.max(1)) };
        causeway_model::LaunchConfig { grid: self.grid, block: self.block, shared_mem_bytes: self.shmem, cluster }
    }
}

/// What a `cw_name` record says (CW_NAME_* in causeway.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameFact {
    /// `__cudaRegisterFunction`: host stub `handle` is the device function `name`.
    Register,
    /// `__cudaGetKernel`: the `cudaKernel_t` `handle` stands for host stub `other`.
    GetKernel,
    /// `cuModuleGetFunction`: CUfunction `handle` is `name`.
    ModuleFunction,
    /// `cuLibraryGetKernel`: CUkernel `handle` is `name`.
    LibraryKernel,
    /// `cuKernelGetFunction`: CUfunction `handle` is CUkernel `other`.
    KernelFunction,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NameRec {
    pub what: NameFact,
    pub pid: u32,
    pub handle: u64,
    pub other: u64,
    /// Empty when the call carries no name (GetKernel, KernelFunction) or it could not be read.
    pub name: String,
    /// The name filled the whole buffer: it may be cut short.
    pub truncated: bool,
}

impl NameRec {
    /// Whether this fact names something (the string's address is in `other` for these).
    pub fn carries_name(&self) -> bool {
        matches!(self.what, NameFact::Register | NameFact::ModuleFunction | NameFact::LibraryKernel)
    }
}

/// A traced process finished changing its list of loaded objects (a dlopen or dlclose).
#[derive(Debug, Clone, PartialEq)]
pub struct DlRec {
    pub pid: u32,
    pub tid: u32,
    pub ts: u64,
    /// The BPF program stopped the process (SIGSTOP): it waits for user space to continue it.
    pub stopped: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SwitchRec {
    pub prev_state: u8,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ts_out: u64,
    pub ts_in: u64,
    pub wake_ts: u64,
    pub next_pid: u32,
    pub next_tid: u32,
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub comm: String,
    pub next_comm: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WakeupRec {
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ts: u64,
    pub wakee_pid: u32,
    pub wakee_tid: u32,
    pub comm: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProcRec {
    pub what: u8,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ts: u64,
    pub child_pid: u32,
    pub child_tid: u32,
    pub exit_code: i32,
    pub comm: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BlockRec {
    pub op: u8,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ts: u64,
    pub dur: u64,
    pub sector: u64,
    pub bytes: u32,
    pub dev: u32,
    pub comm: String,
}

/// `struct cw_net`: a socket call of a traced thread (`tcp` false) or a TCP event of a socket one
/// used (`tcp` true), with the socket's peer.
#[derive(Debug, Clone, PartialEq)]
pub struct NetRec {
    pub tcp: bool,
    /// CW_NET_* (send 1, receive 2, connect 3, accept 4) or CW_TCP_* (retransmit 1, state 2).
    pub op: u8,
    pub family: u16,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ts: u64,
    pub dur: u64,
    /// Bytes, the new fd (accept) or -errno; a state change: the new state.
    pub ret: i64,
    /// The fd; a TCP event: the old state (state change) or the socket's state (retransmit).
    pub fd: i32,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    /// Network order; IPv4 in the first 4 bytes.
    pub addr: [u8; 16],
    pub comm: String,
}

impl NetRec {
    /// The socket's peer.
    pub fn peer(&self) -> causeway_model::NetPeer {
        causeway_model::NetPeer::of_raw(self.family, &self.addr, self.dport)
    }
}

/// `struct cw_fp`: an open, close, connect, accept, bind, exec, or a request's first or last I/O
/// (`ebpf/footprint.bpf.c`; `what` is one of [`fp`]'s codes).
#[derive(Debug, Clone, PartialEq)]
pub struct FpRec {
    pub what: u8,
    pub family: u16,
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub ts: u64,
    pub ret: i64,
    pub fd: i32,
    pub request: u32,
    pub flags: u64,
    pub opened: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub reads: u64,
    pub writes: u64,
    pub port: u16,
    pub addr: [u8; 16],
    pub comm: String,
    /// The path, sockaddr, program file or first bytes, as many bytes as were read.
    pub text: Vec<u8>,
    /// An exec's arguments, NUL-separated.
    pub text2: Vec<u8>,
}

/// `cw_fp.what` and the descriptor flags of `ebpf/causeway.h` (CW_FP_*, CW_FPF_*).
pub mod fp {
    pub const OPEN: u8 = 1;
    pub const CLOSE: u8 = 2;
    pub const CONNECT: u8 = 3;
    pub const ACCEPT: u8 = 4;
    pub const BIND: u8 = 5;
    pub const EXEC: u8 = 6;
    pub const REQ_BEGIN: u8 = 7;
    pub const REQ_END: u8 = 8;
    pub const DUP: u8 = 9;
    pub const F_REQUEST: u64 = 1;
    pub const F_EXEC: u64 = 2;
    pub const F_SOCKET: u64 = 4;
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Call(CallRec),
    /// A kernel launch: the call and its configuration.
    Launch(CallRec, LaunchCfg),
    /// An NCCL call and its NCCL arguments.
    Nccl(CallRec, NcclArgs),
    Name(NameRec),
    Dl(DlRec),
    Switch(SwitchRec),
    Wakeup(WakeupRec),
    Proc(ProcRec),
    Block(BlockRec),
    PyCode(PyCodeRec),
    Net(NetRec),
    /// What a traced process touched (`trace --footprint`).
    Fp(FpRec),
}

/// `struct cw_py_code`: a CPython code object named by a new Python stack.
#[derive(Debug, Clone, PartialEq)]
pub struct PyCodeRec {
    pub pid: u32,
    /// CPython 3.minor (the line-table format).
    pub minor: u8,
    pub code: u64,
    pub firstlineno: i32,
    /// Its type was not `PyCode_Type`: the frame that named it is not a real frame.
    pub not_code: bool,
    pub file: String,
    pub name: String,
    /// The line table as read (at most `CW_PY_LINETABLE_MAX` bytes).
    pub linetable: Vec<u8>,
    /// Bytes the table has; more than `linetable.len()` when it was cut.
    pub linetable_size: u32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    #[error("empty record")]
    Empty,
    #[error("record kind {0} is unknown")]
    UnknownKind(u8),
    #[error("name record of unknown kind {0}")]
    UnknownName(u8),
    #[error("process record of unknown kind {0}")]
    UnknownProc(u8),
    #[error("record kind {kind}: {len} bytes, expected {want}")]
    Size { kind: u8, len: usize, want: usize },
}

pub const CALL_SIZE: usize = 88;
pub const SWITCH_SIZE: usize = 88;
pub const WAKEUP_SIZE: usize = 48;
pub const PROC_SIZE: usize = 56;
pub const BLOCK_SIZE: usize = 64;
pub const NET_SIZE: usize = 88;
/// `struct cw_fp`.
pub const FP_SIZE: usize = 640;
/// CW_FP_TEXT: the bytes of each of its texts.
pub const FP_TEXT: usize = 256;
pub const LAUNCH_SIZE: usize = 128;
pub const NCCL_SIZE: usize = 120;
/// CW_NAME_MAX in causeway.h.
pub const NAME_MAX: usize = 1024;
pub const NAME_SIZE: usize = 32 + NAME_MAX;
pub const DL_SIZE: usize = 24;
pub const PY_FILE_MAX: usize = 256;
pub const PY_NAME_MAX: usize = 128;
pub const PY_LINETABLE_MAX: usize = 4096;
pub const PY_CODE_SIZE: usize = 32 + PY_FILE_MAX + PY_NAME_MAX + PY_LINETABLE_MAX;

/// A CPython `str`'s raw characters of `kind` (1: Latin-1, 2: UCS-2, 4: UCS-4) as a String.
fn py_str(raw: &[u8], kind: u8) -> String {
    match kind {
        1 => raw.iter().map(|&b| b as char).collect(),
        2 => raw.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]]) as u32).filter_map(char::from_u32).collect(),
        4 => raw
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .filter_map(char::from_u32)
            .collect(),
        _ => String::new(),
    }
}

struct Rd<'a>(&'a [u8], usize);
impl Rd<'_> {
    fn u8(&mut self) -> u8 {
        self.1 += 1;
        self.0[self.1 - 1]
    }
    fn u16(&mut self) -> u16 {
        let v = u16::from_ne_bytes(self.0[self.1..self.1 + 2].try_into().unwrap());
        self.1 += 2;
        v
    }
    fn u32(&mut self) -> u32 {
        let v = u32::from_ne_bytes(self.0[self.1..self.1 + 4].try_into().unwrap());
        self.1 += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        let v = u64::from_ne_bytes(self.0[self.1..self.1 + 8].try_into().unwrap());
        self.1 += 8;
        v
    }
    fn skip(&mut self, n: usize) {
        self.1 += n;
    }
    fn comm(&mut self) -> String {
        let raw = &self.0[self.1..self.1 + 16];
        self.1 += 16;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&raw[..end]).into_owned()
    }
}

fn need(kind: u8, len: usize, want: usize) -> Result<(), WireError> {
    if len < want {
        Err(WireError::Size { kind, len, want })
    } else {
        Ok(())
    }
}

/// The `struct cw_call` part of a call or launch record (after its kind byte).
fn call_rec(r: &mut Rd<'_>) -> CallRec {
    let source = r.u8();
    let op = r.u16();
    CallRec {
        source,
        op,
        cpu: r.u32(),
        pid: r.u32(),
        tid: r.u32(),
        ts: r.u64(),
        dur: r.u64(),
        arg0: r.u64(),
        arg1: r.u64(),
        arg2: r.u64(),
        ret: r.u64() as i64,
        stack_id: r.u32() as i32,
        py_stack: r.u32(),
        comm: r.comm(),
    }
}

/// Decode one ring-buffer record.
pub fn parse(buf: &[u8]) -> Result<Record, WireError> {
    let kind = *buf.first().ok_or(WireError::Empty)?;
    let mut r = Rd(buf, 1);
    match kind {
        REC_CALL => {
            need(kind, buf.len(), CALL_SIZE)?;
            Ok(Record::Call(call_rec(&mut r)))
        }
        REC_LAUNCH => {
            need(kind, buf.len(), LAUNCH_SIZE)?;
            let call = call_rec(&mut r);
            let mut dims = [0u32; 10];
            for d in &mut dims {
                *d = r.u32();
            }
            let cfg = LaunchCfg {
                grid: [dims[0], dims[1], dims[2]],
                block: [dims[3], dims[4], dims[5]],
                shmem: dims[6],
                cluster: [dims[7], dims[8], dims[9]],
            };
            Ok(Record::Launch(call, cfg))
        }
        REC_NCCL => {
            need(kind, buf.len(), NCCL_SIZE)?;
            let call = call_rec(&mut r);
            let id_hash = r.u64();
            let mut v = [0i32; 5];
            for x in &mut v {
                *x = r.u32() as i32;
            }
            let [datatype, redop, peer, nranks, rank] = v;
            Ok(Record::Nccl(call, NcclArgs { id_hash, datatype, redop, peer, nranks, rank }))
        }
        REC_NAME => {
            need(kind, buf.len(), NAME_SIZE)?;
            let what = match r.u8() {
                1 => NameFact::Register,
                2 => NameFact::GetKernel,
                3 => NameFact::ModuleFunction,
                4 => NameFact::LibraryKernel,
                5 => NameFact::KernelFunction,
                w => return Err(WireError::UnknownName(w)),
            };
            r.skip(2);
            let pid = r.u32();
            let handle = r.u64();
            let other = r.u64();
            let len = r.u32() as i32;
            r.skip(4);
            let raw = &buf[32..32 + NAME_MAX];
            let n = usize::try_from(len).unwrap_or(0).min(NAME_MAX);
            let bytes = &raw[..n];
            let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
            Ok(Record::Name(NameRec {
                what,
                pid,
                handle,
                other,
                name: String::from_utf8_lossy(bytes).into_owned(),
                truncated: n == NAME_MAX,
            }))
        }
        REC_PY_CODE => {
            need(kind, buf.len(), PY_CODE_SIZE)?;
            let file_kind = r.u8();
            let name_kind = r.u8();
            let not_code = r.u8() != 0;
            let pid = r.u32();
            let code = r.u64();
            let firstlineno = r.u32() as i32;
            let file_len = (r.u16() as usize).min(PY_FILE_MAX);
            let name_len = (r.u16() as usize).min(PY_NAME_MAX);
            let table_len = (r.u16() as usize).min(PY_LINETABLE_MAX);
            let minor = r.u8();
            r.skip(1);
            let linetable_size = r.u32();
            let file = &buf[32..32 + PY_FILE_MAX];
            let name = &buf[32 + PY_FILE_MAX..32 + PY_FILE_MAX + PY_NAME_MAX];
            let table = &buf[32 + PY_FILE_MAX + PY_NAME_MAX..PY_CODE_SIZE];
            Ok(Record::PyCode(PyCodeRec {
                pid,
                minor,
                code,
                firstlineno,
                not_code,
                file: py_str(&file[..file_len], file_kind),
                name: py_str(&name[..name_len], name_kind),
                linetable: table[..table_len].to_vec(),
                linetable_size,
            }))
        }
        REC_DL => {
            need(kind, buf.len(), DL_SIZE)?;
            let stopped = r.u8() != 0;
            r.skip(2);
            let pid = r.u32();
            let tid = r.u32();
            r.skip(4);
            Ok(Record::Dl(DlRec { pid, tid, ts: r.u64(), stopped }))
        }
        REC_SWITCH => {
            need(kind, buf.len(), SWITCH_SIZE)?;
            let prev_state = r.u8();
            r.skip(2);
            Ok(Record::Switch(SwitchRec {
                prev_state,
                cpu: r.u32(),
                pid: r.u32(),
                tid: r.u32(),
                ts_out: r.u64(),
                ts_in: r.u64(),
                wake_ts: r.u64(),
                next_pid: r.u32(),
                next_tid: r.u32(),
                waker_pid: r.u32(),
                waker_tid: r.u32(),
                comm: r.comm(),
                next_comm: r.comm(),
            }))
        }
        REC_WAKEUP => {
            need(kind, buf.len(), WAKEUP_SIZE)?;
            r.skip(3);
            Ok(Record::Wakeup(WakeupRec {
                cpu: r.u32(),
                pid: r.u32(),
                tid: r.u32(),
                ts: r.u64(),
                wakee_pid: r.u32(),
                wakee_tid: r.u32(),
                comm: r.comm(),
            }))
        }
        REC_PROC => {
            need(kind, buf.len(), PROC_SIZE)?;
            let what = r.u8();
            if !matches!(what, PROC_FORK | PROC_EXEC | PROC_EXIT | PROC_OOM) {
                return Err(WireError::UnknownProc(what));
            }
            r.skip(2);
            let (cpu, pid, tid, ts, child_pid, child_tid) = (r.u32(), r.u32(), r.u32(), r.u64(), r.u32(), r.u32());
            let exit_code = r.u32() as i32;
            r.skip(4);
            Ok(Record::Proc(ProcRec { what, cpu, pid, tid, ts, child_pid, child_tid, exit_code, comm: r.comm() }))
        }
        REC_BLOCK => {
            need(kind, buf.len(), BLOCK_SIZE)?;
            let op = r.u8();
            r.skip(2);
            Ok(Record::Block(BlockRec {
                op,
                cpu: r.u32(),
                pid: r.u32(),
                tid: r.u32(),
                ts: r.u64(),
                dur: r.u64(),
                sector: r.u64(),
                bytes: r.u32(),
                dev: r.u32(),
                comm: r.comm(),
            }))
        }
        REC_NET | REC_TCP => {
            need(kind, buf.len(), NET_SIZE)?;
            let op = r.u8();
            let family = r.u16();
            let (cpu, pid, tid, ts, dur) = (r.u32(), r.u32(), r.u32(), r.u64(), r.u64());
            let ret = r.u64() as i64;
            let fd = r.u32() as i32;
            let (sport, dport, proto) = (r.u16(), r.u16(), r.u8());
            r.skip(7);
            let mut addr = [0u8; 16];
            addr.copy_from_slice(&buf[r.1..r.1 + 16]);
            r.skip(16);
            let tcp = kind == REC_TCP;
            Ok(Record::Net(NetRec {
                tcp,
                op,
                family,
                cpu,
                pid,
                tid,
                ts,
                dur,
                ret,
                fd,
                sport,
                dport,
                proto,
                addr,
                comm: r.comm(),
            }))
        }
        REC_FP => {
            need(kind, buf.len(), FP_SIZE)?;
            let what = r.u8();
            let family = r.u16();
            let (pid, tid, ppid, ts) = (r.u32(), r.u32(), r.u32(), r.u64());
            let ret = r.u64() as i64;
            let fd = r.u32() as i32;
            let request = r.u32();
            let (flags, opened, bytes_read, bytes_written, reads, writes) =
                (r.u64(), r.u64(), r.u64(), r.u64(), r.u64(), r.u64());
            let (port, len, len2) = (r.u16(), r.u16() as usize, r.u16() as usize);
            r.skip(2);
            let mut addr = [0u8; 16];
            addr.copy_from_slice(&buf[r.1..r.1 + 16]);
            r.skip(16);
            let comm = r.comm();
            let text = buf[r.1..r.1 + len.min(FP_TEXT)].to_vec();
            let text2 = buf[r.1 + FP_TEXT..r.1 + FP_TEXT + len2.min(FP_TEXT)].to_vec();
            Ok(Record::Fp(FpRec {
                what,
                family,
                pid,
                tid,
                ppid,
                ts,
                ret,
                fd,
                request,
                flags,
                opened,
                bytes_read,
                bytes_written,
                reads,
                writes,
                port,
                addr,
                comm,
                text,
                text2,
            }))
        }
        k => Err(WireError::UnknownKind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of `size` bytes with a call header: kind, source, op, pid.
    fn call_record(size: usize, kind: u8, source: u8, op: u16, pid: u32) -> Vec<u8> {
        let mut b = vec![0u8; size];
        (b[0], b[1]) = (kind, source);
        b[2..4].copy_from_slice(&op.to_ne_bytes());
        b[8..12].copy_from_slice(&pid.to_ne_bytes());
        b
    }

    #[test]
    fn net_record_round_trips_field_offsets_and_decodes_as_a_socket_call() {
        let mut b = vec![0u8; NET_SIZE];
        (b[0], b[1]) = (REC_NET, 2);
        b[2..4].copy_from_slice(&2u16.to_ne_bytes()); // AF_INET
        b[4..8].copy_from_slice(&1u32.to_ne_bytes());
        b[8..12].copy_from_slice(&100u32.to_ne_bytes());
        b[12..16].copy_from_slice(&101u32.to_ne_bytes());
        b[16..24].copy_from_slice(&7u64.to_ne_bytes());
        b[24..32].copy_from_slice(&9u64.to_ne_bytes());
        b[32..40].copy_from_slice(&65536i64.to_ne_bytes());
        b[40..44].copy_from_slice(&5i32.to_ne_bytes());
        b[44..46].copy_from_slice(&40000u16.to_ne_bytes());
        b[46..48].copy_from_slice(&29500u16.to_ne_bytes());
        b[48] = 6;
        b[56..60].copy_from_slice(&[10, 0, 0, 2]);
        b[72..76].copy_from_slice(b"gpu\0");
        let Record::Net(n) = parse(&b).unwrap() else { panic!() };
        assert_eq!((n.tcp, n.op, n.family, n.cpu, n.pid, n.tid, n.ts, n.dur), (false, 2, 2, 1, 100, 101, 7, 9));
        assert_eq!((n.ret, n.fd, n.sport, n.dport, n.proto, n.comm.as_str()), (65536, 5, 40000, 29500, 6, "gpu"));
        assert_eq!(n.peer().label(), "10.0.0.2:29500");
        let mut d = crate::decode::Decoder::with_offset(0);
        let e = d.event(Record::Net(n.clone())).unwrap();
        assert_eq!((e.source, e.op, e.arg0, e.arg1, e.arg2, e.ret_code), (7, 2, 65536, 5, n.peer().peer, 0));
        assert_eq!(d.take_new_peers(), vec![n.peer()], "a new peer is handed over once");
        assert_eq!(d.event(Record::Net(n.clone())).unwrap().arg2, e.arg2);
        assert!(d.take_new_peers().is_empty(), "a known peer is not handed over again");
        // a failed receive keeps its errno, moves no byte
        let e = crate::decode::Decoder::with_offset(0).event(Record::Net(NetRec { ret: -104, ..n.clone() })).unwrap();
        assert_eq!((e.arg0, e.ret_code), (0, -104));
        // a TCP state change: old state, new state
        b[0] = REC_TCP;
        let Record::Net(t) = parse(&b).unwrap() else { panic!() };
        let e = crate::decode::Decoder::with_offset(0).event(Record::Net(NetRec { ret: 1, fd: 2, ..t })).unwrap();
        assert_eq!((e.source, e.op, e.arg0, e.arg1), (6, 2, 2, 1));
        assert!(matches!(parse(&b[..NET_SIZE - 1]), Err(WireError::Size { .. })));
    }

    #[test]
    fn call_record_round_trips_field_offsets() {
        let mut b = call_record(CALL_SIZE, REC_CALL, 4, 5, 100);
        b[4..8].copy_from_slice(&3u32.to_ne_bytes());
        b[12..16].copy_from_slice(&101u32.to_ne_bytes());
        b[16..24].copy_from_slice(&7u64.to_ne_bytes());
        b[24..32].copy_from_slice(&9u64.to_ne_bytes());
        b[32..40].copy_from_slice(&4096u64.to_ne_bytes());
        b[56..64].copy_from_slice(&(-35i64).to_ne_bytes());
        b[64..68].copy_from_slice(&(-1i32).to_ne_bytes());
        b[72..76].copy_from_slice(b"gpu\0");
        let Record::Call(c) = parse(&b).unwrap() else { panic!() };
        assert_eq!((c.source, c.op, c.cpu, c.pid, c.tid, c.ts, c.dur), (4, 5, 3, 100, 101, 7, 9));
        assert_eq!((c.arg0, c.ret, c.stack_id, c.comm.as_str()), (4096, -35, -1, "gpu"));
    }

    #[test]
    fn launch_record_carries_its_configuration() {
        let mut b = call_record(LAUNCH_SIZE, REC_LAUNCH, 1, 14, 42);
        for (i, d) in [4u32, 2, 1, 128, 1, 1, 49152, 2, 1, 1].iter().enumerate() {
            b[88 + 4 * i..92 + 4 * i].copy_from_slice(&d.to_ne_bytes());
        }
        let Record::Launch(c, cfg) = parse(&b).unwrap() else { panic!("not a launch") };
        assert_eq!((c.source, c.op, c.pid), (1, 14, 42));
        assert_eq!(cfg.grid, [4, 2, 1]);
        assert_eq!(cfg.block, [128, 1, 1]);
        assert_eq!(cfg.shmem, 49152);
        assert_eq!(cfg.cluster, [2, 1, 1]);
        let none = LaunchCfg { cluster: [0; 3], ..cfg }.to_model();
        assert_eq!(none.cluster, [1, 1, 1], "no cluster attribute: clusters of one block");
        assert!(parse(&b[..LAUNCH_SIZE - 1]).is_err());
    }

    #[test]
    fn nccl_record_carries_its_arguments() {
        let mut b = call_record(NCCL_SIZE, REC_NCCL, 9, 10, 42);
        b[48..56].copy_from_slice(&0x7f00_1234u64.to_ne_bytes());
        b[88..96].copy_from_slice(&0xfeed_beefu64.to_ne_bytes());
        for (i, v) in [7i32, 0, -1, 8, 3].iter().enumerate() {
            b[96 + 4 * i..100 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        let Record::Nccl(c, a) = parse(&b).unwrap() else { panic!("not an NCCL call") };
        assert_eq!((c.source, c.op, c.pid, c.arg2), (9, 10, 42, 0x7f00_1234));
        assert_eq!(a, NcclArgs { id_hash: 0xfeed_beef, datatype: 7, redop: 0, peer: -1, nranks: 8, rank: 3 });
        assert!(parse(&b[..NCCL_SIZE - 1]).is_err());
    }

    #[test]
    fn name_record_reads_its_string_and_marks_truncation() {
        let mut b = vec![0u8; NAME_SIZE];
        b[0] = REC_NAME;
        b[1] = 3;
        b[4..8].copy_from_slice(&7u32.to_ne_bytes());
        b[8..16].copy_from_slice(&0xabcdu64.to_ne_bytes());
        let name = b"triton_poi_fused_add_0\0";
        b[24..28].copy_from_slice(&(name.len() as i32).to_ne_bytes());
        b[32..32 + name.len()].copy_from_slice(name);
        let Record::Name(n) = parse(&b).unwrap() else { panic!("not a name") };
        assert_eq!((n.what, n.pid, n.handle), (NameFact::ModuleFunction, 7, 0xabcd));
        assert_eq!(n.name, "triton_poi_fused_add_0");
        assert!(!n.truncated);
        b[24..28].copy_from_slice(&(NAME_MAX as i32).to_ne_bytes());
        let Record::Name(n) = parse(&b).unwrap() else { panic!() };
        assert!(n.truncated);
        b[1] = 9;
        assert_eq!(parse(&b), Err(WireError::UnknownName(9)));
    }

    #[test]
    fn short_and_unknown_records_are_errors() {
        assert_eq!(parse(&[]), Err(WireError::Empty));
        assert!(matches!(parse(&[REC_SWITCH, 0, 0]), Err(WireError::Size { .. })));
        assert_eq!(parse(&[77; 100]), Err(WireError::UnknownKind(77)));
    }
}
