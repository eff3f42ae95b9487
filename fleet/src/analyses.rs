//! The cross-host analyses, as SQL that runs in DuckDB over the lake: the nodes and what each has
//! shipped, the clocks, the per-rank waits, the op figures per node (the stragglers are in
//! `stragglers.rs`). The aligned-time views and the straggler's statements are in `aligned.rs`.

use causeway_model::codes::{gpu_role, GpuRole, OpCode, OPS};
use duckdb::Connection;
use serde::Serialize;

use crate::aligned::{align_views, any_multi_handle_sql, Entries};
use crate::lake::LAKE;
use crate::progress::{traces_behind, TraceBehind};
use crate::FleetError;

/// One rank's waits at one communicator's collectives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct RankWait {
    pub comm_hash: i64,
    pub node: String,
    pub pid: i64,
    pub rank: i64,
    /// Collectives matched across at least two ranks.
    pub collectives: i64,
    /// Times it was the last one in (ranks that entered at the same nanosecond as the last are
    /// each counted: which of them was last is not known).
    pub times_last: i64,
    /// Sum, nearest-rank median and maximum of (last rank's entry - its entry), ns.
    pub waited_ns: i64,
    pub median_wait_ns: i64,
    pub max_wait_ns: i64,
}

/// A node's clock as the fleet measured it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NodeClock {
    pub node: String,
    /// Whether any flush sampled the catalog server's clock. `false` for traces merged into a
    /// catalog file (`causeway merge`): no server clock was there, the offset is taken as 0 and its
    /// bound is unknown (0 here); the collectives' cross-check below is then the only evidence.
    pub measured: bool,
    /// Flushes that sampled the catalog clock.
    pub flushes: i64,
    /// The catalog's clock minus the node's, from its tightest round trip, and that bound, ns.
    pub offset_ns: i64,
    pub error_ns: i64,
    /// Largest minus smallest offset over its flushes (drift, steps), ns.
    pub spread_ns: i64,
    /// The kernel's last report: synchronised (adjtimex STA_UNSYNC clear), estimated error µs.
    pub kernel_synced: Option<bool>,
    pub kernel_esterror_us: Option<i64>,
    /// After alignment: the nearest-rank median of (its completion of a collective - the median
    /// completion of all ranks), over collectives seen on two nodes or more; `None` without such.
    pub residual_ns: Option<i64>,
    pub residual_collectives: i64,
    /// `true` when the residual is larger than max(error, 1 ms): the offsets and the collectives
    /// disagree, and the cross-host answers are less certain than their bounds say.
    pub disagrees: bool,
}

/// A node and what it has shipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NodeSummary {
    pub node: String,
    pub traces: i64,
    pub tiers: String,
    /// Ranks of the traced processes (torchrun RANK etc.), comma separated.
    pub ranks: String,
    pub events: i64,
    pub nccl_calls: i64,
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    pub flushes: i64,
    pub last_shipped_ns: Option<i64>,
    /// Every trace of the node shipped to its end.
    pub finished: bool,
    /// Events the node's tracer counted as lost (all kinds).
    pub lost: i64,
    /// The node's traces the lake lacks the end of (empty when `finished`), with what is missing.
    pub behind: Vec<TraceBehind>,
}

/// One node's figures of one op beside the whole fleet's, exact nearest-rank over the shipped rows.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct NodeOp {
    pub node: String,
    pub op: String,
    pub source: i64,
    pub op_code: i64,
    pub calls: i64,
    pub p50_ns: i64,
    pub p90_ns: i64,
    pub p99_ns: i64,
    /// The same figures over every node's calls of the op.
    pub fleet_calls: i64,
    pub fleet_p50_ns: i64,
    pub fleet_p99_ns: i64,
    /// Nodes that shipped calls of the op.
    pub nodes: i64,
    /// At least [`OUTLIER_MIN_CALLS`] calls and a p50 or p99 at least [`OUTLIER_RATIO`] times the
    /// fleet's, on an op more than one node made.
    pub outlier: bool,
}

/// Calls a node needs of an op before its figures can make it an outlier.
pub const OUTLIER_MIN_CALLS: i64 = 20;
/// How many times the fleet's p50 or p99 a node's must be to stand out.
pub const OUTLIER_RATIO: i64 = 2;

/// The SQL of the 1-based nearest rank (ceil(per_mille * n / 1000), integer arithmetic).
fn rank_sql(per_mille: u32, n: &str) -> String {
    format!("greatest(1, ({per_mille} * {n} + 999) // 1000)")
}

/// A read-only connection to a lake and the analyses over it.
pub struct Fleet {
    pub(crate) conn: Connection,
}

pub(crate) fn strings(conn: &Connection, sql: &str) -> Result<Vec<String>, FleetError> {
    let mut st = conn.prepare(sql)?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The synchronizing calls (their end is when a rank saw its collective complete).
pub fn sync_predicate() -> String {
    let codes: Vec<String> = OPS
        .iter()
        .map(|e| OpCode::new(e.0, e.1))
        .filter(|c| matches!(gpu_role(*c), GpuRole::Sync))
        .map(|c| format!("({}, {})", c.source, c.op))
        .collect();
    format!("(source, op) IN ({})", codes.join(", "))
}

/// Run user SQL over the lake through the SQL guard: the AST check (one read statement of allowed
/// functions: no `ducklake_*` maintenance or listing functions, no `postgres_query`, no file
/// readers), then a fresh connection with the lake attached read-only, as the serving role, with
/// external access off, a memory limit and the configuration locked; bare table names are the
/// lake's (`USE lake`).
pub fn query(
    lake: &crate::LakeSpec,
    sql: &str,
    limits: &causeway_backends::QueryLimits,
) -> Result<causeway_backends::QueryResult, FleetError> {
    let open = || -> Result<Connection, causeway_backends::StoreError> {
        let engine = |e: FleetError| causeway_backends::StoreError::Engine(e.to_string());
        let conn = crate::lake::connect(lake, &crate::Access::Read).map_err(engine)?;
        conn.execute_batch(&format!("USE {LAKE}")).map_err(|e| engine(e.into()))?;
        crate::lake::harden(&conn).map_err(engine)?;
        Ok(conn)
    };
    causeway_backends::guard::run_duckdb_on(open, sql, limits).map_err(|e| match e {
        causeway_backends::StoreError::Refused(m) => FleetError::Refused(m),
        other => FleetError::Engine(other.to_string()),
    })
}

impl Fleet {
    /// Wrap a connection that has the lake attached as [`LAKE`] (see `lake::connect`).
    pub fn new(conn: Connection) -> Result<Fleet, FleetError> {
        let lake_tables = strings(
            &conn,
            &format!("SELECT table_name FROM information_schema.tables WHERE table_catalog = '{LAKE}'"),
        )?;
        for t in ["ship_traces", "clock_samples", "nccl_calls"] {
            if !lake_tables.iter().any(|x| x == t) {
                return Err(FleetError::Empty(format!(
                    "the lake has no `{t}` table yet: nothing with NCCL calls was shipped to it (causeway ship --db TRACE --lake LAKE)"
                )));
            }
        }
        conn.execute_batch(&align_views())?;
        Ok(Fleet { conn })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Every node, with what it shipped.
    pub fn nodes(&self) -> Result<Vec<NodeSummary>, FleetError> {
        let sql = format!(
            "SELECT t.node, count(*) AS traces, string_agg(DISTINCT t.tier, ',') AS tiers,
  coalesce((SELECT string_agg(DISTINCT rank::VARCHAR, ',' ORDER BY rank::VARCHAR) FROM {LAKE}.process_ranks p WHERE p.node = t.node AND p.rank >= 0), '') AS ranks,
  (SELECT count(*) FROM {LAKE}.events e WHERE e.node = t.node) AS events,
  (SELECT count(*) FROM {LAKE}.nccl_calls n WHERE n.node = t.node) AS nccl_calls,
  (SELECT min(timestamp) FROM {LAKE}.events e WHERE e.node = t.node) AS first_ns,
  (SELECT max(timestamp + duration) FROM {LAKE}.events e WHERE e.node = t.node) AS last_ns,
  (SELECT count(*) FROM {LAKE}.ship_watermarks w WHERE w.node = t.node) AS flushes,
  (SELECT max(shipped_at_ns) FROM {LAKE}.ship_watermarks w WHERE w.node = t.node) AS last_shipped_ns,
  coalesce((SELECT count(DISTINCT trace_uid) FILTER (WHERE finished) FROM {LAKE}.ship_watermarks w WHERE w.node = t.node), 0) = count(*) AS finished,
  coalesce((SELECT sum(count) FROM {LAKE}.loss_counters l WHERE l.node = t.node), 0)::BIGINT AS lost
FROM {LAKE}.ship_traces t GROUP BY t.node ORDER BY t.node"
        );
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map([], |r| {
            Ok(NodeSummary {
                node: r.get(0)?,
                traces: r.get(1)?,
                tiers: r.get(2)?,
                ranks: r.get(3)?,
                events: r.get(4)?,
                nccl_calls: r.get(5)?,
                first_ns: r.get(6)?,
                last_ns: r.get(7)?,
                flushes: r.get(8)?,
                last_shipped_ns: r.get(9)?,
                finished: r.get(10)?,
                lost: r.get(11)?,
                behind: Vec::new(),
            })
        })?;
        let mut nodes: Vec<NodeSummary> = rows.collect::<Result<_, _>>()?;
        for (node, trace) in traces_behind(&self.conn)? {
            if let Some(n) = nodes.iter_mut().find(|n| n.node == node) {
                n.behind.push(trace);
            }
        }
        Ok(nodes)
    }

    /// Every node's clock: offset, bound, spread, the kernel's view, and the cross-check with the
    /// completions of collectives.
    pub fn clocks(&self) -> Result<Vec<NodeClock>, FleetError> {
        let sync = sync_predicate();
        let sql = format!(
            "WITH per AS (
  SELECT node, count(*) AS flushes, arg_min(offset_ns, err_ns) AS offset_ns, min(err_ns) AS err_ns,
         max(offset_ns) - min(offset_ns) AS spread_ns
  FROM clock_offsets GROUP BY node),
kern AS (SELECT node, arg_max(sync_status, sampled_at_ns) AS status, arg_max(esterror_us, sampled_at_ns) AS est
         FROM {LAKE}.clock_state GROUP BY node),
syncs AS (SELECT node, trace_uid, tid, timestamp, timestamp + duration AS end_raw FROM {LAKE}.events WHERE {sync}),
comp AS (
  SELECT c.node, c.comm_hash, c.seq, s.end_raw + (c.enter_ns - c.enter_raw) AS done_ns
  FROM collectives c ASOF JOIN syncs s
    ON c.node = s.node AND c.trace_uid = s.trace_uid AND c.tid = s.tid AND s.timestamp >= c.enter_raw),
med AS (SELECT comm_hash, seq, quantile_disc(done_ns, 0.5) AS med FROM comp GROUP BY comm_hash, seq
        HAVING count(DISTINCT node) >= 2),
resid AS (SELECT node, quantile_disc(done_ns - med, 0.5) AS residual_ns, count(*) AS n
          FROM comp JOIN med USING (comm_hash, seq) GROUP BY node),
nodes AS (SELECT DISTINCT node FROM {LAKE}.ship_traces)
SELECT nodes.node, coalesce(per.flushes, 0), coalesce(per.offset_ns, 0), coalesce(per.err_ns, 0),
       coalesce(per.spread_ns, 0),
       CASE WHEN kern.status IS NULL OR kern.status < 0 THEN NULL ELSE (kern.status & 64) = 0 END,
       CASE WHEN kern.est IS NULL OR kern.est < 0 THEN NULL ELSE kern.est END,
       resid.residual_ns, coalesce(resid.n, 0)
FROM nodes LEFT JOIN per USING (node) LEFT JOIN kern USING (node) LEFT JOIN resid USING (node)
ORDER BY nodes.node"
        );
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map([], |r| {
            let err: i64 = r.get(3)?;
            let residual: Option<i64> = r.get(7)?;
            let flushes: i64 = r.get(1)?;
            Ok(NodeClock {
                node: r.get(0)?,
                measured: flushes > 0,
                flushes,
                offset_ns: r.get(2)?,
                error_ns: err,
                spread_ns: r.get(4)?,
                kernel_synced: r.get(5)?,
                kernel_esterror_us: r.get(6)?,
                residual_ns: residual,
                residual_collectives: r.get(8)?,
                disagrees: residual.is_some_and(|x| x.abs() > err.max(1_000_000)),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How to read every rank's entry into every collective, one per process (see [`Entries`]).
    pub(crate) fn entries(&self) -> Result<Entries, FleetError> {
        let multi: i64 = self.conn.query_row(&any_multi_handle_sql(), [], |r| r.get(0))?;
        let several: i64 =
            self.conn.query_row("SELECT count(*) FROM node_first_offset WHERE offsets > 1", [], |r| r.get(0))?;
        Ok(Entries { grouped: multi > 0, several_offsets: several > 0 })
    }

    /// The GPU models the lake's nodes reported (NVML's names of the devices their processes
    /// used, else their sessions' GPU model), distinct.
    pub fn gpu_models(&self) -> Result<Vec<String>, FleetError> {
        let tables = strings(
            &self.conn,
            &format!("SELECT table_name FROM information_schema.tables WHERE table_catalog = '{LAKE}'"),
        )?;
        for (table, column) in [("gpu_devices", "name"), ("sessions", "gpu_model")] {
            if tables.iter().any(|t| t == table) {
                let models = strings(
                    &self.conn,
                    &format!("SELECT DISTINCT {column} FROM {LAKE}.{table} WHERE {column} <> '' ORDER BY 1"),
                )?;
                if !models.is_empty() {
                    return Ok(models);
                }
            }
        }
        Ok(Vec::new())
    }

    /// For fleets without collectives (inference): each node's exact p50/p90/p99 of every GPU op
    /// it shipped, beside the same figures over the whole fleet, outliers marked.
    pub fn op_distributions(&self) -> Result<Vec<NodeOp>, FleetError> {
        let gpu_sources: Vec<String> = causeway_model::codes::GPU_CALL_SOURCES.iter().map(|s| s.to_string()).collect();
        let at = |p: u32| format!("max(duration) FILTER (WHERE k = {})", rank_sql(p, "n"));
        let sql = format!(
            "WITH e AS (SELECT node, source, op, duration FROM {LAKE}.events WHERE source IN ({src})),
n AS (SELECT node, source, op, duration,
             row_number() OVER (PARTITION BY node, source, op ORDER BY duration) AS k,
             count(*) OVER (PARTITION BY node, source, op) AS n FROM e),
f AS (SELECT source, op, duration,
             row_number() OVER (PARTITION BY source, op ORDER BY duration) AS k,
             count(*) OVER (PARTITION BY source, op) AS n FROM e),
pn AS (SELECT node, source, op, any_value(n) AS calls, {p50} AS p50, {p90} AS p90, {p99} AS p99 FROM n GROUP BY ALL),
pf AS (SELECT source, op, any_value(n) AS calls, {p50} AS p50, {p99} AS p99 FROM f GROUP BY ALL),
nodes AS (SELECT source, op, count(DISTINCT node) AS nodes FROM e GROUP BY ALL)
SELECT pn.node, pn.source, pn.op, pn.calls, pn.p50, pn.p90, pn.p99, pf.calls, pf.p50, pf.p99, nodes.nodes
FROM pn JOIN pf USING (source, op) JOIN nodes USING (source, op) ORDER BY pn.source, pn.op, pn.node",
            src = gpu_sources.join(", "),
            p50 = at(500),
            p90 = at(900),
            p99 = at(990)
        );
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map([], |r| {
            let (source, op_code): (i64, i64) = (r.get(1)?, r.get(2)?);
            let (calls, p50, p99, fp50, fp99, nodes): (i64, i64, i64, i64, i64, i64) =
                (r.get(3)?, r.get(4)?, r.get(6)?, r.get(8)?, r.get(9)?, r.get(10)?);
            Ok(NodeOp {
                node: r.get(0)?,
                op: causeway_model::codes::op_name(source as u8, op_code as u16).into_owned(),
                source,
                op_code,
                calls,
                p50_ns: p50,
                p90_ns: r.get(5)?,
                p99_ns: p99,
                fleet_calls: r.get(7)?,
                fleet_p50_ns: fp50,
                fleet_p99_ns: fp99,
                nodes,
                outlier: nodes > 1
                    && calls >= OUTLIER_MIN_CALLS
                    && (p50 >= OUTLIER_RATIO * fp50.max(1) || p99 >= OUTLIER_RATIO * fp99.max(1)),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Per rank and communicator: how long it waited at collectives for the last rank in.
    pub fn waits(&self) -> Result<Vec<RankWait>, FleetError> {
        let sql = format!(
            "WITH c AS NOT MATERIALIZED ({}),
per AS (SELECT comm_hash, seq, max(enter_ns) AS last_ns FROM c GROUP BY comm_hash, seq HAVING count(*) >= 2)
SELECT c.comm_hash, c.node, c.pid, any_value(c.rank), count(*), count(*) FILTER (WHERE c.enter_ns = last_ns),
       sum(last_ns - enter_ns)::BIGINT, quantile_disc(last_ns - enter_ns, 0.5), max(last_ns - enter_ns)
FROM c JOIN per USING (comm_hash, seq)
GROUP BY c.comm_hash, c.node, c.trace_uid, c.pid ORDER BY c.comm_hash, any_value(c.rank), c.node, c.pid",
            self.entries()?.sql("collectives")
        );
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map([], |r| {
            Ok(RankWait {
                comm_hash: r.get(0)?,
                node: r.get(1)?,
                pid: r.get(2)?,
                rank: r.get(3)?,
                collectives: r.get(4)?,
                times_last: r.get(5)?,
                waited_ns: r.get(6)?,
                median_wait_ns: r.get(7)?,
                max_wait_ns: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FLEET_DDL;

    const SEC: i64 = 1_000_000_000;
    const MS: i64 = 1_000_000;

    /// A lake of two nodes in an in-memory DuckDB: `a` (clock offset 0, one flush) and `b`, whose
    /// clock stepped between its two flushes (offset +7 ms, then -3 ms, 100 s apart). Rank 1 on `b`
    /// is 200 ms late at collectives 50-69 (before the step) and 150-169 (after it); otherwise it
    /// enters 100 us after rank 0. The collectives are 1 s apart.
    fn stepped_clock_lake() -> Fleet {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!("ATTACH ':memory:' AS {LAKE}")).unwrap();
        conn.execute_batch(FLEET_DDL).unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE {LAKE}.nccl_calls (node VARCHAR, trace_uid VARCHAR, pid BIGINT, tid BIGINT, rank BIGINT,
               nranks BIGINT, comm_hash BIGINT, comm BIGINT, seq BIGINT, op BIGINT, count BIGINT, timestamp BIGINT)"
        ))
        .unwrap();
        let t0 = 1_790_000_000 * SEC;
        // (node, flush, the local clock at the sample, offset = server - local)
        let flushes = [("a", 1, t0 - SEC, 0), ("b", 1, t0 - SEC, 7 * MS), ("b", 2, t0 + 100 * SEC, -3 * MS)];
        for (node, flush, local, offset) in flushes {
            conn.execute(
                &format!("INSERT INTO {LAKE}.clock_samples VALUES (?, 'u', ?, 0, ?, ?, ?)"),
                duckdb::params![node, flush, local, local + 500 + offset, local + 1000],
            )
            .unwrap();
        }
        let op = causeway_model::codes::NCCL_COLLECTIVES[0].op as i64;
        let mut insert = conn
            .prepare(&format!("INSERT INTO {LAKE}.nccl_calls VALUES (?, 'u', ?, ?, ?, 2, 77, 1, ?, ?, 1, ?)"))
            .unwrap();
        for seq in 1..=200i64 {
            let server_time = t0 + seq * SEC;
            let late = (50..70).contains(&seq) || (150..170).contains(&seq);
            let b_server = server_time + if late { 200 * MS } else { 100_000 };
            // b's own clock reads server time minus the offset in force then
            let b_offset = if b_server - 7 * MS >= t0 + 100 * SEC { -3 * MS } else { 7 * MS };
            insert.execute(duckdb::params!["a", 100, 100, 0, seq, op, server_time]).unwrap();
            insert.execute(duckdb::params!["b", 200, 200, 1, seq, op, b_server - b_offset]).unwrap();
        }
        Fleet::new(conn).unwrap()
    }

    #[test]
    fn a_node_whose_clock_stepped_is_aligned_flush_by_flush() {
        let fleet = stepped_clock_lake();
        let st = fleet.stragglers().unwrap();
        assert_eq!(st.len(), 1, "{st:?}");
        let s = &st[0];
        assert_eq!((s.node.as_str(), s.rank, s.late_collectives), ("b", 1, 40), "{s:?}");
        // aligned with the offset in force at each row: exactly the planted lateness, both sides of
        // the step (one offset for every row would be 10 ms off on one side)
        assert_eq!((s.median_late_ns, s.max_late_ns), (200 * MS, 200 * MS), "{s:?}");
        let eps: Vec<_> = s.episodes.iter().map(|e| (e.first_seq, e.last_seq)).collect();
        assert_eq!(eps, [(50, 69), (150, 169)]);
        assert_eq!(s.period_ns, SEC);
        let waits = fleet.waits().unwrap();
        let b = waits.iter().find(|w| w.node == "b").unwrap();
        assert_eq!((b.collectives, b.times_last), (200, 200), "{waits:?}");
        // its cost: the one other rank's GPU held for what it waited
        assert_eq!((s.cost.gpu_ns, s.cost.gpus), (s.waited_ns, 1), "{:?}", s.cost);
    }
}
