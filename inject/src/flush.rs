//! The one flush thread (`cw-gpu-flush`): every period (200 ms; `CAUSEWAY_GPU_FLUSH_MS`, 50 to
//! 5000) it calibrates CUPTI's clock against `CLOCK_MONOTONIC`, asks CUPTI for what it holds
//! (`cuptiActivityFlushAll(0)`: the records come back through the buffer callbacks), notes new
//! losses, and reads the tracer's control messages. It sleeps in `poll` on the socket and an
//! eventfd, so a control or the exit handler wakes it at once. At exit it does the forced flush
//! and says `stopped`; when the library is off it does the clean-up and ends.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use causeway_gpu_wire::{note, ClockPair, Control, Message};

use crate::cupti::{self, Cupti, FLUSH_FORCED};
use crate::state::{State, FORKED, ON, POOL};
use crate::{guard, mono_ns};

/// How often the thread flushes.
pub fn period() -> Duration {
    let ms = std::env::var("CAUSEWAY_GPU_FLUSH_MS").ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(200);
    Duration::from_millis(ms.clamp(50, 5000))
}

/// Starts the thread. Whatever ends it (off, exit, a panic), it marks the final handshake done, so
/// the exit handler never waits for a thread that is gone.
pub fn spawn(state: &'static State) -> std::io::Result<()> {
    state.flushing.store(true, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("cw-gpu-flush".into()).stack_size(256 * 1024).spawn(move || {
        // after the final flush the connection stays up: CUPTI's own teardown may still hand over
        // buffers, and the process is ending anyway
        if guard(|| run(state)) != Some(End::Exit) {
            if ON.load(Ordering::SeqCst) {
                state.off(Some("its flush thread ended unexpectedly".into()));
            }
            guard(|| state.clean_up());
        }
        state.flushing.store(false, Ordering::SeqCst);
        let mut fin = state.fin.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        fin.done = true;
        state.fin_cv.notify_all();
    });
    spawned.map(|_| ()).inspect_err(|_| state.flushing.store(false, Ordering::SeqCst))
}

/// Losses seen so far and not yet noted.
#[derive(Default)]
struct Losses {
    cupti_dropped: u64,
    refused_seen: u64,
}

/// Why the thread's loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The final flush at exit is done.
    Exit,
    /// The library is off (or this is a forked child).
    Off,
}

fn run(state: &'static State) -> End {
    block_signals();
    let period = period();
    let mut last_tick: Option<Instant> = None;
    let mut clock = ClockTrack::default();
    let mut losses = Losses::default();
    let mut buf = vec![0u8; causeway_gpu_wire::MAX_MESSAGE];
    let mut ticks = 0u64;
    loop {
        if FORKED.load(Ordering::SeqCst) || !ON.load(Ordering::SeqCst) {
            return End::Off; // the caller cleans up
        }
        let fin = state.fin.lock().unwrap_or_else(std::sync::PoisonError::into_inner).requested;
        let mut flush_now = false;
        while let Some(control) = state.link.recv_control(&mut buf) {
            match control {
                Control::StepAside { reason } => step_aside(state, reason),
                Control::Resume => resume(state),
                Control::FlushNow => flush_now = true,
                Control::OpenWindow { for_ms, reason } => {
                    if state.attached && state.open_window(for_ms, &reason) {
                        // a clock pair and the devices' records right away
                        flush_now = true;
                    }
                }
                Control::CloseWindow { reason } => {
                    state.close_window(&reason, || tick(state, &mut clock, &mut losses, true));
                }
            }
        }
        let until = state.window_until_ns.load(Ordering::SeqCst);
        if until != 0 && mono_ns() >= until {
            state.close_window("its time ran out", || tick(state, &mut clock, &mut losses, true));
        }
        if state.link.gone.load(Ordering::SeqCst) {
            state.off(None);
            return End::Off;
        }
        if !ON.load(Ordering::SeqCst) {
            return End::Off;
        }
        let due = last_tick.is_none_or(|t| t.elapsed() >= period);
        // dormant (attached, no window): no CUPTI call at all
        if (due || flush_now || fin) && state.recording() {
            tick(state, &mut clock, &mut losses, fin);
            ticks += 1;
            last_tick = Some(Instant::now());
        }
        if fin {
            // a burst the socket could not take yet goes out as the tracer reads it (bounded: the
            // exit handler waits 2 s in all)
            if !state.link.drain_pending(&mut state.outbox(), Duration::from_millis(1500)) {
                note_losses(state, &mut losses); // what could not wait longer is said
            }
            if !state.stepped_aside.load(Ordering::SeqCst) {
                state.restore_thread_id_type();
            }
            let sent = state.sent.load(Ordering::Relaxed);
            // its own cost, measured: the flush thread's CPU time (calibrations, flushes, and the
            // records CUPTI handed it to convert and send)
            let cpu_us = thread_cpu_ns() / 1000;
            let records_us = crate::PROCESS_CPU_NS.load(Ordering::Relaxed) / 1000;
            state.note(
                note::STOPPED,
                0,
                format!(
                    "the process is exiting: final flush done, {sent} records sent; reading and sending records used {records_us} us of CPU; the flush thread used {cpu_us} us of CPU over {ticks} flushes"
                ),
            );
            return End::Exit;
        }
        let mut left = last_tick.map_or(Duration::ZERO, |t| period.saturating_sub(t.elapsed()));
        if !state.recording() {
            left = Duration::from_secs(5); // a control or the exit handler wakes it
        } else if until != 0 {
            left = left.min(Duration::from_nanos(until.saturating_sub(mono_ns())));
        }
        wait(state, left);
    }
}

/// Sleeps until `left` passes, a control arrives, or the eventfd is written.
fn wait(state: &State, left: Duration) {
    let mut fds = [
        libc::pollfd { fd: state.link.fd(), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: state.wake, events: libc::POLLIN, revents: 0 },
    ];
    let n = if state.wake >= 0 { 2 } else { 1 };
    let ms = left.as_millis().clamp(1, 5000) as libc::c_int;
    // SAFETY: `fds` holds `n` live pollfds.
    unsafe { libc::poll(fds.as_mut_ptr(), n, ms) };
    if fds[1].revents & libc::POLLIN != 0 {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a live u64 (draining the eventfd).
        unsafe { libc::read(state.wake, (&mut v as *mut u64).cast(), 8) };
    }
}

/// One round: a clock pair, a flush, the losses noted.
fn tick(state: &State, clock: &mut ClockTrack, losses: &mut Losses, fin: bool) {
    // the clock is calibrated while stepped aside too (cuptiGetTimestamp disturbs no client): the
    // records delivered after a resume are mapped with pairs of their time
    if let Some(pair) = calibrate(&state.cupti) {
        if let Some(step) = clock.step(pair) {
            let apart = pair.mono_ns.saturating_sub(clock.prev.map_or(0, |p| p.mono_ns)) / 1_000_000;
            let detail = format!(
                "CUPTI's clock moved {step} ns against CLOCK_MONOTONIC between two calibrations {apart} ms apart"
            );
            state.note(note::CLOCK_STEP, 0, detail);
        }
        clock.set(pair);
        let mut out = state.outbox();
        state.link.send(&mut out, &Message::Clock(vec![pair]));
    }
    if !state.stepped_aside.load(Ordering::SeqCst) {
        if let Err(r) = state.cupti.flush_all(if fin { FLUSH_FORCED } else { 0 }) {
            if cupti::fatal_hint(r).is_some() {
                state.off(Some(state.refusal("a flush", r)));
                return;
            }
        }
        // read only while the records are ours: CUPTI resets the count when it is read
        if let Ok(n) = state.cupti.dropped() {
            losses.cupti_dropped += n;
        }
    }
    note_losses(state, losses);
}

/// A `dropped` or `zero_timestamps` note for what was lost since the last one; a note the socket
/// refuses keeps its count for the next round.
fn note_losses(state: &State, losses: &mut Losses) {
    let refused = POOL.refused.load(Ordering::Relaxed);
    let new_refused = refused - losses.refused_seen.min(refused);
    if losses.cupti_dropped > 0 || new_refused > 0 {
        let n = losses.cupti_dropped;
        let detail = format!(
            "{n} records CUPTI dropped: it had no buffer for them ({new_refused} requests found the pool of \
             {} buffers of {} KiB empty)",
            crate::pool::SLOTS,
            crate::pool::BUFFER_SIZE / 1024
        );
        if matches!(state.note(note::DROPPED, n, detail), crate::link::Sent::All) {
            losses.cupti_dropped = 0;
            losses.refused_seen = refused;
        }
    }
    let n = state.link.send_dropped.swap(0, Ordering::Relaxed);
    if n > 0 {
        let detail = format!("{n} records the tracer could not take in time (its socket was full)");
        if !matches!(state.note(note::DROPPED, n, detail), crate::link::Sent::All) {
            state.link.send_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }
    let n = state.zero_timestamps.swap(0, Ordering::Relaxed);
    if n > 0 {
        let detail = format!("{n} records CUPTI delivered without timestamps (start and end 0), not sent");
        if !matches!(state.note(note::ZERO_TIMESTAMPS, n, detail), crate::link::Sent::All) {
            state.zero_timestamps.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// Another CUPTI client took over: stop flushing (our callbacks are no longer CUPTI's).
fn step_aside(state: &State, reason: String) {
    if !state.stepped_aside.swap(true, Ordering::SeqCst) {
        let detail = format!("another CUPTI client took over the activity records: {reason}");
        state.note(note::STEPPED_ASIDE, 0, detail);
    }
}

/// The other client is done: our callbacks again, our kinds again.
fn resume(state: &State) {
    if !state.stepped_aside.load(Ordering::SeqCst) {
        return;
    }
    if !state.recording() {
        // dormant: nothing to take back until a window opens
        state.stepped_aside.store(false, Ordering::SeqCst);
        state.note(
            note::RESUMED,
            0,
            "the other CUPTI client is done (dormant: nothing to record until a window opens)".into(),
        );
        return;
    }
    match state.register_and_enable() {
        Ok(refused) => {
            state.stepped_aside.store(false, Ordering::SeqCst);
            let mut detail = "the other CUPTI client is done: recording again".to_string();
            if !refused.is_empty() {
                detail.push_str(&format!("; not recorded (CUPTI refused them): {}", refused.join(", ")));
            }
            state.note(note::RESUMED, 0, detail);
        }
        Err(reason) => {
            // still aside as far as CUPTI goes: the clean-up leaves the kinds (global in CUPTI's v1
            // API) to the other client
            state.off(Some(format!("could not resume: {reason}")));
        }
    }
}

/// The narrowest of 16 reads of `cuptiGetTimestamp` between two `CLOCK_MONOTONIC` reads.
fn calibrate(cupti: &Cupti) -> Option<ClockPair> {
    let mut best: Option<ClockPair> = None;
    for _ in 0..16 {
        let before = mono_ns();
        let c = cupti.timestamp().ok()?;
        let after = mono_ns();
        let width = after.saturating_sub(before);
        let pair = ClockPair { cupti_ns: c, mono_ns: before + width / 2, half_width_ns: width.div_ceil(2) };
        if best.is_none_or(|b| pair.half_width_ns < b.half_width_ns) {
            best = Some(pair);
        }
    }
    best
}

/// The last calibration, to see a step in CUPTI's clock.
#[derive(Default)]
struct ClockTrack {
    prev: Option<ClockPair>,
}

impl ClockTrack {
    /// How far `pair`'s offset (CUPTI minus monotonic) moved from the previous pair's, when that is
    /// more than 1 ms beyond what drift (500 ppm of the time between them) and both pairs' error
    /// explain.
    fn step(&self, pair: ClockPair) -> Option<i128> {
        let prev = self.prev?;
        let offset = |p: ClockPair| p.cupti_ns as i128 - p.mono_ns as i128;
        let moved = offset(pair) - offset(prev);
        let elapsed = (pair.mono_ns as i128 - prev.mono_ns as i128).abs();
        let allowed = 1_000_000 + elapsed / 2000 + prev.half_width_ns as i128 + pair.half_width_ns as i128;
        (moved.abs() > allowed).then_some(moved)
    }

    fn set(&mut self, pair: ClockPair) {
        self.prev = Some(pair);
    }
}

/// The flush thread takes no signal of the application's (they go to its own threads), and no
/// real-time priority it may have inherited from the thread that called `cuInit`.
fn block_signals() {
    // SAFETY: a full set built in a local, applied to this thread only; the scheduling calls
    // concern this thread only (0: the caller).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let policy = libc::sched_getscheduler(0);
        if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
        }
    }
}

/// The calling thread's CPU time, ns (0 when the clock cannot be read).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into a live one.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cupti_ns: u64, mono_ns: u64) -> ClockPair {
        ClockPair { cupti_ns, mono_ns, half_width_ns: 50 }
    }

    #[test]
    fn a_clock_step_is_more_than_1_ms_beyond_drift() {
        let mut t = ClockTrack::default();
        assert_eq!(t.step(pair(1_000_000_000, 10)), None, "no previous pair");
        t.set(pair(1_000_000_000, 10));
        // 200 ms later, 50 us of drift: no step
        assert_eq!(t.step(pair(1_200_050_000, 200_000_010)), None);
        // 200 ms later, CUPTI 3 ms ahead: a step
        assert_eq!(t.step(pair(1_203_000_000, 200_000_010)), Some(3_000_000));
        assert_eq!(t.step(pair(1_197_000_000, 200_000_010)), Some(-3_000_000));
        // an hour later, 1.5 ms apart: drift explains it
        assert_eq!(t.step(pair(1_000_000_000 + 3_600_000_000_000 + 1_500_000, 3_600_000_000_010)), None);
    }
}
