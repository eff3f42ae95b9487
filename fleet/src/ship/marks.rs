//! How far a trace is shipped: one mark per table the shipper advances a watermark on (`events.id`,
//! the `rowid` of the other tables [`MIRRORED`](crate::schema::MIRRORED) ships by watermark), read
//! back from the lake's `ship_watermarks` before every flush and written with the flush's rows.
//!
//! `gpu_ops` rows are final only once their launching calls are resolved, which the tracer does
//! when it finishes the trace (`launch_event_id`): the local trace's mark of `gpu_ops` stays 0 until
//! the trace records its finished extent (written after the resolution), so the device ops of a
//! trace still being written are shipped by the flush after its end, never before.

use duckdb::params;
use serde::Serialize;

use super::{FlushPlan, Shipper};
use crate::clock;
use crate::lake::LAKE;
use crate::local::LOCAL;
use crate::FleetError;

/// Each table shipped by watermark, its mark's column in the local trace and in `ship_watermarks`.
const MARKED: [(&str, &str, &str); 13] = [
    ("events", "id", "events_hi"),
    ("nccl_calls", "rowid", "nccl_calls_hi"),
    ("gpu_samples", "rowid", "gpu_samples_hi"),
    ("gpu_process_memory", "rowid", "gpu_process_memory_hi"),
    ("serving_samples", "rowid", "serving_samples_hi"),
    ("gpu_ops", "rowid", "gpu_ops_hi"),
    ("gpu_clock_syncs", "rowid", "gpu_clock_syncs_hi"),
    ("gpu_timeline_notes", "rowid", "gpu_timeline_notes_hi"),
    ("footprint_syscalls", "rowid", "footprint_syscalls_hi"),
    ("footprint_cpu", "rowid", "footprint_cpu_hi"),
    ("footprint_fds", "rowid", "footprint_fds_hi"),
    ("footprint_requests", "rowid", "footprint_requests_hi"),
    ("footprint_execs", "rowid", "footprint_execs_hi"),
];

/// How far a trace is shipped (or how far the local trace goes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Marks {
    pub events: i64,
    pub nccl_calls: i64,
    pub gpu_samples: i64,
    pub gpu_process_memory: i64,
    pub serving_samples: i64,
    pub gpu_ops: i64,
    pub gpu_clock_syncs: i64,
    pub gpu_timeline_notes: i64,
    pub footprint_syscalls: i64,
    pub footprint_cpu: i64,
    pub footprint_fds: i64,
    pub footprint_requests: i64,
    pub footprint_execs: i64,
}

impl Marks {
    /// The mark of a table [`MIRRORED`](crate::schema::MIRRORED) ships by watermark; `None` for
    /// any other.
    pub(super) fn of(&self, table: &str) -> Option<i64> {
        let mut m = *self;
        m.of_mut(table).map(|v| *v)
    }

    fn of_mut(&mut self, table: &str) -> Option<&mut i64> {
        match table {
            "events" => Some(&mut self.events),
            "nccl_calls" => Some(&mut self.nccl_calls),
            "gpu_samples" => Some(&mut self.gpu_samples),
            "gpu_process_memory" => Some(&mut self.gpu_process_memory),
            "serving_samples" => Some(&mut self.serving_samples),
            "gpu_ops" => Some(&mut self.gpu_ops),
            "gpu_clock_syncs" => Some(&mut self.gpu_clock_syncs),
            "gpu_timeline_notes" => Some(&mut self.gpu_timeline_notes),
            "footprint_syscalls" => Some(&mut self.footprint_syscalls),
            "footprint_cpu" => Some(&mut self.footprint_cpu),
            "footprint_fds" => Some(&mut self.footprint_fds),
            "footprint_requests" => Some(&mut self.footprint_requests),
            "footprint_execs" => Some(&mut self.footprint_execs),
            _ => None,
        }
    }

    /// Whether every mark is at least `other`'s.
    pub(super) fn covers(&self, other: &Marks) -> bool {
        MARKED.iter().all(|(t, ..)| self.of(t) >= other.of(t))
    }

    /// The high marks of the next flush from this watermark towards `upto`: every table's rows up
    /// to `upto`, the events at most `batch_rows` of them.
    pub(super) fn next_flush(&self, upto: &Marks, batch_rows: i64) -> Marks {
        let mut hi = *self;
        for (t, ..) in MARKED {
            if let (Some(h), Some(u)) = (hi.of_mut(t), upto.of(t)) {
                *h = u.max(*h);
            }
        }
        hi.events = upto.events.min(self.events + batch_rows).max(self.events);
        hi
    }
}

impl Shipper {
    /// How far the lake has this trace, and the last flush's number.
    pub fn watermark(&self) -> Result<(Marks, i64), FleetError> {
        let cols: Vec<String> = MARKED.iter().map(|(.., c)| format!("coalesce(max({c}), 0)")).collect();
        let sql = format!(
            "SELECT coalesce(max(flush_id), 0), {} FROM {LAKE}.ship_watermarks WHERE node = ? AND trace_uid = ?",
            cols.join(", ")
        );
        Ok(self.conn.query_row(&sql, params![self.node, self.trace_uid], |r| {
            let mut marks = Marks::default();
            for (i, (t, ..)) in MARKED.iter().enumerate() {
                *marks.of_mut(t).expect("a marked table") = r.get(i + 1)?;
            }
            Ok((marks, r.get(0)?))
        })?)
    }

    /// How far the local trace goes now (its device ops: once their launching calls are resolved).
    pub fn local_marks(&self) -> Result<Marks, FleetError> {
        self.attach()?;
        let mut marks = Marks::default();
        for (t, col, _) in MARKED {
            if !self.has_local(t) || (t == "gpu_ops" && !self.launches_resolved()?) {
                continue;
            }
            let sql = format!("SELECT coalesce(max({}), 0) FROM {LOCAL}.{t}", self.row_key(col));
            *marks.of_mut(t).expect("a marked table") = self.conn.query_row(&sql, [], |r| r.get(0))?;
        }
        Ok(marks)
    }

    /// Whether the local trace's last writer finished it (its extent recorded, which it does after
    /// tying each device op to its launching call; a writer that opens it again removes it).
    fn launches_resolved(&self) -> Result<bool, FleetError> {
        if !self.has_local("schema_info") {
            return Ok(false);
        }
        let sql = format!("SELECT count(*) > 0 FROM {LOCAL}.schema_info WHERE key = ?");
        Ok(self.conn.query_row(&sql, [causeway_backends::FINISHED_EXTENT_KEY], |r| r.get(0))?)
    }

    /// The flush's watermark row: its high marks, how many rows it wrote, and how far the local
    /// trace went (`local_*_hi`).
    pub(super) fn insert_watermark(&self, plan: &FlushPlan, rows: u64) -> Result<(), FleetError> {
        let FlushPlan { hi, flush_id, finished, local, .. } = *plan;
        let (names, values): (Vec<&str>, Vec<i64>) =
            MARKED.iter().map(|(t, _, c)| (*c, hi.of(t).expect("a marked table"))).unzip();
        let marks: Vec<String> = values.iter().map(i64::to_string).collect();
        self.conn.execute(
            &format!(
                "INSERT INTO {LAKE}.ship_watermarks (node, trace_uid, flush_id, rows, finished, shipped_at_ns, \
                 local_events_hi, local_nccl_calls_hi, {}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, {})",
                names.join(", "),
                marks.join(", ")
            ),
            params![
                self.node,
                self.trace_uid,
                flush_id,
                rows as i64,
                finished,
                clock::realtime_ns(self.skew_ns),
                local.events.max(hi.events),
                local.nccl_calls.max(hi.nccl_calls)
            ],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marked_table_has_a_field_and_a_flush_moves_each_towards_its_end() {
        let wm = Marks { events: 10, gpu_ops: 3, ..Default::default() };
        let upto = Marks { events: 100, nccl_calls: 4, gpu_ops: 2, gpu_timeline_notes: 9, ..Default::default() };
        let hi = wm.next_flush(&upto, 50);
        assert_eq!(hi, Marks { events: 60, nccl_calls: 4, gpu_ops: 3, gpu_timeline_notes: 9, ..Default::default() });
        assert!(!hi.covers(&upto) && hi.next_flush(&upto, 50).covers(&upto));
        for (t, ..) in MARKED {
            let mut m = Marks::default();
            *m.of_mut(t).unwrap() = 1;
            assert!(!Marks::default().covers(&m), "{t} is compared");
        }
    }
}
