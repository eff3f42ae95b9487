//! Decoding: one wire message back into its [`Header`] and [`Message`], every length checked.

use std::fmt;

use crate::encode::{API_LEN, CLOCK_LEN, DEVICE_FIXED_LEN, OP_LEN};
use crate::{
    kind, ClockPair, Control, Header, Hello, Message, WindowRequest, WireApi, WireDevice, WireNote, WireOp, HEADER_LEN,
    MAGIC, MAX_MESSAGE, MAX_NAME,
};

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The message ended early: `need` bytes were needed at offset `at`, the message has `len`.
    Truncated {
        /// Where the read began.
        at: usize,
        /// How many bytes it needed.
        need: usize,
        /// The message's length.
        len: usize,
    },
    /// It is longer than [`MAX_MESSAGE`].
    TooLong(usize),
    /// It does not begin with [`MAGIC`].
    BadMagic,
    /// A kind no version wrote.
    UnknownKind(u16),
    /// A control tag no version wrote.
    UnknownControl(u8),
    /// A string longer than [`MAX_NAME`].
    StringTooLong(usize),
    /// A string that is not UTF-8.
    NotUtf8,
    /// An op names a string the message's table does not have.
    BadStringIndex {
        /// The index.
        index: u32,
        /// The table's length.
        strings: u32,
    },
    /// Bytes after the body's end.
    TrailingBytes(usize),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { at, need, len } => {
                write!(f, "truncated message: {need} bytes needed at offset {at} of {len}")
            }
            WireError::TooLong(len) => write!(f, "message of {len} bytes, longer than {MAX_MESSAGE}"),
            WireError::BadMagic => write!(f, "not a Causeway GPU message (no CWG1 magic)"),
            WireError::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            WireError::UnknownControl(t) => write!(f, "unknown control tag {t}"),
            WireError::StringTooLong(n) => write!(f, "string of {n} bytes, longer than {MAX_NAME}"),
            WireError::NotUtf8 => write!(f, "string not UTF-8"),
            WireError::BadStringIndex { index, strings } => {
                write!(f, "string index {index} beyond the message's {strings} strings")
            }
            WireError::TrailingBytes(n) => write!(f, "{n} bytes after the message's body"),
        }
    }
}

impl std::error::Error for WireError {}

/// One message (one packet) decoded. Every length is checked against the buffer: a malformed or
/// truncated message is an error, never a panic, and no count makes it allocate beyond what the
/// buffer's length allows.
pub fn decode(buf: &[u8]) -> Result<(Header, Message), WireError> {
    if buf.len() > MAX_MESSAGE {
        return Err(WireError::TooLong(buf.len()));
    }
    let mut r = Reader { buf, pos: 0 };
    if r.bytes(4)? != MAGIC {
        return Err(WireError::BadMagic);
    }
    let header = Header { kind: r.u16()?, flags: r.u16()?, pid: r.u32()?, seq: r.u32()? };
    debug_assert_eq!(r.pos, HEADER_LEN);
    let msg = match header.kind {
        kind::HELLO => Message::Hello(Hello {
            cupti_version: r.u32()?,
            driver_version: r.i32()?,
            thread_id_type: r.u32()?,
            cupti_path: r.string()?,
            library_version: r.string()?,
        }),
        kind::NOTE => {
            let mono_ns = r.u64()?;
            let count = r.u64()?;
            Message::Note(WireNote { mono_ns, count, kind: r.string()?, detail: r.string()? })
        }
        kind::CONTROL => Message::Control(match r.u8()? {
            1 => Control::StepAside { reason: r.string()? },
            2 => Control::Resume,
            3 => Control::FlushNow,
            4 => Control::OpenWindow { for_ms: r.u64()?, reason: r.string()? },
            5 => Control::CloseWindow { reason: r.string()? },
            t => return Err(WireError::UnknownControl(t)),
        }),
        kind::WINDOW_REQUEST => {
            let pid = r.u32()?;
            let for_ms = r.u64()?;
            Message::WindowRequest(WindowRequest { pid, for_ms, who: r.string()?, why: r.string()? })
        }
        kind::WINDOW_REPLY => Message::WindowReply { ok: r.u8()? != 0, detail: r.string()? },
        kind::CLOCK => {
            let n = r.count(CLOCK_LEN)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push(ClockPair { cupti_ns: r.u64()?, mono_ns: r.u64()?, half_width_ns: r.u64()? });
            }
            Message::Clock(pairs)
        }
        kind::APIS => {
            let n = r.count(API_LEN)?;
            let mut apis = Vec::with_capacity(n);
            for _ in 0..n {
                apis.push(WireApi {
                    domain: r.u8()?,
                    cbid: r.u32()?,
                    tid: r.u32()?,
                    correlation: r.u32()?,
                    ret: r.i32()?,
                    start: r.u64()?,
                    end: r.u64()?,
                });
            }
            Message::Apis(apis)
        }
        kind::DEVICES => {
            let n = r.count(DEVICE_FIXED_LEN)?;
            let mut devices = Vec::with_capacity(n);
            for _ in 0..n {
                let device = r.i32()?;
                let mut uuid = [0u8; 16];
                uuid.copy_from_slice(r.bytes(16)?);
                devices.push(WireDevice { device, uuid, name: r.string()? });
            }
            Message::Devices(devices)
        }
        kind::OPS => {
            let n_strings = r.count(2)?;
            let mut strings = Vec::with_capacity(n_strings);
            for _ in 0..n_strings {
                strings.push(r.str()?);
            }
            let n = r.count(OP_LEN)?;
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                let (kind, subkind) = (r.u8()?, r.u8()?);
                let (device, context, stream, correlation) = (r.i32()?, r.u32()?, r.u32()?, r.u32()?);
                let (start, end, bytes) = (r.u64()?, r.u64()?, r.u64()?);
                let index = r.u32()?;
                let name = strings
                    .get(index as usize)
                    .ok_or(WireError::BadStringIndex { index, strings: strings.len() as u32 })?;
                ops.push(WireOp {
                    kind,
                    subkind,
                    device,
                    context,
                    stream,
                    correlation,
                    start,
                    end,
                    bytes,
                    name: (*name).to_string(),
                });
            }
            Message::Ops(ops)
        }
        k => return Err(WireError::UnknownKind(k)),
    };
    if r.pos != buf.len() {
        return Err(WireError::TrailingBytes(buf.len() - r.pos));
    }
    Ok((header, msg))
}

/// A cursor over one message; every read checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(WireError::Truncated { at: self.pos, need: n, len: self.buf.len() });
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A list's count, checked against what is left: each entry takes at least `min_len` bytes.
    fn count(&mut self, min_len: usize) -> Result<usize, WireError> {
        let at = self.pos;
        let n = self.u32()? as usize;
        let left = self.buf.len() - self.pos;
        if n.saturating_mul(min_len) > left {
            return Err(WireError::Truncated { at, need: n.saturating_mul(min_len), len: self.buf.len() });
        }
        Ok(n)
    }

    fn str(&mut self) -> Result<&'a str, WireError> {
        let n = self.u16()? as usize;
        if n > MAX_NAME {
            return Err(WireError::StringTooLong(n));
        }
        std::str::from_utf8(self.bytes(n)?).map_err(|_| WireError::NotUtf8)
    }

    fn string(&mut self) -> Result<String, WireError> {
        Ok(self.str()?.to_string())
    }
}
