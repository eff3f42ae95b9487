//! Kernel names for the launches of a trace. A launch carries a handle in `arg0`: the host stub's
//! address (CUDA 12 runtime launches), an opaque `cudaKernel_t` (CUDA 13 runtime launches: the nvcc
//! stub asks `__cudaGetKernel` for it), a `CUfunction` or a `CUkernel` (driver launches). The name
//! probes record what each handle is called when the process learns it (`__cudaRegisterFunction`
//! at module load, `cuModuleGetFunction`, `cuLibraryGetKernel` + `cuKernelGetFunction`); the host
//! stub's own ELF symbol (nvcc names it after the kernel) is the fallback when the trace began after
//! the registration. [`KernelNamer`] joins them into one [`KernelName`] per (pid, handle) seen in a
//! launch, for the `kernel_names` table.

use std::collections::{BTreeSet, HashMap, HashSet};

use causeway_model::codes::{op, OpCode};
use causeway_model::demangle::demangle;
use causeway_model::{Event, KernelName};

use crate::symbols::Symbolizer;
use crate::wire::{NameFact, NameRec};

/// What one process has said about its kernels.
#[derive(Default)]
struct ProcessFacts {
    /// host stub -> mangled device function (`__cudaRegisterFunction`)
    stub_names: HashMap<u64, String>,
    /// cudaKernel_t -> host stub (`__cudaGetKernel`)
    kernel_stubs: HashMap<u64, u64>,
    /// CUfunction -> name (`cuModuleGetFunction`)
    function_names: HashMap<u64, String>,
    /// CUkernel -> name (`cuLibraryGetKernel`)
    library_kernels: HashMap<u64, String>,
    /// CUfunction -> CUkernel (`cuKernelGetFunction`)
    function_kernels: HashMap<u64, u64>,
}

/// Which API launched a handle: it says which facts name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Api {
    Runtime,
    Driver,
}

fn launch_api(code: OpCode) -> Option<Api> {
    match code {
        op::CUDA_LAUNCH_KERNEL | op::CUDA_LAUNCH_KERNEL_EX => Some(Api::Runtime),
        op::CU_LAUNCH_KERNEL | op::CU_LAUNCH_KERNEL_EX => Some(Api::Driver),
        _ => None,
    }
}

/// Joins name facts and launch handles into names.
#[derive(Default)]
pub struct KernelNamer {
    facts: HashMap<u32, ProcessFacts>,
    /// launched handles not named yet
    pending: BTreeSet<(u32, u64, Api)>,
    /// launched handles already handled (named or pending), per API: a runtime launch and the
    /// driver launch nested in it may carry the same value (and the inner one returns first)
    seen: HashSet<(u32, u64, Api)>,
    /// handles already named (by whichever API's facts)
    named: HashSet<(u32, u64)>,
    /// launched handles nothing named at the last chance
    never_named: usize,
    /// names cut at the probe's buffer size
    pub truncated: u64,
}

impl KernelNamer {
    /// Record a name fact.
    pub fn fact(&mut self, rec: &NameRec) {
        if rec.truncated {
            self.truncated += 1;
        }
        let f = self.facts.entry(rec.pid).or_default();
        match rec.what {
            NameFact::Register if !rec.name.is_empty() => {
                f.stub_names.insert(rec.handle, rec.name.clone());
            }
            NameFact::GetKernel => {
                f.kernel_stubs.insert(rec.handle, rec.other);
            }
            NameFact::ModuleFunction if !rec.name.is_empty() => {
                f.function_names.insert(rec.handle, rec.name.clone());
            }
            NameFact::LibraryKernel if !rec.name.is_empty() => {
                f.library_kernels.insert(rec.handle, rec.name.clone());
            }
            NameFact::KernelFunction => {
                f.function_kernels.insert(rec.handle, rec.other);
            }
            _ => {}
        }
    }

    /// Note the handles of the launches in `events` that have not been seen before.
    pub fn launches(&mut self, events: &[Event]) {
        for e in events {
            let Some(api) = launch_api(e.code()) else { continue };
            if self.seen.insert((e.pid, e.arg0 as u64, api)) {
                self.pending.insert((e.pid, e.arg0 as u64, api));
            }
        }
    }

    /// Names for the pending handles that can be named now. With `last_chance`, handles no fact
    /// names are looked up as host addresses in the process's files (the stub's symbol); without
    /// it they wait for a fact (facts normally come before the launches that need them, so this is
    /// for handles whose fact went out before the trace began).
    pub fn resolve(&mut self, symbolizer: &mut Symbolizer, last_chance: bool) -> Vec<KernelName> {
        let mut out = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        for (pid, handle, api) in pending {
            if self.named.contains(&(pid, handle)) {
                continue;
            }
            let named = self.named_by_facts(pid, handle, api).or_else(|| {
                // a runtime handle that is a host address: the stub's symbol is the kernel's name
                (api == Api::Runtime && (last_chance || !self.facts.contains_key(&pid)))
                    .then(|| stub_symbol(symbolizer, pid, self.stub_of(pid, handle)))
                    .flatten()
                    .map(|m| (m, "elf"))
            });
            match named {
                Some((mangled, how)) => {
                    self.named.insert((pid, handle));
                    out.push(KernelName {
                        pid,
                        handle: handle as i64,
                        name: demangle(&mangled),
                        mangled,
                        how: how.to_string(),
                    })
                }
                // another API's launch of the same handle may be named: count each handle once
                None if last_chance => {
                    if !self.named.contains(&(pid, handle)) && !self.pending.iter().any(|p| p.0 == pid && p.1 == handle)
                    {
                        self.never_named += 1;
                    }
                }
                None => {
                    self.pending.insert((pid, handle, api));
                }
            }
        }
        out
    }

    /// Launch handles that no fact or symbol named (yet).
    pub fn unnamed(&self) -> usize {
        self.pending.len() + self.never_named
    }

    fn stub_of(&self, pid: u32, handle: u64) -> u64 {
        self.facts.get(&pid).and_then(|f| f.kernel_stubs.get(&handle)).copied().unwrap_or(handle)
    }

    fn named_by_facts(&self, pid: u32, handle: u64, api: Api) -> Option<(String, &'static str)> {
        let f = self.facts.get(&pid)?;
        match api {
            Api::Runtime => {
                let stub = f.kernel_stubs.get(&handle).copied().unwrap_or(handle);
                f.stub_names.get(&stub).map(|n| (n.clone(), "register"))
            }
            Api::Driver => f.function_names.get(&handle).map(|n| (n.clone(), "module")).or_else(|| {
                // a CUfunction from cuKernelGetFunction, or a CUkernel passed as a CUfunction
                let kernel = f.function_kernels.get(&handle).copied().unwrap_or(handle);
                f.library_kernels.get(&kernel).map(|n| (n.clone(), "library"))
            }),
        }
    }
}

fn stub_symbol(symbolizer: &mut Symbolizer, pid: u32, addr: u64) -> Option<String> {
    let r = symbolizer.resolve(pid, addr)?;
    (r.offset == 0).then_some(r.symbol).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(what: NameFact, pid: u32, handle: u64, other: u64, name: &str) -> NameRec {
        NameRec { what, pid, handle, other, name: name.into(), truncated: false }
    }

    fn launch(pid: u32, code: OpCode, handle: u64) -> Event {
        Event { pid, source: code.source, op: code.op, arg0: handle as i64, ..Default::default() }
    }

    #[test]
    fn every_launch_path_is_named_from_its_facts() {
        let mut n = KernelNamer::default();
        n.fact(&fact(NameFact::Register, 1, 0x1000, 0, "_Z10vector_addPfS_S_i"));
        n.fact(&fact(NameFact::GetKernel, 1, 0xbeef, 0x1000, ""));
        n.fact(&fact(NameFact::ModuleFunction, 1, 0xf1, 0, "triton_poi_fused_add_0"));
        n.fact(&fact(NameFact::LibraryKernel, 1, 0xc1, 0, "_ZN7cutlass6KernelIiEEvv"));
        n.fact(&fact(NameFact::KernelFunction, 1, 0xf2, 0xc1, ""));
        n.launches(&[
            launch(1, op::CUDA_LAUNCH_KERNEL, 0x1000),    // CUDA 12: the stub itself
            launch(1, op::CUDA_LAUNCH_KERNEL_EX, 0xbeef), // CUDA 13: a handle for the stub
            launch(1, op::CU_LAUNCH_KERNEL_EX, 0xf1),
            launch(1, op::CU_LAUNCH_KERNEL, 0xf2),
            launch(1, op::CU_LAUNCH_KERNEL, 0xc1), // a CUkernel passed as a CUfunction
            launch(1, op::CU_LAUNCH_KERNEL, 0xf1), // seen before: not named twice
            launch(1, op::CUDA_MALLOC, 0x1000),    // not a launch
        ]);
        let mut sym = Symbolizer::default();
        let mut names = n.resolve(&mut sym, false);
        names.sort_by_key(|k| k.handle);
        let got: Vec<(i64, &str, &str)> = names.iter().map(|k| (k.handle, k.name.as_str(), k.how.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (0xc1, "void cutlass::Kernel<int>()", "library"),
                (0xf1, "triton_poi_fused_add_0", "module"),
                (0xf2, "void cutlass::Kernel<int>()", "library"),
                (0x1000, "vector_add(float*, float*, float*, int)", "register"),
                (0xbeef, "vector_add(float*, float*, float*, int)", "register"),
            ]
        );
        assert_eq!(n.unnamed(), 0);
    }

    /// Stands in for a host stub: a function of this binary with an ELF symbol.
    #[inline(never)]
    fn stand_in_host_stub() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn a_handle_without_facts_waits_then_falls_back_to_the_stub_symbol() {
        let mut n = KernelNamer::default();
        n.fact(&fact(NameFact::Register, std::process::id(), 0x1, 0, "_Z1av"));
        // our own function as a "host stub": its ELF symbol names it at the last chance
        let stub = stand_in_host_stub as *const () as usize as u64;
        assert_eq!(stand_in_host_stub(), 7);
        n.launches(&[launch(std::process::id(), op::CUDA_LAUNCH_KERNEL, stub)]);
        let mut sym = Symbolizer::default();
        assert!(n.resolve(&mut sym, false).is_empty(), "facts exist for the pid: wait for one");
        assert_eq!(n.unnamed(), 1);
        let names = n.resolve(&mut sym, true);
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].mangled.contains("stand_in_host_stub"), "{names:?}");
        assert_eq!(names[0].how, "elf");
        assert_eq!(n.unnamed(), 0);
    }
}
