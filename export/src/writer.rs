//! The format-neutral vocabulary of an export: tracks, slices with their arguments and flows, and
//! the [`TraceWriter`] each file format implements. [`Nesting`] keeps every track's slices properly
//! nested (both formats need it), so a writer only turns begin, end, instant and counter calls
//! into its own encoding, in the order it receives them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;

/// Where a slice, instant or counter value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Track {
    /// A traced thread, in its process.
    Thread { pid: u32, tid: u32 },
    /// A CPU: who took it from a traced thread.
    Cpu(i32),
    /// One causal chain's annotation (its rank, from 1).
    Chain(usize),
    /// A track of the device's own timeline (a stream, its syncs, its idle gaps), in its process,
    /// numbered by the walk in the order it declares them.
    Device(usize),
}

/// What a counter track belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CounterOwner {
    /// A traced process (declared before by one of its threads).
    Process(u32),
    /// A GPU, in the group of GPU tracks.
    Gpu(i32),
    /// A serving engine's scraped metrics, in their own group.
    Serving,
}

/// An argument shown with a slice.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Int(i64),
    Str(String),
}

/// One slice or instant: its name (the UI colours by name), category, arguments and flows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slice {
    pub name: String,
    pub category: Cow<'static, str>,
    pub args: Vec<(&'static str, Arg)>,
    /// Flows that leave this slice.
    pub flows_out: Vec<u64>,
    /// Flows that end at this slice.
    pub flows_in: Vec<u64>,
}

/// A file format's side of an export. Calls come in time order per track (begins nondecreasing,
/// ends before the next begin they precede), declarations before a track's first use.
pub(crate) trait TraceWriter {
    /// Declares a traced thread (and its process the first time one of its threads is declared).
    fn thread(&mut self, pid: u32, tid: u32, process_name: &str, thread_name: &str) -> io::Result<()>;
    /// Declares a CPU's track.
    fn cpu(&mut self, cpu: i32) -> io::Result<()>;
    /// Declares a chain's annotation track.
    fn chain(&mut self, rank: usize, name: &str) -> io::Result<()>;
    /// Declares device track `id` (`GPU 0 stream 13`, `GPU 0 idle`, ...) in process `pid`
    /// (declaring the process the first time, named `process_name`).
    fn device_track(&mut self, id: usize, pid: u32, process_name: &str, name: &str) -> io::Result<()>;
    /// Declares counter track `id`.
    fn counter_track(&mut self, id: usize, owner: &CounterOwner, name: &str, unit: &str) -> io::Result<()>;
    /// A slice begins on `track` at `ts` (unix ns).
    fn begin(&mut self, track: Track, ts: i64, slice: &Slice) -> io::Result<()>;
    /// The innermost open slice of `track` ends at `ts`.
    fn end(&mut self, track: Track, ts: i64) -> io::Result<()>;
    /// A point event on `track`.
    fn instant(&mut self, track: Track, ts: i64, slice: &Slice) -> io::Result<()>;
    /// Counter `id` takes `value` at `ts`.
    fn counter(&mut self, id: usize, ts: i64, value: f64) -> io::Result<()>;
    /// Everything was written: close the file's structure.
    fn finish(&mut self) -> io::Result<()>;
}

/// The open slices of every track, innermost last, by end time. A slice that begins inside an
/// open slice and would outlast it cuts that slice short at its own begin (counted): only CPU
/// tracks meet this, where the interval a traced thread waited overstates how long its culprit
/// ran.
#[derive(Debug, Default)]
pub(crate) struct Nesting {
    open: HashMap<Track, Vec<i64>>,
}

impl Nesting {
    /// Begins `slice` on `track` over `[start, end]`, first ending what finished by `start`;
    /// returns how many open slices were cut short.
    pub fn begin(
        &mut self,
        w: &mut dyn TraceWriter,
        track: Track,
        start: i64,
        end: i64,
        slice: &Slice,
    ) -> io::Result<u64> {
        let stack = self.open.entry(track).or_default();
        let mut clipped = 0;
        while let Some(&top) = stack.last() {
            if top <= start {
                w.end(track, top)?;
            } else if top < end {
                w.end(track, start)?;
                clipped += 1;
            } else {
                break;
            }
            stack.pop();
        }
        w.begin(track, start, slice)?;
        stack.push(end.max(start));
        Ok(clipped)
    }

    /// Ends every open slice.
    pub fn close_all(&mut self, w: &mut dyn TraceWriter) -> io::Result<()> {
        let mut tracks: Vec<(Track, Vec<i64>)> = self.open.drain().collect();
        tracks.sort_by_key(|(t, _)| format!("{t:?}"));
        for (track, mut stack) in tracks {
            while let Some(end) = stack.pop() {
                w.end(track, end)?;
            }
        }
        Ok(())
    }
}
