//! Every BPF program loads on both uprobe paths, with the call stacks on (the Python walk is
//! verified only then), and keeps headroom under the verifier's budget of 1,000,000 processed
//! instructions per program. The Python walk runs close to that budget: a change that makes the
//! verifier explore more states shows up here as a number, before it becomes a program that no
//! longer loads (and a trace that silently falls back to the slower perf-event path).

mod common;

use causeway_probes::{FoundLibrary, LibKind};
use causeway_probes::{LoadOptions, Probes};
use common::*;

/// Half the kernel's limit: room for a compiler or kernel that explores a little more.
const BUDGET: u32 = 500_000;

#[test]
fn every_program_loads_on_the_uprobe_multi_path_within_half_the_verifier_budget() {
    require_root();
    let probes = Probes::load(&LoadOptions { stacks: true, ..Default::default() }).expect("load");
    assert!(
        !probes.notes.iter().any(|n| n.contains("uprobe_multi unavailable")),
        "this kernel has uprobe_multi (6.6+): {:?}",
        probes.notes
    );
    let insns = probes.verified_insns();
    for name in ["cw_entry", "rt_ret", "drv_ret", "rt_launch_ret", "drv_launch_ret", "nm_ret", "cw_dl_state"] {
        assert!(insns.iter().any(|(n, _)| n == name), "{name} missing from {insns:?}");
    }
    for (name, n) in &insns {
        eprintln!("{name}: {n} instructions verified");
        assert!(*n > 0 && *n <= BUDGET, "{name}: {n} instructions verified, budget {BUDGET}: {insns:?}");
    }
}

#[test]
fn every_program_loads_on_the_perf_event_path_with_stacks() {
    require_root();
    let mut probes =
        Probes::load(&LoadOptions { stacks: true, perf_uprobes: true, ..Default::default() }).expect("load");
    let lib = causeway_testdata::mock_cuda_build().join("libcudart.so.12");
    let found = FoundLibrary { path: lib, kind: LibKind::Runtime, how: "explicit".into() };
    let attached = probes.attach_library(&found).expect("every program of the perf path loads");
    assert!(attached > 20, "{attached} symbols attached: {:?}", probes.notes);
    let failed: Vec<&String> = probes.notes.iter().filter(|n| n.contains("not attached")).collect();
    assert!(failed.is_empty(), "{failed:?}");
}
