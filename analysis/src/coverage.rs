//! What a trace could not see of the CUDA calls, from its `attachments` table
//! ([`causeway_model::LibraryAttach`]): a process whose runtime is statically linked without
//! symbols shows its driver calls only, and calls made through a library before its probes were
//! attached (`complete = false`) are unknown, not absent. Every stats answer carries these lines.

use std::collections::BTreeSet;

use causeway_model::time::{fmt_since, TimeWindow};
use causeway_model::LibraryAttach;
use causeway_store::TraceStore;

use crate::AnalysisError;

/// The coverage lines of a trace for `window` and `pid` (all processes when `None`); `origin` is
/// the trace's first event, from which times are given.
pub fn coverage_notes(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
    origin: i64,
) -> Result<Vec<String>, AnalysisError> {
    Ok(coverage_lines(&store.attachments()?, window, pid, origin))
}

/// See [`coverage_notes`]; one line per fact, in the attachments' order, without repeats.
pub fn coverage_lines(attachments: &[LibraryAttach], window: TimeWindow, pid: Option<u32>, origin: i64) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for a in attachments.iter().filter(|a| pid.is_none_or(|p| p == a.pid)) {
        let lib = library_words(a);
        let mut lines = Vec::new();
        if a.kind == "runtime_static" && a.symbols.is_empty() {
            lines.push(format!(
                "pid {}: only driver calls are visible: the CUDA runtime is statically linked without symbols{}",
                a.pid,
                path_words(a)
            ));
        } else if !a.note.is_empty() {
            lines.push(format!("pid {} ({lib}): {}", a.pid, a.note));
        }
        // Calls before the attach are unknown; a window that starts after it lost nothing.
        if !a.complete && window.from_ns.is_none_or(|f| f < a.attached_at_ns) {
            lines.push(format!(
                "calls of pid {} through {lib} before {} are unknown: its probes were attached then, after the process could call it",
                a.pid,
                fmt_since(a.attached_at_ns, origin)
            ));
        }
        for l in lines {
            if seen.insert(l.clone()) {
                out.push(l);
            }
        }
    }
    out
}

/// `libcudart.so.12` (the file name), or the kind when the path is unknown or a URL (a serving
/// engine's metrics endpoint).
fn library_words(a: &LibraryAttach) -> String {
    if a.path.contains("://") || a.kind == "network" {
        return a.kind.clone();
    }
    match a.path.rsplit('/').next().filter(|n| !n.is_empty()) {
        Some(name) => crate::stacks::clean(name),
        None => format!("the CUDA {}", a.kind.replace('_', " ")),
    }
}

fn path_words(a: &LibraryAttach) -> String {
    if a.path.is_empty() {
        String::new()
    } else {
        format!(" (in {})", crate::stacks::clean(&a.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attach(pid: u32, path: &str, kind: &str, at: i64, complete: bool, symbols: &[&str]) -> LibraryAttach {
        let (path, kind, symbols) = (path.into(), kind.into(), symbols.iter().map(|s| s.to_string()).collect());
        LibraryAttach { pid, path, kind, attached_at_ns: at, complete, symbols, ..Default::default() }
    }

    #[test]
    fn static_runtimes_and_late_attaches_are_said() {
        let s = 1_000_000_000;
        let a = vec![
            attach(812, "/opt/app/server", "runtime_static", 10 * s, true, &[]),
            attach(812, "/usr/lib/libcuda.so.1", "driver", 10 * s, true, &["cuLaunchKernel"]),
            attach(900, "/usr/lib/libcudart.so.12", "runtime", 11_200_000_000, false, &["cudaLaunchKernel"]),
            // The same facts again from a second session: said once.
            attach(812, "/opt/app/server", "runtime_static", 10 * s, true, &[]),
        ];
        let lines = coverage_lines(&a, TimeWindow::ALL, None, 10 * s);
        assert_eq!(
            lines,
            vec![
                "pid 812: only driver calls are visible: the CUDA runtime is statically linked without symbols (in /opt/app/server)".to_string(),
                "calls of pid 900 through libcudart.so.12 before +1.200 s are unknown: its probes were attached then, after the process could call it".to_string(),
            ]
        );
        // Filtered by pid, and a window that begins after the late attach has nothing unknown.
        assert_eq!(coverage_lines(&a, TimeWindow::ALL, Some(900), 10 * s).len(), 1);
        assert!(coverage_lines(&a, TimeWindow { from_ns: Some(12 * s), to_ns: None }, Some(900), 10 * s).is_empty());
        // A static runtime found with its symbols is traced: nothing to say.
        assert!(coverage_lines(
            &[attach(1, "/app", "runtime_static", 0, true, &["cudaMalloc"])],
            TimeWindow::ALL,
            None,
            0
        )
        .is_empty());
    }
}
