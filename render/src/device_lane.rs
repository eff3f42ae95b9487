//! The device lane of a chain's picture (traces recorded with `--gpu-timeline`): under the host
//! rows, one lane per device of the chain's process showing when the device itself was busy (the
//! union of its kernels, copies and memsets over every stream, as the device view forms it) and
//! the idle stretches between, those of at least `DEFAULT_GAP_NS` (the gaps the device view
//! explains) marked. A preemption of the feeding thread then sits above the gap it caused, or above
//! a busy device: visibly costing nothing.

use std::collections::BTreeMap;

use causeway_analysis::DEFAULT_GAP_NS;
use causeway_model::time::{fmt_ns, TimeWindow};
use causeway_model::GpuOpKind;
use causeway_store::TraceStore;
use svg::node::element::{Group, Rectangle, Text, Title};

use crate::palette;
use crate::scale::TimeScale;
use crate::RenderError;

/// How long before the picture's window an op may have started and still be drawn where it runs
/// into the window (the ops are read by their device start).
const LOOKBACK_NS: i64 = 2_000_000_000;
/// A lane's height, px.
pub(crate) const LANE_H: f64 = 22.0;

/// One device's busy spans and idle stretches inside a picture's window.
pub(crate) struct DeviceLane {
    pub device: i32,
    /// Merged busy spans, clipped to the window, with the ops each holds.
    pub busy: Vec<(i64, i64, u64)>,
    /// The idle stretches between them (and at the window's edges), clipped to the window, and
    /// whether each is a gap the device view explains (at least `DEFAULT_GAP_NS` in all).
    pub idle: Vec<(i64, i64, bool)>,
}

/// The lanes of `pid`'s devices over `[from, to]`; empty when the trace holds no device timeline.
/// An idle stretch is marked a gap by its whole length, read past the window's edges (the ops
/// starting up to [`LOOKBACK_NS`] before it and `DEFAULT_GAP_NS` after it).
pub(crate) fn device_lanes(
    store: &dyn TraceStore,
    pid: u32,
    from: i64,
    to: i64,
) -> Result<Vec<DeviceLane>, RenderError> {
    let scan_from = from.saturating_sub(LOOKBACK_NS);
    let scan_to = to.saturating_add(DEFAULT_GAP_NS);
    // per device, the merged spans from the last one that ended before the window on
    let mut spans: BTreeMap<i32, Vec<(i64, i64, u64)>> = BTreeMap::new();
    let window = TimeWindow { from_ns: Some(scan_from), to_ns: Some(scan_to) };
    store.scan_gpu_ops(&window, &mut |g| {
        if g.pid != pid || g.kind == GpuOpKind::Sync {
            return;
        }
        let (start, end) = (g.start_ns, g.end_ns.max(g.start_ns));
        let v = spans.entry(g.device).or_default();
        match v.last_mut() {
            Some(last) if start <= last.1 => {
                last.1 = last.1.max(end);
                last.2 += 1;
            }
            _ => {
                // what ended before a span that begins by the window's start is not drawn
                if start <= from {
                    v.clear();
                }
                v.push((start, end, 1));
            }
        }
    })?;
    let mut lanes = Vec::new();
    for (device, v) in spans {
        let busy: Vec<(i64, i64, u64)> =
            v.iter().filter(|s| s.1 > from && s.0 < to).map(|&(a, b, n)| (a.max(from), b.min(to), n)).collect();
        // the stretches between the spans, the scan's edges standing for the spans beyond it
        let mut idle = Vec::new();
        let mut at = scan_from;
        for &(a, b, _) in v.iter().chain(std::iter::once(&(scan_to + 1, scan_to + 1, 0))) {
            if a > at && a > from && at < to {
                idle.push((at.max(from), a.min(to), a - at >= DEFAULT_GAP_NS));
            }
            at = at.max(b);
        }
        lanes.push(DeviceLane { device, busy, idle });
    }
    Ok(lanes)
}

/// A lane as an element group at `y`: the busy spans (`device-busy`) over the idle stretches
/// (`device-idle`, `device-idle gap` for those the device view explains one by one).
pub(crate) fn draw_lane(lane: &DeviceLane, scale: &TimeScale, y: f64) -> Group {
    let mut row = Group::new().set("class", "device-row").set("data-device", lane.device);
    row = row.add(
        Text::new(format!("GPU {}: busy / idle", lane.device)).set("x", 8).set("y", y + 14.0).set("font-size", 11),
    );
    for &(a, b, long) in &lane.idle {
        let (x, w) = scale.extent(a, b);
        let rect = Rectangle::new()
            .set("x", x)
            .set("y", y + 6.0)
            .set("width", w)
            .set("height", 9)
            .set("fill", if long { palette::DEVICE_GAP } else { palette::DEVICE_IDLE })
            .add(Title::new(format!(
                "GPU {} idle {}{}",
                lane.device,
                fmt_ns(b - a),
                if long { " here, in a gap over 1 ms" } else { "" }
            )));
        row = row.add(Group::new().set("class", if long { "device-idle gap" } else { "device-idle" }).add(rect));
    }
    for &(a, b, n) in &lane.busy {
        let (x, w) = scale.extent(a, b);
        let rect = Rectangle::new()
            .set("x", x)
            .set("y", y + 3.0)
            .set("width", w)
            .set("height", 15)
            .set("fill", palette::DEVICE_BUSY)
            .add(Title::new(format!(
                "GPU {} busy {} ({n} op{})",
                lane.device,
                fmt_ns(b - a),
                if n == 1 { "" } else { "s" }
            )));
        row = row.add(Group::new().set("class", "device-busy").add(rect));
    }
    row
}
