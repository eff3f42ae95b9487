//! The reads both engines' stores share, written once. Each engine's store has a `with_conn` whose
//! connection has rusqlite's `prepare` / `query_map` / `query_row` API, which the duckdb crate
//! mirrors; the two crates' rows and errors are different types, so the shared code is a macro over
//! the store type rather than a generic function:
//!
//! - [`impl_shared_reads!`]`(Store, NOTES)`: the store's `attachment_rows` (which `convert` reads
//!   too) and its [`crate::describe::LiveCatalog`], from the engine's [`crate::describe::EngineNotes`];
//! - [`shared_trace_store_methods!`]`(int)`, inside the store's `impl TraceStore`, with the
//!   engine's reader of an integer cell (SQLite's is lenient: Ingero DBs store what they like):
//!   every method that reads a table beside `events` (losses, aggregates, stacks, the CUDA, NCCL
//!   and NVML tables, ranks, cgroups, the device timeline) and `describe_schema`. Each table is empty for traces without
//!   it (Ingero DBs have no CUDA side tables, older native traces lack the newer ones).
//!
//! An engine-specific fast path overrides nothing here: it is a different method of the trait.

/// The inherent reads and the [`crate::describe::LiveCatalog`] of an engine's store type.
macro_rules! impl_shared_reads {
    ($store:ty, $notes:expr) => {
        impl $store {
            /// The rows of `sql`, whose columns are all integers, as arrays.
            fn int_rows<const N: usize>(&self, sql: &str) -> $crate::Result<Vec<[i64; N]>> {
                self.with_conn(|c| {
                    c.prepare(sql)?
                        .query_map([], |r| {
                            let mut row = [0i64; N];
                            for (i, v) in row.iter_mut().enumerate() {
                                *v = r.get(i)?;
                            }
                            Ok(row)
                        })?
                        .collect()
                })
            }

            /// Whether this trace is native and has the table.
            fn has_native_table(&self, table: &str) -> bool {
                $crate::reader_common::has_native_table($crate::TraceStore::info(self), table)
            }

            /// Every attachment with the id of the session that recorded it (`convert` keeps the ids).
            pub(crate) fn attachment_rows(&self) -> $crate::Result<Vec<(i64, causeway_model::LibraryAttach)>> {
                if !self.has_native_table("attachments") {
                    return Ok(Vec::new());
                }
                let rows: Vec<$crate::cuda_tables::AttachmentRow> = self.with_conn(|c| {
                    c.prepare($crate::cuda_tables::SELECT_ATTACHMENTS_SQL)?
                        .query_map([], |r| {
                            Ok($crate::cuda_tables::AttachmentRow {
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
                let db = &$crate::TraceStore::info(self).path;
                rows.into_iter().map(|row| row.decode(db)).collect()
            }
        }

        impl $crate::describe::LiveCatalog for $store {
            fn info(&self) -> &$crate::TraceInfo {
                $crate::TraceStore::info(self)
            }

            fn notes(&self) -> &'static $crate::describe::EngineNotes {
                &$notes
            }

            fn table_columns(&self, table: &str) -> $crate::Result<Vec<(String, String)>> {
                self.with_conn(|c| {
                    c.prepare($notes.columns_sql)?.query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
                })
            }

            fn count_rows(&self, quoted_table: &str) -> $crate::Result<i64> {
                self.with_conn(|c| c.query_row(&format!("SELECT count(*) FROM {quoted_table}"), [], |r| r.get(0)))
            }

            fn code_counts(&self) -> $crate::Result<Vec<(i64, i64, i64)>> {
                self.with_conn(|c| {
                    c.prepare($crate::describe::CODE_COUNTS_SQL)?
                        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                        .collect()
                })
            }

            fn op_names(&self) -> $crate::Result<Vec<$crate::describe::OpNameRow>> {
                self.with_conn(|c| {
                    c.prepare($crate::describe::OP_NAMES_SQL)?
                        .query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))))?
                        .collect()
                })
            }
        }
    };
}
pub(crate) use impl_shared_reads;

/// The `TraceStore` methods both engines implement alike, for the body of an `impl TraceStore`
/// whose type went through [`impl_shared_reads!`].
macro_rules! shared_trace_store_methods {
    ($int:path) => {
        fn loss_counters(&self) -> $crate::Result<Vec<causeway_model::LossCounter>> {
            if !self.info().has_table("loss_counters") {
                return Ok(Vec::new());
            }
            let rows: Vec<(i64, String, i64)> = self.with_conn(|c| {
                c.prepare(
                    "SELECT source, kind, CAST(SUM(count) AS BIGINT) FROM loss_counters GROUP BY source, kind \
                     ORDER BY source, kind",
                )?
                .query_map([], |r| Ok(($int(r, 0)?, r.get(1)?, $int(r, 2)?)))?
                .collect()
            })?;
            Ok($crate::reader_common::loss_counters_from(rows))
        }

        fn aggregates(&self, window: &causeway_model::time::TimeWindow) -> $crate::Result<Vec<$crate::AggregateRow>> {
            if !self.info().has_table("event_aggregates") {
                return Ok(Vec::new());
            }
            let (from, to) = $crate::reader_common::aggregate_bucket_bounds(window);
            self.with_conn(|c| {
                c.prepare(
                    "SELECT bucket, source, op, pid, count, stored, sum_dur, min_dur, max_dur, sum_arg0 \
                     FROM event_aggregates WHERE bucket > ? AND bucket <= ? ORDER BY bucket, source, op, pid",
                )?
                .query_map([from, to], |r| {
                    Ok($crate::AggregateRow {
                        bucket_ns: $int(r, 0)?,
                        source: $int(r, 1)? as u8,
                        op: $int(r, 2)? as u16,
                        pid: $int(r, 3)? as u32,
                        count: $int(r, 4)?.max(0) as u64,
                        stored: $int(r, 5)?.max(0) as u64,
                        sum_dur_ns: $int(r, 6)?,
                        min_dur_ns: $int(r, 7)?,
                        max_dur_ns: $int(r, 8)?,
                        sum_arg0: $int(r, 9)?,
                    })
                })?
                .collect()
            })
        }

        fn stacks(&self, hashes: &[i64]) -> $crate::Result<std::collections::BTreeMap<i64, $crate::StackRecord>> {
            let mut out = std::collections::BTreeMap::new();
            if hashes.is_empty() || !self.info().has_table("stack_traces") {
                return Ok(out);
            }
            // The hashes are integers written into the SQL (no bind parameters to count), 500 a
            // statement to keep each one short.
            for chunk in hashes.chunks(500) {
                let list: Vec<String> = chunk.iter().map(i64::to_string).collect();
                let sql = format!("SELECT hash, ips, frames FROM stack_traces WHERE hash IN ({})", list.join(","));
                let rows: Vec<$crate::StackRecord> = self.with_conn(|c| {
                    c.prepare(&sql)?
                        .query_map([], |r| {
                            Ok($crate::StackRecord { hash: r.get(0)?, ips: r.get(1)?, frames: r.get(2)? })
                        })?
                        .collect()
                })?;
                out.extend(rows.into_iter().map(|s| (s.hash, s)));
            }
            Ok(out)
        }

        fn launch_configs(&self) -> $crate::Result<Vec<causeway_model::LaunchConfig>> {
            if !self.has_native_table("launch_configs") {
                return Ok(Vec::new());
            }
            let rows: Vec<[i64; 11]> = self.int_rows($crate::cuda_tables::SELECT_LAUNCH_CONFIGS_SQL)?;
            rows.into_iter().map(|row| $crate::cuda_tables::launch_config_from(&self.info().path, row)).collect()
        }

        fn kernel_names(&self) -> $crate::Result<Vec<causeway_model::KernelName>> {
            if !self.has_native_table("kernel_names") {
                return Ok(Vec::new());
            }
            let rows: Vec<(i64, i64, String, String, String)> = self.with_conn(|c| {
                c.prepare($crate::cuda_tables::SELECT_KERNEL_NAMES_SQL)?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter()
                .map(|(p, h, n, m, how)| $crate::cuda_tables::kernel_name_from(db, p, h, n, m, how))
                .collect()
        }

        fn net_peers(&self) -> $crate::Result<Vec<causeway_model::NetPeer>> {
            if !self.has_native_table("net_peers") {
                return Ok(Vec::new());
            }
            let rows: Vec<(i64, i64, String, i64)> = self.with_conn(|c| {
                c.prepare($crate::cuda_tables::SELECT_NET_PEERS_SQL)?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect()
            })?;
            rows.into_iter().map(|row| $crate::cuda_tables::net_peer_from(&self.info().path, row)).collect()
        }

        fn attachments(&self) -> $crate::Result<Vec<causeway_model::LibraryAttach>> {
            Ok(self.attachment_rows()?.into_iter().map(|(_, a)| a).collect())
        }

        fn nccl_calls(
            &self,
            window: &causeway_model::time::TimeWindow,
        ) -> $crate::Result<Vec<causeway_model::NcclCall>> {
            if !self.has_native_table("nccl_calls") {
                return Ok(Vec::new());
            }
            let rows: Vec<[i64; 14]> = self.int_rows(&$crate::cuda_tables::select_nccl_calls_sql(window))?;
            rows.into_iter().map(|row| $crate::cuda_tables::nccl_call_from(&self.info().path, row)).collect()
        }

        fn gpu_samples(
            &self,
            window: &causeway_model::time::TimeWindow,
        ) -> $crate::Result<Vec<causeway_model::GpuSample>> {
            if !self.has_native_table("gpu_samples") {
                return Ok(Vec::new());
            }
            // (an older trace lacks the later columns; a fleet lake's older rows hold NULLs there)
            let columns = $crate::describe::LiveCatalog::table_columns(self, "gpu_samples")?;
            let has = |c: &str| columns.iter().any(|(name, _)| name == c);
            let rows: Vec<[i64; 27]> = self.int_rows(&$crate::nvml_tables::select_gpu_samples_sql(window, &has))?;
            rows.into_iter().map(|row| $crate::nvml_tables::gpu_sample_from(&self.info().path, row)).collect()
        }

        fn gpu_process_memory(
            &self,
            window: &causeway_model::time::TimeWindow,
        ) -> $crate::Result<Vec<causeway_model::GpuProcessMemory>> {
            if !self.has_native_table("gpu_process_memory") {
                return Ok(Vec::new());
            }
            let rows: Vec<[i64; 6]> = self.int_rows(&$crate::nvml_tables::select_gpu_process_memory_sql(window))?;
            let db = &self.info().path;
            rows.into_iter().map(|row| $crate::nvml_tables::gpu_process_memory_from(db, row)).collect()
        }

        fn serving_samples(
            &self,
            window: &causeway_model::time::TimeWindow,
        ) -> $crate::Result<Vec<causeway_model::ServingSample>> {
            if !self.has_native_table("serving_samples") {
                return Ok(Vec::new());
            }
            type Row = (i64, i64, String, String, String, Option<f64>, f64);
            let rows: Vec<Row> = self.with_conn(|c| {
                c.prepare(&$crate::cuda_tables::select_serving_samples_sql(window))?
                    .query_map([], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
                    })?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter().map(|row| $crate::cuda_tables::serving_sample_from(db, row)).collect()
        }

        fn process_ranks(&self) -> $crate::Result<Vec<causeway_model::ProcessRank>> {
            if !self.has_native_table("process_ranks") {
                return Ok(Vec::new());
            }
            let rows: Vec<([i64; 5], String, String)> = self.with_conn(|c| {
                c.prepare($crate::cuda_tables::SELECT_PROCESS_RANKS_SQL)?
                    .query_map([], |r| {
                        Ok(([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?], r.get(5)?, r.get(6)?))
                    })?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter().map(|(n, l, j)| $crate::cuda_tables::process_rank_from(db, n, l, j)).collect()
        }

        fn process_cgroups(&self) -> $crate::Result<Vec<causeway_model::ProcessCgroup>> {
            if !self.has_native_table("process_cgroups") {
                return Ok(Vec::new());
            }
            let rows: Vec<([i64; 2], [String; 6])> = self.with_conn(|c| {
                c.prepare($crate::cuda_tables::SELECT_PROCESS_CGROUPS_SQL)?
                    .query_map([], |r| {
                        Ok(([r.get(0)?, r.get(1)?], [r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?]))
                    })?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter().map(|(n, t)| $crate::cuda_tables::process_cgroup_from(db, n, t)).collect()
        }

        fn scan_gpu_ops(
            &self,
            window: &causeway_model::time::TimeWindow,
            f: &mut dyn FnMut(causeway_model::GpuOp),
        ) -> $crate::Result<u64> {
            if !self.has_native_table("gpu_ops") {
                return Ok(0);
            }
            // decoded row by row and handed over as read; a row that does not decode stops the scan
            let db = &self.info().path;
            let mut bad = None;
            let n = self.with_conn(|c| {
                let mut st = c.prepare(&$crate::gpu_tables::select_gpu_ops_sql(window))?;
                let mut rows = st.query([])?;
                let mut n = 0u64;
                while let Some(r) = rows.next()? {
                    let mut ints = [0i64; 14];
                    for (i, v) in ints.iter_mut().enumerate() {
                        *v = r.get(i)?;
                    }
                    match $crate::gpu_tables::gpu_op_from(db, ints, r.get(14)?) {
                        Ok(op) => f(op),
                        Err(e) => {
                            bad = Some(e);
                            break;
                        }
                    }
                    n += 1;
                }
                Ok(n)
            })?;
            bad.map_or(Ok(n), Err)
        }

        fn gpu_clock_syncs(&self) -> $crate::Result<Vec<causeway_model::GpuClockSync>> {
            if !self.has_native_table("gpu_clock_syncs") {
                return Ok(Vec::new());
            }
            let rows: Vec<[i64; 4]> = self.int_rows($crate::gpu_tables::SELECT_GPU_CLOCK_SYNCS_SQL)?;
            rows.into_iter().map(|r| $crate::gpu_tables::gpu_clock_sync_from(&self.info().path, r)).collect()
        }

        fn gpu_devices(&self) -> $crate::Result<Vec<causeway_model::GpuDevice>> {
            if !self.has_native_table("gpu_devices") {
                return Ok(Vec::new());
            }
            let rows: Vec<([i64; 3], String, String)> = self.with_conn(|c| {
                c.prepare($crate::gpu_tables::SELECT_GPU_DEVICES_SQL)?
                    .query_map([], |r| Ok(([r.get(0)?, r.get(1)?, r.get(2)?], r.get(3)?, r.get(4)?)))?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter().map(|(n, u, name)| $crate::gpu_tables::gpu_device_from(db, n, u, name)).collect()
        }

        fn gpu_timeline_notes(&self) -> $crate::Result<Vec<causeway_model::GpuTimelineNote>> {
            if !self.has_native_table("gpu_timeline_notes") {
                return Ok(Vec::new());
            }
            let rows: Vec<([i64; 3], String, String)> = self.with_conn(|c| {
                c.prepare($crate::gpu_tables::SELECT_GPU_TIMELINE_NOTES_SQL)?
                    .query_map([], |r| Ok(([r.get(0)?, r.get(1)?, r.get(2)?], r.get(3)?, r.get(4)?)))?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter().map(|(n, k, d)| $crate::gpu_tables::gpu_timeline_note_from(db, n, k, d)).collect()
        }

        fn under_way(&self) -> $crate::Result<Vec<$crate::UnderWayRow>> {
            if !self.has_native_table("under_way") {
                return Ok(Vec::new());
            }
            let rows: Vec<([i64; 22], [String; 2])> = self.with_conn(|c| {
                c.prepare(&$crate::under_way::select_sql())?
                    .query_map([], |r| {
                        let mut n = [0i64; 22];
                        for (i, v) in n.iter_mut().enumerate() {
                            *v = r.get(i)?;
                        }
                        Ok((n, [r.get(22)?, r.get(23)?]))
                    })?
                    .collect()
            })?;
            let db = &self.info().path;
            rows.into_iter().map(|(n, t)| $crate::under_way::row_from(db, n, t)).collect()
        }

        fn footprint(&self) -> $crate::Result<causeway_model::FootprintPart> {
            let mut tables: [Vec<$crate::footprint_tables::RawRow>; 5] = Default::default();
            for (t, rows) in $crate::footprint_tables::TABLES.iter().zip(tables.iter_mut()) {
                if !self.has_native_table(t.name) {
                    continue;
                }
                *rows = self.with_conn(|c| {
                    c.prepare(&t.select_sql())?
                        .query_map([], |r| {
                            let mut n = Vec::with_capacity(t.ints.len());
                            for i in 0..t.ints.len() {
                                n.push(r.get(i)?);
                            }
                            let mut s = Vec::with_capacity(t.texts.len());
                            for i in t.ints.len()..t.width() {
                                s.push(r.get(i)?);
                            }
                            Ok((n, s))
                        })?
                        .collect()
                })?;
            }
            $crate::footprint_tables::part_from(&self.info().path, tables)
        }

        fn describe_schema(&self) -> $crate::Result<$crate::SchemaDescription> {
            $crate::describe::describe(self)
        }
    };
}
pub(crate) use shared_trace_store_methods;
