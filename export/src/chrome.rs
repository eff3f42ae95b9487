//! The Chrome JSON Trace Event Format (`{"traceEvents": [...]}`), as Perfetto UI,
//! `chrome://tracing` and HTA read it: `B`/`E` duration events, `i` instants, `C` counters, `M`
//! names, and flow events `s`/`f` (the `f` bound to the enclosing slice, `"bp": "e"`).
//!
//! `ts` counts microseconds from `otherData.origin_unix_ns`; a double holds every nanosecond of
//! that (three decimals) for traces shorter than about a hundred days, so `round(ts * 1000)` gives
//! back the trace's own nanoseconds. Tracks that are not threads (CPUs, chains, GPU counters) live
//! in pseudo-processes numbered above the kernel's `PID_MAX_LIMIT`, so they never meet a real pid;
//! the device timeline's tracks are pseudo-threads of their process, numbered above it too.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::Path;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::writer::{Arg, CounterOwner, Slice, TraceWriter, Track};

/// Pseudo-processes (above `PID_MAX_LIMIT`, 2^22).
const CHAINS_PID: u64 = 4_194_305;
const CPUS_PID: u64 = 4_194_306;
const GPUS_PID: u64 = 4_194_307;
const SERVING_PID: u64 = 4_194_308;
/// Device tracks are pseudo-threads of their process numbered from here (real tids are below
/// `PID_MAX_LIMIT`, 2^22).
const DEVICE_TID_BASE: u64 = 1 << 23;
/// Name and category of every flow event (start and end alike, as the viewers match them).
const FLOW_NAME: &str = "causeway";
const FLOW_CAT: &str = "flow";

/// One trace event; `None` fields are left out.
#[derive(Serialize)]
struct Event<'a> {
    ph: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    pid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u64>,
    /// Instant scope (`t`: thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    /// Flow binding point (`e`: the enclosing slice).
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Args<'a>>,
}

impl<'a> Event<'a> {
    fn new(ph: &'a str, pid: u64) -> Event<'a> {
        Event { ph, name: None, cat: None, ts: None, pid, tid: None, s: None, id: None, bp: None, args: None }
    }
}

/// Arguments as a JSON object.
enum Args<'a> {
    Slice(&'a [(&'static str, Arg)]),
    Name(&'a str),
    Value(f64),
}

impl Serialize for Args<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(None)?;
        match self {
            Args::Slice(args) => {
                for (k, v) in args.iter() {
                    match v {
                        Arg::Int(i) => m.serialize_entry(k, i)?,
                        Arg::Str(s) => m.serialize_entry(k, s)?,
                    }
                }
            }
            Args::Name(n) => m.serialize_entry("name", n)?,
            Args::Value(v) => m.serialize_entry("value", v)?,
        }
        m.end()
    }
}

/// Writes the events as they come, inside one JSON object.
pub(crate) struct ChromeWriter<'w> {
    out: &'w mut dyn Write,
    origin: i64,
    first: bool,
    processes: HashSet<u64>,
    counters: HashMap<usize, (u64, String)>,
    /// Each device track's process.
    device_pids: HashMap<usize, u32>,
}

impl<'w> ChromeWriter<'w> {
    /// Starts the file: the origin and the trace's path in `otherData`, then `traceEvents`.
    pub fn new(out: &'w mut dyn Write, origin: i64, trace: &Path) -> io::Result<ChromeWriter<'w>> {
        let other = serde_json::json!({
            "source": "causeway",
            "trace": trace.display().to_string(),
            "origin_unix_ns": origin,
            "ts": "microseconds since origin_unix_ns (three decimals: exact nanoseconds)",
        });
        write!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":{other},\"traceEvents\":[")?;
        Ok(ChromeWriter {
            out,
            origin,
            first: true,
            processes: HashSet::new(),
            counters: HashMap::new(),
            device_pids: HashMap::new(),
        })
    }

    fn write(&mut self, e: &Event) -> io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *self.out, e).map_err(io::Error::from)
    }

    fn ts(&self, ns: i64) -> f64 {
        (ns - self.origin) as f64 / 1000.0
    }

    fn where_(&self, track: Track) -> (u64, u64) {
        match track {
            Track::Thread { pid, tid } => (u64::from(pid), u64::from(tid)),
            Track::Cpu(cpu) => (CPUS_PID, cpu as u32 as u64),
            Track::Chain(rank) => (CHAINS_PID, rank as u64),
            // declared before use: its process is known
            Track::Device(id) => (self.device_pids.get(&id).map_or(0, |&p| u64::from(p)), DEVICE_TID_BASE + id as u64),
        }
    }

    fn metadata(&mut self, what: &str, pid: u64, tid: Option<u64>, name: &str) -> io::Result<()> {
        let mut e = Event::new("M", pid);
        e.name = Some(what);
        e.tid = tid;
        e.args = Some(Args::Name(name));
        self.write(&e)
    }

    fn process(&mut self, pid: u64, name: &str) -> io::Result<()> {
        if self.processes.insert(pid) {
            self.metadata("process_name", pid, None, name)?;
        }
        Ok(())
    }

    fn flows(&mut self, ph: &str, track: Track, ts: i64, ids: &[u64]) -> io::Result<()> {
        let (pid, tid) = self.where_(track);
        for &id in ids {
            let mut e = Event::new(ph, pid);
            e.name = Some(FLOW_NAME);
            e.cat = Some(FLOW_CAT);
            e.ts = Some(self.ts(ts));
            e.tid = Some(tid);
            e.id = Some(id);
            e.bp = (ph == "f").then_some("e");
            self.write(&e)?;
        }
        Ok(())
    }

    fn slice_event(&mut self, ph: &str, track: Track, ts: i64, slice: &Slice) -> io::Result<()> {
        let (pid, tid) = self.where_(track);
        let mut e = Event::new(ph, pid);
        e.name = Some(&slice.name);
        e.cat = Some(&slice.category);
        e.ts = Some(self.ts(ts));
        e.tid = Some(tid);
        e.s = (ph == "i").then_some("t");
        e.args = Some(Args::Slice(&slice.args));
        self.write(&e)?;
        self.flows("s", track, ts, &slice.flows_out)?;
        self.flows("f", track, ts, &slice.flows_in)
    }
}

impl TraceWriter for ChromeWriter<'_> {
    fn thread(&mut self, pid: u32, tid: u32, process_name: &str, thread_name: &str) -> io::Result<()> {
        self.process(u64::from(pid), process_name)?;
        self.metadata("thread_name", u64::from(pid), Some(u64::from(tid)), thread_name)
    }

    fn cpu(&mut self, cpu: i32) -> io::Result<()> {
        self.process(CPUS_PID, "CPUs: who took them from traced threads")?;
        self.metadata("thread_name", CPUS_PID, Some(cpu as u32 as u64), &format!("CPU {cpu}"))
    }

    fn chain(&mut self, rank: usize, name: &str) -> io::Result<()> {
        self.process(CHAINS_PID, "Causeway chains")?;
        self.metadata("thread_name", CHAINS_PID, Some(rank as u64), name)
    }

    fn device_track(&mut self, id: usize, pid: u32, process_name: &str, name: &str) -> io::Result<()> {
        self.process(u64::from(pid), process_name)?;
        self.device_pids.insert(id, pid);
        self.metadata("thread_name", u64::from(pid), Some(DEVICE_TID_BASE + id as u64), name)
    }

    fn counter_track(&mut self, id: usize, owner: &CounterOwner, name: &str, _unit: &str) -> io::Result<()> {
        let pid = match owner {
            CounterOwner::Process(pid) => u64::from(*pid),
            CounterOwner::Gpu(_) => {
                self.process(GPUS_PID, "GPUs (NVML samples)")?;
                GPUS_PID
            }
            CounterOwner::Serving => {
                self.process(SERVING_PID, "Serving engines (scraped metrics)")?;
                SERVING_PID
            }
        };
        self.counters.insert(id, (pid, name.to_string()));
        Ok(())
    }

    fn begin(&mut self, track: Track, ts: i64, slice: &Slice) -> io::Result<()> {
        self.slice_event("B", track, ts, slice)
    }

    fn end(&mut self, track: Track, ts: i64) -> io::Result<()> {
        let (pid, tid) = self.where_(track);
        let mut e = Event::new("E", pid);
        e.ts = Some(self.ts(ts));
        e.tid = Some(tid);
        self.write(&e)
    }

    fn instant(&mut self, track: Track, ts: i64, slice: &Slice) -> io::Result<()> {
        self.slice_event("i", track, ts, slice)
    }

    fn counter(&mut self, id: usize, ts: i64, value: f64) -> io::Result<()> {
        let Some((pid, name)) = self.counters.get(&id).cloned() else {
            return Err(io::Error::other(format!("counter {id} written before it was declared")));
        };
        let mut e = Event::new("C", pid);
        e.name = Some(&name);
        e.ts = Some(self.ts(ts));
        e.args = Some(Args::Value(value));
        self.write(&e)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.write_all(b"]}\n")
    }
}
