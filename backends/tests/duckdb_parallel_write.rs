//! DuckDB's writer appends a large group (a writer that fell behind) in parallel parts, one
//! connection each: the trace must read back exactly as if it had been appended in one piece
//! (every event once, ids in order, nothing from one part mixed into another's ids).
#![cfg(feature = "duckdb")]

use causeway_backends::duckdb::{DuckDbWriter, PARALLEL_PART_ROWS};
use causeway_backends::EngineWriter;
use causeway_backends::SyntheticTrace;
use causeway_backends::{open_store, EventFilter, EventId};
use causeway_model::SessionInfo;

#[test]
fn a_group_appended_in_parallel_parts_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("par.duckdb");
    let session = SessionInfo { started_at_ns: 1_000, tool_version: "test".into(), ..Default::default() };
    let mut gen = SyntheticTrace::new(7, 1_000_000_000);
    let small = gen.take(1_000); // one part: the writer's own thread
    let big = gen.take(3 * PARALLEL_PART_ROWS + 17); // three parts, the last one longer
    let mut w = DuckDbWriter::create(&path, &session).unwrap();
    w.set_parallelism(3);
    assert_eq!(w.write_batches([small.as_slice()]).unwrap(), 1_000);
    let (a, b) = big.split_at(100_000);
    assert_eq!(w.write_batches([a, b]).unwrap(), big.len() as u64);
    assert_eq!(w.finish(2_000).unwrap(), (1_000 + big.len()) as u64);

    let store = open_store(&path).unwrap();
    let mut back = store.events(&EventFilter::default()).unwrap();
    back.sort_by_key(|e| match e.id {
        EventId::Int(i) => i,
        _ => panic!("native ids are integers"),
    });
    let want: Vec<_> = small.iter().chain(&big).collect();
    assert_eq!(back.len(), want.len());
    for (i, (got, want)) in back.iter().zip(want).enumerate() {
        assert_eq!(got.id, EventId::Int(i as i64 + 1));
        assert_eq!(&got.event, want, "event id {}", i + 1);
    }
}
