//! The SQLite engine: [`SqliteSink`] writes native traces (WAL, prepared statements, batched
//! transactions on a writer thread), [`SqliteStore`] reads native traces and Ingero DBs, read-only.

mod describe;
mod reader;
pub(crate) mod rows;
mod writer;

pub use reader::SqliteStore;
pub(crate) use writer::{
    insert_attachments, insert_gpu_samples, insert_kernel_names, insert_launch_configs, insert_nccl_calls,
    insert_process_ranks, insert_session,
};
pub use writer::{SqliteSink, SqliteWriter};
