//! The trace databases a server was given (`--db`, several allowed), each with a short name, opened
//! read-only through [`causeway_backends::open_store`]. A DB that cannot be opened stays in the list
//! with its error (tools on it answer `isError` with that error, and opening is retried on the next
//! call, so a file that appears later is picked up). Explanations are cached per request, because
//! chain resources and tools ask for the same one again and again, and computed once: a request
//! that finds its explanation being computed (an agent's parallel tool calls, or a retry after a
//! cancelled call whose work goes on) waits for it instead of computing it again beside it, which
//! on a small host would slow both. The list only grows: a trace
//! recorded by `capture_trace` joins it with the next index ([`TraceSet::add`]).
//!
//! A served file may still be written (`causeway trace --all` beside `causeway mcp`): each entry
//! remembers its file's [`FileVersion`] (size and mtime of the file and its WAL), reopens the store
//! when it changed (so the trace's info is current), and an explanation computed before a change
//! is computed again once it is older than [`LIVE_REFRESH`]: answers are never staler than that,
//! and a burst of parallel calls on a busy trace still shares one computation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use causeway_analysis::{explain, ExplainRequest, Explanation};
use causeway_backends::TraceStore;
use causeway_model::time::TimeWindow;

/// Chains computed per explanation (tools slice them; ids are ranks over all of them).
const ALL_CHAINS: usize = 1000;
/// Explanations kept in the cache.
const CACHED_EXPLANATIONS: usize = 16;
/// How old an explanation of a trace that changed since may be before it is computed again.
pub const LIVE_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// What a trace file looked like: (length, mtime in ns) of the file and of its write-ahead log
/// (SQLite's `-wal`, DuckDB's `.wal`; zeros when absent); for a series directory, those of its
/// newest part and (number of parts, first part). A change means new rows may be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileVersion([(u64, i128); 3]);

impl FileVersion {
    /// The version of the file at `path` now (None: it cannot be read).
    pub fn of(path: &Path) -> Option<FileVersion> {
        let stamp = |p: &Path| {
            std::fs::metadata(p).ok().map(|m| {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos() as i128);
                (m.len(), mtime)
            })
        };
        let with = |file: &Path, suffix: &str| {
            let mut s = file.as_os_str().to_owned();
            s.push(suffix);
            stamp(Path::new(&s)).unwrap_or_default()
        };
        if path.is_dir() {
            // a series: its newest part (and WAL), and which parts it has
            let parts = causeway_backends::sqlite::series::list_parts(path).ok()?;
            let (first, _) = parts.first()?;
            let (_, newest) = parts.last()?;
            return Some(FileVersion([stamp(newest)?, with(newest, "-wal"), (parts.len() as u64, *first as i128)]));
        }
        Some(FileVersion([stamp(path)?, with(path, "-wal"), with(path, ".wal")]))
    }
}

/// Which trace a tool call is about: its name (file stem), file name, path, or 0-based index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum TraceRef {
    Index(u64),
    Name(String),
}

/// Opens a served trace's store (again, after a failure).
pub type Opener = Box<dyn Fn() -> Result<Arc<dyn TraceStore>, String> + Send + Sync>;

/// One DB the server serves.
pub struct TraceEntry {
    pub index: usize,
    /// Unique short name: the file stem (`-2`, `-3` appended on clashes), or the name it was added
    /// under ([`TraceSet::add_opener`]: a fleet node's `node:NAME`).
    pub name: String,
    /// The file, or for a store that is not a file (a node in a lake) its label.
    pub path: PathBuf,
    store: Mutex<Result<Arc<dyn TraceStore>, String>>,
    opener: Opener,
    /// A file (not a lake's node): watched for changes.
    is_file: bool,
    /// The file's version when the store was opened.
    opened_at: Mutex<Option<FileVersion>>,
}

impl TraceEntry {
    /// The opened store, or the error that stops it from opening (retried on every call); opened
    /// again when its file changed since (a trace still being written).
    pub fn store(&self) -> Result<Arc<dyn TraceStore>, String> {
        let mut slot = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.version();
        let mut opened_at = self.opened_at.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_err() || (self.is_file && *opened_at != now) {
            *slot = (self.opener)();
            *opened_at = now;
        }
        slot.clone()
    }

    /// The file's version now (None for a store that is not a file, or a file that is gone).
    pub fn version(&self) -> Option<FileVersion> {
        if self.is_file {
            FileVersion::of(&self.path)
        } else {
            None
        }
    }
}

fn file_opener(path: &Path) -> Opener {
    let path = path.to_path_buf();
    Box::new(move || causeway_backends::open_store(&path).map(Arc::from).map_err(|e| e.to_string()))
}

/// (trace, window from, window to, pid, the window slowness is judged by).
type ExplainKey = (usize, Option<i64>, Option<i64>, Option<u32>, Option<(Option<i64>, Option<i64>)>);
/// One cached explanation: empty while the first request for it computes it (the others block on it).
type ExplainSlot = Arc<OnceLock<Result<Arc<Explanation>, String>>>;

/// A cache entry: the slot, and the file version and time it was started at.
struct Cached {
    slot: ExplainSlot,
    version: Option<FileVersion>,
    at: std::time::Instant,
}

impl Cached {
    fn new(version: Option<FileVersion>) -> Cached {
        Cached { slot: ExplainSlot::default(), version, at: std::time::Instant::now() }
    }

    /// Still the answer for a trace whose file is at `version` now.
    fn fresh_for(&self, version: Option<FileVersion>) -> bool {
        self.version == version || self.at.elapsed() < LIVE_REFRESH
    }
}

/// Every DB of this server, plus the explanation cache.
pub struct TraceSet {
    entries: RwLock<Vec<Arc<TraceEntry>>>,
    explanations: Mutex<HashMap<ExplainKey, Cached>>,
    /// Explanations computed so far (not served from the cache).
    explained: AtomicU64,
}

impl TraceSet {
    /// Open every path (failures are kept, not fatal: the server still starts).
    pub fn open(paths: &[PathBuf]) -> TraceSet {
        let set = TraceSet {
            entries: RwLock::new(Vec::new()),
            explanations: Mutex::new(HashMap::new()),
            explained: AtomicU64::new(0),
        };
        for path in paths {
            set.add(path);
        }
        set
    }

    /// Append a trace (a unique name derived from its file stem, the next index) and return it.
    pub fn add(&self, path: &Path) -> Arc<TraceEntry> {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        self.add_entry(stem, path, file_opener(path), true)
    }

    /// Append a store `opener` opens (a node of a fleet lake), under `name` (made unique; the
    /// index when None), labelled `label`; opened now, and again on a later call if that failed.
    pub fn add_opener(&self, name: Option<String>, label: &Path, opener: Opener) -> Arc<TraceEntry> {
        self.add_entry(name, label, opener, false)
    }

    fn add_entry(&self, name: Option<String>, label: &Path, opener: Opener, is_file: bool) -> Arc<TraceEntry> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let index = entries.len();
        let stem = name.unwrap_or_else(|| format!("trace{index}"));
        let mut name = stem.clone();
        let mut n = 2;
        while entries.iter().any(|e| e.name == name) {
            name = format!("{stem}-{n}");
            n += 1;
        }
        let store = opener();
        if let Err(e) = &store {
            tracing::warn!("trace {name}: {e} (tools on it will answer with this error)");
        }
        let entry = Arc::new(TraceEntry {
            index,
            name,
            path: label.to_path_buf(),
            store: Mutex::new(store),
            opener,
            is_file,
            opened_at: Mutex::new(if is_file { FileVersion::of(label) } else { None }),
        });
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
            format!(
                "no trace {}: this server has {} (name or 0-based index; see list_traces)",
                describe(r),
                names.join(", ")
            )
        })
    }

    /// The explanation of a trace for a window and pid (all chains), from the cache when possible;
    /// computed once however many requests ask for it at the same time. A failure is not cached.
    pub fn explanation(
        &self,
        entry: &TraceEntry,
        window: TimeWindow,
        pid: Option<u32>,
    ) -> Result<Arc<Explanation>, String> {
        self.explanation_judged(entry, window, pid, None)
    }

    /// [`TraceSet::explanation`], slowness judged by a wider window (`ExplainRequest::judge_by`:
    /// a step range against the whole trace).
    pub fn explanation_judged(
        &self,
        entry: &TraceEntry,
        window: TimeWindow,
        pid: Option<u32>,
        judge_by: Option<TimeWindow>,
    ) -> Result<Arc<Explanation>, String> {
        self.explanation_versioned(entry, window, pid, judge_by).0
    }

    /// [`TraceSet::explanation_judged`] and the file version the answer was computed at (which
    /// may be older than the file's now: a cached answer younger than [`LIVE_REFRESH`]); a
    /// resource watcher compares the next version with it.
    pub fn explanation_versioned(
        &self,
        entry: &TraceEntry,
        window: TimeWindow,
        pid: Option<u32>,
        judge_by: Option<TimeWindow>,
    ) -> (Result<Arc<Explanation>, String>, Option<FileVersion>) {
        let key = (entry.index, window.from_ns, window.to_ns, pid, judge_by.map(|w| (w.from_ns, w.to_ns)));
        let version = entry.version();
        let (slot, computed_at) = {
            let mut cache = self.explanations.lock().unwrap_or_else(|p| p.into_inner());
            if cache.get(&key).is_some_and(|c| !c.fresh_for(version)) {
                cache.remove(&key); // the trace grew since: computed again
            }
            if !cache.contains_key(&key) && cache.len() >= CACHED_EXPLANATIONS {
                cache.retain(|_, c| c.slot.get().is_none()); // keep the ones being computed
            }
            let c = cache.entry(key).or_insert_with(|| Cached::new(version));
            (c.slot.clone(), c.version)
        };
        let answer = slot
            .get_or_init(|| {
                self.explained.fetch_add(1, Ordering::Relaxed);
                let store = entry.store()?;
                let req = ExplainRequest { window, pid, top: ALL_CHAINS, judge_by };
                let mut e = explain(store.as_ref(), &req).map_err(|e| e.to_string())?;
                // the user's own rates (the config file) over the built-in list prices
                let rates = causeway_analysis::Rates::load(None)?;
                causeway_analysis::price(&mut e, &rates);
                Ok(Arc::new(e))
            })
            .clone();
        if answer.is_err() {
            // the next request tries again (unless the slot was replaced meanwhile)
            let mut cache = self.explanations.lock().unwrap_or_else(|p| p.into_inner());
            if cache.get(&key).is_some_and(|c| Arc::ptr_eq(&c.slot, &slot)) {
                cache.remove(&key);
            }
        }
        (answer, computed_at)
    }

    /// How many explanations this set has computed (cache misses); the tests check it.
    pub fn explanations_computed(&self) -> u64 {
        self.explained.load(Ordering::Relaxed)
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

    fn shared_db(name: &str) -> PathBuf {
        causeway_testdata::ingero_db(name)
    }

    #[test]
    fn parallel_requests_for_one_explanation_compute_it_once() {
        let set = TraceSet::open(&[shared_db("pytorch-dataloader-starvation.db")]);
        let entry = set.entries()[0].clone();
        let start = std::sync::Barrier::new(4);
        let answers: Vec<Arc<Explanation>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        set.explanation(&entry, TimeWindow::ALL, None).expect("explains")
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert!(answers.iter().all(|a| Arc::ptr_eq(a, &answers[0])), "one shared explanation");
        assert_eq!(set.explanations_computed(), 1);
        // another scope is another explanation; asking again is a cache hit
        let from_first = TimeWindow { from_ns: Some(answers[0].first_ns), to_ns: None };
        set.explanation(&entry, from_first, None).unwrap();
        set.explanation(&entry, TimeWindow::ALL, None).unwrap();
        assert_eq!(set.explanations_computed(), 2);
    }

    /// A trace still being written: the store is reopened and the explanation computed again once
    /// the file changed and the cached one is older than LIVE_REFRESH; an unchanged file is a hit.
    #[test]
    fn a_trace_being_written_is_answered_with_fresh_figures() {
        use causeway_backends::{EngineWriter, SqliteWriter, SyntheticTrace};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.db");
        let session = causeway_model::SessionInfo { started_at_ns: 1, ..Default::default() };
        let mut w = SqliteWriter::create(&path, &session).unwrap();
        let mut synth = SyntheticTrace::new(7, 1_000_000_000);
        w.write_batches([synth.take(2_000).as_slice()]).unwrap();
        let set = TraceSet::open(std::slice::from_ref(&path));
        let entry = set.entries()[0].clone();
        let first = set.explanation(&entry, TimeWindow::ALL, None).unwrap();
        let events_first = entry.store().unwrap().info().events;
        assert_eq!(events_first, 2_000);
        // unchanged: served from the cache, however late
        std::thread::sleep(LIVE_REFRESH + std::time::Duration::from_millis(50));
        assert!(Arc::ptr_eq(&first, &set.explanation(&entry, TimeWindow::ALL, None).unwrap()));
        assert_eq!(set.explanations_computed(), 1);

        w.write_batches([synth.take(3_000).as_slice()]).unwrap();
        // changed, but the cached answer is younger than LIVE_REFRESH: still shared
        let second = set.explanation(&entry, TimeWindow::ALL, None).unwrap();
        assert_eq!(entry.store().unwrap().info().events, 5_000, "the store is reopened at once");
        assert_eq!(set.explanations_computed(), 2, "older than LIVE_REFRESH and changed: computed again");
        assert!(second.last_ns > first.last_ns, "the new explanation covers the new events");
        assert!(second.gpu_calls > first.gpu_calls);
        w.write_batches([synth.take(1_000).as_slice()]).unwrap();
        let third = set.explanation(&entry, TimeWindow::ALL, None).unwrap();
        assert!(Arc::ptr_eq(&second, &third), "a change within LIVE_REFRESH shares the fresh answer");
        assert_eq!(set.explanations_computed(), 2);
        w.finish(2_000_000_000).unwrap();
    }

    #[test]
    fn a_series_being_written_is_served_as_one_trace_across_rollovers() {
        use causeway_backends::{EngineWriter, RollPolicy, RollingWriter, SyntheticTrace};
        let dir = tempfile::tempdir().unwrap();
        let series = dir.path().join("host");
        let session = causeway_model::SessionInfo { started_at_ns: 1, ..Default::default() };
        let policy = RollPolicy { max_part_bytes: 64 << 10, ..RollPolicy::default() };
        let mut w = RollingWriter::open(&series, &session, policy).unwrap();
        let mut synth = SyntheticTrace::new(7, 1_000_000_000);
        w.write_batches([synth.take(2_000).as_slice()]).unwrap();
        let set = TraceSet::open(std::slice::from_ref(&series));
        let entry = set.entries()[0].clone();
        assert_eq!(entry.name, "host");
        let first = set.explanation(&entry, TimeWindow::ALL, None).unwrap();
        assert_eq!(entry.store().unwrap().info().events, 2_000);
        for _ in 0..4 {
            w.write_batches([synth.take(2_000).as_slice()]).unwrap();
        }
        let parts = causeway_backends::sqlite::series::list_parts(&series).unwrap().len();
        assert!(parts >= 3, "the writes rolled over: {parts} parts");
        std::thread::sleep(LIVE_REFRESH + std::time::Duration::from_millis(50));
        let second = set.explanation(&entry, TimeWindow::ALL, None).unwrap();
        assert_eq!(entry.store().unwrap().info().events, 10_000, "every part is read, the live one included");
        assert_eq!(set.explanations_computed(), 2);
        assert!(second.gpu_calls > first.gpu_calls && second.last_ns > first.last_ns);
        w.finish(2_000_000_000).unwrap();
    }

    #[test]
    fn a_failed_explanation_is_not_cached() {
        let set = TraceSet::open(&[PathBuf::from("/nonexistent/a.db")]);
        let entry = set.entries()[0].clone();
        for attempt in 1..=2 {
            let e = set.explanation(&entry, TimeWindow::ALL, None).unwrap_err();
            assert!(e.contains("no such file"), "{e}");
            assert_eq!(set.explanations_computed(), attempt, "tried again");
        }
    }
}
