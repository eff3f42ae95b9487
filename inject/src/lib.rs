//! `libcauseway_inject.so`: the CUDA injection library that gives Causeway the GPU's own timeline.
//!
//! The CUDA driver, at `cuInit`, `dlopen`s the file named by `CUDA_INJECTION64_PATH` and calls its
//! `InitializeInjection`. `causeway trace --gpu-timeline` sets that variable to this library and
//! `CAUSEWAY_GPU_SOCKET` to its listening unix `SOCK_SEQPACKET` socket. The library then records,
//! through CUPTI's Activity API (v1), every kernel, copy, memset and synchronization, the driver and
//! runtime API records (correlation id and Linux tid: the link from device work to the thread and
//! call that launched it) and the devices, and ships them to the tracer while the job runs, in the
//! messages of `causeway-gpu-wire`.
//!
//! It runs inside someone else's training job, so nothing escapes it: every entry point (here)
//! catches panics, no application thread ever waits on it (buffers come from a lock-free pool;
//! sends never block), its memory is bounded (the pool's 8 MiB and one outbox), and any error turns
//! it off with a note saying why while the application goes on unharmed. It never calls
//! `cuptiSubscribe` nor registers a timestamp callback (those break PyTorch's profiler).
//!
//! Modules: `cupti` (finding and calling libcupti), `records` (reading activity records), `pool`
//! (the buffers), `link` (the socket), `state` (the life of the library), `flush` (its thread).
#![allow(non_snake_case)]

mod cupti;
mod flush;
mod link;
mod pool;
mod records;
mod state;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use causeway_gpu_wire::note;
use state::{FORKED, ON, POOL};

/// `InitializeInjection` ran (it does its work once).
static INITIALIZED: AtomicBool = AtomicBool::new(false);
/// The last panic's message, for the `off` note.
static PANIC: Mutex<Option<String>> = Mutex::new(None);
/// How long the exit handler waits for the final flush.
const FINAL_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Called by the CUDA driver inside `cuInit`. Always 1 (success): whatever happens, the driver goes
/// on, and so does the application.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> i32 {
    guard(|| {
        if INITIALIZED.swap(true, Ordering::SeqCst) {
            return;
        }
        std::panic::set_hook(Box::new(|info| {
            if let Ok(mut g) = PANIC.try_lock() {
                *g = Some(causeway_gpu_wire::truncate_str(&info.to_string(), 1000).to_string());
            }
        }));
        state::initialize(std::env::var_os("CAUSEWAY_GPU_SOCKET"), false);
        if state::current().is_some() {
            register_handlers();
        }
    });
    1
}

/// The exit and fork handlers, once per process, and this library pinned (they run its code).
fn register_handlers() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if REGISTERED.swap(true, Ordering::SeqCst) {
        return;
    }
    pin_self();
    // SAFETY: registering handlers that are plain `extern "C"` functions of this library, which
    // `pin_self` keeps loaded until the process ends.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_child));
    }
}

/// [`causeway_attach`]: a thread started to connect (the tracer hears from it).
pub const ATTACH_STARTED: i32 = 0;
/// [`causeway_attach`]: the library is already recording for a live tracer (loaded at `cuInit`, or
/// attached by a tracer that is still connected).
pub const ATTACH_BUSY: i32 = 1;
/// [`causeway_attach`]: no socket path given.
pub const ATTACH_BAD_ARGUMENT: i32 = -1;
/// [`causeway_attach`]: the thread could not be started.
pub const ATTACH_NO_THREAD: i32 = -2;
/// [`causeway_attach`]: a panic (caught).
pub const ATTACH_PANIC: i32 = -3;

/// Called by `causeway trace --pid P --gpu-timeline`, through ptrace, on the main thread of a
/// running process it stopped, right after loading this library there with `dlopen`. It only
/// copies the socket path and starts a thread that connects and loads CUPTI (the thread the
/// tracer holds is released at once); that thread leaves the library dormant until the tracer
/// opens a window. Returns one of the `ATTACH_` codes.
///
/// # Safety
/// `socket` is NULL or a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn causeway_attach(socket: *const std::ffi::c_char) -> i32 {
    if socket.is_null() {
        return ATTACH_BAD_ARGUMENT;
    }
    // SAFETY: the caller's contract: a NUL-terminated path.
    let path = unsafe { std::ffi::CStr::from_ptr(socket) };
    let path: std::ffi::OsString =
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path.to_bytes()).to_os_string();
    guard(|| {
        if path.is_empty() {
            return ATTACH_BAD_ARGUMENT;
        }
        static ATTACHING: AtomicBool = AtomicBool::new(false);
        let live = ON.load(Ordering::SeqCst) && state::current().is_some_and(|s| !s.link.gone.load(Ordering::SeqCst));
        if live || ATTACHING.swap(true, Ordering::SeqCst) {
            return ATTACH_BUSY;
        }
        let started =
            std::thread::Builder::new().name("cw-gpu-attach".into()).stack_size(256 * 1024).spawn(move || {
                guard(|| {
                    // a previous state (an earlier attach whose tracer left) is off; its thread is gone
                    state::initialize(Some(path), true);
                    if state::current().is_some() {
                        register_handlers();
                    }
                });
                ATTACHING.store(false, Ordering::SeqCst);
            });
        if started.is_ok() {
            ATTACH_STARTED
        } else {
            ATTACHING.store(false, Ordering::SeqCst);
            ATTACH_NO_THREAD
        }
    })
    .unwrap_or(ATTACH_PANIC)
}

/// Runs `f`, catching a panic: the library turns off with a note naming it.
pub(crate) fn guard<R>(f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(payload) => {
            let why = PANIC.try_lock().ok().and_then(|mut g| g.take()).unwrap_or_else(|| "a panic".into());
            // a payload whose drop panics would escape: forget it instead (a few bytes)
            std::mem::forget(payload);
            match state::current() {
                Some(s) => s.off(Some(format!("internal error: {why}"))),
                None => ON.store(false, Ordering::SeqCst),
            }
            None
        }
    }
}

/// CUPTI asks for a buffer (on any thread, often an application's): one from the pool, or NULL
/// (CUPTI then drops the records; they show in its dropped count).
pub(crate) extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let p = guard(|| {
        if ON.load(Ordering::Relaxed) && !FORKED.load(Ordering::Relaxed) {
            POOL.take()
        } else {
            std::ptr::null_mut()
        }
    })
    .unwrap_or(std::ptr::null_mut());
    // SAFETY: CUPTI passes three writable out-parameters (checked for NULL all the same).
    unsafe {
        if !buffer.is_null() {
            *buffer = p;
        }
        if !size.is_null() {
            *size = if p.is_null() { 0 } else { pool::BUFFER_SIZE };
        }
        if !max_records.is_null() {
            *max_records = 0; // as many as fit
        }
    }
}

/// CPU time spent turning CUPTI's buffers into messages and sending them, on whatever thread CUPTI
/// handed them back (said in the `stopped` note).
pub(crate) static PROCESS_CPU_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// CUPTI hands a buffer back with `valid` bytes of records: read, send, and return it to the pool.
pub(crate) extern "C" fn buffer_completed(
    _context: *mut std::ffi::c_void,
    _stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    // another client's buffer (CUPTI hands every buffer to the callbacks registered last): not
    // ours to read or to keep
    if !POOL.owns(buffer) {
        return;
    }
    guard(|| {
        if !ON.load(Ordering::Relaxed) || FORKED.load(Ordering::Relaxed) {
            return;
        }
        if let Some(s) = state::current() {
            let cpu = flush::thread_cpu_ns();
            // SAFETY: CUPTI completed `buffer` with `valid` bytes of records; it is ours until it
            // goes back to the pool below.
            unsafe { s.process(buffer, valid) };
            // the library's own cost, measured where it is paid: reading, converting, sending
            PROCESS_CPU_NS.fetch_add(flush::thread_cpu_ns().saturating_sub(cpu), Ordering::Relaxed);
        }
    });
    POOL.give_back(buffer);
}

/// At exit: the flush thread does a forced flush and says `stopped`; waited for 2 s at most, then
/// given up (the exit never hangs on us).
extern "C" fn at_exit() {
    guard(|| {
        if FORKED.load(Ordering::SeqCst) {
            return;
        }
        let Some(s) = state::current() else { return };
        if !s.flushing.load(Ordering::SeqCst) {
            return;
        }
        s.fin.lock().unwrap_or_else(std::sync::PoisonError::into_inner).requested = true;
        s.wake();
        let fin = s.fin.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (fin, _) = s
            .fin_cv
            .wait_timeout_while(fin, FINAL_FLUSH_WAIT, |f| !f.done)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !fin.done && ON.load(Ordering::SeqCst) {
            drop(fin);
            s.try_note(
                note::STOPPED,
                "the process is exiting: the final flush did not finish within 2 s, records since the \
                 last flush are lost",
            );
        }
    });
}

/// In a forked child the flush thread is gone and the connection is the parent's: off, silently.
extern "C" fn in_child() {
    guard(|| {
        FORKED.store(true, Ordering::SeqCst);
        ON.store(false, Ordering::SeqCst);
        if let Some(s) = state::current() {
            s.link.close_unshared();
        }
    });
}

/// Keeps this library loaded until the process ends (`RTLD_NODELETE`): its thread and exit
/// handler run its code.
fn pin_self() {
    // SAFETY: dladdr only reads the loader's tables for an address of this library.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = InitializeInjection as *const std::ffi::c_void;
    // SAFETY: `info` is a live Dl_info; `addr` is a function of this library.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: the path the loader gave, NUL-terminated; NOLOAD: only the already loaded library.
    unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
}

/// `CLOCK_MONOTONIC` now, ns (eBPF's clock).
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
