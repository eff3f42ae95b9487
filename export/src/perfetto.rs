//! Perfetto's protobuf trace format: a `Trace` is a sequence of `TracePacket`s (field 1), each a
//! track descriptor or a `TrackEvent`, written one at a time (the file is the concatenation of the
//! packets' length-delimited encodings, exactly what a `Trace` message with all of them encodes
//! to). The messages are Perfetto's own, from its published `.proto` files (`perfetto_protos`).
//!
//! Timestamps are the trace's unix nanoseconds, exact. One packet sequence (id 1), whose first
//! packet clears the incremental state; nothing is interned, so no packet depends on another but
//! through track uuids.

use std::collections::HashSet;
use std::io::{self, Write};

use perfetto_protos::counter_descriptor::CounterDescriptor;
use perfetto_protos::debug_annotation::DebugAnnotation;
use perfetto_protos::process_descriptor::ProcessDescriptor;
use perfetto_protos::thread_descriptor::ThreadDescriptor;
use perfetto_protos::trace_packet::{trace_packet::SequenceFlags, TracePacket};
use perfetto_protos::track_descriptor::TrackDescriptor;
use perfetto_protos::track_event::{track_event::Type, TrackEvent};
use protobuf::{Message, MessageField};

use crate::writer::{Arg, CounterOwner, Slice, TraceWriter, Track};

/// The packet sequence every packet of an export is on.
const SEQUENCE: u32 = 1;

/// Track uuids: a kind in the top byte, the identity below.
fn uuid(kind: u64, id: u64) -> u64 {
    (kind << 56) | (id & ((1 << 56) - 1))
}
fn process_uuid(pid: u32) -> u64 {
    uuid(1, u64::from(pid))
}
fn track_uuid(track: Track) -> u64 {
    match track {
        // pids and tids are below 2^22 (the kernel's PID_MAX_LIMIT)
        Track::Thread { pid, tid } => uuid(2, (u64::from(pid) << 32) | u64::from(tid)),
        Track::Cpu(cpu) => uuid(3, cpu as u32 as u64),
        Track::Chain(rank) => uuid(4, rank as u64),
        Track::Device(id) => uuid(7, id as u64),
    }
}
fn counter_uuid(id: usize) -> u64 {
    uuid(5, id as u64)
}
const CPUS_GROUP: u64 = (6 << 56) | 1;
const CHAINS_GROUP: u64 = (6 << 56) | 2;
const GPUS_GROUP: u64 = (6 << 56) | 3;
const SERVING_GROUP: u64 = (6 << 56) | 4;

/// Writes packets as they come.
pub(crate) struct PerfettoWriter<'w> {
    out: &'w mut dyn Write,
    first: bool,
    processes: HashSet<u32>,
    groups: HashSet<u64>,
}

impl<'w> PerfettoWriter<'w> {
    pub fn new(out: &'w mut dyn Write) -> PerfettoWriter<'w> {
        PerfettoWriter { out, first: true, processes: HashSet::new(), groups: HashSet::new() }
    }

    fn packet(&mut self, mut p: TracePacket) -> io::Result<()> {
        p.set_trusted_packet_sequence_id(SEQUENCE);
        if std::mem::take(&mut self.first) {
            p.set_sequence_flags(SequenceFlags::SEQ_INCREMENTAL_STATE_CLEARED as u32);
        }
        let bytes = p.write_to_bytes().map_err(io::Error::other)?;
        // `Trace.packet` is field 1, length-delimited: tag 0x0a, varint length, the packet
        let mut head = vec![0x0a];
        let mut len = bytes.len() as u64;
        loop {
            let b = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                head.push(b);
                break;
            }
            head.push(b | 0x80);
        }
        self.out.write_all(&head)?;
        self.out.write_all(&bytes)
    }

    /// A process's descriptor, declared once.
    fn process(&mut self, pid: u32, name: &str) -> io::Result<()> {
        if !self.processes.insert(pid) {
            return Ok(());
        }
        let mut pd = ProcessDescriptor::new();
        pd.set_pid(pid as i32);
        pd.set_process_name(name.to_string());
        let mut d = TrackDescriptor::new();
        d.set_uuid(process_uuid(pid));
        d.process = MessageField::some(pd);
        self.descriptor(d)
    }

    fn descriptor(&mut self, d: TrackDescriptor) -> io::Result<()> {
        let mut p = TracePacket::new();
        p.set_track_descriptor(d);
        self.packet(p)
    }

    /// A named group of tracks (CPUs, chains, GPUs), declared once.
    fn group(&mut self, uuid: u64, name: &str) -> io::Result<()> {
        if !self.groups.insert(uuid) {
            return Ok(());
        }
        let mut d = TrackDescriptor::new();
        d.set_uuid(uuid);
        d.set_name(name.to_string());
        self.descriptor(d)
    }

    /// A track event at `ts` on `track_uuid`, with `slice`'s name, category, arguments and flows.
    fn event(
        &mut self,
        track_uuid: u64,
        ts: i64,
        kind: Type,
        slice: Option<&Slice>,
        counter: Option<f64>,
    ) -> io::Result<()> {
        let mut e = TrackEvent::new();
        e.set_type(kind);
        e.set_track_uuid(track_uuid);
        if let Some(s) = slice {
            e.set_name(s.name.clone());
            e.categories.push(s.category.to_string());
            e.debug_annotations = s.args.iter().map(|(k, v)| annotation(k, v)).collect();
            e.flow_ids = s.flows_out.clone();
            e.terminating_flow_ids = s.flows_in.clone();
        }
        if let Some(v) = counter {
            e.set_double_counter_value(v);
        }
        let mut p = TracePacket::new();
        p.set_timestamp(ts.max(0) as u64);
        p.set_track_event(e);
        self.packet(p)
    }
}

fn annotation(name: &str, value: &Arg) -> DebugAnnotation {
    let mut a = DebugAnnotation::new();
    a.set_name(name.to_string());
    match value {
        Arg::Int(v) => a.set_int_value(*v),
        Arg::Str(s) => a.set_string_value(s.clone()),
    }
    a
}

impl TraceWriter for PerfettoWriter<'_> {
    fn thread(&mut self, pid: u32, tid: u32, process_name: &str, thread_name: &str) -> io::Result<()> {
        self.process(pid, process_name)?;
        let mut td = ThreadDescriptor::new();
        td.set_pid(pid as i32);
        td.set_tid(tid as i32);
        td.set_thread_name(thread_name.to_string());
        let mut d = TrackDescriptor::new();
        d.set_uuid(track_uuid(Track::Thread { pid, tid }));
        d.set_name(thread_name.to_string());
        d.thread = MessageField::some(td);
        self.descriptor(d)
    }

    fn cpu(&mut self, cpu: i32) -> io::Result<()> {
        self.group(CPUS_GROUP, "CPUs: who took them from traced threads")?;
        let mut d = TrackDescriptor::new();
        d.set_uuid(track_uuid(Track::Cpu(cpu)));
        d.set_parent_uuid(CPUS_GROUP);
        d.set_name(format!("CPU {cpu}"));
        self.descriptor(d)
    }

    fn chain(&mut self, rank: usize, name: &str) -> io::Result<()> {
        self.group(CHAINS_GROUP, "Causeway chains")?;
        let mut d = TrackDescriptor::new();
        d.set_uuid(track_uuid(Track::Chain(rank)));
        d.set_parent_uuid(CHAINS_GROUP);
        d.set_name(name.to_string());
        self.descriptor(d)
    }

    fn device_track(&mut self, id: usize, pid: u32, process_name: &str, name: &str) -> io::Result<()> {
        self.process(pid, process_name)?;
        let mut d = TrackDescriptor::new();
        d.set_uuid(track_uuid(Track::Device(id)));
        d.set_parent_uuid(process_uuid(pid));
        d.set_name(name.to_string());
        self.descriptor(d)
    }

    fn counter_track(&mut self, id: usize, owner: &CounterOwner, name: &str, unit: &str) -> io::Result<()> {
        let parent = match owner {
            CounterOwner::Process(pid) => process_uuid(*pid),
            CounterOwner::Gpu(_) => {
                self.group(GPUS_GROUP, "GPUs (NVML samples)")?;
                GPUS_GROUP
            }
            CounterOwner::Serving => {
                self.group(SERVING_GROUP, "Serving engines (scraped metrics)")?;
                SERVING_GROUP
            }
        };
        let mut c = CounterDescriptor::new();
        c.set_unit_name(unit.to_string());
        let mut d = TrackDescriptor::new();
        d.set_uuid(counter_uuid(id));
        d.set_parent_uuid(parent);
        d.set_name(name.to_string());
        d.counter = MessageField::some(c);
        self.descriptor(d)
    }

    fn begin(&mut self, track: Track, ts: i64, slice: &Slice) -> io::Result<()> {
        self.event(track_uuid(track), ts, Type::TYPE_SLICE_BEGIN, Some(slice), None)
    }

    fn end(&mut self, track: Track, ts: i64) -> io::Result<()> {
        self.event(track_uuid(track), ts, Type::TYPE_SLICE_END, None, None)
    }

    fn instant(&mut self, track: Track, ts: i64, slice: &Slice) -> io::Result<()> {
        self.event(track_uuid(track), ts, Type::TYPE_INSTANT, Some(slice), None)
    }

    fn counter(&mut self, id: usize, ts: i64, value: f64) -> io::Result<()> {
        self.event(counter_uuid(id), ts, Type::TYPE_COUNTER, None, Some(value))
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}
