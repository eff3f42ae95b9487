//! `causeway stats`: exact per-op statistics of a trace, as a table or one JSON object.

use std::path::PathBuf;

use anyhow::Context;
use causeway_analysis::{compute_stats, OpStats, StatsRequest, TraceStats};
use causeway_analysis::{config_words, KernelReport};
use causeway_model::codes::{self, OpCode};
use causeway_model::time::{fmt_ns, fmt_utc};

use crate::table::{us, Table};
use crate::window::ScopeArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Trace database (native Causeway trace or Ingero DB).
    #[arg(long)]
    db: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    scope: ScopeArgs,
    /// Only these ops (by name, e.g. cudaLaunchKernel; repeatable).
    #[arg(long = "op", value_name = "NAME")]
    ops: Vec<String>,
    /// Also give the figures per process, with its name.
    #[arg(long)]
    per_process: bool,
    /// `op` (default): per op. `kernel`: also per kernel name over every kernel launch op (the
    /// host-side launch call's duration, the launch APIs, the launch configurations).
    #[arg(long, value_enum, default_value_t = GroupBy::Op)]
    by: GroupBy,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    Op,
    Kernel,
}

pub fn parse_ops(names: &[String]) -> anyhow::Result<Option<Vec<OpCode>>> {
    if names.is_empty() {
        return Ok(None);
    }
    names
        .iter()
        .map(|n| {
            codes::op_by_name(n).with_context(|| format!("unknown op '{n}' (e.g. cudaLaunchKernel, sched_switch)"))
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .map(Some)
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let store = causeway_backends::open_store(&args.db)?;
    let window = args.scope.window(store.as_ref())?;
    let req = StatsRequest {
        window,
        pid: args.scope.pid,
        ops: parse_ops(&args.ops)?,
        per_process: args.per_process,
        by_kernel: args.by == GroupBy::Kernel,
    };
    let stats = compute_stats(store.as_ref(), &req)?;
    if args.json {
        println!("{}", serde_json::to_string(&stats)?);
    } else {
        print!("{}", render(&args.db, store.info(), &stats));
    }
    Ok(0)
}

fn ops_table(ops: &[OpStats]) -> Table {
    let mut t = Table::new(&[
        "SOURCE", "OP", ">COUNT", ">SUM us", ">AVG us", ">MIN us", ">P50 us", ">P90 us", ">P95 us", ">P99 us",
        ">MAX us",
    ]);
    for o in ops {
        t.row(vec![
            codes::source_name(o.source).into_owned(),
            o.op.clone(),
            o.count.to_string(),
            us(o.sum_us),
            us(o.avg_us),
            us(o.min_us),
            us(o.p50_us),
            us(o.p90_us),
            us(o.p95_us),
            us(o.p99_us),
            us(o.max_us),
        ]);
    }
    t
}

fn render(path: &std::path::Path, info: &causeway_backends::TraceInfo, s: &TraceStats) -> String {
    let mut out = String::new();
    let format = match &info.format {
        causeway_backends::TraceFormat::Native { schema_version } => {
            format!("Causeway trace, schema v{schema_version}")
        }
        causeway_backends::TraceFormat::Ingero { version } => format!("Ingero DB, schema v{version}"),
    };
    out.push_str(&format!("{} ({format})\n", path.display()));
    if s.events == 0 {
        out.push_str("no events in this window\n");
    } else {
        out.push_str(&format!(
            "{} events from {} to {} UTC ({})\n",
            s.events,
            fmt_utc(s.first_ns),
            fmt_utc(s.last_ns),
            fmt_ns(s.last_ns - s.first_ns)
        ));
    }
    if !s.window.is_all() {
        let f = s.window.from_ns.map(fmt_utc).unwrap_or_else(|| "start".into());
        let t = s.window.to_ns.map(fmt_utc).unwrap_or_else(|| "end".into());
        out.push_str(&format!("window: {f} .. {t}\n"));
    }
    out.push('\n');
    // what explain ranks first: calls that failed or never returned
    for f in &s.failures {
        for c in &f.in_flight {
            out.push_str(&format!(
                "pid {}: tid {} was still in {} when the trace ended, for {} (at least)\n",
                f.pid,
                c.tid,
                c.op,
                fmt_ns(c.dur_ns)
            ));
        }
        for e in &f.errors {
            out.push_str(&format!(
                "pid {}: {} {} call(s) failed with {} ({})\n",
                f.pid, e.calls, e.op, e.error, e.ret_code
            ));
        }
    }
    if !s.failures.is_empty() {
        out.push('\n');
    }
    out.push_str(&ops_table(&s.ops).render());
    if let Some(procs) = &s.processes {
        for p in procs {
            let name = if p.name.is_empty() { "?" } else { &p.name };
            let place = if p.cgroup.is_empty() { String::new() } else { format!(", {}", p.cgroup) };
            out.push_str(&format!("\npid {} ({name}{place}): {} events\n", p.pid, p.events));
            out.push_str(&ops_table(&p.ops).render());
        }
    }
    if let Some(k) = &s.kernels {
        out.push_str(&kernels_text(k));
    }
    if let Some(n) = &s.network {
        out.push_str(&network_text(n));
    }
    if let Some(d) = &s.device {
        out.push_str(&device_text(d));
    }
    if let Some(sample) = &s.sampled {
        out.push_str(&format!("\nnote: {}\n", sample.note));
        let mut t = Table::new(&["SOURCE", "OP", ">HAPPENED", ">STORED", ">SUM us", ">AVG us", ">MIN us", ">MAX us"]);
        for tt in &sample.true_totals {
            t.row(vec![
                codes::source_name(tt.source).into_owned(),
                tt.op.clone(),
                tt.count.to_string(),
                tt.stored.to_string(),
                us(tt.sum_us),
                us(tt.avg_us),
                us(tt.min_us),
                us(tt.max_us),
            ]);
        }
        out.push_str(&t.render());
    }
    if s.losses.is_empty() {
        if info.has_table("loss_counters") {
            out.push_str("\nlost events: none\n");
        }
    } else {
        out.push_str("\nlost events:\n");
        for l in &s.losses {
            out.push_str(&format!("  {} {}: {}\n", codes::source_name(l.source), l.kind.as_str(), l.count));
        }
    }
    for m in &s.missing {
        out.push_str(&format!("not recorded in this DB: {m}\n"));
    }
    for c in &s.coverage {
        out.push_str(&format!("coverage: {c}\n"));
    }
    for g in &s.gpus {
        out.push_str(&gpu_line(g));
    }
    if !s.gpu_memory.is_empty() {
        out.push_str(&gpu_memory_text(&s.gpu_memory));
    }
    out
}

/// The memory each process NVML listed used per GPU: its peak, its last, and the samples that
/// found it gone (a context left behind).
fn gpu_memory_text(m: &[causeway_analysis::ProcessGpuMemory]) -> String {
    let mut out = String::from("\nGPU memory per process (NVML)\n");
    let mut t = Table::new(&[">GPU", ">PID", "PROCESS", ">SAMPLES", ">PEAK MiB", ">FIRST MiB", ">LAST MiB", ">GONE"]);
    let mib = |b: i64| if b < 0 { "-".to_string() } else { format!("{:.1}", b as f64 / (1u64 << 20) as f64) };
    for p in m {
        t.row(vec![
            p.gpu.to_string(),
            p.pid.to_string(),
            p.name.clone(),
            p.samples.to_string(),
            mib(p.peak_bytes),
            mib(p.first_bytes),
            mib(p.last_bytes),
            p.gone_samples.to_string(),
        ]);
    }
    out.push_str(&t.render());
    if m.iter().any(|p| p.gone_samples > 0) {
        out.push_str(
            "GONE: samples taken after the process was gone (/proc/PID absent) that still listed its memory\n",
        );
    }
    out
}

/// The traced threads' socket calls per peer, then what the untraced processes did.
fn network_text(n: &causeway_analysis::NetworkReport) -> String {
    let mut out = String::from("\nnetwork (socket calls of traced threads, per peer)\n");
    let mut t = Table::new(&[
        ">PID",
        "PROCESS",
        "PEER",
        ">SENDS",
        ">SENT",
        ">RECVS",
        ">RECEIVED",
        ">P50 us",
        ">P99 us",
        ">MAX us",
        ">ERRORS",
        ">RETRANS",
    ]);
    for p in &n.peers {
        t.row(vec![
            p.pid.to_string(),
            p.process.clone(),
            p.peer.clone(),
            p.sends.to_string(),
            p.bytes_sent.to_string(),
            p.receives.to_string(),
            p.bytes_received.to_string(),
            us(p.p50_us),
            us(p.p99_us),
            us(p.max_us),
            p.errors.to_string(),
            p.retransmits.to_string(),
        ]);
    }
    out.push_str(&t.render());
    let u = &n.untraced;
    if u.sends + u.receives + u.retransmits > 0 {
        out.push_str(&format!(
            "untraced processes: {} sends ({} bytes), {} receives ({} bytes), {} TCP retransmits\n",
            u.sends, u.bytes_sent, u.receives, u.bytes_received, u.retransmits
        ));
    }
    out
}

/// One GPU's state over the window, from the NVML samples.
fn gpu_line(g: &causeway_analysis::GpuSummary) -> String {
    let known = |v: i64, unit: &str| if v < 0 { "-".to_string() } else { format!("{v}{unit}") };
    let mut line = format!(
        "GPU {}: {} samples, SM clock p50 {} (min {}, max {}), up to {}, {} of {}, utilization p50 {}",
        g.gpu,
        g.samples,
        known(i64::from(g.sm_clock_p50_mhz), " MHz"),
        known(i64::from(g.sm_clock_min_mhz), " MHz"),
        known(i64::from(g.sm_clock_max_mhz), " MHz"),
        known(i64::from(g.temperature_max_c), " °C"),
        known(if g.power_max_mw < 0 { -1 } else { g.power_max_mw / 1000 }, " W"),
        known(if g.power_limit_mw < 0 { -1 } else { g.power_limit_mw / 1000 }, " W"),
        known(i64::from(g.util_gpu_p50_pct), "%"),
    );
    if g.throttled_ns > 0 {
        let by: Vec<String> =
            g.throttled_by_reason.iter().map(|(r, ns)| format!("{r} {}", causeway_model::time::fmt_ns(*ns))).collect();
        line.push_str(&format!("; throttled {} ({})", causeway_model::time::fmt_ns(g.throttled_ns), by.join(", ")));
    }
    if g.ecc_corrected > 0 || g.ecc_uncorrected > 0 {
        line.push_str(&format!("; ECC errors {} corrected, {} uncorrected", g.ecc_corrected, g.ecc_uncorrected));
    }
    let l = &g.link;
    if l.pcie_link_gen_max > 0 {
        let at = |gen: i32, width: i32| if width > 0 { format!("gen {gen} x{width}") } else { format!("gen {gen}") };
        line.push_str(&format!("; PCIe max {}", at(l.pcie_link_gen_max, l.pcie_link_width_max)));
        if l.busy_samples == 0 {
            line.push_str(", never busy");
        } else {
            line.push_str(&format!(
                ", while busy as low as {} ({} of {} busy samples below the maximum, {})",
                at(l.pcie_link_gen_busy_min, l.pcie_link_width_busy_min),
                l.pcie_degraded_busy_samples,
                l.busy_samples,
                causeway_model::time::fmt_ns(l.pcie_degraded_busy_ns)
            ));
        }
    }
    if l.nvlink_errors >= 0 {
        line.push_str(&format!("; NVLink errors {}", l.nvlink_errors));
    }
    line + "\n"
}

/// The per-kernel table, with each kernel's launch APIs and configurations below it.
fn kernels_text(k: &KernelReport) -> String {
    let mut out = format!(
        "\n{} kernel launches of {} kernels ({} named; {} driver launches inside runtime launches counted with them)\nnote: {}\n",
        k.launches, k.kernels_total, k.named_launches, k.nested_launches, k.note
    );
    // The table names each kernel short (PyTorch's templates run to kilobytes and would stretch every
    // row); the list below it gives each one's full name by the same number.
    let mut t = Table::new(&[
        ">#",
        "KERNEL",
        ">LAUNCHES",
        ">SUM us",
        ">AVG us",
        ">MIN us",
        ">P50 us",
        ">P90 us",
        ">P95 us",
        ">P99 us",
        ">MAX us",
    ]);
    for (i, s) in k.kernels.iter().enumerate() {
        t.row(vec![
            format!("k{}", i + 1),
            causeway_analysis::short_kernel_name(&s.kernel),
            s.launches.to_string(),
            us(s.sum_us),
            us(s.avg_us),
            us(s.min_us),
            us(s.p50_us),
            us(s.p90_us),
            us(s.p95_us),
            us(s.p99_us),
            us(s.max_us),
        ]);
    }
    out.push_str(&t.render());
    for (i, s) in k.kernels.iter().enumerate() {
        let apis: Vec<String> = s.apis.iter().map(|(a, n)| format!("{a} x{n}")).collect();
        out.push_str(&format!("\nk{} {}\n  launched by {}\n", i + 1, s.kernel, apis.join(", ")));
        for c in &s.configs {
            out.push_str(&format!("  {} x{}\n", config_words(c), c.launches));
        }
        if s.launches_without_config > 0 {
            out.push_str(&format!("  no configuration recorded x{}\n", s.launches_without_config));
        }
    }
    out
}

/// The device's own timeline: busy share per device, device time per kernel and launch latency.
fn device_text(d: &causeway_analysis::DeviceStats) -> String {
    let ms = |ns: i64| format!("{:.3}", ns as f64 / 1e6);
    let mut out = String::from(
        "\ndevice timeline (CUPTI: device time of each op, launch latency = call start to device start)\n",
    );
    for line in &d.recording {
        out.push_str(&format!("  {line}\n"));
    }
    for b in &d.devices {
        out.push_str(&format!(
            "  pid {} GPU {}: {} ops, busy {} ms of {} ms ({:.1}%)\n",
            b.pid,
            b.device,
            b.ops,
            ms(b.busy_ns),
            ms(b.span_ns),
            b.busy_share * 100.0
        ));
    }
    let mut t = Table::new(&[
        "KIND",
        "NAME",
        ">COUNT",
        ">TOTAL ms",
        ">P50 us",
        ">P90 us",
        ">P99 us",
        ">MAX us",
        ">LAUNCH P50 us",
        ">LAUNCH P99 us",
    ]);
    let us = |ns: i64| format!("{:.1}", ns as f64 / 1e3);
    for o in &d.ops {
        let name: String =
            if o.name.chars().count() > 48 { o.name.chars().take(47).chain(['…']).collect() } else { o.name.clone() };
        t.row(vec![
            o.kind.name().into(),
            name,
            o.count.to_string(),
            ms(o.total_ns),
            us(o.p50_ns),
            us(o.p90_ns),
            us(o.p99_ns),
            us(o.max_ns),
            o.launch_latency.as_ref().map(|l| us(l.p50_ns)).unwrap_or_else(|| "-".into()),
            o.launch_latency.as_ref().map(|l| us(l.p99_ns)).unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push_str(&t.render());
    if d.ops_not_listed > 0 {
        out.push_str(&format!("  … {} more ops ({} ms) under other names\n", d.ops_not_listed, ms(d.ns_not_listed)));
    }
    out
}
