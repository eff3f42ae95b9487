//! Round trips, the split into messages of at most 60 KiB, and malformed input (truncations, bit
//! flips, random bytes): errors, never panics.

use proptest::prelude::*;

use crate::*;

fn op(i: u32, name: &str) -> WireOp {
    WireOp {
        kind: 1 + (i % 4) as u8,
        subkind: (i % 11) as u8,
        device: (i % 3) as i32 - 1,
        context: i.wrapping_mul(7),
        stream: i % 13,
        correlation: i,
        start: 1_000_000 + i as u64 * 10,
        end: 1_000_005 + i as u64 * 10,
        bytes: i as u64 * 4096,
        name: name.to_string(),
    }
}

fn api(i: u32) -> WireApi {
    WireApi {
        domain: if i % 2 == 0 { 4 } else { 5 },
        cbid: 200 + i % 50,
        tid: 4242 + i % 3,
        correlation: i,
        ret: -(i as i32 % 3),
        start: i as u64 * 3,
        end: i as u64 * 3 + 2,
    }
}

fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            cupti_version: 26,
            driver_version: 12080,
            cupti_path: "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.12".into(),
            library_version: "0.1.0".into(),
            thread_id_type: 1,
        }),
        Message::Clock(vec![ClockPair { cupti_ns: 5, mono_ns: 7, half_width_ns: 40 }; 3]),
        Message::Ops((0..100).map(|i| op(i, ["_Z3fooPf", "", "ampere_sgemm", "é≠"][i as usize % 4])).collect()),
        Message::Apis((0..100).map(api).collect()),
        Message::Devices(vec![
            WireDevice { device: 0, uuid: [7; 16], name: "NVIDIA H100 80GB HBM3".into() },
            WireDevice { device: 1, uuid: [9; 16], name: String::new() },
        ]),
        Message::Note(WireNote { mono_ns: 99, kind: note::DROPPED.into(), count: 12, detail: "socket full".into() }),
        Message::Control(Control::StepAside { reason: "kineto registered its callbacks".into() }),
        Message::Control(Control::Resume),
        Message::Control(Control::FlushNow),
        Message::Control(Control::OpenWindow { for_ms: 10_000, reason: "cli: the step time doubled".into() }),
        Message::Control(Control::CloseWindow { reason: "mcp: enough seen".into() }),
        Message::WindowRequest(crate::WindowRequest {
            pid: 4821,
            for_ms: 2500,
            who: "cli".into(),
            why: "a dip".into(),
        }),
        Message::WindowReply { ok: true, detail: "opened for 2.5 s".into() },
        Message::Ops(vec![]),
        Message::Apis(vec![]),
        Message::Clock(vec![]),
        Message::Devices(vec![]),
    ]
}

/// Decodes every part and joins the lists back into one message.
fn decode_joined(parts: &[Vec<u8>]) -> Message {
    let mut joined: Option<Message> = None;
    for (i, p) in parts.iter().enumerate() {
        assert!(p.len() <= MAX_MESSAGE, "part of {} bytes", p.len());
        let (h, m) = decode(p).unwrap();
        let last = i + 1 == parts.len();
        assert_eq!(h.flags & FLAG_CONTINUED == 0, last, "part {i} of {}", parts.len());
        joined = Some(match (joined, m) {
            (None, m) => m,
            (Some(Message::Ops(mut a)), Message::Ops(b)) => {
                a.extend(b);
                Message::Ops(a)
            }
            (Some(Message::Apis(mut a)), Message::Apis(b)) => {
                a.extend(b);
                Message::Apis(a)
            }
            (Some(Message::Clock(mut a)), Message::Clock(b)) => {
                a.extend(b);
                Message::Clock(a)
            }
            (Some(Message::Devices(mut a)), Message::Devices(b)) => {
                a.extend(b);
                Message::Devices(a)
            }
            (a, b) => panic!("parts of different kinds: {a:?} then {b:?}"),
        });
    }
    joined.unwrap()
}

#[test]
fn every_message_round_trips_with_its_header() {
    let mut seq = 41;
    for msg in samples() {
        let mut out = Vec::new();
        encode_all(4242, &mut seq, &msg, &mut out);
        assert_eq!(out.len(), 1, "{msg:?}");
        let (h, back) = decode(&out[0]).unwrap();
        assert_eq!(back, msg);
        assert_eq!(&out[0][..4], b"CWG1");
        assert_eq!(h, Header { kind: msg.kind(), flags: 0, pid: 4242, seq: seq - 1 });
    }
    assert_eq!(seq, 41 + samples().len() as u32);
}

#[test]
fn the_header_is_little_endian_at_fixed_offsets() {
    let mut out = Vec::new();
    let mut seq = 0x0102_0304;
    encode_all(0x0a0b_0c0d, &mut seq, &Message::Control(Control::Resume), &mut out);
    assert_eq!(out[0], [b'C', b'W', b'G', b'1', 16, 0, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a, 4, 3, 2, 1, 2]);
}

#[test]
fn long_lists_split_into_messages_of_at_most_60_kib() {
    // 5,000 ops of 500 distinct names of 300 bytes, some names repeated inside a message
    let names: Vec<String> = (0..500).map(|i| format!("{i:0>300}")).collect();
    let ops: Vec<WireOp> = (0..5000).map(|i| op(i, &names[i as usize % 500])).collect();
    let apis: Vec<WireApi> = (0..10_000).map(api).collect();
    let clock = vec![ClockPair { cupti_ns: 1, mono_ns: 2, half_width_ns: 3 }; 5000];
    let devices: Vec<WireDevice> =
        (0..40).map(|i| WireDevice { device: i, uuid: [i as u8; 16], name: "x".repeat(4000) }).collect();
    for msg in [Message::Ops(ops), Message::Apis(apis), Message::Clock(clock), Message::Devices(devices)] {
        let mut enc = Encoder::new(7);
        let parts = enc.encode(&msg).to_vec();
        assert!(parts.len() > 1, "{} split into {}", msg.kind(), parts.len());
        let seqs: Vec<u32> = parts.iter().map(|p| decode(p).unwrap().0.seq).collect();
        assert_eq!(seqs, (0..parts.len() as u32).collect::<Vec<_>>());
        assert_eq!(decode_joined(&parts), msg);
        // the encoder's buffers are reused: encoding again gives the same parts, counter on
        let again = enc.encode(&msg).len();
        assert_eq!(again, parts.len());
        assert_eq!(enc.seq(), 2 * parts.len() as u32);
    }
}

#[test]
fn names_are_cut_at_4096_bytes_on_a_character_boundary() {
    let long = "é".repeat(3000); // 6000 bytes
    let msg = Message::Ops(vec![op(1, &long)]);
    let mut out = Vec::new();
    encode_all(1, &mut 0, &msg, &mut out);
    let Message::Ops(ops) = decode(&out[0]).unwrap().1 else { panic!() };
    assert_eq!(ops[0].name.len(), 4096);
    assert_eq!(ops[0].name, "é".repeat(2048));
    let note = Message::Note(WireNote { mono_ns: 0, kind: "off".into(), count: 0, detail: "a".repeat(10_000) });
    out.clear();
    encode_all(1, &mut 0, &note, &mut out);
    let Message::Note(n) = decode(&out[0]).unwrap().1 else { panic!() };
    assert_eq!(n.detail.len(), MAX_NAME);
    assert_eq!(truncate_str("abc", 2), "ab");
}

#[test]
fn the_library_sends_only_note_kinds_the_model_knows() {
    let known: Vec<&str> = causeway_model::GpuTimelineNote::KINDS.iter().map(|(k, _)| *k).collect();
    for k in note::ALL {
        assert!(known.contains(&k), "{k} is not a GpuTimelineNote kind");
    }
}

#[test]
fn op_kind_codes_are_the_models() {
    use causeway_model::GpuOpKind;
    assert_eq!([1, 2, 3, 4], GpuOpKind::ALL.map(|k| k.code()));
}

#[test]
fn specific_malformations_are_named() {
    let mut out = Vec::new();
    encode_all(1, &mut 0, &Message::Ops(vec![op(1, "k")]), &mut out);
    let good = &out[0];
    assert_eq!(decode(&good[..3]), Err(WireError::Truncated { at: 0, need: 4, len: 3 }));
    let mut bad = good.clone();
    bad[0] = b'X';
    assert_eq!(decode(&bad), Err(WireError::BadMagic));
    let mut bad = good.clone();
    bad[4] = 99;
    assert_eq!(decode(&bad), Err(WireError::UnknownKind(99)));
    let mut bad = good.clone();
    bad.push(0);
    assert_eq!(decode(&bad), Err(WireError::TrailingBytes(1)));
    // the op's name index (its last 4 bytes) beyond the one-string table
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&5u32.to_le_bytes());
    assert_eq!(decode(&bad), Err(WireError::BadStringIndex { index: 5, strings: 1 }));
    // a count that promises more entries than the bytes hold: refused before any allocation
    let mut bad = good.clone();
    bad[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(decode(&bad), Err(WireError::Truncated { .. })));
    let mut bad = good.clone();
    bad[HEADER_LEN + 6] = 0xff; // the string's one byte
    assert_eq!(decode(&bad), Err(WireError::NotUtf8));
    assert_eq!(decode(&vec![0u8; MAX_MESSAGE + 1]), Err(WireError::TooLong(MAX_MESSAGE + 1)));
    let mut ctl = Vec::new();
    encode_all(0, &mut 0, &Message::Control(Control::FlushNow), &mut ctl);
    ctl[0][HEADER_LEN] = 9;
    assert_eq!(decode(&ctl[0]), Err(WireError::UnknownControl(9)));
    // every error says what it is
    assert!(WireError::StringTooLong(5000).to_string().contains("5000"));
}

#[test]
fn every_truncation_and_bit_flip_of_every_sample_is_an_error_or_a_message_never_a_panic() {
    for msg in samples() {
        let mut out = Vec::new();
        encode_all(3, &mut 0, &msg, &mut out);
        let good = &out[0];
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "{msg:?} cut at {cut} decoded");
        }
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                let _ = decode(&bad);
            }
        }
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000), kind in 0u16..20) {
        let mut b = b"CWG1".to_vec();
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend_from_slice(&bytes);
        let _ = decode(&b);
        let _ = decode(&bytes);
    }

    #[test]
    fn random_ops_and_apis_round_trip(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<i32>(), any::<u32>(), any::<u64>(), ".{0,40}"), 0..300),
        apis in proptest::collection::vec((any::<u8>(), any::<u32>(), any::<i32>(), any::<u64>()), 0..300),
    ) {
        let ops: Vec<WireOp> = ops
            .into_iter()
            .map(|(kind, subkind, device, c, t, name)| WireOp {
                kind, subkind, device, context: c, stream: c / 3, correlation: c ^ 5, start: t, end: t / 2, bytes: t ^ 9, name,
            })
            .collect();
        let apis: Vec<WireApi> = apis
            .into_iter()
            .map(|(domain, c, ret, t)| WireApi { domain, cbid: c, tid: c / 7, correlation: c ^ 1, ret, start: t, end: t / 3 })
            .collect();
        for msg in [Message::Ops(ops), Message::Apis(apis)] {
            let mut out = Vec::new();
            encode_all(9, &mut 0, &msg, &mut out);
            prop_assert_eq!(decode_joined(&out), msg);
        }
    }
}
