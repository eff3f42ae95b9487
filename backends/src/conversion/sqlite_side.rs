//! The SQLite side of `convert`: reading native traces and Ingero DBs row by row with every column
//! they have (immutable, read-only opens), and writing a complete native SQLite trace.

use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, Row};

use causeway_model::{
    GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, NcclCall, NetPeer, ProcessCgroup,
    ProcessRank, ServingSample, SessionInfo,
};

use super::{merge_names, ConvertSource, ConvertTarget, LossRow, NativeRow, RowExtra};
use crate::schema::{self, EVENT_AGGREGATES_DDL, NATIVE_DDL, SOURCE_COLUMNS_KEY, SOURCE_MISSING_KEY};
use crate::sqlite::rows::{column_or_default, decode_event, event_select_list, int, opt_int, EVENT_SELECT_WIDTH};
use crate::SqliteStore;
use crate::{AggregateRow, GpuTimelinePart, StackRecord, TraceStore};
use crate::{Result, StoreError};

/// A SQLite trace (native or Ingero) read for conversion.
pub struct SqliteSource {
    store: SqliteStore,
    conn: Connection,
    renumber: bool,
}

fn text(r: &Row<'_>, i: usize) -> rusqlite::Result<String> {
    Ok(match r.get_ref(i)? {
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Integer(v) => v.to_string(),
        _ => String::new(),
    })
}

impl SqliteSource {
    pub fn open(path: &Path) -> Result<SqliteSource> {
        let store = SqliteStore::open(path)?;
        let conn = store.connect()?;
        let renumber: bool =
            conn.query_row("SELECT EXISTS (SELECT 1 FROM events WHERE typeof(id) != 'integer')", [], |r| r.get(0))?;
        Ok(SqliteSource { store, conn, renumber })
    }

    fn col(&self, name: &str, default: &str) -> String {
        column_or_default(self.store.info(), name, default)
    }
}

impl ConvertSource for SqliteSource {
    fn store(&self) -> &dyn TraceStore {
        &self.store
    }

    fn renumbers_ids(&self) -> bool {
        self.renumber
    }

    fn rows(&self, chunk: usize, f: &mut dyn FnMut(Vec<NativeRow>) -> Result<()>) -> Result<()> {
        let mut cols = event_select_list(self.store.info(), self.col("id", "rowid"));
        cols.extend([
            self.col("session_id", "0"),
            self.col("node", "''"),
            self.col("rank", "NULL"),
            self.col("local_rank", "NULL"),
            self.col("world_size", "NULL"),
            self.col("stack_ips", "''"),
        ]);
        // insertion order breaks ties: the rowid of a file, the id of a series (its view has no rowid)
        let insertion = if self.store.is_series() { "id" } else { "rowid" };
        let sql = format!("SELECT {} FROM events ORDER BY timestamp, {insertion}", cols.join(", "));
        let mut st = self.conn.prepare(&sql)?;
        let mut rows = st.query([])?;
        let mut buf = Vec::with_capacity(chunk);
        let mut next_id = 0i64;
        // The columns after the event's.
        let x = EVENT_SELECT_WIDTH;
        while let Some(r) = rows.next()? {
            next_id += 1;
            buf.push(NativeRow {
                id: if self.renumber { next_id } else { int(r, 0)? },
                session_id: int(r, x)?,
                extra: RowExtra {
                    node: text(r, x + 1)?,
                    rank: opt_int(r, x + 2)?,
                    local_rank: opt_int(r, x + 3)?,
                    world_size: opt_int(r, x + 4)?,
                    stack_ips: text(r, x + 5)?,
                },
                event: decode_event(r, text)?,
            });
            if buf.len() >= chunk {
                f(std::mem::replace(&mut buf, Vec::with_capacity(chunk)))?;
            }
        }
        if !buf.is_empty() {
            f(buf)?;
        }
        Ok(())
    }

    fn stacks(&self) -> Result<Vec<StackRecord>> {
        if !self.store.info().has_table("stack_traces") {
            return Ok(Vec::new());
        }
        Ok(self
            .conn
            .prepare("SELECT hash, ips, frames FROM stack_traces ORDER BY hash")?
            .query_map([], |r| Ok(StackRecord { hash: int(r, 0)?, ips: text(r, 1)?, frames: text(r, 2)? }))?
            .collect::<rusqlite::Result<_>>()?)
    }

    fn loss_rows(&self) -> Result<Vec<LossRow>> {
        if !self.store.info().has_table("loss_counters") {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, i64, String, i64)> = self
            .conn
            .prepare("SELECT session_id, source, kind, count FROM loss_counters ORDER BY session_id, source, kind")?
            .query_map([], |r| Ok((int(r, 0)?, int(r, 1)?, text(r, 2)?, int(r, 3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows
            .into_iter()
            .filter_map(|(s, src, k, n)| Some((s, crate::reader_common::loss_counter(src, &k, n)?)))
            .collect())
    }

    fn process_rows(&self) -> Result<Vec<(u32, String, i64)>> {
        let rows = if self.store.info().has_table("process_names") {
            let seen =
                if self.conn.prepare("SELECT seen_at FROM process_names LIMIT 0").is_ok() { "seen_at" } else { "0" };
            self.conn
                .prepare(&format!("SELECT pid, name, {seen} FROM process_names ORDER BY pid"))?
                .query_map([], |r| Ok((int(r, 0)? as u32, text(r, 1)?, int(r, 2)?)))?
                .collect::<rusqlite::Result<_>>()?
        } else {
            Vec::new()
        };
        merge_names(rows, &self.store)
    }

    fn attachment_rows(&self) -> Result<Vec<(i64, LibraryAttach)>> {
        self.store.attachment_rows()
    }
}

/// A native SQLite trace written by a conversion (no journal while writing: the file is a
/// `.partial` renamed only when complete; a rollback-journal file at the end, like the tracer's).
pub struct SqliteTarget {
    conn: Connection,
    path: PathBuf,
}

impl SqliteTarget {
    pub fn create(path: &Path) -> Result<SqliteTarget> {
        let mut conn = crate::sqlite::heap::open(path, rusqlite::OpenFlags::default())
            .map_err(|e| StoreError::Engine(format!("{}: {e}", path.display())))?;
        conn.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;")?;
        let tx = conn.transaction()?;
        tx.execute_batch(NATIVE_DDL)?;
        schema::fill_lookup_tables(&tx)?;
        tx.commit()?;
        Ok(SqliteTarget { conn, path: path.to_path_buf() })
    }
}

impl ConvertTarget for SqliteTarget {
    fn write_sessions(&mut self, sessions: &[SessionInfo]) -> Result<()> {
        let tx = self.conn.transaction()?;
        for s in sessions {
            crate::sqlite::insert_session(&tx, Some(s.id), s)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn write_rows(&mut self, rows: &[NativeRow]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT INTO events (id, timestamp, pid, tid, source, op, duration, gpu_id, arg0, arg1, ret_code, \
                 stack_hash, stack_ips, cgroup_id, node, rank, local_rank, world_size, comm, session_id, cpu, arg2, \
                 prev_state, next_pid, next_tid, next_comm, wake_ts, waker_pid, waker_tid, launch_config) VALUES (?1, \
                 ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, \
                 ?24, ?25, ?26, ?27, ?28, ?29, ?30)",
            )?;
            for r in rows {
                let (e, x, s) = (&r.event, &r.extra, r.event.sched.as_ref());
                st.execute(params![
                    r.id,
                    e.ts_ns,
                    e.pid,
                    e.tid,
                    e.source,
                    e.op,
                    e.dur_ns,
                    e.gpu_id,
                    e.arg0,
                    e.arg1,
                    e.ret_code,
                    e.stack_hash,
                    x.stack_ips,
                    e.cgroup_id,
                    x.node,
                    x.rank,
                    x.local_rank,
                    x.world_size,
                    e.comm,
                    r.session_id,
                    e.cpu,
                    e.arg2,
                    s.map(|s| s.prev_state.code()),
                    s.map(|s| s.next_pid),
                    s.map(|s| s.next_tid),
                    s.map(|s| s.next_comm.as_str()),
                    s.map(|s| s.wake_ts_ns),
                    s.map(|s| s.waker_pid),
                    s.map(|s| s.waker_tid),
                    (e.launch_config != 0).then_some(e.launch_config),
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare("INSERT OR REPLACE INTO stack_traces (hash, ips, frames) VALUES (?1, ?2, ?3)")?;
            for s in stacks {
                st.execute(params![s.hash, s.ips, s.frames])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_process_names(&mut self, names: &[(u32, String, i64)]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare("INSERT OR REPLACE INTO process_names (pid, name, seen_at) VALUES (?1, ?2, ?3)")?;
            for (p, n, at) in names {
                st.execute(params![p, n, at])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_losses(&mut self, losses: &[LossRow]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut st = tx.prepare(
                "INSERT OR REPLACE INTO loss_counters (session_id, source, kind, count) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (s, l) in losses {
                st.execute(params![s, l.source, l.kind.as_str(), l.count as i64])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_launch_configs(&tx, configs)?;
        tx.commit()?;
        Ok(())
    }

    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_net_peers(&tx, peers)?;
        tx.commit()?;
        Ok(())
    }

    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_kernel_names(&tx, names)?;
        tx.commit()?;
        Ok(())
    }

    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_nccl_calls(&tx, calls)?;
        tx.commit()?;
        Ok(())
    }

    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_gpu_samples(&tx, samples, processes)?;
        tx.commit()?;
        Ok(())
    }

    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_serving_samples(&tx, samples)?;
        tx.commit()?;
        Ok(())
    }

    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_process_ranks(&tx, ranks)?;
        tx.commit()?;
        Ok(())
    }

    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_process_cgroups(&tx, cgroups)?;
        tx.commit()?;
        Ok(())
    }

    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_footprint(&tx, part)?;
        tx.commit()?;
        Ok(())
    }

    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_gpu_timeline(&tx, part)?;
        tx.commit()?;
        Ok(())
    }

    fn write_attachments(&mut self, rows: &[(i64, LibraryAttach)]) -> Result<()> {
        let tx = self.conn.transaction()?;
        crate::sqlite::insert_attachments(&tx, rows.iter().map(|(s, a)| (*s, a)))?;
        tx.commit()?;
        Ok(())
    }

    fn write_aggregates(&mut self, rows: &[AggregateRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let tx = self.conn.transaction()?;
        tx.execute_batch(EVENT_AGGREGATES_DDL)?;
        {
            let mut st = tx.prepare(schema::INSERT_AGGREGATE_SQL)?;
            for a in rows {
                st.execute(rusqlite::params_from_iter(crate::schema::aggregate_params(a)))?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn write_provenance(&mut self, missing: &[String], columns: &[String]) -> Result<()> {
        for (key, list) in [(SOURCE_MISSING_KEY, missing), (SOURCE_COLUMNS_KEY, columns)] {
            let json = serde_json::to_string(list).map_err(|e| StoreError::Engine(e.to_string()))?;
            self.conn.execute("INSERT OR REPLACE INTO schema_info (key, value) VALUES (?1, ?2)", params![key, json])?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<()> {
        crate::sqlite::build_finished_structures(&self.conn)?;
        self.conn.execute_batch("PRAGMA journal_mode=DELETE;")?;
        self.conn.close().map_err(|(_, e)| StoreError::Engine(format!("{}: {e}", self.path.display())))?;
        Ok(())
    }
}
