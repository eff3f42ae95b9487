//! The user-space half of Causeway's eBPF probes. The modules are private; the API is re-exported
//! below ([`trace`] and its options and report, [`host_check`], library discovery, the probe table
//! and the loader for tests and benches).
//!
//! **Architecture invariant:** the probes write through the storage traits only
//! (`causeway-store`'s [`EventSink`](causeway_store::EventSink)); Cargo keeps them from naming an
//! engine.
//!
//! - [`discovery`]: where the CUDA libraries are (explicit path, `/proc/PID/maps`, ldconfig, CUDA
//!   install paths, pip `nvidia-*` wheels).
//! - [`loader`]: loads `ebpf/causeway.bpf.o` (built by build.rs) with aya, attaches uprobe/uretprobe
//!   pairs by symbol and the host tracepoints.
//! - [`wire`] and [`decode`]: ring records to [`causeway_model::Event`].
//! - [`session`]: [`trace`], one complete trace into an [`causeway_store::EventSink`], with loss
//!   accounting; [`stats`]: the live per-op table.
//! - [`python`]: the CPython frames of a call (layout per interpreter, line tables, the merge
//!   with native frames).
//! - [`check`]: [`host_check`], what this host can trace and how to fix what is missing.
//! - `serving`: a traced serving engine's (vLLM, SGLang, TGI, Triton) Prometheus endpoint, found
//!   and scraped into `serving_samples` while tracing.

mod cgroups;
mod check;
mod cuda_table;
mod decode;
mod devices;
mod discovery;
mod error;
mod footprint;
mod footprint_names;
mod gpu_state;
mod gpu_timeline;
mod host_watch;
mod in_flight;
mod kernels;
mod kmsg;
mod labels;
mod libraries;
mod loader;
mod metrics;
mod multi;
mod nccl;
mod process;
mod python;
mod rings;
mod running;
mod serving;
mod session;
mod stats;
mod symbols;
mod wire;

pub use causeway_gpu_wire::WindowRequest as GpuWindowRequest;
pub use check::{host_check, mount_tracefs, tracefs_mounted, CheckReport};
pub use cuda_table::{ProbeLib, CUDA_PROBES};
pub use discovery::{discover, site_packages_of_program, DiscoveryOptions, FoundLibrary, LibKind};
pub use error::ProbeError;
pub use gpu_state::{NvmlOptions, DEFAULT_NVML_LIB};
pub use gpu_timeline::triggers::{TriggerKind as GpuTriggerKind, TriggerOptions as GpuTriggerOptions};
pub use gpu_timeline::{
    find_library as find_injection_library, request_window as request_gpu_window, GpuTimelineOptions, INJECTION_ENV,
    LIBRARY_FILE as INJECTION_LIBRARY_FILE,
};
pub use labels::{default_socket_path, monotonic_ns, send_labels, LabelMessage, LabelOptions, LABELS_ENV};
pub use loader::{file_id, LoadOptions, Probes};
pub use metrics::{BatchTally, TraceMetrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
pub use serving::ServingOptions;
pub use session::{new_session_info, trace, TraceOptions, TraceReport, UnwrittenRows};
pub use stats::{LiveStats, OpStats};
pub use symbols::ElfSymbols;
