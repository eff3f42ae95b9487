//! Which events a trace ships to the lake: the `summary` tier (the default) or `all`.

use causeway_model::codes::{gpu_role, GpuRole, OpCode, Source, OPS};
use serde::Serialize;

use crate::FleetError;

/// Which events a trace ships.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Collectives, synchronizing calls, their stacks, and aggregates of everything.
    Summary,
    /// Every event.
    All,
}

impl Tier {
    pub fn parse(s: &str) -> Result<Tier, FleetError> {
        match s {
            "summary" => Ok(Tier::Summary),
            "all" => Ok(Tier::All),
            _ => Err(FleetError::BadLake(format!("tier `{s}`: summary or all"))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Tier::Summary => "summary",
            Tier::All => "all",
        }
    }
}

/// The events the summary tier ships: every NCCL call, every call that waits for the GPU and every
/// labeled step, epoch and task.
pub fn summary_predicate() -> String {
    let mut codes: Vec<String> = OPS
        .iter()
        .map(|e| OpCode::new(e.0, e.1))
        .filter(|c| matches!(gpu_role(*c), GpuRole::Sync | GpuRole::SyncCopy | GpuRole::Collective))
        .map(|c| format!("({}, {})", c.source, c.op))
        .collect();
    codes.sort();
    format!("(source IN ({}, {}) OR (source, op) IN ({}))", Source::Nccl.code(), Source::Step.code(), codes.join(", "))
}
