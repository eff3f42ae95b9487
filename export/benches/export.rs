//! `causeway export` over a generated trace (10,000,000 events by default): wall time, events per
//! second and peak memory (VmHWM, reset after the trace is opened) of the Perfetto and the Chrome
//! JSON exports written to a null sink, with and without the chain annotations (explain's own
//! cost), and the peak against the trace's size: the export streams window by window, so its
//! memory must not grow with the trace.
//!
//! `cargo bench --workspace --bench export` (env CAUSEWAY_BENCH_EVENTS overrides 10,000,000; the
//! trace is the explain bench's, kept in the temp dir and reused).

use std::time::Instant;

use causeway_backends::{open_bench_trace, TraceStore};
use causeway_export::{export, ExportRequest, Format};

fn main() {
    let (path, store) = open_bench_trace();
    let size_mib = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1048576.0;
    for (format, chains) in [(Format::Perfetto, false), (Format::Chrome, false), (Format::Perfetto, true)] {
        causeway_testdata::reset_peak_rss();
        let before = causeway_testdata::rss_kib();
        let t = Instant::now();
        let mut out = CountingSink(0);
        let req = ExportRequest { chains, ..Default::default() };
        let s = export(&store, &req, format, &mut out).expect("export");
        let secs = t.elapsed().as_secs_f64();
        let peak = causeway_testdata::peak_rss_kib();
        println!(
            "{format:?}{}: {secs:.2} s, {:.0} events/s, {:.1} MiB written, {} windows; peak RSS {:.1} MiB \
             (before {:.1} MiB) = {:.2}x the trace's size",
            if chains { " with chains" } else { "" },
            store.info().events as f64 / secs,
            out.0 as f64 / 1048576.0,
            s.windows,
            peak as f64 / 1024.0,
            before as f64 / 1024.0,
            peak as f64 / 1024.0 / size_mib
        );
    }
}

/// A writer that keeps nothing and counts bytes.
struct CountingSink(u64);

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
