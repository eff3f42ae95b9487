//! What a SQLite store reads, and how it opens one more read-only connection to it: one file by
//! its URI (immutable when finished, through its WAL while written), or a series of parts joined
//! by views ([`super::series`]). The SQL guard and `convert` open their connections through it.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::series::SeriesRead;
use crate::{Result, StoreError};

/// What a store reads, and how to open one more read-only connection to it (the SQL guard's,
/// `convert`'s): one file by its URI, or a series of parts joined by views.
#[derive(Debug, Clone)]
pub(crate) enum ReadTarget {
    /// One file (`file:...?immutable=1` or `?mode=ro`).
    File(String),
    /// A series directory ([`super::series`]).
    Series(SeriesRead),
}

impl ReadTarget {
    /// A new read-only connection (`READ_ONLY | URI | NO_MUTEX`) reading the whole trace; the caller
    /// hardens it.
    pub(crate) fn connect(&self) -> Result<Connection> {
        match self {
            ReadTarget::File(uri) => crate::sqlite::heap::open(
                uri,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| StoreError::Engine(format!("cannot open {uri} read-only: {e}"))),
            ReadTarget::Series(series) => series.connect(),
        }
    }

    /// Whether this is one finished file (opened immutable: no WAL pages, no writer).
    pub(crate) fn is_finished_file(&self) -> bool {
        matches!(self, ReadTarget::File(uri) if uri.ends_with("?immutable=1"))
    }

    /// The schemas a query may read: `main`, and a series' `temp` views and attached parts.
    pub(crate) fn reads_schema(&self, schema: &str) -> bool {
        schema.eq_ignore_ascii_case("main")
            || match self {
                ReadTarget::File(_) => false,
                ReadTarget::Series(series) => {
                    schema.eq_ignore_ascii_case("temp") || series.attached.iter().any(|(alias, _)| alias == schema)
                }
            }
    }
}

/// The URI a reader opens one file with: through its WAL when the WAL has pages (a trace being
/// written, or whose writer was killed), else immutable.
pub(crate) fn read_uri(path: &Path) -> String {
    let wal_pages = wal_path(path).metadata().is_ok_and(|m| m.len() > 32);
    uri_for(path, if wal_pages { "mode=ro" } else { "immutable=1" })
}

/// One file opened read-only by its [`read_uri`]; the connection never writes the file. A plain
/// read-only open refuses a file with a hot rollback journal (`SQLITE_READONLY_ROLLBACK`): a part
/// whose writer was killed while it switched the finished part out of WAL mode, the one
/// rollback-journal transaction a Causeway writer makes (page 1's header), so the immutable open,
/// which ignores the journal, reads the committed trace.
pub(crate) fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    crate::sqlite::heap::open(
        read_uri(path),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// The SQLite URI for a path with the given query parameters (path characters escaped).
pub(crate) fn uri_for(path: &Path, params: &str) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut s = String::from("file:");
    for b in abs.to_string_lossy().bytes() {
        match b {
            b'%' | b'?' | b'#' => s.push_str(&format!("%{b:02X}")),
            _ => s.push(b as char),
        }
    }
    format!("{s}?{params}")
}

/// The `-wal` file beside a SQLite file.
pub(crate) fn wal_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}
