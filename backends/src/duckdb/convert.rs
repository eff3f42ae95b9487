//! The DuckDB side of `convert`: reading a native DuckDB trace row by row with every column, and
//! writing a complete native DuckDB trace (events through the Appender).

use std::path::Path;

use duckdb::params;

use causeway_model::codes::PrevState;
use causeway_model::{
    Event, GpuProcessMemory, GpuSample, KernelName, LaunchConfig, LibraryAttach, NcclCall, NetPeer, ProcessCgroup,
    ProcessRank, SchedDetail, ServingSample, SessionInfo,
};

use super::reader::{ints, launch_config_column, texts};
use super::{aggregates_ddl, engine_err, DuckDbStore, DuckDbWriter};
use crate::conversion::{merge_names, ConvertSource, ConvertTarget, LossRow, NativeRow, RowExtra};
use crate::schema::{SOURCE_COLUMNS_KEY, SOURCE_MISSING_KEY};
use crate::sink::EngineWriter;
use crate::{AggregateRow, GpuTimelinePart, StackRecord, TraceStore};
use crate::{Result, StoreError};

/// A native DuckDB trace read for conversion.
pub struct DuckDbSource {
    store: DuckDbStore,
}

impl DuckDbSource {
    pub fn open(path: &Path) -> Result<DuckDbSource> {
        Ok(DuckDbSource { store: DuckDbStore::open(path)? })
    }
}

/// Every column of an `events` row, in the order `rows` reads them (`launch_config` last, NULL for
/// a trace recorded before it existed).
fn row_sql(store: &DuckDbStore) -> String {
    format!(
        "SELECT id, timestamp, duration, pid, tid, cpu, source, op, arg0, arg1, arg2, ret_code, stack_hash, gpu_id, \
         cgroup_id, comm, prev_state, next_pid, next_tid, next_comm, wake_ts, waker_pid, waker_tid, session_id, node, \
         rank, local_rank, world_size, stack_ips, {} FROM events ORDER BY timestamp, id",
        launch_config_column(store.info())
    )
}

/// Columns of [`row_sql`].
const ROW_COLS: usize = 30;
const TEXT_COLS: [usize; 4] = [15, 19, 24, 28];

impl ConvertSource for DuckDbSource {
    fn store(&self) -> &dyn TraceStore {
        &self.store
    }

    fn renumbers_ids(&self) -> bool {
        false
    }

    fn rows(&self, chunk: usize, f: &mut dyn FnMut(Vec<NativeRow>) -> Result<()>) -> Result<()> {
        let mut buf: Vec<NativeRow> = Vec::with_capacity(chunk);
        self.store.for_batches(&row_sql(&self.store), &[], &mut |b| {
            let mut i = Vec::with_capacity(ROW_COLS);
            let mut t = Vec::with_capacity(ROW_COLS);
            for c in 0..ROW_COLS {
                if TEXT_COLS.contains(&c) {
                    i.push(None);
                    t.push(Some(texts(b, c)?));
                } else {
                    i.push(Some(ints(b, c)?));
                    t.push(None);
                }
            }
            let n = |c: usize, r: usize| -> Option<i64> {
                let a = i[c].as_ref().expect("integer column");
                duckdb::arrow::array::Array::is_valid(a, r).then(|| a.value(r))
            };
            let v = |c: usize, r: usize| n(c, r).unwrap_or(0);
            let s = |c: usize, r: usize| -> Option<String> {
                let a = t[c].as_ref().expect("text column");
                duckdb::arrow::array::Array::is_valid(a, r).then(|| a.value(r).to_string())
            };
            for r in 0..b.num_rows() {
                let sched = n(16, r).map(|ps| SchedDetail {
                    prev_state: PrevState::from_code(ps),
                    next_pid: v(17, r) as u32,
                    next_tid: v(18, r) as u32,
                    next_comm: s(19, r).unwrap_or_default(),
                    wake_ts_ns: v(20, r),
                    waker_pid: v(21, r) as u32,
                    waker_tid: v(22, r) as u32,
                });
                buf.push(NativeRow {
                    id: v(0, r),
                    session_id: v(23, r),
                    extra: RowExtra {
                        node: s(24, r).unwrap_or_default(),
                        rank: n(25, r),
                        local_rank: n(26, r),
                        world_size: n(27, r),
                        stack_ips: s(28, r).unwrap_or_default(),
                    },
                    event: Event {
                        ts_ns: v(1, r),
                        dur_ns: v(2, r),
                        pid: v(3, r) as u32,
                        tid: v(4, r) as u32,
                        cpu: n(5, r).unwrap_or(-1) as i32,
                        source: v(6, r) as u8,
                        op: v(7, r) as u16,
                        arg0: v(8, r),
                        arg1: v(9, r),
                        arg2: v(10, r),
                        ret_code: v(11, r) as i32,
                        stack_hash: v(12, r),
                        gpu_id: v(13, r) as i32,
                        cgroup_id: v(14, r),
                        comm: s(15, r).unwrap_or_default(),
                        sched,
                        launch_config: v(29, r),
                    },
                });
                if buf.len() >= chunk {
                    f(std::mem::replace(&mut buf, Vec::with_capacity(chunk)))?;
                }
            }
            Ok(())
        })?;
        if !buf.is_empty() {
            f(buf)?;
        }
        Ok(())
    }

    fn stacks(&self) -> Result<Vec<StackRecord>> {
        self.store.with_conn(|c| {
            c.prepare("SELECT hash, ips, frames FROM stack_traces ORDER BY hash")?
                .query_map([], |r| Ok(StackRecord { hash: r.get(0)?, ips: r.get(1)?, frames: r.get(2)? }))?
                .collect()
        })
    }

    fn loss_rows(&self) -> Result<Vec<LossRow>> {
        let rows: Vec<(i64, i64, String, i64)> = self.store.with_conn(|c| {
            c.prepare("SELECT session_id, source, kind, count FROM loss_counters ORDER BY session_id, source, kind")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|(s, src, k, n)| Some((s, crate::reader_common::loss_counter(src, &k, n)?)))
            .collect())
    }

    fn process_rows(&self) -> Result<Vec<(u32, String, i64)>> {
        let rows: Vec<(i64, String, i64)> = self.store.with_conn(|c| {
            c.prepare("SELECT pid, name, seen_at FROM process_names ORDER BY pid")?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })?;
        merge_names(rows.into_iter().map(|(p, n, s)| (p as u32, n, s)).collect(), &self.store)
    }

    fn attachment_rows(&self) -> Result<Vec<(i64, LibraryAttach)>> {
        self.store.attachment_rows()
    }
}

/// A native DuckDB trace written by a conversion.
pub struct DuckDbTarget {
    writer: DuckDbWriter,
}

impl DuckDbTarget {
    pub fn create(path: &Path) -> Result<DuckDbTarget> {
        Ok(DuckDbTarget { writer: DuckDbWriter::create_empty(path)? })
    }

    fn exec(&self, f: impl FnOnce(&duckdb::Connection) -> duckdb::Result<()>) -> Result<()> {
        let c = self.writer.connection();
        let err = engine_err(self.writer.path());
        c.execute_batch("BEGIN").map_err(&err)?;
        f(c).map_err(&err)?;
        c.execute_batch("COMMIT").map_err(&err)
    }
}

impl ConvertTarget for DuckDbTarget {
    fn write_sessions(&mut self, sessions: &[SessionInfo]) -> Result<()> {
        for s in sessions {
            self.writer.insert_session(s.id, s)?;
        }
        Ok(())
    }

    fn write_rows(&mut self, rows: &[NativeRow]) -> Result<()> {
        self.writer.insert_rows(rows).map(|_| ())
    }

    fn write_stacks(&mut self, stacks: &[StackRecord]) -> Result<()> {
        self.writer.write_stacks(stacks)
    }

    fn write_process_names(&mut self, names: &[(u32, String, i64)]) -> Result<()> {
        self.exec(|c| {
            let mut st = c.prepare("INSERT OR REPLACE INTO process_names (pid, name, seen_at) VALUES (?, ?, ?)")?;
            for (p, n, at) in names {
                st.execute(params![p, n, at])?;
            }
            Ok(())
        })
    }

    fn write_losses(&mut self, losses: &[LossRow]) -> Result<()> {
        self.exec(|c| {
            let mut st = c.prepare(
                "INSERT OR REPLACE INTO loss_counters (session_id, source, kind, count) VALUES (?, ?, ?, ?)",
            )?;
            for (s, l) in losses {
                st.execute(params![s, l.source, l.kind.as_str(), l.count as i64])?;
            }
            Ok(())
        })
    }

    fn write_launch_configs(&mut self, configs: &[LaunchConfig]) -> Result<()> {
        self.writer.write_launch_configs(configs)
    }

    fn write_kernel_names(&mut self, names: &[KernelName]) -> Result<()> {
        self.writer.write_kernel_names(names)
    }

    fn write_net_peers(&mut self, peers: &[NetPeer]) -> Result<()> {
        self.writer.write_net_peers(peers)
    }

    fn write_nccl_calls(&mut self, calls: &[NcclCall]) -> Result<()> {
        self.writer.write_nccl_calls(calls)
    }

    fn write_gpu_samples(&mut self, samples: &[GpuSample], processes: &[GpuProcessMemory]) -> Result<()> {
        self.writer.write_gpu_samples(samples, processes)
    }

    fn write_serving_samples(&mut self, samples: &[ServingSample]) -> Result<()> {
        self.writer.write_serving_samples(samples)
    }

    fn write_process_ranks(&mut self, ranks: &[ProcessRank]) -> Result<()> {
        self.writer.write_process_ranks(ranks)
    }

    fn write_process_cgroups(&mut self, cgroups: &[ProcessCgroup]) -> Result<()> {
        self.writer.write_process_cgroups(cgroups)
    }

    fn write_gpu_timeline(&mut self, part: &GpuTimelinePart) -> Result<()> {
        self.writer.write_gpu_timeline(part)
    }

    fn write_footprint(&mut self, part: &causeway_model::FootprintPart) -> Result<()> {
        self.writer.write_footprint(part)
    }

    fn write_attachments(&mut self, rows: &[(i64, LibraryAttach)]) -> Result<()> {
        self.writer.insert_attachments_of(rows.iter().map(|(s, a)| (*s, a)))
    }

    fn write_aggregates(&mut self, rows: &[AggregateRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.exec(|c| {
            c.execute_batch(&aggregates_ddl())?;
            let mut st = c.prepare(crate::schema::INSERT_AGGREGATE_SQL)?;
            for a in rows {
                st.execute(duckdb::params_from_iter(crate::schema::aggregate_params(a)))?;
            }
            Ok(())
        })
    }

    fn write_provenance(&mut self, missing: &[String], columns: &[String]) -> Result<()> {
        let rows: Vec<(&str, String)> = [(SOURCE_MISSING_KEY, missing), (SOURCE_COLUMNS_KEY, columns)]
            .into_iter()
            .map(|(k, l)| serde_json::to_string(l).map(|j| (k, j)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| StoreError::Engine(e.to_string()))?;
        self.exec(|c| {
            for (k, v) in &rows {
                c.execute("INSERT OR REPLACE INTO schema_info (key, value) VALUES (?, ?)", params![k, v])?;
            }
            Ok(())
        })
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.writer.finish(0).map(|_| ())
    }
}
