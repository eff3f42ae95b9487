//! The uprobe_multi attach path (kernel >= 6.6), which aya 0.13 does not offer: the uprobe programs
//! are loaded here with `expected_attach_type = BPF_TRACE_UPROBE_MULTI` from the same ELF object
//! (their map references relocated to the fds of the maps aya created), and each library gets three
//! BPF links (launch entry, other entries, returns) carrying the symbols' offsets and cookies.
//! Closing a link detaches all its uprobes with one synchronization, where perf-event uprobes cost
//! one RCU grace period each.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_PSEUDO_MAP_VALUE: u8 = 2;

fn sys_bpf(cmd: libc::c_long, attr: &mut [u8; 144]) -> std::io::Result<RawFd> {
    // SAFETY: attr is a zero-initialized bpf_attr of sufficient size for these commands.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as RawFd)
    }
}

fn put32(a: &mut [u8], off: usize, v: u32) {
    a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(a: &mut [u8], off: usize, v: u64) {
    a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// The instructions of function `name` from `elf`, with every map reference relocated to
/// `map_fds[map name]` (`.rodata` references to the `.rodata` map, as values).
pub fn relocated_insns(elf: &[u8], name: &str, map_fds: &HashMap<String, RawFd>) -> anyhow::Result<Vec<u8>> {
    let file = object::File::parse(elf)?;
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .ok_or_else(|| anyhow::anyhow!("no function {name} in the BPF object"))?;
    let sec = file.section_by_index(sym.section_index().ok_or_else(|| anyhow::anyhow!("{name}: no section"))?)?;
    let data = sec.data()?;
    let (start, size) = (sym.address() as usize, sym.size() as usize);
    anyhow::ensure!(size > 0 && start + size <= data.len() && size % 8 == 0, "{name}: bad symbol bounds");
    let mut insns = data[start..start + size].to_vec();
    for (off, rel) in sec.relocations() {
        let off = off as usize;
        if off < start || off >= start + size {
            continue;
        }
        let i = off - start;
        let RelocationTarget::Symbol(si) = rel.target() else { anyhow::bail!("{name}: unexpected relocation target") };
        let target = file.symbol_by_index(si)?;
        let tsec = target.section_index().map(|x| file.section_by_index(x)).transpose()?;
        let tsec_name = tsec.as_ref().and_then(|s| s.name().ok()).unwrap_or("");
        anyhow::ensure!(insns[i] == 0x18 && i + 16 <= insns.len(), "{name}: relocation at {i} is not a 64-bit load");
        let imm = i32::from_ne_bytes(insns[i + 4..i + 8].try_into().unwrap()) as i64;
        let (fd, kind, value_off) = if tsec_name == ".maps" {
            let map = target.name()?;
            (*map_fds.get(map).ok_or_else(|| anyhow::anyhow!("{name}: map {map} has no fd"))?, BPF_PSEUDO_MAP_FD, 0i64)
        } else if tsec_name.starts_with(".rodata") || tsec_name == ".bss" || tsec_name == ".data" {
            let fd =
                *map_fds.get(tsec_name).ok_or_else(|| anyhow::anyhow!("{name}: data map {tsec_name} has no fd"))?;
            (fd, BPF_PSEUDO_MAP_VALUE, target.address() as i64 + imm)
        } else {
            anyhow::bail!("{name}: relocation against {tsec_name}");
        };
        insns[i + 1] = (insns[i + 1] & 0x0f) | (kind << 4);
        insns[i + 4..i + 8].copy_from_slice(&fd.to_ne_bytes());
        insns[i + 12..i + 16].copy_from_slice(&(value_off as i32).to_ne_bytes());
    }
    Ok(insns)
}

/// Load a uprobe_multi program; the verifier log is in the error when it is refused.
pub fn load_program(elf: &[u8], name: &str, map_fds: &HashMap<String, RawFd>) -> anyhow::Result<OwnedFd> {
    let insns = relocated_insns(elf, name, map_fds)?;
    let license = CString::new("Dual BSD/GPL").unwrap();
    let mut log = vec![0u8; 1 << 20];
    let mut attr = [0u8; 144];
    put32(&mut attr, 0, BPF_PROG_TYPE_KPROBE);
    put32(&mut attr, 4, (insns.len() / 8) as u32);
    put64(&mut attr, 8, insns.as_ptr() as u64);
    put64(&mut attr, 16, license.as_ptr() as u64);
    let short: Vec<u8> = name.bytes().take(15).collect();
    attr[48..48 + short.len()].copy_from_slice(&short);
    put32(&mut attr, 68, BPF_TRACE_UPROBE_MULTI);
    match sys_bpf(BPF_PROG_LOAD, &mut attr) {
        // SAFETY: a new fd owned by us.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
        Err(_) => {
            // retry with the verifier log to say why
            put32(&mut attr, 24, 1);
            put32(&mut attr, 28, log.len() as u32);
            put64(&mut attr, 32, log.as_mut_ptr() as u64);
            let e = sys_bpf(BPF_PROG_LOAD, &mut attr);
            if let Ok(fd) = e {
                // SAFETY: a new fd owned by us.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[end.saturating_sub(2000)..end]);
            anyhow::bail!("loading {name} as uprobe_multi: {}: {text}", e.unwrap_err())
        }
    }
}

/// One uprobe_multi link: `prog` on every `(offset, cookie)` of the file at `path`, all processes.
pub fn attach(prog: &OwnedFd, path: &Path, points: &[(u64, u64)], ret: bool) -> anyhow::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    anyhow::ensure!(!points.is_empty(), "no offsets");
    let cpath = CString::new(path.as_os_str().as_encoded_bytes())?;
    let offsets: Vec<u64> = points.iter().map(|p| p.0).collect();
    let cookies: Vec<u64> = points.iter().map(|p| p.1).collect();
    let mut attr = [0u8; 144];
    put32(&mut attr, 0, prog.as_raw_fd() as u32);
    put32(&mut attr, 8, BPF_TRACE_UPROBE_MULTI);
    put64(&mut attr, 16, cpath.as_ptr() as u64);
    put64(&mut attr, 24, offsets.as_ptr() as u64);
    put64(&mut attr, 40, cookies.as_ptr() as u64);
    put32(&mut attr, 48, points.len() as u32);
    put32(&mut attr, 52, if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 });
    let fd = sys_bpf(BPF_LINK_CREATE, &mut attr)
        .map_err(|e| anyhow::anyhow!("uprobe_multi link on {}: {e}", path.display()))?;
    // SAFETY: a new fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
