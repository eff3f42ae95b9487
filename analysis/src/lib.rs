//! Analysis over any [`causeway_backends::TraceStore`]: exact statistics ([`stats`]). Every figure
//! is computed from the events the store holds; nothing is estimated.

pub mod attribution;
pub mod chains;
pub mod coverage;
pub mod detector_chains;
pub mod detectors;
pub mod evidence;
pub mod explain;
pub mod few_keys;
pub mod kernels;
pub mod report;
pub mod severity;
pub mod spin;
pub mod stacks;
pub mod stats;
pub mod timeline;
pub mod trace_data;
pub mod trace_facts;

/// Why an analysis could not run.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error(transparent)]
    Store(#[from] causeway_backends::StoreError),
    #[error("invalid argument: {0}")]
    BadArgument(String),
}
