//! A trace as a timeline other tools open: Perfetto's protobuf trace format (Perfetto UI, trace
//! processor) and the Chrome JSON Trace Event Format (Perfetto UI, `chrome://tracing`, HTA).
//!
//! What an export holds, in both formats:
//! - one track per traced thread, named `comm (tid)`, in its process;
//! - every CUDA, driver and NCCL call as a slice (kernel name, bytes, stream, return code and the
//!   event id as arguments), every off-CPU interval of a traced thread as a slice inside it, named
//!   by its cause (`off-CPU: preempted`, `off-CPU: sleeping`, ...), so the UI colours each cause alike;
//! - for a preemption, the task that took the CPU as a slice on that CPU's track and a flow arrow
//!   from it to the stalled thread's off-CPU slice;
//! - counter tracks: kernel launches per second per process, and the GPUs' clocks, temperature,
//!   power, utilisation and throttle reasons where NVML samples exist;
//! - each causal chain of `explain` as an annotation slice on its own track, with a flow to each of
//!   its evidence events;
//! - for a trace recorded with `--gpu-timeline`, the device's own timeline in each process: one
//!   track per (device, stream) (`GPU 0 stream 13`) holding its kernels (by their demangled
//!   names), copies and memsets, one per waiting thread holding its synchronizations, a flow from
//!   each launching call's slice to each op it launched, and `GPU 0 idle` holding every idle gap
//!   over 1 ms, named by its top cause (`the launching thread was preempted by backup-rsync (pid
//!   9912)`).
//!
//! Timestamps are exact: Perfetto's packets carry the trace's own unix nanoseconds; the JSON form
//! counts microseconds (with the nanoseconds as three decimals) from an origin written in
//! `otherData.origin_unix_ns`, small enough for a double to hold every nanosecond.
//!
//! Large traces stream: the events are read window by window ([`ExportRequest::chunk_events`] at
//! a time, by the trace's average rate; a window found denser is halved), written out, and dropped.
//! The state kept across windows is per thread and per CPU, never per event (the device timeline
//! adds one bit per launching call, counted before the walk, and per stream and device state).
//!
//! The walk over the store is format-neutral ([`walk`]); each format is a [`writer::TraceWriter`].

mod chrome;
mod device;
mod device_gaps;
mod perfetto;
mod walk;
mod writer;

use std::io::Write;

use causeway_model::time::TimeWindow;
use causeway_store::TraceStore;

/// The file formats an export can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Perfetto's protobuf trace (`Trace` of `TracePacket`s), Perfetto's published definitions.
    Perfetto,
    /// The Chrome JSON Trace Event Format (`{"traceEvents": [...]}`).
    Chrome,
}

impl Format {
    /// `perfetto` or `chrome`.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "perfetto" | "proto" | "protobuf" => Some(Format::Perfetto),
            "chrome" | "json" => Some(Format::Chrome),
            _ => None,
        }
    }

    /// The file extension a user expects (`perfetto-trace`, `json`).
    pub fn extension(self) -> &'static str {
        match self {
            Format::Perfetto => "perfetto-trace",
            Format::Chrome => "json",
        }
    }
}

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    /// Events that start in this window.
    pub window: TimeWindow,
    /// Only this process's threads (the tasks that preempted them still show on the CPU tracks).
    pub pid: Option<u32>,
    /// Run `explain` over the same window and annotate its chains (the slowest part of an export
    /// of a large trace: off gives the timeline alone).
    pub chains: bool,
    /// Events read per window of time (by the trace's average rate); memory is bounded by about
    /// four times this many events.
    pub chunk_events: u64,
}

impl Default for ExportRequest {
    fn default() -> Self {
        ExportRequest { window: TimeWindow::ALL, pid: None, chains: true, chunk_events: 250_000 }
    }
}

/// What an export wrote, counted as it was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExportSummary {
    /// Traced threads given a track.
    pub threads: u64,
    /// GPU API calls (CUDA runtime, driver, NCCL, ...) written as slices.
    pub calls: u64,
    /// Off-CPU intervals (`sched_switch` rows) written as slices.
    pub off_cpu: u64,
    /// Socket calls of traced threads written as slices, named by their peer.
    pub socket_calls: u64,
    /// Other events (wake-ups, block I/O, page allocations, process lifecycle) written as instants.
    pub instants: u64,
    /// Slices of the task that took a CPU from a traced thread, on that CPU's track.
    pub culprit_slices: u64,
    /// Flow arrows from those slices to the stalled thread's off-CPU slice.
    pub preemption_flows: u64,
    /// Causal chains annotated.
    pub chains: u64,
    /// Flow arrows from a chain's annotation to its evidence events.
    pub chain_flows: u64,
    /// Counter values written (launch rate, GPU samples).
    pub counter_values: u64,
    /// CPU-track slices cut short because the CPU was seen running a traced thread again before
    /// the preempted thread came back (who ran in between is not recorded).
    pub clipped: u64,
    /// Device ops (kernels, copies, memsets, synchronizations) written as slices on their device's
    /// tracks (`--gpu-timeline` traces).
    pub device_ops: u64,
    /// Flow arrows from a launching call's slice to an op it launched.
    pub launch_flows: u64,
    /// The device's idle gaps over 1 ms written as slices, named by their cause.
    pub idle_gaps: u64,
    /// Windows of time read.
    pub windows: u64,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Reading the trace failed.
    #[error(transparent)]
    Store(#[from] causeway_store::StoreError),
    /// `explain` (for the chain annotations) failed.
    #[error("explain for the chain annotations: {0}")]
    Analysis(#[from] causeway_analysis::AnalysisError),
    /// Writing the output failed.
    #[error("writing the export: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes the trace behind `store` to `out` in `format`; returns what was written.
pub fn export(
    store: &dyn TraceStore,
    req: &ExportRequest,
    format: Format,
    out: &mut dyn Write,
) -> Result<ExportSummary, ExportError> {
    let origin = walk::origin(store, req);
    let mut summary = match format {
        Format::Perfetto => {
            let mut w = perfetto::PerfettoWriter::new(out);
            walk::walk(store, req, &mut w)?
        }
        Format::Chrome => {
            let mut w = chrome::ChromeWriter::new(out, origin, &store.info().path)?;
            walk::walk(store, req, &mut w)?
        }
    };
    out.flush()?;
    summary.windows = summary.windows.max(1);
    Ok(summary)
}
