//! The trace databases a server was given (`--db`, several allowed), each with a short name, opened
//! read-only through [`causeway_backends::open_store`]. A DB that cannot be opened stays in the list
//! with its error (tools on it answer `isError` with that error, and opening is retried on the next
//! call, so a file that appears later is picked up). Explanations are cached per request, because
//! chain resources and tools ask for the same one again and again. The list only grows: a trace
//! recorded by `capture_trace` joins it with the next index ([`TraceSet::add`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use causeway_analysis::explain::{explain, ExplainRequest, Explanation};
use causeway_backends::TraceStore;
use causeway_model::time::TimeWindow;

/// Chains computed per explanation (tools slice them; ids are ranks over all of them).
const ALL_CHAINS: usize = 1000;
/// Explanations kept in the cache.
const CACHED_EXPLANATIONS: usize = 16;

/// Which trace a tool call is about: its name (file stem), file name, path, or 0-based index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum TraceRef {
    Index(u64),
    Name(String),
}

/// One DB the server serves.
pub struct TraceEntry {
    pub index: usize,
    /// Unique short name: the file stem (`-2`, `-3` appended on clashes).
    pub name: String,
    pub path: PathBuf,
    store: Mutex<Result<Arc<dyn TraceStore>, String>>,
}

impl TraceEntry {
    /// The opened store, or the error that stops it from opening (retried on every call).
    pub fn store(&self) -> Result<Arc<dyn TraceStore>, String> {
        let mut slot = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_err() {
            *slot = open(&self.path);
        }
        slot.clone()
    }
}

fn open(path: &Path) -> Result<Arc<dyn TraceStore>, String> {
    causeway_backends::open_store(path).map(Arc::from).map_err(|e| e.to_string())
}

type ExplainKey = (usize, Option<i64>, Option<i64>, Option<u32>);

/// Every DB of this server, plus the explanation cache.
pub struct TraceSet {
    entries: RwLock<Vec<Arc<TraceEntry>>>,
    explanations: Mutex<HashMap<ExplainKey, Arc<Explanation>>>,
}

impl TraceSet {
    /// Open every path (failures are kept, not fatal: the server still starts).
    pub fn open(paths: &[PathBuf]) -> TraceSet {
        let set = TraceSet { entries: RwLock::new(Vec::new()), explanations: Mutex::new(HashMap::new()) };
        for path in paths {
            set.add(path);
        }
        set
    }

    /// Append a trace (a unique name derived from its file stem, the next index) and return it.
    pub fn add(&self, path: &Path) -> Arc<TraceEntry> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let index = entries.len();
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| format!("trace{index}"));
        let mut name = stem.clone();
        let mut n = 2;
        while entries.iter().any(|e| e.name == name) {
            name = format!("{stem}-{n}");
            n += 1;
        }
        let store = open(path);
        if let Err(e) = &store {
            tracing::warn!("trace {name}: {e} (tools on it will answer with this error)");
        }
        let entry = Arc::new(TraceEntry { index, name, path: path.to_path_buf(), store: Mutex::new(store) });
        entries.push(entry.clone());
        entry
    }

    /// Every trace, in index order (a snapshot: captures may add more).
    pub fn entries(&self) -> Vec<Arc<TraceEntry>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many traces are served.
    pub fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The trace a tool call names (the first when `None`), or an error listing the valid names.
    pub fn resolve(&self, r: Option<&TraceRef>) -> Result<Arc<TraceEntry>, String> {
        let entries = self.entries();
        if entries.is_empty() {
            return Err("this server was started without any trace: restart it with --db PATH (or record one with capture_trace)".into());
        }
        let found = match r {
            None => entries.first(),
            Some(TraceRef::Index(i)) => entries.get(*i as usize),
            Some(TraceRef::Name(n)) => {
                let n = n.trim();
                entries
                    .iter()
                    .find(|e| e.name == n)
                    .or_else(|| entries.iter().find(|e| e.path.file_name().is_some_and(|f| f.to_string_lossy() == n)))
                    .or_else(|| entries.iter().find(|e| e.path.to_string_lossy() == n))
                    .or_else(|| n.parse::<usize>().ok().and_then(|i| entries.get(i)))
            }
        };
        found.cloned().ok_or_else(|| {
            let names: Vec<String> = entries.iter().map(|e| format!("{} ({})", e.name, e.index)).collect();
            format!("no trace {}: this server has {} (name or 0-based index; see list_traces)", describe(r), names.join(", "))
        })
    }

    /// The explanation of a trace for a window and pid (all chains), from the cache when possible.
    pub fn explanation(&self, entry: &TraceEntry, window: TimeWindow, pid: Option<u32>) -> Result<Arc<Explanation>, String> {
        let key = (entry.index, window.from_ns, window.to_ns, pid);
        if let Some(e) = self.explanations.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(e.clone());
        }
        let store = entry.store()?;
        let req = ExplainRequest { window, pid, top: ALL_CHAINS };
        let e = Arc::new(explain(store.as_ref(), &req).map_err(|e| e.to_string())?);
        let mut cache = self.explanations.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHED_EXPLANATIONS {
            cache.clear();
        }
        cache.insert(key, e.clone());
        Ok(e)
    }
}

fn describe(r: Option<&TraceRef>) -> String {
    match r {
        None => "(default)".into(),
        Some(TraceRef::Index(i)) => format!("#{i}"),
        Some(TraceRef::Name(n)) => format!("'{}'", crate::sanitize::sanitize_str(n, 200)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_missing_files_are_kept_with_their_error() {
        let set = TraceSet::open(&[PathBuf::from("/nonexistent/a.db"), PathBuf::from("/other/a.db")]);
        let entries = set.entries();
        assert_eq!(entries[0].name, "a");
        assert_eq!(entries[1].name, "a-2");
        let err = entries[0].store().err().expect("a missing file is an error");
        assert!(err.contains("no such file"), "{err}");
        assert_eq!(set.resolve(Some(&TraceRef::Name("a-2".into()))).unwrap().index, 1);
        assert_eq!(set.resolve(Some(&TraceRef::Index(1))).unwrap().index, 1);
        assert_eq!(set.resolve(Some(&TraceRef::Name("1".into()))).unwrap().index, 1);
        assert_eq!(set.resolve(None).unwrap().index, 0);
        let e = set.resolve(Some(&TraceRef::Name("zz".into()))).err().unwrap();
        assert!(e.contains("a (0), a-2 (1)"), "{e}");
        let added = set.add(Path::new("/captures/a.db"));
        assert_eq!((added.index, added.name.as_str(), set.len()), (2, "a-3", 3));
        assert_eq!(set.resolve(Some(&TraceRef::Name("a-3".into()))).unwrap().index, 2);
    }
}
