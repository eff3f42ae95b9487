//! Shared fixtures of the SQL guard tests: private copies of the real Ingero trace DBs, the corpora,
//! and the invariants every hostile query must leave true (DB byte-identical, no new file anywhere we
//! can see, the process alive).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use causeway_backends::QueryLimits;

/// The Ingero DBs carried in `testdata/ingero-dbs` (WAL-mode files, so opened `immutable=1`).
pub const DBS: &[&str] = causeway_testdata::INGERO_DBS;

/// Paths outside the fixture that hostile entries name; none may exist after any query.
pub const FORBIDDEN_PATHS: &[&str] = &["/tmp/causeway-guard-vacuum.db", "/tmp/evil.so"];

/// The directory of the Ingero DBs.
pub fn ingero_dir() -> PathBuf {
    causeway_testdata::ingero_dbs()
}

/// A private copy of one trace in its own directory, with a sibling `out/` that hostile queries
/// target with ATTACH / VACUUM INTO / COPY / writefile.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub dir: PathBuf,
    pub db: PathBuf,
    pub out: PathBuf,
    pub uri: String,
    original: Vec<u8>,
    listing: BTreeMap<String, u64>,
}

impl Fixture {
    /// A copy opened `immutable=1`, as the store opens Ingero DBs.
    pub fn immutable(name: &str) -> Fixture {
        Fixture::make(name, false)
    }

    /// A copy converted to rollback-journal mode and opened `mode=ro`, as the store opens
    /// native traces that are not being written.
    pub fn read_only(name: &str) -> Fixture {
        Fixture::make(name, true)
    }

    /// A DuckDB copy made by `convert` (`uri` is the file's path: DuckDB opens paths).
    pub fn duckdb(name: &str) -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, out) = fixture_dirs(tmp.path());
        let db = dir.join("trace.duckdb");
        causeway_backends::convert(&ingero_dir().join(name), &db, None, &mut |_, _| {}).unwrap();
        Fixture::seal(tmp, dir, db, out, None)
    }

    fn make(name: &str, rollback: bool) -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, out) = fixture_dirs(tmp.path());
        let db = dir.join("trace.db");
        std::fs::copy(ingero_dir().join(name), &db).expect("copy trace");
        let uri = if rollback {
            // The guard's per-thread heap accounting goes in before this process's first SQLite open.
            causeway_backends::sqlite::heap::install();
            let conn = rusqlite::Connection::open(&db).unwrap();
            let mode: String = conn.query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0)).unwrap();
            assert_eq!(mode, "delete");
            drop(conn);
            format!("file:{}?mode=ro", db.display())
        } else {
            format!("file:{}?immutable=1", db.display())
        };
        Fixture::seal(tmp, dir, db, out, Some(uri))
    }

    /// Record the DB's bytes and its directory's listing, which every query must leave as they are.
    fn seal(tmp: tempfile::TempDir, dir: PathBuf, db: PathBuf, out: PathBuf, uri: Option<String>) -> Fixture {
        let original = std::fs::read(&db).unwrap();
        let listing = list(&dir);
        let uri = uri.unwrap_or_else(|| db.display().to_string());
        Fixture { _dir: tmp, dir, db, out, uri, original, listing }
    }

    /// `{OUT}` and `{DB}` in a corpus entry, made concrete for this fixture.
    pub fn expand(&self, sql: &str) -> String {
        sql.replace("{OUT}", &self.out.display().to_string()).replace("{DB}", &self.db.display().to_string())
    }

    /// The invariants: the DB is byte-identical, its directory holds the same files, `out/` and
    /// the forbidden paths are empty.
    pub fn unchanged(&self) -> Result<(), String> {
        let now = std::fs::read(&self.db).map_err(|e| format!("db unreadable: {e}"))?;
        if now != self.original {
            return Err(format!("DB bytes changed (fnv {:x} -> {:x})", fnv(&self.original), fnv(&now)));
        }
        let listing = list(&self.dir);
        if listing != self.listing {
            return Err(format!("DB directory changed: {:?} -> {listing:?}", self.listing));
        }
        let created = list(&self.out);
        if !created.is_empty() {
            return Err(format!("files created in out/: {created:?}"));
        }
        for p in FORBIDDEN_PATHS {
            if Path::new(p).exists() {
                return Err(format!("{p} exists"));
            }
        }
        Ok(())
    }

    pub fn hash(&self) -> u64 {
        fnv(&self.original)
    }
}

/// Default limits with a chosen time limit.
pub fn limits_ms(ms: u64) -> QueryLimits {
    QueryLimits { timeout_ms: ms, ..QueryLimits::default() }
}

/// The guard's refusal of `sql` on SQLite, as a user reads it (panics when it passes).
pub fn refusal(sql: &str) -> String {
    match causeway_backends::guard::check(sql, causeway_backends::guard::Engine::Sqlite) {
        Err(r) => r.to_string(),
        Ok(()) => panic!("check let through {sql:?}"),
    }
}

/// `trace/` and its sibling `out/` under a fixture's temporary directory.
fn fixture_dirs(tmp: &Path) -> (PathBuf, PathBuf) {
    let (dir, out) = (tmp.join("trace"), tmp.join("out"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    (dir, out)
}

/// What one guarded run did, for counting.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Refused,
    Limited,
    Ran,
}

pub fn outcome(r: &Result<causeway_backends::QueryResult, causeway_backends::StoreError>) -> Outcome {
    match r {
        Err(causeway_backends::StoreError::Refused(_)) => Outcome::Refused,
        Err(_) => Outcome::Limited,
        Ok(q) if q.truncated => Outcome::Limited,
        Ok(_) => Outcome::Ran,
    }
}

fn list(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().map(|m| m.len()).unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

/// FNV-1a 64, for short fingerprints in messages.
pub fn fnv(bytes: &[u8]) -> u64 {
    causeway_model::fnv::fnv1a64(bytes)
}

/// One corpus entry: the SQL and what each engine must do with it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Entry {
    pub sql: String,
    #[serde(default)]
    pub class: String,
    /// `refused` (the AST check must refuse) or `limited` (may run; limits must stop it).
    #[serde(default)]
    pub sqlite: Option<String>,
    /// Same for DuckDB; `None` where the DuckDB run decides (engine not wired yet).
    #[serde(default)]
    pub duckdb: Option<String>,
}

/// The entries of `tests/sql-guard/<name>` (JSON lines).
pub fn corpus(name: &str) -> Vec<Entry> {
    let path = causeway_testdata::repo_root().join("tests/sql-guard").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1)))
        .collect()
}

/// Limits for corpus runs: short timeout so bombs end fast.
pub fn corpus_limits() -> QueryLimits {
    QueryLimits { timeout_ms: 1500, ..QueryLimits::default() }
}
