//! `causeway gpu-window`: open (or close) a window on the device timeline of a running process that
//! `causeway trace --pid P --gpu-timeline` attached. The library in that process records only while
//! a window is open; the request goes to the tracer over its device-timeline socket
//! (`causeway_probes::request_gpu_window`), which tells the library, and the window (who opened it,
//! why, for how long) is in the trace as `window_opened` / `window_closed` notes.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The attached process.
    #[arg(long)]
    pid: u32,
    /// How long the window stays open (e.g. 10s, 500ms, 2m; at most 1h).
    #[arg(long = "for", value_name = "DURATION", value_parser = crate::cmd_trace::parse_window, required_unless_present = "close")]
    for_ms: Option<u64>,
    /// Close the open window now instead.
    #[arg(long, conflicts_with = "for_ms")]
    close: bool,
    /// Why (stored with the window).
    #[arg(long, default_value = "")]
    why: String,
    /// The tracer's device-timeline socket (default: every tracer's under the runtime directory).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let request = causeway_probes::GpuWindowRequest {
        pid: args.pid,
        for_ms: if args.close { 0 } else { args.for_ms.unwrap_or(0) },
        who: "cli (causeway gpu-window)".into(),
        why: args.why.clone(),
    };
    match causeway_probes::request_gpu_window(args.socket.as_deref(), &request) {
        Ok(said) => {
            println!("{said}");
            Ok(0)
        }
        Err(why) => {
            eprintln!("causeway gpu-window: {why}");
            Ok(1)
        }
    }
}
