//! Running user SQL: limits, cancellation and results. (The SQL guard hardens what may run; see `guard`.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Limits applied to every user query.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct QueryLimits {
    /// Maximum rows returned (default 1,000, at most 10,000); more sets `truncated`.
    pub max_rows: usize,
    /// Wall-clock limit in milliseconds; the query is interrupted past it.
    pub timeout_ms: u64,
    /// Maximum size of the rows as JSON, in bytes; more sets `truncated`.
    pub max_bytes: usize,
    /// Lets another thread stop the query (MCP `notifications/cancelled`); not part of the wire format.
    #[serde(skip)]
    #[schemars(skip)]
    pub cancel: Option<QueryCancel>,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits { max_rows: 1000, timeout_ms: 30_000, max_bytes: 1 << 20, cancel: None }
    }
}

impl QueryLimits {
    /// The most rows a caller may ask for.
    pub const MAX_ROWS: usize = 10_000;

    /// Limits with a row cap chosen by the caller, clamped to 1..=10,000.
    pub fn with_rows(rows: usize) -> QueryLimits {
        QueryLimits { max_rows: rows.clamp(1, Self::MAX_ROWS), ..Default::default() }
    }

    /// The same limits, stoppable through `cancel`.
    pub fn cancellable(mut self, cancel: &QueryCancel) -> QueryLimits {
        self.cancel = Some(cancel.clone());
        self
    }
}

/// A handle that stops a running query from another thread; clones share one flag.
///
/// Cancelling before the query starts makes it stop at its first step; cancelling while it runs
/// interrupts the engine (`sqlite3_interrupt`); cancelling after it finished does nothing.
/// The query then fails with `StoreError::Query("... cancelled ...")`.
#[derive(Clone, Default)]
pub struct QueryCancel(Arc<CancelState>);

#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    /// Interrupts the engine of the query now running, if any.
    interrupt: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

impl QueryCancel {
    /// A handle not yet cancelled.
    pub fn new() -> QueryCancel {
        QueryCancel::default()
    }

    /// Stop the query (idempotent).
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        if let Some(interrupt) = self.0.interrupt.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            interrupt();
        }
    }

    /// Whether [`QueryCancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Engines register how to interrupt the running query (and `None` when it ends).
    pub fn set_interrupt(&self, interrupt: Option<Box<dyn Fn() + Send + Sync>>) {
        let mut slot = self.0.interrupt.lock().unwrap_or_else(|p| p.into_inner());
        *slot = interrupt;
        if self.is_cancelled() {
            if let Some(i) = slot.as_ref() {
                i();
            }
        }
    }
}

impl std::fmt::Debug for QueryCancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryCancel").field("cancelled", &self.is_cancelled()).finish()
    }
}

/// Rows of a user query. Cells are JSON values: integers, floats, text, null; blobs as hex strings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct QueryResult {
    /// Column names, in the query's order.
    pub columns: Vec<String>,
    /// Rows, each one cell per column.
    pub rows: Vec<Vec<serde_json::Value>>,
    /// True when the row or byte cap cut the result.
    pub truncated: bool,
}
