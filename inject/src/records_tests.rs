//! The record readers on hand-made records, and their offsets against NVIDIA's headers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn a_kernel_record_reads_with_its_name() {
    let name = c"_Z6kernelPfi";
    let mut b = vec![0u8; 208];
    for k in [kind::CONCURRENT_KERNEL, kind::KERNEL] {
        put32(&mut b, 0, k);
        put64(&mut b, kernel::START, 1000);
        put64(&mut b, kernel::END, 1500);
        put32(&mut b, kernel::DEVICE_ID, 3);
        put32(&mut b, kernel::CONTEXT_ID, 1);
        put32(&mut b, kernel::STREAM_ID, 13);
        put32(&mut b, kernel::CORRELATION_ID, 77);
        put64(&mut b, kernel::NAME, name.as_ptr() as u64);
        let Record::Op { op, name_ptr } = parse(&b) else { panic!("{:?}", parse(&b)) };
        assert_eq!((op.kind, op.device, op.context, op.stream, op.correlation), (1, 3, 1, 13, 77));
        assert_eq!((op.start, op.end, op.bytes), (1000, 1500, 0));
        // SAFETY: the pointer of `name`, a NUL-terminated string alive here.
        assert_eq!(unsafe { read_c_name(name_ptr) }, "_Z6kernelPfi");
    }
    put64(&mut b, kernel::NAME, 0);
    let Record::Op { name_ptr, .. } = parse(&b) else { panic!() };
    // SAFETY: NULL is allowed.
    assert_eq!(unsafe { read_c_name(name_ptr) }, "");
}

#[test]
fn names_are_read_up_to_4096_bytes() {
    let long = vec![b'a'; 10_000];
    // SAFETY: 10,000 readable bytes, more than the cap.
    assert_eq!(unsafe { read_c_name(long.as_ptr() as usize) }.len(), MAX_NAME);
}

#[test]
fn copies_memsets_and_synchronizations_read() {
    let mut b = vec![0u8; 64];
    put32(&mut b, 0, kind::MEMCPY);
    b[memcpy::COPY_KIND] = 1;
    put64(&mut b, memcpy::BYTES, 4096);
    put64(&mut b, memcpy::START, 5);
    put64(&mut b, memcpy::END, 9);
    put32(&mut b, memcpy::DEVICE_ID, 1);
    put32(&mut b, memcpy::CONTEXT_ID, 2);
    put32(&mut b, memcpy::STREAM_ID, 7);
    put32(&mut b, memcpy::CORRELATION_ID, 8);
    let Record::Op { op, .. } = parse(&b) else { panic!() };
    assert_eq!((op.kind, op.subkind, op.bytes, op.start, op.end), (2, 1, 4096, 5, 9));
    assert_eq!((op.device, op.context, op.stream, op.correlation), (1, 2, 7, 8));

    put32(&mut b, 0, kind::MEMSET);
    let Record::Op { op, .. } = parse(&b) else { panic!() };
    assert_eq!((op.kind, op.subkind, op.bytes, op.correlation), (3, 0, 4096, 8));

    let mut b = vec![0u8; 48];
    put32(&mut b, 0, kind::SYNCHRONIZATION);
    put32(&mut b, sync::TYPE, 4);
    put64(&mut b, sync::START, 10);
    put64(&mut b, sync::END, 20);
    put32(&mut b, sync::CORRELATION_ID, 31);
    put32(&mut b, sync::CONTEXT_ID, 1);
    put32(&mut b, sync::STREAM_ID, u32::MAX);
    let Record::Op { op, .. } = parse(&b) else { panic!() };
    assert_eq!((op.kind, op.subkind, op.device, op.stream, op.correlation), (4, 4, -1, 0, 31));
}

#[test]
fn api_and_device_records_read() {
    let mut b = vec![0u8; 40];
    put32(&mut b, 0, kind::RUNTIME);
    put32(&mut b, api::CBID, 211);
    put64(&mut b, api::START, 100);
    put64(&mut b, api::END, 130);
    put32(&mut b, api::PROCESS_ID, 4000);
    put32(&mut b, api::THREAD_ID, 4001);
    put32(&mut b, api::CORRELATION_ID, 99);
    put32(&mut b, api::RETURN_VALUE, 700);
    assert_eq!(
        parse(&b),
        Record::Api(WireApi { domain: 5, cbid: 211, tid: 4001, correlation: 99, ret: 700, start: 100, end: 130 })
    );

    let name = c"NVIDIA H100 80GB HBM3";
    let mut b = vec![0u8; 160];
    put32(&mut b, 0, kind::DEVICE);
    put32(&mut b, device::ID, 2);
    b[device::UUID..device::UUID + 16].copy_from_slice(&[0xab; 16]);
    put64(&mut b, device::NAME, name.as_ptr() as u64);
    let Record::Device { device, name_ptr } = parse(&b) else { panic!() };
    assert_eq!((device.device, device.uuid), (2, [0xab; 16]));
    // SAFETY: `name` is alive.
    assert_eq!(unsafe { read_c_name(name_ptr) }, "NVIDIA H100 80GB HBM3");
}

#[test]
fn records_without_timestamps_short_records_and_other_kinds() {
    let mut b = vec![0u8; 208];
    put32(&mut b, 0, kind::CONCURRENT_KERNEL);
    assert_eq!(parse(&b), Record::ZeroTimestamps);
    put32(&mut b, 0, kind::DRIVER);
    assert_eq!(parse(&b), Record::ZeroTimestamps);
    put32(&mut b, 0, 17); // another kind
    assert_eq!(parse(&b), Record::Other);
    // a kernel record cut before its name: never read beyond the bytes given
    put32(&mut b, 0, kind::CONCURRENT_KERNEL);
    put64(&mut b, kernel::START, 1);
    for cut in 0..kernel::NAME + 8 {
        assert_eq!(parse(&b[..cut]), Record::Other, "cut at {cut}");
    }
    assert!(matches!(parse(&b[..kernel::NAME + 8]), Record::Op { .. }));
}

/// The offsets read here, by the key `scripts/cupti-headers-check.sh` writes for them
/// (`mock-cuda/src/layout_probe.c` prints them).
fn offsets() -> Vec<(&'static str, usize)> {
    vec![
        ("kernel.start", kernel::START),
        ("kernel.end", kernel::END),
        ("kernel.deviceId", kernel::DEVICE_ID),
        ("kernel.contextId", kernel::CONTEXT_ID),
        ("kernel.streamId", kernel::STREAM_ID),
        ("kernel.correlationId", kernel::CORRELATION_ID),
        ("kernel.name", kernel::NAME),
        ("memcpy.copyKind", memcpy::COPY_KIND),
        ("memcpy.bytes", memcpy::BYTES),
        ("memcpy.start", memcpy::START),
        ("memcpy.end", memcpy::END),
        ("memcpy.deviceId", memcpy::DEVICE_ID),
        ("memcpy.contextId", memcpy::CONTEXT_ID),
        ("memcpy.streamId", memcpy::STREAM_ID),
        ("memcpy.correlationId", memcpy::CORRELATION_ID),
        ("memset.bytes", memset::BYTES),
        ("memset.start", memset::START),
        ("memset.end", memset::END),
        ("memset.deviceId", memset::DEVICE_ID),
        ("memset.contextId", memset::CONTEXT_ID),
        ("memset.streamId", memset::STREAM_ID),
        ("memset.correlationId", memset::CORRELATION_ID),
        ("sync.type", sync::TYPE),
        ("sync.start", sync::START),
        ("sync.end", sync::END),
        ("sync.correlationId", sync::CORRELATION_ID),
        ("sync.contextId", sync::CONTEXT_ID),
        ("sync.streamId", sync::STREAM_ID),
        ("api.cbid", api::CBID),
        ("api.start", api::START),
        ("api.end", api::END),
        ("api.processId", api::PROCESS_ID),
        ("api.threadId", api::THREAD_ID),
        ("api.correlationId", api::CORRELATION_ID),
        ("api.returnValue", api::RETURN_VALUE),
        ("device.id", device::ID),
        ("device.uuid", device::UUID),
        ("device.name", device::NAME),
    ]
}

/// The target directory (`scripts/env.sh`'s `CARGO_TARGET_DIR`).
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = option_env!("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/causeway/target")
}

/// The CUPTI constants used, by the key the script writes for them (`const.<NAME>`).
fn constants() -> Vec<(&'static str, usize)> {
    use crate::cupti;
    vec![
        ("CUPTI_ACTIVITY_KIND_MEMCPY", kind::MEMCPY as usize),
        ("CUPTI_ACTIVITY_KIND_MEMSET", kind::MEMSET as usize),
        ("CUPTI_ACTIVITY_KIND_KERNEL", kind::KERNEL as usize),
        ("CUPTI_ACTIVITY_KIND_DRIVER", kind::DRIVER as usize),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", kind::RUNTIME as usize),
        ("CUPTI_ACTIVITY_KIND_DEVICE", kind::DEVICE as usize),
        ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", kind::CONCURRENT_KERNEL as usize),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", kind::SYNCHRONIZATION as usize),
        ("CUPTI_ACTIVITY_FLAG_FLUSH_FORCED", cupti::FLUSH_FORCED as usize),
        ("CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM", cupti::THREAD_ID_TYPE_SYSTEM as usize),
        ("CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE", cupti::ATTR_DEVICE_BUFFER_SIZE as usize),
        ("CUPTI_SYNCHRONIZATION_INVALID_VALUE", NO_STREAM as usize),
        ("CUPTI_SUCCESS", cupti::SUCCESS as usize),
        ("CUPTI_ERROR_NOT_COMPATIBLE", cupti::ERROR_NOT_COMPATIBLE as usize),
        ("CUPTI_ERROR_NOT_INITIALIZED", cupti::ERROR_NOT_INITIALIZED as usize),
        ("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED", cupti::ERROR_MULTIPLE_SUBSCRIBERS as usize),
    ]
}

/// `key=value` lines (`kernel.start=16`, `kernel.size=208`), comments (`#`) and blanks skipped.
fn read_layout(text: &str) -> BTreeMap<String, i64> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn layouts_match_nvidia_headers() {
    let dir = target_dir().join("cupti-wheels");
    for major in [12, 13] {
        let path = dir.join(format!("layout-{major}.txt"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}. Run `bash scripts/cupti-headers-check.sh` (it writes the record layouts of \
                 NVIDIA's CUPTI headers for CUDA 12 and 13 there), then this test again",
                path.display()
            )
        });
        let layout = read_layout(&text);
        let mut wrong = Vec::new();
        for (key, ours) in offsets() {
            match layout.get(key) {
                Some(&theirs) if theirs == ours as i64 => {}
                Some(&theirs) => wrong.push(format!("{key}: ours {ours}, CUDA {major}'s header {theirs}")),
                None => wrong.push(format!("{key}: not in {}", path.display())),
            }
        }
        // every field read lies inside its record as that CUDA version defines it
        for (rec, last_end) in [
            ("kernel", kernel::NAME + 8),
            ("memcpy", memcpy::CORRELATION_ID + 4),
            ("memset", memset::CORRELATION_ID + 4),
            ("sync", sync::STREAM_ID + 4),
            ("api", api::RETURN_VALUE + 4),
            ("device", device::NAME + 8),
        ] {
            match layout.get(&format!("{rec}.size")) {
                Some(&size) if size >= last_end as i64 => {}
                Some(&size) => wrong.push(format!("{rec}.size = {size} in CUDA {major}, we read to {last_end}")),
                None => wrong.push(format!("{rec}.size: not in {}", path.display())),
            }
        }
        for (name, ours) in constants() {
            // as C ints: CUPTI_SYNCHRONIZATION_INVALID_VALUE is -1 in one header, 0xffffffff in another
            match layout.get(&format!("const.{name}")) {
                Some(&theirs) if theirs as u32 == ours as u32 => {}
                Some(&theirs) => wrong.push(format!("{name}: ours {ours}, CUDA {major}'s header {theirs}")),
                None => wrong.push(format!("const.{name}: not in {}", path.display())),
            }
        }
        assert!(wrong.is_empty(), "record layouts of CUDA {major}:\n{}", wrong.join("\n"));
    }
}
