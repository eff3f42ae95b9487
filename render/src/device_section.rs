//! The report's device section (traces recorded with `--gpu-timeline`), laid out from `explain`'s
//! device view with no figure of its own: each device's busy share, the GPU idle time by cause
//! (the idle chains `g1`, `g2`, ..., each with the SQL that recomputes it in a collapsible block, as
//! the host chains show their evidence), the longest gaps with what explains each, the host time
//! that cost the GPU nothing and the view's notes.

use std::fmt::Write as _;

use causeway_analysis::{idle_part_words, DeviceView};
use causeway_model::time::fmt_ns;

use crate::html::esc;

/// Gaps listed (the device view holds the longest 20).
const GAPS_SHOWN: usize = 5;

/// Appends the section for `d`; `first_ns` is where the report's relative times count from.
pub(crate) fn device_section(h: &mut String, d: &DeviceView, first_ns: i64) {
    h.push_str("<section class=\"device\" id=\"device\"><h2>When the GPU itself sat idle, and why</h2>\n");
    let _ = writeln!(
        h,
        "<table class=\"devices\"><tr><th>device</th><th>busy</th><th>of</th><th>idle</th><th>in gaps under {}</th><th>ops</th><th>streams</th></tr>",
        fmt_ns(d.gap_threshold_ns)
    );
    for g in &d.devices {
        let name = if g.name.is_empty() { String::new() } else { format!(" ({})", g.name) };
        let _ = writeln!(
            h,
            "<tr class=\"gpu\" data-pid=\"{}\" data-device=\"{}\"><td>pid {} GPU {}{}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            g.pid,
            g.device,
            g.pid,
            g.device,
            esc(&name),
            g.busy_share * 100.0,
            fmt_ns(g.last_ns - g.first_ns),
            fmt_ns(g.idle_ns),
            fmt_ns(g.idle_in_short_gaps_ns),
            g.ops,
            g.streams.len()
        );
    }
    h.push_str("</table>\n");
    if d.chains.is_empty() {
        let _ = writeln!(h, "<p>No idle gap over {}.</p>", fmt_ns(d.gap_threshold_ns));
    } else {
        let _ = writeln!(
            h,
            "<p>{} of GPU idle time in {} gap{} over {}, by what delayed the work that ended each:</p>",
            fmt_ns(d.gaps_idle_ns),
            d.gaps_total,
            if d.gaps_total == 1 { "" } else { "s" },
            fmt_ns(d.gap_threshold_ns)
        );
        h.push_str("<table class=\"idle-chains\"><tr><th>id</th><th>GPU idle</th><th>share</th><th>gaps</th><th>cause · culprit</th></tr>\n");
        for c in &d.chains {
            let _ = writeln!(
                h,
                "<tr class=\"idle-chain\" id=\"{id}\"><td>{id}</td><td>{}</td><td>{:.1}%</td><td>{}</td><td>{}</td></tr>",
                fmt_ns(c.idle_ns),
                c.share * 100.0,
                c.gaps,
                esc(&idle_part_words(c.cause, c.culprit.as_ref())),
                id = esc(&c.id),
            );
        }
        h.push_str("</table>\n");
        for c in &d.chains {
            let _ = writeln!(
                h,
                "<details class=\"idle-evidence\" data-chain=\"{}\"><summary>Evidence {}: {} ns of GPU idle time (SQL)</summary><pre>{}</pre></details>",
                esc(&c.id),
                esc(&c.id),
                c.idle_ns,
                esc(&c.sql)
            );
        }
    }
    if !d.gaps.is_empty() {
        h.push_str("<h3>The longest gaps</h3>\n<ul class=\"gaps\">");
        for g in d.gaps.iter().take(GAPS_SHOWN) {
            let _ = write!(h, "<li>+{}: {}</li>", fmt_ns(g.start_ns - first_ns), esc(&g.summary));
        }
        h.push_str("</ul>\n");
    }
    if d.host_time_hidden_ns > 0 {
        let _ = writeln!(
            h,
            "<p>{} off-CPU time of the launching threads fell while the GPU stayed busy: it cost the GPU nothing.</p>",
            fmt_ns(d.host_time_hidden_ns)
        );
    }
    if !d.notes.is_empty() {
        h.push_str("<ul class=\"notes\">");
        for n in &d.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</section>\n");
}
