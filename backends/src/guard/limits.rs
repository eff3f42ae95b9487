//! The run-time limits both engine halves of the guard enforce alike, over their own driver APIs:
//! the [`Budget`] of one query (its text checked, its limits clamped, its deadline), the one
//! [`Watchdog`] thread that interrupts queries past their deadline, the capped [`ResultRows`] and
//! the JSON of a cell, and the errors a stopped query reports.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value as J;

use super::{ALLOWED, MAX_QUERY_MEMORY, MAX_SQL_BYTES, MAX_TIMEOUT_MS};
use crate::{QueryCancel, QueryLimits, QueryResult, StoreError};

/// Largest response a caller may ask for, in bytes of JSON rows.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Not stopped (yet).
pub(super) const STOP_NONE: u8 = 0;
/// Stopped at its deadline.
pub(super) const STOP_TIMEOUT: u8 = 1;

/// Why a query was stopped (`STOP_*`), shared with whatever stops it.
pub(super) type StopReason = Arc<AtomicU8>;

/// Record `why` as the reason the query stopped, unless one is recorded already.
pub(super) fn stop_for(stop: &AtomicU8, why: u8) {
    let _ = stop.compare_exchange(STOP_NONE, why, Ordering::SeqCst, Ordering::SeqCst);
}

/// One query's limits, clamped to what the guard allows, and its deadline.
pub(super) struct Budget {
    pub timeout_ms: u64,
    pub deadline: Instant,
    pub max_rows: usize,
    pub max_bytes: usize,
    pub cancel: Option<QueryCancel>,
}

impl Budget {
    /// The budget of `sql` under `limits`; refuses a text no engine should see (too long, a NUL)
    /// and a query cancelled before it started.
    pub(super) fn of(sql: &str, limits: &QueryLimits) -> Result<Budget, StoreError> {
        let timeout_ms = limits.timeout_ms.clamp(1, MAX_TIMEOUT_MS);
        if sql.len() > MAX_SQL_BYTES {
            return Err(StoreError::Refused(format!(
                "a query of {} bytes (at most {MAX_SQL_BYTES} are accepted). {ALLOWED}",
                sql.len()
            )));
        }
        if sql.contains('\0') {
            return Err(StoreError::Refused(format!("a query containing a NUL character. {ALLOWED}")));
        }
        let cancel = limits.cancel.clone();
        if cancel.as_ref().is_some_and(QueryCancel::is_cancelled) {
            return Err(cancelled());
        }
        Ok(Budget {
            timeout_ms,
            deadline: Instant::now() + Duration::from_millis(timeout_ms),
            max_rows: limits.max_rows.clamp(1, QueryLimits::MAX_ROWS),
            max_bytes: limits.max_bytes.clamp(1, MAX_RESPONSE_BYTES),
            cancel,
        })
    }

    /// Whether the client cancelled the query.
    pub(super) fn is_cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(QueryCancel::is_cancelled)
    }

    /// Past the deadline (between rows, where no engine interrupt is needed): records the timeout.
    pub(super) fn past_deadline(&self, stop: &AtomicU8) -> bool {
        let past = Instant::now() >= self.deadline;
        if past {
            stop_for(stop, STOP_TIMEOUT);
        }
        past
    }

    /// Route the client's cancellation to `interrupt` while `run` runs, then detach it.
    pub(super) fn cancellable<T>(&self, interrupt: impl Fn() + Send + Sync + 'static, run: impl FnOnce() -> T) -> T {
        if let Some(c) = &self.cancel {
            c.set_interrupt(Some(Box::new(interrupt)));
        }
        let out = run();
        if let Some(c) = &self.cancel {
            c.set_interrupt(None);
        }
        out
    }

    /// What a query stopped by the deadline or the client reports.
    pub(super) fn stopped(&self) -> StoreError {
        if self.is_cancelled() {
            cancelled()
        } else {
            StoreError::Timeout(self.timeout_ms)
        }
    }
}

/// What a query cancelled by the client reports.
pub(super) fn cancelled() -> StoreError {
    StoreError::Query("the query was cancelled by the client".into())
}

/// What a query stopped for its memory reports (`detail`: the engine's own words, if any).
pub(super) fn out_of_memory(detail: Option<&str>) -> StoreError {
    let detail = detail.map(|d| format!(" ({d})")).unwrap_or_default();
    StoreError::Query(format!(
        "the query was stopped after it used more than {} MiB of memory; aggregate in SQL (GROUP BY, LIMIT) or \
         narrow the time window{detail}",
        MAX_QUERY_MEMORY >> 20
    ))
}

/// A query's rows as JSON, capped by rows and bytes; `truncated` once a cap is reached.
pub(super) struct ResultRows {
    out: QueryResult,
    bytes: usize,
    max_rows: usize,
    max_bytes: usize,
}

impl ResultRows {
    pub(super) fn new(columns: Vec<String>, budget: &Budget) -> ResultRows {
        let bytes = json_len(&columns);
        let out = QueryResult { columns, rows: Vec::new(), truncated: false };
        ResultRows { out, bytes, max_rows: budget.max_rows, max_bytes: budget.max_bytes }
    }

    pub(super) fn width(&self) -> usize {
        self.out.columns.len()
    }

    /// Whether another row is over the row cap (then the result is truncated).
    pub(super) fn full(&mut self) -> bool {
        let full = self.out.rows.len() == self.max_rows;
        self.out.truncated |= full;
        full
    }

    /// Whether a row of `row_bytes` (JSON, so far) still fits the byte cap (if not, the result is
    /// truncated).
    pub(super) fn fits(&mut self, row_bytes: usize) -> bool {
        let fits = self.bytes + row_bytes <= self.max_bytes;
        self.out.truncated |= !fits;
        fits
    }

    /// Add a row whose JSON is `row_bytes` long, checked by [`ResultRows::fits`].
    pub(super) fn push(&mut self, cells: Vec<J>, row_bytes: usize) {
        self.bytes += row_bytes;
        self.out.rows.push(cells);
    }

    pub(super) fn finish(self) -> QueryResult {
        self.out
    }
}

/// Length of `v` as compact JSON, without building the text.
pub(super) fn json_len<T: serde::Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    let _ = serde_json::to_writer(&mut n, v);
    n.0
}

/// A float cell: a JSON number, or text for what JSON cannot hold (infinities, NaN).
pub(super) fn float_cell(f: f64) -> J {
    serde_json::Number::from_f64(f).map_or_else(|| J::String(f.to_string()), J::Number)
}

/// A blob cell, as hex text.
pub(super) fn hex_cell(b: &[u8]) -> J {
    J::String(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Interrupts a query at its deadline even where the engine checks nothing between steps
/// (planning a huge statement, one long operator). One thread watches every query's deadline: a
/// query registers when it starts and leaves when it ends, and never waits for a thread of its own
/// to start or to be joined (on a busy machine each such wait is a scheduling delay on every query).
pub(super) struct Watchdog {
    id: u64,
}

type Interrupt = Box<dyn Fn() + Send>;

/// The deadlines being watched: (deadline, the query's interrupt, its stop reason).
#[derive(Default)]
struct Deadlines {
    next_id: u64,
    watched: HashMap<u64, (Instant, Interrupt, StopReason)>,
}

fn deadlines() -> &'static (Mutex<Deadlines>, Condvar) {
    static WATCHED: OnceLock<(Mutex<Deadlines>, Condvar)> = OnceLock::new();
    WATCHED.get_or_init(|| {
        let spawned = std::thread::Builder::new().name("sql-guard-watchdog".into()).spawn(watch_deadlines);
        if let Err(e) = spawned {
            // SQLite's progress handler and the row loops still check the deadline
            tracing::warn!("the SQL guard's watchdog thread could not start: {e}");
        }
        Default::default()
    })
}

/// The watchdog thread: interrupt each query past its deadline, sleep until the next one.
fn watch_deadlines() {
    let (lock, wake) = deadlines();
    let mut d = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let now = Instant::now();
        d.watched.retain(|_, (deadline, interrupt, stop)| {
            if *deadline > now {
                return true;
            }
            stop_for(stop, STOP_TIMEOUT);
            interrupt();
            false
        });
        let next = d.watched.values().map(|w| w.0).min();
        let nap = next.map_or(Duration::from_secs(3600), |t| t.saturating_duration_since(now));
        d = wake.wait_timeout(d, nap).unwrap_or_else(|p| p.into_inner()).0;
    }
}

impl Watchdog {
    /// Watch the budget's deadline until dropped: past it, the stop reason becomes
    /// [`STOP_TIMEOUT`] and `interrupt` is called.
    pub(super) fn start(budget: &Budget, interrupt: impl Fn() + Send + 'static, stop: StopReason) -> Watchdog {
        let (lock, wake) = deadlines();
        let mut d = lock.lock().unwrap_or_else(|p| p.into_inner());
        d.next_id += 1;
        let id = d.next_id;
        let earliest = d.watched.values().all(|w| w.0 > budget.deadline);
        d.watched.insert(id, (budget.deadline, Box::new(interrupt), stop));
        if earliest {
            wake.notify_one();
        }
        Watchdog { id }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, _) = deadlines();
        lock.lock().unwrap_or_else(|p| p.into_inner()).watched.remove(&self.id);
    }
}
