//! The wire format between the injection library (`inject/`, inside the traced process) and the
//! tracer (`probes/`): the GPU's own timeline as CUPTI's Activity API recorded it, carried over a
//! unix `SOCK_SEQPACKET` socket, one message per packet. One definition, used by both sides.
//!
//! Every message is little-endian: a 16-byte [`Header`] (`b"CWG1"`, kind u16, flags u16, pid u32,
//! seq u32) then the body of its [`Message`]. `seq` counts every message the library encoded, per
//! process, from 0: a gap is messages that were encoded and never arrived (the socket was full);
//! the records in them are counted again in a later `dropped` [`WireNote`], so a reader counts
//! losses from the notes and uses the gap only to know that some happened.
//!
//! No message is longer than [`MAX_MESSAGE`]: [`encode_all`] splits a long [`Message::Ops`],
//! [`Message::Apis`], [`Message::Clock`] or [`Message::Devices`] into several messages (each part
//! but the last flagged [`FLAG_CONTINUED`]), and every string is cut to [`MAX_NAME`] bytes (at a
//! character boundary). [`decode`] checks every length: a malformed or truncated message is a
//! [`WireError`], never a panic.
//!
//! Bodies (strings are a u16 byte length then UTF-8; lists a u32 count then the entries):
//!
//! | kind | message | body |
//! |---|---|---|
//! | 1 | [`Hello`] | cupti_version u32, driver_version i32, thread_id_type u32, cupti_path str, library_version str |
//! | 2 | Clock | pairs: cupti_ns u64, mono_ns u64, half_width_ns u64 |
//! | 3 | Ops | string table (u32 count, strs), then ops: kind u8, subkind u8, device i32, context u32, stream u32, correlation u32, start u64, end u64, bytes u64, name u32 (index in the table) |
//! | 4 | Apis | apis: domain u8, cbid u32, tid u32, correlation u32, ret i32, start u64, end u64 |
//! | 5 | Devices | devices: device i32, uuid 16 bytes, name str |
//! | 6 | Note | mono_ns u64, count u64, kind str, detail str |
//! | 16 | Control (tracer to library) | tag u8: 1 StepAside + reason str, 2 Resume, 3 FlushNow, 4 OpenWindow + for_ms u64 + reason str, 5 CloseWindow + reason str |
//! | 17 | [`WindowRequest`] (`causeway gpu-window` or the MCP server to the tracer) | pid u32, for_ms u64, who str, why str |
//! | 18 | WindowReply (tracer to that client) | ok u8, detail str |
#![forbid(unsafe_code)]

mod decode;
mod encode;

pub use decode::{decode, WireError};
pub use encode::{encode_all, Encoder};

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"CWG1";
/// The header's length in bytes.
pub const HEADER_LEN: usize = 16;
/// The longest message, header included: 60 KiB, under a unix socket's default send buffer.
pub const MAX_MESSAGE: usize = 60 * 1024;
/// The longest string, in bytes (a kernel's name, a note's detail): longer ones are cut.
pub const MAX_NAME: usize = 4096;
/// Header flag: this message is one part of a longer list, and more parts follow.
pub const FLAG_CONTINUED: u16 = 1;

/// The message kinds (`Header::kind`). Never renumbered.
pub mod kind {
    /// [`crate::Message::Hello`].
    pub const HELLO: u16 = 1;
    /// [`crate::Message::Clock`].
    pub const CLOCK: u16 = 2;
    /// [`crate::Message::Ops`].
    pub const OPS: u16 = 3;
    /// [`crate::Message::Apis`].
    pub const APIS: u16 = 4;
    /// [`crate::Message::Devices`].
    pub const DEVICES: u16 = 5;
    /// [`crate::Message::Note`].
    pub const NOTE: u16 = 6;
    /// [`crate::Message::Control`] (tracer to library).
    pub const CONTROL: u16 = 16;
    /// [`crate::Message::WindowRequest`] (a client to the tracer).
    pub const WINDOW_REQUEST: u16 = 17;
    /// [`crate::Message::WindowReply`] (the tracer to that client).
    pub const WINDOW_REPLY: u16 = 18;
}

/// The note kinds a [`WireNote`] carries: the names of `causeway_model::GpuTimelineNote::KINDS`
/// the library sends.
pub mod note {
    /// The device view began.
    pub const STARTED: &str = "started";
    /// The device view ended (process exit).
    pub const STOPPED: &str = "stopped";
    /// Another CUPTI client took over (a `StepAside` control).
    pub const STEPPED_ASIDE: &str = "stepped_aside";
    /// The other client was done (a `Resume` control).
    pub const RESUMED: &str = "resumed";
    /// The library turned itself off; the reason in the detail.
    pub const OFF: &str = "off";
    /// Records dropped (CUPTI had no buffer, or the socket was full).
    pub const DROPPED: &str = "dropped";
    /// Records without timestamps, not sent.
    pub const ZERO_TIMESTAMPS: &str = "zero_timestamps";
    /// CUPTI's clock stepped against CLOCK_MONOTONIC.
    pub const CLOCK_STEP: &str = "clock_step";
    /// (Written by the tracer.) Another CUPTI client took or turned off the records: a hole from
    /// here to the next `resumed`.
    pub const FOREIGN_CLIENT: &str = "foreign_client";
    /// (Written by the tracer.) The process loads another CUDA injection library.
    pub const OTHER_TOOL: &str = "other_tool";
    /// (Written by the tracer.) The library was loaded into the running process; the main thread's
    /// pause in the detail, its length in ns as the count.
    pub const ATTACHED: &str = "attached";
    /// A library attached to a running process is loaded and records nothing until a window opens.
    pub const DORMANT: &str = "dormant";
    /// A window opened: the library records (who opened it, why, for how long in the detail).
    pub const WINDOW_OPENED: &str = "window_opened";
    /// The window closed (its time ran out, or it was closed): dormant again, a hole in the device
    /// view until the next `window_opened`.
    pub const WINDOW_CLOSED: &str = "window_closed";
    /// (Written by the tracer.) A trigger fired (`trace --gpu-trigger`): what the tracer saw (a
    /// utilization drop, a slow step, a serving spike) and the window it opened, or why none.
    pub const TRIGGER: &str = "trigger";
    /// (Written by the tracer.) The library records from the attach on but the tracer keeps the
    /// records in memory for the last seconds only (`--gpu-pre-trigger`), storing them only around
    /// the windows: outside its `window_opened`..`window_closed` notes nothing is stored.
    pub const ARMED: &str = "armed";
    /// Every kind above.
    pub const ALL: [&str; 16] = [
        STARTED,
        STOPPED,
        STEPPED_ASIDE,
        RESUMED,
        OFF,
        DROPPED,
        ZERO_TIMESTAMPS,
        CLOCK_STEP,
        FOREIGN_CLIENT,
        OTHER_TOOL,
        ATTACHED,
        DORMANT,
        WINDOW_OPENED,
        WINDOW_CLOSED,
        TRIGGER,
        ARMED,
    ];
}

/// Every message's first 16 bytes (after the magic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the body is: one of [`kind`].
    pub kind: u16,
    /// [`FLAG_CONTINUED`] or 0.
    pub flags: u16,
    /// The process that sent it (the library's `getpid()`; 0 from the tracer).
    pub pid: u32,
    /// The sender's message counter (wrapping).
    pub seq: u32,
}

/// The library's first message: what it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// `cuptiGetVersion` (CUPTI's API version); 0 when no CUPTI was found.
    pub cupti_version: u32,
    /// `cuDriverGetVersion` (12080 for 12.8); 0 when unknown.
    pub driver_version: i32,
    /// The libcupti file used; empty when none.
    pub cupti_path: String,
    /// The injection library's version.
    pub library_version: String,
    /// CUPTI's thread id type in effect: 1 (`SYSTEM`) means API records' `tid` is the Linux tid.
    pub thread_id_type: u32,
}

/// One calibration of CUPTI's clock against `CLOCK_MONOTONIC` (eBPF's clock): `cuptiGetTimestamp`
/// read between two monotonic reads, the narrowest of several tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockPair {
    /// CUPTI's timestamp.
    pub cupti_ns: u64,
    /// The midpoint of the two monotonic reads.
    pub mono_ns: u64,
    /// Half their distance: the pair's error bound.
    pub half_width_ns: u64,
}

/// One device activity record: a kernel, copy, memset or synchronization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireOp {
    /// `GpuOpKind::code`: 1 kernel, 2 memcpy, 3 memset, 4 sync.
    pub kind: u8,
    /// A copy's CUPTI `copyKind`, a synchronization's type; 0 otherwise.
    pub subkind: u8,
    /// CUDA device ordinal; -1 when the record names none (synchronizations).
    pub device: i32,
    /// CUPTI's context id.
    pub context: u32,
    /// CUPTI's stream id.
    pub stream: u32,
    /// CUPTI's correlation id (the launching call's API record has the same).
    pub correlation: u32,
    /// CUPTI timestamp, ns.
    pub start: u64,
    /// CUPTI timestamp, ns.
    pub end: u64,
    /// Bytes copied or set; 0 otherwise.
    pub bytes: u64,
    /// A kernel's name (as CUPTI gives it, mangled); empty otherwise. At most [`MAX_NAME`] bytes.
    pub name: String,
}

/// One driver or runtime API record: the call that launched device work, on which thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireApi {
    /// 4 driver, 5 runtime (CUPTI's activity kinds).
    pub domain: u8,
    /// CUPTI's callback id within the domain.
    pub cbid: u32,
    /// The calling thread (a Linux tid when the thread id type is `SYSTEM`).
    pub tid: u32,
    /// CUPTI's correlation id.
    pub correlation: u32,
    /// The call's return value.
    pub ret: i32,
    /// CUPTI timestamp, ns.
    pub start: u64,
    /// CUPTI timestamp, ns.
    pub end: u64,
}

/// A CUDA device as CUPTI described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireDevice {
    /// CUDA device ordinal in the process.
    pub device: i32,
    /// Its UUID's 16 bytes (NVML spells it `GPU-` and the hex).
    pub uuid: [u8; 16],
    /// Its name.
    pub name: String,
}

/// Something about the device view a reader must know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireNote {
    /// When, `CLOCK_MONOTONIC` ns.
    pub mono_ns: u64,
    /// One of [`note::ALL`].
    pub kind: String,
    /// How many (records dropped, ...); 0 where no count applies.
    pub count: u64,
    /// The line a person reads: what and why.
    pub detail: String,
}

/// What the tracer asks of the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Another CUPTI client took over the records: stop flushing until `Resume`.
    StepAside {
        /// Why (who took over).
        reason: String,
    },
    /// The other client is done: register again and re-enable.
    Resume,
    /// Flush CUPTI's buffers now.
    FlushNow,
    /// Record for `for_ms` milliseconds from now (a library attached to a running process, which
    /// is dormant between windows); a window already open is extended.
    OpenWindow {
        /// How long.
        for_ms: u64,
        /// Who opened it and why (the `window_opened` note's detail).
        reason: String,
    },
    /// Close the open window now (flush, then dormant).
    CloseWindow {
        /// Why (the `window_closed` note's detail).
        reason: String,
    },
}

/// A request to the tracer serving process `pid` (`causeway gpu-window`, the MCP server): open a
/// window of `for_ms` on that process's device view, or close it (`for_ms` 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRequest {
    /// The process.
    pub pid: u32,
    /// How long the window stays open, ms; 0 closes the open one.
    pub for_ms: u64,
    /// Who asks (`cli`, `mcp`, `trigger`).
    pub who: String,
    /// Why, in the asker's words.
    pub why: String,
}

/// One message's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The library's first message.
    Hello(Hello),
    /// Clock calibrations.
    Clock(Vec<ClockPair>),
    /// Device work.
    Ops(Vec<WireOp>),
    /// The API calls that launched it.
    Apis(Vec<WireApi>),
    /// The devices.
    Devices(Vec<WireDevice>),
    /// A note.
    Note(WireNote),
    /// Tracer to library.
    Control(Control),
    /// A client to the tracer.
    WindowRequest(WindowRequest),
    /// The tracer's answer to a [`WindowRequest`]: whether it serves that process and what it did.
    WindowReply {
        /// The window was opened (or closed) as asked.
        ok: bool,
        /// What happened, or why not.
        detail: String,
    },
}

impl Message {
    /// Its kind code (one of [`kind`]).
    pub fn kind(&self) -> u16 {
        match self {
            Message::Hello(_) => kind::HELLO,
            Message::Clock(_) => kind::CLOCK,
            Message::Ops(_) => kind::OPS,
            Message::Apis(_) => kind::APIS,
            Message::Devices(_) => kind::DEVICES,
            Message::Note(_) => kind::NOTE,
            Message::Control(_) => kind::CONTROL,
            Message::WindowRequest(_) => kind::WINDOW_REQUEST,
            Message::WindowReply { .. } => kind::WINDOW_REPLY,
        }
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests;
