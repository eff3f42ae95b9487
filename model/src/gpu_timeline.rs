//! The GPU's own timeline: what the device ran and when, as CUPTI's Activity API recorded it inside
//! the traced process (the injection library, `inject/`), mapped onto the trace's clock. Four rows
//! cross the storage boundary: [`GpuOp`] (`gpu_ops`: a kernel, copy, memset or synchronization, tied
//! to the thread and call that launched it), [`GpuClockSync`] (`gpu_clock_syncs`: the calibration
//! pairs the mapping used and their error bound), [`GpuDevice`] (`gpu_devices`: a CUDA device's UUID,
//! the exact map to an NVML index) and [`GpuTimelineNote`] (`gpu_timeline_notes`: every hole, loss and
//! refusal of the device view, so none is hidden).

/// What a [`GpuOp`] is (`gpu_ops.kind`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GpuOpKind {
    /// A kernel (CUPTI `CONCURRENT_KERNEL`).
    Kernel,
    /// A memory copy (`MEMCPY`).
    Memcpy,
    /// A memset (`MEMSET`).
    Memset,
    /// A host wait on the device (`SYNCHRONIZATION`): its span is the host's wait, not device work.
    Sync,
}

impl GpuOpKind {
    /// Every kind, in code order.
    pub const ALL: [GpuOpKind; 4] = [GpuOpKind::Kernel, GpuOpKind::Memcpy, GpuOpKind::Memset, GpuOpKind::Sync];

    /// The stored code (`gpu_ops.kind`): 1 kernel, 2 memcpy, 3 memset, 4 sync. Never renumbered.
    pub fn code(self) -> u8 {
        match self {
            GpuOpKind::Kernel => 1,
            GpuOpKind::Memcpy => 2,
            GpuOpKind::Memset => 3,
            GpuOpKind::Sync => 4,
        }
    }

    /// The kind of a stored code; `None` for a code no version wrote.
    pub fn from_code(code: u8) -> Option<GpuOpKind> {
        GpuOpKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Its name: `kernel`, `memcpy`, `memset`, `sync`.
    pub fn name(self) -> &'static str {
        match self {
            GpuOpKind::Kernel => "kernel",
            GpuOpKind::Memcpy => "memcpy",
            GpuOpKind::Memset => "memset",
            GpuOpKind::Sync => "sync",
        }
    }

    /// Whether the device was busy running it (kernels, copies, memsets; not a host's wait).
    pub fn occupies_device(self) -> bool {
        !matches!(self, GpuOpKind::Sync)
    }
}

/// One piece of work the device ran (or one host wait on it), from the device's own record
/// (`gpu_ops`). Times are on the trace's clock (unix ns), mapped from CUPTI's by the calibration
/// pairs of [`GpuClockSync`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GpuOp {
    /// The process that launched it.
    pub pid: u32,
    /// CUDA device ordinal (CUPTI's `deviceId`); -1 for a synchronization of no one device.
    pub device: i32,
    /// CUPTI's context id.
    pub context: u32,
    /// CUPTI's stream id (not the `CUstream` handle); 0 when the record names none.
    pub stream: u32,
    /// What it is.
    pub kind: GpuOpKind,
    /// When the device started it, unix ns (trace clock).
    pub start_ns: i64,
    /// When the device finished it, unix ns (trace clock).
    pub end_ns: i64,
    /// CUPTI's correlation id: the same as the API record of the call that launched it.
    pub correlation: u32,
    /// A kernel's name as CUPTI gives it (mangled C++ when it is); a copy's direction (`HtoD`,
    /// `DtoH`, `DtoD`, ...); a synchronization's type (`stream`, `context`, `event`,
    /// `stream_wait_event`); empty for a memset.
    pub name: String,
    /// Bytes copied or set; 0 for kernels and synchronizations.
    pub bytes: i64,
    /// The thread that launched it (the API record's `threadId`, a Linux tid); 0 when CUPTI's record
    /// of the call was not received.
    pub launch_tid: u32,
    /// When that call started, unix ns (trace clock); 0 when unknown.
    pub launch_start_ns: i64,
    /// When that call returned, unix ns (trace clock); 0 when unknown.
    pub launch_end_ns: i64,
    /// CUPTI's callback id of that call (runtime ids above [`GpuOp::RUNTIME_CBID_BASE`]); 0 unknown.
    pub launch_cbid: u32,
    /// `events.id` of the traced CUDA call that launched it (the outermost traced call of
    /// `launch_tid` whose span holds the API record's); 0 when no traced call does.
    pub launch_event_id: i64,
}

impl GpuOp {
    /// `launch_cbid` of a runtime API call is CUPTI's runtime cbid plus this; a driver call's is its
    /// driver cbid as is (the two id spaces overlap in CUPTI).
    pub const RUNTIME_CBID_BASE: u32 = 1 << 20;

    /// How long the device ran it, ns (0 for a record whose end is before its start).
    pub fn dur_ns(&self) -> i64 {
        (self.end_ns - self.start_ns).max(0)
    }

    /// From the launching call's start to the device's start of the work, ns; `None` when the
    /// launching call is unknown.
    pub fn launch_latency_ns(&self) -> Option<i64> {
        (self.launch_start_ns > 0).then(|| self.start_ns - self.launch_start_ns)
    }
}

/// One calibration of CUPTI's clock against the trace's (`gpu_clock_syncs`): `cuptiGetTimestamp()`
/// read between two host clock reads at a flush, the narrowest of many tries. Device times between
/// two pairs are mapped piecewise linearly; `error_ns` bounds each mapped time near the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GpuClockSync {
    /// The traced process.
    pub pid: u32,
    /// CUPTI's timestamp.
    pub cupti_ns: i64,
    /// The same instant on the trace's clock, unix ns (the midpoint of the host reads).
    pub trace_ns: i64,
    /// Half the width of the host reads around the CUPTI read, ns: the mapping's error bound here.
    pub error_ns: i64,
}

/// A CUDA device as CUPTI described it (`gpu_devices`): its UUID gives the exact NVML index, so NVML
/// samples are matched to the device a call used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GpuDevice {
    /// The traced process that saw it (device ordinals are per process: `CUDA_VISIBLE_DEVICES`).
    pub pid: u32,
    /// The CUDA device ordinal in that process ([`GpuOp::device`]).
    pub device: i32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML spells it.
    pub uuid: String,
    /// The device's name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The NVML index of the same UUID, when NVML was read while tracing; -1 otherwise.
    pub nvml_index: i32,
}

/// Something about the device view a reader must know (`gpu_timeline_notes`): when it started, a hole
/// (another CUPTI client took over, the library turned itself off), records dropped or without
/// timestamps, a clock step. Every such line reaches the answers; nothing is silently missing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct GpuTimelineNote {
    /// The traced process.
    pub pid: u32,
    /// When, unix ns (trace clock).
    pub ts_ns: i64,
    /// What: one of [`GpuTimelineNote::KINDS`].
    pub kind: String,
    /// How many (records dropped, records without timestamps, ...); 0 where no count applies.
    pub count: i64,
    /// The line a person reads: what happened and why.
    pub detail: String,
}

impl GpuTimelineNote {
    /// The start of a `trigger` note's detail: `trigger KIND: what was seen` (the kind as
    /// `--gpu-trigger` names it); [`Self::trigger_kind`] reads it back.
    pub fn trigger_reason(kind: &str, what: &str) -> String {
        format!("trigger {kind}: {what}")
    }

    /// The trigger kind of a `trigger` note ([`Self::trigger_reason`]); `None` for other notes.
    pub fn trigger_kind(&self) -> Option<&str> {
        if self.kind != "trigger" {
            return None;
        }
        self.detail.strip_prefix("trigger ").and_then(|d| d.split_once(':')).map(|(k, _)| k)
    }

    /// Every kind of note, with what it means.
    pub const KINDS: [(&'static str, &'static str); 17] = [
        ("started", "the device view began (CUPTI version, library path)"),
        ("stopped", "the device view ended (process exit or the end of the trace)"),
        ("stepped_aside", "another CUPTI client took over: a hole in the device view until it was done"),
        ("resumed", "the other client was done: the device view resumed"),
        ("off", "the injection library turned itself off (the reason in detail): no device view from here"),
        ("dropped", "records CUPTI dropped (buffers full) or the tracer could not take in time"),
        ("zero_timestamps", "records CUPTI delivered without timestamps, not stored"),
        ("clock_step", "CUPTI's clock stepped against the host's: the mapping was split there"),
        ("unmatched", "device ops whose launching call was not in the trace"),
        ("foreign_client", "another CUPTI client (torch.profiler, Nsight, ...) took or turned off the activity records (the call and the library that made it in detail): the device view has a hole from here to the next `resumed` note of the process"),
        ("other_tool", "the process loads another CUDA injection library (Nsight Systems sets the same variable): its device view belongs to that tool"),
        ("attached", "the tracer loaded the injection library into the running process (`trace --pid P --gpu-timeline`); count: how long its main thread was held, ns"),
        ("dormant", "the attached library is loaded and records nothing until a window opens"),
        ("window_opened", "a window opened: the device view records from here (who opened it, why, for how long in detail)"),
        ("window_closed", "the window closed: dormant again, a hole in the device view until the next `window_opened` of the process"),
        ("trigger", "a trigger of `trace --gpu-trigger` fired (a GPU's utilization dropped, a slow step, a serving spike or stall: what was seen in detail) and the window it opened, or why none"),
        ("armed", "a pre-trigger buffer (`--gpu-pre-trigger`): the library records from here but the tracer keeps only the last seconds in memory and stores records only between `window_opened` and `window_closed` notes"),
    ];
}

#[cfg(test)]
mod tests {
    use super::GpuTimelineNote;

    #[test]
    fn a_trigger_notes_kind_reads_back_from_its_detail() {
        let note =
            |kind: &str, detail: String| GpuTimelineNote { pid: 1, ts_ns: 0, kind: kind.into(), count: 0, detail };
        let fired = note("trigger", GpuTimelineNote::trigger_reason("util_drop", "GPU 0 at 3%: median 97%"));
        assert_eq!(fired.trigger_kind(), Some("util_drop"));
        let none = note("trigger", GpuTimelineNote::trigger_reason("step", "step 9") + ": no window opened");
        assert_eq!(none.trigger_kind(), Some("step"));
        assert_eq!(note("window_opened", "trigger step: x".into()).trigger_kind(), None);
    }
}
