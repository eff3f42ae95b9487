//! Every node's timestamps on one time line, in views, and the straggler's statements over them.
//!
//! **Aligned time.** Stored timestamps are each host's own clock. [`align_views`] puts them on the
//! catalog server's clock in views: `clock_offsets` (the best round trip of each flush: offset and
//! bound), `clock_chosen` (per flush, the tightest of its node's flushes within
//! [`CHOICE_WINDOW_NS`]), then `collectives` (every rank's entry into every NCCL collective,
//! `enter_ns` = its timestamp plus the chosen offset of its node's latest flush before it, or of its
//! first flush for rows older than every sample, as in a trace shipped after it ended; `err_ns` =
//! that offset's bound). `collectives` is the union of two views: `collectives_one_offset` (the
//! nodes with one chosen offset, a plain join) and `collectives_several_offsets` (the others, an
//! as-of join); an analysis reads the first alone when no node has several offsets.
//!
//! **Straggler.** The definitions are `causeway-analysis`'s `collectives` (one host), over aligned
//! entries: per (comm_hash, seq) with two ranks or more, the last rank in is late by its entry minus
//! the one before it; late counts when that is at least max([`LATE_FLOOR_NS`], the communicator's
//! median period / [`LATE_PERIOD_DIVISOR`], twice the two entries' clock bounds when they are on
//! two nodes); a rank late `MIN_LATE` times or more is a straggler. Consecutive late sequence
//! numbers form an episode.
//! Medians are `quantile_disc(x, 0.5)`, which is the exact nearest-rank median (rank ceil(n/2)).
//! Scoped to one node with zero offset, the answer is the one-host answer, figure for figure.

use causeway_analysis::{LATE_FLOOR_NS, LATE_PERIOD_DIVISOR};
use causeway_model::codes::NCCL_COLLECTIVES;

use crate::lake::LAKE;

/// Server-clock resolution added to every round-trip bound (PostgreSQL keeps microseconds).
pub const SERVER_RESOLUTION_NS: i64 = 500;
/// A row is aligned with the tightest round trip of its node's flushes within this much of the
/// flush before it: a loaded round trip (a wide bound) does not stand for its neighbours' better
/// ones, and clocks drift far less than a bound over a minute (10 ppm is 0.6 ms).
pub const CHOICE_WINDOW_NS: i64 = 60_000_000_000;

/// The views every cross-host answer reads (temporary: they live in the reader's connection).
pub fn align_views() -> String {
    format!(
        "CREATE OR REPLACE TEMP VIEW clock_offsets AS
  SELECT node, trace_uid, flush_id,
         arg_min(server_ns - (local_send_ns + local_recv_ns) // 2, local_recv_ns - local_send_ns) AS offset_ns,
         min(local_recv_ns - local_send_ns) // 2 + {SERVER_RESOLUTION_NS} AS err_ns,
         max(local_recv_ns) AS sampled_at
  FROM {LAKE}.clock_samples GROUP BY node, trace_uid, flush_id;
CREATE OR REPLACE TEMP VIEW clock_chosen AS
  SELECT f.node, f.sampled_at, arg_min(g.offset_ns, g.err_ns) AS offset_ns, min(g.err_ns) AS err_ns
  FROM clock_offsets f JOIN clock_offsets g
    ON g.node = f.node AND g.sampled_at BETWEEN f.sampled_at - {CHOICE_WINDOW_NS} AND f.sampled_at + {CHOICE_WINDOW_NS}
  GROUP BY f.node, f.sampled_at;
CREATE OR REPLACE TEMP VIEW node_first_offset AS
  SELECT node, count(DISTINCT offset_ns) AS offsets, arg_min(offset_ns, sampled_at) AS offset_ns,
         arg_min(err_ns, sampled_at) AS err_ns
  FROM clock_chosen GROUP BY node;
"
    ) + &collectives_views("collectives", &format!("{LAKE}.nccl_calls"))
}

/// The views `{name}_one_offset`, `{name}_several_offsets` and their union `{name}`: the entries into
/// collectives among `rows` (`nccl_calls` rows, as a table or a subquery) with their aligned
/// times: the nodes with one chosen offset (or none) by a plain join, the others by the flush
/// before each row.
pub(crate) fn collectives_views(name: &str, rows: &str) -> String {
    let is_collective = is_collective_sql();
    format!(
        "CREATE OR REPLACE TEMP VIEW {name}_one_offset AS
  SELECT n.node, n.trace_uid, n.pid, n.tid, n.rank, n.nranks, n.comm_hash, n.comm, n.seq, n.op, n.count,
         n.timestamp AS enter_raw, n.timestamp + coalesce(f.offset_ns, 0) AS enter_ns, coalesce(f.err_ns, 0) AS err_ns
  FROM {rows} n LEFT JOIN node_first_offset f ON f.node = n.node
  WHERE coalesce(f.offsets, 1) = 1 AND {is_collective};
CREATE OR REPLACE TEMP VIEW {name}_several_offsets AS
  SELECT n.node, n.trace_uid, n.pid, n.tid, n.rank, n.nranks, n.comm_hash, n.comm, n.seq, n.op, n.count,
         n.timestamp AS enter_raw,
         n.timestamp + coalesce(o.offset_ns, f.offset_ns) AS enter_ns,
         coalesce(o.err_ns, f.err_ns) AS err_ns
  FROM {rows} n JOIN node_first_offset f ON f.node = n.node AND f.offsets > 1
  ASOF LEFT JOIN clock_chosen o ON n.node = o.node AND n.timestamp >= o.sampled_at
  WHERE {is_collective};
CREATE OR REPLACE TEMP VIEW {name} AS
  SELECT * FROM {name}_one_offset UNION ALL SELECT * FROM {name}_several_offsets;"
    )
}

/// Which `nccl_calls` rows (as `n`) are entries into a collective matched across ranks: the
/// `collectives` view's rows.
pub(crate) fn is_collective_sql() -> String {
    let ops: Vec<String> = NCCL_COLLECTIVES.iter().map(|c| c.op.to_string()).collect();
    format!("n.comm_hash != 0 AND n.seq > 0 AND n.op IN ({})", ops.join(", "))
}

/// Every rank's entry into every collective, one per process (its earliest, as the one-host
/// analysis keeps), over `view` (`collectives` or its plain-join half, see [`Entries`]).
/// Only a process holding several handles of one communicator (`ncclCommInitAll`) calls a
/// collective more than once: its rows are grouped, every other row passes as it is (grouping ten
/// million rows that are already one per process would cost more than the rest of the straggler
/// query). [`one_entry_each`] is used instead when no process has two handles (the usual fleet):
/// even against an empty `multi`, the anti-join costs twice the rest of the straggler query.
fn grouped_entries(view: &str) -> String {
    format!(
        "WITH multi AS (
    SELECT node, trace_uid, pid, comm_hash FROM {view} GROUP BY ALL HAVING min(comm) != max(comm))
  SELECT comm_hash, seq, node, trace_uid, pid, enter_ns, tid, rank, nranks, err_ns FROM {view} c
  WHERE NOT EXISTS (SELECT 1 FROM multi m WHERE m.node = c.node AND m.trace_uid = c.trace_uid AND m.pid = c.pid
                    AND m.comm_hash = c.comm_hash)
  UNION ALL
  SELECT comm_hash, seq, node, trace_uid, pid, min(enter_ns), arg_min(tid, enter_ns), any_value(rank),
         any_value(nranks), any_value(err_ns)
  FROM {view} c SEMI JOIN multi m USING (node, trace_uid, pid, comm_hash)
  GROUP BY comm_hash, seq, node, trace_uid, pid"
    )
}

/// [`grouped_entries`] where every process holds one handle per communicator: the rows as they are.
fn one_entry_each(view: &str) -> String {
    format!("SELECT comm_hash, seq, node, trace_uid, pid, enter_ns, tid, rank, nranks, err_ns FROM {view}")
}

/// How a fleet's entries into collectives are read: grouped per process ([`grouped_entries`]) only
/// when some process holds two handles of a communicator, and from the plain-join half of the
/// views ([`collectives_views`]) only when no node has several clock offsets (the usual fleet: the
/// other half's as-of join still reads every row, 0.1 s over 10M).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entries {
    pub(crate) grouped: bool,
    pub(crate) several_offsets: bool,
}

impl Entries {
    /// The SQL of the entries over the views named `views` (see [`collectives_views`]).
    pub(crate) fn sql(self, views: &str) -> String {
        let view = if self.several_offsets { views.to_string() } else { format!("{views}_one_offset") };
        if self.grouped {
            grouped_entries(&view)
        } else {
            one_entry_each(&view)
        }
    }
}

/// Whether some process holds several handles of one communicator, asked of the `collectives`
/// view's rows in the table itself (no clock alignment needed) and on integer columns only (a pid
/// shared by two nodes can only make the answer yes, never hide a real one). Each handle numbers
/// its collectives from 1 (`causeway-probes`' NCCL decoder), so a process with two handles has two
/// entries into collective 1: only those rows are read (the files' statistics on `seq` skip the
/// rest; reading every row cost 0.15-0.2 s over 10M entries).
pub(crate) fn any_multi_handle_sql() -> String {
    format!(
        "SELECT count(*) FROM (SELECT comm_hash, pid FROM {LAKE}.nccl_calls n WHERE n.seq = 1 AND {} GROUP BY ALL HAVING min(comm) != max(comm))",
        is_collective_sql()
    )
}

/// The statements that make the temporary tables `cand_entries` (every entry of each collective
/// that may be late) and `late` (one row per late collective) from `entries` (`Fleet::entries`).
///
/// The entries are read twice, integers first: per collective seen on two ranks or more, the first
/// and the last entry (plain aggregates: a list per collective, `max(enter_ns, 2)`, cost a fifth
/// of the statement over 10M entries), which give the communicator's period and the candidates:
/// last minus first at least the floor and the period's share, a superset of the late ones (last
/// minus second-last can only be smaller). The second read (`cand_collectives`: the candidates'
/// `nccl_calls` rows picked before they are aligned, so the join with the clock views runs on
/// them alone) keeps the candidates' entries, from
/// which the last two entries, who entered last, their clock bounds and nodes, the sum of entries,
/// and later what each other rank waited (`Fleet::stragglers`) are taken, and the late ones are
/// kept. When the last two entered at the same nanosecond their order is arbitrary, and nothing
/// depends on it: that collective's lateness is 0. (One pass holding every column of every
/// collective took three times as long: strings and lists per collective are what a hash aggregate
/// pays most for.)
pub(crate) fn late_tables_sql(entries: Entries) -> [(&'static str, String); 4] {
    let cand_rows = format!("(SELECT * FROM {LAKE}.nccl_calls SEMI JOIN cand USING (comm_hash, seq))");
    let (all, of_cand) = (entries.sql("collectives"), entries.sql("cand_collectives"));
    let per = format!(
        "per AS MATERIALIZED (
  SELECT comm_hash, seq, min(enter_ns) AS first_ns, max(enter_ns) AS last_ns
  FROM ({all}) GROUP BY comm_hash, seq HAVING count(*) >= 2),
gaps AS (
  SELECT a.comm_hash, a.first_ns - b.first_ns AS gap_ns
  FROM per a JOIN per b ON b.comm_hash = a.comm_hash AND b.seq = a.seq - 1)"
    );
    [
        ("candidates (first read)", cand_table_sql(&per)),
        ("candidates' views", collectives_views("cand_collectives", &cand_rows)),
        ("candidates' entries (second read)", format!("CREATE OR REPLACE TEMP TABLE cand_entries AS {of_cand}")),
        ("late collectives", late_table_sql(&lasts_sql("cand_entries"))),
    ]
}

/// The temporary table `cand` (comm_hash, seq, period_ns): the collectives that may be late, with
/// their communicator's median period (see [`late_tables_sql`]). `with` defines the common table
/// expressions `per` (one row per collective entered by two ranks or more: comm_hash, seq,
/// first_ns, last_ns) and `gaps` (comm_hash, gap_ns: per collective whose predecessor (seq - 1) is
/// in `per`, its first entry minus the predecessor's).
pub(crate) fn cand_table_sql(with: &str) -> String {
    format!(
        "CREATE OR REPLACE TEMP TABLE cand AS
WITH {with},
period AS (
  SELECT comm_hash, quantile_disc(gap_ns, 0.5) FILTER (WHERE gap_ns > 0) AS period_ns FROM gaps GROUP BY comm_hash)
SELECT comm_hash, seq, coalesce(period_ns, 0) AS period_ns FROM per LEFT JOIN period USING (comm_hash)
WHERE last_ns - first_ns >= greatest({LATE_FLOOR_NS}, coalesce(period_ns, 0) // {LATE_PERIOD_DIVISOR})"
    )
}

/// The temporary table `late` (one row per late collective) from `cand` and `lasts` (SQL of
/// [`lasts_sql`]'s columns, one row per candidate or more).
pub(crate) fn late_table_sql(lasts: &str) -> String {
    format!(
        "CREATE OR REPLACE TEMP TABLE late AS
SELECT l.*, cand.period_ns FROM ({lasts}) l JOIN cand USING (comm_hash, seq)
WHERE late_ns >= greatest({LATE_FLOOR_NS}, period_ns // {LATE_PERIOD_DIVISOR}, 2 * err_ns)"
    )
}

/// Per collective of `entries` (a table or subquery of [`Entries::sql`]'s columns): who entered
/// last (node, trace_uid, pid, tid, rank, nranks), by how much after the one before (`late_ns`),
/// the two entries' clock bounds (`err_ns`), what the others waited (`waited_ns`), when
/// (`last_ns`) and how many ranks were in (`ranks_in`).
pub(crate) fn lasts_sql(entries: &str) -> String {
    format!(
        "WITH who AS (
  SELECT comm_hash, seq, count(*) AS n, sum(enter_ns::HUGEINT) AS sum_enter, max(enter_ns, 2) AS last2,
         arg_max(err_ns, enter_ns, 2) AS errs,
         arg_max(hash(node), enter_ns, 2) AS nodes, arg_max(node, enter_ns) AS node,
         arg_max(trace_uid, enter_ns) AS trace_uid, arg_max(pid, enter_ns) AS pid, arg_max(tid, enter_ns) AS tid,
         arg_max(rank, enter_ns) AS rank, arg_max(nranks, enter_ns) AS nranks
  FROM {entries} GROUP BY comm_hash, seq)
SELECT comm_hash, seq, node, trace_uid, pid::BIGINT AS pid, tid::BIGINT AS tid, rank::BIGINT AS rank,
       nranks::BIGINT AS nranks, last2[1] - last2[2] AS late_ns,
       -- two entries on one node share its clock: its offset's error cancels
       CASE WHEN nodes[1] = nodes[2] THEN 0 ELSE errs[1] + errs[2] END AS err_ns,
       (n::HUGEINT * last2[1] - sum_enter)::BIGINT AS waited_ns,
       last2[1] AS last_ns, n AS ranks_in
FROM who"
    )
}
