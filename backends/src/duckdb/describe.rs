//! The schema description of a live DuckDB trace: tables, columns and types read from DuckDB's
//! catalog (`information_schema`); the rest is [`crate::describe`].

use super::reader::DuckDbStore;
use crate::describe::{EngineNotes, LiveCatalog, CODE_COUNTS_SQL, OP_NAMES_SQL};
use crate::Result;
use causeway_store::*;

impl LiveCatalog for DuckDbStore {
    fn info(&self) -> &TraceInfo {
        TraceStore::info(self)
    }

    fn is_internal_table(&self, _name: &str) -> bool {
        false
    }

    fn table_columns(&self, table: &str) -> Result<Vec<(String, String)>> {
        self.with_conn(|c| {
            c.prepare(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? AND \
                 table_schema = 'main' AND table_catalog = current_database() ORDER BY ordinal_position",
            )?
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

const DUCKDB_NOTES: EngineNotes = EngineNotes {
    engine: Engine::DuckDb,
    ordering: "then id",
    dialect: &["engine DuckDB: integer division is //, percentiles: quantile_disc takes a float fraction and is not \
                guaranteed to be nearest-rank; use list_sort(list(x))[greatest(1, (p * count(*) + 99) // 100)] for \
                nearest-rank p (percent)"],
};

pub(super) fn describe(store: &DuckDbStore) -> Result<SchemaDescription> {
    crate::describe::describe(store, &DUCKDB_NOTES)
}
