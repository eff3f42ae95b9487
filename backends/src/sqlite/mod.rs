//! The SQLite engine: [`SqliteSink`] writes native traces (WAL, prepared statements, batched
//! transactions on a writer thread), [`SqliteStore`] reads native traces and Ingero DBs, read-only.
//! A trace may also be a [`series`] of files, written by [`RollingWriter`] (rollover by size and
//! age, retention of the oldest) and read as one trace by [`SqliteStore`].

mod access_paths;
mod event_rows;
pub mod heap;
mod packed;
mod parallel;
mod reader;
mod rolling;
pub(crate) mod rows;
pub mod series;
mod target;
mod writer;

pub use reader::SqliteStore;
pub use rolling::{create_series_sink, RollPolicy, RollingWriter};
pub(crate) use target::ReadTarget;
pub(crate) use writer::{
    build_finished_structures, build_finished_structures_missing, insert_attachments, insert_footprint,
    insert_gpu_samples, insert_gpu_timeline, insert_kernel_names, insert_launch_configs, insert_nccl_calls,
    insert_net_peers, insert_process_cgroups, insert_process_ranks, insert_serving_samples, insert_session,
};
pub use writer::{SqliteSink, SqliteWriter};
