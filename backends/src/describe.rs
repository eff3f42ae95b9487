//! The engine-independent part of `describe_schema`: from what an engine reads out of its own
//! catalog ([`LiveCatalog`]), the tables with the meaning of every column, every code present in
//! `events` (or defined by this build) with its name and meaning, and the notes for writing SQL.

use std::collections::BTreeMap;

use causeway_model::codes;

use crate::schema::{code_name, column_meaning, table_meaning};
use crate::{CodeDescription, ColumnDescription, SchemaDescription, TableDescription, TraceInfo};
use crate::{Engine, Result};

/// `(source, op, rows)` for every code in `events`.
pub(crate) const CODE_COUNTS_SQL: &str =
    "SELECT source, op, count(*) FROM events GROUP BY source, op ORDER BY source, op";
/// `(source_id, op_id, name, description)` of the DB's own `ops` lookup table.
pub(crate) const OP_NAMES_SQL: &str = "SELECT source_id, op_id, name, description FROM ops";

/// One row of an `ops` table: ((source, op), (name, meaning)).
pub(crate) type OpNameRow = ((i64, i64), (String, String));

/// What an engine reads from its live database for a schema description.
/// Implemented for both engines by [`crate::shared_reads::impl_shared_reads!`].
pub(crate) trait LiveCatalog {
    fn info(&self) -> &TraceInfo;
    /// What differs in this engine's description.
    fn notes(&self) -> &'static EngineNotes;
    /// `(name, type)` of a table's columns, in table order ([`EngineNotes::columns_sql`]).
    fn table_columns(&self, table: &str) -> Result<Vec<(String, String)>>;
    /// Rows of a table (its name already quoted).
    fn count_rows(&self, quoted_table: &str) -> Result<i64>;
    /// The rows of [`CODE_COUNTS_SQL`].
    fn code_counts(&self) -> Result<Vec<(i64, i64, i64)>>;
    /// The rows of [`OP_NAMES_SQL`] (only called when the DB has an `ops` table).
    fn op_names(&self) -> Result<Vec<OpNameRow>>;
}

/// How an engine's description differs: its name and the notes that hold only for it.
pub(crate) struct EngineNotes {
    pub engine: Engine,
    /// How rows with the same timestamp are ordered.
    pub ordering: &'static str,
    /// Notes on the engine's SQL dialect.
    pub dialect: &'static [&'static str],
    /// `(name, type)` of the columns of the table bound as the one parameter, in table order.
    pub columns_sql: &'static str,
    /// Tables whose names start so are the engine's own (e.g. `sqlite_sequence`), not described.
    pub internal_prefix: Option<&'static str>,
}

pub(crate) fn describe(catalog: &dyn LiveCatalog) -> Result<SchemaDescription> {
    let info = catalog.info();
    let notes_for = catalog.notes();
    let mut tables = Vec::new();
    for name in &info.tables {
        if notes_for.internal_prefix.is_some_and(|p| name.starts_with(p)) {
            continue;
        }
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        let columns = catalog.table_columns(name)?;
        let rows: i64 = if name == "events" { info.events as i64 } else { catalog.count_rows(&quoted)? };
        tables.push(TableDescription {
            name: name.clone(),
            rows: rows.max(0) as u64,
            meaning: table_meaning(name).to_string(),
            columns: columns
                .into_iter()
                .map(|(cname, ty)| ColumnDescription {
                    meaning: column_meaning(name, &cname).to_string(),
                    name: cname,
                    sql_type: ty,
                })
                .collect(),
        });
    }
    // Codes present in events, named from the DB's own lookup table when it has the code and from
    // this build's table otherwise (Ingero's lookup tables miss newer codes).
    let present = catalog.code_counts()?;
    let db_names: BTreeMap<(i64, i64), (String, String)> =
        if info.has_table("ops") { catalog.op_names()?.into_iter().collect() } else { BTreeMap::new() };
    let mut all: BTreeMap<(i64, i64), u64> = present.iter().map(|&(s, o, n)| ((s, o), n as u64)).collect();
    for (s, o, ..) in codes::OPS {
        all.entry((i64::from(*s), i64::from(*o))).or_insert(0);
    }
    let codes_out = all
        .into_iter()
        .map(|((s, o), events)| {
            let (source, op) = (s as u8, o as u16);
            let built_in = codes::OPS.iter().any(|e| e.0 == source && e.1 == op);
            let (name, meaning) = match (built_in, db_names.get(&(s, o))) {
                (false, Some((n, d))) => (n.clone(), d.clone()),
                _ => (code_name(source, op), codes::op_description(source, op).to_string()),
            };
            CodeDescription { source, source_name: codes::source_name(source).into_owned(), op, name, meaning, events }
        })
        .collect();
    let mut notes = vec![
        format!("timestamps are unix-epoch ns; durations ns; order by timestamp, {}", notes_for.ordering),
        "sched_switch rows: timestamp = switch-in, off-CPU interval = [timestamp - duration, timestamp]".into(),
        "join ops with: JOIN ops o ON o.source_id = events.source AND o.op_id = events.op".into(),
    ];
    notes.extend(notes_for.dialect.iter().map(|n| n.to_string()));
    if info.sampled {
        notes.push("events is a sample (Ingero selective storage): true totals are in event_aggregates".into());
    }
    notes.extend(info.missing.iter().map(|m| format!("not recorded in this DB: {m}")));
    if info.has_table("footprint_syscalls") {
        // the SQL of each figure `causeway footprint` and get_footprint give, for one process
        notes.extend(
            causeway_model::footprint::FIGURE_SQL
                .iter()
                .map(|(figure, sql)| format!("footprint figure {figure} (replace {{pid}}): {sql}")),
        );
    }
    Ok(SchemaDescription {
        format: info.format.clone(),
        engine: notes_for.engine.name().into(),
        tables,
        codes: codes_out,
        notes,
    })
}
