//! `causeway fleet maintain`: the lake's housekeeping, done by DuckLake's own procedures (never by
//! writing its catalog tables): flush the rows small commits inlined into the catalog out to Parquet,
//! merge the many small files one file per flush per node leaves, expire snapshots older than the
//! kept history, and delete the files nothing references any more; then bring the per-collective
//! summaries the straggler query reads up to date (`summaries.rs`). Run by one instance (a cron
//! job or a timer) with the shipping role; shippers may keep shipping meanwhile (a conflicting
//! commit is retried).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lake::{self, Access, LakeSpec, LAKE};
use crate::FleetError;

/// One step of the housekeeping and how long it took.
#[derive(Debug, Clone, Serialize)]
pub struct MaintainStep {
    pub step: &'static str,
    pub seconds: f64,
    /// What the summarizing step did (that step only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarized: Option<crate::Summarized>,
}

/// Run the housekeeping; snapshots (time travel) younger than `keep` are kept.
pub fn maintain(lake: &LakeSpec, keep: Duration) -> Result<Vec<MaintainStep>, FleetError> {
    let conn = lake::connect(lake, &Access::Ship { data_path: None })?;
    let keep_s = keep.as_secs();
    let older_than = format!("now()::TIMESTAMP - INTERVAL '{keep_s} seconds'");
    let steps: [(&'static str, String); 4] = [
        ("flush inlined rows to Parquet", format!("CALL ducklake_flush_inlined_data('{LAKE}')")),
        ("merge adjacent files", format!("CALL ducklake_merge_adjacent_files('{LAKE}')")),
        ("expire old snapshots", format!("CALL ducklake_expire_snapshots('{LAKE}', older_than => {older_than})")),
        ("delete unreferenced files", format!("CALL ducklake_cleanup_old_files('{LAKE}', older_than => {older_than})")),
    ];
    let mut out = Vec::new();
    for (step, sql) in steps {
        let t = Instant::now();
        lake::retry_conflicts(5, || conn.execute_batch(&sql).map_err(FleetError::from))
            .map_err(|e| FleetError::Engine(format!("{step}: {e}")))?;
        out.push(MaintainStep { step, seconds: t.elapsed().as_secs_f64(), summarized: None });
    }
    // the summaries (a lake with no NCCL calls yet has nothing to summarize)
    let t = Instant::now();
    let fleet = match crate::Fleet::new(conn) {
        Err(FleetError::Empty(_)) => return Ok(out),
        other => other?,
    };
    let done = fleet.summarize().map_err(|e| FleetError::Engine(format!("summarize collectives: {e}")))?;
    out.push(MaintainStep {
        step: "summarize collectives",
        seconds: t.elapsed().as_secs_f64(),
        summarized: Some(done),
    });
    Ok(out)
}
