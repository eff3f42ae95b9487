//! Shipping through a lake that comes and goes: the catalog server restarting, a connection it
//! dropped, a commit that lost to another shipper's.
//!
//! Every path follows one rule ([`crate::retry`]): a transient error is retried with exponential
//! backoff, the connection attached anew when the error may have killed it. **The final flush** (a
//! finished trace: `causeway ship`, the end of `ship --follow` and of `trace --ship`) retries for
//! the bound ([`ShipOptions::retry_for`]) and then gives up with [`Behind`]: what the lake lacks,
//! which the CLI prints with the command that ships it, and exits non-zero. **A mid-run flush**
//! (`ship --follow` while the trace grows, a host tracer running for days) never ends the shipper:
//! it is retried at the next interval, spaced by the same backoff while the lake keeps failing;
//! nothing is lost meanwhile, the local trace keeps everything, and the final flush ships the rest.
//!
//! Retries ship exactly once: each attempt reads the watermark back from the lake before it ships
//! (`Shipper::ship_upto`), so a flush whose commit landed before the connection dropped is not
//! shipped again, and the small tables a first flush only inserts are inserted by flush 1 alone.

use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use causeway_model::time::fmt_ns;

use super::{Marks, ShipReport, Shipper};
use crate::lake::{self, Access};
use crate::retry::{self, Backoff};
use crate::FleetError;

/// Test hook: `final:DIR` or `mid:DIR` makes the shipper stop once, inside the first final (or
/// mid-run) flush's transaction just before its commit, create `DIR/paused` and wait (up to two
/// minutes) for `DIR/resume`: a test stops the catalog there, deterministically, and the commit
/// meets it stopped.
pub const TEST_PAUSE_ENV: &str = "CAUSEWAY_TEST_SHIP_PAUSE";

/// A trace the lake does not have to its end when the shipper stopped trying: how far each side
/// goes, how long the lake was tried, and why it failed.
#[derive(Debug, Clone)]
pub struct Behind {
    pub node: String,
    pub trace_uid: String,
    /// The watermark the lake had when last reached.
    pub shipped: Marks,
    /// How far the local trace goes.
    pub local: Marks,
    /// How long the lake was retried (zero: the error was not one that passes by itself).
    pub tried_for: Duration,
    /// The last error.
    pub cause: String,
}

impl Behind {
    /// What the lake lacks, in words: `1234 events, 56 NCCL calls`.
    pub fn missing(&self) -> String {
        let (s, l) = (&self.shipped, &self.local);
        let parts: Vec<String> = [
            (l.events - s.events, "events"),
            (l.nccl_calls - s.nccl_calls, "NCCL calls"),
            (l.gpu_samples - s.gpu_samples, "GPU samples"),
            (l.gpu_process_memory - s.gpu_process_memory, "GPU process memory rows"),
            (l.serving_samples - s.serving_samples, "serving samples"),
            (l.gpu_ops - s.gpu_ops, "device ops"),
            (l.gpu_clock_syncs - s.gpu_clock_syncs, "device clock calibrations"),
            (l.gpu_timeline_notes - s.gpu_timeline_notes, "device timeline notes"),
            (l.footprint_syscalls - s.footprint_syscalls, "footprint syscall rows"),
            (l.footprint_cpu - s.footprint_cpu, "footprint CPU rows"),
            (l.footprint_fds - s.footprint_fds, "footprint descriptors"),
            (l.footprint_requests - s.footprint_requests, "footprint requests"),
            (l.footprint_execs - s.footprint_execs, "footprint execs"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if parts.is_empty() {
            "the trace's final rows (its stopped session, its last small tables)".to_string()
        } else {
            parts.join(", ")
        }
    }
}

impl fmt::Display for Behind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the lake lacks {} of node {}'s trace {} (", self.missing(), self.node, self.trace_uid)?;
        if self.tried_for.is_zero() {
            write!(f, "{})", self.cause)
        } else {
            write!(f, "retried for {}: {})", fmt_ns(self.tried_for.as_nanos() as i64), self.cause)
        }
    }
}

impl Shipper {
    /// Ship everything the local trace holds now (a finished trace: all of it), in transactions
    /// of at most `batch_rows` events, waiting out a lake that fails transiently for the retry
    /// bound; then [`FleetError::Behind`].
    pub fn ship_all(&mut self) -> Result<ShipReport, FleetError> {
        self.ship_all_with(&mut |_, _| {})
    }

    /// [`Shipper::ship_all`], telling `on_retry` each error it waits out and for how long.
    pub fn ship_all_with(&mut self, on_retry: &mut dyn FnMut(&FleetError, Duration)) -> Result<ShipReport, FleetError> {
        let mut report = self.report();
        self.ship_rest(&mut report, on_retry)?;
        Ok(report)
    }

    /// Ship while the trace grows, every `interval`, until `stop` says so (asked once per
    /// interval); then ship the rest as [`Shipper::ship_all`] does. Each flush ships up to what the
    /// previous one saw, so rows the tracer writes right after an event (its NCCL row) are
    /// committed before they are shipped. A mid-run flush that fails is told to `on_error` and
    /// tried again at a later interval (spaced by backoff while it keeps failing); nothing moves
    /// until it commits. Between flushes the local trace is let go ([`Shipper::release`]).
    pub fn ship_live(
        &mut self,
        interval: Duration,
        stop: &mut dyn FnMut(&Shipper) -> bool,
        on_error: &mut dyn FnMut(&FleetError),
    ) -> Result<ShipReport, FleetError> {
        let mut report = self.report();
        let mut seen = Marks::default();
        let mut backoff = Backoff::new(self.retry_for);
        let mut retry_at: Option<Instant> = None;
        loop {
            std::thread::sleep(interval);
            if self.broken {
                // `stop` reads the local trace through the connection: a live one
                let _ = self.reconnect();
            }
            if stop(self) {
                break;
            }
            if retry_at.is_some_and(|t| Instant::now() < t) {
                continue;
            }
            let upto = seen;
            match self.attempt(|s| s.local_marks()) {
                Ok(m) => seen = m,
                Err(e) => on_error(&e),
            }
            match self.attempt(|s| s.ship_upto(upto, false, &mut report)) {
                Ok(()) => {
                    backoff.reset();
                    retry_at = None;
                }
                Err(e) => {
                    on_error(&e);
                    // past the bound the lake is still tried, at the longest spacing
                    retry_at = Some(Instant::now() + backoff.next_wait().unwrap_or(retry::MAX_WAIT));
                }
            }
            self.release();
        }
        let result = self.ship_rest(&mut report, &mut |e, _| on_error(e));
        self.release();
        result.map(|()| report)
    }

    /// The final flushes: everything the local trace holds, retried for the bound.
    fn ship_rest(
        &mut self,
        report: &mut ShipReport,
        on_retry: &mut dyn FnMut(&FleetError, Duration),
    ) -> Result<(), FleetError> {
        let started = Instant::now();
        let bound = self.retry_for;
        let result = retry::retry_transient(bound, on_retry, || {
            self.attempt(|s| {
                let upto = s.local_marks()?;
                s.ship_upto(upto, true, report)
            })
        });
        result.map_err(|e| {
            let tried_for = if retry::is_transient(&e) { started.elapsed() } else { Duration::ZERO };
            if report.local == Marks::default() {
                report.local = self.local_marks().unwrap_or_default();
            }
            FleetError::Behind(Box::new(Behind {
                node: self.node.clone(),
                trace_uid: self.trace_uid.clone(),
                shipped: report.shipped,
                local: report.local,
                tried_for,
                // one line: DuckDB's messages carry libpq's newlines
                cause: e.to_string().split_whitespace().collect::<Vec<_>>().join(" "),
            }))
        })
    }

    /// Run `f` on a live connection: attach the lake anew first when the last error may have
    /// killed the connection, and note when this one's error may have.
    fn attempt<T>(&mut self, f: impl FnOnce(&mut Shipper) -> Result<T, FleetError>) -> Result<T, FleetError> {
        if self.broken {
            self.reconnect()?;
        }
        let result = f(self);
        if let Err(e) = &result {
            if retry::breaks_connection(e) {
                self.broken = true;
            }
        }
        result
    }

    /// A new connection to the lake in place of one the catalog dropped. What lived in the old
    /// one goes with it: the local trace's attachment and the events read ahead.
    fn reconnect(&mut self) -> Result<(), FleetError> {
        let conn = lake::connect(&self.lake, &Access::Ship { data_path: self.data_path.clone() })?;
        conn.execute_batch(&format!("SET threads = {}", self.threads))?;
        self.conn = conn;
        self.attached.set(false);
        self.pending = (0, 0);
        self.broken = false;
        Ok(())
    }

    /// The pause of [`TEST_PAUSE_ENV`], taken once by the flush it names.
    pub(super) fn test_pause(&self, finished: bool) {
        let Some(spec) = std::env::var_os(TEST_PAUSE_ENV) else { return };
        let spec = spec.to_string_lossy();
        let Some((which, dir)) = spec.split_once(':') else { return };
        let wanted = match which {
            "final" => finished,
            "mid" => !finished,
            _ => false,
        };
        if !wanted || self.paused.replace(true) {
            return;
        }
        let dir = Path::new(dir);
        let _ = std::fs::write(dir.join("paused"), b"");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !dir.join("resume").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_says_what_is_missing_and_why() {
        let b = Behind {
            node: "gpu-3".into(),
            trace_uid: "abc-1".into(),
            shipped: Marks { events: 100, nccl_calls: 10, gpu_samples: 5, ..Default::default() },
            local: Marks { events: 150, nccl_calls: 12, gpu_samples: 5, ..Default::default() },
            tried_for: Duration::from_secs(3),
            cause: "Connection refused".into(),
        };
        assert_eq!(b.missing(), "50 events, 2 NCCL calls");
        let text = b.to_string();
        assert!(text.starts_with("the lake lacks 50 events, 2 NCCL calls of node gpu-3's trace abc-1"), "{text}");
        assert!(text.contains("retried for 3.000 s: Connection refused"), "{text}");
        let done = Behind { local: b.shipped, tried_for: Duration::ZERO, ..b };
        assert!(done.missing().contains("final rows"));
        assert!(done.to_string().ends_with("(Connection refused)"));
    }
}
