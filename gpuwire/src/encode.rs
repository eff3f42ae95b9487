//! Encoding: a [`Message`] into one or more wire messages of at most [`MAX_MESSAGE`] bytes each.

use std::collections::HashMap;

use crate::{
    truncate_str, ClockPair, Control, Message, WireApi, WireDevice, WireOp, FLAG_CONTINUED, HEADER_LEN, MAGIC,
    MAX_MESSAGE, MAX_NAME,
};

/// Bytes of one op after the string table.
pub(crate) const OP_LEN: usize = 46;
/// Bytes of one API record.
pub(crate) const API_LEN: usize = 33;
/// Bytes of one clock pair.
pub(crate) const CLOCK_LEN: usize = 24;
/// Bytes of one device without its name's bytes.
pub(crate) const DEVICE_FIXED_LEN: usize = 4 + 16 + 2;

/// Appends `msg`, encoded, to `out`: one message, or several of at most [`MAX_MESSAGE`] bytes when
/// a list does not fit in one (every part but the last flagged [`FLAG_CONTINUED`]; an empty list is
/// one message with no entries). `seq` is the sender's counter: each message takes the next value.
pub fn encode_all(pid: u32, seq: &mut u32, msg: &Message, out: &mut Vec<Vec<u8>>) {
    let used = out.len();
    let mut o = Out { bufs: out, used, pid, seq, first: used };
    o.encode(msg);
    o.finish();
}

/// A sender's encoder: its pid, its counter, and the message buffers it reuses from one call to the
/// next (so that a steady sender allocates nothing).
#[derive(Debug, Default)]
pub struct Encoder {
    pid: u32,
    seq: u32,
    bufs: Vec<Vec<u8>>,
}

impl Encoder {
    /// An encoder for process `pid`, its counter at 0.
    pub fn new(pid: u32) -> Encoder {
        Encoder { pid, seq: 0, bufs: Vec::new() }
    }

    /// The counter the next message will take.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// `msg` encoded, in messages of at most [`MAX_MESSAGE`] bytes (valid until the next call).
    pub fn encode(&mut self, msg: &Message) -> &[Vec<u8>] {
        let mut o = Out { bufs: &mut self.bufs, used: 0, pid: self.pid, seq: &mut self.seq, first: 0 };
        o.encode(msg);
        o.finish();
        let used = o.used;
        &self.bufs[..used]
    }

    /// Frees the buffers beyond the first `keep` (after an unusually long message).
    pub fn shrink(&mut self, keep: usize) {
        self.bufs.truncate(keep);
    }
}

struct Out<'a> {
    bufs: &'a mut Vec<Vec<u8>>,
    used: usize,
    pid: u32,
    seq: &'a mut u32,
    first: usize,
}

impl Out<'_> {
    /// Starts a new message of `kind`: its header written, flags 0 for now.
    fn start(&mut self, kind: u16) -> &mut Vec<u8> {
        if self.used == self.bufs.len() {
            self.bufs.push(Vec::new());
        }
        let seq = *self.seq;
        *self.seq = seq.wrapping_add(1);
        let (pid, i) = (self.pid, self.used);
        self.used += 1;
        let b = &mut self.bufs[i];
        b.clear();
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&seq.to_le_bytes());
        b
    }

    /// Flags every message of this call but the last as continued.
    fn finish(&mut self) {
        let last = self.used.saturating_sub(1).max(self.first);
        for b in &mut self.bufs[self.first..last] {
            b[6..8].copy_from_slice(&FLAG_CONTINUED.to_le_bytes());
        }
    }

    fn encode(&mut self, msg: &Message) {
        let kind = msg.kind();
        match msg {
            Message::Hello(h) => {
                let b = self.start(kind);
                b.extend_from_slice(&h.cupti_version.to_le_bytes());
                b.extend_from_slice(&h.driver_version.to_le_bytes());
                b.extend_from_slice(&h.thread_id_type.to_le_bytes());
                put_str(b, &h.cupti_path);
                put_str(b, &h.library_version);
            }
            Message::Note(n) => {
                let b = self.start(kind);
                b.extend_from_slice(&n.mono_ns.to_le_bytes());
                b.extend_from_slice(&n.count.to_le_bytes());
                put_str(b, &n.kind);
                put_str(b, &n.detail);
            }
            Message::Control(c) => {
                let b = self.start(kind);
                match c {
                    Control::StepAside { reason } => {
                        b.push(1);
                        put_str(b, reason);
                    }
                    Control::Resume => b.push(2),
                    Control::FlushNow => b.push(3),
                    Control::OpenWindow { for_ms, reason } => {
                        b.push(4);
                        b.extend_from_slice(&for_ms.to_le_bytes());
                        put_str(b, reason);
                    }
                    Control::CloseWindow { reason } => {
                        b.push(5);
                        put_str(b, reason);
                    }
                }
            }
            Message::WindowRequest(w) => {
                let b = self.start(kind);
                b.extend_from_slice(&w.pid.to_le_bytes());
                b.extend_from_slice(&w.for_ms.to_le_bytes());
                put_str(b, &w.who);
                put_str(b, &w.why);
            }
            Message::WindowReply { ok, detail } => {
                let b = self.start(kind);
                b.push(u8::from(*ok));
                put_str(b, detail);
            }
            Message::Clock(pairs) => self.fixed_list(kind, pairs, CLOCK_LEN, put_clock),
            Message::Apis(apis) => self.fixed_list(kind, apis, API_LEN, put_api),
            Message::Devices(devices) => self.devices(kind, devices),
            Message::Ops(ops) => self.ops(kind, ops),
        }
    }

    /// A list of fixed-size entries, as many per message as fit.
    fn fixed_list<T>(&mut self, kind: u16, items: &[T], len: usize, put: fn(&mut Vec<u8>, &T)) {
        let per = (MAX_MESSAGE - HEADER_LEN - 4) / len;
        let mut chunks = items.chunks(per).peekable();
        if chunks.peek().is_none() {
            let b = self.start(kind);
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        for chunk in chunks {
            let b = self.start(kind);
            b.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
            for item in chunk {
                put(b, item);
            }
        }
    }

    fn devices(&mut self, kind: u16, devices: &[WireDevice]) {
        let mut i = 0;
        loop {
            let b = self.start(kind);
            let count_at = b.len();
            b.extend_from_slice(&0u32.to_le_bytes());
            let mut n = 0u32;
            while let Some(d) = devices.get(i) {
                let name = truncate_str(&d.name, MAX_NAME);
                if n > 0 && b.len() + DEVICE_FIXED_LEN + name.len() > MAX_MESSAGE {
                    break;
                }
                b.extend_from_slice(&d.device.to_le_bytes());
                b.extend_from_slice(&d.uuid);
                put_str(b, name);
                n += 1;
                i += 1;
            }
            b[count_at..count_at + 4].copy_from_slice(&n.to_le_bytes());
            if i >= devices.len() {
                return;
            }
        }
    }

    /// Ops: each message's names once in its string table, as many ops as fit.
    fn ops(&mut self, kind: u16, ops: &[WireOp]) {
        let mut index: HashMap<&str, u32> = HashMap::new();
        let mut names: Vec<&str> = Vec::new();
        let mut i = 0;
        loop {
            // which ops fit: the header, two counts, the new names and the fixed part of each
            index.clear();
            names.clear();
            let mut size = HEADER_LEN + 8;
            let start = i;
            while let Some(op) = ops.get(i) {
                let name = truncate_str(&op.name, MAX_NAME);
                let new_name = !index.contains_key(name);
                let add = OP_LEN + if new_name { 2 + name.len() } else { 0 };
                if i > start && size + add > MAX_MESSAGE {
                    break;
                }
                if new_name {
                    index.insert(name, names.len() as u32);
                    names.push(name);
                }
                size += add;
                i += 1;
            }
            let b = self.start(kind);
            b.extend_from_slice(&(names.len() as u32).to_le_bytes());
            for name in &names {
                put_str(b, name);
            }
            b.extend_from_slice(&((i - start) as u32).to_le_bytes());
            for op in &ops[start..i] {
                b.push(op.kind);
                b.push(op.subkind);
                b.extend_from_slice(&op.device.to_le_bytes());
                b.extend_from_slice(&op.context.to_le_bytes());
                b.extend_from_slice(&op.stream.to_le_bytes());
                b.extend_from_slice(&op.correlation.to_le_bytes());
                b.extend_from_slice(&op.start.to_le_bytes());
                b.extend_from_slice(&op.end.to_le_bytes());
                b.extend_from_slice(&op.bytes.to_le_bytes());
                let at = index.get(truncate_str(&op.name, MAX_NAME)).copied().unwrap_or(0);
                b.extend_from_slice(&at.to_le_bytes());
            }
            debug_assert!(b.len() <= MAX_MESSAGE);
            if i >= ops.len() {
                return;
            }
        }
    }
}

/// A string: u16 length then its bytes, cut to [`MAX_NAME`].
fn put_str(b: &mut Vec<u8>, s: &str) {
    let s = truncate_str(s, MAX_NAME);
    b.extend_from_slice(&(s.len() as u16).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn put_clock(b: &mut Vec<u8>, p: &ClockPair) {
    b.extend_from_slice(&p.cupti_ns.to_le_bytes());
    b.extend_from_slice(&p.mono_ns.to_le_bytes());
    b.extend_from_slice(&p.half_width_ns.to_le_bytes());
}

fn put_api(b: &mut Vec<u8>, a: &WireApi) {
    b.push(a.domain);
    b.extend_from_slice(&a.cbid.to_le_bytes());
    b.extend_from_slice(&a.tid.to_le_bytes());
    b.extend_from_slice(&a.correlation.to_le_bytes());
    b.extend_from_slice(&a.ret.to_le_bytes());
    b.extend_from_slice(&a.start.to_le_bytes());
    b.extend_from_slice(&a.end.to_le_bytes());
}
