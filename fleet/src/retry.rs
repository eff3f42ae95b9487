//! Which lake errors pass by themselves, and waiting them out for a bounded time.
//!
//! One classification serves every shipping path (`causeway ship`, `ship --follow`, `trace --ship`'s
//! mid-run and final flushes, a host tracer that runs for days): an error is **transient** when the
//! catalog server is away or restarting (connection refused, reset or closed, "the database system
//! is shutting down" / "starting up", "terminating connection", a timeout) or when DuckLake rolled a
//! commit back for a conflict with another writer (serialization failures, deadlocks, a snapshot
//! committed first). Anything else (a refused password, a missing extension, a trace that is not a
//! trace) fails at once: retrying it only hides it.
//!
//! A transient error is retried with exponential backoff ([`Backoff`]) until a bound the user sets
//! (`ship --retry-for`, `trace --ship-retry-for`, [`DEFAULT_RETRY_FOR`]). Retrying is exactly once
//! because every attempt re-reads the trace's watermark from the lake before it ships: a flush whose
//! commit did land (the connection dropped after the server committed) is not shipped again.

use std::time::{Duration, Instant};

use crate::FleetError;

/// How long a shipper waits out a lake that fails transiently before it gives up (and says what
/// the lake lacks): long enough for a catalog server's restart or failover, short enough that a
/// job's end is not held up for long by a lake that is gone.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(120);
/// The first wait after a transient failure; each next one doubles.
const FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest wait between two tries.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// What an error's message says of the catalog server or the connection to it: it is away,
/// restarting or dropped us (libpq's and PostgreSQL's own wording, lower-cased).
const CONNECTION: [&str; 17] = [
    "connection refused",
    "connection reset",
    "connection closed",
    "connection timed out",
    "server closed the connection",
    "could not connect",
    "no connection to the server",
    "terminating connection",
    "the database system is shutting down",
    "the database system is starting up",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "does not answer",
    "broken pipe",
    "ssl syscall error",
    "eof detected",
    "timeout expired",
];

/// What an error's message says of a commit that lost to another writer's (DuckLake's conflict
/// check, PostgreSQL's serialization failure or deadlock, two writers' snapshot ids).
const CONFLICT: [&str; 5] =
    ["conflict", "could not serialize", "deadlock detected", "duplicate key", "serialization failure"];

/// Whether `msg` names a commit conflict worth redoing.
pub(crate) fn is_conflict_message(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    CONFLICT.iter().any(|p| m.contains(p))
}

/// Whether `msg` names a catalog server that is away, restarting or dropped the connection. A
/// query on a connection the server closed under it often fails without a word from libpq:
/// DuckDB's PostgreSQL extension then says `Failed to execute query "...": ` and nothing after it
/// (a DuckLake commit meeting a stopped catalog: `Failed to commit: Failed to execute query
/// "ROLLBACK": `).
pub(crate) fn is_connection_message(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    CONNECTION.iter().any(|p| m.contains(p)) || (m.contains("failed to execute query") && m.trim_end().ends_with(':'))
}

/// Whether `e` may pass by itself: the catalog away or restarting, or a commit conflict.
pub fn is_transient(e: &FleetError) -> bool {
    match e {
        FleetError::Unreachable(m) | FleetError::Engine(m) => is_connection_message(m) || is_conflict_message(m),
        _ => false,
    }
}

/// Whether `e` may have left the connection unusable (so the next try connects again).
pub(crate) fn breaks_connection(e: &FleetError) -> bool {
    match e {
        FleetError::Unreachable(m) | FleetError::Engine(m) => is_connection_message(m),
        _ => false,
    }
}

/// Exponential backoff over a bounded time, counted from the first failure.
#[derive(Debug, Clone)]
pub struct Backoff {
    bound: Duration,
    first_failure: Option<Instant>,
    next: Duration,
}

impl Backoff {
    pub fn new(bound: Duration) -> Backoff {
        Backoff { bound, first_failure: None, next: FIRST_WAIT }
    }

    /// After a failure: how long to wait before the next try, or `None` when the bound is spent.
    /// The last wait is cut to end at the bound, so the last try is made then.
    pub fn next_wait(&mut self) -> Option<Duration> {
        let since = *self.first_failure.get_or_insert_with(Instant::now);
        let left = self.bound.checked_sub(since.elapsed()).filter(|d| !d.is_zero())?;
        let wait = self.next.min(left);
        self.next = (self.next * 2).min(MAX_WAIT);
        Some(wait)
    }

    /// How long the failures have lasted (zero when none).
    pub fn failing_for(&self) -> Duration {
        self.first_failure.map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// A success: the next failure starts a new bound.
    pub fn reset(&mut self) {
        self.first_failure = None;
        self.next = FIRST_WAIT;
    }
}

/// Run `f` until it succeeds, fails with an error that is not [transient](is_transient), or the
/// bound is spent (the last error is returned). `on_retry` hears each error retried and the wait.
pub fn retry_transient<T>(
    bound: Duration,
    on_retry: &mut dyn FnMut(&FleetError, Duration),
    mut f: impl FnMut() -> Result<T, FleetError>,
) -> Result<T, FleetError> {
    let mut backoff = Backoff::new(bound);
    loop {
        match f() {
            Err(e) if is_transient(&e) => match backoff.next_wait() {
                Some(wait) => {
                    on_retry(&e, wait);
                    std::thread::sleep(wait);
                }
                None => return Err(e),
            },
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_going_away_and_conflicts_are_transient_and_the_rest_is_not() {
        let transient = [
            "IO Error: Unable to connect to Postgres at \"host=127.0.0.1\": connection to server at \"127.0.0.1\", \
             port 5432 failed: Connection refused",
            "Failed to execute query: FATAL:  terminating connection due to administrator command",
            "connection to server failed: FATAL:  the database system is shutting down",
            "FATAL:  the database system is starting up",
            "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally",
            "could not receive data from server: Connection reset by peer",
            "no connection to the server",
            "TransactionContext Error: Failed to commit: Transaction conflict - attempting to insert into table",
            "ERROR:  could not serialize access due to concurrent update",
            "duplicate key value violates unique constraint \"ducklake_snapshot_pkey\"",
            "the catalog at `host=h` does not answer: timeout expired",
            "TransactionContext Error: Failed to commit: Failed to execute query \"ROLLBACK\": ",
        ];
        for m in transient {
            assert!(is_transient(&FleetError::Engine(m.into())), "{m}");
        }
        assert!(breaks_connection(&FleetError::Engine(transient[1].into())));
        assert!(!breaks_connection(&FleetError::Engine(transient[7].into())), "a conflict keeps the connection");
        for m in [
            "the catalog refused causeway_ship: password authentication failed for user",
            "Binder Error: Table \"nope\" does not exist",
            "permission denied for table ducklake_snapshot",
            "Failed to execute query \"INSERT ...\": ERROR:  permission denied for table ducklake_snapshot",
        ] {
            assert!(!is_transient(&FleetError::Engine(m.into())), "{m}");
        }
        assert!(!is_transient(&FleetError::Local("connection refused".into())), "the local trace is not the lake");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_stops_at_the_bound() {
        let mut b = Backoff::new(Duration::from_secs(3600));
        let waits: Vec<_> = (0..10).map(|_| b.next_wait().unwrap()).collect();
        assert_eq!(waits[0], FIRST_WAIT);
        assert_eq!(waits[1], FIRST_WAIT * 2);
        assert_eq!(*waits.last().unwrap(), MAX_WAIT);
        b.reset();
        assert_eq!(b.next_wait(), Some(FIRST_WAIT));
        let mut spent = Backoff::new(Duration::ZERO);
        assert_eq!(spent.next_wait(), None);
        let mut short = Backoff::new(Duration::from_millis(50));
        assert!(short.next_wait().unwrap() <= Duration::from_millis(50), "the last wait ends at the bound");
    }

    #[test]
    fn retrying_stops_at_success_at_a_lasting_error_and_at_the_bound() {
        let mut heard = 0;
        let mut n = 0;
        let r = retry_transient(Duration::from_secs(10), &mut |_, _| heard += 1, || {
            n += 1;
            if n < 3 {
                Err(FleetError::Engine("Connection refused".into()))
            } else {
                Ok(n)
            }
        });
        assert_eq!((r.unwrap(), heard), (3, 2));
        let mut n = 0;
        let r: Result<(), _> = retry_transient(Duration::from_secs(10), &mut |_, _| {}, || {
            n += 1;
            Err(FleetError::BadLake("no".into()))
        });
        assert!(r.is_err() && n == 1, "a lasting error is not retried");
        let started = Instant::now();
        let r: Result<(), _> = retry_transient(Duration::from_millis(300), &mut |_, _| {}, || {
            Err(FleetError::Engine("the database system is shutting down".into()))
        });
        assert!(r.is_err());
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
}
