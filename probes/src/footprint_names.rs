//! How the footprint (`footprint.rs`) names what a process touched: a record's bytes as text, a
//! sockaddr as an address, a descriptor as /proc names it, and, for `trace --footprint --pid P`,
//! the descriptors a process already running holds when the trace attaches, read from /proc
//! (`/proc/P/fd` for what each is, `fdinfo` for a file's open flags,
//! `/proc/P/net/{tcp,tcp6,udp,udp6,unix}` for a socket's addresses). The footprint puts each in
//! the kernel's descriptor table as open before the trace, so that its bytes from the attach on
//! are counted and its row names it (`how` = `before_attach`); a TCP connection whose local port
//! is one P listens on was accepted by P, and requests come on it as on one the trace saw accepted.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::fp;

/// At most this many descriptors of one process are named at an attach (the kernel's table holds
/// 65536 of every traced process together).
pub(crate) const MAX_HELD: usize = 4096;

/// A descriptor open when the trace attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub fd: i32,
    /// `file`, `socket`, `pipe` or `other`.
    pub kind: &'static str,
    /// A file's path, a socket's peer (its local address when it has none: a listening or unbound
    /// one), what /proc calls the rest (`pipe:[123]`, `anon_inode:[eventfd]`).
    pub name: String,
    /// A file's open flags (O_*), a socket's address family.
    pub flags: i64,
    /// The kernel's descriptor flags (`CW_FPF_*`): a socket, one requests come on.
    pub fd_flags: u64,
}

/// One row of /proc/P/net/{tcp,udp}{,6}.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InetSocket {
    family: i64,
    tcp: bool,
    local: (IpAddr, u16),
    remote: (IpAddr, u16),
    listening: bool,
}

/// An address as a person reads it, as the trace's other socket rows write it (`127.0.0.1:80`,
/// `[::1]:80`; an IPv4 address mapped into IPv6 as IPv4).
fn addr_label((ip, port): (IpAddr, u16)) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => format!("{v4}:{port}"),
            None => format!("[{a}]:{port}"),
        },
    }
}

/// `0100007F:1F90` (IPv4) or 32 hex digits (IPv6) as the kernel prints them: each 32-bit word in
/// the host's byte order, the port in hex.
fn parse_addr(s: &str) -> Option<(IpAddr, u16)> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let words: Vec<u32> =
        (0..a.len() / 8).map(|i| u32::from_str_radix(&a[i * 8..i * 8 + 8], 16)).collect::<Result<_, _>>().ok()?;
    let ip = match words.as_slice() {
        [w] => IpAddr::V4(Ipv4Addr::from(w.to_ne_bytes())),
        [a, b, c, d] => {
            let mut o = [0u8; 16];
            for (i, w) in [a, b, c, d].iter().enumerate() {
                o[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    Some((ip, port))
}

/// The rows of one /proc/P/net/{tcp,udp}{,6} text, by socket inode.
fn parse_inet(text: &str, family: i64, tcp: bool, into: &mut HashMap<u64, InetSocket>) {
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(l), Some(r), Some(st), Some(inode)) = (f.get(1), f.get(2), f.get(3), f.get(9)) else { continue };
        let (Some(local), Some(remote), Ok(inode)) = (parse_addr(l), parse_addr(r), inode.parse::<u64>()) else {
            continue;
        };
        // TCP_LISTEN is state 10; an unconnected UDP socket has no peer
        let listening = if tcp { *st == "0A" } else { remote.1 == 0 };
        into.insert(inode, InetSocket { family, tcp, local, remote, listening });
    }
}

/// The sockets of P's network namespace by inode, and the Unix sockets' paths.
fn sockets_of(pid: u32) -> (HashMap<u64, InetSocket>, HashMap<u64, String>) {
    let mut inet = HashMap::new();
    for (file, family, tcp) in [("tcp", 2, true), ("tcp6", 10, true), ("udp", 2, false), ("udp6", 10, false)] {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")) {
            parse_inet(&text, family, tcp, &mut inet);
        }
    }
    let mut unix = HashMap::new();
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/unix")) {
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some(inode), Some(path)) = (f.get(6).and_then(|i| i.parse::<u64>().ok()), f.get(7)) {
                unix.insert(inode, (*path).to_string());
            }
        }
    }
    (inet, unix)
}

/// A file descriptor's open flags from /proc/P/fdinfo/FD (`flags:` in octal).
fn open_flags(pid: u32, fd: i32) -> i64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("flags:")).and_then(|v| i64::from_str_radix(v.trim(), 8).ok()).unwrap_or(0)
}

/// What `pid` holds open now (at most [`MAX_HELD`], lowest numbers first), and how many it holds.
pub(crate) fn held_descriptors(pid: u32) -> (Vec<Held>, usize) {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return (Vec::new(), 0) };
    let mut fds: Vec<(i32, String)> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            Some((fd, std::fs::read_link(e.path()).ok()?.to_string_lossy().into_owned()))
        })
        .collect();
    fds.sort();
    let total = fds.len();
    fds.truncate(MAX_HELD);
    let (inet, unix) = sockets_of(pid);
    let inode_of = |target: &str| target.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok();
    // the TCP ports P listens on: a connection on one of them is one P accepted
    let listening: HashSet<u16> = fds
        .iter()
        .filter_map(|(_, t)| inet.get(&inode_of(t)?))
        .filter(|s| s.tcp && s.listening)
        .map(|s| s.local.1)
        .collect();
    let held = fds
        .into_iter()
        .map(|(fd, target)| {
            if let Some(inode) = inode_of(&target) {
                let mut h = Held { fd, kind: "socket", name: target.clone(), flags: 0, fd_flags: fp::F_SOCKET };
                if let Some(s) = inet.get(&inode) {
                    h.flags = s.family;
                    h.name = addr_label(if s.listening { s.local } else { s.remote });
                    if s.tcp && !s.listening && listening.contains(&s.local.1) {
                        h.fd_flags |= fp::F_REQUEST;
                    }
                } else if let Some(path) = unix.get(&inode) {
                    h.flags = 1;
                    h.name = path.clone();
                }
                return h;
            }
            let kind = if target.starts_with("pipe:") {
                "pipe"
            } else if target.starts_with('/') {
                "file"
            } else {
                "other"
            };
            let flags = if kind == "file" { open_flags(pid, fd) } else { 0 };
            Held { fd, kind, name: target, flags, fd_flags: 0 }
        })
        .collect();
    (held, total)
}

/// Bytes as text: printable ASCII and UTF-8 kept, others escaped (`\x00`), NULs at the end dropped.
pub(crate) fn text_of(raw: &[u8]) -> String {
    let raw = match raw.iter().rposition(|&b| b != 0) {
        Some(end) => &raw[..=end],
        None => &[],
    };
    let s = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A `struct sockaddr` as a connect or bind passed it: the address a person reads
/// (`127.0.0.1:5432`, `[::1]:80`, a Unix socket's path, `@name` for an abstract one) and its family.
pub(crate) fn sockaddr_label(raw: &[u8]) -> (String, i64) {
    if raw.len() < 2 {
        return (String::new(), 0);
    }
    let family = u16::from_ne_bytes([raw[0], raw[1]]);
    let port = |r: &[u8]| if r.len() >= 4 { u16::from_be_bytes([r[2], r[3]]) } else { 0 };
    let label = match family {
        2 if raw.len() >= 8 => addr_label((IpAddr::V4(Ipv4Addr::new(raw[4], raw[5], raw[6], raw[7])), port(raw))),
        10 if raw.len() >= 24 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&raw[8..24]);
            addr_label((IpAddr::V6(Ipv6Addr::from(a)), port(raw)))
        }
        1 => {
            let path = &raw[2..];
            match path.first() {
                Some(0) if path.len() > 1 => format!("@{}", text_of(&path[1..])),
                Some(_) => text_of(path.split(|&b| b == 0).next().unwrap_or(&[])),
                None => "unix socket (unnamed)".into(),
            }
        }
        f => format!("family {f}"),
    };
    (label, i64::from(family))
}

/// What /proc calls descriptor `fd` of `pid` now (`/dev/pts/0`, `pipe:[123]`, `socket:[9]`), if alive.
pub(crate) fn proc_fd_name(pid: u32, fd: i32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok().map(|p| p.to_string_lossy().into_owned())
}

/// The kind of a descriptor named `name` with descriptor flags `flags`.
pub(crate) fn kind_of(name: &str, flags: u64, how: &str) -> &'static str {
    if flags & fp::F_EXEC != 0 {
        "library"
    } else if flags & fp::F_SOCKET != 0 || name.starts_with("socket:") || matches!(how, "connect" | "accept" | "bind") {
        "socket"
    } else if name.starts_with("pipe:") {
        "pipe"
    } else if name.starts_with('/') {
        "file"
    } else {
        "other"
    }
}

/// What /proc calls a pipe or socket, from the type (`i_mode >> 12`) and inode (`addr`'s first 8
/// bytes) the kernel sent with a close or a dup: `pipe:[123]`, `socket:[456]` (None for others).
pub(crate) fn file_label(kind: u16, addr: &[u8; 16]) -> Option<String> {
    let mut ino = [0u8; 8];
    ino.copy_from_slice(&addr[..8]);
    let ino = u64::from_ne_bytes(ino);
    match (kind, ino) {
        (_, 0) => None,
        (0o1, n) => Some(format!("pipe:[{n}]")),
        (0o14, n) => Some(format!("socket:[{n}]")),
        _ => None,
    }
}

/// The name of a descriptor nothing named: the three standard ones by name.
pub(crate) fn std_name(fd: i32) -> String {
    match fd {
        0 => "stdin".into(),
        1 => "stdout".into(),
        2 => "stderr".into(),
        n => format!("fd {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_and_sockets_are_named_by_their_inode_as_proc_names_them() {
        let mut addr = [0u8; 16];
        addr[..8].copy_from_slice(&1930996u64.to_ne_bytes());
        assert_eq!(file_label(0o1, &addr).as_deref(), Some("pipe:[1930996]"));
        assert_eq!(file_label(0o14, &addr).as_deref(), Some("socket:[1930996]"));
        assert_eq!(file_label(0o10, &addr), None, "a regular file needs its path");
        assert_eq!(file_label(0o1, &[0; 16]), None, "no inode sent");
    }

    #[test]
    fn proc_net_rows_read_as_addresses() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n";
        let mut m = HashMap::new();
        parse_inet(tcp, 2, true, &mut m);
        let listen = &m[&111];
        assert!(listen.listening);
        assert_eq!(addr_label(listen.local), "127.0.0.1:8080");
        let conn = &m[&222];
        assert!(!conn.listening);
        assert_eq!(addr_label(conn.remote), "127.0.0.1:50000");
        // ::1 and ::ffff:127.0.0.1 as /proc/net/tcp6 prints them on a little-endian host
        assert_eq!(addr_label(parse_addr("00000000000000000000000001000000:0050").unwrap()), "[::1]:80");
        assert_eq!(addr_label(parse_addr("0000000000000000FFFF00000100007F:0050").unwrap()), "127.0.0.1:80");
    }

    #[test]
    fn a_process_s_own_descriptors_are_named() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        let (held, total) = held_descriptors(std::process::id());
        assert_eq!(total, held.len());
        let by_fd = |fd: i32| held.iter().find(|h| h.fd == fd).unwrap_or_else(|| panic!("fd {fd}: {held:?}"));
        use std::os::fd::AsRawFd;
        let listen = by_fd(l.as_raw_fd());
        assert_eq!(
            (listen.kind, listen.name.clone(), listen.fd_flags),
            ("socket", format!("127.0.0.1:{port}"), fp::F_SOCKET)
        );
        let accepted = by_fd(s.as_raw_fd());
        assert_eq!(accepted.name, c.local_addr().unwrap().to_string());
        assert_eq!(accepted.fd_flags, fp::F_SOCKET | fp::F_REQUEST, "accepted from a port it listens on");
        let connected = by_fd(c.as_raw_fd());
        assert_eq!((connected.name.clone(), connected.fd_flags), (format!("127.0.0.1:{port}"), fp::F_SOCKET));
        let f = by_fd(file.as_file().as_raw_fd());
        assert_eq!((f.kind, f.name.as_str()), ("file", file.path().to_str().unwrap()));
        assert_eq!(f.flags & 3, libc::O_RDWR as i64);
    }

    #[test]
    fn sockaddrs_read_as_people_write_them() {
        let mut v4 = vec![2u8, 0, 0x1f, 0x90, 127, 0, 0, 1];
        v4.extend([0u8; 8]);
        assert_eq!(sockaddr_label(&v4), ("127.0.0.1:8080".to_string(), 2));
        let mut v6 = vec![10u8, 0, 0, 80, 0, 0, 0, 0];
        let mut a = [0u8; 16];
        a[15] = 1;
        v6.extend(a);
        assert_eq!(sockaddr_label(&v6).0, "[::1]:80");
        let mut unix = vec![1u8, 0];
        unix.extend(b"/run/db.sock\0\0\0");
        assert_eq!(sockaddr_label(&unix).0, "/run/db.sock");
        let mut abs = vec![1u8, 0, 0];
        abs.extend(b"name");
        assert_eq!(sockaddr_label(&abs).0, "@name");
    }

    #[test]
    fn texts_are_escaped_and_cut_at_their_nuls() {
        assert_eq!(text_of(b"{\"method\":\"x\"}\n\0\0"), "{\"method\":\"x\"}\\n");
        assert_eq!(text_of(b"a\x01b"), "a\\x01b");
        assert_eq!(text_of(b"\0\0"), "");
    }
}
