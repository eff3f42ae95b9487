//! The DuckDB engine (cargo feature `duckdb`): [`DuckDbSink`] writes native traces through DuckDB's
//! Appender (Arrow record batches, one transaction per batch group, on a writer thread),
//! [`DuckDbStore`] reads them, with the typed scans, the guarded SQL (`guard::run_duckdb`) and the
//! statistics computed in DuckDB's SQL kept for comparison ([`summary`]).
//!
//! The schema is the native one ([`crate::schema::NATIVE_DDL`]) with DuckDB types: every integer
//! column is `BIGINT`, `sessions.id` is assigned by the writer (DuckDB has no AUTOINCREMENT), and
//! `events.id` carries no PRIMARY KEY (ids are assigned by the writer; an ART index per row would
//! halve the write rate). No secondary indexes are built: DuckDB's per-row-group min/max (zone maps)
//! over the time-ordered `timestamp` column serve the time windows. A DuckDB file holds one writer
//! at a time: a trace being written cannot be read until its writer finishes.

mod convert;
mod packed;
mod reader;
pub mod summary;
mod writer;

pub use convert::{DuckDbSource, DuckDbTarget};
pub use reader::{DuckDbStore, Reopen};
pub use writer::{DuckDbSink, DuckDbWriter, PARALLEL_PART_ROWS};

use std::path::Path;

use duckdb::params;

use causeway_model::codes::{CUDA_ERRORS, MEMCPY_KINDS, OPS, PREV_STATES, SOURCES};
use causeway_model::LossKind;

use crate::StoreError;

/// The DuckDB this binary runs and where it comes from: `DuckDB v1.5.5 (compiled in)` for the
/// bundled build, else the shared library the dynamic loader mapped (`DuckDB v1.5.5
/// (/path/libduckdb.so)`, read from /proc/self/maps). The pinned extensions load only into the
/// exact version, so `causeway --version` and `causeway check` say it.
pub fn engine_version() -> String {
    // SAFETY: duckdb_library_version returns a pointer to a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(duckdb::ffi::duckdb_library_version()) };
    let version = version.to_string_lossy();
    if cfg!(feature = "duckdb-bundled") {
        return format!("DuckDB {version} (compiled in)");
    }
    let mapped = std::fs::read_to_string("/proc/self/maps").ok().and_then(|maps| {
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|path| path.rsplit('/').next().is_some_and(|f| f.starts_with("libduckdb.so")))
            .map(str::to_string)
    });
    format!("DuckDB {version} ({})", mapped.as_deref().unwrap_or("shared library"))
}

/// The first bytes of a DuckDB database file are a checksum; the magic `DUCK` follows at offset 8.
pub const MAGIC_OFFSET: usize = 8;
pub const MAGIC: &[u8; 4] = b"DUCK";

/// Does the file at `path` start like a DuckDB database?
pub fn is_duckdb_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; MAGIC_OFFSET + 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head[MAGIC_OFFSET..] == MAGIC
}

/// The native DDL in DuckDB's types (see the module docs).
pub fn native_ddl() -> String {
    crate::schema::NATIVE_DDL
        .replace("id           INTEGER PRIMARY KEY AUTOINCREMENT", "id           BIGINT PRIMARY KEY")
        // the events id only (the line starts with it: `pid ... PRIMARY KEY` stays a key)
        .replace("\n    id          INTEGER PRIMARY KEY,", "\n    id          BIGINT NOT NULL,")
        .replace("INTEGER", "BIGINT")
}

/// Create the native schema in `conn` (idempotent: a trace written by an older version gains the
/// columns added since) and fill its lookup tables and `schema_info`.
pub fn init_native_schema(conn: &duckdb::Connection) -> duckdb::Result<()> {
    conn.execute_batch(&format!("BEGIN; {} COMMIT;", native_ddl()))?;
    // Columns added after the first version of the schema, for traces written before them.
    for (name, _) in crate::schema::LATER_SESSION_COLUMNS {
        conn.execute_batch(&format!("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS {name} BIGINT DEFAULT 0"))?;
    }
    // Added at the end of the table, where EVENT_COLUMNS (the Appender's row order) has them.
    for (name, ddl) in crate::schema::LATER_EVENT_COLUMNS {
        let ddl = ddl.replace("INTEGER", "BIGINT");
        conn.execute_batch(&format!("ALTER TABLE events ADD COLUMN IF NOT EXISTS {name} {ddl}"))?;
    }
    // (DuckDB adds no column with a constraint: the default alone, -1, "not reported")
    for (name, _) in crate::nvml_tables::LATER_GPU_SAMPLE_COLUMNS {
        conn.execute_batch(&format!("ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS {name} BIGINT DEFAULT -1"))?;
    }
    fill_lookup_tables(conn)
}

/// Insert the lookup rows and `schema_info` (idempotent).
fn fill_lookup_tables(conn: &duckdb::Connection) -> duckdb::Result<()> {
    conn.execute_batch("BEGIN")?;
    let mut st = conn.prepare("INSERT OR REPLACE INTO sources (id, name, description) VALUES (?, ?, ?)")?;
    for (id, name, desc) in SOURCES {
        st.execute(params![id, name, desc])?;
    }
    let mut st =
        conn.prepare("INSERT OR REPLACE INTO ops (source_id, op_id, name, description) VALUES (?, ?, ?, ?)")?;
    for (s, o, name, _, desc) in OPS {
        st.execute(params![s, o, name, desc])?;
    }
    let mut st = conn.prepare("INSERT OR REPLACE INTO prev_states (code, name, description) VALUES (?, ?, ?)")?;
    for (c, name, desc) in PREV_STATES {
        st.execute(params![c, name, desc])?;
    }
    let mut st = conn.prepare("INSERT OR REPLACE INTO memcpy_kinds (code, name) VALUES (?, ?)")?;
    for (c, name) in MEMCPY_KINDS {
        st.execute(params![c, name])?;
    }
    let mut st = conn.prepare("INSERT OR REPLACE INTO cuda_errors (code, name) VALUES (?, ?)")?;
    for (c, name) in CUDA_ERRORS {
        st.execute(params![c, name])?;
    }
    let mut st = conn.prepare("INSERT OR REPLACE INTO loss_kinds (name, description) VALUES (?, ?)")?;
    for k in LossKind::ALL {
        st.execute(params![k.as_str(), k.description()])?;
    }
    let mut st = conn.prepare(crate::gpu_tables::INSERT_OP_KIND_SQL)?;
    for (c, name, desc) in crate::gpu_tables::op_kind_rows() {
        st.execute(params![c, name, desc])?;
    }
    let mut st = conn.prepare("INSERT OR REPLACE INTO schema_info (key, value) VALUES (?, ?)")?;
    for (k, v) in crate::schema::schema_info_rows() {
        st.execute(params![k, v])?;
    }
    conn.execute_batch("COMMIT")
}

/// `event_aggregates` in DuckDB's types.
pub fn aggregates_ddl() -> String {
    crate::schema::EVENT_AGGREGATES_DDL.replace("INTEGER", "BIGINT")
}

/// Columns of `events` in table order (the Appender writes whole rows in this order).
pub const EVENT_COLUMNS: [&str; 30] = [
    "id",
    "timestamp",
    "pid",
    "tid",
    "source",
    "op",
    "duration",
    "gpu_id",
    "arg0",
    "arg1",
    "ret_code",
    "stack_hash",
    "stack_ips",
    "cgroup_id",
    "node",
    "rank",
    "local_rank",
    "world_size",
    "comm",
    "session_id",
    "cpu",
    "arg2",
    "prev_state",
    "next_pid",
    "next_tid",
    "next_comm",
    "wake_ts",
    "waker_pid",
    "waker_tid",
    "launch_config",
];

/// Tie every device op of the trace to its launching call
/// ([`crate::gpu_tables::resolve_launches_sql`]), in one transaction, as a range join; nothing to
/// do in a trace without ops.
pub(crate) fn resolve_launches(conn: &duckdb::Connection) -> duckdb::Result<()> {
    if !conn.query_row(crate::gpu_tables::HAS_OPS_SQL, [], |r| r.get::<_, bool>(0))? {
        return Ok(());
    }
    let [reset, best] = crate::gpu_tables::resolve_launches_sql(crate::Engine::DuckDb);
    // the picks first, as a range join into a temporary table; the UPDATE then joins on rowid
    // alone (DuckDB refuses a range join planned inside an UPDATE's FROM: "Unimplemented join type
    // for merge join")
    conn.execute_batch("SET prefer_range_joins = true")?;
    let mut picked = conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE cw_launch_best AS {best}"));
    let _ = conn.execute_batch("RESET prefer_range_joins");
    if picked.is_err() {
        // some plans of the range join are not implemented by DuckDB: the hash join on (pid, tid)
        // gives the same picks (slower on threads with very many launches)
        picked = conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE cw_launch_best AS {best}"));
    }
    picked?;
    conn.execute_batch("BEGIN")?;
    let apply = crate::gpu_tables::apply_launches_sql("cw_launch_best");
    let done = conn.execute_batch(&format!("{reset}; {apply}; COMMIT"));
    if done.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    let _ = conn.execute_batch("DROP TABLE IF EXISTS cw_launch_best");
    done
}

pub(crate) fn engine_err(path: &Path) -> impl Fn(duckdb::Error) -> StoreError + '_ {
    move |e| StoreError::Engine(format!("{}: {e}", path.display()))
}

/// Settings every connection this crate opens gets: nothing is fetched or loaded from outside.
pub(crate) fn base_config(read_only: bool) -> duckdb::Result<duckdb::Config> {
    let c =
        duckdb::Config::default().enable_autoload_extension(false)?.with("autoinstall_known_extensions", "false")?;
    if read_only {
        c.access_mode(duckdb::AccessMode::ReadOnly)
    } else {
        c.access_mode(duckdb::AccessMode::ReadWrite)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ddl_is_the_native_schema_in_duckdb_types() {
        let ddl = super::native_ddl();
        assert!(!ddl.contains("INTEGER"), "{ddl}");
        assert!(!ddl.contains("AUTOINCREMENT"));
        assert!(ddl.contains("id          BIGINT NOT NULL,"));
        assert!(ddl.contains("id           BIGINT PRIMARY KEY"));
        let conn = duckdb::Connection::open_in_memory().unwrap();
        conn.execute_batch(&ddl).unwrap();
        let cols: Vec<String> = conn
            .prepare("SELECT column_name FROM information_schema.columns WHERE table_name = 'events' ORDER BY ordinal_position")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(cols, super::EVENT_COLUMNS);
    }
}
