//! The shipper: copies a local trace into the lake, exactly once, as it grows or after it ends.
//!
//! The local trace stays the source of truth. The shipper attaches it read-only in the same DuckDB
//! connection as the lake (a SQLite trace through DuckDB's `sqlite_scanner`, a DuckDB trace
//! directly), so every copy is one `INSERT INTO lake.t SELECT ... FROM local.t` run by the engine.
//!
//! **Exactly once.** Each flush ships the rows beyond the trace's watermark (per table: `events.id`,
//! the `rowid` of `nccl_calls`, `gpu_samples`, `serving_samples` and the device timeline's tables:
//! `marks.rs`) up to a high mark, and writes them together with
//! the new watermark row in **one** DuckLake transaction. A shipper killed at any point leaves either
//! the whole flush or none of it; a new one reads the watermark back from the lake and goes on. A
//! lake that cannot be reached fails the flush (rolled back, watermark unmoved) and it is tried
//! again with backoff for a bounded time (`resilient.rs`, [`crate::retry`]); the local trace keeps
//! everything meanwhile, and each watermark row records how far the local trace went, so the lake
//! knows what it lacks of a trace whose shipper gave up.
//!
//! **Tiers.** `summary` (the default) ships the NCCL calls and the calls that wait for the GPU
//! (synchronize, synchronous copies, collectives), the stacks they carry, and per-second per-op
//! aggregates of *every* event (`op_windows`), so the fleet's counts stay exact; `all` ships every
//! event. A window of raw events can be shipped on request ([`Shipper::ship_window`]) for a
//! drill-down. The small tables (sessions, process names and ranks, losses, kernel names, launch
//! configurations, attachments) are replaced whole when they changed, in a flush's transaction
//! (`small_tables.rs`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod marks;
mod resilient;
pub use marks::Marks;
pub use resilient::{Behind, TEST_PAUSE_ENV};

use duckdb::{params, Connection};
use serde::Serialize;

use crate::clock::{self, ClockSample};
use crate::lake::{self, lit, Access, LakeSpec, LAKE};
use crate::local::{attach_local, identity, node_and_host, LOCAL};
use crate::schema::{self, MIRRORED};
use crate::small_tables::{self, SmallTables};
use crate::tier::{summary_predicate, Tier};
use crate::FleetError;

/// What one flush ships: the rows in (wm, hi], its number, whether it ends the trace, and how far
/// the local trace went when it was planned (recorded with the watermark: what the lake lacks).
#[derive(Debug, Clone, Copy)]
struct FlushPlan {
    wm: Marks,
    hi: Marks,
    flush_id: i64,
    finished: bool,
    local: Marks,
}

/// What one flush wrote: rows per table.
type FlushRows = Vec<(&'static str, u64)>;

/// The small tables (names, ranks, sessions, losses, ...) are compared with what the lake has at a
/// shipper's first flush, at the last one, and otherwise at most this often; those that changed are
/// replaced (see [`crate::small_tables`]).
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(30);

/// The DuckDB temporary table a flush reads its events from: the local trace is read once per
/// flush (DuckDB's SQLite reader does not push the id range down: every read is a scan).
const BATCH: &str = "cw_batch";
/// The events read ahead for the next flushes (one scan for up to [`PENDING_ROWS`] events).
const PENDING: &str = "cw_pending";
/// Events read ahead from the local trace at once (bounds the read-ahead's memory).
const PENDING_ROWS: i64 = 2_000_000;

/// Times a flush is redone after a commit conflict with another shipper.
const CONFLICT_RETRIES: u32 = 12;

/// How to ship.
#[derive(Debug, Clone)]
pub struct ShipOptions {
    /// The node's name (default: the trace's own `sessions.node`, else this host's name).
    pub node: Option<String>,
    pub tier: Tier,
    /// Events per transaction at most.
    pub batch_rows: i64,
    /// Where a new lake keeps its data files.
    pub data_path: Option<PathBuf>,
    /// DuckDB threads of the shipper's connection. One by default: a shipper runs beside the job it
    /// traces and must not compete for its cores; and eight shippers on one 2-core machine (the
    /// fleet bench) shipped 1.4x the rows per second with one thread each than with a thread per
    /// core each (the engine's scheduling between threads cost more than it gave).
    pub threads: usize,
    /// Test hook: plant a clock offset in this shipper's readings (see [`clock::TEST_SKEW_ENV`],
    /// which sets it for a process).
    pub test_clock_skew_ns: Option<i64>,
    /// How long a lake that fails transiently is waited out (with backoff) before the shipper gives
    /// up and says what the lake lacks (see [`crate::retry`]).
    pub retry_for: Duration,
}

impl Default for ShipOptions {
    fn default() -> Self {
        ShipOptions {
            node: None,
            tier: Tier::Summary,
            batch_rows: 50_000,
            data_path: None,
            threads: 1,
            test_clock_skew_ns: None,
            retry_for: crate::retry::DEFAULT_RETRY_FOR,
        }
    }
}

/// What one call shipped.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ShipReport {
    pub node: String,
    pub trace_uid: String,
    pub tier: &'static str,
    /// Transactions committed.
    pub flushes: u64,
    /// Rows written per table (events, nccl_calls, gpu_samples, op_windows, stack_traces).
    pub rows: std::collections::BTreeMap<String, u64>,
    /// The watermark after the last commit.
    pub shipped: Marks,
    /// The local trace's extent when shipping stopped.
    pub local: Marks,
    /// The catalog's clock minus this host's (best sample of the last flush), and its bound.
    pub clock_offset_ns: Option<i64>,
    pub clock_error_ns: Option<i64>,
    /// Commit times of the flushes, ms.
    pub commit_ms: Vec<u64>,
}

impl ShipReport {
    fn add(&mut self, table: &str, n: u64) {
        *self.rows.entry(table.to_string()).or_default() += n;
    }
    /// Events the local trace holds beyond what the lake has (0 when fully shipped).
    pub fn unshipped_events(&self) -> i64 {
        (self.local.events - self.shipped.events).max(0)
    }
}

/// A shipper for one local trace.
pub struct Shipper {
    conn: Connection,
    /// The lake and how to attach it again after the catalog dropped the connection.
    lake: LakeSpec,
    data_path: Option<PathBuf>,
    threads: usize,
    /// The connection may be dead (the last error said the catalog went away): attach anew first.
    broken: bool,
    retry_for: Duration,
    /// The test pause ([`TEST_PAUSE_ENV`]) was taken.
    paused: std::cell::Cell<bool>,
    /// The local trace, attached as [`LOCAL`] only while the shipper reads it (see
    /// [`Shipper::release`]).
    path: PathBuf,
    attached: std::cell::Cell<bool>,
    /// The local trace is DuckDB, whose `rowid` counts from 0 (SQLite's from 1): its rows are
    /// keyed `rowid + 1` so that marks mean the same on both ([`Shipper::row_key`]).
    local_duckdb: bool,
    node: String,
    trace_uid: String,
    tier: Tier,
    batch_rows: i64,
    local_tables: Vec<String>,
    summary: String,
    skew_ns: i64,
    /// Whether the lake's catalog is a server whose clock each flush samples (a PostgreSQL
    /// catalog); a catalog file has none, and the flushes record no clock (see [`LakeSpec::file`]).
    server_clock: bool,
    /// When this shipper last compared the small tables (see [`SNAPSHOT_EVERY`]).
    snapshot_at: Option<Instant>,
    /// What the lake holds of the small tables.
    small: SmallTables,
    /// The id range (lo, hi] of the events read ahead into [`PENDING`]; (0, 0) when none.
    pending: (i64, i64),
}

/// A node is one host: its clock offsets are measured and applied per node, and its drill-down is
/// its traces. A trace recorded on another host than the traces already filed under `node` (two
/// hosts with one name: cloned machines, containers, a `--node` typed twice) is refused, named,
/// with the way to file it under a name of its own.
fn refuse_node_of_another_host(conn: &Connection, node: &str, hostname: &str, trace: &Path) -> Result<(), FleetError> {
    let others: Vec<String> = conn
        .prepare(&format!(
            "SELECT DISTINCT hostname FROM {LAKE}.ship_traces WHERE node = ? AND hostname != ? ORDER BY 1"
        ))?
        .query_map(params![node, hostname], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    match others.first() {
        None => Ok(()),
        Some(other) => Err(FleetError::BadLake(format!(
            "{}: node `{node}` is already in the lake from host `{other}`, and this trace was recorded on \
             `{hostname}`: two hosts under one node would share one clock and one drill-down; file this one \
             under a name of its own (`causeway ship --node NAME`, `causeway merge --node {}=NAME`)",
            trace.display(),
            trace.display()
        ))),
    }
}

impl Shipper {
    /// Attach the lake (creating its tables if needed) and the local trace at `trace`.
    pub fn open(lake: &LakeSpec, trace: &Path, opts: &ShipOptions) -> Result<Shipper, FleetError> {
        let skew_ns = opts.test_clock_skew_ns.unwrap_or_else(clock::test_skew_ns);
        let conn = lake::connect(lake, &Access::Ship { data_path: opts.data_path.clone() })?;
        conn.execute_batch(&format!("SET threads = {}", opts.threads.max(1)))?;
        attach_local(&conn, trace)?;
        let local_tables = schema::tables(&conn, LOCAL)?;
        let (trace_uid, trace_node, trace_host, tool_version) = identity(&conn, trace)?;
        let (node, hostname) = node_and_host(opts.node.as_deref(), &trace_node, &trace_host);
        schema::ensure(&conn, LOCAL)?;
        let engine = if causeway_backends::duckdb::is_duckdb_file(trace) { "duckdb" } else { "sqlite" };
        let tier = lake::retry_conflicts(8, || {
            // before the trace's own row: a trace of another host can carry the same uid
            refuse_node_of_another_host(&conn, &node, &hostname, trace)?;
            let existing: Option<String> = conn
                .prepare(&format!("SELECT tier FROM {LAKE}.ship_traces WHERE node = ? AND trace_uid = ?"))?
                .query_map(params![node, trace_uid], |r| r.get(0))?
                .next()
                .transpose()?;
            match existing {
                Some(t) if t != opts.tier.name() => Err(FleetError::BadLake(format!(
                    "this trace was shipped to the lake as tier `{t}` before; ship it as `{t}` again \
                     (one trace has one tier; a window of raw events can be added with --from/--to)"
                ))),
                Some(_) => Ok(opts.tier),
                None => {
                    conn.execute(
                        &format!("INSERT INTO {LAKE}.ship_traces VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                        params![
                            node,
                            trace_uid,
                            opts.tier.name(),
                            hostname,
                            trace.display().to_string(),
                            engine,
                            tool_version,
                            clock::realtime_ns(skew_ns)
                        ],
                    )?;
                    Ok(opts.tier)
                }
            }
        })?;
        Ok(Shipper {
            conn,
            lake: lake.clone(),
            data_path: opts.data_path.clone(),
            threads: opts.threads.max(1),
            broken: false,
            retry_for: opts.retry_for,
            paused: std::cell::Cell::new(false),
            path: trace.to_path_buf(),
            attached: std::cell::Cell::new(true),
            local_duckdb: engine == "duckdb",
            node,
            trace_uid,
            tier,
            batch_rows: opts.batch_rows.max(1),
            local_tables,
            summary: summary_predicate(),
            skew_ns,
            server_clock: lake.has_server_clock(),
            snapshot_at: None,
            small: SmallTables::default(),
            pending: (0, 0),
        })
    }

    /// How a watermarked table's rows are keyed in the local trace: its column, and for DuckDB's
    /// 0-based `rowid` that `rowid + 1` (a 0 mark is "nothing shipped"; its first row is row 0).
    pub(crate) fn row_key(&self, col: &str) -> String {
        if self.local_duckdb && col == "rowid" {
            "(rowid + 1)".to_string()
        } else {
            col.to_string()
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }
    pub fn trace_uid(&self) -> &str {
        &self.trace_uid
    }

    fn has_local(&self, t: &str) -> bool {
        self.local_tables.iter().any(|x| x == t)
    }

    fn report(&self) -> ShipReport {
        ShipReport {
            node: self.node.clone(),
            trace_uid: self.trace_uid.clone(),
            tier: self.tier.name(),
            ..Default::default()
        }
    }

    /// Attach the local trace again if [`Shipper::release`] let it go.
    fn attach(&self) -> Result<(), FleetError> {
        if !self.attached.get() {
            attach_local(&self.conn, &self.path)?;
            self.attached.set(true);
        }
        Ok(())
    }

    /// Whether the local trace is attached in the connection now (a DETACH that failed left it).
    fn local_attached(&self) -> bool {
        self.conn
            .query_row(
                &format!("SELECT count(*) > 0 FROM duckdb_databases() WHERE database_name = '{LOCAL}'"),
                [],
                |r| r.get(0),
            )
            .unwrap_or(false)
    }

    /// Let go of the local trace between flushes, so that the tracer finishing it is never held
    /// up by this reader (it turns the write-ahead log back into a plain file at the end).
    pub fn release(&self) {
        if self.attached.get() {
            // a DETACH can fail (a connection whose catalog went away mid-commit): then the trace
            // stays attached, and known to be
            let _ = self.conn.execute_batch(&format!("DETACH DATABASE IF EXISTS {LOCAL}"));
            self.attached.set(self.local_attached());
        }
    }

    /// Whether the tracer has finished the trace (its latest session has stopped).
    pub fn trace_finished(&self) -> Result<bool, FleetError> {
        self.attach()?;
        Ok(self.conn.query_row(
            &format!("SELECT coalesce(max(stopped_at) FILTER (WHERE id = (SELECT max(id) FROM {LOCAL}.sessions)), 0) != 0 FROM {LOCAL}.sessions"),
            [],
            |r| r.get(0),
        )?)
    }

    /// Flush until the watermark reaches `upto`.
    fn ship_upto(&mut self, upto: Marks, finished: bool, report: &mut ShipReport) -> Result<(), FleetError> {
        report.local = self.local_marks()?;
        loop {
            let (wm, flush) = self.watermark()?;
            report.shipped = wm;
            if wm.covers(&upto) && !(finished && flush == 0) {
                self.drop_pending();
                // nothing new; a finished trace still gets its final small tables once
                if finished && !self.finished_flag()? {
                    let plan = FlushPlan { wm, hi: wm, flush_id: flush + 1, finished: true, local: report.local };
                    self.flush(plan, report)?;
                }
                return Ok(());
            }
            let hi = wm.next_flush(&upto, self.batch_rows);
            if hi.events > self.pending.1 {
                // read ahead: the next PENDING_ROWS events in one scan of the local trace
                let end = upto.events.min(wm.events + PENDING_ROWS.max(self.batch_rows));
                self.conn.execute_batch(&format!(
                    "CREATE OR REPLACE TEMP TABLE {PENDING} AS SELECT * FROM {LOCAL}.events WHERE id > {} AND id <= {end}",
                    wm.events
                ))?;
                self.pending = (wm.events, end);
            }
            let last = hi.events >= upto.events;
            let plan = FlushPlan { wm, hi, flush_id: flush + 1, finished: finished && last, local: report.local };
            self.flush(plan, report)?;
            report.shipped = hi;
        }
    }

    fn drop_pending(&mut self) {
        if self.pending != (0, 0) {
            let _ = self.conn.execute_batch(&format!("DROP TABLE IF EXISTS {PENDING}"));
            self.pending = (0, 0);
        }
    }

    fn finished_flag(&self) -> Result<bool, FleetError> {
        Ok(self.conn.query_row(
            &format!("SELECT coalesce(bool_or(finished), false) FROM {LAKE}.ship_watermarks WHERE node = ? AND trace_uid = ?"),
            params![self.node, self.trace_uid],
            |r| r.get(0),
        )?)
    }

    /// [`Shipper::flush_once`], again while its commit conflicts with another shipper's (two
    /// nodes replacing their rows of one small table at once): the rolled-back flush is redone whole.
    fn flush(&mut self, plan: FlushPlan, report: &mut ShipReport) -> Result<(), FleetError> {
        lake::retry_conflicts(CONFLICT_RETRIES + 1, || self.flush_once(plan, report))
    }

    /// One transaction: the rows in (wm, hi] of every table, the small tables, the clock samples and
    /// the new watermark.
    fn flush_once(&mut self, plan: FlushPlan, report: &mut ShipReport) -> Result<(), FleetError> {
        let FlushPlan { wm, hi, flush_id, finished, .. } = plan;
        self.attach()?;
        // A merge's catalog file has no server clock, and this host's kernel clock says nothing
        // of the clocks of the hosts that recorded the traces: no clock rows then.
        let (samples, kernel) = if self.server_clock {
            (clock::sample_catalog(&self.conn, self.skew_ns)?, Some(clock::kernel_state(self.skew_ns)))
        } else {
            (Vec::new(), None)
        };
        // read the new events once, before the transaction (one transaction writes one database)
        if hi.events > wm.events {
            let source = if self.pending.0 <= wm.events && hi.events <= self.pending.1 {
                PENDING.to_string()
            } else {
                format!("{LOCAL}.events")
            };
            self.conn.execute_batch(&format!(
                "CREATE OR REPLACE TEMP TABLE {BATCH} AS SELECT * FROM {source} WHERE id > {} AND id <= {}",
                wm.events, hi.events
            ))?;
        }
        let snapshots = finished || self.snapshot_at.is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY);
        let changes = if snapshots {
            self.small.changes(&SmallTables::local_prints(&self.conn, |t| self.has_local(t))?, flush_id == 1)
        } else {
            Vec::new()
        };
        let started = Instant::now();
        self.conn.execute_batch("BEGIN TRANSACTION")?;
        let result = self.flush_in_transaction(&plan, &changes, &samples, kernel);
        let counts = match result {
            Ok(c) => c,
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        };
        self.test_pause(finished);
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(e.into());
        }
        let _ = self.conn.execute_batch(&format!("DROP TABLE IF EXISTS {BATCH}"));
        if snapshots {
            self.snapshot_at = Some(Instant::now());
            self.small.committed(&changes);
        }
        report.commit_ms.push(started.elapsed().as_millis() as u64);
        report.flushes += 1;
        for (t, n) in counts {
            report.add(t, n);
        }
        if let Some(best) = samples.iter().min_by_key(|s| s.rtt_ns()) {
            report.clock_offset_ns = Some(best.offset_ns());
            report.clock_error_ns = Some(best.rtt_ns() / 2 + 500);
        }
        Ok(())
    }

    fn flush_in_transaction(
        &self,
        plan: &FlushPlan,
        small_changes: &[small_tables::Change],
        samples: &[ClockSample],
        kernel: Option<clock::KernelClock>,
    ) -> Result<FlushRows, FleetError> {
        let FlushPlan { wm, hi, flush_id, .. } = *plan;
        let (node, uid) = (&self.node, &self.trace_uid);
        let c = &self.conn;
        let mut counts = Vec::new();
        let tier_pred = match self.tier {
            Tier::Summary => self.summary.clone(),
            Tier::All => "TRUE".to_string(),
        };
        if hi.events > wm.events {
            let n = c.execute(
                &format!(
                    "INSERT INTO {LAKE}.events BY NAME SELECT ? AS trace_uid, * REPLACE (?::VARCHAR AS node) \
                     FROM {BATCH} WHERE {tier_pred}"
                ),
                params![uid, node],
            )?;
            counts.push(("events", n as u64));
            let n = c.execute(
                &format!(
                    "INSERT INTO {LAKE}.op_windows SELECT ?, ?, ?, timestamp // 1000000000 * 1000000000, source, op, pid, \
                     count(*), sum(duration), min(duration), max(duration), sum(arg0) FROM {BATCH} GROUP BY ALL"
                ),
                params![node, uid, flush_id],
            )?;
            counts.push(("op_windows", n as u64));
            if self.has_local("stack_traces") {
                let n = self.ship_stacks(BATCH, &tier_pred)?;
                counts.push(("stack_traces", n));
            }
        }
        for (table, col) in MIRRORED {
            let Some(col) = col else { continue };
            if table == "events" || !self.has_local(table) {
                continue;
            }
            let (Some(lo), Some(up)) = (wm.of(table), hi.of(table)) else {
                unreachable!("{table} ships by watermark but has no mark (Marks::of)")
            };
            if up > lo {
                let n = c.execute(
                    &format!(
                        "INSERT INTO {LAKE}.{table} BY NAME SELECT ? AS trace_uid, ?::VARCHAR AS node, * FROM {LOCAL}.{table} \
                         WHERE {key} > {lo} AND {key} <= {up}",
                        key = self.row_key(col)
                    ),
                    params![uid, node],
                )?;
                counts.push((table, n as u64));
            }
        }
        SmallTables::write(c, small_changes, node, uid)?;
        let mut st = c.prepare(&format!("INSERT INTO {LAKE}.clock_samples VALUES (?, ?, ?, ?, ?, ?, ?)"))?;
        for (i, s) in samples.iter().enumerate() {
            st.execute(params![node, uid, flush_id, i as i32, s.local_send_ns, s.server_ns, s.local_recv_ns])?;
        }
        if let Some(kernel) = kernel {
            c.execute(
                &format!("INSERT INTO {LAKE}.clock_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                params![
                    node,
                    uid,
                    flush_id,
                    clock::realtime_ns(self.skew_ns),
                    kernel.status,
                    kernel.esterror_us,
                    kernel.maxerror_us,
                    kernel.mono_to_realtime_ns
                ],
            )?;
        }
        let rows: u64 = counts.iter().map(|(_, n)| n).sum();
        self.insert_watermark(plan, rows)?;
        Ok(counts)
    }

    /// The stacks of the events of `events` (a table of local events) matching `pred` that the lake
    /// does not have for this trace.
    fn ship_stacks(&self, events: &str, pred: &str) -> Result<u64, FleetError> {
        let n = self.conn.execute(
            &format!(
                "INSERT INTO {LAKE}.stack_traces BY NAME SELECT ? AS trace_uid, ?::VARCHAR AS node, s.* \
                 FROM {LOCAL}.stack_traces s WHERE s.hash IN (SELECT DISTINCT stack_hash FROM {events} \
                 WHERE {pred} AND stack_hash != 0) AND s.hash NOT IN (SELECT hash FROM {LAKE}.stack_traces \
                 WHERE node = ? AND trace_uid = ?)"
            ),
            params![self.trace_uid, self.node, self.node, self.trace_uid],
        )?;
        Ok(n as u64)
    }

    /// Ship the raw events of `[from_ns, to_ns)` that the tier leaves out, once (a window already
    /// shipped is not shipped again), with their stacks, in one transaction. Returns the events.
    pub fn ship_window(&mut self, from_ns: i64, to_ns: i64) -> Result<u64, FleetError> {
        if self.tier == Tier::All {
            return Ok(0);
        }
        self.attach()?;
        let (node, uid) = (self.node.clone(), self.trace_uid.clone());
        let pred = format!(
            "timestamp >= {from_ns} AND timestamp < {to_ns} AND NOT {} AND NOT EXISTS (SELECT 1 FROM {LAKE}.ship_windows w \
             WHERE w.node = {} AND w.trace_uid = {} AND timestamp >= w.from_ns AND timestamp < w.to_ns)",
            self.summary,
            lit(&node),
            lit(&uid)
        );
        lake::retry_conflicts(4, || {
            self.conn.execute_batch("BEGIN TRANSACTION")?;
            let run = || -> Result<u64, FleetError> {
                let n = self.conn.execute(
                    &format!(
                        "INSERT INTO {LAKE}.events BY NAME SELECT ? AS trace_uid, * REPLACE (?::VARCHAR AS node) \
                         FROM {LOCAL}.events WHERE {pred}"
                    ),
                    params![uid, node],
                )? as u64;
                if self.has_local("stack_traces") {
                    self.ship_stacks(&format!("{LOCAL}.events"), &pred)?;
                }
                self.conn.execute(
                    &format!("INSERT INTO {LAKE}.ship_windows VALUES (?, ?, ?, ?, ?, ?)"),
                    params![node, uid, from_ns, to_ns, n as i64, clock::realtime_ns(self.skew_ns)],
                )?;
                Ok(n)
            };
            match run() {
                Ok(n) => {
                    self.conn.execute_batch("COMMIT")?;
                    Ok(n)
                }
                Err(e) => {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_shipped_by_watermark_has_a_mark() {
        for (table, col) in MIRRORED {
            assert_eq!(Marks::default().of(table).is_some(), col.is_some(), "{table}");
        }
    }
}
