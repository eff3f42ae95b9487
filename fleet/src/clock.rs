//! Clocks: what a shipper measures at each flush, so the fleet can put every node's timestamps
//! on one time line **in views**, never by rewriting stored rows.
//!
//! - [`sample_catalog`]: NTP-style round trips (`SELECT clock_timestamp()`) to the catalog server,
//!   bracketed by this host's `CLOCK_REALTIME` (the clock trace timestamps are in). The offset is
//!   `server - (send + recv) / 2` of the sample with the smallest round trip, and its bound half
//!   that round trip (plus the server's microsecond resolution).
//! - [`kernel_state`]: the kernel's own clock discipline (`adjtimex`: synchronised or not, the
//!   estimated and maximum error chrony/PTP maintain) and a fresh `CLOCK_MONOTONIC` to
//!   `CLOCK_REALTIME` offset, so a clock step during a trace shows instead of skewing it silently.
//!
//! Causeway does not synchronise clocks; chrony or PTP do. It measures and records.

use duckdb::Connection;

use crate::lake::CATALOG_DB;
use crate::FleetError;

/// Round trips per flush.
pub const SAMPLES_PER_FLUSH: usize = 5;

/// Test hook: nanoseconds added to this host's clock readings, to plant a clock offset in tests
/// of many simulated nodes on one machine (whose clocks agree). The same offset must be planted in
/// the node's trace timestamps. Never set in production.
pub const TEST_SKEW_ENV: &str = "CAUSEWAY_FLEET_TEST_CLOCK_SKEW_NS";

/// One round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub local_send_ns: i64,
    pub server_ns: i64,
    pub local_recv_ns: i64,
}

impl ClockSample {
    /// The server's clock minus ours at the middle of the round trip.
    pub fn offset_ns(&self) -> i64 {
        self.server_ns - (self.local_send_ns + self.local_recv_ns) / 2
    }
    /// The round trip.
    pub fn rtt_ns(&self) -> i64 {
        self.local_recv_ns - self.local_send_ns
    }
}

/// The skew [`TEST_SKEW_ENV`] plants (0 when unset).
pub fn test_skew_ns() -> i64 {
    std::env::var(TEST_SKEW_ENV).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// `clock_gettime(id)` in ns.
fn clock_ns(id: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// This host's `CLOCK_REALTIME` as trace timestamps see it, plus a planted skew (tests; else 0).
pub fn realtime_ns(skew_ns: i64) -> i64 {
    clock_ns(libc::CLOCK_REALTIME) + skew_ns
}

/// [`SAMPLES_PER_FLUSH`] round trips to the catalog server through the lake's connection.
pub fn sample_catalog(conn: &Connection, skew_ns: i64) -> Result<Vec<ClockSample>, FleetError> {
    // microseconds since the epoch, exactly (PostgreSQL's clock resolution; `extract` is numeric)
    let sql = format!(
        "SELECT us FROM postgres_query('{CATALOG_DB}', \
         'SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us')"
    );
    let mut st = conn.prepare(&sql)?;
    let mut out = Vec::with_capacity(SAMPLES_PER_FLUSH);
    for _ in 0..SAMPLES_PER_FLUSH {
        let send = realtime_ns(skew_ns);
        let us: i64 = st.query_row([], |r| r.get(0))?;
        let recv = realtime_ns(skew_ns);
        out.push(ClockSample { local_send_ns: send, server_ns: us * 1000, local_recv_ns: recv });
    }
    Ok(out)
}

/// The kernel's clock discipline now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelClock {
    /// `adjtimex` status bits (`STA_UNSYNC` = 0x40 set: not synchronised).
    pub status: i64,
    /// Estimated error, µs.
    pub esterror_us: i64,
    /// Maximum error, µs.
    pub maxerror_us: i64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, ns (the tightest of three brackets).
    pub mono_to_realtime_ns: i64,
}

/// Read [`KernelClock`] (no privilege needed: mode 0 only reads).
pub fn kernel_state(skew_ns: i64) -> KernelClock {
    // SAFETY: zeroed is a valid `timex` (plain integers); modes = 0 asks adjtimex to read only.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, writable timex.
    let rc = unsafe { libc::adjtimex(&mut tx) };
    let (status, esterror_us, maxerror_us) =
        if rc < 0 { (-1, -1, -1) } else { (tx.status as i64, tx.esterror as i64, tx.maxerror as i64) };
    let mut best = (i64::MAX, 0);
    for _ in 0..3 {
        let a = clock_ns(libc::CLOCK_MONOTONIC);
        let r = clock_ns(libc::CLOCK_REALTIME);
        let b = clock_ns(libc::CLOCK_MONOTONIC);
        if b - a < best.0 {
            best = (b - a, r - (a + b) / 2);
        }
    }
    KernelClock { status, esterror_us, maxerror_us, mono_to_realtime_ns: best.1 + skew_ns }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_is_server_minus_the_midpoint() {
        let s = ClockSample { local_send_ns: 1_000, server_ns: 5_300, local_recv_ns: 1_400 };
        assert_eq!(s.offset_ns(), 5_300 - 1_200);
        assert_eq!(s.rtt_ns(), 400);
    }

    #[test]
    fn the_kernel_clock_reads() {
        let k = kernel_state(0);
        assert!(k.mono_to_realtime_ns > 1_000_000_000 * 1_000_000_000 / 1_000_000, "{k:?}");
        assert!(k.status >= 0, "adjtimex(0) failed: {k:?}");
    }
}
