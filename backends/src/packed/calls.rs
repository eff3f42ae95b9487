//! The GPU calls of a finished trace, packed in time order: the blocks an engine stores in
//! [`TABLE`] at finish and decodes for `scan_slim` instead of reading rows.
//!
//! `explain` reads every GPU call in scope (8 of a 10-million-event trace's rows), and decoding
//! nine columns of each row through an engine's row API was most of its time, and sorting them by
//! time (ids follow the order calls *ended*, not began) most of the rest. At finish the rows of
//! the [`block_sources`] (the GPU API calls and the workload's step labels) are packed in
//! (timestamp, id) order: [`CALLS_PER_BLOCK`] calls to a block with its time range, each field as
//! the difference to the previous call's in a variable-length integer (most take a byte or two).
//! A scan whose filter can only select rows of those sources decodes the blocks whose time range
//! meets its window, on one thread per core, applies the whole filter in Rust
//! ([`EventFilter::matches`], the SQL condition's twin) and hands the calls over in block order:
//! the same rows as the SQL, already in the order the callers sort into.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{mpsc, Mutex};

use causeway_model::codes::{OpCode, Source, GPU_CALL_SOURCES};
use causeway_store::{EventFilter, EventId, SlimEvent};

use super::varint::{put_signed, put_unsigned, Reader};
use crate::{Result, StoreError};

/// The table's name (in both engines).
pub(crate) const TABLE: &str = "call_blocks";

/// The table of the step rows' blocks (its rows are the labels and the calls that can
/// end a step, [`causeway_model::codes::step_ops`]): a window's steps are numbered from the
/// trace's start, so finding them reads these rows of the whole trace, a few percent of its calls
/// where the blocks of every call would be decoded for them.
pub(crate) const STEP_TABLE: &str = "step_blocks";

/// Calls per block: a block's byte string is about 1 MB, and a window reads whole blocks.
const CALLS_PER_BLOCK: usize = 65_536;

/// Threads that decode blocks at once (the machine's cores, at most this).
const DECODERS: usize = 4;

/// The query, in both engines' SQL, of the rows the blocks hold in the order they hold them.
pub(crate) fn select_sql() -> String {
    let sources: Vec<String> = block_sources().iter().map(u8::to_string).collect();
    format!(
        "SELECT id, timestamp, duration, pid, tid, source, op, arg0, arg2 FROM events WHERE source IN ({}) \
         ORDER BY timestamp, id",
        sources.join(", ")
    )
}

/// The sources whose rows the blocks hold: the GPU API calls, and the step labels `explain`
/// reads in the same scan.
pub(crate) fn block_sources() -> [u8; 5] {
    let g = GPU_CALL_SOURCES;
    [g[0], g[1], g[2], g[3], Source::Step.code()]
}

/// Whether every row `filter` can select is of a [`block_sources`] source (then the blocks
/// answer it).
pub(crate) fn answers(filter: &EventFilter) -> bool {
    if filter.failed {
        return false; // the blocks hold no ret_code
    }
    let held = block_sources();
    match (&filter.sources, &filter.ops) {
        (Some(sources), _) if sources.iter().all(|s| held.contains(s)) => true,
        (_, Some(ops)) => ops.iter().all(|o| held.contains(&o.source)),
        _ => false,
    }
}

/// Whether every row `filter` can select is a step row (`codes::is_step_op`): then the step
/// blocks answer it.
pub(crate) fn answers_steps(filter: &EventFilter) -> bool {
    !filter.failed && filter.ops.as_ref().is_some_and(|ops| ops.iter().all(|&o| causeway_model::codes::is_step_op(o)))
}

/// One packed block, as an engine stores it.
pub(crate) struct Block {
    /// Its number: blocks are read in this order.
    pub index: i64,
    pub min_ts: i64,
    pub max_ts: i64,
    pub calls: i64,
    pub data: Vec<u8>,
}

/// Packs calls (given in (timestamp, id) order) into blocks.
#[derive(Default)]
pub(crate) struct Packer {
    data: Vec<u8>,
    /// Blocks made.
    blocks: i64,
    calls: usize,
    /// The previous call's id and timestamp (0 before a block's first call).
    last: (i64, i64),
    min_ts: i64,
    max_ts: i64,
}

impl Packer {
    /// Adds a call; returns the block it filled.
    pub(crate) fn push(&mut self, c: &SlimEvent) -> Option<Block> {
        let id = match c.id {
            EventId::Int(i) => i,
            // native traces (the only ones packed) number their rows
            EventId::Text(_) => unreachable!("a native trace's id is an integer"),
        };
        if self.calls == 0 {
            self.last = (0, 0);
            (self.min_ts, self.max_ts) = (c.ts, c.ts);
        }
        put_signed(&mut self.data, id.wrapping_sub(self.last.0));
        put_signed(&mut self.data, c.ts.wrapping_sub(self.last.1));
        put_signed(&mut self.data, c.dur);
        put_unsigned(&mut self.data, u64::from(c.pid));
        put_signed(&mut self.data, i64::from(c.tid) - i64::from(c.pid));
        self.data.push(c.op.source);
        put_unsigned(&mut self.data, u64::from(c.op.op));
        put_signed(&mut self.data, c.arg0);
        put_signed(&mut self.data, c.arg2);
        self.last = (id, c.ts);
        self.min_ts = self.min_ts.min(c.ts);
        self.max_ts = self.max_ts.max(c.ts);
        self.calls += 1;
        (self.calls == CALLS_PER_BLOCK).then(|| self.take())
    }

    /// The last, partly filled block (none when it is empty).
    pub(crate) fn finish(mut self) -> Option<Block> {
        (self.calls > 0).then(|| self.take())
    }

    fn take(&mut self) -> Block {
        let b = Block {
            index: self.blocks,
            min_ts: self.min_ts,
            max_ts: self.max_ts,
            calls: self.calls as i64,
            data: std::mem::take(&mut self.data),
        };
        self.calls = 0;
        self.blocks += 1;
        b
    }
}

/// A stored block as a scan reads it: (number, calls, bytes).
pub(crate) type StoredBlock = (i64, usize, Vec<u8>);

/// Calls `f` for every call `filter` selects among `blocks` (the stored blocks whose time range
/// meets the filter's window, in block order), in (timestamp, id) order; returns the count. Only
/// for filters the blocks [`answers`]. Blocks are decoded on up to [`DECODERS`] threads while
/// this one reads the next (at most two blocks per decoder in flight).
pub(crate) fn scan(
    table: &str,
    blocks: &mut dyn Iterator<Item = Result<StoredBlock>>,
    filter: &EventFilter,
    f: &mut dyn FnMut(SlimEvent),
) -> Result<u64> {
    let decoders = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(DECODERS);
    let mut n = 0u64;
    if decoders < 2 {
        for b in blocks {
            let (block, calls, data) = b?;
            n += decode(calls, &data, filter, f).map_err(|e| damaged(table, block, e))?;
        }
        return Ok(n);
    }
    let (to_decode, jobs) = mpsc::channel::<StoredBlock>();
    let (done, decoded) = mpsc::channel::<Decoded>();
    let jobs = Mutex::new(jobs);
    std::thread::scope(|s| -> Result<u64> {
        for _ in 0..decoders {
            let (jobs, done) = (&jobs, done.clone());
            s.spawn(move || loop {
                let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok((block, calls, data)) = job else { return };
                let mut out = Vec::with_capacity(calls);
                let r = decode(calls, &data, filter, &mut |c| out.push(c)).map(|_| out);
                if done.send((block, r)).is_err() {
                    return;
                }
            });
        }
        drop(done); // a decoder that panicked is then an error here, not a wait forever
        let mut in_order = InOrder { table, waiting: BTreeMap::new(), order: VecDeque::new(), f, n: 0 };
        let result = (|| -> Result<()> {
            for b in blocks {
                let (block, calls, data) = b?;
                if in_order.order.len() >= 2 * decoders {
                    in_order.take(decoded.recv().expect("a decoder stopped"))?;
                }
                in_order.order.push_back(block);
                // the decoders wait for jobs until `to_decode` is dropped: a send cannot fail here
                let _ = to_decode.send((block, calls, data));
            }
            while !in_order.order.is_empty() {
                in_order.take(decoded.recv().expect("a decoder stopped"))?;
            }
            Ok(())
        })();
        drop(to_decode); // the decoders stop
        result.map(|()| in_order.n)
    })
}

/// The error of a block of `table` that does not decode.
pub(crate) fn damaged(table: &str, block: i64, why: &str) -> StoreError {
    StoreError::Engine(format!("{table}: block {block}: {why}"))
}

/// A block's calls, decoded, or why not.
type Decoded = (i64, std::result::Result<Vec<SlimEvent>, &'static str>);

/// Decoded blocks handed to `f` in the order their jobs were sent.
struct InOrder<'f> {
    /// The blocks' table (for the error of a damaged one).
    table: &'f str,
    /// Decoded blocks that wait for an earlier one.
    waiting: BTreeMap<i64, Vec<SlimEvent>>,
    /// Blocks sent and not yet handed over, in order.
    order: VecDeque<i64>,
    f: &'f mut dyn FnMut(SlimEvent),
    /// Calls handed over.
    n: u64,
}

impl InOrder<'_> {
    fn take(&mut self, (block, r): Decoded) -> Result<()> {
        self.waiting.insert(block, r.map_err(|e| damaged(self.table, block, e))?);
        while let Some(calls) = self.order.front().and_then(|b| self.waiting.remove(b)) {
            self.order.pop_front();
            self.n += calls.len() as u64;
            calls.into_iter().for_each(&mut *self.f);
        }
        Ok(())
    }
}

/// Decodes one block, calling `f` for the calls `filter` matches; returns how many matched.
fn decode(
    calls: usize,
    data: &[u8],
    filter: &EventFilter,
    f: &mut dyn FnMut(SlimEvent),
) -> std::result::Result<u64, &'static str> {
    let mut r = Reader::new(data);
    let (mut id, mut ts) = (0i64, 0i64);
    let mut n = 0u64;
    for _ in 0..calls {
        id = id.wrapping_add(r.signed()?);
        ts = ts.wrapping_add(r.signed()?);
        let dur = r.signed()?;
        let pid = r.unsigned()? as u32;
        let tid = (i64::from(pid) + r.signed()?) as u32;
        let source = r.byte()?;
        let op = OpCode::new(source, r.unsigned()? as u16);
        let arg0 = r.signed()?;
        let arg2 = r.signed()?;
        if filter.matches(ts, pid, tid, op) {
            f(SlimEvent { id: EventId::Int(id), ts, dur, pid, tid, op, arg0, arg2 });
            n += 1;
        }
    }
    if !r.at_end() {
        return Err("bytes left after its last call");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: i64, ts: i64, pid: u32, tid: u32, op: OpCode, arg0: i64, arg2: i64) -> SlimEvent {
        SlimEvent { id: EventId::Int(id), ts, dur: ts / 7 - 3, pid, tid, op, arg0, arg2 }
    }

    #[test]
    fn a_block_decodes_to_the_calls_it_was_given_and_the_filter_keeps_the_same_rows() {
        let launch = causeway_model::codes::op::CUDA_LAUNCH_KERNEL;
        let sync = causeway_model::codes::op::CUDA_STREAM_SYNC;
        // out-of-order timestamps, gaps in ids, threads below and above their pid, extreme args
        let calls = [
            call(10, 5_000, 4821, 4821, launch, -1, i64::MAX),
            call(11, 4_000, 4821, 4830, sync, 0, 0),
            call(15, 9_000_000_000, 77, 12, launch, i64::MIN, -5),
            call(16, 9_000_000_001, u32::MAX, u32::MAX, sync, 1 << 40, 3),
        ];
        let mut p = Packer::default();
        assert!(calls.iter().all(|c| p.push(c).is_none()));
        let b = p.finish().expect("a block");
        assert_eq!((b.index, b.min_ts, b.max_ts, b.calls), (0, 4_000, 9_000_000_001, 4));
        let (data, n) = (b.data, 4);
        let filters = [
            EventFilter::default(),
            EventFilter { pid: Some(4821), ..Default::default() },
            EventFilter { tids: Some(vec![12, u32::MAX]), ..Default::default() },
            EventFilter { ops: Some(vec![sync]), ..Default::default() },
            EventFilter::window(causeway_model::time::TimeWindow { from_ns: Some(4_500), to_ns: Some(9_000_000_000) }),
        ];
        for filter in filters {
            let mut got = Vec::new();
            let kept = decode(n, &data, &filter, &mut |c| got.push(c)).unwrap();
            let want: Vec<SlimEvent> =
                calls.iter().filter(|c| filter.matches(c.ts, c.pid, c.tid, c.op)).cloned().collect();
            assert_eq!((kept as usize, &got), (want.len(), &want), "{filter:?}");
        }
        assert!(decode(n, &data[..data.len() - 1], &EventFilter::default(), &mut |_| ()).is_err());
        assert_eq!(decode(n - 1, &data, &EventFilter::default(), &mut |_| ()), Err("bytes left after its last call"));
    }

    #[test]
    fn only_filters_confined_to_the_held_sources_are_answered() {
        let cuda = Source::Cuda.code();
        assert!(answers(&EventFilter { sources: Some(GPU_CALL_SOURCES.to_vec()), ..Default::default() }));
        assert!(answers(&EventFilter {
            sources: Some(vec![cuda, Source::Step.code()]),
            pid: Some(1),
            ..Default::default()
        }));
        assert!(answers(&EventFilter {
            ops: Some(vec![causeway_model::codes::op::CUDA_STREAM_SYNC]),
            ..Default::default()
        }));
        assert!(!answers(&EventFilter::default()));
        assert!(!answers(&EventFilter { sources: Some(vec![cuda, Source::Host.code()]), ..Default::default() }));
        assert!(!answers(&EventFilter {
            ops: Some(vec![causeway_model::codes::op::SCHED_SWITCH]),
            ..Default::default()
        }));
    }

    #[test]
    fn only_filters_confined_to_the_step_rows_are_answered_by_the_step_blocks() {
        use causeway_model::codes::op;
        let ops = |v: Vec<OpCode>| EventFilter { ops: Some(v), pid: Some(3), ..Default::default() };
        assert!(answers_steps(&ops(causeway_model::codes::step_ops())));
        assert!(answers_steps(&ops(vec![op::CUDA_STREAM_SYNC])));
        assert!(!answers_steps(&ops(vec![op::CUDA_STREAM_SYNC, op::CUDA_LAUNCH_KERNEL])));
        assert!(!answers_steps(&EventFilter { sources: Some(vec![Source::Step.code()]), ..Default::default() }));
        assert!(!answers_steps(&EventFilter { failed: true, ..ops(vec![op::CUDA_STREAM_SYNC]) }));
        // every step row is a row the call blocks hold: the step blocks are a subset of them
        assert!(causeway_model::codes::step_ops().iter().all(|o| block_sources().contains(&o.source)));
    }

    #[test]
    fn full_blocks_are_scanned_in_order_on_parallel_decoders_and_a_damaged_one_is_named() {
        let launch = causeway_model::codes::op::CUDA_LAUNCH_KERNEL;
        let n = 3 * CALLS_PER_BLOCK + 5;
        let calls: Vec<SlimEvent> =
            (0..n as i64).map(|i| call(i * 2 + 1, 1_000 + i * 3, 10, 10 + (i % 3) as u32, launch, i, -i)).collect();
        let mut p = Packer::default();
        let mut blocks: Vec<Block> = calls.iter().filter_map(|c| p.push(c)).collect();
        assert_eq!(blocks.len(), 3, "a block is made each time one fills");
        blocks.extend(p.finish());
        let stored = |blocks: &[Block]| -> Vec<Result<StoredBlock>> {
            blocks.iter().map(|b| Ok((b.index, b.calls as usize, b.data.clone()))).collect()
        };
        let mut got = Vec::new();
        let filter = EventFilter { tids: Some(vec![10, 12]), ..Default::default() };
        let kept = scan(TABLE, &mut stored(&blocks).into_iter(), &filter, &mut |c| got.push(c)).unwrap();
        let want: Vec<SlimEvent> = calls.iter().filter(|c| c.tid != 11).cloned().collect();
        assert_eq!((kept as usize, got.len()), (want.len(), want.len()));
        assert!(got == want, "the calls come back in the order they were packed");
        blocks[2].data.truncate(10);
        let err = scan(TABLE, &mut stored(&blocks).into_iter(), &filter, &mut |_| ()).unwrap_err().to_string();
        assert!(err.ends_with("call_blocks: block 2: cut short"), "{err}");
    }
}
