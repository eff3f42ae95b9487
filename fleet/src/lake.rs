//! Connecting to a lake: the catalog string a user gives (`--lake`), the DuckDB extensions the lake
//! needs (loaded from files with DuckDB's signature check on, never downloaded), and the two ways
//! to attach it: to ship (read-write, the shipping role) or to serve (read-only, the serving role).
//!
//! A lake is DuckLake with its catalog in PostgreSQL (`scripts/fleet-catalog.sh` starts one) and
//! its data as Parquet files under a data path fixed when the lake is created. Credentials never
//! appear in the lake string: libpq reads them from `PGPASSWORD` or a password file
//! (`PGPASSFILE`, default `~/.pgpass`), so they stay out of argv, logs and answers.
//!
//! A lake can also keep its catalog in a DuckDB file (`ducklake:PATH`, what `causeway merge`
//! writes): one process writes it at a time and no server measures the nodes' clocks, so it is for
//! traces gathered after the fact, read by the same analyses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use duckdb::{Config, Connection};

use crate::retry::is_conflict_message;
use crate::FleetError;

/// The DuckDB release this build links (the extension files must be built for exactly it).
pub const DUCKDB_VERSION: &str = "v1.5.5";
/// DuckDB's platform name for the extension files.
pub const DUCKDB_PLATFORM: &str = "linux_amd64";
/// The extensions a lake needs: DuckLake itself, its PostgreSQL catalog, and the SQLite reader the
/// shipper reads local traces with.
pub const EXTENSIONS: [&str; 3] = ["ducklake", "postgres_scanner", "sqlite_scanner"];
/// The alias the lake is attached under in every connection.
pub const LAKE: &str = "lake";
/// The catalog database DuckLake attaches beside the lake (for `postgres_query`).
pub const CATALOG_DB: &str = "__ducklake_metadata_lake";
/// Seconds libpq waits for the catalog before giving up (added unless the lake string sets it).
pub const CONNECT_TIMEOUT_S: u32 = 10;

/// Where the extension files live: `$CAUSEWAY_DUCKDB_EXTENSIONS`, else
/// `~/.local/share/causeway/duckdb-extensions` (what `scripts/install-fleet.sh` fills). Files sit
/// under `<dir>/v1.5.5/linux_amd64/`, DuckDB's own layout.
pub fn extension_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CAUSEWAY_DUCKDB_EXTENSIONS") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".local/share/causeway/duckdb-extensions")
}

/// The extension files missing from `dir`, by name.
pub fn missing_extensions(dir: &Path) -> Vec<String> {
    let sub = dir.join(DUCKDB_VERSION).join(DUCKDB_PLATFORM);
    EXTENSIONS.iter().filter(|e| !sub.join(format!("{e}.duckdb_extension")).is_file()).map(|e| e.to_string()).collect()
}

/// A lake's catalog, as the user named it: a libpq connection string after `postgres:`
/// (`postgres:host=10.0.0.5 port=5432 dbname=causeway_fleet user=causeway_ship sslmode=require`),
/// or a DuckDB catalog file after `ducklake:` (`ducklake:run42.ducklake`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeSpec {
    catalog: Catalog,
}

/// Where a lake's catalog lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Catalog {
    /// A PostgreSQL server (libpq connection string): many shippers and readers at once, and a
    /// clock every shipper measures its own against.
    Postgres(String),
    /// A DuckDB file on this machine: one writer at a time, no server clock.
    File(PathBuf),
}

impl LakeSpec {
    /// Parse `--lake`. Accepts `postgres:CONNINFO`, `ducklake:postgres:CONNINFO` or
    /// `ducklake:PATH` (a DuckDB catalog file); refuses a password in a connection string (it would
    /// sit in argv and in shell history).
    pub fn parse(s: &str) -> Result<LakeSpec, FleetError> {
        let s = s.trim();
        let rest = s.strip_prefix("ducklake:").unwrap_or(s);
        let Some(conninfo) = rest.strip_prefix("postgres:").or_else(|| rest.strip_prefix("postgresql:")) else {
            if let Some(path) = s.strip_prefix("ducklake:").filter(|p| !p.trim().is_empty()) {
                return LakeSpec::file(Path::new(path.trim()));
            }
            return Err(FleetError::BadLake(format!(
                "`{s}`: a lake is `postgres:` followed by a libpq connection string, e.g. \
                 'postgres:host=127.0.0.1 port=55432 dbname=causeway_fleet user=causeway_read' \
                 (scripts/fleet-catalog.sh prints both of a new catalog's), or `ducklake:` and the path of \
                 a catalog file (`causeway merge` writes one)"
            )));
        };
        let lower = conninfo.to_ascii_lowercase();
        if lower.split_whitespace().any(|kv| kv.starts_with("password=") || kv.starts_with("password ="))
            || lower.contains("password =")
            || lower.contains(":password@")
        {
            return Err(FleetError::BadLake(
                "the lake string holds a password: give it through PGPASSWORD or a password file \
                 (PGPASSFILE, default ~/.pgpass) instead, so it never shows in a command line or a log"
                    .into(),
            ));
        }
        if conninfo.contains('\0') {
            return Err(FleetError::BadLake("the lake string contains a NUL character".into()));
        }
        let mut conninfo = conninfo.trim().to_string();
        if !lower.contains("connect_timeout") {
            conninfo.push_str(&format!(" connect_timeout={CONNECT_TIMEOUT_S}"));
        }
        Ok(LakeSpec { catalog: Catalog::Postgres(conninfo) })
    }

    /// A lake whose catalog is the DuckDB file at `path` (created by the first shipper).
    pub fn file(path: &Path) -> Result<LakeSpec, FleetError> {
        let text = path.to_string_lossy();
        if text.contains('\0') || text.trim().is_empty() {
            return Err(FleetError::BadLake(format!("`{text}`: not a usable catalog file name")));
        }
        Ok(LakeSpec { catalog: Catalog::File(path.to_path_buf()) })
    }

    /// The catalog, for messages: a connection string holds no secret (see [`LakeSpec::parse`]).
    pub fn conninfo(&self) -> String {
        match &self.catalog {
            Catalog::Postgres(c) => c.clone(),
            Catalog::File(p) => p.display().to_string(),
        }
    }

    /// The `user=` of a connection string, if it names one.
    pub fn user(&self) -> Option<&str> {
        match &self.catalog {
            Catalog::Postgres(c) => c.split_whitespace().find_map(|kv| kv.strip_prefix("user=")),
            Catalog::File(_) => None,
        }
    }

    /// Whether a catalog server's clock is there to measure each node's against (a PostgreSQL
    /// catalog); a catalog file has none, and its nodes' offsets are not measured.
    pub fn has_server_clock(&self) -> bool {
        matches!(self.catalog, Catalog::Postgres(_))
    }

    /// The catalog file, for a file lake.
    pub fn catalog_file(&self) -> Option<&Path> {
        match &self.catalog {
            Catalog::File(p) => Some(p),
            Catalog::Postgres(_) => None,
        }
    }

    /// What DuckDB's `ATTACH` takes.
    fn attach_target(&self) -> String {
        match &self.catalog {
            Catalog::Postgres(c) => format!("ducklake:postgres:{c}"),
            Catalog::File(p) => format!("ducklake:{}", p.display()),
        }
    }
}

/// How a connection attaches the lake.
#[derive(Debug, Clone)]
pub enum Access {
    /// Read-write, to ship. `data_path` is where a new lake keeps its Parquet files (a lake that
    /// exists already has its own, in the catalog).
    Ship { data_path: Option<PathBuf> },
    /// Read-only, to answer questions.
    Read,
}

/// SQL string literal.
pub(crate) fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A DuckDB connection with the lake attached as [`LAKE`].
pub fn connect(lake: &LakeSpec, access: &Access) -> Result<Connection, FleetError> {
    let dir = extension_dir();
    let missing = missing_extensions(&dir);
    if !missing.is_empty() {
        return Err(FleetError::Extensions(format!(
            "the DuckDB extensions {} for DuckDB {DUCKDB_VERSION} are not in {}: run scripts/install-fleet.sh \
             (or point CAUSEWAY_DUCKDB_EXTENSIONS at a directory holding {DUCKDB_VERSION}/{DUCKDB_PLATFORM}/*.duckdb_extension)",
            missing.join(", "),
            dir.display()
        )));
    }
    let engine = |e: duckdb::Error| FleetError::Engine(e.to_string());
    let config = Config::default()
        .with("extension_directory", dir.to_string_lossy())
        .and_then(|c| c.with("autoinstall_known_extensions", "false"))
        .and_then(|c| c.with("allow_community_extensions", "false"))
        .and_then(|c| c.with("allow_unsigned_extensions", "false"))
        .map_err(engine)?;
    let conn = Connection::open_in_memory_with_flags(config).map_err(engine)?;
    let options = match access {
        Access::Ship { data_path: Some(p) } => {
            let mut p = p.to_string_lossy().to_string();
            if !p.ends_with('/') && !p.contains("://") {
                p.push('/');
            }
            format!(" (DATA_PATH {})", lit(&p))
        }
        Access::Ship { data_path: None } => String::new(),
        Access::Read => " (READ_ONLY)".to_string(),
    };
    if let (Some(file), Access::Read) = (lake.catalog_file(), access) {
        if !file.is_file() {
            return Err(FleetError::Unreachable(format!(
                "no lake at {}: nothing was merged or shipped into it yet",
                file.display()
            )));
        }
    }
    let attach = format!("ATTACH {} AS {LAKE}{options}", lit(&lake.attach_target()));
    // The first attach of a new lake creates its catalog tables; shippers starting together race to
    // do it, and the losers' attach finds them half made: attach again.
    let mut attempt = 0u32;
    loop {
        match conn.execute_batch(&attach) {
            Ok(()) => return Ok(conn),
            Err(e)
                if attempt < 8 && (is_conflict_message(&e.to_string()) || e.to_string().contains("already exists")) =>
            {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(50 << attempt.min(5)));
            }
            Err(e) => return Err(attach_error(lake, access, e)),
        }
    }
}

/// Lock a read connection down for user SQL, as the SQL guard's engine layer does for a trace
/// file: no file access but the lake's own data directory (`allowed_directories`), no extension
/// loading, a memory limit, two threads, no spilling, and the configuration locked so no `SET` can
/// undo it. The AST check (`guard::check`) runs before any statement reaches it.
pub(crate) fn harden(conn: &Connection) -> Result<(), FleetError> {
    let data_path: String = conn.query_row(
        &format!("SELECT value FROM ducklake_options('{LAKE}') WHERE option_name = 'data_path'"),
        [],
        |r| r.get(0),
    )?;
    conn.execute_batch(&format!(
        "SET allowed_directories = [{}]; SET enable_external_access = false; SET autoload_known_extensions = false; \
         SET memory_limit = '{}MB'; SET threads = 2; SET max_temp_directory_size = '0B'; SET lock_configuration = true;",
        lit(&data_path),
        causeway_backends::guard::MAX_QUERY_MEMORY >> 20
    ))?;
    Ok(())
}

/// Word an ATTACH failure by what the user can do about it.
fn attach_error(lake: &LakeSpec, access: &Access, e: duckdb::Error) -> FleetError {
    let msg = e.to_string();
    let who = lake.user().unwrap_or("(libpq's default user)");
    if msg.contains("password authentication failed") || msg.contains("no password supplied") {
        FleetError::Unreachable(format!(
            "the catalog refused {who}: set PGPASSWORD or PGPASSFILE (scripts/fleet-catalog.sh writes DIR/pgpass): {msg}"
        ))
    } else if msg.contains("Connection refused") || msg.contains("timeout") || msg.contains("could not connect") {
        FleetError::Unreachable(format!("the catalog at `{}` does not answer: {msg}", lake.conninfo()))
    } else if matches!(access, Access::Read) && msg.contains("does not exist") {
        FleetError::Unreachable(format!("no lake in that catalog yet (nothing was shipped to it): {msg}"))
    } else {
        FleetError::Engine(format!("cannot attach the lake `{}`: {msg}", lake.conninfo()))
    }
}

/// Run `f` again while DuckLake reports a conflict with a concurrent commit (another shipper
/// created the same table or committed the same snapshot first), up to `tries` times.
pub(crate) fn retry_conflicts<T>(tries: u32, mut f: impl FnMut() -> Result<T, FleetError>) -> Result<T, FleetError> {
    let mut attempt = 0;
    loop {
        match f() {
            Err(FleetError::Engine(msg)) if attempt + 1 < tries && is_conflict_message(&msg) => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20 << attempt.min(6)));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lake_strings_parse_and_passwords_are_refused() {
        let l = LakeSpec::parse("postgres:host=127.0.0.1 port=5 dbname=f user=causeway_read").unwrap();
        assert_eq!(l.user(), Some("causeway_read"));
        assert!(l.conninfo().ends_with("connect_timeout=10"));
        let l = LakeSpec::parse("ducklake:postgres:host=h connect_timeout=3").unwrap();
        assert_eq!(l.conninfo(), "host=h connect_timeout=3");
        for bad in ["postgres:host=h password=x", "postgres:host=h PASSWORD=x", "postgres:host=h password = x"] {
            let e = LakeSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("PGPASSWORD") && !e.contains("=x"), "{e}");
        }
        assert!(LakeSpec::parse("/tmp/lake").unwrap_err().to_string().contains("postgres:"));
        assert!(LakeSpec::parse("ducklake:").is_err());
        let f = LakeSpec::parse("ducklake:/tmp/run 42.ducklake").unwrap();
        assert_eq!(f.catalog_file(), Some(Path::new("/tmp/run 42.ducklake")));
        assert!(!f.has_server_clock() && f.user().is_none());
        assert_eq!(f.attach_target(), "ducklake:/tmp/run 42.ducklake");
        assert!(l.has_server_clock() && l.catalog_file().is_none());
        assert_eq!(l.attach_target(), "ducklake:postgres:host=h connect_timeout=3");
    }

    #[test]
    fn missing_extension_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(missing_extensions(d.path()).len(), 3);
        let sub = d.path().join(DUCKDB_VERSION).join(DUCKDB_PLATFORM);
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("ducklake.duckdb_extension"), b"x").unwrap();
        assert_eq!(missing_extensions(d.path()), vec!["postgres_scanner", "sqlite_scanner"]);
    }
}
