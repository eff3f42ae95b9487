//! The network as the traced threads met it: per (process, peer), their socket calls (sends,
//! receives, connects, accepts) with the bytes moved and exact nearest-rank latencies, the errors,
//! the TCP retransmits and state changes of their sockets; and what the untraced processes did,
//! from the in-kernel aggregates. The waits themselves are attributed by `explain` (a sleep inside
//! a socket call is a `network_wait` on its peer); this is the inventory behind them.

use std::collections::BTreeMap;

use causeway_model::codes::{self, op, OpCode, OpKind};
use causeway_model::time::{ns_to_us, TimeWindow};
use causeway_store::{EventFilter, TraceStore};

use crate::stats::nearest_rank;
use crate::AnalysisError;

/// The ops read: the socket calls, the TCP events and the untraced aggregates.
const NETWORK_OPS: [OpCode; 9] = [
    op::NET_SEND,
    op::NET_RECV,
    op::NET_CONNECT,
    op::NET_ACCEPT,
    op::TCP_RETRANSMIT,
    op::TCP_STATE,
    op::NET_SEND_SUMMARY,
    op::NET_RECV_SUMMARY,
    op::TCP_RETRANSMIT_SUMMARY,
];

/// What one process's threads did with one peer.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct PeerTraffic {
    pub pid: u32,
    pub process: String,
    /// `10.0.0.2:29500`, `[::1]:8000`, `unix socket`; `unknown` when the socket had no peer.
    pub peer: String,
    /// The `net_peers` key socket and TCP events carry in `arg2` (0: unknown).
    pub peer_key: i64,
    pub sends: u64,
    pub bytes_sent: i64,
    pub receives: u64,
    pub bytes_received: i64,
    pub connects: u64,
    pub accepts: u64,
    /// Socket calls that returned an error (EAGAIN is counted in the trace's notes, not here).
    pub errors: u64,
    /// Time inside these socket calls, entry to return.
    pub total_us: f64,
    /// Nearest-rank percentiles and maximum of the calls' durations.
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub retransmits: u64,
    /// TCP state changes of these sockets (connects, closes).
    pub state_changes: u64,
}

/// What the untraced processes did, counted in the kernel.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct UntracedTraffic {
    pub sends: u64,
    pub bytes_sent: i64,
    pub receives: u64,
    pub bytes_received: i64,
    /// Retransmits of sockets no traced thread used.
    pub retransmits: u64,
}

/// The network of a window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct NetworkReport {
    /// Per (pid, peer), the most time in socket calls first.
    pub peers: Vec<PeerTraffic>,
    pub untraced: UntracedTraffic,
}

impl NetworkReport {
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty() && self.untraced == UntracedTraffic::default()
    }
}

/// The network of `window` (of `pid` only, when given; the untraced aggregates are host-wide).
pub fn network_report(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<NetworkReport, AnalysisError> {
    let labels: BTreeMap<i64, String> = store.net_peers()?.into_iter().map(|p| (p.peer, p.label())).collect();
    let names = store.process_names()?;
    let filter = EventFilter { window, ops: Some(NETWORK_OPS.to_vec()), ..Default::default() };
    let mut per: BTreeMap<(u32, i64), (PeerTraffic, Vec<i64>)> = BTreeMap::new();
    let mut untraced = UntracedTraffic::default();
    store.scan_events(&filter, &mut |s| {
        let e = &s.event;
        let code = OpCode::new(e.source, e.op);
        if code == op::NET_SEND_SUMMARY {
            untraced.sends += e.arg1 as u64;
            untraced.bytes_sent += e.arg0;
            return;
        }
        if code == op::NET_RECV_SUMMARY {
            untraced.receives += e.arg1 as u64;
            untraced.bytes_received += e.arg0;
            return;
        }
        if code == op::TCP_RETRANSMIT_SUMMARY {
            untraced.retransmits += e.arg1 as u64;
            return;
        }
        if pid.is_some_and(|p| p != e.pid) {
            return;
        }
        let (t, durations) = per.entry((e.pid, e.arg2)).or_default();
        match code {
            op::TCP_RETRANSMIT => t.retransmits += 1,
            op::TCP_STATE => t.state_changes += 1,
            op::NET_SEND => {
                t.sends += 1;
                t.bytes_sent += e.arg0;
            }
            op::NET_RECV => {
                t.receives += 1;
                t.bytes_received += e.arg0;
            }
            op::NET_CONNECT => t.connects += 1,
            _ => t.accepts += 1, // NET_ACCEPT: the filter reads no other op
        }
        if codes::op_kind(e.source, e.op) == OpKind::SocketCall {
            // a non-blocking connect's EINPROGRESS (-115) is no failure
            if e.ret_code < 0 && e.ret_code != -115 {
                t.errors += 1;
            }
            durations.push(e.dur_ns);
        }
    })?;
    let mut peers: Vec<PeerTraffic> = per
        .into_iter()
        .map(|((pid, key), (mut t, mut durations))| {
            durations.sort_unstable();
            t.pid = pid;
            t.process = names.get(&pid).cloned().unwrap_or_default();
            t.peer_key = key;
            t.peer = labels.get(&key).cloned().unwrap_or_else(|| "unknown".into());
            t.total_us = ns_to_us(durations.iter().sum());
            t.p50_us = ns_to_us(nearest_rank(&durations, 500).unwrap_or(0));
            t.p99_us = ns_to_us(nearest_rank(&durations, 990).unwrap_or(0));
            t.max_us = ns_to_us(durations.last().copied().unwrap_or(0));
            t
        })
        .collect();
    peers.sort_by(|a, b| b.total_us.total_cmp(&a.total_us).then(a.pid.cmp(&b.pid)).then(a.peer.cmp(&b.peer)));
    Ok(NetworkReport { peers, untraced })
}
