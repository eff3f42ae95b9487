//! The schema description of a live SQLite trace: tables, columns and types read from the database
//! itself (`pragma_table_info`); the rest is [`crate::describe`].

use super::reader::SqliteStore;
use crate::describe::{EngineNotes, LiveCatalog, CODE_COUNTS_SQL, OP_NAMES_SQL};
use crate::Result;
use causeway_store::*;

impl LiveCatalog for SqliteStore {
    fn info(&self) -> &TraceInfo {
        TraceStore::info(self)
    }

    fn is_internal_table(&self, name: &str) -> bool {
        name.starts_with("sqlite_")
    }

    fn table_columns(&self, table: &str) -> Result<Vec<(String, String)>> {
        self.with_conn(|c| {
            c.prepare("SELECT name, type FROM pragma_table_info(?1)")?
                .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
    }

    fn count_rows(&self, quoted_table: &str) -> Result<i64> {
        self.with_conn(|c| c.query_row(&format!("SELECT count(*) FROM {quoted_table}"), [], |r| r.get(0)))
    }

    fn code_counts(&self) -> Result<Vec<(i64, i64, i64)>> {
        self.with_conn(|c| {
            c.prepare(CODE_COUNTS_SQL)?.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect()
        })
    }

    fn op_names(&self) -> Result<Vec<crate::describe::OpNameRow>> {
        self.with_conn(|c| {
            c.prepare(OP_NAMES_SQL)?.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?))))?.collect()
        })
    }
}

const SQLITE_NOTES: EngineNotes = EngineNotes { engine: Engine::Sqlite, ordering: "not id", dialect: &[] };

pub(super) fn describe(store: &SqliteStore) -> Result<SchemaDescription> {
    crate::describe::describe(store, &SQLITE_NOTES)
}
