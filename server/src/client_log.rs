//! The server's own log, sent to MCP clients as `notifications/message` (the logging capability).
//!
//! [`client_log_layer`] is a `tracing` layer (`causeway mcp` installs it beside the stderr log): an
//! event of a Causeway crate (target `causeway*`; never rmcp's, tokio's or hyper's, so sending a
//! notification cannot log about itself in a loop) goes to every session whose client asked for
//! its level or a lower one with `logging/setLevel`. A session that never asked gets warnings and
//! errors (the spec lets the server choose until the client does). Each session has one queue and
//! one task that sends from it, so its messages arrive in the order they were logged; a session
//! that ended drops out at its next message.

// Logging is deprecated by SEP-2577 (2026-07-28); it is what the 2025 protocols' clients use.
#![allow(deprecated)]

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{DynFilterFn, LevelFilter};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Ranks of the MCP levels, `debug` (0) to `emergency` (7); [`OFF`] is above them all.
const OFF: u8 = u8::MAX;
/// What a session gets before its client sets a level: `warning` and above.
pub const DEFAULT_LEVEL: LoggingLevel = LoggingLevel::Warning;

/// The lowest level any live session wants (a rank), so that an event no one wants costs one load.
static LOWEST_WANTED: AtomicU8 = AtomicU8::new(OFF);
static SINKS: Mutex<Vec<Weak<LogSink>>> = Mutex::new(Vec::new());

/// The rank of an MCP level (`debug` 0 .. `emergency` 7).
pub fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The MCP level of a `tracing` level (`trace` is sent as `debug`).
pub fn mcp_level(level: &Level) -> LoggingLevel {
    match *level {
        Level::ERROR => LoggingLevel::Error,
        Level::WARN => LoggingLevel::Warning,
        Level::INFO => LoggingLevel::Info,
        _ => LoggingLevel::Debug,
    }
}

/// One session's end of the log: the level its client wants and the queue to its sending task.
pub struct LogSink {
    level: AtomicU8,
    tx: mpsc::UnboundedSender<LoggingMessageNotificationParam>,
}

impl LogSink {
    /// A sink sending to `peer` from a task of the current runtime, at [`DEFAULT_LEVEL`] until
    /// [`LogSink::set_level`]. It stays registered while the returned `Arc` lives.
    pub fn start(peer: Peer<RoleServer>) -> Arc<LogSink> {
        let (tx, mut rx) = mpsc::unbounded_channel::<LoggingMessageNotificationParam>();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if peer.notify_logging_message(m).await.is_err() {
                    break;
                }
            }
        });
        let sink = Arc::new(LogSink { level: AtomicU8::new(rank(DEFAULT_LEVEL)), tx });
        let mut sinks = SINKS.lock().unwrap_or_else(|p| p.into_inner());
        sinks.retain(|s| s.strong_count() > 0);
        sinks.push(Arc::downgrade(&sink));
        drop(sinks);
        recompute_lowest();
        sink
    }

    /// `logging/setLevel`: from now on this session gets `level` and above.
    pub fn set_level(&self, level: LoggingLevel) {
        self.level.store(rank(level), Ordering::Relaxed);
        recompute_lowest();
    }
}

impl Drop for LogSink {
    fn drop(&mut self) {
        // this sink can no longer be upgraded: the lowest level is computed without it
        recompute_lowest();
    }
}

/// The sinks alive now. The lock is released before the caller drops them (a sink's drop takes it).
fn live_sinks() -> Vec<Arc<LogSink>> {
    SINKS.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect()
}

fn recompute_lowest() {
    let lowest = live_sinks().iter().map(|s| s.level.load(Ordering::Relaxed)).min();
    LOWEST_WANTED.store(lowest.unwrap_or(OFF), Ordering::Relaxed);
}

/// Only Causeway's own events go to clients.
fn ours(target: &str) -> bool {
    target.starts_with("causeway")
}

/// The `tracing` layer that sends the server's log to the clients that asked for it, with its own
/// filter (a layer's filter decides for that layer only; the stderr log keeps `CAUSEWAY_LOG`):
/// only Causeway's callsites are ever looked at, only at debug and above, and an event only when
/// some session wants its level.
pub fn client_log_layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let wanted = DynFilterFn::new(|m: &tracing::Metadata<'_>, _: &Context<'_, S>| {
        m.is_event() && ours(m.target()) && rank(mcp_level(m.level())) >= LOWEST_WANTED.load(Ordering::Relaxed)
    })
    .with_callsite_filter(|m| if ours(m.target()) { Interest::sometimes() } else { Interest::never() })
    .with_max_level_hint(LevelFilter::DEBUG);
    ClientLogLayer.with_filter(wanted)
}

/// The layer [`client_log_layer`] filters.
#[derive(Debug, Default, Clone, Copy)]
struct ClientLogLayer;

impl<S: Subscriber> Layer<S> for ClientLogLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if !ours(meta.target()) {
            return;
        }
        let level = mcp_level(meta.level());
        let r = rank(level);
        if r < LOWEST_WANTED.load(Ordering::Relaxed) {
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        for s in live_sinks().iter().filter(|s| r >= s.level.load(Ordering::Relaxed)) {
            let mut m = LoggingMessageNotificationParam::new(level, serde_json::Value::String(text.0.clone()));
            m.logger = Some(meta.target().to_string());
            let _ = s.tx.send(m);
        }
    }
}

/// An event as one line: its message, then its other fields as `name=value`.
#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, "{}={value}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rank_as_the_spec_orders_them() {
        let all = [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ];
        assert!(all.windows(2).all(|w| rank(w[0]) < rank(w[1])));
        assert_eq!(mcp_level(&Level::WARN), LoggingLevel::Warning);
        assert_eq!(mcp_level(&Level::TRACE), LoggingLevel::Debug);
        assert!(ours("causeway_server::handler") && !ours("rmcp::service"));
    }
}
