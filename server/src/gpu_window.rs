//! `open_gpu_window` (only with `causeway mcp --allow-capture`): open, or close, a window on the
//! device timeline of a running process that `causeway trace --pid P --gpu-timeline --gpu-dormant`
//! attached. The library in that process records only while a window is open; this asks the tracer
//! serving it (its device-timeline socket, `causeway_probes::request_gpu_window`), the same request
//! as `causeway gpu-window`. The window is bounded (an hour at most) and stored in that trace with
//! who opened it ("mcp") and why.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tool's name.
pub const NAME: &str = "open_gpu_window";
/// Its title.
pub const TITLE: &str = "Open a window on a running process's GPU timeline";
/// Its description.
pub const DESCRIPTION: &str = "Record the device timeline (kernels, copies, syncs) of a running process for `seconds` \
     (at most 3600), or close the open window (`close`). The process must be attached by a running \
     `causeway trace --pid P --gpu-timeline --gpu-dormant`; the window and `why` go into that trace. Then read it \
     with get_causal_chains once the trace ends.";

/// `open_gpu_window`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuWindowArgs {
    /// The attached process.
    pub pid: u32,
    /// How long the window stays open, seconds (default 10, at most 3600).
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Close the open window now instead.
    #[serde(default)]
    pub close: bool,
    /// Why (stored with the window).
    #[serde(default)]
    pub why: Option<String>,
}

/// `open_gpu_window`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GpuWindowOutput {
    /// The tracer's answer: the window opening (or closing), on which process and tracer.
    pub summary: String,
}

/// Asks the tracer; its answer, or why no tracer took the request.
pub fn open(args: GpuWindowArgs) -> Result<GpuWindowOutput, String> {
    let seconds = args.seconds.unwrap_or(10.0);
    let valid = seconds > 0.0 && seconds.is_finite();
    if !args.close && !valid {
        return Err(format!("seconds must be a positive number, got {seconds}"));
    }
    let request = causeway_probes::GpuWindowRequest {
        pid: args.pid,
        for_ms: if args.close { 0 } else { ((seconds.min(3600.0) * 1000.0).ceil() as u64).max(1) },
        who: "mcp (open_gpu_window)".into(),
        why: args.why.unwrap_or_default(),
    };
    causeway_probes::request_gpu_window(None, &request).map(|summary| GpuWindowOutput { summary })
}
