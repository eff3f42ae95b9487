//! Durations and time points as people type them (`30s`, `1.5ms`, `8760h`) and as people read
//! them (`48.20 ms`), plus the time window every query is scoped by.

/// A closed time window `[from_ns, to_ns]` on the trace's clock; `None` means unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct TimeWindow {
    /// First instant in the window, unix ns (`None`: from the trace's start).
    pub from_ns: Option<i64>,
    /// Last instant in the window, unix ns (`None`: to the trace's end).
    pub to_ns: Option<i64>,
}

impl TimeWindow {
    /// The whole trace.
    pub const ALL: TimeWindow = TimeWindow { from_ns: None, to_ns: None };

    /// Whether `ts` lies in the window (both ends included).
    pub fn contains(&self, ts: i64) -> bool {
        self.from_ns.is_none_or(|f| ts >= f) && self.to_ns.is_none_or(|t| ts <= t)
    }

    /// Whether the window is unbounded on both sides.
    pub fn is_all(&self) -> bool {
        self.from_ns.is_none() && self.to_ns.is_none()
    }
}

/// Parse a duration such as `30s`, `1.5ms`, `250us`, `10m`, `8760h`, `2d`, or a bare number of
/// seconds. Returns nanoseconds.
pub fn parse_duration_ns(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("'{text}' is not a duration (try 30s, 500ms, 10m, 8760h)"))?;
    let scale: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "" | "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        other => return Err(format!("unknown unit '{other}' in '{text}' (use ns, us, ms, s, m, h, d)")),
    };
    let ns = value * scale;
    if !ns.is_finite() || ns > i64::MAX as f64 {
        return Err(format!("duration '{text}' is too large"));
    }
    Ok(ns.round() as i64)
}

/// A time point on the command line: unix-epoch nanoseconds (`1774015573210657601`), or an offset
/// from the trace's first event (`+5s`) or last event (`-5s`).
pub fn parse_time_point(text: &str, first_ns: i64, last_ns: i64) -> Result<i64, String> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix('+') {
        return Ok(first_ns.saturating_add(parse_duration_ns(rest)?));
    }
    if let Some(rest) = t.strip_prefix('-') {
        return Ok(last_ns.saturating_sub(parse_duration_ns(rest)?));
    }
    t.parse::<i64>().map_err(|_| {
        format!("'{text}' is not a time: give unix-epoch ns, +DUR from the first event or -DUR from the last")
    })
}

/// Format nanoseconds for people: `812 ns`, `48.20 us`, `41.03 ms`, `3.104 s`.
pub fn fmt_ns(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if a < 1e3 {
        format!("{sign}{a:.0} ns")
    } else if a < 1e6 {
        format!("{sign}{:.2} us", a / 1e3)
    } else if a < 1e9 {
        format!("{sign}{:.2} ms", a / 1e6)
    } else {
        format!("{sign}{:.3} s", a / 1e9)
    }
}

/// A time point relative to `origin` (a trace's first event), in seconds: `+12.345 s`.
pub fn fmt_since(ts: i64, origin: i64) -> String {
    format!("+{:.3} s", (ts - origin) as f64 / 1e9)
}

/// Unix-epoch ns as UTC `2026-03-20 14:06:13.210`.
pub fn fmt_utc(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let ms = ns.rem_euclid(1_000_000_000) / 1_000_000;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{ms:03}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Nanoseconds to microseconds, exact to 0.001 (a stored ns value has at most 3 decimals in us).
pub fn ns_to_us(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

/// Round a microsecond figure to 0.001 us.
pub fn round_us(us: f64) -> f64 {
    (us * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_points_print_relative_to_their_origin() {
        assert_eq!(fmt_since(1_012_345_678_901, 1_000_000_000_000), "+12.346 s");
        assert_eq!(fmt_since(5, 5), "+0.000 s");
    }

    #[test]
    fn durations_parse_in_every_unit() {
        assert_eq!(parse_duration_ns("30s"), Ok(30_000_000_000));
        assert_eq!(parse_duration_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration_ns("250us"), Ok(250_000));
        assert_eq!(parse_duration_ns("8760h"), Ok(8760 * 3_600_000_000_000));
        assert_eq!(parse_duration_ns("2"), Ok(2_000_000_000));
        assert!(parse_duration_ns("ten seconds").is_err());
        assert!(parse_duration_ns("5 fortnights").is_err());
        assert!(parse_duration_ns("1e400h").is_err());
    }

    #[test]
    fn time_points_are_relative_to_the_trace() {
        assert_eq!(parse_time_point("+2s", 100, 10_000_000_000), Ok(2_000_000_100));
        assert_eq!(parse_time_point("-1s", 0, 10_000_000_000), Ok(9_000_000_000));
        assert_eq!(parse_time_point("42", 0, 0), Ok(42));
        assert!(parse_time_point("yesterday", 0, 0).is_err());
    }

    #[test]
    fn human_durations() {
        assert_eq!(fmt_ns(812), "812 ns");
        assert_eq!(fmt_ns(48_200), "48.20 us");
        assert_eq!(fmt_ns(41_030_000), "41.03 ms");
        assert_eq!(fmt_ns(3_103_797_000), "3.104 s");
        assert_eq!(fmt_utc(1_774_015_573_210_657_601), "2026-03-20 14:06:13.210");
        assert_eq!(fmt_utc(0), "1970-01-01 00:00:00.000");
    }
}
