//! The library's state and its life: started in `InitializeInjection` ([`initialize`]) or by an
//! attach to a running process (`causeway_attach`, then [`initialize`] with `attached`), fed by
//! CUPTI's buffer callbacks ([`State::process`]), turned off by any error ([`State::off`], then
//! [`State::clean_up`] on the flush thread). Off is final for that state: a library that is off
//! only hands buffers back and returns, until a later attach installs a new state ([`current`]).
//!
//! An attached library is dormant (nothing registered with CUPTI, nothing enabled) except while a
//! window is open ([`State::open_window`], [`State::close_window`]): the tracer opens one with a
//! control, for a bounded time.
//!
//! Locks: `out` (the outbox: the encoder and the lists being filled) is held while one buffer's
//! records are converted and sent, never across a CUPTI call; the flush thread takes it briefly for
//! its clock pairs and notes. CUPTI calls that change its state (disable, restore the thread id
//! type) are made only by `InitializeInjection` or the flush thread, never from a callback.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use causeway_gpu_wire::{note, Hello, Message, WireNote};

use crate::cupti::{self, Cupti, THREAD_ID_TYPE_SYSTEM};
use crate::link::{Link, Outbox, Sent};
use crate::pool::Pool;
use crate::records::{self, kind, read_c_name, Record};
use crate::{flush, mono_ns};

/// Whether the library is on: recording and sending.
pub static ON: AtomicBool = AtomicBool::new(false);
/// Set in a forked child: everything of ours there is dead.
pub static FORKED: AtomicBool = AtomicBool::new(false);
/// The buffers lent to CUPTI.
pub static POOL: Pool = Pool::new();
/// The state in use, once `InitializeInjection` or an attach connected. An attach replaces a state
/// that is off; the old one is leaked, never freed (a callback of its time may still read it: one
/// state per attach, a few hundred bytes).
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());

/// The state in use.
pub fn current() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: non-null pointers stored here come from `Box::leak` in `install` and live forever.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Makes `state` the one in use (leaked: it lives until the process ends).
fn install(state: State) -> &'static State {
    let s: &'static State = Box::leak(Box::new(state));
    STATE.store(std::ptr::from_ref(s).cast_mut(), Ordering::Release);
    s
}

/// The activity kinds recorded, in the order they are enabled (the kernels first: without them
/// the library turns off).
pub const KINDS: [(u32, &str); 7] = [
    (kind::CONCURRENT_KERNEL, "CONCURRENT_KERNEL"),
    (kind::MEMCPY, "MEMCPY"),
    (kind::MEMSET, "MEMSET"),
    (kind::SYNCHRONIZATION, "SYNCHRONIZATION"),
    (kind::DRIVER, "DRIVER"),
    (kind::RUNTIME, "RUNTIME"),
    (kind::DEVICE, "DEVICE"),
];

/// The device buffer CUPTI keeps per context for kernel, copy and memset timestamps (CUPTI's
/// default is 3.2 MB; 1 MiB holds about 30,000 records between two flushes, and CUPTI adds buffers
/// when it needs more).
const DEVICE_BUFFER_SIZE: usize = 1 << 20;
/// Ops gathered from a buffer before they are sent (bounds the outbox).
const OPS_PER_SEND: usize = 512;
/// API records gathered before they are sent (one message of 33 KiB).
const APIS_PER_SEND: usize = 1024;

/// The final flush's handshake between the exit handler and the flush thread.
#[derive(Default)]
pub struct Fin {
    /// The exit handler asked for the final flush.
    pub requested: bool,
    /// The flush thread is done (it did the final flush, or it ended).
    pub done: bool,
}

/// Everything the library holds.
pub struct State {
    /// The CUPTI in use.
    pub cupti: Cupti,
    /// The socket.
    pub link: Link,
    out: Mutex<Outbox>,
    /// `CUPTI 13.5 (libcupti.so.13)`, for notes.
    pub label: String,
    /// Bit `k` set: activity kind `k` is enabled by us.
    enabled: AtomicU64,
    prev_thread_id_type: Option<u32>,
    /// Another CUPTI client holds the records (a `StepAside` control): no flushing, no CUPTI calls.
    pub stepped_aside: AtomicBool,
    /// Records without timestamps, not yet noted.
    pub zero_timestamps: AtomicU64,
    /// Ops and API records sent.
    pub sent: AtomicU64,
    off_reason: Mutex<Option<String>>,
    cleaned: AtomicBool,
    /// An eventfd that wakes the flush thread.
    pub wake: RawFd,
    /// The final flush's handshake.
    pub fin: Mutex<Fin>,
    /// Signalled when `fin` changes.
    pub fin_cv: Condvar,
    /// The flush thread runs.
    pub flushing: AtomicBool,
    /// Loaded into a running process by an attach: dormant between windows.
    pub attached: bool,
    /// While a window is open, when it closes (`CLOCK_MONOTONIC` ns); 0: no window open.
    pub window_until_ns: AtomicU64,
}

/// `InitializeInjection`'s work (the tracer's socket from `CAUSEWAY_GPU_SOCKET`) or an attach's
/// (`attached`, the socket it named): connect, find CUPTI, then register, enable and start the
/// flush thread, or (attached) only start the flush thread, dormant until a window opens. Without
/// a socket it stays off and quiet (nobody to tell); every later failure turns it off with a note
/// saying why.
pub fn initialize(socket: Option<std::ffi::OsString>, attached: bool) {
    let Some(path) = socket else { return };
    let Ok(link) = Link::connect(&path) else { return };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut out = Link::outbox(pid);
    let library_version = env!("CARGO_PKG_VERSION").to_string();
    let cupti = match cupti::load() {
        Ok(c) => c,
        Err(why) => {
            let hello = Hello {
                cupti_version: 0,
                driver_version: cupti::driver_version(),
                cupti_path: String::new(),
                library_version,
                thread_id_type: 0,
            };
            link.send(&mut out, &Message::Hello(hello));
            link.send(&mut out, &note_msg(note::OFF, 0, why));
            link.shut_down();
            link.close_unshared(); // no other thread has seen it
            return;
        }
    };
    let cupti_version = cupti.version().unwrap_or(0);
    let prev_thread_id_type = cupti.thread_id_type();
    let thread_id_type = match cupti.set_thread_id_type(THREAD_ID_TYPE_SYSTEM) {
        Ok(()) => THREAD_ID_TYPE_SYSTEM,
        Err(_) => prev_thread_id_type.unwrap_or(0),
    };
    let file = cupti.path.rsplit('/').next().unwrap_or("").to_string();
    let hello = Hello {
        cupti_version,
        driver_version: cupti::driver_version(),
        cupti_path: cupti.path.clone(),
        library_version,
        thread_id_type,
    };
    link.send(&mut out, &Message::Hello(hello));
    // SAFETY: plain eventfd creation; -1 on failure, which only slows the exit handler's wake-up.
    let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    let state = State {
        label: format!("{} ({file})", cupti::version_label(cupti_version)),
        cupti,
        link,
        out: Mutex::new(out),
        enabled: AtomicU64::new(0),
        prev_thread_id_type,
        stepped_aside: AtomicBool::new(false),
        zero_timestamps: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        off_reason: Mutex::new(None),
        cleaned: AtomicBool::new(false),
        wake,
        fin: Mutex::new(Fin::default()),
        fin_cv: Condvar::new(),
        flushing: AtomicBool::new(false),
        attached,
        window_until_ns: AtomicU64::new(0),
    };
    let s = install(state);
    ON.store(true, Ordering::SeqCst);
    match s.start() {
        Ok(detail) => {
            s.note(if attached { note::DORMANT } else { note::STARTED }, 0, detail);
        }
        Err(reason) => {
            s.off(Some(reason));
            if !s.flushing.load(Ordering::SeqCst) {
                s.clean_up();
            }
        }
    }
}

impl State {
    /// Registers the callbacks, enables the kinds, starts the flush thread; the `started` note's
    /// detail, or why the library must turn off.
    fn start(&'static self) -> Result<String, String> {
        // small device buffers, before any context exists; CUPTI's default stays if it refuses
        let _ = self.cupti.set_size_attribute(cupti::ATTR_DEVICE_BUFFER_SIZE, DEVICE_BUFFER_SIZE);
        if self.attached {
            flush::spawn(self).map_err(|e| format!("could not start its flush thread: {e}"))?;
            return Ok(format!(
                "{} at {}: loaded into the running process, dormant (nothing registered or enabled in \
                 CUPTI) until a window opens",
                self.label, self.cupti.path
            ));
        }
        let refused = self.register_and_enable()?;
        flush::spawn(self).map_err(|e| format!("could not start its flush thread: {e}"))?;
        let mut detail = format!(
            "{} at {}: recording kernels, copies, memsets, synchronizations, driver and runtime calls, \
             devices; flushing every {} ms",
            self.label,
            self.cupti.path,
            flush::period().as_millis()
        );
        if !refused.is_empty() {
            detail.push_str(&format!("; not recorded (CUPTI refused them): {}", refused.join(", ")));
        }
        Ok(detail)
    }

    /// Registers our buffer callbacks and enables every kind: the kinds CUPTI refused (a note's
    /// words), or why the library must turn off (the kernels refused, or CUPTI unusable).
    pub fn register_and_enable(&self) -> Result<Vec<String>, String> {
        self.cupti
            .register_callbacks(crate::buffer_requested, crate::buffer_completed)
            .map_err(|r| self.refusal("its buffer callbacks", r))?;
        let mut refused = Vec::new();
        for (k, name) in KINDS {
            // a late start (an attach) still learns the devices that exist already
            let enabled = if k == kind::DEVICE { self.cupti.enable_and_dump(k) } else { self.cupti.enable(k) };
            match enabled {
                Ok(()) => {
                    self.enabled.fetch_or(1 << k, Ordering::SeqCst);
                }
                Err(r) if k == kind::CONCURRENT_KERNEL || cupti::fatal_hint(r).is_some() => {
                    return Err(self.refusal(name, r));
                }
                Err(r) => refused.push(format!("{name} ({})", self.cupti.result_name(r))),
            }
        }
        Ok(refused)
    }

    /// `CUPTI 13.5 (libcupti.so.13) refused CONCURRENT_KERNEL: CUPTI_ERROR_NOT_INITIALIZED (a
    /// CUPTI newer than the driver?)`.
    pub fn refusal(&self, what: &str, r: cupti::CuptiResult) -> String {
        let hint = cupti::fatal_hint(r).map(|h| format!(" ({h})")).unwrap_or_default();
        format!("{} refused {what}: {}{hint}", self.label, self.cupti.result_name(r))
    }

    /// The outbox, whatever a panic left in it.
    pub fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.out.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a note now (the socket permitting).
    pub fn note(&self, kind: &str, count: u64, detail: String) -> Sent {
        let msg = note_msg(kind, count, detail);
        let mut out = self.outbox();
        self.link.send(&mut out, &msg)
    }

    /// Sends a note unless the outbox is busy (the exit handler, which must not wait on a thread
    /// that may be stuck).
    pub fn try_note(&self, kind: &str, detail: &str) {
        let msg = note_msg(kind, 0, detail.to_string());
        let mut out = match self.out.try_lock() {
            Ok(out) => out,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        self.link.send(&mut out, &msg);
    }

    /// Turns the library off: records nothing more from now. `reason` (for a note) is `None` when
    /// nobody listens any more. The clean-up (the note, disabling our kinds) is the flush thread's.
    pub fn off(&self, reason: Option<String>) {
        if let Some(r) = reason {
            let mut g = self.off_reason.lock().unwrap_or_else(PoisonError::into_inner);
            if g.is_none() && ON.load(Ordering::SeqCst) {
                *g = Some(r);
            }
        }
        if ON.swap(false, Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Wakes the flush thread.
    pub fn wake(&self) {
        if self.wake >= 0 {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            unsafe { libc::write(self.wake, (&one as *const u64).cast(), 8) };
        }
    }

    /// After [`State::off`]: sends the reason, disables our kinds, restores the thread id type
    /// (CUPTI left alone while another client holds it), ends the connection. Once.
    pub fn clean_up(&self) {
        if self.cleaned.swap(true, Ordering::SeqCst) || FORKED.load(Ordering::SeqCst) {
            return;
        }
        let reason = self.off_reason.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(reason) = reason {
            self.note(note::OFF, 0, reason);
        }
        if !self.stepped_aside.load(Ordering::SeqCst) {
            self.disable_ours();
            self.restore_thread_id_type();
        }
        self.link.shut_down();
    }

    /// Disables every kind we enabled.
    fn disable_ours(&self) {
        let enabled = self.enabled.swap(0, Ordering::SeqCst);
        for (k, _) in KINDS {
            if enabled & (1 << k) != 0 {
                let _ = self.cupti.disable(k);
            }
        }
    }

    /// Whether records are wanted now: always for a library the driver loaded at `cuInit`; for an
    /// attached one, while a window is open.
    pub fn recording(&self) -> bool {
        !self.attached || self.window_until_ns.load(Ordering::SeqCst) != 0
    }

    /// Opens (or extends) a window of `for_ms` from now: our callbacks and kinds in CUPTI, a
    /// `window_opened` note. False when CUPTI refused (the library turns off with the reason).
    pub fn open_window(&self, for_ms: u64, reason: &str) -> bool {
        let until = mono_ns().saturating_add(for_ms.saturating_mul(1_000_000)).max(1);
        let was = self.window_until_ns.swap(until, Ordering::SeqCst);
        if was != 0 {
            self.note(
                note::WINDOW_OPENED,
                for_ms,
                format!("the open window was extended to {for_ms} ms from now: {reason}"),
            );
            return true;
        }
        if self.stepped_aside.load(Ordering::SeqCst) {
            // another client holds the records: the window is counted, the records are its
            self.note(note::WINDOW_OPENED, for_ms, format!("window of {for_ms} ms opened while another CUPTI client holds the records (nothing recorded until it is done): {reason}"));
            return true;
        }
        match self.register_and_enable() {
            Ok(refused) => {
                let mut detail = format!("window of {for_ms} ms opened: {reason}");
                if !refused.is_empty() {
                    detail.push_str(&format!("; not recorded (CUPTI refused them): {}", refused.join(", ")));
                }
                self.note(note::WINDOW_OPENED, for_ms, detail);
                true
            }
            Err(why) => {
                self.window_until_ns.store(0, Ordering::SeqCst);
                self.off(Some(format!("could not open a window: {why}")));
                false
            }
        }
    }

    /// Closes the open window: what CUPTI holds is flushed (by `flush`, the flush thread's forced
    /// flush), our kinds disabled, a `window_closed` note; dormant from here.
    pub fn close_window(&self, reason: &str, flush: impl FnOnce()) {
        if self.window_until_ns.swap(0, Ordering::SeqCst) == 0 {
            return;
        }
        if !self.stepped_aside.load(Ordering::SeqCst) {
            flush();
            self.disable_ours();
            // records of work that ended between the flush and the disable
            let _ = self.cupti.flush_all(cupti::FLUSH_FORCED);
        }
        self.note(note::WINDOW_CLOSED, 0, format!("window closed ({reason}): dormant until the next window"));
    }

    /// Puts back the thread id type found at the start.
    pub fn restore_thread_id_type(&self) {
        if let Some(t) = self.prev_thread_id_type.filter(|&t| t != THREAD_ID_TYPE_SYSTEM) {
            let _ = self.cupti.set_thread_id_type(t);
        }
    }

    /// One completed buffer: every record read, converted and sent, in messages of at most 60 KiB.
    ///
    /// # Safety
    /// `buffer` holds `valid` bytes of records CUPTI completed, and stays ours during the call.
    pub unsafe fn process(&self, buffer: *mut u8, valid: usize) {
        let mut out = self.outbox();
        let begin = buffer as usize;
        let Some(end) = begin.checked_add(valid) else { return };
        let mut rec: *mut u8 = std::ptr::null_mut();
        let mut zero = 0;
        while ON.load(Ordering::Relaxed) {
            // SAFETY: the caller's contract; `rec` is NULL or the last record CUPTI gave.
            if unsafe { self.cupti.next_record(buffer, valid, &mut rec) } != cupti::SUCCESS {
                break; // CUPTI_ERROR_MAX_LIMIT_REACHED: the end; any other error ends this buffer too
            }
            let at = rec as usize;
            if at < begin || at >= end {
                break;
            }
            // SAFETY: [rec, end) lies inside the buffer's valid bytes (checked just above).
            let bytes = unsafe { std::slice::from_raw_parts(rec as *const u8, end - at) };
            match records::parse(bytes) {
                Record::Op { mut op, name_ptr } => {
                    // SAFETY: a kernel record's name pointer, NULL or CUPTI's NUL-terminated name.
                    op.name = unsafe { read_c_name(name_ptr) };
                    out.ops.push(op);
                }
                Record::Api(a) => out.apis.push(a),
                Record::Device { mut device, name_ptr } => {
                    // SAFETY: a device record's name pointer, NULL or CUPTI's NUL-terminated name.
                    device.name = unsafe { read_c_name(name_ptr) };
                    out.devices.push(device);
                }
                Record::ZeroTimestamps => zero += 1,
                Record::Other => {}
            }
            if out.ops.len() >= OPS_PER_SEND || out.apis.len() >= APIS_PER_SEND {
                self.send_gathered(&mut out);
            }
        }
        self.send_gathered(&mut out);
        if zero > 0 {
            self.zero_timestamps.fetch_add(zero, Ordering::Relaxed);
        }
    }

    fn send_gathered(&self, out: &mut Outbox) {
        let n = (out.ops.len() + out.apis.len()) as u64;
        match self.link.send_gathered(out) {
            Sent::All => {
                self.sent.fetch_add(n, Ordering::Relaxed);
            }
            Sent::Partly(dropped) => {
                self.sent.fetch_add(n.saturating_sub(dropped), Ordering::Relaxed);
            }
            Sent::Gone => self.off(None),
            Sent::Failed(e) => {
                let e = std::io::Error::from_raw_os_error(e);
                self.off(Some(format!("sending to the tracer failed: {e}")));
            }
        }
    }
}

/// A note message stamped now.
pub fn note_msg(kind: &str, count: u64, detail: String) -> Message {
    Message::Note(WireNote { mono_ns: mono_ns(), kind: kind.to_string(), count, detail })
}
