//! Kernels: which kernel each launch ran, and per-kernel figures of the launch calls.
//!
//! A launch names its kernel by `arg0`, a handle that means something in its own process only (a
//! host stub or `cudaKernel_t` for runtime launches, a `CUfunction` or `CUkernel` for driver
//! launches); the trace's `kernel_names` table maps (pid, handle) to the name
//! ([`causeway_model::KernelName`]), and `launch_configs` holds the grid, block, dynamic shared
//! memory and cluster of the launches that recorded one (`events.launch_config`).
//!
//! Launches are counted once: a driver launch inside a runtime launch of the same thread (the
//! runtime calling the driver) is folded into it, by the rule [`crate::attribution::nested_flags`]
//! uses (order `(ts, dur desc, source, id)`; nested when an earlier launch ends at or after it
//! ends). A launch takes the name and configuration recorded on itself, or else those of the first
//! launch nested in it (a runtime stub without a name whose driver call has one).
//!
//! The durations are those of the launch calls on the host (how long the CPU spent in
//! `cudaLaunchKernel` and the like), never of the kernels on the GPU: a trace holds no GPU
//! timestamps. Percentiles are exact nearest-rank.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use causeway_model::codes::{self, OpCode};
use causeway_model::time::{ns_to_us, round_us, TimeWindow};
use causeway_model::{KernelName, LaunchConfig};
use causeway_store::{EventFilter, EventId, TraceStore};

use crate::stats::nearest_rank;
use crate::AnalysisError;

/// What every per-kernel answer says about its durations.
pub const HOST_SIDE_NOTE: &str = "durations are of the launch calls on the host (the time the CPU spent in cudaLaunchKernel, cuLaunchKernel and their Ex forms), not of the kernels on the GPU: the trace holds no GPU timestamps";

/// The ops that launch a kernel named by `arg0` ([`codes::is_kernel_launch`]), in code order.
pub fn kernel_launch_ops() -> Vec<OpCode> {
    codes::OPS.iter().map(|e| OpCode::new(e.0, e.1)).filter(|&c| codes::is_kernel_launch(c)).collect()
}

/// The kernel names and launch configurations of a trace.
#[derive(Debug, Clone, Default)]
pub struct KernelIndex {
    names: HashMap<(u32, i64), KernelName>,
    configs: HashMap<i64, LaunchConfig>,
}

impl KernelIndex {
    pub fn load(store: &dyn TraceStore) -> Result<KernelIndex, AnalysisError> {
        Ok(KernelIndex::from_parts(store.kernel_names()?, store.launch_configs()?))
    }

    pub fn from_parts(names: Vec<KernelName>, configs: Vec<LaunchConfig>) -> KernelIndex {
        KernelIndex {
            names: names.into_iter().map(|k| ((k.pid, k.handle), k)).collect(),
            configs: configs.into_iter().map(|c| (c.key(), c)).collect(),
        }
    }

    /// Names recorded.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, pid: u32, handle: i64) -> Option<&KernelName> {
        self.names.get(&(pid, handle))
    }

    pub fn config(&self, key: i64) -> Option<&LaunchConfig> {
        self.configs.get(&key)
    }

    /// The recorded kernels whose name (demangled or mangled) contains `needle`, case-insensitively.
    pub fn matching(&self, needle: &str) -> Vec<&KernelName> {
        let n = needle.to_lowercase();
        let mut v: Vec<&KernelName> = self
            .names
            .values()
            .filter(|k| k.name.to_lowercase().contains(&n) || k.mangled.to_lowercase().contains(&n))
            .collect();
        v.sort_by_key(|k| (k.pid, k.handle));
        v
    }
}

/// How a kernel is called in answers: its name, or the handle when the trace names none.
pub fn kernel_label(index: &KernelIndex, pid: u32, handle: i64) -> String {
    match index.name(pid, handle) {
        Some(k) => crate::stacks::clean(&k.name),
        None => unnamed(pid, handle),
    }
}

/// A kernel's name as a headline says it: the function without its return type, template
/// arguments, parameter list or anonymous namespaces (`at::native::reduce_kernel` for PyTorch's
/// `void at::native::reduce_kernel<128, 4, at::native::ReduceOp<...> >(...)`, whose names run to
/// kilobytes). Names with nothing to drop (Triton's, cuBLAS's `nvjet_*`, mangled ones) are kept
/// whole; a name cut short inside its template arguments keeps what came before them. The full name
/// stays in the chain's `kernels` and in `causeway kernels`.
pub fn short_name(full: &str) -> String {
    let name = full.trim();
    let name = name.strip_prefix("void ").unwrap_or(name);
    let name = name.replace("(anonymous namespace)::", "");
    let mut out = String::with_capacity(name.len().min(128));
    let mut depth = 0usize;
    for ch in name.chars() {
        match ch {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            // the parameter list: nothing after it names the function
            '(' if depth == 0 => break,
            _ if depth == 0 => out.push(ch),
            _ => {}
        }
    }
    let out = out.trim();
    if out.is_empty() {
        full.trim().to_string()
    } else {
        out.to_string()
    }
}

fn unnamed(pid: u32, handle: i64) -> String {
    format!("unnamed kernel (pid {pid}, handle {handle:#x})")
}

/// One kernel launch call, the columns the kernel figures need.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub id: EventId,
    pub ts: i64,
    pub dur: i64,
    pub pid: u32,
    pub tid: u32,
    pub op: OpCode,
    /// `arg0`: the kernel handle.
    pub handle: i64,
    /// `events.launch_config` (0: none recorded).
    pub config: i64,
}

/// A top-level launch with the handle and configuration that name it (its own, or those of the
/// first launch nested in it), and the launches folded into it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedLaunch {
    pub launch: Launch,
    pub handle: i64,
    pub config: i64,
    pub nested: u32,
}

/// Fold nested launches into the launches around them (see the module doc).
pub fn resolve_launches(mut launches: Vec<Launch>, index: &KernelIndex) -> Vec<ResolvedLaunch> {
    launches.sort_by(|a, b| {
        (a.tid, a.ts, std::cmp::Reverse(a.dur), a.op.source)
            .cmp(&(b.tid, b.ts, std::cmp::Reverse(b.dur), b.op.source))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut out: Vec<ResolvedLaunch> = Vec::with_capacity(launches.len());
    // Per thread: the end of the latest top-level launch with the greatest end, and its index.
    let mut outer: Option<(u32, i64, usize)> = None;
    for l in launches {
        let end = l.ts.saturating_add(l.dur);
        match outer {
            Some((tid, max_end, at)) if tid == l.tid && max_end >= end => {
                let top = &mut out[at];
                top.nested += 1;
                if index.name(top.launch.pid, top.handle).is_none() && index.name(l.pid, l.handle).is_some() {
                    top.handle = l.handle;
                }
                if top.config == 0 {
                    top.config = l.config;
                }
            }
            _ => {
                // Top-level: a new thread, or it ends after every earlier launch of the thread.
                outer = Some((l.tid, end, out.len()));
                out.push(ResolvedLaunch { handle: l.handle, config: l.config, nested: 0, launch: l });
            }
        }
    }
    out
}

/// A launch configuration and how many launches of a kernel used it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ConfigCount {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub cluster: [u32; 3],
    pub launches: u64,
}

/// The launch figures of one kernel. `*_us` are ns / 1000.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct KernelStats {
    /// The demangled name, or `unnamed kernel (pid P, handle 0x...)` when the trace names none.
    pub kernel: String,
    /// As the binary spells it, when it differs from `kernel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mangled: Option<String>,
    pub named: bool,
    /// Launches (a runtime launch and the driver launch inside it count once).
    pub launches: u64,
    pub sum_us: f64,
    pub avg_us: f64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Launch API (the top-level call's op) -> launches.
    pub apis: BTreeMap<String, u64>,
    /// Distinct launch configurations, most used first.
    pub configs: Vec<ConfigCount>,
    /// Launches that recorded no configuration (or one missing from `launch_configs`).
    pub launches_without_config: u64,
    pub pids: Vec<u32>,
}

/// Per-kernel figures of the launches in scope.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct KernelReport {
    /// What the durations are ([`HOST_SIDE_NOTE`]).
    pub note: String,
    /// Top-level kernel launches in scope, and the nested ones folded into them.
    pub launches: u64,
    pub nested_launches: u64,
    /// Of `launches`, those whose kernel the trace names.
    pub named_launches: u64,
    /// Kernel names the trace records (all processes).
    pub names_recorded: u64,
    /// Kernels found (more than `kernels` when an answer cuts the list).
    pub kernels_total: usize,
    /// Most total launch time first.
    pub kernels: Vec<KernelStats>,
}

/// Per-kernel figures of the kernel launches in `window` (and `pid`).
pub fn kernel_report(
    store: &dyn TraceStore,
    window: TimeWindow,
    pid: Option<u32>,
) -> Result<KernelReport, AnalysisError> {
    let index = KernelIndex::load(store)?;
    let filter = EventFilter { window, pid, ops: Some(kernel_launch_ops()), ..Default::default() };
    let mut launches = Vec::new();
    store.scan_events(&filter, &mut |s| {
        let e = &s.event;
        launches.push(Launch {
            id: s.id,
            ts: e.ts_ns,
            dur: e.dur_ns,
            pid: e.pid,
            tid: e.tid,
            op: e.code(),
            handle: e.arg0,
            config: e.launch_config,
        });
    })?;
    Ok(kernel_figures(resolve_launches(launches, &index), &index))
}

/// Group resolved launches by kernel (see the module doc).
pub fn kernel_figures(launches: Vec<ResolvedLaunch>, index: &KernelIndex) -> KernelReport {
    #[derive(Default)]
    struct Acc {
        mangled: Option<String>,
        named: bool,
        durs: Vec<i64>,
        apis: BTreeMap<String, u64>,
        configs: BTreeMap<i64, u64>,
        without: u64,
        pids: BTreeSet<u32>,
    }
    let mut per: BTreeMap<String, Acc> = BTreeMap::new();
    let (mut nested, mut named) = (0u64, 0u64);
    let total = launches.len() as u64;
    for r in launches {
        nested += u64::from(r.nested);
        let (label, mangled, is_named) = match index.name(r.launch.pid, r.handle) {
            Some(k) => {
                (crate::stacks::clean(&k.name), (k.mangled != k.name).then(|| crate::stacks::clean(&k.mangled)), true)
            }
            None => (unnamed(r.launch.pid, r.handle), None, false),
        };
        named += u64::from(is_named);
        let a = per.entry(label).or_default();
        a.named = is_named;
        if a.mangled.is_none() {
            a.mangled = mangled;
        }
        a.durs.push(r.launch.dur);
        *a.apis.entry(r.launch.op.name().into_owned()).or_default() += 1;
        if r.config != 0 && index.config(r.config).is_some() {
            *a.configs.entry(r.config).or_default() += 1;
        } else {
            a.without += 1;
        }
        a.pids.insert(r.launch.pid);
    }
    let mut kernels: Vec<(i128, KernelStats)> = per
        .into_iter()
        .map(|(kernel, mut a)| {
            a.durs.sort_unstable();
            let n = a.durs.len() as u64;
            let sum: i128 = a.durs.iter().map(|&d| i128::from(d)).sum();
            let p = |pm| ns_to_us(nearest_rank(&a.durs, pm).unwrap_or(0));
            let mut configs: Vec<ConfigCount> = a
                .configs
                .iter()
                .filter_map(|(key, &launches)| {
                    index.config(*key).map(|c| ConfigCount {
                        grid: c.grid,
                        block: c.block,
                        shared_mem_bytes: c.shared_mem_bytes,
                        cluster: c.cluster,
                        launches,
                    })
                })
                .collect();
            configs.sort_by(|x, y| {
                y.launches.cmp(&x.launches).then_with(|| {
                    (x.grid, x.block, x.shared_mem_bytes, x.cluster).cmp(&(
                        y.grid,
                        y.block,
                        y.shared_mem_bytes,
                        y.cluster,
                    ))
                })
            });
            let stats = KernelStats {
                kernel,
                mangled: a.mangled,
                named: a.named,
                launches: n,
                sum_us: round_us(sum as f64 / 1000.0),
                avg_us: if n == 0 { 0.0 } else { round_us(sum as f64 / n as f64 / 1000.0) },
                min_us: ns_to_us(a.durs.first().copied().unwrap_or(0)),
                p50_us: p(500),
                p90_us: p(900),
                p95_us: p(950),
                p99_us: p(990),
                max_us: ns_to_us(a.durs.last().copied().unwrap_or(0)),
                apis: a.apis,
                configs,
                launches_without_config: a.without,
                pids: a.pids.into_iter().collect(),
            };
            (sum, stats)
        })
        .collect();
    kernels.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| x.1.kernel.cmp(&y.1.kernel)));
    KernelReport {
        note: HOST_SIDE_NOTE.to_string(),
        launches: total,
        nested_launches: nested,
        named_launches: named,
        names_recorded: index.len() as u64,
        kernels_total: kernels.len(),
        kernels: kernels.into_iter().map(|k| k.1).collect(),
    }
}

/// The kernel a slow launch ran: the name of `calls[i]`'s own handle, or else of the first kernel
/// launch nested in it (same thread, inside its span; `calls` in (ts, id) order), or its handle.
/// (`explain` asks only when the trace records kernel names.)
/// `None` when `calls[i]` launches no named kernel by `arg0` (a graph launch).
pub fn launch_kernel(calls: &[crate::attribution::Call], i: usize, index: &KernelIndex) -> Option<String> {
    let c = &calls[i];
    if !codes::is_kernel_launch(c.op) {
        return None;
    }
    if index.name(c.pid, c.arg0).is_none() {
        let end = c.end();
        let inner = calls[i + 1..].iter().take_while(|n| n.ts <= end).find(|n| {
            n.tid == c.tid && n.end() <= end && codes::is_kernel_launch(n.op) && index.name(n.pid, n.arg0).is_some()
        });
        if let Some(n) = inner {
            return Some(kernel_label(index, n.pid, n.arg0));
        }
    }
    Some(kernel_label(index, c.pid, c.arg0))
}

/// A kernel among the slow launches of a chain: how many and how much of the chain's time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct ChainKernel {
    pub kernel: String,
    pub calls: u64,
    pub ns: i64,
}

/// The kernels of a chain from its per-kernel (calls, ns), most time first.
pub fn chain_kernels(per_kernel: &BTreeMap<String, (u64, i64)>) -> Vec<ChainKernel> {
    let mut v: Vec<ChainKernel> =
        per_kernel.iter().map(|(k, &(calls, ns))| ChainKernel { kernel: k.clone(), calls, ns }).collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.kernel.cmp(&b.kernel)));
    v
}

/// The same kernels as a headline names them: merged by [`short_name`] (a template's
/// instantiations are one function to the reader), most time first.
pub fn by_short_name(kernels: &[ChainKernel]) -> Vec<ChainKernel> {
    let mut per: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for k in kernels {
        let e = per.entry(short_name(&k.kernel)).or_default();
        e.0 += k.calls;
        e.1 += k.ns;
    }
    let mut v: Vec<ChainKernel> =
        per.into_iter().map(|(kernel, (calls, ns))| ChainKernel { kernel, calls, ns }).collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.kernel.cmp(&b.kernel)));
    v
}

/// `grid(128,1,1) block(256,1,1) smem 0 B cluster(1,1,1)`.
pub fn config_words(c: &ConfigCount) -> String {
    let d = |v: [u32; 3]| format!("({},{},{})", v[0], v[1], v[2]);
    format!("grid{} block{} smem {} B cluster{}", d(c.grid), d(c.block), c.shared_mem_bytes, d(c.cluster))
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_model::codes::op;

    fn launch(id: i64, tid: u32, code: OpCode, ts: i64, dur: i64, handle: i64, config: i64) -> Launch {
        Launch { id: EventId::Int(id), ts, dur, pid: 7, tid, op: code, handle, config }
    }

    fn name(handle: i64, n: &str, mangled: &str) -> KernelName {
        KernelName { pid: 7, handle, name: n.into(), mangled: mangled.into(), how: "register".into() }
    }

    #[test]
    fn a_runtime_launch_and_its_driver_launch_count_once_with_the_name_found_on_either() {
        let cfg = LaunchConfig { grid: [128, 1, 1], block: [256, 1, 1], shared_mem_bytes: 0, cluster: [1, 1, 1] };
        let index = KernelIndex::from_parts(
            vec![
                name(0x100, "vector_add(float*, float*, int)", "_Z10vector_addPfS_i"),
                name(0xf00, "gemm_sm90", "gemm_sm90"),
            ],
            vec![cfg],
        );
        let launches = vec![
            // A named runtime launch with its driver launch inside (which carries the configuration).
            launch(1, 1, op::CUDA_LAUNCH_KERNEL, 100, 50, 0x100, 0),
            launch(2, 1, op::CU_LAUNCH_KERNEL, 101, 40, 0xabc, cfg.key()),
            // A runtime stub with no name whose driver launch is named.
            launch(3, 1, op::CUDA_LAUNCH_KERNEL_EX, 200, 30, 0x999, 0),
            launch(4, 1, op::CU_LAUNCH_KERNEL_EX, 201, 20, 0xf00, 0),
            // The same span on another thread is its own launch.
            launch(5, 2, op::CU_LAUNCH_KERNEL, 101, 40, 0x100, 0),
            // A driver launch alone, no name.
            launch(6, 1, op::CU_LAUNCH_KERNEL, 300, 10, 0x555, 0),
        ];
        let r = resolve_launches(launches, &index);
        assert_eq!(r.len(), 4);
        let by_id = |id: i64| r.iter().find(|x| x.launch.id == EventId::Int(id)).unwrap();
        assert_eq!((by_id(1).handle, by_id(1).config, by_id(1).nested), (0x100, cfg.key(), 1));
        assert_eq!((by_id(3).handle, by_id(3).nested), (0xf00, 1));
        let k = kernel_figures(r, &index);
        assert_eq!((k.launches, k.nested_launches, k.named_launches, k.kernels_total), (4, 2, 3, 3));
        let va = k.kernels.iter().find(|x| x.kernel.starts_with("vector_add")).unwrap();
        assert_eq!((va.launches, va.sum_us, va.p50_us, va.max_us), (2, 0.09, 0.04, 0.05));
        assert_eq!(va.mangled.as_deref(), Some("_Z10vector_addPfS_i"));
        assert_eq!(va.apis, BTreeMap::from([("cuLaunchKernel".to_string(), 1), ("cudaLaunchKernel".to_string(), 1)]));
        assert_eq!((va.configs.len(), va.configs[0].launches, va.launches_without_config), (1, 1, 1));
        assert_eq!(va.configs[0].block, [256, 1, 1]);
        let g = k.kernels.iter().find(|x| x.kernel == "gemm_sm90").unwrap();
        assert_eq!((g.mangled.clone(), g.apis.get("cudaLaunchKernelExC").copied()), (None, Some(1)));
        assert!(k.kernels.iter().any(|x| x.kernel == "unnamed kernel (pid 7, handle 0x555)" && !x.named));
        // Most launch time first: vector_add (90 ns) before gemm (30 ns) and the unnamed one (10 ns).
        assert_eq!(k.kernels[0].kernel, va.kernel);
    }

    #[test]
    fn percentiles_are_nearest_rank_over_every_launch() {
        let index = KernelIndex::from_parts(vec![name(1, "k", "k")], vec![]);
        // 20 launches of 1..=20 us: p50 = rank 10, p90 = rank 18, p95 = rank 19, p99 = rank 20.
        let launches: Vec<Launch> =
            (1..=20).map(|i| launch(i, 1, op::CU_LAUNCH_KERNEL, i * 1_000_000, i * 1000, 1, 0)).collect();
        let k = kernel_figures(resolve_launches(launches, &index), &index);
        let s = &k.kernels[0];
        assert_eq!(
            (s.launches, s.p50_us, s.p90_us, s.p95_us, s.p99_us, s.min_us, s.max_us),
            (20, 10.0, 18.0, 19.0, 20.0, 1.0, 20.0)
        );
        assert_eq!((s.sum_us, s.avg_us, s.launches_without_config), (210.0, 10.5, 20));
    }

    #[test]
    fn a_slow_launch_takes_the_name_of_the_driver_launch_inside_it() {
        use crate::attribution::{Call, CallId};
        let index = KernelIndex::from_parts(vec![name(0xf00, "gemm", "gemm")], vec![]);
        let c = |id: i64, tid: u32, code: OpCode, ts: i64, dur: i64, arg0: i64| Call {
            id: CallId(id),
            ts,
            dur,
            pid: 7,
            tid,
            op: code,
            arg0,
        };
        let calls = vec![
            c(1, 1, op::CUDA_LAUNCH_KERNEL, 100, 50, 0x999),
            c(2, 2, op::CU_LAUNCH_KERNEL, 101, 10, 0x111), // another thread's launch meanwhile
            c(3, 1, op::CU_LAUNCH_KERNEL, 102, 40, 0xf00),
            c(4, 1, op::CUDA_LAUNCH_KERNEL, 200, 50, 0x999), // nothing named inside
            c(5, 1, op::GRAPH_LAUNCH, 300, 50, 0xf00),
        ];
        assert_eq!(launch_kernel(&calls, 0, &index).as_deref(), Some("gemm"));
        assert_eq!(launch_kernel(&calls, 3, &index).as_deref(), Some("unnamed kernel (pid 7, handle 0x999)"));
        assert_eq!(launch_kernel(&calls, 4, &index), None, "a graph launch names no kernel by arg0");
    }

    #[test]
    fn a_headline_names_the_function_without_its_templates_and_parameters() {
        // names as PyTorch 2.11 + CUDA 13 recorded them on an H100 (docs/real-gpu)
        let reduce = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, \
            at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, \
            c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, \
            c10::BFloat16, 4, 8> >(at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16>>)";
        assert_eq!(short_name(reduce), "at::native::reduce_kernel");
        assert_eq!(
            short_name("void at::native::(anonymous namespace)::LayerNormBackwardKernelImplInternal<c10::BFloat16, float>(int, float const*)"),
            "at::native::LayerNormBackwardKernelImplInternal"
        );
        // cut at 1,023 bytes inside the template arguments
        assert_eq!(
            short_name("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFl"),
            "at::native::vectorized_elementwise_kernel"
        );
        for whole in
            ["triton_poi_fused_add_0", "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN", "_Z7cw_stepPfi", "gemm_sm90_tma"]
        {
            assert_eq!(short_name(whole), whole);
        }
        assert_eq!(short_name("cw_step(float*, int)"), "cw_step");
        let two = [
            ChainKernel { kernel: "void k<1>(int)".into(), calls: 2, ns: 10 },
            ChainKernel { kernel: "gemm".into(), calls: 1, ns: 15 },
            ChainKernel { kernel: "void k<2>(int)".into(), calls: 3, ns: 20 },
        ];
        let merged = by_short_name(&two);
        assert_eq!(merged[0], ChainKernel { kernel: "k".into(), calls: 5, ns: 30 });
        assert_eq!(merged[1], ChainKernel { kernel: "gemm".into(), calls: 1, ns: 15 });
        // nothing before the parameters: the name as recorded
        assert_eq!(short_name("(broken"), "(broken");
    }

    #[test]
    fn names_match_by_substring_whatever_the_case() {
        let index = KernelIndex::from_parts(
            vec![name(1, "vector_add(float*)", "_Z10vector_addPf"), name(2, "gemm", "gemm")],
            vec![],
        );
        assert_eq!(index.matching("VECTOR").len(), 1);
        assert_eq!(index.matching("_z10").len(), 1);
        assert!(index.matching("softmax").is_empty());
    }
}
