//! Per-collective summaries, kept by `fleet maintain`, so that the straggler query reads one row
//! per collective instead of one per rank, with the same answer as from the rows.
//!
//! **What is kept** (lake tables, written by `fleet maintain` only, in one transaction):
//! - `collective_summaries`: per collective (comm_hash, seq) entered by two ranks or more, the
//!   ranks in, the first and last aligned entry, and the first entry's gap to the previous
//!   collective's (`gap_ns`, the communicator's period is their median): what the straggler
//!   query's first read computes from every entry (`aligned::late_tables_sql`);
//! - `collective_spread_entries`: every entry of the summarized collectives whose last and first
//!   entries are [`LATE_FLOOR_NS`] apart or more (a superset of every candidate, whatever the
//!   period: the threshold is never below the floor), which the second read would fetch, and
//!   `collective_last_entries`, per such collective who entered last and by how much
//!   (`aligned::lasts_sql`), which the late collectives are picked from;
//! - `collective_summary_state`: the DuckLake row id every summarized row is below, the rows and
//!   the snapshot summarized, and whether the entries were grouped per process (`aligned::Entries`);
//! - `collective_summary_clocks`: the clock alignment the entries were aligned with (the views
//!   `node_first_offset` and `clock_chosen`, row for row).
//!
//! **Always complete.** A summary row stands for its collective only while nothing it was computed
//! from changed: a collective is *dirty*, and read from the rows as before, when a row of it has a
//! row id at or above the watermark (shipped after the last maintain), or when a row of it lies
//! where the alignment changed since (a node's first offset or its count of distinct offsets
//! changed: all its rows; else, a node with several offsets whose chosen offsets changed: its rows
//! at or after the earliest flush that changed). DuckLake assigns row ids at commit from the
//! snapshot's next row id, so a row committed after the maintain's snapshot is at or above the
//! watermark, and the lake's `nccl_calls` rows are never deleted or updated. The rows shipped
//! since are found without reading the others: none when the table's row count is the one
//! summarized; else DuckLake's change feed from the snapshot after the summarized one, used only
//! when it holds as many rows as were added (else every row id is compared, as `fleet maintain`
//! does). A collective after a dirty one has its gap computed again too. Grouped entries (a
//! process holding two handles of a communicator) are always read from the rows: which process is
//! grouped can change with any new row.

use causeway_analysis::LATE_FLOOR_NS;
use duckdb::Connection;

use crate::aligned::{collectives_views, is_collective_sql, lasts_sql, late_table_sql, Entries};
use crate::lake::{lit, LAKE};
use crate::FleetError;

/// The summaries' tables.
pub(crate) const SUMMARY_DDL: &str = "
CREATE TABLE IF NOT EXISTS lake.collective_summaries (
    comm_hash BIGINT NOT NULL, seq BIGINT NOT NULL, ranks_in BIGINT NOT NULL, first_ns BIGINT NOT NULL,
    last_ns BIGINT NOT NULL, gap_ns BIGINT);
CREATE TABLE IF NOT EXISTS lake.collective_spread_entries (
    comm_hash BIGINT NOT NULL, seq BIGINT NOT NULL, node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL,
    pid BIGINT NOT NULL, enter_ns BIGINT NOT NULL, tid BIGINT NOT NULL, rank BIGINT NOT NULL,
    nranks BIGINT NOT NULL, err_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.collective_last_entries (
    comm_hash BIGINT NOT NULL, seq BIGINT NOT NULL, node VARCHAR NOT NULL, trace_uid VARCHAR NOT NULL,
    pid BIGINT NOT NULL, tid BIGINT NOT NULL, rank BIGINT NOT NULL, nranks BIGINT NOT NULL, late_ns BIGINT NOT NULL,
    err_ns BIGINT NOT NULL, waited_ns BIGINT NOT NULL, last_ns BIGINT NOT NULL, ranks_in BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.collective_summary_state (
    rowid_below BIGINT NOT NULL, rows BIGINT NOT NULL, snapshot_id BIGINT NOT NULL, grouped BOOLEAN NOT NULL,
    summarized_at_ns BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS lake.collective_summary_clocks (
    node VARCHAR NOT NULL, kind VARCHAR NOT NULL, sampled_at BIGINT NOT NULL, offsets BIGINT NOT NULL,
    offset_ns BIGINT NOT NULL, err_ns BIGINT NOT NULL);
";

/// The summaries' tables: the straggler query reads them when the lake has all of them.
pub(crate) const SUMMARY_TABLES: [&str; 5] = [
    "collective_summaries",
    "collective_spread_entries",
    "collective_last_entries",
    "collective_summary_state",
    "collective_summary_clocks",
];

/// The alignment in force now, in the shape of `collective_summary_clocks`.
const CLOCKS_NOW: &str = "SELECT node, 'first' AS kind, 0::BIGINT AS sampled_at, offsets::BIGINT AS offsets,
       offset_ns::BIGINT AS offset_ns, err_ns::BIGINT AS err_ns FROM node_first_offset
UNION ALL
SELECT node, 'chosen', sampled_at::BIGINT, 0::BIGINT, offset_ns::BIGINT, err_ns::BIGINT FROM clock_chosen";

/// The entry columns, in `Entries::sql`'s order.
const ENTRY_COLUMNS: &str = "comm_hash, seq, node, trace_uid, pid, enter_ns, tid, rank, nranks, err_ns";

/// Where the summaries stand against the lake now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coverage {
    /// No summaries, or ones that cannot stand for anything (grouped entries): read every row.
    Unusable,
    /// The temporary tables `dirty` (comm_hash, seq) and `dirty_entries` (their entries, read
    /// from the rows) are made: every other summarized collective stands as summarized.
    Partial { dirty: i64 },
}

/// What the last summarizing recorded.
#[derive(Debug, Clone, Copy)]
struct State {
    rowid_below: i64,
    rows: i64,
    snapshot_id: i64,
    grouped: bool,
}

/// The summaries' state, if the lake has them.
fn state(conn: &Connection) -> Result<Option<State>, FleetError> {
    let mut st =
        conn.prepare(&format!("SELECT rowid_below, rows, snapshot_id, grouped FROM {LAKE}.collective_summary_state"))?;
    let mut rows = st.query([])?;
    Ok(match rows.next()? {
        Some(r) => Some(State { rowid_below: r.get(0)?, rows: r.get(1)?, snapshot_id: r.get(2)?, grouped: r.get(3)? }),
        None => None,
    })
}

fn count(conn: &Connection, sql: &str) -> Result<i64, FleetError> {
    Ok(conn.query_row(sql, [], |r| r.get(0))?)
}

/// The SQL of the collectives (comm_hash, seq) with rows shipped since `kept` was summarized:
/// none when the row count is unchanged; else, with `feed`, those of the change feed's insertions
/// when it holds as many rows as were added; else those of the rows at or above the row id
/// watermark. (`fleet maintain` compares row ids: it has just expired old snapshots.)
fn shipped_since(conn: &Connection, kept: &State, feed: bool) -> Result<Option<String>, FleetError> {
    let rows = count(conn, &format!("SELECT count(*) FROM {LAKE}.nccl_calls"))?;
    if rows == kept.rows {
        return Ok(None);
    }
    let is_collective = is_collective_sql();
    let from_feed = || -> Result<bool, FleetError> {
        if !feed {
            return Ok(false);
        }
        let now = count(conn, &format!("SELECT id FROM {LAKE}.current_snapshot()"))?;
        conn.execute_batch(&format!(
            "CREATE OR REPLACE TEMP TABLE shipped_rows AS
SELECT comm_hash, seq, op FROM {LAKE}.table_insertions('nccl_calls', {}, {now})",
            kept.snapshot_id + 1
        ))?;
        Ok(count(conn, "SELECT count(*) FROM shipped_rows")? == rows - kept.rows)
    };
    match from_feed() {
        Ok(true) => Ok(Some(format!("SELECT comm_hash, seq FROM shipped_rows n WHERE {is_collective}"))),
        other => {
            tracing::debug!(
                ?other,
                "summaries: the rows shipped since found by row id (the change feed not asked, or not whole)"
            );
            Ok(Some(format!(
                "SELECT comm_hash, seq FROM {LAKE}.nccl_calls n WHERE n.rowid >= {} AND {is_collective}",
                kept.rowid_below
            )))
        }
    }
}

/// Per node whose alignment changed since the summaries: the raw timestamp from which its rows
/// are aligned differently (`i64::MIN`: all of them).
fn clock_changes(conn: &Connection) -> Result<Vec<(String, i64)>, FleetError> {
    let sql = format!(
        "WITH now AS ({CLOCKS_NOW}), kept AS (SELECT * FROM {LAKE}.collective_summary_clocks),
d AS ((SELECT * FROM now EXCEPT SELECT * FROM kept) UNION ALL (SELECT * FROM kept EXCEPT SELECT * FROM now))
SELECT d.node, bool_or(d.kind = 'first'), min(d.sampled_at) FILTER (WHERE d.kind = 'chosen'),
       coalesce(any_value(f.offsets), 1)
FROM d LEFT JOIN node_first_offset f USING (node) GROUP BY d.node ORDER BY d.node"
    );
    let mut st = conn.prepare(&sql)?;
    let mut rows = st.query([])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let (node, first_changed, from, offsets): (String, bool, Option<i64>, i64) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        // (a node with one offset, unchanged, has every row aligned with it, whatever its flushes chose)
        if first_changed {
            out.push((node, i64::MIN));
        } else if offsets > 1 {
            out.push((node, from.unwrap_or(i64::MIN)));
        }
    }
    Ok(out)
}

/// Make `dirty` and `dirty_entries` (see [`Coverage`]) against the summaries `kept`, or with every
/// collective dirty when `kept` is `None` (no summaries yet, or unusable ones).
fn read_dirty(conn: &Connection, entries: Entries, kept: Option<&State>, feed: bool) -> Result<i64, FleetError> {
    let is_collective = is_collective_sql();
    let Some(kept) = kept else {
        conn.execute_batch(&format!(
            "CREATE OR REPLACE TEMP TABLE dirty_entries AS {};
CREATE OR REPLACE TEMP TABLE dirty AS SELECT DISTINCT comm_hash, seq FROM dirty_entries;",
            entries.sql("collectives")
        ))?;
        return count(conn, "SELECT count(*) FROM dirty");
    };
    let lap = std::time::Instant::now();
    let mut parts: Vec<String> = shipped_since(conn, kept, feed)?.into_iter().collect();
    tracing::debug!(ms = lap.elapsed().as_millis() as u64, "summaries: the rows shipped since");
    let lap = std::time::Instant::now();
    let moved: Vec<String> = clock_changes(conn)?
        .into_iter()
        .map(|(node, from)| match from {
            i64::MIN => format!("n.node = {}", lit(&node)),
            from => format!("(n.node = {} AND n.timestamp >= {from})", lit(&node)),
        })
        .collect();
    tracing::debug!(ms = lap.elapsed().as_millis() as u64, moved = moved.len(), "summaries: the clocks moved since");
    if !moved.is_empty() {
        parts.push(format!(
            "SELECT comm_hash, seq FROM {LAKE}.nccl_calls n WHERE ({}) AND {is_collective}",
            moved.join(" OR ")
        ));
    }
    if parts.is_empty() {
        conn.execute_batch(
            "CREATE OR REPLACE TEMP TABLE dirty (comm_hash BIGINT, seq BIGINT);
CREATE OR REPLACE TEMP TABLE dirty_entries (comm_hash BIGINT, seq BIGINT, node VARCHAR, trace_uid VARCHAR,
  pid BIGINT, enter_ns BIGINT, tid BIGINT, rank BIGINT, nranks BIGINT, err_ns BIGINT);",
        )?;
        return Ok(0);
    }
    let lap = std::time::Instant::now();
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE dirty AS SELECT DISTINCT comm_hash, seq FROM ({})",
        parts.join(" UNION ALL ")
    ))?;
    let (dirty, lo, hi): (i64, Option<i64>, Option<i64>) =
        conn.query_row("SELECT count(*), min(seq), max(seq) FROM dirty", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    // the dirty collectives' rows, every rank's (also those summarized before): the files' statistics
    // on `seq` skip the rest
    let range = match (lo, hi) {
        (Some(lo), Some(hi)) => format!("seq BETWEEN {lo} AND {hi}"),
        _ => "false".to_string(),
    };
    let rows = format!("(SELECT * FROM {LAKE}.nccl_calls SEMI JOIN dirty USING (comm_hash, seq) WHERE {range})");
    tracing::debug!(ms = lap.elapsed().as_millis() as u64, "summaries: the dirty collectives");
    let lap = std::time::Instant::now();
    conn.execute_batch(&collectives_views("dirty_collectives", &rows))?;
    conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE dirty_entries AS {}", entries.sql("dirty_collectives")))?;
    tracing::debug!(ms = lap.elapsed().as_millis() as u64, "summaries: the dirty collectives' entries");
    Ok(dirty)
}

/// Where the summaries stand (see [`Coverage`]); makes `dirty` and `dirty_entries` when usable.
pub(crate) fn coverage(conn: &Connection, entries: Entries) -> Result<Coverage, FleetError> {
    let Some(kept) = state(conn)? else { return Ok(Coverage::Unusable) };
    if kept.grouped || entries.grouped {
        return Ok(Coverage::Unusable);
    }
    Ok(Coverage::Partial { dirty: read_dirty(conn, entries, Some(&kept), true)? })
}

/// The common table expressions of every collective now (`per`: comm_hash, seq, ranks_in,
/// first_ns, last_ns, gap_ns as summarized) from the summaries and the dirty collectives' rows,
/// the collectives whose gap is to be computed again (`touched`: the dirty ones and each one's
/// successor), and `gaps` (comm_hash, seq, gap_ns: each collective's, kept or computed again).
fn per_ctes() -> String {
    format!(
        "per AS MATERIALIZED (
  SELECT comm_hash, seq, ranks_in, first_ns, last_ns, gap_ns FROM {LAKE}.collective_summaries
    ANTI JOIN dirty USING (comm_hash, seq)
  UNION ALL
  SELECT comm_hash, seq, count(*), min(enter_ns), max(enter_ns), NULL::BIGINT FROM dirty_entries
    GROUP BY comm_hash, seq HAVING count(*) >= 2),
touched AS (SELECT comm_hash, seq FROM dirty UNION SELECT comm_hash, seq + 1 FROM dirty),
near AS (SELECT comm_hash, seq FROM touched UNION SELECT comm_hash, seq - 1 FROM dirty),
per_near AS MATERIALIZED (SELECT * FROM per SEMI JOIN near USING (comm_hash, seq)),
gaps AS (
  SELECT comm_hash, seq, gap_ns FROM per ANTI JOIN touched USING (comm_hash, seq) WHERE gap_ns IS NOT NULL
  UNION ALL
  SELECT a.comm_hash, a.seq, a.first_ns - b.first_ns FROM per_near a SEMI JOIN touched USING (comm_hash, seq)
    JOIN per_near b ON b.comm_hash = a.comm_hash AND b.seq = a.seq - 1)"
    )
}

/// The straggler query's `cand` from the summaries and the dirty collectives' rows.
pub(crate) fn cand_sql() -> String {
    crate::aligned::cand_table_sql(&per_ctes())
}

/// The statements that make `late` and the view `cand_entries_summarized` (every entry of each
/// candidate in `cand`, read once by the stragglers' own waits; `cand_entries` of the rows' path) from the summaries' spread entries and the
/// dirty collectives' rows.
pub(crate) fn late_sql() -> [(&'static str, String); 2] {
    let dirty_lasts = lasts_sql("(SELECT * FROM dirty_entries SEMI JOIN cand USING (comm_hash, seq))");
    [
        (
            "late collectives (summaries)",
            late_table_sql(&format!(
                "SELECT * FROM {LAKE}.collective_last_entries SEMI JOIN cand USING (comm_hash, seq)
  ANTI JOIN dirty USING (comm_hash, seq)
UNION ALL
SELECT * FROM ({dirty_lasts})"
            )),
        ),
        (
            "candidates' entries (summaries)",
            format!(
                "CREATE OR REPLACE TEMP VIEW cand_entries_summarized AS
SELECT {ENTRY_COLUMNS} FROM {LAKE}.collective_spread_entries SEMI JOIN cand USING (comm_hash, seq)
  ANTI JOIN dirty USING (comm_hash, seq)
UNION ALL
SELECT {ENTRY_COLUMNS} FROM dirty_entries SEMI JOIN cand USING (comm_hash, seq)"
            ),
        ),
    ]
}

/// What one summarizing did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Summarized {
    /// Collectives (re)summarized from their rows: every one the first time, then those with rows
    /// shipped since or whose alignment changed.
    pub collectives: i64,
    /// Summary rows in the lake after it.
    pub summaries: i64,
}

/// Bring the summaries up to date (`fleet maintain`): in one transaction, the dirty collectives
/// (all of them the first time, or when the last summaries cannot stand) read from their rows and
/// written in place of their old summaries, the watermark and the alignment used. `conn` is a
/// shipping connection with the alignment views (`Fleet::new`).
pub(crate) fn summarize(conn: &Connection, entries: Entries) -> Result<Summarized, FleetError> {
    conn.execute_batch(SUMMARY_DDL)?;
    conn.execute_batch("BEGIN TRANSACTION")?;
    let done = (|| -> Result<Summarized, FleetError> {
        // every row below the watermark is in this snapshot (row ids are given at commit)
        let (below, rows): (i64, i64) = conn.query_row(
            &format!("SELECT coalesce(max(rowid), -1) + 1, count(*) FROM {LAKE}.nccl_calls"),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let snapshot = count(conn, &format!("SELECT id FROM {LAKE}.current_snapshot()"))?;
        let kept = state(conn)?.filter(|k| !k.grouped && !entries.grouped);
        let collectives = read_dirty(conn, entries, kept.as_ref(), false)?;
        // the touched collectives' rows as they are now, gaps computed again, in place of theirs
        conn.execute_batch(&format!(
            "CREATE OR REPLACE TEMP TABLE rewrite AS
WITH {}
SELECT a.comm_hash, a.seq, a.ranks_in, a.first_ns, a.last_ns, a.first_ns - b.first_ns AS gap_ns
FROM per_near a SEMI JOIN touched USING (comm_hash, seq)
  LEFT JOIN per_near b ON b.comm_hash = a.comm_hash AND b.seq = a.seq - 1",
            per_ctes()
        ))?;
        let (which_summaries, which_entries) = if kept.is_some() {
            (
                "USING (SELECT DISTINCT comm_hash, seq FROM dirty UNION SELECT comm_hash, seq + 1 FROM dirty) d
                 WHERE t.comm_hash = d.comm_hash AND t.seq = d.seq",
                "USING dirty d WHERE t.comm_hash = d.comm_hash AND t.seq = d.seq",
            )
        } else {
            ("", "")
        };
        conn.execute_batch(&format!(
            "DELETE FROM {LAKE}.collective_summaries t {which_summaries};
DELETE FROM {LAKE}.collective_spread_entries t {which_entries};
DELETE FROM {LAKE}.collective_last_entries t {which_entries};
INSERT INTO {LAKE}.collective_summaries SELECT * FROM rewrite;
CREATE OR REPLACE TEMP TABLE spread_entries AS
  SELECT {ENTRY_COLUMNS} FROM dirty_entries SEMI JOIN (
    SELECT comm_hash, seq FROM dirty_entries GROUP BY comm_hash, seq
    HAVING count(*) >= 2 AND max(enter_ns) - min(enter_ns) >= {LATE_FLOOR_NS}) USING (comm_hash, seq);
INSERT INTO {LAKE}.collective_spread_entries SELECT * FROM spread_entries;
INSERT INTO {LAKE}.collective_last_entries {spread_lasts};
DELETE FROM {LAKE}.collective_summary_state;
INSERT INTO {LAKE}.collective_summary_state VALUES ({below}, {rows}, {snapshot}, {grouped}, {now_ns});
DELETE FROM {LAKE}.collective_summary_clocks;
INSERT INTO {LAKE}.collective_summary_clocks {CLOCKS_NOW};",
            grouped = entries.grouped,
            spread_lasts = lasts_sql("spread_entries"),
            now_ns = crate::clock::realtime_ns(0)
        ))?;
        let summaries = count(conn, &format!("SELECT count(*) FROM {LAKE}.collective_summaries"))?;
        Ok(Summarized { collectives, summaries })
    })();
    match done {
        Ok(s) => {
            conn.execute_batch("COMMIT")?;
            Ok(s)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
