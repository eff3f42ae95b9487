//! Resource subscriptions: a trace that is still being written (`causeway trace --all` beside
//! `causeway mcp`) tells its subscribers when its chains change.
//!
//! A subscription to any resource of a trace (`causeway://traces/{trace}/...`; `causeway://schema`
//! is the first trace's) starts one watcher for that session and URI. It polls the file's
//! [`FileVersion`] every [`POLL`] (a `stat` of the file and its WAL: no query), and only when it
//! changed re-ranks the chains (the server's shared, cached explanation), at most once per
//! [`MIN_RERANK`] or five times the last ranking's duration, whichever is longer: a trace written
//! without pause is ranked at a steady pace, never on every commit. `notifications/resources/updated`
//! goes out when the ranking has a chain (by its stable key) it did not have, or a different top
//! chain; a change in figures alone is not news. `causeway://traces` is updated when the list of
//! traces grows (`capture_trace`). Any other URI is accepted and never updated.
//!
//! The first ranking is taken before `resources/subscribe` answers (before rmcp acknowledges a
//! `subscriptions/listen`), so a change made after the answer is always news. A watcher ends at `resources/unsubscribe`, when its session ends (the
//! session's [`Watches`] is dropped, or a notification cannot be sent), or when a 2026-07-28
//! `subscriptions/listen` request ends.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use causeway_model::time::TimeWindow;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;

use crate::handler::ServerState;
use crate::traces::{FileVersion, TraceRef};

/// How often a watcher looks at its file.
pub const POLL: Duration = Duration::from_millis(500);
/// The shortest time between two rankings of a changing trace.
pub const MIN_RERANK: Duration = Duration::from_secs(2);
/// The first ranking, taken while `resources/subscribe` waits, gives up after this long (the
/// watcher then starts from "no chains").
const FIRST_RANKING_LIMIT: Duration = Duration::from_secs(30);

/// What a URI watches.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `causeway://traces`: the list of traces.
    TraceList,
    /// A resource of one trace (by name or index, as the URI has it).
    Trace(TraceRef),
    /// Anything else: accepted, never updated.
    Nothing,
}

/// The watched thing of a URI.
pub fn target(uri: &str) -> Target {
    if uri == "causeway://traces" {
        return Target::TraceList;
    }
    if uri == "causeway://schema" {
        return Target::Trace(TraceRef::Index(0));
    }
    match uri.strip_prefix("causeway://traces/").and_then(|r| r.split('/').next()) {
        Some(name) if !name.is_empty() => Target::Trace(TraceRef::Name(name.to_string())),
        _ => Target::Nothing,
    }
}

/// What a ranking said, as far as subscribers care: every chain's key and the top chain's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    keys: BTreeSet<String>,
    top: Option<String>,
}

impl Ranking {
    /// The chains of an explanation, in rank order, by their stable keys.
    pub fn of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Ranking {
        let mut r = Ranking::default();
        for k in keys {
            if r.top.is_none() {
                r.top = Some(k.to_string());
            }
            r.keys.insert(k.to_string());
        }
        r
    }

    /// News to a subscriber: a chain `self` did not have, or another top chain.
    pub fn is_news(&self, newer: &Ranking) -> bool {
        newer.top != self.top || !newer.keys.is_subset(&self.keys)
    }
}

/// Rank a trace's chains now (the server's cached explanation): the file version the ranking is
/// of, and the ranking (None: the trace could not be read, or it does not exist yet).
fn rank(state: &ServerState, r: &TraceRef) -> (Option<FileVersion>, Option<Ranking>) {
    let Ok(entry) = state.traces.resolve(Some(r)) else { return (None, None) };
    let (e, version) = state.traces.explanation_versioned(&entry, TimeWindow::ALL, None, None);
    (version, e.ok().map(|e| Ranking::of(e.chains.iter().map(|c| c.key.as_str()))))
}

/// Where a watcher sends its updates.
#[derive(Clone)]
pub enum Notifier {
    /// `resources/subscribe` (protocol up to 2025-11-25): a notification to the session.
    Peer(Peer<RoleServer>),
    /// `subscriptions/listen` (2026-07-28): on that request's stream.
    Listen(SubscriptionSink),
}

impl Notifier {
    /// Send `notifications/resources/updated`; false when it can no longer be sent.
    async fn updated(&self, uri: &str) -> bool {
        match self {
            Notifier::Peer(p) => p.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_ok(),
            Notifier::Listen(s) => s.notify_resource_updated(uri).await.is_ok(),
        }
    }
}

/// The first look at a target, taken before the subscription is acknowledged.
pub struct Baseline {
    target: Target,
    traces: usize,
    version: Option<FileVersion>,
    ranking: Option<Ranking>,
}

/// Take the first look at `uri`'s target (a ranking, on a blocking thread, bounded in time).
pub async fn baseline(state: &Arc<ServerState>, uri: &str) -> Baseline {
    let target = target(uri);
    let traces = state.traces.len();
    let (version, ranking) = match &target {
        Target::Trace(r) => {
            let (s, r) = (state.clone(), r.clone());
            let job = tokio::task::spawn_blocking(move || rank(&s, &r));
            match tokio::time::timeout(FIRST_RANKING_LIMIT, job).await {
                Ok(Ok(x)) => x,
                _ => (None, None),
            }
        }
        _ => (None, None),
    };
    Baseline { target, traces, version, ranking }
}

/// [`baseline`] from code that cannot await (rmcp asks for a `subscriptions/listen` filter
/// before it acknowledges the request): this thread ranks, the runtime told it blocks.
pub fn baseline_now(state: &ServerState, uri: &str) -> Baseline {
    let look = || {
        let target = target(uri);
        let traces = state.traces.len();
        let (version, ranking) = match &target {
            Target::Trace(r) => rank(state, r),
            _ => (None, None),
        };
        Baseline { target, traces, version, ranking }
    };
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(look),
        _ => look(),
    }
}

/// Watch one URI until `stop`, sending updates through `notify`.
pub async fn watch(state: Arc<ServerState>, uri: String, first: Baseline, notify: Notifier, stop: CancellationToken) {
    let Baseline { target, mut traces, version, ranking } = first;
    if target == Target::Nothing {
        return;
    }
    tracing::info!("resource {uri}: watching for new chains");
    // the version last ranked (None: not ranked yet, or the ranking failed: try again)
    let mut ranked: Option<Option<FileVersion>> = ranking.as_ref().map(|_| version);
    let mut known = ranking.unwrap_or_default();
    let (mut last, mut gap) = (Instant::now(), MIN_RERANK);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(POLL) => {}
        }
        let news = match &target {
            Target::Nothing => break,
            Target::TraceList => {
                let n = state.traces.len();
                std::mem::replace(&mut traces, n) != n
            }
            Target::Trace(r) => {
                let now = state.traces.resolve(Some(r)).ok().map(|e| e.version());
                let unchanged = match (&ranked, &now) {
                    (Some(v), Some(n)) => v == n,
                    (_, None) => true, // no such trace (yet)
                    (None, Some(_)) => false,
                };
                if unchanged || last.elapsed() < gap {
                    continue;
                }
                let (s, r2) = (state.clone(), r.clone());
                let started = Instant::now();
                let Ok((version, ranking)) = tokio::task::spawn_blocking(move || rank(&s, &r2)).await else { break };
                last = Instant::now();
                gap = MIN_RERANK.max(started.elapsed() * 5);
                match ranking {
                    Some(newer) => {
                        ranked = Some(version);
                        let news = known.is_news(&newer);
                        if news {
                            tracing::info!(
                                "resource {uri}: the chains changed ({} now, top {})",
                                newer.keys.len(),
                                newer.top.as_deref().unwrap_or("none")
                            );
                        }
                        known = newer;
                        news
                    }
                    None => {
                        ranked = None;
                        false
                    }
                }
            }
        };
        if news && !notify.updated(&uri).await {
            break; // the session is gone
        }
    }
    tracing::debug!("resource {uri}: no longer watched");
}

/// One session's subscriptions: a watcher per URI; and the first looks taken for a
/// `subscriptions/listen` before its acknowledgment, until its watchers start.
#[derive(Default)]
pub struct Watches(Mutex<HashMap<String, CancellationToken>>, Mutex<HashMap<String, Baseline>>);

impl Watches {
    /// Keep the first look at `uri` for the listen request being acknowledged.
    pub fn keep_first(&self, uri: String, first: Baseline) {
        self.1.lock().unwrap_or_else(|p| p.into_inner()).insert(uri, first);
    }

    /// The first look kept for `uri`, if any.
    pub fn take_first(&self, uri: &str) -> Option<Baseline> {
        self.1.lock().unwrap_or_else(|p| p.into_inner()).remove(uri)
    }

    /// Start watching `uri` (again: a second subscribe to the same URI replaces the first).
    pub fn start(&self, state: Arc<ServerState>, uri: String, first: Baseline, notify: Notifier) {
        let stop = CancellationToken::new();
        if let Some(old) = self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(uri.clone(), stop.clone()) {
            old.cancel();
        }
        tokio::spawn(watch(state, uri, first, notify, stop));
    }

    /// Stop watching `uri` (nothing when it was not watched).
    pub fn stop(&self, uri: &str) {
        if let Some(t) = self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uri) {
            t.cancel();
        }
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        for t in self.0.get_mut().unwrap_or_else(|p| p.into_inner()).values() {
            t.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_what_they_watch() {
        assert_eq!(target("causeway://traces"), Target::TraceList);
        assert_eq!(target("causeway://schema"), Target::Trace(TraceRef::Index(0)));
        assert_eq!(target("causeway://traces/live/chains"), Target::Trace(TraceRef::Name("live".into())));
        assert_eq!(target("causeway://traces/live/chains/c1"), Target::Trace(TraceRef::Name("live".into())));
        assert_eq!(target("test://watched-resource"), Target::Nothing);
        assert_eq!(target("causeway://traces/"), Target::Nothing);
    }

    #[test]
    fn news_is_a_new_chain_or_a_new_top_chain() {
        let old = Ranking::of(["a", "b"]);
        assert!(!old.is_news(&Ranking::of(["a", "b"])));
        assert!(!old.is_news(&Ranking::of(["a"])), "a chain that went away is not news");
        assert!(old.is_news(&Ranking::of(["a", "b", "c"])), "a new chain");
        assert!(old.is_news(&Ranking::of(["b", "a"])), "another top chain");
        assert!(Ranking::default().is_news(&Ranking::of(["a"])));
        assert!(!Ranking::default().is_news(&Ranking::default()));
    }
}
