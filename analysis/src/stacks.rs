//! Top call stacks of GPU calls, by count and by time: native frames demangled (C++ and Rust),
//! Python frames as `file:line in function` (the line being executed; `?` when unknown),
//! unresolved frames as `lib+ip`. Reads Ingero's compact frames JSON and ours (the same format):
//! `{"s":"sym+0xoff","f":"lib.so"}`, `{"i":"0x7f..","f":"lib"}`, `{"pf":"/path.py","pfn":"func","pl":12}`,
//! innermost first, plus ours `{"note":"…"}` where a stack is incomplete (why). A call of a thread
//! without Python frames of its own carries the Python stack it borrowed from the thread it ran for
//! beside its own (`crate::borrowed`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use causeway_model::codes::OpCode;
use causeway_model::time::TimeWindow;
use causeway_store::{EventFilter, EventId, TraceStore};

use crate::attribution::gpu_call_sources;
use crate::borrowed::{BorrowedShare, BorrowedStack, CallLend, Lends};
use crate::kernels::{kernel_launch_ops, KernelIndex};
use crate::trace_data::for_each_event;
use crate::AnalysisError;

/// Longest frame text kept (traced strings are untrusted).
const MAX_FRAME_CHARS: usize = 300;
/// Kernel names a kernel-filtered answer lists.
pub const KERNELS_LISTED: usize = 20;

/// What to rank.
#[derive(Debug, Clone)]
pub struct StacksRequest {
    pub window: TimeWindow,
    pub pid: Option<u32>,
    /// Only calls of this op (any GPU op when `None`).
    pub op: Option<OpCode>,
    /// Only launches of kernels whose name (demangled or mangled) contains this, case-insensitively
    /// (the launch's own (pid, `arg0`) in `kernel_names`).
    pub kernel: Option<String>,
    /// Stacks per ranking.
    pub top: usize,
}

impl Default for StacksRequest {
    fn default() -> Self {
        StacksRequest { window: TimeWindow::ALL, pid: None, op: None, kernel: None, top: 10 }
    }
}

/// One frame, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
pub struct Frame {
    /// `native`, `python`, `unresolved` or `note` (why the stack is incomplete there).
    pub kind: String,
    /// Demangled `symbol+0xoff`, `file:line in function`, `ip`, or the note.
    pub text: String,
    /// The library (native frames).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lib: Option<String>,
}

/// One stack with its calls.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct StackSummary {
    pub stack_hash: i64,
    pub calls: u64,
    pub total_ns: i64,
    pub max_ns: i64,
    /// `op: calls` for the ops seen with this stack.
    pub ops: BTreeMap<String, u64>,
    pub pids: Vec<u32>,
    /// False when the DB has no `stack_traces` row for the hash.
    pub resolved: bool,
    pub frames: Vec<Frame>,
    /// Calls of this stack made by a thread without Python frames of its own, in a process that
    /// runs Python, by the Python stack each borrowed from the thread it ran for, most calls first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub borrowed: Vec<BorrowedShare>,
    /// Calls of such a thread that two or more Python threads could have asked for: nothing
    /// borrowed.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub borrow_ambiguous: u64,
}

/// Top stacks by count and by time.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct StacksReport {
    pub window: TimeWindow,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The kernel filter, and the recorded kernel names it matched (at most
    /// [`KERNELS_LISTED`]; `kernels_matched` counts them all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels_matched: Option<usize>,
    pub calls: u64,
    pub calls_with_stack: u64,
    pub distinct_stacks: u64,
    /// Calls (of the stacks listed or not) that borrowed a Python stack, and that could not
    /// because two or more Python threads could have asked for them.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub calls_borrowed: u64,
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub calls_ambiguous: u64,
    pub by_count: Vec<StackSummary>,
    pub by_time: Vec<StackSummary>,
}

/// Strip control and bidi characters and cap the length of a traced string.
pub fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| !c.is_control() && !matches!(*c as u32, 0x200E | 0x200F | 0x202A..=0x202E | 0x2066..=0x2069))
        .take(MAX_FRAME_CHARS)
        .collect();
    if s.chars().count() > MAX_FRAME_CHARS {
        out.push('…');
    }
    out
}

pub use causeway_model::demangle::demangle;

/// Parse a frames JSON array; malformed input gives an empty list rather than an error.
pub fn parse_frames(json: &str) -> Vec<Frame> {
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|f| {
            let s = |k: &str| f.get(k).and_then(|v| v.as_str());
            if let Some(file) = s("pf") {
                let func = s("pfn").unwrap_or("?");
                let text = match f.get("pl").and_then(|v| v.as_i64()).filter(|&l| l > 0) {
                    Some(line) => format!("{file}:{line} in {func}"),
                    None => format!("{file}:? in {func}"),
                };
                return Some(Frame { kind: "python".into(), text: clean(&text), lib: None });
            }
            if let Some(note) = s("note") {
                return Some(Frame { kind: "note".into(), text: clean(note), lib: None });
            }
            let lib = s("f").map(clean);
            if let Some(sym) = s("s") {
                let (name, off) = match sym.rfind("+0x") {
                    Some(i) => (&sym[..i], &sym[i..]),
                    None => (sym, ""),
                };
                return Some(Frame { kind: "native".into(), text: clean(&format!("{}{off}", demangle(name))), lib });
            }
            s("i").map(|ip| Frame { kind: "unresolved".into(), text: clean(ip), lib })
        })
        .collect()
}

#[derive(Default)]
struct Acc {
    calls: u64,
    total: i64,
    max: i64,
    ops: BTreeMap<String, u64>,
    pids: Vec<u32>,
}

/// Top stacks of the GPU calls in scope (or of `op`'s calls, whatever its source; or of the
/// launches of the kernels `kernel` names).
pub fn top_stacks(store: &dyn TraceStore, req: &StacksRequest) -> Result<StacksReport, AnalysisError> {
    // With a kernel filter: the launch ops (of them, `op`), and the (pid, handle)s whose name matches.
    let kernel = req.kernel.as_deref().map(str::trim).filter(|k| !k.is_empty());
    let mut handles: Option<HashSet<(u32, i64)>> = None;
    let mut kernels = Vec::new();
    let mut kernels_total = None;
    let mut ops = req.op.map(|o| vec![o]);
    if let Some(k) = kernel {
        let index = KernelIndex::load(store)?;
        let matched = index.matching(k);
        let mut names: Vec<String> =
            matched.iter().map(|m| clean(&m.name)).collect::<BTreeSet<_>>().into_iter().collect();
        kernels_total = Some(names.len());
        names.truncate(KERNELS_LISTED);
        kernels = names;
        handles = Some(matched.iter().map(|m| (m.pid, m.handle)).collect());
        let launch_ops = kernel_launch_ops();
        ops = Some(match req.op {
            Some(o) if launch_ops.contains(&o) => vec![o],
            Some(o) => {
                return Err(AnalysisError::BadArgument(format!(
                    "{} does not launch a kernel: the kernel filter applies to {}",
                    o.name(),
                    launch_ops.iter().map(|o| o.name().into_owned()).collect::<Vec<_>>().join(", ")
                )))
            }
            None => launch_ops,
        });
    }
    let filter = EventFilter {
        window: req.window,
        pid: req.pid,
        sources: if ops.is_none() { Some(gpu_call_sources().to_vec()) } else { None },
        ops,
        ..Default::default()
    };
    let mut per: HashMap<i64, Acc> = HashMap::new();
    let (mut calls, mut with_stack) = (0u64, 0u64);
    let keep = |e: &causeway_model::Event| handles.as_ref().is_none_or(|h| h.contains(&(e.pid, e.arg0)));
    let mut threads: HashSet<(u32, u32, i64)> = HashSet::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    for_each_event(store, &filter, &mut |s| {
        let e = &s.event;
        if !keep(e) {
            return;
        }
        calls += 1;
        if e.stack_hash == 0 {
            return;
        }
        with_stack += 1;
        threads.insert((e.pid, e.tid, e.stack_hash));
        (first, last) = (first.min(e.ts_ns), last.max(e.ts_ns));
        let a = per.entry(e.stack_hash).or_default();
        a.calls += 1;
        a.total += e.dur_ns;
        a.max = a.max.max(e.dur_ns);
        *a.ops.entry(e.op_name().into_owned()).or_default() += 1;
        if !a.pids.contains(&e.pid) && a.pids.len() < 16 {
            a.pids.push(e.pid);
        }
    })?;
    let lends = if threads.is_empty() {
        HashMap::new()
    } else {
        crate::borrowed::tally_over(store, &filter, &keep, &threads, (first, last))?
    };
    let top = req.top.max(1);
    let mut by_count: Vec<(&i64, &Acc)> = per.iter().collect();
    by_count.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(b.1.total.cmp(&a.1.total)).then(a.0.cmp(b.0)));
    let mut by_time: Vec<(&i64, &Acc)> = per.iter().collect();
    by_time.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(b.1.calls.cmp(&a.1.calls)).then(a.0.cmp(b.0)));
    by_count.truncate(top);
    by_time.truncate(top);
    let mut hashes: Vec<i64> = by_count.iter().chain(by_time.iter()).map(|x| *x.0).collect();
    hashes.sort_unstable();
    hashes.dedup();
    let records = store.stacks(&hashes)?;
    let summarize = |(h, a): &(&i64, &Acc)| {
        let rec = records.get(h);
        let mut pids = a.pids.clone();
        pids.sort_unstable();
        StackSummary {
            stack_hash: **h,
            calls: a.calls,
            total_ns: a.total,
            max_ns: a.max,
            ops: a.ops.clone(),
            pids,
            resolved: rec.is_some(),
            frames: rec.map(|r| parse_frames(&r.frames)).unwrap_or_default(),
            borrowed: lends.get(*h).map(|l| l.shares.clone()).unwrap_or_default(),
            borrow_ambiguous: lends.get(*h).map_or(0, |l| l.ambiguous),
        }
    };
    let calls_borrowed = lends.values().flat_map(|l| &l.shares).map(|s| s.calls).sum();
    let calls_ambiguous = lends.values().map(|l| l.ambiguous).sum();
    Ok(StacksReport {
        window: req.window,
        op: req.op.map(|o| o.name().into_owned()),
        pid: req.pid,
        kernel: kernel.map(str::to_string),
        kernels,
        kernels_matched: kernels_total,
        calls,
        calls_with_stack: with_stack,
        distinct_stacks: per.len() as u64,
        calls_borrowed,
        calls_ambiguous,
        by_count: by_count.iter().map(summarize).collect(),
        by_time: by_time.iter().map(summarize).collect(),
    })
}

/// What a kernel filter matched, in words (`None` without a filter).
pub fn kernel_filter_words(r: &StacksReport) -> Option<String> {
    let k = r.kernel.as_deref()?;
    let n = r.kernels_matched.unwrap_or(0);
    Some(if n == 0 {
        format!("no recorded kernel name contains '{}': no launch matches (get_trace_stats / causeway stats with group by kernel lists the names)", clean(k))
    } else {
        let more = n.saturating_sub(r.kernels.len());
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        format!("launches of the {n} kernel(s) whose name contains '{}': {}{more}", clean(k), r.kernels.join(", "))
    })
}

/// A stack behind some of a set of calls (a chain's slowest calls).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct StackShare {
    pub stack_hash: i64,
    /// How many of the calls looked at had this stack.
    pub calls: u64,
    /// The user's own code behind these calls: `file:line in function` of the innermost Python
    /// frame outside the standard library and installed packages (see [`user_frame`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_frame: Option<String>,
    /// Innermost first, cut to the frames asked for.
    pub frames: Vec<Frame>,
    /// Frames left out by the cut.
    #[serde(skip_serializing_if = "is_zero")]
    pub frames_cut: usize,
    /// The Python stack these calls, made by a thread without Python frames of its own, borrowed
    /// from the thread they ran for (`user_frame` is then its user's frame).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub borrowed: Option<BorrowedStack>,
    /// The Python threads that could have asked for these calls, when two or more could (nothing
    /// borrowed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ambiguous_between: Vec<u32>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Whether a Python frame's text (`file:line in function`) is the standard library's or an
/// installed package's (`.../lib/python3.X/...`, `site-packages`, `dist-packages`, `<frozen ...>`)
/// rather than the user's own code.
pub fn is_library_python(text: &str) -> bool {
    text.starts_with('<')
        || text.contains("/lib/python3")
        || text.contains("site-packages")
        || text.contains("dist-packages")
}

/// The frame of the user's own code behind a call: the innermost Python frame that is not library
/// code, else the innermost Python frame; `None` without Python frames.
pub fn user_frame(frames: &[Frame]) -> Option<&Frame> {
    let mut python = frames.iter().filter(|f| f.kind == "python");
    let first = python.clone().next();
    python.find(|f| !is_library_python(&f.text)).or(first)
}

/// `file:line in function` split into (`file:line`, `function`).
pub fn python_parts(text: &str) -> Option<(&str, &str)> {
    text.rsplit_once(" in ")
}

/// Where a call was made, in a few frames, innermost first: from the user's own Python frame
/// outward when the stack has Python frames, else the native frames outside the CUDA libraries.
pub fn call_site(frames: &[Frame], max: usize) -> Vec<String> {
    if let Some(u) = user_frame(frames) {
        let at = frames.iter().position(|f| std::ptr::eq(f, u)).unwrap_or(0);
        return frames[at..].iter().filter(|f| f.kind == "python").take(max).map(|f| f.text.clone()).collect();
    }
    // libcuda.so.1, libcudart.so.12, LibTorch's libcudart-<hash>.so.12
    let cuda = |f: &&Frame| f.lib.as_deref().is_some_and(|l| l.starts_with("libcuda"));
    frames.iter().filter(|f| f.kind == "native" && !cuda(f)).take(max).map(|f| f.text.clone()).collect()
}

/// The stacks behind the calls `ids`, most calls first, each cut to `max_frames` frames; the calls
/// of one stack that borrowed different Python stacks (or could not: ambiguous) apart. Calls
/// recorded without a stack are not counted.
pub fn stacks_of_calls(
    store: &dyn TraceStore,
    ids: &[EventId],
    max_frames: usize,
    lends: &mut Lends,
) -> Result<Vec<StackShare>, AnalysisError> {
    let events: Vec<_> = store.events_by_id(ids)?.into_iter().filter(|s| s.event.stack_hash != 0).collect();
    let calls: Vec<&causeway_model::Event> = events.iter().map(|s| &s.event).collect();
    let mut lent = lends.of(store, &calls)?;
    // (stack, what it borrowed: none, a lender's stack, or ambiguous) -> calls
    type Group = (u64, Option<BorrowedStack>, BTreeSet<u32>);
    let mut per: BTreeMap<(i64, u8, Option<crate::borrowed::LendKey>), Group> = BTreeMap::new();
    for (i, e) in calls.iter().enumerate() {
        let (kind, key, stack, tids) = match lent.remove(&i) {
            None => (0, None, None, Vec::new()),
            Some(CallLend::Borrowed(k, b)) => (1, Some(k), Some(b), Vec::new()),
            Some(CallLend::Ambiguous(t)) => (2, None, None, t),
        };
        let g = per.entry((e.stack_hash, kind, key)).or_insert((0, stack, BTreeSet::new()));
        g.0 += 1;
        g.2.extend(tids);
    }
    let mut ranked: Vec<(i64, Group)> = per.into_iter().map(|((h, _, _), g)| (h, g)).collect();
    ranked.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    let mut hashes: Vec<i64> = ranked.iter().map(|r| r.0).collect();
    hashes.dedup();
    let records = store.stacks(&hashes)?;
    Ok(ranked
        .into_iter()
        .map(|(stack_hash, (calls, borrowed, ambiguous))| {
            let mut frames = records.get(&stack_hash).map(|r| parse_frames(&r.frames)).unwrap_or_default();
            let user = match &borrowed {
                Some(b) => b.user_frame.clone(),
                None => user_frame(&frames).map(|f| f.text.clone()),
            };
            let frames_cut = frames.len().saturating_sub(max_frames);
            frames.truncate(max_frames);
            StackShare {
                stack_hash,
                calls,
                user_frame: user,
                frames,
                frames_cut,
                borrowed,
                ambiguous_between: ambiguous.into_iter().collect(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_of_every_kind() {
        let json = r#"[{"pf":"/app/train.py","pfn":"train_step","pl":42},
            {"s":"_ZN2at6native22gpu_kernel_impl_nocastEv+0x1f","f":"libtorch_cuda.so"},
            {"s":"_ZN4core3fmt5write17h0123456789abcdefE+0x10","f":"app"},
            {"s":"cudaMalloc+0x1cb","f":"libcudart.so.12"},
            {"i":"0x7ac1c9e47f0e","f":"libcudart.so.12"}]"#;
        let f = parse_frames(json);
        assert_eq!(f.len(), 5);
        assert_eq!(f[0].text, "/app/train.py:42 in train_step");
        assert_eq!(f[0].kind, "python");
        assert_eq!(f[1].text, "at::native::gpu_kernel_impl_nocast()+0x1f");
        assert_eq!(f[1].lib.as_deref(), Some("libtorch_cuda.so"));
        assert_eq!(f[2].text, "core::fmt::write+0x10");
        assert_eq!(f[3].text, "cudaMalloc+0x1cb");
        assert_eq!((f[4].kind.as_str(), f[4].text.as_str()), ("unresolved", "0x7ac1c9e47f0e"));
        assert!(parse_frames("not json").is_empty());
        let f = parse_frames(r#"[{"pf":"a.py","pfn":"f","pl":0},{"note":"Python stack cut"}]"#);
        assert_eq!(f[0].text, "a.py:? in f");
        assert_eq!((f[1].kind.as_str(), f[1].text.as_str()), ("note", "Python stack cut"));
    }

    #[test]
    fn the_user_frame_is_the_innermost_python_frame_outside_the_libraries() {
        let f = parse_frames(
            r#"[{"s":"cudaStreamSynchronize+0x10","f":"libcudart.so.12"},
            {"s":"_ZN2at4cuda4syncEv+0x8","f":"libtorch_cuda.so"},
            {"pf":"/venv/lib/python3.12/site-packages/torch/cuda/__init__.py","pfn":"synchronize","pl":892},
            {"pf":"/usr/lib/python3.12/contextlib.py","pfn":"__exit__","pl":144},
            {"pf":"/app/train.py","pfn":"train_step","pl":42},
            {"pf":"/app/train.py","pfn":"main","pl":90},
            {"pf":"<frozen runpy>","pfn":"_run_code","pl":88}]"#,
        );
        assert_eq!(user_frame(&f).unwrap().text, "/app/train.py:42 in train_step");
        assert_eq!(python_parts("/app/train.py:42 in train_step"), Some(("/app/train.py:42", "train_step")));
        assert_eq!(call_site(&f, 2), vec!["/app/train.py:42 in train_step", "/app/train.py:90 in main"]);
        // only library frames: the innermost Python frame stands for the user's code
        let lib_only = parse_frames(r#"[{"pf":"/usr/lib/python3.12/threading.py","pfn":"run","pl":1010}]"#);
        assert_eq!(user_frame(&lib_only).unwrap().text, "/usr/lib/python3.12/threading.py:1010 in run");
        // no Python frame: the native frames outside the CUDA libraries
        let native = parse_frames(
            r#"[{"s":"cudaMalloc+0x1","f":"libcudart.so.12"},{"s":"alloc_all+0x4","f":"app"},{"s":"main+0x9","f":"app"}]"#,
        );
        assert_eq!(user_frame(&native), None);
        assert_eq!(call_site(&native, 1), vec!["alloc_all+0x4"]);
    }

    #[test]
    fn traced_strings_are_cleaned() {
        assert_eq!(clean("evil\u{202E}name\n"), "evilname");
        assert_eq!(clean(&"x".repeat(400)).chars().count(), MAX_FRAME_CHARS + 1);
    }
}
