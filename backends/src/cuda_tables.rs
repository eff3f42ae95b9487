//! The tables beside `events` that the probes fill: `launch_configs` (one row per distinct
//! [`LaunchConfig`], keyed by [`LaunchConfig::key`], which launches carry in
//! `events.launch_config`), `kernel_names` ([`KernelName`] per (pid, handle)), `attachments`
//! ([`LibraryAttach`] per session), `nccl_calls` ([`NcclCall`] per NCCL call event),
//! `serving_samples` ([`ServingSample`]s scraped from a serving engine) and `process_ranks`
//! ([`ProcessRank`] per pid); the NVML tables are `nvml_tables.rs`'.
//! Their DDL is in [`crate::schema::NATIVE_DDL`]; this module holds
//! what every engine shares: the INSERTs with their parameters as [`SqlParam`]s (each engine binds
//! them), the SELECTs, and the checked decoding of their rows (a value that does not fit its field
//! is an error naming the table, never a wrapped number).

use std::path::Path;

use causeway_model::time::TimeWindow;
use causeway_model::{
    KernelName, LaunchConfig, LibraryAttach, NcclCall, NetPeer, ProcessCgroup, ProcessRank, ServingSample,
};

use crate::schema::SqlParam;
use crate::{Result, StoreError};

/// Adds a launch configuration unless its key is stored already (configurations never change).
pub(crate) const INSERT_LAUNCH_CONFIG_SQL: &str = "INSERT OR IGNORE INTO launch_configs (key, grid_x, grid_y, grid_z, \
block_x, block_y, block_z, shared_mem_bytes, cluster_x, cluster_y, cluster_z) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Every stored launch configuration, by key.
pub(crate) const SELECT_LAUNCH_CONFIGS_SQL: &str = "SELECT key, grid_x, grid_y, grid_z, block_x, block_y, block_z, \
shared_mem_bytes, cluster_x, cluster_y, cluster_z FROM launch_configs ORDER BY key";

/// Adds a kernel name; a later name for the same (pid, handle) replaces the earlier one.
pub(crate) const INSERT_KERNEL_NAME_SQL: &str =
    "INSERT OR REPLACE INTO kernel_names (pid, handle, name, mangled, how) VALUES (?, ?, ?, ?, ?)";

/// Adds one socket peer (a key is the same peer wherever it is written).
pub(crate) const INSERT_NET_PEER_SQL: &str =
    "INSERT OR IGNORE INTO net_peers (peer, family, address, port) VALUES (?, ?, ?, ?)";

/// Every socket peer, by key.
pub(crate) const SELECT_NET_PEERS_SQL: &str = "SELECT peer, family, address, port FROM net_peers ORDER BY peer";

/// The parameters of [`INSERT_NET_PEER_SQL`], in order.
pub(crate) fn net_peer_params(p: &NetPeer) -> [SqlParam<'_>; 4] {
    [
        SqlParam::Int(p.peer),
        SqlParam::Int(i64::from(p.family)),
        SqlParam::Text(&p.address),
        SqlParam::Int(i64::from(p.port)),
    ]
}

/// A row of [`SELECT_NET_PEERS_SQL`]: the family and the port must fit.
pub(crate) fn net_peer_from(db: &Path, (peer, family, address, port): (i64, i64, String, i64)) -> Result<NetPeer> {
    let fits16 = |column: &str, v: i64| {
        u16::try_from(v).map_err(|_| damaged(db, format!("net_peers.{column} holds {v}, not a 16-bit unsigned value")))
    };
    Ok(NetPeer { peer, family: fits16("family", family)?, address, port: fits16("port", port)? })
}

/// Every kernel name, by (pid, handle).
pub(crate) const SELECT_KERNEL_NAMES_SQL: &str =
    "SELECT pid, handle, name, mangled, how FROM kernel_names ORDER BY pid, handle";

/// Appends one attachment of a session.
pub(crate) const INSERT_ATTACHMENT_SQL: &str =
    "INSERT INTO attachments (session_id, pid, path, kind, how, attached_at, \
complete, symbols, missing, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Every attachment, by session and then in the order the probes were placed.
pub(crate) const SELECT_ATTACHMENTS_SQL: &str = "SELECT session_id, pid, path, kind, how, attached_at, complete, \
symbols, missing, note FROM attachments ORDER BY session_id, attached_at, pid, path, kind, how";

/// Appends the detail of one NCCL call.
pub(crate) const INSERT_NCCL_CALL_SQL: &str =
    "INSERT INTO nccl_calls (pid, tid, timestamp, op, comm_hash, comm, rank, \
nranks, seq, count, datatype, redop, peer, device) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The columns of `nccl_calls`, in table order.
const NCCL_CALL_COLUMNS: &str =
    "pid, tid, timestamp, op, comm_hash, comm, rank, nranks, seq, count, datatype, redop, peer, device";

/// Records a process's rank; a later row for the same pid replaces the earlier one.
pub(crate) const INSERT_PROCESS_RANK_SQL: &str = "INSERT OR REPLACE INTO process_ranks (pid, rank, local_rank, \
world_size, local_world_size, launcher, job) VALUES (?, ?, ?, ?, ?, ?, ?)";

/// Every process rank, by pid.
pub(crate) const SELECT_PROCESS_RANKS_SQL: &str =
    "SELECT pid, rank, local_rank, world_size, local_world_size, launcher, job FROM process_ranks ORDER BY pid";

/// The parameters of [`INSERT_PROCESS_RANK_SQL`], in order.
pub(crate) fn process_rank_params(r: &ProcessRank) -> [SqlParam<'_>; 7] {
    let i = |v: i32| SqlParam::Int(i64::from(v));
    [
        SqlParam::Int(i64::from(r.pid)),
        i(r.rank),
        i(r.local_rank),
        i(r.world_size),
        i(r.local_world_size),
        SqlParam::Text(&r.launcher),
        SqlParam::Text(&r.job),
    ]
}

/// A row of [`SELECT_PROCESS_RANKS_SQL`].
pub(crate) fn process_rank_from(db: &Path, n: [i64; 5], launcher: String, job: String) -> Result<ProcessRank> {
    let small = |column: &str, v: i64| fits_i32(db, "process_ranks", column, v);
    Ok(ProcessRank {
        pid: fits_u32(db, "process_ranks", "pid", n[0])?,
        rank: small("rank", n[1])?,
        local_rank: small("local_rank", n[2])?,
        world_size: small("world_size", n[3])?,
        local_world_size: small("local_world_size", n[4])?,
        launcher,
        job,
    })
}

/// Records a process's cgroup; a later row for the same pid replaces the earlier one.
pub(crate) const INSERT_PROCESS_CGROUP_SQL: &str = "INSERT OR REPLACE INTO process_cgroups (pid, cgroup_id, path, \
runtime, container_id, container, pod, namespace) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

/// Every process's cgroup, by pid.
pub(crate) const SELECT_PROCESS_CGROUPS_SQL: &str =
    "SELECT pid, cgroup_id, path, runtime, container_id, container, pod, namespace FROM process_cgroups ORDER BY pid";

/// The parameters of [`INSERT_PROCESS_CGROUP_SQL`], in order.
pub(crate) fn process_cgroup_params(c: &ProcessCgroup) -> [SqlParam<'_>; 8] {
    [
        SqlParam::Int(i64::from(c.pid)),
        SqlParam::Int(c.cgroup_id),
        SqlParam::Text(&c.path),
        SqlParam::Text(&c.runtime),
        SqlParam::Text(&c.container_id),
        SqlParam::Text(&c.container),
        SqlParam::Text(&c.pod),
        SqlParam::Text(&c.namespace),
    ]
}

/// A row of [`SELECT_PROCESS_CGROUPS_SQL`]: (pid, cgroup id) and the six texts.
pub(crate) fn process_cgroup_from(db: &Path, n: [i64; 2], t: [String; 6]) -> Result<ProcessCgroup> {
    let [path, runtime, container_id, container, pod, namespace] = t;
    Ok(ProcessCgroup {
        pid: fits_u32(db, "process_cgroups", "pid", n[0])?,
        cgroup_id: n[1],
        path,
        runtime,
        container_id,
        container,
        pod,
        namespace,
    })
}

/// Appends one serving engine sample.
pub(crate) const INSERT_SERVING_SAMPLE_SQL: &str =
    "INSERT INTO serving_samples (timestamp, pid, engine, metric, labels, le, value) VALUES (?, ?, ?, ?, ?, ?, ?)";

/// The serving samples of a window, by time, pid, metric, labels and bound (within one metric
/// `le` is always or never NULL, so both engines order alike).
pub(crate) fn select_serving_samples_sql(window: &TimeWindow) -> String {
    format!(
        "SELECT timestamp, pid, engine, metric, labels, le, value FROM serving_samples {} \
         ORDER BY timestamp, pid, metric, labels, le",
        window_clause(window)
    )
}

/// The parameters of [`INSERT_SERVING_SAMPLE_SQL`], in order.
pub(crate) fn serving_sample_params(s: &ServingSample) -> [SqlParam<'_>; 7] {
    [
        SqlParam::Int(s.ts_ns),
        SqlParam::Int(i64::from(s.pid)),
        SqlParam::Text(&s.engine),
        SqlParam::Text(&s.metric),
        SqlParam::Text(&s.labels),
        s.le.map_or(SqlParam::Null, SqlParam::Real),
        SqlParam::Real(s.value),
    ]
}

/// A row of [`select_serving_samples_sql`]: the pid must fit.
pub(crate) fn serving_sample_from(
    db: &Path,
    (ts_ns, pid, engine, metric, labels, le, value): (i64, i64, String, String, String, Option<f64>, f64),
) -> Result<ServingSample> {
    Ok(ServingSample { ts_ns, pid: fits_u32(db, "serving_samples", "pid", pid)?, engine, metric, labels, le, value })
}

/// `WHERE` over `timestamp` for `window`, both ends included (integers: nothing user-written is
/// spliced); empty for the whole trace.
pub(crate) fn window_clause(window: &TimeWindow) -> String {
    let mut cond = Vec::new();
    if let Some(from) = window.from_ns {
        cond.push(format!("timestamp >= {from}"));
    }
    if let Some(to) = window.to_ns {
        cond.push(format!("timestamp <= {to}"));
    }
    if cond.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", cond.join(" AND "))
    }
}

/// The NCCL calls of a window, in time order.
pub(crate) fn select_nccl_calls_sql(window: &TimeWindow) -> String {
    format!("SELECT {NCCL_CALL_COLUMNS} FROM nccl_calls {} ORDER BY timestamp, pid, tid", window_clause(window))
}

/// The parameters of [`INSERT_NCCL_CALL_SQL`], in order.
pub(crate) fn nccl_call_params(c: &NcclCall) -> [SqlParam<'static>; 14] {
    let i = |v: i32| SqlParam::Int(i64::from(v));
    [
        SqlParam::Int(i64::from(c.pid)),
        SqlParam::Int(i64::from(c.tid)),
        SqlParam::Int(c.ts_ns),
        SqlParam::Int(i64::from(c.op)),
        SqlParam::Int(c.comm_hash),
        SqlParam::Int(c.comm),
        i(c.rank),
        i(c.nranks),
        SqlParam::Int(c.seq),
        SqlParam::Int(c.count),
        i(c.datatype),
        i(c.redop),
        i(c.peer),
        i(c.device),
    ]
}

/// A row of [`select_nccl_calls_sql`]: every value must fit its field.
pub(crate) fn nccl_call_from(db: &Path, row: [i64; 14]) -> Result<NcclCall> {
    let small = |column: &str, v: i64| fits_i32(db, "nccl_calls", column, v);
    Ok(NcclCall {
        pid: fits_u32(db, "nccl_calls", "pid", row[0])?,
        tid: fits_u32(db, "nccl_calls", "tid", row[1])?,
        ts_ns: row[2],
        op: u16::try_from(row[3])
            .map_err(|_| damaged(db, format!("nccl_calls.op holds {}, not an op code", row[3])))?,
        comm_hash: row[4],
        comm: row[5],
        rank: small("rank", row[6])?,
        nranks: small("nranks", row[7])?,
        seq: row[8],
        count: row[9],
        datatype: small("datatype", row[10])?,
        redop: small("redop", row[11])?,
        peer: small("peer", row[12])?,
        device: small("device", row[13])?,
    })
}

/// The parameters of [`INSERT_LAUNCH_CONFIG_SQL`], in order.
pub(crate) fn launch_config_params(c: &LaunchConfig) -> [SqlParam<'static>; 11] {
    let d = |v: u32| SqlParam::Int(i64::from(v));
    [
        SqlParam::Int(c.key()),
        d(c.grid[0]),
        d(c.grid[1]),
        d(c.grid[2]),
        d(c.block[0]),
        d(c.block[1]),
        d(c.block[2]),
        d(c.shared_mem_bytes),
        d(c.cluster[0]),
        d(c.cluster[1]),
        d(c.cluster[2]),
    ]
}

/// The parameters of [`INSERT_KERNEL_NAME_SQL`], in order.
pub(crate) fn kernel_name_params(k: &KernelName) -> [SqlParam<'_>; 5] {
    [
        SqlParam::Int(i64::from(k.pid)),
        SqlParam::Int(k.handle),
        SqlParam::Text(&k.name),
        SqlParam::Text(&k.mangled),
        SqlParam::Text(&k.how),
    ]
}

/// The rows of a batch with each key once (kernel names by (pid, handle), process ranks by pid),
/// holding its last row, in the order the keys first appear: what the table must hold after the
/// batch, with each row written once per transaction (no engine has to replace a row that the same
/// transaction wrote).
pub(crate) fn last_per_key<T, K: Eq + std::hash::Hash>(rows: &[T], key: impl Fn(&T) -> K) -> Vec<&T> {
    let mut slot: std::collections::HashMap<K, usize> = std::collections::HashMap::new();
    let mut out: Vec<&T> = Vec::with_capacity(rows.len());
    for r in rows {
        match slot.get(&key(r)) {
            Some(&i) => out[i] = r,
            None => {
                slot.insert(key(r), out.len());
                out.push(r);
            }
        }
    }
    out
}

/// An attachment's `symbols` and `missing` as the JSON arrays the table stores.
pub(crate) struct AttachmentJson {
    symbols: String,
    missing: String,
}

impl AttachmentJson {
    pub(crate) fn of(a: &LibraryAttach) -> Result<AttachmentJson> {
        let json = |v: &Vec<String>| {
            serde_json::to_string(v).map_err(|e| StoreError::Engine(format!("attachment symbols: {e}")))
        };
        Ok(AttachmentJson { symbols: json(&a.symbols)?, missing: json(&a.missing)? })
    }
}

/// The parameters of [`INSERT_ATTACHMENT_SQL`], in order.
pub(crate) fn attachment_params<'a>(
    session_id: i64,
    a: &'a LibraryAttach,
    json: &'a AttachmentJson,
) -> [SqlParam<'a>; 10] {
    [
        SqlParam::Int(session_id),
        SqlParam::Int(i64::from(a.pid)),
        SqlParam::Text(&a.path),
        SqlParam::Text(&a.kind),
        SqlParam::Text(&a.how),
        SqlParam::Int(a.attached_at_ns),
        SqlParam::Int(i64::from(a.complete)),
        SqlParam::Text(&json.symbols),
        SqlParam::Text(&json.missing),
        SqlParam::Text(&a.note),
    ]
}

pub(crate) fn damaged(db: &Path, detail: String) -> StoreError {
    StoreError::Corrupt { path: db.to_path_buf(), detail }
}

pub(crate) fn fits_i32(db: &Path, table: &str, column: &str, v: i64) -> Result<i32> {
    i32::try_from(v).map_err(|_| damaged(db, format!("{table}.{column} holds {v}, not a 32-bit value")))
}

pub(crate) fn fits_u32(db: &Path, table: &str, column: &str, v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| damaged(db, format!("{table}.{column} holds {v}, not a 32-bit unsigned value")))
}

/// A row of [`SELECT_LAUNCH_CONFIGS_SQL`]: every dimension must fit in 32 bits and the key must be
/// the configuration's own (launches find their configuration by it).
pub(crate) fn launch_config_from(db: &Path, row: [i64; 11]) -> Result<LaunchConfig> {
    const NAMES: [&str; 10] = [
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "shared_mem_bytes",
        "cluster_x",
        "cluster_y",
        "cluster_z",
    ];
    let mut v = [0u32; 10];
    for (i, name) in NAMES.iter().enumerate() {
        v[i] = fits_u32(db, "launch_configs", name, row[i + 1])?;
    }
    let c = LaunchConfig {
        grid: [v[0], v[1], v[2]],
        block: [v[3], v[4], v[5]],
        shared_mem_bytes: v[6],
        cluster: [v[7], v[8], v[9]],
    };
    if c.key() != row[0] {
        return Err(damaged(
            db,
            format!("launch_configs row with key {} holds a configuration whose key is {}", row[0], c.key()),
        ));
    }
    Ok(c)
}

/// A row of [`SELECT_KERNEL_NAMES_SQL`].
pub(crate) fn kernel_name_from(
    db: &Path,
    pid: i64,
    handle: i64,
    name: String,
    mangled: String,
    how: String,
) -> Result<KernelName> {
    Ok(KernelName { pid: fits_u32(db, "kernel_names", "pid", pid)?, handle, name, mangled, how })
}

/// A row of [`SELECT_ATTACHMENTS_SQL`] as read, before its checks.
pub(crate) struct AttachmentRow {
    pub session_id: i64,
    pub pid: i64,
    pub path: String,
    pub kind: String,
    pub how: String,
    pub attached_at: i64,
    pub complete: i64,
    pub symbols: String,
    pub missing: String,
    pub note: String,
}

impl AttachmentRow {
    /// The session id and the attachment; the symbol lists must be JSON arrays of strings.
    pub(crate) fn decode(self, db: &Path) -> Result<(i64, LibraryAttach)> {
        let list = |column: &str, json: &str| -> Result<Vec<String>> {
            serde_json::from_str(json).map_err(|e| {
                damaged(db, format!("attachments.{column} is not a JSON array of strings ({e}): {json:.80}"))
            })
        };
        let attach = LibraryAttach {
            pid: fits_u32(db, "attachments", "pid", self.pid)?,
            symbols: list("symbols", &self.symbols)?,
            missing: list("missing", &self.missing)?,
            path: self.path,
            kind: self.kind,
            how: self.how,
            attached_at_ns: self.attached_at,
            complete: self.complete != 0,
            note: self.note,
        };
        Ok((self.session_id, attach))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_name_for_the_same_key_wins_in_first_seen_order() {
        let k = |pid, handle, name: &str| KernelName { pid, handle, name: name.into(), ..Default::default() };
        let names = vec![k(1, 10, "a"), k(2, 10, "b"), k(1, 10, "c"), k(1, 11, "d")];
        let got: Vec<&str> = last_per_key(&names, |k| (k.pid, k.handle)).iter().map(|k| k.name.as_str()).collect();
        assert_eq!(got, ["c", "b", "d"]);
    }

    #[test]
    fn rows_that_do_not_fit_are_errors() {
        let db = Path::new("t.db");
        let c = LaunchConfig { grid: [4, 2, 1], block: [256, 1, 1], shared_mem_bytes: 1024, cluster: [1, 1, 1] };
        let mut row = [c.key(), 4, 2, 1, 256, 1, 1, 1024, 1, 1, 1];
        assert_eq!(launch_config_from(db, row).unwrap(), c);
        row[0] += 1;
        assert!(matches!(launch_config_from(db, row), Err(StoreError::Corrupt { .. })), "key that is not the row's");
        row[0] -= 1;
        row[4] = -1;
        assert!(matches!(launch_config_from(db, row), Err(StoreError::Corrupt { .. })), "negative dimension");
        assert!(kernel_name_from(db, 1 << 40, 1, "k".into(), String::new(), String::new()).is_err());
        let bad = AttachmentRow {
            session_id: 1,
            pid: 5,
            path: "/lib/libcudart.so.12".into(),
            kind: "runtime".into(),
            how: "maps".into(),
            attached_at: 7,
            complete: 1,
            symbols: "not json".into(),
            missing: "[]".into(),
            note: String::new(),
        };
        let e = bad.decode(db).unwrap_err().to_string();
        assert!(e.contains("attachments.symbols") && !e.contains('\n'), "{e}");
    }
}
