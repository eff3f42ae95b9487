//! An op's latency histogram: every call's duration in log-width bins (GPU call latencies span
//! microseconds to seconds), with the exact nearest-rank p50 and p99 and the slow-call threshold
//! marked.

use causeway_model::time::fmt_ns;
use causeway_store::summary::nearest_rank;
use svg::node::element::{Group, Line, Rectangle, Text, Title};
use svg::Document;

use crate::palette;
use crate::scale::LogScale;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;
const BINS: usize = 40;

/// A histogram and the figures it marks.
#[derive(Debug, Clone)]
pub struct Histogram {
    pub op: String,
    pub svg: String,
    pub calls: usize,
    /// Calls per bin, lowest first (they add up to `calls`).
    pub bins: Vec<u64>,
    pub p50_ns: i64,
    pub p99_ns: i64,
}

/// The histogram of `durations` (ns) of `op`; `slow_threshold_ns` drawn when given. `None`
/// without calls.
pub fn latency_histogram(op: &str, mut durations: Vec<i64>, slow_threshold_ns: Option<i64>) -> Option<Histogram> {
    durations.sort_unstable();
    let (&lo, &hi) = (durations.first()?, durations.last()?);
    let p50 = nearest_rank(&durations, 500)?;
    let p99 = nearest_rank(&durations, 990)?;
    let scale = LogScale::new(lo.max(1), hi.max(lo.max(1) + 1), LEFT, WIDTH - RIGHT);
    let mut bins = vec![0u64; BINS];
    for &d in &durations {
        bins[scale.bin_of(d, BINS)] += 1;
    }
    let top = *bins.iter().max().unwrap_or(&1) as f64;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let mut doc = Document::new()
        .set("xmlns", "http://www.w3.org/2000/svg")
        .set("class", "latency-histogram")
        .set("data-op", op)
        .set("width", WIDTH)
        .set("height", HEIGHT)
        .set("viewBox", (0, 0, WIDTH, HEIGHT))
        .set("font-family", "DejaVu Sans, Verdana, sans-serif")
        .add(Rectangle::new().set("width", WIDTH).set("height", HEIGHT).set("fill", palette::BACKGROUND))
        .add(
            Text::new(format!("{op}: {} calls, p50 {}, p99 {} (log scale)", durations.len(), fmt_ns(p50), fmt_ns(p99)))
                .set("x", 8)
                .set("y", 18)
                .set("font-size", 12)
                .set("font-weight", "bold"),
        );
    let mut bars = Group::new().set("class", "bins");
    for (i, &n) in bins.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (a, b) = scale.bin(i, BINS);
        let (xa, xb) = (scale.x(a), scale.x(b));
        let h = (n as f64 / top * plot_h).max(1.0);
        bars = bars.add(
            Rectangle::new()
                .set("class", "bin")
                .set("x", xa)
                .set("y", TOP + plot_h - h)
                .set("width", (xb - xa - 1.0).max(1.0))
                .set("height", h)
                .set("fill", palette::HISTOGRAM)
                .add(Title::new(format!("{n} calls from {} to {}", fmt_ns(a as i64), fmt_ns(b as i64)))),
        );
    }
    doc = doc.add(bars);
    let axis_y = TOP + plot_h;
    doc = doc.add(
        Line::new()
            .set("x1", LEFT)
            .set("x2", WIDTH - RIGHT)
            .set("y1", axis_y)
            .set("y2", axis_y)
            .set("stroke", palette::MUTED),
    );
    for (ns, text) in scale.decades() {
        let x = scale.x(ns);
        doc = doc.add(
            Line::new()
                .set("x1", x)
                .set("x2", x)
                .set("y1", axis_y)
                .set("y2", axis_y + 5.0)
                .set("stroke", palette::MUTED),
        );
        doc = doc.add(
            Text::new(text)
                .set("x", x)
                .set("y", axis_y + 17.0)
                .set("font-size", 9)
                .set("text-anchor", "middle")
                .set("fill", palette::MUTED),
        );
    }
    doc = doc.add(
        Text::new(format!("{}", top as u64))
            .set("x", LEFT - 4.0)
            .set("y", TOP + 8.0)
            .set("font-size", 9)
            .set("text-anchor", "end")
            .set("fill", palette::MUTED),
    );
    let mut marks = vec![("p50", p50, palette::MUTED), ("p99", p99, palette::EVIDENCE)];
    if let Some(t) = slow_threshold_ns {
        marks.push(("slow", t, palette::SLOW));
    }
    for (name, ns, color) in marks {
        let x = scale.x(ns as f64);
        doc = doc.add(
            Group::new()
                .set("class", format!("mark {name}"))
                .add(
                    Line::new()
                        .set("x1", x)
                        .set("x2", x)
                        .set("y1", TOP)
                        .set("y2", axis_y)
                        .set("stroke", color)
                        .set("stroke-dasharray", "4 3"),
                )
                .add(
                    Text::new(format!("{name} {}", fmt_ns(ns)))
                        .set("x", x + 3.0)
                        .set("y", TOP + 10.0 + if name == "slow" { 12.0 } else { 0.0 })
                        .set("font-size", 9)
                        .set("fill", color),
                ),
        );
    }
    doc = doc.add(
        Text::new("call duration")
            .set("x", WIDTH / 2.0)
            .set("y", HEIGHT - 6.0)
            .set("font-size", 10)
            .set("text-anchor", "middle")
            .set("fill", palette::MUTED),
    );
    Some(Histogram { op: op.to_string(), svg: doc.to_string(), calls: durations.len(), bins, p50_ns: p50, p99_ns: p99 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_hold_every_call_and_marks_are_nearest_rank() {
        let mut d: Vec<i64> = (1..=100).map(|i| i * 1_000).collect();
        d.push(50_000_000);
        let h = latency_histogram("cudaStreamSynchronize", d, Some(2_000_000)).unwrap();
        assert_eq!(h.bins.iter().sum::<u64>(), 101);
        assert_eq!(h.p50_ns, 51_000); // rank ceil(0.5 * 101) = 51
        assert_eq!(h.p99_ns, 100_000); // rank ceil(0.99 * 101) = 100
        assert_eq!(*h.bins.last().unwrap(), 1, "the 50 ms outlier alone in the last bin");
        assert_eq!(h.svg.matches("class=\"bin\"").count(), h.bins.iter().filter(|&&n| n > 0).count());
        assert!(h.svg.contains("slow 2.00 ms"));
    }

    #[test]
    fn one_value_or_none() {
        assert!(latency_histogram("x", vec![], None).is_none());
        let h = latency_histogram("x", vec![5_000, 5_000], None).unwrap();
        assert_eq!(h.bins.iter().sum::<u64>(), 2);
    }
}
