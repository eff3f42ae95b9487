//! The native trace schema: DDL, lookup-table contents and the meaning of every table and column.
//!
//! The `events` table is a superset of Ingero's (same names for the columns both have, so Ingero
//! users' SQL runs unchanged) plus the scheduler detail per-call attribution needs. Lookup tables
//! (`sources`, `ops`, `prev_states`, `memcpy_kinds`, `cuda_errors`, `loss_kinds`) are filled from
//! `causeway_model::codes` when a trace is created, so a database explains its own numbers.

use causeway_model::codes::{self, CUDA_ERRORS, MEMCPY_KINDS, OPS, PREV_STATES, SOURCES};
use causeway_model::{LossKind, SessionInfo};

use crate::AggregateRow;

/// Version of the native schema this build writes and the newest it reads.
pub const NATIVE_SCHEMA_VERSION: u32 = 1;

/// Tables and columns, created when a trace is created. Indexes come at the end of a trace
/// ([`indexes`]): building them once is far cheaper than maintaining them per row.
pub const NATIVE_DDL: &str = r#"
CREATE TABLE IF NOT EXISTS schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at   INTEGER NOT NULL,
    stopped_at   INTEGER NOT NULL DEFAULT 0,
    tool_version TEXT NOT NULL DEFAULT '',
    kernel       TEXT NOT NULL DEFAULT '',
    hostname     TEXT NOT NULL DEFAULT '',
    node         TEXT NOT NULL DEFAULT '',
    pid_filter   TEXT NOT NULL DEFAULT '',
    command      TEXT NOT NULL DEFAULT '',
    flags        TEXT NOT NULL DEFAULT '',
    gpu_model    TEXT NOT NULL DEFAULT '',
    gpu_driver   TEXT NOT NULL DEFAULT '',
    cuda_ver     TEXT NOT NULL DEFAULT '',
    tracer_pid   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY,
    timestamp   INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    tid         INTEGER NOT NULL,
    source      INTEGER NOT NULL,
    op          INTEGER NOT NULL,
    duration    INTEGER NOT NULL,
    gpu_id      INTEGER NOT NULL DEFAULT 0,
    arg0        INTEGER NOT NULL DEFAULT 0,
    arg1        INTEGER NOT NULL DEFAULT 0,
    ret_code    INTEGER NOT NULL DEFAULT 0,
    stack_hash  INTEGER NOT NULL DEFAULT 0,
    stack_ips   TEXT NOT NULL DEFAULT '',
    cgroup_id   INTEGER NOT NULL DEFAULT 0,
    node        TEXT NOT NULL DEFAULT '',
    rank        INTEGER,
    local_rank  INTEGER,
    world_size  INTEGER,
    comm        TEXT NOT NULL DEFAULT '',
    session_id  INTEGER NOT NULL DEFAULT 0,
    cpu         INTEGER NOT NULL DEFAULT -1,
    arg2        INTEGER NOT NULL DEFAULT 0,
    prev_state  INTEGER,
    next_pid    INTEGER,
    next_tid    INTEGER,
    next_comm   TEXT,
    wake_ts     INTEGER,
    waker_pid   INTEGER,
    waker_tid   INTEGER,
    launch_config INTEGER
);
CREATE TABLE IF NOT EXISTS stack_traces (hash INTEGER PRIMARY KEY, ips TEXT NOT NULL, frames TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS process_names (pid INTEGER PRIMARY KEY, name TEXT NOT NULL, seen_at INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS launch_configs (
    key              INTEGER PRIMARY KEY,
    grid_x           INTEGER NOT NULL,
    grid_y           INTEGER NOT NULL,
    grid_z           INTEGER NOT NULL,
    block_x          INTEGER NOT NULL,
    block_y          INTEGER NOT NULL,
    block_z          INTEGER NOT NULL,
    shared_mem_bytes INTEGER NOT NULL,
    cluster_x        INTEGER NOT NULL,
    cluster_y        INTEGER NOT NULL,
    cluster_z        INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS kernel_names (
    pid     INTEGER NOT NULL,
    handle  INTEGER NOT NULL,
    name    TEXT NOT NULL,
    mangled TEXT NOT NULL DEFAULT '',
    how     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (pid, handle)
);
CREATE TABLE IF NOT EXISTS net_peers (
    peer    INTEGER PRIMARY KEY,
    family  INTEGER NOT NULL,
    address TEXT NOT NULL,
    port    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS attachments (
    session_id  INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    path        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    how         TEXT NOT NULL,
    attached_at INTEGER NOT NULL,
    complete    INTEGER NOT NULL,
    symbols     TEXT NOT NULL,
    missing     TEXT NOT NULL,
    note        TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS nccl_calls (
    pid       INTEGER NOT NULL,
    tid       INTEGER NOT NULL,
    timestamp INTEGER NOT NULL,
    op        INTEGER NOT NULL,
    comm_hash INTEGER NOT NULL,
    comm      INTEGER NOT NULL,
    rank      INTEGER NOT NULL,
    nranks    INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    datatype  INTEGER NOT NULL,
    redop     INTEGER NOT NULL,
    peer      INTEGER NOT NULL,
    device    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS process_ranks (
    pid              INTEGER PRIMARY KEY,
    rank             INTEGER NOT NULL,
    local_rank       INTEGER NOT NULL,
    world_size       INTEGER NOT NULL,
    local_world_size INTEGER NOT NULL,
    launcher         TEXT NOT NULL,
    job              TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS process_cgroups (
    pid          INTEGER PRIMARY KEY,
    cgroup_id    INTEGER NOT NULL,
    path         TEXT NOT NULL,
    runtime      TEXT NOT NULL DEFAULT '',
    container_id TEXT NOT NULL DEFAULT '',
    container    TEXT NOT NULL DEFAULT '',
    pod          TEXT NOT NULL DEFAULT '',
    namespace    TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS gpu_samples (
    timestamp        INTEGER NOT NULL,
    gpu              INTEGER NOT NULL,
    sm_clock_mhz     INTEGER NOT NULL,
    sm_clock_max_mhz INTEGER NOT NULL,
    mem_clock_mhz    INTEGER NOT NULL,
    throttle_reasons INTEGER NOT NULL,
    temperature_c    INTEGER NOT NULL,
    power_mw         INTEGER NOT NULL,
    power_limit_mw   INTEGER NOT NULL,
    util_gpu_pct     INTEGER NOT NULL,
    util_mem_pct     INTEGER NOT NULL,
    mem_used_bytes   INTEGER NOT NULL,
    mem_total_bytes  INTEGER NOT NULL,
    pcie_tx_kbps     INTEGER NOT NULL,
    pcie_rx_kbps     INTEGER NOT NULL,
    nvlink_tx_kib    INTEGER NOT NULL,
    nvlink_rx_kib    INTEGER NOT NULL,
    ecc_corrected    INTEGER NOT NULL,
    ecc_uncorrected  INTEGER NOT NULL,
    pcie_link_gen          INTEGER NOT NULL DEFAULT -1,
    pcie_link_gen_max      INTEGER NOT NULL DEFAULT -1,
    pcie_link_width        INTEGER NOT NULL DEFAULT -1,
    pcie_link_width_max    INTEGER NOT NULL DEFAULT -1,
    nvlink_crc_flit_errors INTEGER NOT NULL DEFAULT -1,
    nvlink_crc_data_errors INTEGER NOT NULL DEFAULT -1,
    nvlink_replay_errors   INTEGER NOT NULL DEFAULT -1,
    nvlink_recovery_errors INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE IF NOT EXISTS gpu_process_memory (
    timestamp  INTEGER NOT NULL,
    gpu        INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    used_bytes INTEGER NOT NULL,
    contexts   INTEGER NOT NULL,
    alive      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS serving_samples (
    timestamp INTEGER NOT NULL,
    pid       INTEGER NOT NULL,
    engine    TEXT NOT NULL,
    metric    TEXT NOT NULL,
    labels    TEXT NOT NULL DEFAULT '{}',
    le        DOUBLE,
    value     DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_ops (
    pid             INTEGER NOT NULL,
    device          INTEGER NOT NULL,
    context         INTEGER NOT NULL,
    stream          INTEGER NOT NULL,
    kind            INTEGER NOT NULL,
    start_ns        INTEGER NOT NULL,
    end_ns          INTEGER NOT NULL,
    correlation     INTEGER NOT NULL,
    name            TEXT NOT NULL DEFAULT '',
    bytes           INTEGER NOT NULL DEFAULT 0,
    launch_tid      INTEGER NOT NULL DEFAULT 0,
    launch_start_ns INTEGER NOT NULL DEFAULT 0,
    launch_end_ns   INTEGER NOT NULL DEFAULT 0,
    launch_cbid     INTEGER NOT NULL DEFAULT 0,
    launch_event_id INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS gpu_clock_syncs (
    pid      INTEGER NOT NULL,
    cupti_ns INTEGER NOT NULL,
    trace_ns INTEGER NOT NULL,
    error_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS gpu_devices (
    pid        INTEGER NOT NULL,
    device     INTEGER NOT NULL,
    uuid       TEXT NOT NULL,
    name       TEXT NOT NULL,
    nvml_index INTEGER NOT NULL DEFAULT -1,
    PRIMARY KEY (pid, device)
);
CREATE TABLE IF NOT EXISTS gpu_timeline_notes (
    pid    INTEGER NOT NULL,
    ts_ns  INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    count  INTEGER NOT NULL DEFAULT 0,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS under_way (
    seen_at    INTEGER NOT NULL,
    session_id INTEGER NOT NULL,
    timestamp  INTEGER NOT NULL,
    duration   INTEGER NOT NULL,
    pid        INTEGER NOT NULL,
    tid        INTEGER NOT NULL,
    cpu        INTEGER NOT NULL,
    source     INTEGER NOT NULL,
    op         INTEGER NOT NULL,
    arg0       INTEGER NOT NULL,
    arg1       INTEGER NOT NULL,
    arg2       INTEGER NOT NULL,
    ret_code   INTEGER NOT NULL,
    stack_hash INTEGER NOT NULL,
    gpu_id     INTEGER NOT NULL,
    cgroup_id  INTEGER NOT NULL,
    prev_state INTEGER NOT NULL,
    next_pid   INTEGER NOT NULL,
    next_tid   INTEGER NOT NULL,
    wake_ts    INTEGER NOT NULL,
    waker_pid  INTEGER NOT NULL,
    waker_tid  INTEGER NOT NULL,
    comm       TEXT NOT NULL,
    next_comm  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS footprint_syscalls (
    seen_at  INTEGER NOT NULL,
    pid      INTEGER NOT NULL,
    request  INTEGER NOT NULL,
    nr       INTEGER NOT NULL,
    calls    INTEGER NOT NULL,
    errors   INTEGER NOT NULL,
    total_ns INTEGER NOT NULL,
    max_ns   INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    name     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS footprint_cpu (
    seen_at   INTEGER NOT NULL,
    pid       INTEGER NOT NULL,
    request   INTEGER NOT NULL,
    on_cpu_ns INTEGER NOT NULL,
    switches  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS footprint_fds (
    pid           INTEGER NOT NULL,
    tid           INTEGER NOT NULL,
    fd            INTEGER NOT NULL,
    opened_ns     INTEGER NOT NULL,
    closed_ns     INTEGER NOT NULL,
    flags         INTEGER NOT NULL,
    request       INTEGER NOT NULL,
    bytes_read    INTEGER NOT NULL,
    bytes_written INTEGER NOT NULL,
    reads         INTEGER NOT NULL,
    writes        INTEGER NOT NULL,
    exec_mapped   INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    how           TEXT NOT NULL,
    name          TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS footprint_requests (
    pid       INTEGER NOT NULL,
    request   INTEGER NOT NULL,
    fd        INTEGER NOT NULL,
    begin_ns  INTEGER NOT NULL,
    end_ns    INTEGER NOT NULL,
    bytes_in  INTEGER NOT NULL,
    bytes_out INTEGER NOT NULL,
    head_in   TEXT NOT NULL,
    head_out  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS footprint_execs (
    ts_ns    INTEGER NOT NULL,
    pid      INTEGER NOT NULL,
    ppid     INTEGER NOT NULL,
    request  INTEGER NOT NULL,
    filename TEXT NOT NULL,
    argv     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS loss_counters (
    session_id INTEGER NOT NULL,
    source     INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    count      INTEGER NOT NULL,
    PRIMARY KEY (session_id, source, kind)
);
CREATE TABLE IF NOT EXISTS sources (id INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ops (source_id INTEGER NOT NULL, op_id INTEGER NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL, PRIMARY KEY (source_id, op_id));
CREATE TABLE IF NOT EXISTS prev_states (code INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memcpy_kinds (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cuda_errors (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS loss_kinds (name TEXT PRIMARY KEY, description TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpu_op_kinds (code INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT NOT NULL);
"#;

/// Writes one `sessions` row, every column, by position (both engines bind the same parameters).
pub const INSERT_SESSION_SQL: &str =
    "INSERT OR REPLACE INTO sessions (id, started_at, stopped_at, tool_version, kernel, \
hostname, node, pid_filter, command, flags, gpu_model, gpu_driver, cuda_ver, tracer_pid) \
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Writes one `event_aggregates` row, by position (both engines bind the same parameters).
pub const INSERT_AGGREGATE_SQL: &str =
    "INSERT OR REPLACE INTO event_aggregates (bucket, source, op, pid, count, stored, \
sum_dur, min_dur, max_dur, sum_arg0) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// One parameter of the INSERTs both engines run: each engine binds it through its own `ToSql`
/// (see `sqlite/writer.rs` and `duckdb/writer.rs`), so the parameter lists are written once, here,
/// beside their SQL.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SqlParam<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

/// The parameters of [`INSERT_SESSION_SQL`], in order (`id: None` lets the engine assign it).
pub fn session_params(id: Option<i64>, s: &SessionInfo) -> [SqlParam<'_>; 14] {
    [
        id.map_or(SqlParam::Null, SqlParam::Int),
        SqlParam::Int(s.started_at_ns),
        SqlParam::Int(s.stopped_at_ns),
        SqlParam::Text(&s.tool_version),
        SqlParam::Text(&s.kernel),
        SqlParam::Text(&s.hostname),
        SqlParam::Text(&s.node),
        SqlParam::Text(&s.pid_filter),
        SqlParam::Text(&s.command),
        SqlParam::Text(&s.flags),
        SqlParam::Text(&s.gpu_model),
        SqlParam::Text(&s.gpu_driver),
        SqlParam::Text(&s.cuda_version),
        SqlParam::Int(i64::from(s.tracer_pid)),
    ]
}

/// The parameters of [`INSERT_AGGREGATE_SQL`], in order.
pub fn aggregate_params(a: &AggregateRow) -> [SqlParam<'static>; 10] {
    [
        SqlParam::Int(a.bucket_ns),
        SqlParam::Int(i64::from(a.source)),
        SqlParam::Int(i64::from(a.op)),
        SqlParam::Int(i64::from(a.pid)),
        SqlParam::Int(a.count as i64),
        SqlParam::Int(a.stored as i64),
        SqlParam::Int(a.sum_dur_ns),
        SqlParam::Int(a.min_dur_ns),
        SqlParam::Int(a.max_dur_ns),
        SqlParam::Int(a.sum_arg0),
    ]
}

/// The `schema_info` key under which a finished SQLite trace records the extent of its events
/// (`count min_ts max_ts max_id`): counting ten million rows costs 0.7 s, paid once at `finish`
/// instead of at every open. A writer that opens the trace again removes it.
pub const FINISHED_EXTENT_KEY: &str = "finished_extent";

/// A recorded extent: events, first and last timestamp, last id.
pub type RecordedExtent = (i64, Option<i64>, Option<i64>, Option<i64>);

/// The [`RecordedExtent`] of `events`, in both engines' SQL. Each figure in its own subquery:
/// SQLite answers a lone `min` or `max` from an index, a pair of them by reading every row.
pub const EXTENT_SQL: &str = "SELECT (SELECT count(*) FROM events), (SELECT min(timestamp) FROM events), \
                              (SELECT max(timestamp) FROM events), (SELECT max(id) FROM events)";

/// The last id of `events` now, in both engines' SQL: what [`extent_if_current`] compares.
pub const LAST_ID_SQL: &str = "SELECT max(id) FROM events";

/// A [`RecordedExtent`] as [`FINISHED_EXTENT_KEY`] holds it: `count min_ts max_ts max_id`, `-`
/// for a missing value (an empty trace).
pub fn extent_value((count, first, last, max_id): RecordedExtent) -> String {
    let v = |x: Option<i64>| x.map_or_else(|| "-".to_string(), |x| x.to_string());
    format!("{count} {} {} {}", v(first), v(last), v(max_id))
}

/// The extent a finished trace recorded (`recorded`: its [`FINISHED_EXTENT_KEY`] value), when
/// its events still end at the recorded id (`last_id_now`: [`LAST_ID_SQL`]; a session appended
/// since, by a writer that did not know the key, would not); `None` when it recorded none.
pub fn extent_if_current(recorded: Option<&str>, last_id_now: Option<i64>) -> Option<RecordedExtent> {
    let f: Vec<Option<i64>> = recorded?.split(' ').map(|x| x.parse().ok()).collect();
    match f[..] {
        [Some(count), first, last, max_id] if max_id == last_id_now => Some((count, first, last, max_id)),
        _ => None,
    }
}

/// Records [`FINISHED_EXTENT_KEY`] (at `finish`, after the indexes: the count reads one).
pub fn record_finished_extent(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let extent: RecordedExtent =
        conn.query_row(EXTENT_SQL, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
    conn.execute(
        "INSERT OR REPLACE INTO schema_info (key, value) VALUES (?1, ?2)",
        [FINISHED_EXTENT_KEY, &extent_value(extent)],
    )?;
    Ok(())
}

/// The events' (count, first timestamp, last timestamp) a finished SQLite trace recorded, when
/// still current ([`extent_if_current`]).
pub(crate) fn finished_extent(
    conn: &rusqlite::Connection,
    schema_info: &std::collections::BTreeMap<String, String>,
) -> rusqlite::Result<Option<crate::reader_common::EventExtent>> {
    let Some(recorded) = schema_info.get(FINISHED_EXTENT_KEY) else { return Ok(None) };
    let now: Option<i64> = conn.query_row(LAST_ID_SQL, [], |r| r.get(0))?;
    Ok(extent_if_current(Some(recorded), now).map(|(count, first, last, _)| (count, first, last)))
}

/// The condition that selects `sched_switch` rows, with the codes as literals: SQLite uses a
/// partial index only for a query whose WHERE holds its condition word for word, never through
/// bound parameters. [`indexes`] and the SQLite reader's off-CPU scan both use this text.
pub fn switch_rows_condition() -> String {
    let s = codes::op::SCHED_SWITCH;
    format!("source = {} AND op = {}", s.source, s.op)
}

/// The condition that selects the rows outside the two bulk classes (GPU calls, `sched_switch`):
/// the rare rows (wakeups, page allocations, process lifecycle, block I/O, sockets, labels, ...)
/// that analyses look up by op. [`is_other_row`] is the same test in Rust.
pub fn other_rows_condition() -> String {
    // `<>` terms, not `NOT IN (..)`: SQLite evaluates a NOT IN list through an ephemeral table,
    // which made building the index 5x slower
    let bulk: Vec<String> = codes::GPU_CALL_SOURCES.iter().map(|s| format!("source <> {s}")).collect();
    format!("{} AND NOT ({})", bulk.join(" AND "), switch_rows_condition())
}

/// Whether rows of `op` satisfy [`other_rows_condition`].
pub fn is_other_row(op: codes::OpCode) -> bool {
    !codes::GPU_CALL_SOURCES.contains(&op.source) && op != codes::op::SCHED_SWITCH
}

/// Whether every row of `source` satisfies [`other_rows_condition`] (the host's source holds the
/// switches).
pub fn is_other_source(source: u8) -> bool {
    !codes::GPU_CALL_SOURCES.contains(&source) && source != codes::op::SCHED_SWITCH.source
}

/// The columns of an off-CPU interval after `tid` and `timestamp` (what
/// `TraceStore::scan_switches_kept` reads), in the order of the SQLite switch index.
pub const SWITCH_DETAIL_COLUMNS: [&str; 10] =
    ["duration", "pid", "cpu", "prev_state", "next_pid", "next_tid", "next_comm", "wake_ts", "waker_pid", "waker_tid"];

/// Indexes built when a (SQLite) trace is finished: time windows and per-thread timelines (the
/// access paths of the analysis; per-op scans read the whole window anyway; same names as
/// Ingero's where they overlap), and the threads' off-CPU intervals: a partial index of the
/// `sched_switch` rows holding every column an interval needs, so the intervals of a few threads'
/// slow calls are read from it in (thread, time) order without touching the table (17x faster
/// than the rows through the per-thread index, for about 8% more file); and the rare rows by op
/// and time, a partial index of the rows outside the bulk classes, so a lookup of forks or page
/// allocations reads those rows only instead of every row of the window. An index of every row
/// by op would lead SQLite's planner, which has no statistics, to read the bulk classes through it
/// (twice the time of the table scan it replaces).
pub fn indexes() -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS idx_events_timestamp ON events(timestamp);\n\
         CREATE INDEX IF NOT EXISTS idx_events_tid_timestamp ON events(tid, timestamp);\n\
         CREATE INDEX IF NOT EXISTS idx_events_switches ON events(tid, timestamp, {}) WHERE {};\n\
         CREATE INDEX IF NOT EXISTS idx_events_other ON events(source, op, timestamp) WHERE {};\n\
         CREATE INDEX IF NOT EXISTS idx_events_failed ON events(timestamp) WHERE {FAILED_ROWS_CONDITION};\n",
        SWITCH_DETAIL_COLUMNS.join(", "),
        switch_rows_condition(),
        other_rows_condition()
    )
}

/// The condition of the rows that did not return success (errors, and calls still in flight when
/// the trace ended): few in any trace, so a finished SQLite trace indexes them
/// (`EventFilter::failed` reads them through it: the condition word for word).
pub const FAILED_ROWS_CONDITION: &str = "ret_code <> 0";

/// Columns added to `sessions` after schema version 1 was first written, with their DDL: a trace
/// recorded before them gets them when a new session is appended (readers tolerate their absence).
pub const LATER_SESSION_COLUMNS: [(&str, &str); 1] = [("tracer_pid", "INTEGER NOT NULL DEFAULT 0")];

/// Columns added to `events` after schema version 1 was first written (always last, so DuckDB's
/// Appender, which writes whole rows in table order, sees the same order in old and new traces),
/// with their DDL: added when a new session is appended to an older trace; readers read their
/// absence as the default (`launch_config` NULL, i.e. 0).
pub const LATER_EVENT_COLUMNS: [(&str, &str); 1] = [("launch_config", "INTEGER")];

/// Add the [`LATER_SESSION_COLUMNS`], [`LATER_EVENT_COLUMNS`] and
/// [`LATER_GPU_SAMPLE_COLUMNS`](crate::nvml_tables::LATER_GPU_SAMPLE_COLUMNS) an existing native
/// SQLite trace lacks.
pub fn add_missing_columns(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    for (table, later) in [
        ("sessions", &LATER_SESSION_COLUMNS[..]),
        ("events", &LATER_EVENT_COLUMNS[..]),
        ("gpu_samples", &crate::nvml_tables::LATER_GPU_SAMPLE_COLUMNS[..]),
    ] {
        let have: Vec<String> = tx
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for (name, ddl) in later {
            if !have.iter().any(|c| c == name) {
                tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {name} {ddl}"))?;
            }
        }
    }
    Ok(())
}

/// Insert the lookup rows (idempotent).
pub fn fill_lookup_tables(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let mut st = tx.prepare("INSERT OR REPLACE INTO sources (id, name, description) VALUES (?1, ?2, ?3)")?;
    for (id, name, desc) in SOURCES {
        st.execute(rusqlite::params![id, name, desc])?;
    }
    let mut st =
        tx.prepare("INSERT OR REPLACE INTO ops (source_id, op_id, name, description) VALUES (?1, ?2, ?3, ?4)")?;
    for (s, o, name, _, desc) in OPS {
        st.execute(rusqlite::params![s, o, name, desc])?;
    }
    let mut st = tx.prepare("INSERT OR REPLACE INTO prev_states (code, name, description) VALUES (?1, ?2, ?3)")?;
    for (c, name, desc) in PREV_STATES {
        st.execute(rusqlite::params![c, name, desc])?;
    }
    let mut st = tx.prepare("INSERT OR REPLACE INTO memcpy_kinds (code, name) VALUES (?1, ?2)")?;
    for (c, name) in MEMCPY_KINDS {
        st.execute(rusqlite::params![c, name])?;
    }
    let mut st = tx.prepare("INSERT OR REPLACE INTO cuda_errors (code, name) VALUES (?1, ?2)")?;
    for (c, name) in CUDA_ERRORS {
        st.execute(rusqlite::params![c, name])?;
    }
    let mut st = tx.prepare("INSERT OR REPLACE INTO loss_kinds (name, description) VALUES (?1, ?2)")?;
    for k in LossKind::ALL {
        st.execute(rusqlite::params![k.as_str(), k.description()])?;
    }
    let mut st = tx.prepare(crate::gpu_tables::INSERT_OP_KIND_SQL)?;
    for (c, name, desc) in crate::gpu_tables::op_kind_rows() {
        st.execute(rusqlite::params![c, name, desc])?;
    }
    let mut st = tx.prepare("INSERT OR REPLACE INTO schema_info (key, value) VALUES (?1, ?2)")?;
    for (k, v) in schema_info_rows() {
        st.execute(rusqlite::params![k, v])?;
    }
    Ok(())
}

/// The `schema_info` rows every native trace carries (all engines).
pub fn schema_info_rows() -> [(&'static str, String); 5] {
    [
        ("format", "causeway".to_string()),
        ("schema_version", NATIVE_SCHEMA_VERSION.to_string()),
        ("timestamp_unit", "nanoseconds (Unix epoch)".into()),
        ("duration_unit", "nanoseconds".into()),
        ("sched_switch_note", "timestamp = switch-in; off-CPU interval = [timestamp - duration, timestamp]; next_* = task that took the CPU".into()),
    ]
}

/// `schema_info` key under which `causeway convert` records, as a JSON array of sentences, what the
/// original trace did not record (so a converted trace reports the same gaps as its original).
pub const SOURCE_MISSING_KEY: &str = "source_missing";

/// `schema_info` key under which `causeway convert` records, as a JSON array, the `events` columns the
/// original had: readers report only those (the others hold defaults), so the analysis treats a
/// converted trace exactly as its original (e.g. no scheduler detail from an Ingero DB).
pub const SOURCE_COLUMNS_KEY: &str = "source_columns";

/// `columns` restricted to those a converted trace's original had (unchanged when not converted).
pub fn restrict_columns(mut columns: Vec<String>, recorded: Option<&String>) -> Vec<String> {
    if let Some(list) = recorded.and_then(|v| serde_json::from_str::<Vec<String>>(v).ok()) {
        columns.retain(|c| list.contains(c));
    }
    columns
}

/// Add the gaps a converted trace recorded under [`SOURCE_MISSING_KEY`] (a JSON array), once each.
pub fn extend_missing(missing: &mut Vec<String>, recorded: Option<&String>) {
    let Some(list) = recorded.and_then(|v| serde_json::from_str::<Vec<String>>(v).ok()) else { return };
    for m in list {
        if !missing.contains(&m) {
            missing.push(m);
        }
    }
}

/// Ingero's `event_aggregates` (true totals when `events` is a sample); `causeway convert` carries
/// it into native traces so their statistics keep the true totals.
pub const EVENT_AGGREGATES_DDL: &str = "CREATE TABLE IF NOT EXISTS event_aggregates (bucket INTEGER NOT NULL, \
source INTEGER NOT NULL, op INTEGER NOT NULL, pid INTEGER NOT NULL DEFAULT 0, count INTEGER NOT NULL DEFAULT 0, \
stored INTEGER NOT NULL DEFAULT 0, sum_dur INTEGER NOT NULL DEFAULT 0, min_dur INTEGER NOT NULL DEFAULT 0, \
max_dur INTEGER NOT NULL DEFAULT 0, sum_arg0 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (bucket, source, op, pid))";

/// What a table is for.
pub fn table_meaning(table: &str) -> &'static str {
    match table {
        "events" => "one row per recorded event: CUDA/driver calls, off-CPU intervals, wake-ups, block I/O, process lifecycle",
        "sessions" => "one row per trace run",
        "stack_traces" => "user stacks by hash; frames JSON innermost first",
        "process_names" => "process name per pid",
        "launch_configs" => "kernel launch configurations (grid, block, dynamic shared memory, cluster), one row per distinct configuration; events.launch_config names one",
        "kernel_names" => "kernel names per (pid, handle): the handle is what that process's launches carry in events.arg0",
        "net_peers" => "the remote ends of traced threads' sockets: events of source 7 (socket calls) and 6 (TCP) name theirs in arg2; join events.arg2 = net_peers.peer",
        "attachments" => "the CUDA libraries attached per traced process and session, with the symbols probed and missing: what the trace covers",
        "nccl_calls" => "what each NCCL call did, beside its events row (source 9; join on pid, tid, timestamp): the communicator as every rank knows it (comm_hash), this rank, and the collective's sequence number: (comm_hash, seq) names one collective on every rank",
        "process_cgroups" => "the cgroup (v2) of each traced process and of each process that took a traced thread's CPU, and the container or Kubernetes pod it stands for (from the cgroup path and the container runtime's own files); join events.cgroup_id = process_cgroups.cgroup_id, or on pid",
        "process_ranks" => "where each traced process stands in its distributed job, from its launcher's environment (torchrun RANK/LOCAL_RANK/WORLD_SIZE, Open MPI, Slurm); -1 = not given",
        "serving_samples" => "a serving engine's own Prometheus metrics (vLLM, SGLang, TGI, Triton), scraped from its endpoint while tracing (default every second): queue gauges, KV-cache usage, token counters, and the latency histograms as their cumulative buckets (`metric` ending `_bucket`, bound `le`; the +Inf bucket is the `_count` row)",
        "loss_counters" => "events lost before storage, per session, source and place (kind); see loss_kinds",
        "sources" => "lookup: events.source code -> name",
        "ops" => "lookup: (events.source, events.op) -> op name",
        "prev_states" => "lookup: events.prev_state code -> why the thread left the CPU",
        "memcpy_kinds" => "lookup: cudaMemcpyKind in events.arg1 of copies",
        "cuda_errors" => "lookup: CUDA error code in events.ret_code",
        "loss_kinds" => "lookup: loss_counters.kind -> where events were lost",
        "gpu_op_kinds" => "lookup: gpu_ops.kind code -> kernel, memcpy, memset, sync",
        "schema_info" => "key/value facts about this database (format, version, units)",
        "op_durations" => "derived when the trace finished, for fast reads: every event's duration sorted per (source, op) (pid -1) and per (pid, source, op); data is an internal encoding: query events instead",
        "call_blocks" => "derived when the trace finished, for fast reads: the GPU calls and step labels of events in time order, packed 65,536 to a block (timestamps min_ts..max_ts); data is an internal encoding: query events instead",
        "step_blocks" => "derived when the trace finished, for fast reads: the step labels and the calls that can end a step (synchronizations, synchronous copies, collectives) of events in time order, packed as call_blocks are; data is an internal encoding: query events instead",
        "event_aggregates" => "Ingero: true per-minute totals per (source, op, pid) when events holds a sample",
        "causal_chains" => "Ingero: chains its live correlator wrote (event counting in a window, not per-call attribution)",
        "system_snapshots" => "Ingero: 1 Hz CPU, memory, swap and load samples",
        "cgroup_metadata" => "Ingero: cgroup id -> container / pod",
        "cgroup_schedstat" => "Ingero: cumulative off-CPU per cgroup window (do not sum across rows)",
        "annotations" => "Ingero v0.10: user annotations on the timeline",
        "event_aggregates_5s" => "Ingero v0.10: 5-second totals per (source, op, pid)",
        "under_way" => crate::under_way::TABLE_MEANING,
        _ => crate::nvml_tables::table_meaning(table)
            .or_else(|| crate::footprint_tables::table_meaning(table))
            .unwrap_or_else(|| crate::gpu_tables::table_meaning(table)),
    }
}

/// What a column means (table-qualified where names repeat).
pub fn column_meaning(table: &str, column: &str) -> &'static str {
    match (table, column) {
        ("sessions", "tracer_pid") => "pid of the Causeway process that recorded the session: its threads may appear in the trace",
        ("events", "id") => "event id (integer, or \"node:seq\" text in Ingero v0.9+); not time order",
        ("events", "timestamp") => "unix ns: call entry, I/O issue, or switch-in time for sched_switch",
        ("events", "duration") => "ns: call duration, I/O latency, or off-CPU time for sched_switch",
        ("events", "pid") => "process id (tgid); for sched_wakeup the waker",
        ("events", "tid") => "thread id; for sched_wakeup the waker",
        ("events", "source") => "source code, see sources",
        ("events", "op") => "op code within the source, see ops",
        ("events", "arg0") => "op-specific: bytes (alloc, memcpy, block I/O), kernel function pointer (launch)",
        ("events", "arg1") => "op-specific: memcpy kind, blocks (launch), pid (sched_switch), woken pid (sched_wakeup), device (block I/O), child pid (fork)",
        ("events", "arg2") => "op-specific: stream, device pointer, woken tid (sched_wakeup)",
        ("events", "ret_code") => "CUDA return code (see cuda_errors); -1: the call had not returned when the trace ended (duration: up to the end); 0 for host events",
        ("events", "stack_hash") => "key into stack_traces.hash (0 = no stack)",
        ("events", "comm") => "thread command name",
        ("events", "cpu") => "CPU of the event; for sched_switch the CPU the thread left (-1 unknown)",
        ("events", "prev_state") => "sched_switch: why the thread left the CPU (see prev_states)",
        ("events", "next_pid") | ("events", "next_tid") | ("events", "next_comm") => {
            "sched_switch: the task that took the CPU: for a preempted thread, the one that held that CPU the longest single stretch while it waited runnable; otherwise the one that ran when it left"
        }
        ("events", "wake_ts") => "sched_switch: unix ns when the thread was woken (run-queue wait = timestamp - wake_ts)",
        ("events", "waker_pid") | ("events", "waker_tid") => "sched_switch: who woke the thread",
        ("events", "session_id") => "sessions.id of the trace run",
        ("events", "gpu_id") => "the GPU a CUDA/driver/NCCL call used, as NVML's index (gpu_samples.gpu): its thread's current device mapped through CUDA_VISIBLE_DEVICES; -1 unknown (no NVML, an attached process before its first cudaSetDevice, a mixed host's unknown order); traces before this was recorded and Ingero: 0",
        ("events", "cgroup_id") => "cgroup v2 id of the event's process (as the tracer found it when it first saw the process; 0 unknown): join process_cgroups.cgroup_id for its path, container and pod",
        ("events", "node") => "node name (multi-node traces)",
        ("events", "stack_ips") => "legacy (Ingero): raw instruction pointers",
        ("events", "launch_config") => "kernel launches: key into launch_configs.key (NULL for other events and launches without a known configuration)",
        ("launch_configs", "key") => "FNV-1a 64 of the ten other columns (never 0); events.launch_config refers to it",
        ("launch_configs", "grid_x") | ("launch_configs", "grid_y") | ("launch_configs", "grid_z") => "grid dimensions in thread blocks",
        ("launch_configs", "block_x") | ("launch_configs", "block_y") | ("launch_configs", "block_z") => "block dimensions in threads",
        ("launch_configs", "shared_mem_bytes") => "dynamic shared memory per block, bytes",
        ("launch_configs", "cluster_x") | ("launch_configs", "cluster_y") | ("launch_configs", "cluster_z") => {
            "thread-block cluster dimensions in blocks (1,1,1 when the launch set none)"
        }
        ("kernel_names", "pid") | ("attachments", "pid") => "process id (tgid)",
        ("net_peers", "peer") => "the key socket and TCP events carry in arg2 (a hash of family, address and port: the same on every host)",
        ("net_peers", "family") => "address family: 2 IPv4, 10 IPv6, 1 Unix socket",
        ("net_peers", "address") => "the peer's address (127.0.0.1, ::1); empty for a Unix socket",
        ("net_peers", "port") => "the peer's port (0 for Unix sockets)",
        ("kernel_names", "handle") => "what the process's launches carry in events.arg0: host stub or cudaKernel_t (runtime), CUfunction or CUkernel (driver)",
        ("kernel_names", "name") => "demangled kernel name (the mangled one when it does not demangle)",
        ("kernel_names", "mangled") => "the name as the binary spells it",
        ("kernel_names", "how") => "where the name came from: register, module, library, elf",
        ("attachments", "session_id") => "sessions.id of the trace run",
        ("attachments", "path") => "the library file as the process maps it (empty for a note about a library that could not be found)",
        ("attachments", "kind") => "runtime, driver, runtime_static (the runtime linked into an executable or library), nccl, cupti (its activity controls only), network, nvml, serving",
        ("attachments", "how") => "how the library was found: explicit, maps, loaded, ...",
        ("attachments", "attached_at") => "unix ns when the probes were in place",
        ("attachments", "complete") => "1: probes were in place before the process could call through the library; 0: calls before attached_at are unknown (not zero)",
        ("attachments", "symbols") => "JSON array of the symbols probed",
        ("attachments", "missing") => "JSON array of the symbols this library does not export",
        ("attachments", "note") => "what a reader must know about this attachment",
        ("stack_traces", "frames") => "JSON frames innermost first: {s: symbol+off, f: lib} | {i: ip, f: lib} | {pf: file.py, pfn: func, pl: line being executed (0: unknown)} | {note: why the stack is incomplete}",
        ("nccl_calls", "pid") | ("nccl_calls", "tid") | ("nccl_calls", "timestamp") => "the call's events row: same pid, tid and timestamp (unix ns at entry)",
        ("nccl_calls", "op") => "NCCL op code (events.op of source 9, see ops)",
        ("nccl_calls", "comm_hash") => "FNV-1a 64 of the communicator's ncclUniqueId (split communicators: of the parent's hash, color and split number), the same on every rank; 0 = created before the trace saw it (not matched across ranks)",
        ("nccl_calls", "comm") => "the ncclComm_t handle in this process",
        ("nccl_calls", "rank") => "this process's rank in the communicator (-1 unknown)",
        ("nccl_calls", "nranks") => "ranks in the communicator (-1 unknown)",
        ("nccl_calls", "seq") => "collectives: their number on this communicator in this process, from 1 (the same collective has the same seq on every rank); send/recv: the transfer's number with that peer in that direction; 0 otherwise",
        ("nccl_calls", "count") => "elements (all-gather: sent per rank; reduce-scatter: received per rank)",
        ("nccl_calls", "datatype") => "ncclDataType_t: 0 int8, 1 uint8, 2 int32, 3 uint32, 4 int64, 5 uint64, 6 float16, 7 float32, 8 float64, 9 bfloat16, 10 float8e4m3, 11 float8e5m2; -1 none",
        ("nccl_calls", "redop") => "ncclRedOp_t: 0 sum, 1 prod, 2 max, 3 min, 4 avg; -1 none",
        ("nccl_calls", "peer") => "send/recv: the peer rank; broadcast/reduce: the root rank; split: the color; -1 otherwise",
        ("nccl_calls", "device") => "CUDA device of the communicator (the caller's current device at its creation; -1 unknown)",
        ("process_cgroups", "pid") => "process id (tgid)",
        ("process_cgroups", "cgroup_id") => "the cgroup v2 id (its directory's inode): what events.cgroup_id holds; 0 when the host has no cgroup v2",
        ("process_cgroups", "path") => "the cgroup path (/system.slice/docker-<id>.scope, /kubepods/...); the runtime's v1 group on a hybrid host whose v2 path is /",
        ("process_cgroups", "runtime") => "who made the cgroup: docker, containerd, cri-o, podman, kubernetes, systemd, or empty",
        ("process_cgroups", "container_id") => "the container's id (64 hex digits), when the path names one",
        ("process_cgroups", "container") => "the container's name from the runtime's files (or the systemd unit), empty when unknown",
        ("process_cgroups", "pod") => "the Kubernetes pod's name (pod<uid> when only the path names it)",
        ("process_cgroups", "namespace") => "the Kubernetes pod's namespace",
        ("process_ranks", "pid") => "process id (tgid)",
        ("process_ranks", "rank") => "the process's rank in the job (RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)",
        ("process_ranks", "local_rank") => "its rank on this node (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID; -1 not given)",
        ("process_ranks", "world_size") => "processes in the job (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS; -1 not given)",
        ("process_ranks", "local_world_size") => "the job's processes on this node (-1 not given)",
        ("process_ranks", "launcher") => "which variables said so: torch, openmpi, slurm",
        ("process_ranks", "job") => "the job's id where the launcher names it (TORCHELASTIC_RUN_ID, SLURM_JOB_ID)",
        ("serving_samples", "timestamp") => "unix ns when the endpoint was read",
        ("serving_samples", "pid") => "the engine process listening on the endpoint",
        ("serving_samples", "engine") => "vllm, sglang, tgi or triton",
        ("serving_samples", "metric") => "the sample's exposed name (vllm:time_to_first_token_seconds_bucket; counters keep their _total)",
        ("serving_samples", "labels") => "the sample's labels but le, a JSON object with sorted keys",
        ("serving_samples", "le") => "a histogram bucket's upper bound (seconds for the latency histograms); NULL for other samples",
        ("serving_samples", "value") => "the value read (cumulative for counters and histogram parts: subtract consecutive reads)",
        ("loss_counters", "kind") => "where the events were lost, see loss_kinds",
        ("loss_counters", "count") => "events lost",
        ("under_way", column) => crate::under_way::column_meaning(column),
        _ => crate::nvml_tables::column_meaning(table, column)
            .or_else(|| crate::footprint_tables::column_meaning(table, column))
            .unwrap_or_else(|| crate::gpu_tables::column_meaning(table, column)),
    }
}

/// Name of a code pair for descriptions, preferring this build's table over stale DB lookup tables.
pub fn code_name(source: u8, op: u16) -> String {
    codes::op_name(source, op).into_owned()
}
