//! The colours of every picture, one per kind of thing drawn (a call by its GPU role, an off-CPU
//! interval by its cause, the task that took a CPU, the device busy or idle), so a reader learns
//! them once.

use causeway_model::codes::GpuRole;
use causeway_model::PrevState;

pub(crate) const BACKGROUND: &str = "#ffffff";
pub(crate) const GRID: &str = "#e5e7eb";
pub(crate) const MUTED: &str = "#6b7280";
pub(crate) const BAR_TEXT: &str = "#ffffff";
pub(crate) const EVIDENCE: &str = "#111827";
pub(crate) const CULPRIT: &str = "#7f1d1d";
pub(crate) const HISTOGRAM: &str = "#2563eb";
pub(crate) const SLOW: &str = "#dc2626";
/// The device lane: the device running work, idle, idle in a gap the device view explains.
pub(crate) const DEVICE_BUSY: &str = "#0f766e";
pub(crate) const DEVICE_IDLE: &str = "#e5e7eb";
pub(crate) const DEVICE_GAP: &str = "#fca5a5";

/// A call's colour by what it does on the GPU.
pub(crate) fn call(role: GpuRole) -> &'static str {
    match role {
        GpuRole::Launch => "#16a34a",
        GpuRole::Sync => "#7c3aed",
        GpuRole::SyncCopy => "#0891b2",
        GpuRole::Alloc | GpuRole::Free => "#a16207",
        GpuRole::Collective => "#db2777",
        GpuRole::Other => "#475569",
    }
}

/// The CSS class of a call's role.
pub(crate) fn role_class(role: GpuRole) -> &'static str {
    match role {
        GpuRole::Launch => "launch",
        GpuRole::Sync => "sync",
        GpuRole::SyncCopy => "copy",
        GpuRole::Alloc => "alloc",
        GpuRole::Free => "free",
        GpuRole::Collective => "collective",
        GpuRole::Other => "other",
    }
}

/// An off-CPU interval's colour by why the thread left the CPU.
pub(crate) fn off_cpu(state: PrevState) -> &'static str {
    match state {
        PrevState::Preempted => "#ef4444",
        PrevState::Sleeping => "#3b82f6",
        PrevState::Uninterruptible => "#f59e0b",
        PrevState::Other => "#9ca3af",
        PrevState::Unknown => "#d1d5db",
    }
}
