//! Per-thread accounting of SQLite's heap, so one query's memory budget counts its own allocations.
//!
//! SQLite's own counter (`sqlite3_memory_used`) is process-wide: a query stopped "after it used more
//! than 256 MiB" may have been innocent while a concurrent query (or the trace writer) grew the heap.
//! [`install`] wraps SQLite's default allocator, before SQLite initializes, with one that adds each
//! allocation's size to the allocating thread's counter and takes each free's size off the freeing
//! thread's; a query (one connection, stepped on one thread) measures its growth as the difference of
//! [`thread_bytes`] since it began. The sizes are the allocator's own (`xSize`), so nothing is
//! estimated.
//!
//! SQLite accepts a new allocator only before its first connection: every SQLite open in this crate
//! goes through [`open`], which calls [`install`] first. If something else in the process opened SQLite earlier, [`install`]
//! reports `false` and callers fall back to the process-wide counter.

use std::cell::Cell;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

/// SQLite's default allocator, which ours forwards every call to.
struct DefaultMethods(ffi::sqlite3_mem_methods);

// SAFETY: the methods are plain function pointers and an opaque `pAppData` that SQLite's default
// allocator never dereferences from Rust; SQLite calls them from any thread by design.
unsafe impl Send for DefaultMethods {}
unsafe impl Sync for DefaultMethods {}

static DEFAULT: OnceLock<DefaultMethods> = OnceLock::new();
static INSTALLED: OnceLock<bool> = OnceLock::new();

thread_local! {
    /// Bytes SQLite allocated on this thread minus bytes freed on it (may be negative).
    static THREAD_BYTES: Cell<i64> = const { Cell::new(0) };
}

/// Installs the per-thread accounting allocator if SQLite has not initialized yet; `true` when it is
/// in place (now or from an earlier call).
pub fn install() -> bool {
    *INSTALLED.get_or_init(|| {
        let mut default: ffi::sqlite3_mem_methods = unsafe { std::mem::zeroed() };
        // SAFETY: GETMALLOC copies the current methods into a struct of the documented layout.
        if unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETMALLOC, &mut default as *mut ffi::sqlite3_mem_methods) }
            != ffi::SQLITE_OK
            || default.xMalloc.is_none()
        {
            return false;
        }
        if DEFAULT.set(DefaultMethods(default)).is_err() {
            return false;
        }
        let ours = ffi::sqlite3_mem_methods {
            xMalloc: Some(counted_malloc),
            xFree: Some(counted_free),
            xRealloc: Some(counted_realloc),
            xSize: Some(forward_size),
            xRoundup: Some(forward_roundup),
            xInit: Some(forward_init),
            xShutdown: Some(forward_shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: SQLite copies the struct; it is refused (SQLITE_MISUSE) once SQLite has initialized.
        let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &ours as *const ffi::sqlite3_mem_methods) };
        rc == ffi::SQLITE_OK
    })
}

/// Every SQLite connection of this crate opens here: the accounting allocator goes in first
/// ([`install`]), then `Connection::open_with_flags`.
pub(crate) fn open(
    path: impl AsRef<std::path::Path>,
    flags: rusqlite::OpenFlags,
) -> rusqlite::Result<rusqlite::Connection> {
    install();
    rusqlite::Connection::open_with_flags(path, flags)
}

/// Whether [`thread_bytes`] counts (the accounting allocator is installed).
pub fn per_thread() -> bool {
    INSTALLED.get().copied().unwrap_or(false)
}

/// Bytes SQLite allocated minus freed on the calling thread since it started.
pub fn thread_bytes() -> i64 {
    THREAD_BYTES.try_with(Cell::get).unwrap_or(0)
}

fn add(bytes: i64) {
    // `try_with`: an allocation during the thread's teardown is simply not counted.
    let _ = THREAD_BYTES.try_with(|c| c.set(c.get() + bytes));
}

fn default_methods() -> &'static ffi::sqlite3_mem_methods {
    // Set before our methods were handed to SQLite, so SQLite never calls them without it.
    &DEFAULT.get().expect("SQLite's default allocator is recorded before ours is installed").0
}

// SAFETY (all below): SQLite calls these with the contract of `sqlite3_mem_methods`, and each
// forwards to the default allocator's method of the same name with the same arguments.

unsafe fn size_of(m: &ffi::sqlite3_mem_methods, p: *mut c_void) -> i64 {
    i64::from(unsafe { (m.xSize.expect("xSize"))(p) })
}

unsafe extern "C" fn counted_malloc(n: c_int) -> *mut c_void {
    let m = default_methods();
    let p = unsafe { (m.xMalloc.expect("xMalloc"))(n) };
    if !p.is_null() {
        add(unsafe { size_of(m, p) });
    }
    p
}

unsafe extern "C" fn counted_free(p: *mut c_void) {
    let m = default_methods();
    if !p.is_null() {
        add(-unsafe { size_of(m, p) });
    }
    unsafe { (m.xFree.expect("xFree"))(p) }
}

unsafe extern "C" fn counted_realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    let m = default_methods();
    let before = if p.is_null() { 0 } else { unsafe { size_of(m, p) } };
    let q = unsafe { (m.xRealloc.expect("xRealloc"))(p, n) };
    if !q.is_null() {
        add(unsafe { size_of(m, q) } - before);
    }
    q
}

unsafe extern "C" fn forward_size(p: *mut c_void) -> c_int {
    unsafe { (default_methods().xSize.expect("xSize"))(p) }
}

unsafe extern "C" fn forward_roundup(n: c_int) -> c_int {
    unsafe { (default_methods().xRoundup.expect("xRoundup"))(n) }
}

unsafe extern "C" fn forward_init(_: *mut c_void) -> c_int {
    let m = default_methods();
    unsafe { (m.xInit.expect("xInit"))(m.pAppData) }
}

unsafe extern "C" fn forward_shutdown(_: *mut c_void) {
    let m = default_methods();
    unsafe { (m.xShutdown.expect("xShutdown"))(m.pAppData) }
}
