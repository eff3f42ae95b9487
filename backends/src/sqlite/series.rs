//! A trace series: one trace written as a directory of SQLite files, its parts (`000001.db`,
//! `000002.db`, ...), by `causeway trace --max-file-size / --max-file-age` (the writer is
//! [`super::RollingWriter`]), and read as one trace.
//!
//! Each part is a standalone native trace (it opens, converts and cuts on its own): the session
//! continues in it under the same id, event ids go on from the part before (unique across the
//! series), and the side tables later events refer to (stacks, names, launch configurations) are
//! carried over. Its loss counters are its own (what was lost while it was the live part), so the
//! sum over the parts is the session's: events produced = stored + lost holds across the series.
//!
//! Reading: the newest part is the connection's main database, the older ones are attached
//! (`part_1`, `part_2`, ...), and TEMP views named like the native tables join them (a TEMP name
//! hides `main`'s), so the reader's queries, the SQL guard and `convert` / `cut` read a series
//! with the SQL they use for one file, and SQLite still searches each part's time index (a
//! window's scan is a merge of per-part index searches). How each table's rows join is
//! [`MERGES`]. At most [`MAX_PARTS_READ`] parts are read at once (the newest): a longer series
//! says what it leaves out in the trace's `missing`.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::{Result, StoreError};

/// Most parts a reader attaches to one connection (the newest ones): the SQL guard's limit on
/// the terms of a compound SELECT, which a series view is.
pub const MAX_PARTS_READ: usize = 64;

/// The file of part `seq` of the series in `dir`.
pub fn part_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:06}.db"))
}

/// The sequence number of a part's file name (`000042.db`: 42).
pub(crate) fn part_seq(path: &Path) -> Option<u64> {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".db"))
        .filter(|stem| !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|stem| stem.parse::<u64>().ok())
}

/// The parts of the series in `dir`, oldest first: the files named by a sequence number and `.db`
/// (an empty one, a part whose creation a full disk or a kill cut short, holds nothing: left out).
pub fn list_parts(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if let Some(seq) = part_seq(&path).filter(|_| entry.metadata().is_ok_and(|m| m.len() > 0)) {
            parts.push((seq, path));
        }
    }
    parts.sort();
    Ok(parts)
}

/// Whether a part has its `events` table (its creation finished), read without writing it.
pub(crate) fn has_events_table(path: &Path) -> bool {
    super::target::open_read_only(path)
        .and_then(|c| {
            c.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'", [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .is_ok_and(|n| n == 1)
}

/// How the rows of one table of the parts join in the series' view.
#[derive(Debug, Clone, Copy)]
enum Merge {
    /// Every row of every part (time series: events, NCCL calls, GPU samples and processes' memory, the device
    /// timeline's ops, calibrations and notes).
    All,
    /// One row per key, from the newest part that has it (sessions go on; names and ranks may
    /// change; carried rows repeat).
    NewestBy(&'static str),
    /// Distinct rows (attachments are carried over whole).
    Distinct,
    /// The counts of the same (session, source, kind) summed (each part counts its own losses).
    SumCount,
}

/// The native tables a series joins, and how. The lookup tables (`sources`, `ops`, ...) and
/// `schema_info` are the same in every part: they are read from the newest.
const MERGES: [(&str, Merge); 26] = [
    ("events", Merge::All),
    ("nccl_calls", Merge::All),
    ("gpu_samples", Merge::All),
    ("gpu_process_memory", Merge::All),
    ("serving_samples", Merge::All),
    ("gpu_ops", Merge::All),
    ("gpu_clock_syncs", Merge::All),
    ("gpu_timeline_notes", Merge::All),
    ("gpu_devices", Merge::NewestBy("pid, device")),
    ("under_way", Merge::All),
    ("footprint_syscalls", Merge::All),
    ("footprint_cpu", Merge::All),
    ("footprint_fds", Merge::All),
    ("footprint_requests", Merge::All),
    ("footprint_execs", Merge::All),
    ("event_aggregates", Merge::All),
    ("sessions", Merge::NewestBy("id")),
    ("stack_traces", Merge::NewestBy("hash")),
    ("process_names", Merge::NewestBy("pid")),
    ("process_ranks", Merge::NewestBy("pid")),
    ("process_cgroups", Merge::NewestBy("pid")),
    ("launch_configs", Merge::NewestBy("key")),
    ("kernel_names", Merge::NewestBy("pid, handle")),
    ("net_peers", Merge::NewestBy("peer")),
    ("attachments", Merge::Distinct),
    ("loss_counters", Merge::SumCount),
];

/// How to open a series for reading, computed once when it is opened and replayed on every
/// further connection (the SQL guard opens one per query).
#[derive(Debug, Clone)]
pub(crate) struct SeriesRead {
    /// The series directory.
    pub dir: PathBuf,
    /// The URI of the newest part read (the main database).
    pub main_uri: String,
    /// (alias, URI) of the older parts read, newest first.
    pub attached: Vec<(String, String)>,
    /// The TEMP views' DDL.
    pub views: Vec<String>,
    /// The views' names (the tables a reader sees beside `main`'s).
    pub view_names: Vec<String>,
    /// Sequence numbers of the first and last part read.
    pub seqs: (u64, u64),
    /// Parts of the series not read (older than the [`MAX_PARTS_READ`] newest).
    pub unread_parts: usize,
    /// A newest part whose creation was cut short (no tables yet), left out.
    pub unborn: Option<u64>,
}

impl SeriesRead {
    /// Plan the reading of the series in `dir`: which parts, with which URIs, joined by which views.
    /// `uri_of` is the reader's choice of URI for one file (through its WAL or immutable). Returns
    /// the plan and the connection it was made on, reading the series already.
    pub fn plan(dir: &Path, uri_of: &dyn Fn(&Path) -> String) -> Result<(SeriesRead, Connection)> {
        let parts = list_parts(dir).map_err(|e| StoreError::Engine(format!("{}: {e}", dir.display())))?;
        if parts.is_empty() {
            return Err(StoreError::NotATrace {
                path: dir.to_path_buf(),
                reason: "it is a directory without trace parts (000001.db, ...): give a trace file or a series \
                         directory written by `causeway trace --max-file-size`"
                    .into(),
            });
        }
        let mut parts = parts;
        // a kill during a rollover leaves the next part begun but without its tables (until the
        // series is written again, which removes it): read the parts before it
        let unborn = match parts.last() {
            Some((seq, p)) if parts.len() > 1 && !has_events_table(p) => Some(*seq),
            _ => None,
        };
        if unborn.is_some() {
            parts.pop();
        }
        let unread_parts = parts.len().saturating_sub(MAX_PARTS_READ);
        let read = &parts[unread_parts..];
        let (newest_seq, newest) = read.last().expect("not empty");
        let attached: Vec<(String, String)> =
            read.iter().rev().skip(1).map(|(seq, p)| (format!("part_{seq}"), uri_of(p))).collect();
        let mut plan = SeriesRead {
            dir: dir.to_path_buf(),
            main_uri: uri_of(newest),
            attached,
            views: Vec::new(),
            view_names: Vec::new(),
            seqs: (read[0].0, *newest_seq),
            unread_parts,
            unborn,
        };
        // the views are created on the connection that plans them, which the opener keeps
        let conn = plan.connect_parts()?;
        for (table, merge) in MERGES {
            if let Some(ddl) = plan.view_ddl(&conn, table, merge)? {
                plan.create_view(&conn, &ddl)?;
                plan.views.push(ddl);
                plan.view_names.push(table.to_string());
            }
        }
        Ok((plan, conn))
    }

    fn create_view(&self, conn: &Connection, ddl: &str) -> Result<()> {
        conn.execute_batch(ddl)
            .map_err(|e| StoreError::Engine(format!("{}: joining the parts: {e}", self.dir.display())))
    }

    /// The schemas read, newest first.
    fn schemas(&self) -> impl Iterator<Item = &str> {
        std::iter::once("main").chain(self.attached.iter().map(|(alias, _)| alias.as_str()))
    }

    /// A read-only connection with every part attached, without the views (its `temp_store` set
    /// first: changing it later would drop TEMP views; FILE, as the SQL guard sets it, big sorts
    /// spilling to files).
    fn connect_parts(&self) -> Result<Connection> {
        let conn = crate::sqlite::heap::open(
            &self.main_uri,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                | rusqlite::OpenFlags::SQLITE_OPEN_URI
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| self.unreadable(&self.main_uri, e))?;
        for (alias, uri) in &self.attached {
            conn.execute("ATTACH DATABASE ?1 AS ?2", [uri, alias]).map_err(|e| self.unreadable(uri, e))?;
        }
        conn.execute_batch("PRAGMA temp_store = FILE;")
            .map_err(|e| StoreError::Engine(format!("{}: {e}", self.dir.display())))?;
        Ok(conn)
    }

    /// A read-only connection reading the series as one trace (parts attached, views created).
    pub fn connect(&self) -> Result<Connection> {
        let conn = self.connect_parts()?;
        for ddl in &self.views {
            self.create_view(&conn, ddl)?;
        }
        Ok(conn)
    }

    fn unreadable(&self, uri: &str, e: rusqlite::Error) -> StoreError {
        StoreError::Corrupt {
            path: self.dir.clone(),
            detail: format!(
                "a part of the series cannot be read ({uri}): {e} (was it removed by retention? open again)"
            ),
        }
    }

    /// The TEMP view joining `table` over the parts that have it (None: no part has it).
    fn view_ddl(&self, conn: &Connection, table: &str, merge: Merge) -> Result<Option<String>> {
        let columns_in = |schema: &str| -> Result<Vec<String>> {
            conn.prepare("SELECT name FROM pragma_table_info(?1, ?2)")
                .and_then(|mut st| st.query_map([table, schema], |r| r.get(0))?.collect())
                .map_err(|e| StoreError::Engine(format!("{}: {e}", self.dir.display())))
        };
        // (schema, its columns), newest first; the newest part that has the table names the columns
        let mut holders = Vec::new();
        for schema in self.schemas() {
            let cols = columns_in(schema)?;
            if !cols.is_empty() {
                holders.push((schema.to_string(), cols));
            }
        }
        let Some((_, columns)) = holders.first() else { return Ok(None) };
        let columns = columns.clone();
        let list = columns.join(", ");
        let arm = |rank: usize, schema: &str, has: &[String], with_rank: bool| {
            let cols: Vec<String> =
                columns.iter().map(|c| if has.contains(c) { c.clone() } else { format!("NULL AS {c}") }).collect();
            let rank = if with_rank { format!(", {rank} AS cw_part_rank") } else { String::new() };
            format!("SELECT {}{rank} FROM {schema}.{table}", cols.join(", "))
        };
        let arms = |with_rank: bool, joiner: &str| {
            holders
                .iter()
                .enumerate()
                .map(|(rank, (schema, has))| arm(rank, schema, has, with_rank))
                .collect::<Vec<_>>()
                .join(joiner)
        };
        let body = match merge {
            Merge::All => arms(false, " UNION ALL "),
            Merge::Distinct => arms(false, " UNION "),
            Merge::NewestBy(key) => format!(
                "SELECT {list} FROM (SELECT {list}, row_number() OVER (PARTITION BY {key} ORDER BY cw_part_rank) \
                 AS cw_newest FROM ({})) WHERE cw_newest = 1",
                arms(true, " UNION ALL ")
            ),
            Merge::SumCount => {
                let keys: Vec<&str> = columns.iter().map(String::as_str).filter(|c| *c != "count").collect();
                let select: Vec<String> = columns
                    .iter()
                    .map(|c| if c == "count" { "sum(count) AS count".into() } else { c.clone() })
                    .collect();
                format!(
                    "SELECT {} FROM ({}) GROUP BY {}",
                    select.join(", "),
                    arms(false, " UNION ALL "),
                    keys.join(", ")
                )
            }
        };
        Ok(Some(format!("CREATE TEMP VIEW {table} AS {body};")))
    }

    /// What a reader of this series must know that one file would not say.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(seq) = self.unborn {
            notes.push(format!(
                "part {seq} of the series {} was begun but holds no table yet (the writer was stopped while \
                 creating it): not read",
                self.dir.display()
            ));
        }
        if self.unread_parts > 0 {
            notes.push(format!(
                "the {} oldest parts of the series {} (before part {}) are not read: at most {MAX_PARTS_READ} parts \
                 are read at once; `causeway cut` a window of them, or open a part on its own",
                self.unread_parts,
                self.dir.display(),
                self.seqs.0
            ));
        } else if self.seqs.0 > 1 {
            notes.push(format!(
                "the series {} starts at part {}: the {} parts before it were removed by retention",
                self.dir.display(),
                self.seqs.0,
                self.seqs.0 - 1
            ));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_the_numbered_db_files_in_sequence_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["000010.db", "000002.db", "000002.db-wal", "notes.db", "x000003.db", "000001.db"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::write(dir.path().join("000011.db"), b"").unwrap();
        let seqs: Vec<u64> = list_parts(dir.path()).unwrap().into_iter().map(|(s, _)| s).collect();
        assert_eq!(seqs, vec![1, 2, 10]);
        assert_eq!(part_path(dir.path(), 7), dir.path().join("000007.db"));
    }
}
