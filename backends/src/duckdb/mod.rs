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
pub use writer::{init_native_schema, DuckDbSink, DuckDbWriter, PARALLEL_PART_ROWS};

use std::path::Path;

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
