//! Reading `launch_configs`, `kernel_names` and `attachments` from a SQLite trace (the SQL and the
//! checked decoding are [`crate::cuda_tables`]): empty for Ingero DBs and for native traces recorded
//! before the tables existed.

use causeway_model::{KernelName, LaunchConfig, LibraryAttach};

use super::reader::SqliteStore;
use crate::cuda_tables::{self, AttachmentRow};
use crate::error::Result;
use crate::reader_common::has_native_table;
use crate::store::TraceStore;

impl SqliteStore {
    pub(super) fn read_launch_configs(&self) -> Result<Vec<LaunchConfig>> {
        if !has_native_table(self.info(), "launch_configs") {
            return Ok(Vec::new());
        }
        let rows: Vec<[i64; 11]> = self.with_conn(|c| {
            c.prepare(cuda_tables::SELECT_LAUNCH_CONFIGS_SQL)?
                .query_map([], |r| {
                    let mut row = [0i64; 11];
                    for (i, v) in row.iter_mut().enumerate() {
                        *v = r.get(i)?;
                    }
                    Ok(row)
                })?
                .collect()
        })?;
        rows.into_iter().map(|row| cuda_tables::launch_config_from(&self.info().path, row)).collect()
    }

    pub(super) fn read_kernel_names(&self) -> Result<Vec<KernelName>> {
        if !has_native_table(self.info(), "kernel_names") {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64, String, String, String)> = self.with_conn(|c| {
            c.prepare(cuda_tables::SELECT_KERNEL_NAMES_SQL)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
                .collect()
        })?;
        let db = &self.info().path;
        rows.into_iter().map(|(p, h, n, m, how)| cuda_tables::kernel_name_from(db, p, h, n, m, how)).collect()
    }

    /// Every attachment with the id of the session that recorded it (`convert` keeps the ids).
    pub(crate) fn attachment_rows(&self) -> Result<Vec<(i64, LibraryAttach)>> {
        if !has_native_table(self.info(), "attachments") {
            return Ok(Vec::new());
        }
        let rows: Vec<AttachmentRow> = self.with_conn(|c| {
            c.prepare(cuda_tables::SELECT_ATTACHMENTS_SQL)?
                .query_map([], |r| {
                    Ok(AttachmentRow {
                        session_id: r.get(0)?,
                        pid: r.get(1)?,
                        path: r.get(2)?,
                        kind: r.get(3)?,
                        how: r.get(4)?,
                        attached_at: r.get(5)?,
                        complete: r.get(6)?,
                        symbols: r.get(7)?,
                        missing: r.get(8)?,
                        note: r.get(9)?,
                    })
                })?
                .collect()
        })?;
        rows.into_iter().map(|row| row.decode(&self.info().path)).collect()
    }
}
