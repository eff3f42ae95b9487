//! Which CUDA entry program this kernel gets. uprobe_multi (kernel >= 6.6) came with sleepable
//! programs, so on such a kernel the loader must take the uprobe_multi path with the sleepable
//! entry program (stack arguments read with bpf_copy_from_user, cheaper than bpf_probe_read_user);
//! a silent fall back to the plain program or to one perf-event uprobe per symbol is a regression.

mod common;

use causeway_probes::loader::{LoadOptions, Probes};

fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("kernel release");
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

#[test]
fn uprobe_multi_with_the_sleepable_entry_program() {
    common::require_root();
    let (major, minor) = kernel_version();
    if (major, minor) < (6, 6) {
        eprintln!("SKIPPED LOUDLY: kernel {major}.{minor} has no uprobe_multi links (>= 6.6)");
        return;
    }
    let probes = Probes::load(&LoadOptions {
        ring_cuda_bytes: 4096,
        ring_sched_bytes: 4096,
        ring_host_bytes: 4096,
        host_probes: false,
        ..Default::default()
    })
    .expect("load the BPF programs");
    assert!(probes.uses_uprobe_multi(), "uprobe_multi path not taken on {major}.{minor}: {:?}", probes.notes);
    assert!(
        !probes.notes.iter().any(|n| n.contains("sleepable")),
        "the sleepable entry program was refused on {major}.{minor}: {:?}",
        probes.notes
    );
}
