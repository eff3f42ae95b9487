//! The small tables a trace ships whole (sessions, process names and ranks, losses, kernel names,
//! ...): which of them changed since the lake last got them, and replacing those inside a flush's
//! transaction.
//!
//! Replacing a trace's rows of a table is a `DELETE` then an `INSERT`, and DuckLake detects
//! conflicts per table: a transaction that deletes from a table conflicts with any other that
//! inserted into it or deleted from it meanwhile, and is rolled back. Eight shippers replacing
//! their rows of `sessions` at once redid half their flushes (23 of 47 commits in the fleet bench).
//! So a table is written only when its content changed (a [`Print`]: the row count and the sum of
//! the rows' hashes), and a trace's first flush only inserts: the lake holds none of its rows yet,
//! since they are written only in a flush's transaction, together with a watermark row.

use std::collections::BTreeMap;

use duckdb::{params, Connection};

use crate::lake::LAKE;
use crate::local::LOCAL;
use crate::schema::MIRRORED;
use crate::FleetError;

/// The tables shipped whole: the [`MIRRORED`] tables without a watermark column, but the stacks
/// (they ship with the events that use them).
fn tables() -> impl Iterator<Item = &'static str> {
    MIRRORED.into_iter().filter(|(t, col)| col.is_none() && *t != "stack_traces").map(|(t, _)| t)
}

/// A table's content, fingerprinted: equal prints mean equal rows (as a multiset), but for a
/// 128-bit sum of 64-bit hashes colliding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Print {
    rows: i64,
    hash_sum: i128,
}

/// A table to write in a flush.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change {
    table: &'static str,
    /// The lake may hold rows of this trace in it: delete them first.
    delete: bool,
    print: Print,
}

/// What the lake holds of one trace's small tables, as far as this shipper knows (what it wrote
/// itself; nothing after a restart, so the first flush then replaces every table once).
#[derive(Debug, Default)]
pub(crate) struct SmallTables {
    shipped: BTreeMap<&'static str, Print>,
}

impl SmallTables {
    /// The prints of the local trace's small tables that `has_local` says exist, in one query.
    pub(crate) fn local_prints(
        conn: &Connection,
        has_local: impl Fn(&str) -> bool,
    ) -> Result<Vec<(&'static str, Print)>, FleetError> {
        let present: Vec<&'static str> = tables().filter(|t| has_local(t)).collect();
        if present.is_empty() {
            return Ok(Vec::new());
        }
        let sql = present
            .iter()
            .enumerate()
            .map(|(i, t)| format!("SELECT {i} AS k, count(*), coalesce(sum(hash(r)), 0)::HUGEINT FROM {LOCAL}.{t} r"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let mut st = conn.prepare(&sql)?;
        let rows =
            st.query_map([], |r| Ok((r.get::<_, i64>(0)? as usize, Print { rows: r.get(1)?, hash_sum: r.get(2)? })))?;
        let mut out = Vec::with_capacity(present.len());
        for row in rows {
            let (k, print) = row?;
            out.push((present[k], print));
        }
        Ok(out)
    }

    /// The tables whose rows in the lake may differ from `local`. `first_flush`: no flush of this
    /// trace has committed yet, so the lake holds none of its rows.
    pub(crate) fn changes(&self, local: &[(&'static str, Print)], first_flush: bool) -> Vec<Change> {
        local
            .iter()
            .filter(|(t, p)| self.shipped.get(t) != Some(p))
            .map(|&(table, print)| {
                let delete = match self.shipped.get(table) {
                    Some(before) => before.rows > 0,
                    None => !first_flush,
                };
                Change { table, delete, print }
            })
            .collect()
    }

    /// Write `changes` for the trace `uid` of `node`, inside the caller's transaction.
    pub(crate) fn write(conn: &Connection, changes: &[Change], node: &str, uid: &str) -> Result<(), FleetError> {
        for ch in changes {
            let table = ch.table;
            if ch.delete {
                conn.execute(
                    &format!("DELETE FROM {LAKE}.{table} WHERE node = ? AND trace_uid = ?"),
                    params![node, uid],
                )?;
            }
            if ch.print.rows == 0 {
                continue;
            }
            let select = if table == "sessions" { "* REPLACE (?::VARCHAR AS node)" } else { "?::VARCHAR AS node, *" };
            conn.execute(
                &format!("INSERT INTO {LAKE}.{table} BY NAME SELECT ? AS trace_uid, {select} FROM {LOCAL}.{table}"),
                params![uid, node],
            )?;
        }
        Ok(())
    }

    /// Record `changes` as what the lake holds, once their transaction has committed.
    pub(crate) fn committed(&mut self, changes: &[Change]) {
        for ch in changes {
            self.shipped.insert(ch.table, ch.print);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(rows: i64, hash_sum: i128) -> Print {
        Print { rows, hash_sum }
    }

    #[test]
    fn the_small_tables_are_the_mirrored_ones_without_a_watermark_but_the_stacks() {
        let t: Vec<_> = tables().collect();
        assert_eq!(t.len(), 10);
        assert!(t.contains(&"sessions") && t.contains(&"process_ranks") && !t.contains(&"stack_traces"));
        assert!(t.contains(&"gpu_devices") && !t.contains(&"gpu_ops"));
        assert!(!t.contains(&"events"));
    }

    #[test]
    fn only_changed_tables_are_written_and_only_known_rows_are_deleted() {
        let mut known = SmallTables::default();
        let local = [("sessions", p(1, 10)), ("process_names", p(0, 0))];
        // first flush: everything is new, nothing to delete
        let first = known.changes(&local, true);
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|c| !c.delete));
        // a restarted shipper knows nothing: it replaces every table once
        let resumed = known.changes(&local, false);
        assert!(resumed.iter().all(|c| c.delete));
        known.committed(&first);
        assert!(known.changes(&local, false).is_empty());
        // a table that grew from empty: inserted, nothing deleted; one that changed: replaced
        let later = [("sessions", p(1, 11)), ("process_names", p(2, 5))];
        let ch = known.changes(&later, false);
        let by = |t: &str| ch.iter().find(|c| c.table == t).unwrap().delete;
        assert!(by("sessions") && !by("process_names"));
    }

    #[test]
    fn prints_tell_contents_apart_whatever_the_row_order() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "ATTACH ':memory:' AS {LOCAL}; CREATE TABLE {LOCAL}.sessions (id BIGINT, node VARCHAR);
             CREATE TABLE {LOCAL}.kernel_names (id BIGINT, name VARCHAR);
             INSERT INTO {LOCAL}.sessions VALUES (1, 'a'), (2, NULL);"
        ))
        .unwrap();
        let has = |t: &str| t == "sessions" || t == "kernel_names";
        let before = SmallTables::local_prints(&conn, has).unwrap();
        assert_eq!(before.iter().map(|(t, _)| *t).collect::<Vec<_>>(), ["sessions", "kernel_names"]);
        assert_eq!(before[1].1, p(0, 0));
        assert_eq!(before[0].1.rows, 2);
        conn.execute_batch(&format!(
            "DELETE FROM {LOCAL}.sessions; INSERT INTO {LOCAL}.sessions VALUES (2, NULL), (1, 'a');"
        ))
        .unwrap();
        assert_eq!(SmallTables::local_prints(&conn, has).unwrap(), before, "the same rows in another order");
        conn.execute_batch(&format!("UPDATE {LOCAL}.sessions SET node = 'b' WHERE id = 1")).unwrap();
        let after = SmallTables::local_prints(&conn, has).unwrap();
        assert_eq!(after[0].1.rows, 2);
        assert_ne!(after[0].1, before[0].1, "one value changed");
    }
}
