//! Analysis over any [`causeway_store::TraceStore`]: every figure is computed from the events the
//! store holds; nothing is estimated.
//!
//! The API, all re-exported here (the modules are private):
//! - [`compute_stats`]: exact per-op statistics, nearest-rank percentiles.
//! - [`explain`]: each slow call and each long gap between GPU calls attributed to what its own
//!   thread went through, grouped into ranked causal [`Chain`]s with the SQL that proves them;
//!   [`find_chain`] finds one again.
//! - [`top_stacks`], [`timeline`]: the stacks behind calls, and what each thread did around one;
//!   a call of a thread without Python frames of its own shows the Python stack it borrowed from
//!   the thread it ran for ([`BorrowedStack`]).
//!
//! **Architecture invariant:** this crate reads traces through the storage traits only
//! (`causeway-store`); Cargo keeps it from naming an engine. Its sentences (a chain's summary,
//! details, recommendations) are findings; how a report is laid out for a terminal or an agent
//! belongs to the CLI (`cli/src/report.rs`) and the MCP server.

mod attribution;
mod borrowed;
mod calls;
mod chains;
mod collectives;
mod compare;
mod cost;
mod coverage;
mod detector_chains;
mod detectors;
mod device_idle;
mod device_stats;
mod engine_steps;
mod evidence;
mod explain;
mod few_keys;
mod footprint;
mod gpu_link;
mod gpu_memory;
mod gpu_state;
mod kernels;
mod network;
mod rank_select;
mod serving;
mod severity;
mod spill_vec;
mod spin;
mod stacks;
mod stats;
mod steps;
#[cfg(test)]
mod test_rng;
mod timeline;
mod trace_data;
mod trace_facts;

pub use attribution::{gpu_call_sources, Cause, Culprit, ThreadNesting};
pub use borrowed::{BorrowedShare, BorrowedStack, LendEvidence};
pub use chains::{culprit_words, Chain, ChainKind, CpuTime, Evidence, Severity, TimelineStep, HEADLINE_MAX};
pub use collectives::{
    find_stragglers, worst_stretch, Straggler, Stretch, LATE_FLOOR_NS, LATE_PERIOD_DIVISOR, MIN_LATE,
};
pub use compare::{join_chains, join_ops, ChainChange, OpComparison, OpSide};
pub use cost::{dollars, dollars_of, price, rate_of, rates, straggler_cost, CostBasis, GpuCost, Rate, Rates, RunCost};
pub use device_idle::{
    device_view, part_words as idle_part_words, place_in_steps as place_gaps_in_steps, verdict as device_verdict,
    DeviceFigures, DeviceView, IdleCause, IdleChain, IdleGap, IdlePart, NextOp, StreamFigures, DEFAULT_GAP_NS,
    MISSING as DEVICE_VIEW_MISSING,
};
pub use device_stats::{DeviceBusy, DeviceOpStats, DeviceStats, LatencyStats};
pub use engine_steps::{EngineSteps, Phase, PhaseFigures};
pub use explain::{explain, find_chain, ExplainRequest, Explanation, OpFigures};
pub use footprint::{
    footprint, request_words, Child, FigureSql, Footprint, FootprintRequest, OffCpu, ProcessFootprint,
    RequestFootprint, SyscallKind, TouchedFile,
};
pub use gpu_link::{busy_sql, degraded_sql, is_busy, nvlink_errors_sql, LinkSummary};
pub use gpu_memory::ProcessGpuMemory;
pub use gpu_state::GpuSummary;
pub use kernels::{
    config_words, kernel_label, short_name as short_kernel_name, ChainKernel, KernelIndex, KernelReport,
};
pub use network::{network_report, NetworkReport, PeerTraffic, UntracedTraffic};
pub use serving::{serving_report, serving_series, EngineServing, LatencyFigures, ServingReport, ServingSeries, Spike};
pub use stacks::{call_site, kernel_filter_words, top_stacks, StackShare, StackSummary, StacksReport, StacksRequest};
pub use stats::{compute_stats, resolve_window, OpStats, StatsRequest, TraceStats, PERCENTILES};
pub use steps::{
    find_steps, judged_by, slow_threshold, step_window, steps_of, SlowSteps, Step, StepReport, StepSeries,
};
pub use timeline::{timeline, DeviceEntry, DeviceLane, TimelineReport, TimelineRequest, DEFAULT_AROUND_NS};

/// Why an analysis could not run.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error(transparent)]
    Store(#[from] causeway_store::StoreError),
    #[error("invalid argument: {0}")]
    BadArgument(String),
}
