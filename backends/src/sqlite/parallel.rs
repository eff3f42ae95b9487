//! Scans of a finished SQLite trace split across threads by ranges of `id` (the rowid), one
//! read-only connection per thread: the integer scans that read most of a trace (`explain`'s GPU
//! calls, `stats`' durations) spend their time decoding SQLite rows, which one core cannot hurry.
//! The ranges are small and handed out in order; their rows reach the caller in id order (a
//! reorder window of a few ranges per thread), so a trace written in time order is read in time
//! order and the caller's sort finds nothing to do. A trace still being written is read on the
//! store's own connection: its ranges could see different snapshots.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use rusqlite::types::Value;
use rusqlite::{Connection, Row};

use crate::reader_common::and_where;
use crate::{Result, StoreError};

/// Fewer events than this are read on one connection: opening more costs more than it saves.
pub(crate) const MIN_EVENTS: u64 = 1_000_000;

/// How many threads read at once: the machine's cores, at most 4 (SQLite's page cache is per
/// connection: more threads mostly read the same pages again).
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(4)
}

/// Ids per range: small enough that a few ranges per thread waiting to be handed over in order
/// hold little memory, large enough that a range costs far more than its query's setup.
const RANGE_IDS: i64 = 65_536;

/// Ranges each thread may read ahead of the oldest range not yet handed over.
const AHEAD_PER_THREAD: usize = 2;

/// Consecutive ranges `[lo, hi)` of at most `span` ids that together cover every row of `events`
/// (none when it is empty).
pub(crate) fn id_ranges(conn: &Connection, span: i64) -> rusqlite::Result<Vec<(i64, i64)>> {
    let (lo, hi): (Option<i64>, Option<i64>) =
        conn.query_row("SELECT (SELECT min(id) FROM events), (SELECT max(id) FROM events)", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let (Some(lo), Some(hi)) = (lo, hi) else { return Ok(Vec::new()) };
    let end = hi.saturating_add(1);
    let span = span.max(1);
    let mut out = Vec::new();
    let mut a = lo;
    while a < end {
        let b = a.saturating_add(span).min(end);
        out.push((a, b));
        a = b;
    }
    Ok(out)
}

/// A scan of `events`: `select` (a SELECT from `events` without WHERE), then `clause` (empty, or
/// a WHERE clause starting with a space) and its parameters.
pub(crate) struct Scan<'a> {
    pub select: &'a str,
    pub clause: &'a str,
    pub params: &'a [Value],
}

/// Runs `scan` over every id range of the trace (`conn` finds them), `threads` connections from
/// `connect` reading ranges in turn; every row decoded by `decode` goes to `f` on the calling
/// thread, in id order. Returns the rows read.
pub(crate) fn scan_ranges<T: Send>(
    conn: &Connection,
    connect: &(dyn Fn() -> Result<Connection> + Sync),
    threads: usize,
    scan: Scan<'_>,
    decode: fn(&Row<'_>) -> rusqlite::Result<T>,
    f: &mut dyn FnMut(T),
) -> Result<u64> {
    let ranges = id_ranges(conn, RANGE_IDS)?;
    let sql = format!("{}{}", scan.select, and_where(scan.clause, "id >= ? AND id < ?"));
    let params = scan.params;
    let window = threads * AHEAD_PER_THREAD;
    let next = AtomicUsize::new(0);
    // ranges handed to `f` so far; a thread waits before reading a range too far ahead of it
    let handed = (Mutex::new(0usize), Condvar::new());
    let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<T>)>(window);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (tx, sql, ranges, next, handed) = (tx.clone(), &sql, &ranges, &next, &handed);
                s.spawn(move || -> Result<()> {
                    let conn = connect()?;
                    let mut st = conn.prepare(sql)?;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(lo, hi)) = ranges.get(i) else { return Ok(()) };
                        {
                            let (count, cv) = handed;
                            let mut count = count.lock().unwrap_or_else(|p| p.into_inner());
                            while i >= *count + window {
                                count = cv.wait(count).unwrap_or_else(|p| p.into_inner());
                            }
                        }
                        let bound = params.iter().cloned().chain([Value::Integer(lo), Value::Integer(hi)]);
                        let mut rows = st.query(rusqlite::params_from_iter(bound))?;
                        let mut out = Vec::new();
                        while let Some(r) = rows.next()? {
                            out.push(decode(r)?);
                        }
                        // the receiver is gone only when the caller panicked or a range failed
                        if tx.send((i, out)).is_err() {
                            return Ok(());
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut n = 0u64;
        let mut waiting: BTreeMap<usize, Vec<T>> = BTreeMap::new();
        let mut expected = 0usize;
        for (i, rows) in rx.iter() {
            waiting.insert(i, rows);
            while let Some(rows) = waiting.remove(&expected) {
                n += rows.len() as u64;
                rows.into_iter().for_each(&mut *f);
                expected += 1;
                let (count, cv) = &handed;
                *count.lock().unwrap_or_else(|p| p.into_inner()) = expected;
                cv.notify_all();
            }
            // a failed thread leaves a hole no row will fill: stop, and report its error below
            if waiting.len() > window {
                break;
            }
        }
        drop(rx);
        // wake threads waiting for a hand-over that will not come
        {
            let (count, cv) = &handed;
            *count.lock().unwrap_or_else(|p| p.into_inner()) = usize::MAX / 2;
            cv.notify_all();
        }
        let mut failure = None;
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = failure.or(Some(e)),
                Err(_) => failure = failure.or(Some(StoreError::Engine("a range scan thread panicked".into()))),
            }
        }
        match failure {
            Some(e) => Err(e),
            None if expected < ranges.len() => {
                Err(StoreError::Engine(format!("range scan stopped after {expected} of {} ranges", ranges.len())))
            }
            None => Ok(n),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranges_cover_every_id_once() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY)").unwrap();
        assert!(id_ranges(&c, 3).unwrap().is_empty());
        for id in [5, 6, 9, 40, 41] {
            c.execute("INSERT INTO events VALUES (?1)", [id]).unwrap();
        }
        for span in 1..=40 {
            let r = id_ranges(&c, span).unwrap();
            assert_eq!((r[0].0, r[r.len() - 1].1), (5, 42), "{span}: {r:?}");
            assert!(r.iter().all(|(a, b)| a < b && b - a <= span), "{span}: {r:?}");
            assert!(r.windows(2).all(|w| w[0].1 == w[1].0), "{span}: {r:?}");
        }
    }

    #[test]
    fn threads_hand_every_row_over_once_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY, v INTEGER)").unwrap();
        let tx = c.unchecked_transaction().unwrap();
        // ids with gaps, across many ranges
        for id in (0..400_000i64).filter(|i| i % 7 != 3) {
            tx.execute("INSERT INTO events VALUES (?1, ?2)", [id, id * 2]).unwrap();
        }
        tx.commit().unwrap();
        let connect = || Ok(Connection::open(&path)?);
        for threads in [1, 2, 3] {
            let mut seen = Vec::new();
            let n = scan_ranges(
                &c,
                &connect,
                threads,
                Scan { select: "SELECT id, v FROM events", clause: " WHERE v % 2 = 0", params: &[] },
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                &mut |row| seen.push(row),
            )
            .unwrap();
            let want: Vec<(i64, i64)> = (0..400_000i64).filter(|i| i % 7 != 3).map(|i| (i, i * 2)).collect();
            assert_eq!((n as usize, seen.len()), (want.len(), want.len()), "{threads} threads");
            assert!(seen == want, "{threads} threads: rows out of order or changed");
        }
        // a range that fails fails the scan
        let bad = Scan { select: "SELECT id, v FROM events", clause: " WHERE no_such_column = 1", params: &[] };
        let err = scan_ranges(&c, &connect, 2, bad, |r| r.get::<_, i64>(0), &mut |_| {});
        assert!(err.is_err());
    }
}
