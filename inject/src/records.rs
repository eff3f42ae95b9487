//! CUPTI activity records read by their stable prefix, so one reader serves CUDA 12 and 13.
//!
//! Each activity kind's struct grew across CUDA versions (`CUpti_ActivityKernel9`, ...`Kernel11`)
//! by fields added at the end, and differs in size between CUDA 12 and 13; the fields read here
//! sit at the same offsets in both. The offsets are named consts, checked against NVIDIA's real
//! headers by the test `layouts_match_nvidia_headers` (the layout files that
//! `scripts/cupti-headers-check.sh` writes). A record is read from the bytes CUPTI handed us with
//! unaligned little-endian reads, each bounds-checked against the rest of the buffer; a kernel's or
//! device's name is a `const char*` into CUPTI's memory, read by [`read_c_name`] with a length cap.

use causeway_gpu_wire::{WireApi, WireDevice, WireOp, MAX_NAME};

/// CUPTI activity kinds (`CUpti_ActivityKind`) read here.
pub mod kind {
    /// `CUPTI_ACTIVITY_KIND_MEMCPY`.
    pub const MEMCPY: u32 = 1;
    /// `CUPTI_ACTIVITY_KIND_MEMSET`.
    pub const MEMSET: u32 = 2;
    /// `CUPTI_ACTIVITY_KIND_KERNEL` (serializing; read like the concurrent one).
    pub const KERNEL: u32 = 3;
    /// `CUPTI_ACTIVITY_KIND_DRIVER`.
    pub const DRIVER: u32 = 4;
    /// `CUPTI_ACTIVITY_KIND_RUNTIME`.
    pub const RUNTIME: u32 = 5;
    /// `CUPTI_ACTIVITY_KIND_DEVICE`.
    pub const DEVICE: u32 = 8;
    /// `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`.
    pub const CONCURRENT_KERNEL: u32 = 10;
    /// `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`.
    pub const SYNCHRONIZATION: u32 = 38;
}

/// `CUpti_ActivityKernel*` (kinds 10 and 3).
pub mod kernel {
    /// `start` u64.
    pub const START: usize = 16;
    /// `end` u64.
    pub const END: usize = 24;
    /// `deviceId` u32.
    pub const DEVICE_ID: usize = 40;
    /// `contextId` u32.
    pub const CONTEXT_ID: usize = 44;
    /// `streamId` u32.
    pub const STREAM_ID: usize = 48;
    /// `correlationId` u32.
    pub const CORRELATION_ID: usize = 92;
    /// `name` `const char*`.
    pub const NAME: usize = 104;
}

/// `CUpti_ActivityMemcpy*` (kind 1).
pub mod memcpy {
    /// `copyKind` u8.
    pub const COPY_KIND: usize = 4;
    /// `bytes` u64.
    pub const BYTES: usize = 8;
    /// `start` u64.
    pub const START: usize = 16;
    /// `end` u64.
    pub const END: usize = 24;
    /// `deviceId` u32.
    pub const DEVICE_ID: usize = 32;
    /// `contextId` u32.
    pub const CONTEXT_ID: usize = 36;
    /// `streamId` u32.
    pub const STREAM_ID: usize = 40;
    /// `correlationId` u32.
    pub const CORRELATION_ID: usize = 44;
}

/// `CUpti_ActivityMemset*` (kind 2).
pub mod memset {
    /// `bytes` u64.
    pub const BYTES: usize = 8;
    /// `start` u64.
    pub const START: usize = 16;
    /// `end` u64.
    pub const END: usize = 24;
    /// `deviceId` u32.
    pub const DEVICE_ID: usize = 32;
    /// `contextId` u32.
    pub const CONTEXT_ID: usize = 36;
    /// `streamId` u32.
    pub const STREAM_ID: usize = 40;
    /// `correlationId` u32.
    pub const CORRELATION_ID: usize = 44;
}

/// `CUpti_ActivitySynchronization*` (kind 38).
pub mod sync {
    /// `type` u32 (`CUpti_ActivitySynchronizationType`).
    pub const TYPE: usize = 4;
    /// `start` u64.
    pub const START: usize = 8;
    /// `end` u64.
    pub const END: usize = 16;
    /// `correlationId` u32.
    pub const CORRELATION_ID: usize = 24;
    /// `contextId` u32.
    pub const CONTEXT_ID: usize = 28;
    /// `streamId` u32 (`CUPTI_SYNCHRONIZATION_INVALID_VALUE` for a context synchronize).
    pub const STREAM_ID: usize = 32;
}

/// `CUpti_ActivityAPI` (kinds 4 and 5).
pub mod api {
    /// `cbid` u32.
    pub const CBID: usize = 4;
    /// `start` u64.
    pub const START: usize = 8;
    /// `end` u64.
    pub const END: usize = 16;
    /// `processId` u32 (not read: every record is this process's; its offset is checked all the same).
    #[cfg_attr(not(test), allow(dead_code))]
    pub const PROCESS_ID: usize = 24;
    /// `threadId` u32.
    pub const THREAD_ID: usize = 28;
    /// `correlationId` u32.
    pub const CORRELATION_ID: usize = 32;
    /// `returnValue` u32.
    pub const RETURN_VALUE: usize = 36;
}

/// `CUpti_ActivityDevice*` (kind 8).
pub mod device {
    /// `id` u32.
    pub const ID: usize = 112;
    /// `uuid` (`CUuuid`, 16 bytes).
    pub const UUID: usize = 120;
    /// `name` `const char*`.
    pub const NAME: usize = 136;
}

/// What one record is, converted to its wire form. A kernel's or device's name is not read yet:
/// `name_ptr` is the `const char*` the record holds (0 for NULL), read by [`read_c_name`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A kernel, copy, memset or synchronization (its `name` empty).
    Op {
        /// The op.
        op: WireOp,
        /// A kernel's name pointer; 0 otherwise.
        name_ptr: usize,
    },
    /// A driver or runtime API call.
    Api(WireApi),
    /// A device (its `name` empty).
    Device {
        /// The device.
        device: WireDevice,
        /// The name pointer.
        name_ptr: usize,
    },
    /// An op or API record whose start and end are both 0: counted, not shipped.
    ZeroTimestamps,
    /// A kind not read here, or a record shorter than its prefix.
    Other,
}

/// A synchronization's stream id when it names none.
const NO_STREAM: u32 = u32::MAX;

fn u32_at(r: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(r.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(r: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(r.get(at..at + 8)?.try_into().ok()?))
}

/// Reads the record at the start of `r` (the bytes from the record to the end of its buffer).
pub fn parse(r: &[u8]) -> Record {
    parse_checked(r).unwrap_or(Record::Other)
}

fn parse_checked(r: &[u8]) -> Option<Record> {
    let op = |kind: u8, subkind: u8, start: u64, end: u64| WireOp {
        kind,
        subkind,
        device: -1,
        context: 0,
        stream: 0,
        correlation: 0,
        start,
        end,
        bytes: 0,
        name: String::new(),
    };
    let rec = match u32_at(r, 0)? {
        kind::CONCURRENT_KERNEL | kind::KERNEL => {
            let mut o = op(1, 0, u64_at(r, kernel::START)?, u64_at(r, kernel::END)?);
            o.device = u32_at(r, kernel::DEVICE_ID)? as i32;
            o.context = u32_at(r, kernel::CONTEXT_ID)?;
            o.stream = u32_at(r, kernel::STREAM_ID)?;
            o.correlation = u32_at(r, kernel::CORRELATION_ID)?;
            Record::Op { op: o, name_ptr: u64_at(r, kernel::NAME)? as usize }
        }
        kind::MEMCPY => {
            let mut o = op(2, *r.get(memcpy::COPY_KIND)?, u64_at(r, memcpy::START)?, u64_at(r, memcpy::END)?);
            o.bytes = u64_at(r, memcpy::BYTES)?;
            o.device = u32_at(r, memcpy::DEVICE_ID)? as i32;
            o.context = u32_at(r, memcpy::CONTEXT_ID)?;
            o.stream = u32_at(r, memcpy::STREAM_ID)?;
            o.correlation = u32_at(r, memcpy::CORRELATION_ID)?;
            Record::Op { op: o, name_ptr: 0 }
        }
        kind::MEMSET => {
            let mut o = op(3, 0, u64_at(r, memset::START)?, u64_at(r, memset::END)?);
            o.bytes = u64_at(r, memset::BYTES)?;
            o.device = u32_at(r, memset::DEVICE_ID)? as i32;
            o.context = u32_at(r, memset::CONTEXT_ID)?;
            o.stream = u32_at(r, memset::STREAM_ID)?;
            o.correlation = u32_at(r, memset::CORRELATION_ID)?;
            Record::Op { op: o, name_ptr: 0 }
        }
        kind::SYNCHRONIZATION => {
            let ty = u32_at(r, sync::TYPE)?.min(u8::MAX as u32) as u8;
            let mut o = op(4, ty, u64_at(r, sync::START)?, u64_at(r, sync::END)?);
            o.correlation = u32_at(r, sync::CORRELATION_ID)?;
            o.context = u32_at(r, sync::CONTEXT_ID)?;
            o.stream = match u32_at(r, sync::STREAM_ID)? {
                NO_STREAM => 0,
                s => s,
            };
            Record::Op { op: o, name_ptr: 0 }
        }
        k @ (kind::DRIVER | kind::RUNTIME) => Record::Api(WireApi {
            domain: k as u8,
            cbid: u32_at(r, api::CBID)?,
            start: u64_at(r, api::START)?,
            end: u64_at(r, api::END)?,
            tid: u32_at(r, api::THREAD_ID)?,
            correlation: u32_at(r, api::CORRELATION_ID)?,
            ret: u32_at(r, api::RETURN_VALUE)? as i32,
        }),
        kind::DEVICE => {
            let mut uuid = [0u8; 16];
            uuid.copy_from_slice(r.get(device::UUID..device::UUID + 16)?);
            let d = WireDevice { device: u32_at(r, device::ID)? as i32, uuid, name: String::new() };
            Record::Device { device: d, name_ptr: u64_at(r, device::NAME)? as usize }
        }
        _ => Record::Other,
    };
    Some(match rec {
        Record::Op { op, .. } if op.start == 0 && op.end == 0 => Record::ZeroTimestamps,
        Record::Api(a) if a.start == 0 && a.end == 0 => Record::ZeroTimestamps,
        rec => rec,
    })
}

/// The NUL-terminated string at `ptr`, at most [`MAX_NAME`] bytes of it, as UTF-8 (invalid bytes
/// replaced); empty for NULL.
///
/// # Safety
/// `ptr` is 0 or points to a NUL-terminated string, or to at least [`MAX_NAME`] readable bytes
/// (CUPTI's names live as long as the records that point to them).
pub unsafe fn read_c_name(ptr: usize) -> String {
    if ptr == 0 {
        return String::new();
    }
    let p = ptr as *const libc::c_char;
    // SAFETY: the caller's contract: every byte up to the NUL, or the first MAX_NAME, is readable.
    let len = unsafe { libc::strnlen(p, MAX_NAME) };
    // SAFETY: the `len` bytes strnlen just read.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
