//! The NVIDIA driver's own Xid lines in the kernel log, read from `/dev/kmsg` while tracing. NVML's
//! Xid event names the GPU and the code only; the driver's line names the process whose context it
//! blamed when it knows it (`NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen
//! off the bus.`). Each such line becomes an `nvrm_xid` event (source 2): `pid` and `comm` the
//! process it named (0 and empty when it gives `'<unknown>'`), `arg0` the Xid, `gpu_id` the NVML
//! index of the GPU at that PCI address (-1 when NVML does not list it). Only records written after
//! the trace started are read (the reader starts at the log's end); a log that cannot be read
//! (`kernel.dmesg_restrict` without root) leaves a note and nothing else.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use causeway_model::codes::op;
use causeway_model::Event;

use crate::gpu_state::GpuMsg;

/// A PCI address: (domain, bus, device).
pub(crate) type PciAddress = (u32, u32, u32);

/// What one driver line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvrmXid {
    pub address: PciAddress,
    pub xid: i64,
    /// The process it named (0: not given).
    pub pid: u32,
    pub name: String,
}

/// `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, ...` (older drivers: no pid and name;
/// newer: `pid='<unknown>', name=<unknown>`).
pub fn parse_nvrm_xid(message: &str) -> Option<NvrmXid> {
    let rest = &message[message.find("NVRM: Xid (PCI:")? + "NVRM: Xid (PCI:".len()..];
    let (address, rest) = rest.split_once("):")?;
    let address = parse_address(address)?;
    let mut fields = rest.split(',').map(str::trim);
    let xid = fields.next()?.parse().ok()?;
    let (mut pid, mut name) = (0, String::new());
    for f in fields.take(2) {
        if let Some(p) = f.strip_prefix("pid=") {
            pid = p.trim_matches('\'').parse().unwrap_or(0);
        } else if let Some(n) = f.strip_prefix("name=") {
            if !n.starts_with('<') {
                name = n.to_string();
            }
        }
    }
    Some(NvrmXid { address, xid, pid, name })
}

/// `0000:3b:00` (the driver's) or `00000000:3B:00.0` (NVML's bus id) as (domain, bus, device).
pub(crate) fn parse_address(s: &str) -> Option<PciAddress> {
    let mut parts = s.trim().split(':');
    let domain = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let device = parts.next()?.split('.').next()?;
    let device = u32::from_str_radix(device, 16).ok()?;
    Some((domain, bus, device))
}

/// One `/dev/kmsg` record (`priority,sequence,microseconds,flags;message`): its time (µs of
/// `CLOCK_MONOTONIC`) and message.
fn parse_record(rec: &str) -> Option<(i64, &str)> {
    let (head, message) = rec.split_once(';')?;
    let us = head.split(',').nth(2)?.parse().ok()?;
    Some((us, message.lines().next().unwrap_or("")))
}

/// The running reader: stop it to join its thread.
pub(crate) struct KmsgWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KmsgWatch {
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Read the kernel log from its end on, sending the driver's Xid lines as events; `gpus` maps a
/// PCI address to its NVML index. `Err` says why the log cannot be read.
pub(crate) fn start(
    gpus: Vec<(PciAddress, i32)>,
    tx: tokio::sync::mpsc::UnboundedSender<GpuMsg>,
) -> Result<KmsgWatch, String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .map_err(|e| format!("/dev/kmsg: {e}"))?;
    // SAFETY: lseek on an fd we own; SEEK_END on /dev/kmsg moves past the last record.
    unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = stop.clone();
    let thread = std::thread::Builder::new()
        .name("causeway-kmsg".into())
        .spawn(move || {
            let mut buf = vec![0u8; 8192];
            while !thread_stop.load(Ordering::Relaxed) {
                let mut pfd = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd of an fd we own.
                if unsafe { libc::poll(&mut pfd, 1, 200) } <= 0 {
                    continue;
                }
                // one record per read; EAGAIN: none left, EPIPE: records overwritten (go on)
                loop {
                    match file.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            let rec = String::from_utf8_lossy(&buf[..n]);
                            if let Some(e) = record_event(&rec, &gpus) {
                                if tx.send(GpuMsg::Xid(e)).is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                        Err(_) => break,
                    }
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(KmsgWatch { stop, thread: Some(thread) })
}

/// The `nvrm_xid` event of a record, if it is a driver's Xid line.
fn record_event(rec: &str, gpus: &[(PciAddress, i32)]) -> Option<Event> {
    let (us, message) = parse_record(rec)?;
    let x = parse_nvrm_xid(message)?;
    // the record's monotonic time on the trace's clock
    let ts_ns = crate::decode::now_ns() - crate::labels::monotonic_ns() + us * 1000;
    let gpu_id = gpus.iter().find(|(a, _)| *a == x.address).map_or(-1, |(_, i)| *i);
    Some(Event {
        ts_ns,
        cpu: -1,
        pid: x.pid,
        tid: x.pid,
        source: op::NVRM_XID.source,
        op: op::NVRM_XID.op,
        arg0: x.xid,
        arg1: i64::from(x.address.1),
        gpu_id,
        comm: x.name,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_lines_old_and_new() {
        let x = parse_nvrm_xid("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.")
            .unwrap();
        assert_eq!(x, NvrmXid { address: (0, 0x3b, 0), xid: 79, pid: 1234, name: "python3".into() });
        let x = parse_nvrm_xid("NVRM: Xid (PCI:0000:ab:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception")
            .unwrap();
        assert_eq!((x.xid, x.pid, x.name.as_str(), x.address), (13, 0, "", (0, 0xab, 0)));
        let x = parse_nvrm_xid("NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error").unwrap();
        assert_eq!((x.xid, x.pid), (48, 0));
        assert_eq!(parse_nvrm_xid("NVRM: GPU at PCI:0000:18:00: GPU-1234"), None);
    }

    #[test]
    fn records_and_addresses() {
        assert_eq!(parse_record("4,1234,5678901,-;NVRM: Xid x\n SUBSYSTEM=pci"), Some((5_678_901, "NVRM: Xid x")));
        assert_eq!(parse_address("00000000:3B:00.0"), parse_address("0000:3b:00"));
        let gpus = vec![((0, 0x18, 0), 0)];
        let e = record_event("3,9,1000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=42, name=train, GPU has fallen", &gpus)
            .unwrap();
        assert_eq!((e.gpu_id, e.pid, e.arg0, e.comm.as_str()), (0, 42, 79, "train"));
        assert_eq!(record_event("6,10,1000,-;eth0: link up", &gpus), None);
    }
}
