//! The stragglers across the fleet: the rank late at a communicator's collectives again and again,
//! its episodes, what the others waited for it and what that cost; read from the per-collective
//! summaries `fleet maintain` keeps where it can (`summaries.rs`), else from every row, with the
//! same answer. The statements are in `aligned.rs`.

use causeway_analysis::{straggler_cost, worst_stretch, GpuCost, Rate, Rates, Stretch, MIN_LATE};
use serde::Serialize;

use crate::aligned::late_tables_sql;
use crate::analyses::{strings, Fleet};
use crate::lake::LAKE;
use crate::summaries::{self, Coverage, Summarized, SUMMARY_TABLES};
use crate::FleetError;

/// One run of consecutive late collectives of a straggler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Episode {
    pub first_seq: i64,
    pub last_seq: i64,
    pub collectives: i64,
    /// Nearest-rank median lateness, ns.
    pub median_late_ns: i64,
    pub max_late_ns: i64,
    /// What the other ranks waited for it over the episode, ns.
    pub waited_ns: i64,
    /// Its first and last late entry, on the catalog's clock (unix ns).
    pub from_ns: i64,
    pub to_ns: i64,
}

/// A rank late at a communicator's collectives again and again, across the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct FleetStraggler {
    pub comm_hash: i64,
    pub node: String,
    pub trace_uid: String,
    pub pid: i64,
    pub tid: i64,
    pub rank: i64,
    pub nranks: i64,
    /// Collectives it was late at.
    pub late_collectives: i64,
    pub median_late_ns: i64,
    pub max_late_ns: i64,
    /// What the other ranks waited for it in total, ns.
    pub waited_ns: i64,
    /// The communicator's median period between collectives, ns.
    pub period_ns: i64,
    pub episodes: Vec<Episode>,
    /// What it waited for the other ranks at THEIR late collectives, ns: on a jittery fleet every
    /// rank is late now and then, and this much of its own lateness is paid back.
    pub waited_for_others_ns: i64,
    /// `waited_ns` less `waited_for_others_ns` (never below 0).
    pub net_waited_ns: i64,
    /// Its worst stretch (`causeway_analysis::worst_stretch`, as one host's explain grades a
    /// straggler): the densest run of its late collectives, net of what it waited for the others there.
    pub worst_stretch: Stretch,
    /// What its lateness cost: `waited_ns` of GPU time over the `nranks - 1` ranks that waited
    /// (each rank's GPU held in the collective), priced by [`Fleet::price`].
    pub cost: GpuCost,
}

impl Fleet {
    /// Bring the lake's per-collective summaries up to date (`fleet maintain`, on a shipping
    /// connection; see `summaries.rs`).
    pub fn summarize(&self) -> Result<Summarized, FleetError> {
        crate::lake::retry_conflicts(5, || summaries::summarize(&self.conn, self.entries()?))
    }

    /// The stragglers of every communicator, the most waited-for first, with their episodes: from
    /// the per-collective summaries where `fleet maintain` keeps them (and the rows of the
    /// collectives they lack), else from the rows. The same answer either way.
    pub fn stragglers(&self) -> Result<Vec<FleetStraggler>, FleetError> {
        // asked each time: a reader kept open (the MCP server's) sees the first maintain's tables
        let tables = strings(
            &self.conn,
            &format!("SELECT table_name FROM information_schema.tables WHERE table_catalog = '{LAKE}'"),
        )?;
        self.stragglers_reading(SUMMARY_TABLES.iter().all(|t| tables.iter().any(|x| x == t)))
    }

    /// [`Fleet::stragglers`] from every row, never from the summaries.
    pub fn stragglers_from_rows(&self) -> Result<Vec<FleetStraggler>, FleetError> {
        self.stragglers_reading(false)
    }

    fn stragglers_reading(&self, summarized: bool) -> Result<Vec<FleetStraggler>, FleetError> {
        // one snapshot of the lake for every statement: the summaries, the rows shipped since, the
        // rows read for the candidates
        self.conn.execute_batch("BEGIN TRANSACTION")?;
        let answer = self.stragglers_in_transaction(summarized);
        match &answer {
            Ok(_) => self.conn.execute_batch("COMMIT")?,
            Err(_) => drop(self.conn.execute_batch("ROLLBACK")),
        }
        answer
    }

    fn stragglers_in_transaction(&self, summarized: bool) -> Result<Vec<FleetStraggler>, FleetError> {
        // the late collectives once, then the episodes and the medians from them
        let lap = std::time::Instant::now();
        let entries = self.entries()?;
        tracing::debug!(?entries, ms = lap.elapsed().as_millis() as u64, "stragglers: how to read the entries");
        let lap = std::time::Instant::now();
        let coverage = if summarized { summaries::coverage(&self.conn, entries)? } else { Coverage::Unusable };
        tracing::debug!(?coverage, ms = lap.elapsed().as_millis() as u64, "stragglers: the summaries' coverage");
        let cand_entries = match coverage {
            Coverage::Unusable => "cand_entries",
            Coverage::Partial { .. } => "cand_entries_summarized",
        };
        let statements: Vec<(&str, String)> = match coverage {
            Coverage::Unusable => late_tables_sql(entries).into(),
            Coverage::Partial { .. } => std::iter::once(("candidates (summaries)", summaries::cand_sql()))
                .chain(summaries::late_sql())
                .collect(),
        };
        for (what, sql) in statements {
            let lap = std::time::Instant::now();
            self.conn.execute_batch(&sql)?;
            tracing::debug!(ms = lap.elapsed().as_millis() as u64, "stragglers: {what}");
        }
        let lap = std::time::Instant::now();
        let sql = format!(
            "WITH isl AS (SELECT *, seq - row_number() OVER (PARTITION BY comm_hash, node, trace_uid, pid ORDER BY seq) AS island FROM late),
s AS (SELECT comm_hash, node, trace_uid, pid FROM late GROUP BY ALL HAVING count(*) >= {MIN_LATE})
SELECT comm_hash, node, trace_uid, pid, any_value(tid), any_value(rank), any_value(nranks), island,
       min(seq), max(seq), count(*), quantile_disc(late_ns, 0.5), max(late_ns), sum(waited_ns)::BIGINT,
       min(last_ns), max(last_ns), any_value(period_ns)
FROM isl JOIN s USING (comm_hash, node, trace_uid, pid)
GROUP BY comm_hash, node, trace_uid, pid, island ORDER BY comm_hash, node, trace_uid, pid, min(seq)"
        );
        let mut st = self.conn.prepare(&sql)?;
        type Key = (i64, String, String, i64);
        let mut out: Vec<(Key, FleetStraggler)> = Vec::new();
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let key: Key = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let ep = Episode {
                first_seq: r.get(8)?,
                last_seq: r.get(9)?,
                collectives: r.get(10)?,
                median_late_ns: r.get(11)?,
                max_late_ns: r.get(12)?,
                waited_ns: r.get(13)?,
                from_ns: r.get(14)?,
                to_ns: r.get(15)?,
            };
            if out.last().is_none_or(|(k, _)| *k != key) {
                out.push((
                    key.clone(),
                    FleetStraggler {
                        comm_hash: key.0,
                        node: key.1.clone(),
                        trace_uid: key.2.clone(),
                        pid: key.3,
                        tid: r.get(4)?,
                        rank: r.get(5)?,
                        nranks: r.get(6)?,
                        late_collectives: 0,
                        median_late_ns: 0,
                        max_late_ns: 0,
                        waited_ns: 0,
                        period_ns: r.get(16)?,
                        episodes: Vec::new(),
                        waited_for_others_ns: 0,
                        net_waited_ns: 0,
                        worst_stretch: worst_stretch(&[], &[]),
                        cost: straggler_cost(0, 0),
                    },
                ));
            }
            let s = &mut out.last_mut().expect("pushed above").1;
            s.late_collectives += ep.collectives;
            s.max_late_ns = s.max_late_ns.max(ep.max_late_ns);
            s.waited_ns += ep.waited_ns;
            s.episodes.push(ep);
        }
        // the median over all its late collectives (not a median of episode medians)
        let medians = "SELECT comm_hash, node, trace_uid, pid, quantile_disc(late_ns, 0.5) FROM late GROUP BY ALL";
        let mut st = self.conn.prepare(medians)?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let key: Key = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            if let Some((_, s)) = out.iter_mut().find(|(k, _)| *k == key) {
                s.median_late_ns = r.get(4)?;
            }
        }
        // each rank's late collectives (seq, what the others waited), and what it waited for the
        // others at their late collectives (the other entries of the same collectives)
        type Waits = std::collections::BTreeMap<Key, Vec<(i64, i64)>>;
        let (mut late_of, mut paid_of): (Waits, Waits) = Default::default();
        let mut st = self
            .conn
            .prepare("SELECT comm_hash, node, trace_uid, pid, seq, waited_ns::BIGINT FROM late ORDER BY seq")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            late_of.entry((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)).or_default().push((r.get(4)?, r.get(5)?));
        }
        // (the entries as the late collectives counted them: one per process; of the stragglers only:
        // a fleet's on-time ranks each paid at every late collective, and nothing reads theirs)
        let paid = format!(
            "SELECT c.comm_hash, c.node, c.trace_uid, c.pid, l.seq, (l.last_ns - c.enter_ns)::BIGINT
             FROM late l JOIN {cand_entries} c ON c.comm_hash = l.comm_hash AND c.seq = l.seq
             SEMI JOIN (SELECT comm_hash, node, trace_uid, pid FROM late GROUP BY ALL HAVING count(*) >= {MIN_LATE}) s
               ON s.comm_hash = c.comm_hash AND s.node = c.node AND s.trace_uid = c.trace_uid AND s.pid = c.pid
             WHERE NOT (c.node = l.node AND c.trace_uid = l.trace_uid AND c.pid = l.pid) ORDER BY l.seq"
        );
        let mut st = self.conn.prepare(&paid)?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            paid_of.entry((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)).or_default().push((r.get(4)?, r.get(5)?));
        }
        for (key, s) in &mut out {
            let paid = paid_of.get(key).map(Vec::as_slice).unwrap_or_default();
            s.waited_for_others_ns = paid.iter().map(|p| p.1).sum();
            s.net_waited_ns = (s.waited_ns - s.waited_for_others_ns).max(0);
            s.worst_stretch = worst_stretch(late_of.get(key).map(Vec::as_slice).unwrap_or_default(), paid);
            s.cost = straggler_cost(s.waited_ns, u32::try_from(s.nranks - 1).unwrap_or(0));
        }
        tracing::debug!(ms = lap.elapsed().as_millis() as u64, "stragglers: episodes, medians and waits");
        let mut out: Vec<FleetStraggler> = out.into_iter().map(|(_, s)| s).collect();
        out.sort_by(|a, b| b.waited_ns.cmp(&a.waited_ns).then(a.node.cmp(&b.node)).then(a.pid.cmp(&b.pid)));
        Ok(out)
    }

    /// Price the stragglers' costs at the rate of the lake's GPU model (`rates`: the built-in
    /// table, the config file, `--gpu-rate`); the rate, or why there is none.
    pub fn price(&self, stragglers: &mut [FleetStraggler], rates: &Rates) -> Result<Result<Rate, String>, FleetError> {
        let rate = self.rate(rates)?;
        if let Ok(r) = &rate {
            for s in stragglers.iter_mut() {
                s.cost.dollars = Some(causeway_analysis::dollars_of(s.cost.gpu_ns, r));
            }
        }
        Ok(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FLEET_DDL;
    use duckdb::Connection;

    const SEC: i64 = 1_000_000_000;
    const MS: i64 = 1_000_000;

    /// Three ranks on three nodes, clocks in step; rank 2 enters collectives 50-69 200 ms late.
    /// Its cost counts both waiting ranks: 2 ranks x 20 collectives x ~200 ms of GPU time, priced
    /// at the rate given (the lake names no GPU model: without a rate, none is guessed).
    #[test]
    fn a_stragglers_cost_counts_every_waiting_rank() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!("ATTACH ':memory:' AS {LAKE}")).unwrap();
        conn.execute_batch(FLEET_DDL).unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE {LAKE}.nccl_calls (node VARCHAR, trace_uid VARCHAR, pid BIGINT, tid BIGINT, rank BIGINT,
               nranks BIGINT, comm_hash BIGINT, comm BIGINT, seq BIGINT, op BIGINT, count BIGINT, timestamp BIGINT)"
        ))
        .unwrap();
        let t0 = 1_790_000_000 * SEC;
        for node in ["a", "b", "c"] {
            conn.execute(
                &format!("INSERT INTO {LAKE}.clock_samples VALUES (?, 'u', 1, 0, ?, ?, ?)"),
                duckdb::params![node, t0 - SEC, t0 - SEC + 500, t0 - SEC + 1000],
            )
            .unwrap();
        }
        let op = causeway_model::codes::NCCL_COLLECTIVES[0].op as i64;
        let mut insert = conn
            .prepare(&format!("INSERT INTO {LAKE}.nccl_calls VALUES (?, 'u', ?, ?, ?, 3, 77, 1, ?, ?, 1, ?)"))
            .unwrap();
        for seq in 1..=100i64 {
            let at = t0 + seq * SEC;
            let late = if (50..70).contains(&seq) { 200 * MS } else { 100_000 };
            for (node, rank) in [("a", 0), ("b", 1), ("c", 2)] {
                let pid = 100 + rank;
                insert
                    .execute(duckdb::params![node, pid, pid, rank, seq, op, at + if rank == 2 { late } else { 0 }])
                    .unwrap();
            }
        }
        let fleet = Fleet::new(conn).unwrap();
        let mut st = fleet.stragglers().unwrap();
        assert_eq!(st.len(), 1, "{st:?}");
        assert_eq!((st[0].rank, st[0].cost.gpus), (2, 2));
        assert_eq!(st[0].cost.gpu_ns, st[0].waited_ns);
        assert!(st[0].waited_ns >= 2 * 20 * 199 * MS, "both ranks' waits: {}", st[0].waited_ns);
        let none = fleet.price(&mut st, &Rates::builtin()).unwrap();
        assert!(none.is_err() && st[0].cost.dollars.is_none(), "{none:?}");
        let rate = fleet.price(&mut st, &Rates::load(Some(3.6)).unwrap()).unwrap().unwrap();
        assert_eq!(rate.dollars_per_gpu_hour, 3.6);
        let want = st[0].waited_ns as f64 / 3.6e12 * 3.6;
        assert!((st[0].cost.dollars.unwrap() - want).abs() < 1e-9, "{:?}", st[0].cost);
    }
}
