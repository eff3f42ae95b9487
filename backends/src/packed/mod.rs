//! Structures a finished trace packs into byte strings at `finish`, beside its rows and indexes,
//! for the reads that cover a whole trace: the GPU calls in time order, and apart the step rows
//! among them ([`calls`]), and every
//! event's duration sorted per op ([`durations`]). What to pack and how to decode it lives here;
//! each engine stores the byte strings in a table of its own and reads them back
//! (`sqlite/packed.rs`: both; `duckdb/packed.rs`: the durations, see there why not the calls).
//!
//! **Invariant:** an engine believes its packed tables only when the finish that built them
//! recorded the trace's extent and the events still end at the recorded id; a writer that opens
//! the trace again drops them. Anything else reads the rows, with the same answers.

pub(crate) mod calls;
pub(crate) mod durations;
pub(crate) mod varint;

/// The tables the packed structures live in (a series of files, which reads its parts through
/// views, leaves them out).
pub(crate) const TABLES: [&str; 3] = [calls::TABLE, calls::STEP_TABLE, durations::TABLE];
