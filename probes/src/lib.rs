//! The user-space half of Causeway's eBPF probes.
//!
//! - [`discovery`]: where the CUDA libraries are (explicit path, `/proc/PID/maps`, ldconfig, CUDA
//!   install paths, pip `nvidia-*` wheels).
//! - [`loader`]: loads `ebpf/causeway.bpf.o` (built by build.rs) with aya, attaches uprobe/uretprobe
//!   pairs by symbol and the host tracepoints.
//! - [`wire`] and [`decode`]: ring records to [`causeway_model::Event`].
//! - [`session`]: [`trace`], one complete trace into an [`causeway_backends::EventSink`], with loss
//!   accounting; [`stats`]: the live per-op table.
//! - [`python`]: the CPython frames of a call (layout per interpreter, line tables, the merge
//!   with native frames).
//! - [`check`]: [`host_check`], what this host can trace and how to fix what is missing.

pub mod check;
pub mod cuda_table;
pub mod decode;
pub mod discovery;
mod error;
pub mod kernels;
pub mod libraries;
pub mod loader;
pub mod multi;
pub mod process;
pub mod python;
mod rings;
pub mod session;
pub mod stats;
pub mod symbols;
pub mod wire;

pub use check::{host_check, CheckReport};
pub use error::ProbeError;
pub use session::{new_session_info, trace, LossRow, TraceOptions, TraceReport, UnwrittenRows};
pub use stats::{LiveStats, OpStats};
