//! The storage engines of native traces, named once: what `--backend` parses, what a path's
//! extension picks, what [`TraceStore::engine`](crate::TraceStore::engine) reports and which SQL
//! dialect the guard checks a query for.

use std::path::Path;

use crate::StoreError;

/// A storage engine of native traces (Ingero DBs are SQLite files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// SQLite, the embedded default (`.db`).
    #[default]
    Sqlite,
    /// DuckDB (`.duckdb`), with the cargo feature `duckdb` of the engines crate.
    DuckDb,
}

impl Engine {
    /// Every engine, the default first.
    pub const ALL: [Engine; 2] = [Engine::Sqlite, Engine::DuckDb];

    /// The engine a path names by its extension: `.duckdb` is DuckDB, anything else SQLite.
    pub fn for_path(path: &Path) -> Engine {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("duckdb") => Engine::DuckDb,
            _ => Engine::Sqlite,
        }
    }

    /// `sqlite` (or `sqlite3`) or `duckdb`, in any case, as `--backend` spells it.
    pub fn parse(s: &str) -> Result<Engine, StoreError> {
        match s.to_ascii_lowercase().as_str() {
            "sqlite" | "sqlite3" => Ok(Engine::Sqlite),
            "duckdb" => Ok(Engine::DuckDb),
            other => Err(StoreError::InvalidArgument(format!("unknown backend {other:?}: use sqlite or duckdb"))),
        }
    }

    /// The lowercase name (`sqlite`, `duckdb`): `--backend`'s spelling and the serialized form.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::DuckDb => "duckdb",
        }
    }

    /// The product's own spelling (`SQLite`, `DuckDB`), for sentences.
    pub fn label(self) -> &'static str {
        match self {
            Engine::Sqlite => "SQLite",
            Engine::DuckDb => "DuckDB",
        }
    }

    /// The file extension a new trace of this engine gets (`db`, `duckdb`).
    pub fn extension(self) -> &'static str {
        match self {
            Engine::Sqlite => "db",
            Engine::DuckDb => "duckdb",
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_paths_pick_by_extension() {
        for e in Engine::ALL {
            assert_eq!(Engine::parse(e.name()).unwrap(), e);
            assert_eq!(Engine::parse(&e.label().to_uppercase()).unwrap(), e);
            assert_eq!(Engine::for_path(Path::new(&format!("t.{}", e.extension()))), e);
        }
        assert_eq!(Engine::for_path(Path::new("T.DuckDB")), Engine::DuckDb);
        assert_eq!(Engine::for_path(Path::new("trace")), Engine::Sqlite);
        let err = Engine::parse("postgres").unwrap_err().to_string();
        assert!(err.contains("postgres") && err.contains("sqlite or duckdb"), "{err}");
    }
}
