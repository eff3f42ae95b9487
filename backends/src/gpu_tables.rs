//! The device timeline's tables (`causeway_model::gpu_timeline`): `gpu_ops` ([`GpuOp`]: what the
//! device ran, tied to the call that launched it), `gpu_clock_syncs` ([`GpuClockSync`]),
//! `gpu_devices` ([`GpuDevice`] per (pid, device), a later row replacing) and `gpu_timeline_notes`
//! ([`GpuTimelineNote`]), and the `gpu_op_kinds` lookup table. Their DDL is in
//! [`crate::schema::NATIVE_DDL`]; this module holds what every engine shares, as
//! [`crate::cuda_tables`] does for the probes' tables: the INSERTs with their parameters as
//! [`SqlParam`]s, the SELECTs in the order the `TraceStore` reads promise, the checked decoding of
//! their rows, and the SQL that ties each op to its launching call when a trace is finished
//! ([`resolve_launches_sql`]).

use std::path::Path;

use causeway_model::codes::Source;
use causeway_model::time::TimeWindow;
use causeway_model::{GpuClockSync, GpuDevice, GpuOp, GpuOpKind, GpuTimelineNote};

use crate::schema::SqlParam;
use crate::{Engine, GpuTimelinePart, Result, StoreError};

/// Appends one device op.
const INSERT_GPU_OP_SQL: &str = "INSERT INTO gpu_ops (pid, device, context, stream, kind, start_ns, end_ns, \
correlation, name, bytes, launch_tid, launch_start_ns, launch_end_ns, launch_cbid, launch_event_id) \
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Appends one calibration pair.
const INSERT_GPU_CLOCK_SYNC_SQL: &str =
    "INSERT INTO gpu_clock_syncs (pid, cupti_ns, trace_ns, error_ns) VALUES (?, ?, ?, ?)";

/// Records a device; a later row for the same (pid, device) replaces the earlier one.
const INSERT_GPU_DEVICE_SQL: &str =
    "INSERT OR REPLACE INTO gpu_devices (pid, device, uuid, name, nvml_index) VALUES (?, ?, ?, ?, ?)";

/// Appends one note.
const INSERT_GPU_TIMELINE_NOTE_SQL: &str =
    "INSERT INTO gpu_timeline_notes (pid, ts_ns, kind, count, detail) VALUES (?, ?, ?, ?, ?)";

/// Every calibration pair, by pid then trace time.
pub(crate) const SELECT_GPU_CLOCK_SYNCS_SQL: &str =
    "SELECT pid, cupti_ns, trace_ns, error_ns FROM gpu_clock_syncs ORDER BY pid, trace_ns, cupti_ns, error_ns";

/// Every device, by pid then device.
pub(crate) const SELECT_GPU_DEVICES_SQL: &str =
    "SELECT pid, device, nvml_index, uuid, name FROM gpu_devices ORDER BY pid, device";

/// Every note, by time (then pid, kind, count, detail: the same order in every engine).
pub(crate) const SELECT_GPU_TIMELINE_NOTES_SQL: &str =
    "SELECT pid, ts_ns, count, kind, detail FROM gpu_timeline_notes ORDER BY ts_ns, pid, kind, count, detail";

/// The integer columns of `gpu_ops` as [`select_gpu_ops_sql`] reads them, then `name`.
const GPU_OP_SELECT: &str = "SELECT pid, device, context, stream, kind, start_ns, end_ns, correlation, bytes, \
launch_tid, launch_start_ns, launch_end_ns, launch_cbid, launch_event_id, name FROM gpu_ops";

/// The ops whose device start is in `window` (both ends included), by start time, then pid,
/// device, stream and end (then kind and correlation, so that every engine breaks the last ties
/// alike).
pub(crate) fn select_gpu_ops_sql(window: &TimeWindow) -> String {
    let mut cond = Vec::new();
    if let Some(from) = window.from_ns {
        cond.push(format!("start_ns >= {from}"));
    }
    if let Some(to) = window.to_ns {
        cond.push(format!("start_ns <= {to}"));
    }
    let clause = if cond.is_empty() { String::new() } else { format!(" WHERE {}", cond.join(" AND ")) };
    format!("{GPU_OP_SELECT}{clause} ORDER BY start_ns, pid, device, stream, end_ns, kind, correlation")
}

/// The parameters of [`INSERT_GPU_OP_SQL`], in order.
fn gpu_op_params(o: &GpuOp) -> Vec<SqlParam<'_>> {
    let u = |v: u32| SqlParam::Int(i64::from(v));
    vec![
        u(o.pid),
        SqlParam::Int(i64::from(o.device)),
        u(o.context),
        u(o.stream),
        SqlParam::Int(i64::from(o.kind.code())),
        SqlParam::Int(o.start_ns),
        SqlParam::Int(o.end_ns),
        u(o.correlation),
        SqlParam::Text(&o.name),
        SqlParam::Int(o.bytes),
        u(o.launch_tid),
        SqlParam::Int(o.launch_start_ns),
        SqlParam::Int(o.launch_end_ns),
        u(o.launch_cbid),
        SqlParam::Int(o.launch_event_id),
    ]
}

/// Each table of a part, its INSERT and the parameters of each of its rows (devices once per
/// (pid, device), the last one: no engine has to replace a row its own statement wrote). The
/// parameters of an op are its row in the table's column order (DuckDB appends them as they are).
pub(crate) fn part_rows(part: &GpuTimelinePart) -> [(&'static str, &'static str, Vec<Vec<SqlParam<'_>>>); 4] {
    let u = |v: u32| SqlParam::Int(i64::from(v));
    [
        ("gpu_ops", INSERT_GPU_OP_SQL, part.ops.iter().map(gpu_op_params).collect()),
        (
            "gpu_clock_syncs",
            INSERT_GPU_CLOCK_SYNC_SQL,
            part.clock_syncs
                .iter()
                .map(|s| {
                    vec![u(s.pid), SqlParam::Int(s.cupti_ns), SqlParam::Int(s.trace_ns), SqlParam::Int(s.error_ns)]
                })
                .collect(),
        ),
        (
            "gpu_devices",
            INSERT_GPU_DEVICE_SQL,
            crate::cuda_tables::last_per_key(&part.devices, |d| (d.pid, d.device))
                .into_iter()
                .map(|d| {
                    vec![
                        u(d.pid),
                        SqlParam::Int(i64::from(d.device)),
                        SqlParam::Text(&d.uuid),
                        SqlParam::Text(&d.name),
                        SqlParam::Int(i64::from(d.nvml_index)),
                    ]
                })
                .collect(),
        ),
        (
            "gpu_timeline_notes",
            INSERT_GPU_TIMELINE_NOTE_SQL,
            part.notes
                .iter()
                .map(|n| {
                    vec![
                        u(n.pid),
                        SqlParam::Int(n.ts_ns),
                        SqlParam::Text(&n.kind),
                        SqlParam::Int(n.count),
                        SqlParam::Text(&n.detail),
                    ]
                })
                .collect(),
        ),
    ]
}

fn damaged(db: &Path, detail: String) -> StoreError {
    StoreError::Corrupt { path: db.to_path_buf(), detail }
}

fn fits_u32(db: &Path, table: &str, column: &str, v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| damaged(db, format!("{table}.{column} holds {v}, not a 32-bit unsigned value")))
}

fn fits_i32(db: &Path, table: &str, column: &str, v: i64) -> Result<i32> {
    i32::try_from(v).map_err(|_| damaged(db, format!("{table}.{column} holds {v}, not a 32-bit value")))
}

/// A row of [`select_gpu_ops_sql`]: every value must fit its field, the kind must be one a
/// version wrote.
pub(crate) fn gpu_op_from(db: &Path, r: [i64; 14], name: String) -> Result<GpuOp> {
    let u = |column: &str, v: i64| fits_u32(db, "gpu_ops", column, v);
    let kind = u8::try_from(r[4])
        .ok()
        .and_then(GpuOpKind::from_code)
        .ok_or_else(|| damaged(db, format!("gpu_ops.kind holds {}, not a device op kind (1 to 4)", r[4])))?;
    Ok(GpuOp {
        pid: u("pid", r[0])?,
        device: fits_i32(db, "gpu_ops", "device", r[1])?,
        context: u("context", r[2])?,
        stream: u("stream", r[3])?,
        kind,
        start_ns: r[5],
        end_ns: r[6],
        correlation: u("correlation", r[7])?,
        name,
        bytes: r[8],
        launch_tid: u("launch_tid", r[9])?,
        launch_start_ns: r[10],
        launch_end_ns: r[11],
        launch_cbid: u("launch_cbid", r[12])?,
        launch_event_id: r[13],
    })
}

/// A row of [`SELECT_GPU_CLOCK_SYNCS_SQL`].
pub(crate) fn gpu_clock_sync_from(db: &Path, r: [i64; 4]) -> Result<GpuClockSync> {
    Ok(GpuClockSync {
        pid: fits_u32(db, "gpu_clock_syncs", "pid", r[0])?,
        cupti_ns: r[1],
        trace_ns: r[2],
        error_ns: r[3],
    })
}

/// A row of [`SELECT_GPU_DEVICES_SQL`]: (pid, device, nvml_index) and the two texts.
pub(crate) fn gpu_device_from(db: &Path, n: [i64; 3], uuid: String, name: String) -> Result<GpuDevice> {
    Ok(GpuDevice {
        pid: fits_u32(db, "gpu_devices", "pid", n[0])?,
        device: fits_i32(db, "gpu_devices", "device", n[1])?,
        uuid,
        name,
        nvml_index: fits_i32(db, "gpu_devices", "nvml_index", n[2])?,
    })
}

/// A row of [`SELECT_GPU_TIMELINE_NOTES_SQL`]: (pid, ts, count) and the two texts.
pub(crate) fn gpu_timeline_note_from(db: &Path, n: [i64; 3], kind: String, detail: String) -> Result<GpuTimelineNote> {
    Ok(GpuTimelineNote {
        pid: fits_u32(db, "gpu_timeline_notes", "pid", n[0])?,
        ts_ns: n[1],
        kind,
        count: n[2],
        detail,
    })
}

/// What each `gpu_ops.kind` code is (the `gpu_op_kinds` lookup table): (code, name, description).
pub(crate) fn op_kind_rows() -> impl Iterator<Item = (i64, &'static str, &'static str)> {
    GpuOpKind::ALL.into_iter().map(|k| {
        let description = match k {
            GpuOpKind::Kernel => "a kernel the device ran (CUPTI CONCURRENT_KERNEL); name: its (mangled) name",
            GpuOpKind::Memcpy => "a memory copy (MEMCPY); name: its direction (HtoD, DtoH, DtoD, ...), bytes copied",
            GpuOpKind::Memset => "a memset (MEMSET); bytes set",
            GpuOpKind::Sync => {
                "a host wait on the device (SYNCHRONIZATION): its span is the host's wait, not device work; name: \
                 stream, context, event or stream_wait_event"
            }
        };
        (i64::from(k.code()), k.name(), description)
    })
}

/// The lookup table's INSERT (idempotent), in both engines' SQL.
pub(crate) const INSERT_OP_KIND_SQL: &str =
    "INSERT OR REPLACE INTO gpu_op_kinds (code, name, description) VALUES (?, ?, ?)";

/// How far a traced call's span may miss the API span CUPTI recorded for the same call, on either
/// side: the two clocks are calibrated against each other, not identical.
pub const LAUNCH_TOLERANCE_NS: i64 = 50_000;

/// The sources whose calls launch device work: the CUDA runtime, the driver, and graph launches
/// (`cudaGraphLaunch` is what CUPTI names as the API of a graph's kernels). NCCL calls wrap the
/// runtime's launches and are not launches themselves.
const LAUNCHING_SOURCES: [Source; 3] = [Source::Cuda, Source::Driver, Source::CudaGraph];

/// Whether a finished trace has device ops (no work at all for traces without).
pub(crate) const HAS_OPS_SQL: &str = "SELECT EXISTS (SELECT 1 FROM gpu_ops)";

/// The statements, run in order once the trace's rows are all in (at finish and after `convert`),
/// that fill `gpu_ops.launch_event_id`: for each op with a launching thread, the id of the traced
/// call of that pid and tid whose span `[ts, ts + dur]`, widened by [`LAUNCH_TOLERANCE_NS`] on each
/// side, holds the API span `[launch_start_ns, launch_end_ns]`; 0 when none does.
///
/// Of several such calls, the one that needed the least of the tolerance (the sum of how far its
/// start is after the API start and its end before the API end) wins, then the earliest start,
/// then the lowest id. A call that holds another holds every span the other holds with no more
/// tolerance, so of a runtime call and the driver call inside it the runtime call (the outermost)
/// wins; and a neighbouring call on the same thread that ended a few microseconds before the
/// launch began (a `cudaGetDevice` just before a `cudaLaunchKernel`) reaches the span only through
/// the tolerance, so it loses to the call that holds it. Earliest start alone would pick it.
///
/// The join walks the calls and searches `gpu_ops` by `(pid, launch_tid, launch_start_ns)` (SQLite's
/// `idx_gpu_ops_launch`, built just before: SQLite's plan is forced with `CROSS JOIN`, which keeps
/// the calls as the outer loop); in DuckDB the same condition runs as a range join
/// (`prefer_range_joins`: IEJoin over the two inequalities on `launch_start_ns` instead of a hash
/// join on (pid, tid) that would pair every call of a thread with every op it launched).
pub(crate) fn resolve_launches_sql(engine: Engine) -> [String; 2] {
    let sources: Vec<String> = LAUNCHING_SOURCES.iter().map(|s| s.code().to_string()).collect();
    let tol = LAUNCH_TOLERANCE_NS;
    let join = match engine {
        // the calls as the outer loop, each searching the ops' launch index
        Engine::Sqlite => "events e CROSS JOIN gpu_ops o",
        Engine::DuckDb => "events e JOIN gpu_ops o ON o.pid = e.pid AND o.launch_tid = e.tid",
    };
    let candidates = format!(
        "SELECT o.rowid AS op_row, e.id AS event_id, row_number() OVER (PARTITION BY o.rowid ORDER BY \
         (CASE WHEN e.timestamp > o.launch_start_ns THEN e.timestamp - o.launch_start_ns ELSE 0 END) + \
         (CASE WHEN o.launch_end_ns > e.timestamp + e.duration THEN o.launch_end_ns - e.timestamp - e.duration ELSE 0 END), \
         e.timestamp, e.id) AS pick \
         FROM {join} \
         WHERE e.source IN ({}) AND o.pid = e.pid AND o.launch_tid = e.tid AND o.launch_tid <> 0 \
         AND o.launch_start_ns >= e.timestamp - {tol} AND o.launch_start_ns <= e.timestamp + e.duration + {tol} \
         AND o.launch_end_ns <= e.timestamp + e.duration + {tol}",
        sources.join(", ")
    );
    [
        // a call no longer in the trace (a cut) names nothing
        "UPDATE gpu_ops SET launch_event_id = 0 WHERE launch_event_id <> 0".to_string(),
        format!("SELECT op_row, event_id FROM ({candidates}) AS c WHERE pick = 1"),
    ]
}

/// The UPDATE that writes the picks of [`resolve_launches_sql`] (its second statement, `best`: a
/// subquery, or a table the engine filled from it).
pub(crate) fn apply_launches_sql(best: &str) -> String {
    format!("UPDATE gpu_ops SET launch_event_id = best.event_id FROM {best} AS best WHERE gpu_ops.rowid = best.op_row")
}

/// The indexes a finished SQLite trace has on `gpu_ops`: windows of device time, and the launch
/// join of [`resolve_launches_sql`] (and any lookup of a thread's launches).
pub(crate) const SQLITE_INDEXES: &str = "CREATE INDEX IF NOT EXISTS idx_gpu_ops_start ON gpu_ops(start_ns);\n\
CREATE INDEX IF NOT EXISTS idx_gpu_ops_launch ON gpu_ops(pid, launch_tid, launch_start_ns);\n";

/// What each device-timeline table is for ([`crate::schema::table_meaning`] of these tables).
pub(crate) fn table_meaning(table: &str) -> &'static str {
    match table {
        "gpu_ops" => "the device's own timeline, recorded by `trace --gpu-timeline` (CUPTI's Activity API inside the traced process): every kernel, copy, memset and synchronization with its device start and end on the trace's clock, and the traced call that launched it (launch_event_id = events.id)",
        "gpu_clock_syncs" => "the calibrations that mapped CUPTI's clock onto the trace's (device times between two pairs are mapped piecewise linearly; error_ns bounds a mapped time near its pair)",
        "gpu_devices" => "the CUDA devices each traced process used, with the UUID that names the same GPU in NVML (gpu_samples.gpu = nvml_index)",
        "gpu_timeline_notes" => "what a reader of the device timeline must know: when it started and stopped, its holes (another CUPTI client, the library turned off), records dropped or without timestamps, clock steps, ops whose launching call is not in the trace",
        _ => "",
    }
}

/// What each device-timeline column means ([`crate::schema::column_meaning`] of these tables).
pub(crate) fn column_meaning(table: &str, column: &str) -> &'static str {
    match (table, column) {
        ("gpu_ops", "pid") => "the process that launched it",
        ("gpu_ops", "device") => "CUDA device ordinal in that process (gpu_devices.device); -1 for a synchronization of no one device",
        ("gpu_ops", "context") => "CUPTI's context id",
        ("gpu_ops", "stream") => "CUPTI's stream id (not the CUstream handle in events.arg2); 0 when the record names none",
        ("gpu_ops", "kind") => "1 kernel, 2 memcpy, 3 memset, 4 sync (a host wait, not device work); see gpu_op_kinds",
        ("gpu_ops", "start_ns") => "unix ns (trace clock) when the device started it",
        ("gpu_ops", "end_ns") => "unix ns (trace clock) when the device finished it (device time = end_ns - start_ns)",
        ("gpu_ops", "correlation") => "CUPTI's correlation id, shared with the API record of the launching call",
        ("gpu_ops", "name") => "kernel: its name as CUPTI gives it (mangled C++); memcpy: direction (HtoD, DtoH, DtoD, ...); sync: stream, context, event or stream_wait_event; empty for a memset",
        ("gpu_ops", "bytes") => "bytes copied or set; 0 for kernels and synchronizations",
        ("gpu_ops", "launch_tid") => "the thread that launched it (events.tid); 0 when CUPTI's record of the call was not received",
        ("gpu_ops", "launch_start_ns") | ("gpu_ops", "launch_end_ns") => "when the launching call started / returned, unix ns (trace clock, as CUPTI saw it); 0 unknown",
        ("gpu_ops", "launch_cbid") => "CUPTI's callback id of the launching call (runtime ids plus 1048576; driver ids as they are); 0 unknown",
        ("gpu_ops", "launch_event_id") => "events.id of the launching call: the outermost traced CUDA call of (pid, launch_tid) whose span, within 50 us each side, holds [launch_start_ns, launch_end_ns] (the one needing the least of that margin, then the earliest); 0 when none; filled when the trace is finished (in a series, against the events of the op's own part)",
        ("gpu_clock_syncs", "pid") | ("gpu_devices", "pid") | ("gpu_timeline_notes", "pid") => "the traced process",
        ("gpu_clock_syncs", "cupti_ns") => "CUPTI's timestamp (cuptiGetTimestamp)",
        ("gpu_clock_syncs", "trace_ns") => "the same instant on the trace's clock, unix ns (the midpoint of the two host reads around it)",
        ("gpu_clock_syncs", "error_ns") => "half the width of those host reads, ns: the mapping's error bound at this pair",
        ("gpu_devices", "device") => "CUDA device ordinal in that process (gpu_ops.device; per process: CUDA_VISIBLE_DEVICES)",
        ("gpu_devices", "uuid") => "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as NVML spells it",
        ("gpu_devices", "name") => "the device's name (NVIDIA H100 80GB HBM3)",
        ("gpu_devices", "nvml_index") => "the NVML index of the same UUID (gpu_samples.gpu); -1 when NVML was not read",
        ("gpu_timeline_notes", "ts_ns") => "unix ns (trace clock)",
        ("gpu_timeline_notes", "kind") => "started, stopped, stepped_aside, resumed, off, dropped, zero_timestamps, clock_step, unmatched",
        ("gpu_timeline_notes", "count") => "how many (records dropped, without timestamps, unmatched ops); 0 where no count applies",
        ("gpu_timeline_notes", "detail") => "what happened and why, in words",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_do_not_fit_are_errors() {
        let db = Path::new("t.db");
        let mut r = [1, 0, 1, 7, 1, 10, 20, 5, 0, 9, 8, 9, 1, 0];
        assert_eq!(gpu_op_from(db, r, "k".into()).unwrap().kind, GpuOpKind::Kernel);
        r[4] = 9;
        let e = gpu_op_from(db, r, "k".into()).unwrap_err().to_string();
        assert!(e.contains("gpu_ops.kind holds 9"), "{e}");
        r[4] = 2;
        r[0] = -1;
        assert!(gpu_op_from(db, r, "k".into()).is_err(), "a negative pid");
        assert!(gpu_device_from(db, [1, 1 << 40, 0], String::new(), String::new()).is_err());
        assert!(gpu_clock_sync_from(db, [1 << 33, 0, 0, 0]).is_err());
    }

    #[test]
    fn the_launch_join_names_the_launching_sources_by_code() {
        let [_, sql] = resolve_launches_sql(Engine::Sqlite);
        assert!(sql.contains("e.source IN (1, 4, 8)"), "{sql}");
        assert!(sql.contains(&format!("e.timestamp - {LAUNCH_TOLERANCE_NS}")), "{sql}");
    }
}
