//! CUPTI, resolved at run time with `dlopen`/`dlsym`: never linked, never vendored (NVIDIA's
//! licence), and no header: the few types, codes and signatures used are declared here.
//!
//! Which libcupti: one already mapped in the process (found with `dl_iterate_phdr`, opened
//! `RTLD_NOLOAD`: whoever loaded it chose the one that matches), else `CAUSEWAY_CUPTI_PATH`, else
//! the one of the mapped libcudart's major version (`libcudart.so.12` -> `libcupti.so.12`): the pip
//! wheels' layout (`.../nvidia/cuda_runtime/lib/` -> `.../nvidia/cuda_cupti/lib/`; CUDA 13's
//! `.../nvidia/cu13/lib/` holds both), the runtime's own directory, the toolkit's
//! `extras/CUPTI/lib64`, then the loader's search (`dlopen("libcupti.so.N")`).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

/// `CUptiResult`.
pub type CuptiResult = c_int;
/// `CUPTI_SUCCESS`.
pub const SUCCESS: CuptiResult = 0;
/// `CUPTI_ERROR_NOT_COMPATIBLE`.
pub const ERROR_NOT_COMPATIBLE: CuptiResult = 14;
/// `CUPTI_ERROR_NOT_INITIALIZED`.
pub const ERROR_NOT_INITIALIZED: CuptiResult = 15;
/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another CUPTI client is there.
pub const ERROR_MULTIPLE_SUBSCRIBERS: CuptiResult = 39;
/// `CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM`: threadId is the Linux tid.
pub const THREAD_ID_TYPE_SYSTEM: u32 = 1;
/// `CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE`.
pub const ATTR_DEVICE_BUFFER_SIZE: c_int = 0;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
pub const FLUSH_FORCED: u32 = 1;

/// `CUpti_BuffersCallbackRequestFunc`.
pub type BufferRequested = extern "C" fn(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize);
/// `CUpti_BuffersCallbackCompleteFunc`.
pub type BufferCompleted =
    extern "C" fn(context: *mut c_void, stream_id: u32, buffer: *mut u8, size: usize, valid_size: usize);

// The C signatures of the functions used (cupti_activity.h, cupti_result.h, cupti_version.h).
type FnU32Out = unsafe extern "C" fn(*mut u32) -> CuptiResult;
type FnU64Out = unsafe extern "C" fn(*mut u64) -> CuptiResult;
type FnKind = unsafe extern "C" fn(u32) -> CuptiResult;
type FnRegister = unsafe extern "C" fn(BufferRequested, BufferCompleted) -> CuptiResult;
type FnNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> CuptiResult;
type FnDropped = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> CuptiResult;
type FnResultString = unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult;
type FnSetAttribute = unsafe extern "C" fn(c_int, *mut usize, *mut c_void) -> CuptiResult;

/// The CUPTI functions used, from one libcupti. Required ones are plain pointers; the rest may be
/// missing from an old or odd libcupti.
pub struct Cupti {
    /// The file it was opened from.
    pub path: String,
    get_version: FnU32Out,
    register_callbacks: FnRegister,
    enable: FnKind,
    disable: FnKind,
    flush_all: FnKind,
    get_next_record: FnNextRecord,
    get_timestamp: FnU64Out,
    get_num_dropped: Option<FnDropped>,
    set_thread_id_type: Option<FnKind>,
    get_thread_id_type: Option<FnU32Out>,
    get_result_string: Option<FnResultString>,
    set_attribute: Option<FnSetAttribute>,
    /// `cuptiActivityEnableAndDump` (CUPTI 11.7+): enables a kind and writes the records of what
    /// already exists (devices, contexts, streams), for a library that starts late.
    enable_and_dump: Option<FnKind>,
}

/// Which libcupti to use and what happened looking for it.
pub fn load() -> Result<Cupti, String> {
    let mut looked = Vec::new();
    let handle = find(&mut looked).ok_or_else(|| format!("no libcupti found (looked at: {})", looked.join(", ")))?;
    let (handle, path) = handle;
    // SAFETY: a handle dlopen returned, never closed.
    unsafe { resolve(handle, path) }
}

/// The library handle and its path, or `None` with every place tried in `looked`.
fn find(looked: &mut Vec<String>) -> Option<(*mut c_void, String)> {
    let mapped = mapped_objects();
    if let Some(p) = mapped.iter().find(|p| basename(p).starts_with("libcupti.so")) {
        looked.push(format!("{p} (mapped)"));
        if let Some(h) = open(p, libc::RTLD_NOW | libc::RTLD_NOLOAD) {
            return Some((h, p.clone()));
        }
    }
    if let Some(p) = std::env::var_os("CAUSEWAY_CUPTI_PATH") {
        let p = p.to_string_lossy().into_owned();
        looked.push(format!("{p} (CAUSEWAY_CUPTI_PATH)"));
        if let Some(h) = open(&p, libc::RTLD_NOW) {
            return Some((h, p));
        }
    }
    let cudart = mapped.iter().find_map(|p| Some((p, cudart_major(basename(p))?)));
    let majors: Vec<u32> = match cudart {
        Some((_, major)) => vec![major],
        None => {
            looked.push("(no libcudart.so.N mapped)".into());
            let driver = driver_version();
            if driver >= 1000 {
                vec![driver as u32 / 1000]
            } else {
                vec![12, 13]
            }
        }
    };
    for major in majors {
        let file = format!("libcupti.so.{major}");
        if let Some((rt, _)) = cudart {
            for dir in candidate_dirs(Path::new(rt.as_str())) {
                let p = dir.join(&file).to_string_lossy().into_owned();
                looked.push(p.clone());
                if Path::new(&p).exists() {
                    if let Some(h) = open(&p, libc::RTLD_NOW) {
                        return Some((h, p));
                    }
                }
            }
        }
        looked.push(file.clone());
        if let Some(h) = open(&file, libc::RTLD_NOW) {
            return Some((h, loaded_path(h).unwrap_or(file)));
        }
    }
    None
}

/// Where a runtime at `cudart` keeps its CUPTI, most specific first.
pub fn candidate_dirs(cudart: &Path) -> Vec<std::path::PathBuf> {
    let Some(dir) = cudart.parent() else { return Vec::new() };
    let mut dirs = Vec::new();
    // pip wheels, CUDA 12: .../nvidia/cuda_runtime/lib -> .../nvidia/cuda_cupti/lib
    if dir.ends_with("cuda_runtime/lib") {
        if let Some(nvidia) = dir.parent().and_then(Path::parent) {
            dirs.push(nvidia.join("cuda_cupti/lib"));
        }
    }
    // its own directory (CUDA 13's wheel: .../nvidia/cu13/lib holds both)
    dirs.push(dir.to_path_buf());
    // the toolkit: .../cuda/lib64 (or targets/<arch>/lib) -> .../cuda/extras/CUPTI/lib64
    if let Some(up) = dir.parent() {
        dirs.push(up.join("extras/CUPTI/lib64"));
    }
    dirs
}

/// The major version in a runtime's file name (`libcudart.so.12.8.90` -> 12).
pub fn cudart_major(name: &str) -> Option<u32> {
    name.strip_prefix("libcudart.so.")?.split('.').next()?.parse().ok()
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn open(path: &str, flags: c_int) -> Option<*mut c_void> {
    let c = CString::new(path).ok()?;
    // SAFETY: a NUL-terminated path; dlopen has no other precondition.
    let h = unsafe { libc::dlopen(c.as_ptr(), flags) };
    (!h.is_null()).then_some(h)
}

/// The file a handle was loaded from (`dlinfo` `RTLD_DI_LINKMAP`).
fn loaded_path(h: *mut c_void) -> Option<String> {
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: `h` is a live handle; RTLD_DI_LINKMAP writes one `struct link_map*` into `map`.
    let r = unsafe { libc::dlinfo(h, libc::RTLD_DI_LINKMAP, (&mut map as *mut *mut c_void).cast()) };
    if r != 0 || map.is_null() {
        return None;
    }
    // SAFETY: `struct link_map` begins with `l_addr` (an address) then `l_name` (a C string the
    // loader keeps as long as the object is loaded).
    let name = unsafe { *(map as *const *const c_char).add(1) };
    if name.is_null() {
        return None;
    }
    // SAFETY: `l_name` is NUL-terminated.
    Some(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
}

/// The paths of every object mapped in the process (`dl_iterate_phdr`).
pub fn mapped_objects() -> Vec<String> {
    extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `data` is the `Vec<String>` passed below, `info` the loader's entry for one
            // object, valid during this call.
            unsafe {
                let names = &mut *(data as *mut Vec<String>);
                let name = (*info).dlpi_name;
                if !name.is_null() {
                    let s = CStr::from_ptr(name).to_string_lossy();
                    if !s.is_empty() {
                        names.push(s.into_owned());
                    }
                }
            }
        }));
        0
    }
    let mut names: Vec<String> = Vec::new();
    // SAFETY: the callback only reads what the loader hands it and writes to `names`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut names as *mut Vec<String>).cast()) };
    names
}

/// `cuDriverGetVersion` of the loaded driver (12080 for 12.8); 0 when there is none.
pub fn driver_version() -> i32 {
    let Some(h) = open("libcuda.so.1", libc::RTLD_NOW | libc::RTLD_NOLOAD) else { return 0 };
    // SAFETY: a live handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(h, c"cuDriverGetVersion".as_ptr()) };
    if f.is_null() {
        return 0;
    }
    // SAFETY: `cuDriverGetVersion(int*)` returns CUresult; its address from dlsym.
    let f = unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_int) -> c_int>(f) };
    let mut v = 0;
    // SAFETY: writes one int.
    if unsafe { f(&mut v) } == 0 {
        v
    } else {
        0
    }
}

/// Looks up every function in `handle`.
///
/// # Safety
/// `handle` is a live `dlopen` handle that is never closed.
unsafe fn resolve(handle: *mut c_void, path: String) -> Result<Cupti, String> {
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
            if p.is_null() {
                None
            } else {
                // SAFETY: the symbol is the CUPTI function of that name, whose C signature `$ty`
                // declares (cupti_activity.h, cupti_result.h).
                Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
            }
        }};
    }
    macro_rules! required {
        ($name:literal, $ty:ty) => {
            sym!($name, $ty)
                .ok_or_else(|| format!("{path} has no {} (not a CUPTI with the Activity API v1?)", $name))?
        };
    }
    Ok(Cupti {
        get_version: required!("cuptiGetVersion", FnU32Out),
        register_callbacks: required!("cuptiActivityRegisterCallbacks", FnRegister),
        enable: required!("cuptiActivityEnable", FnKind),
        disable: required!("cuptiActivityDisable", FnKind),
        flush_all: required!("cuptiActivityFlushAll", FnKind),
        get_next_record: required!("cuptiActivityGetNextRecord", FnNextRecord),
        get_timestamp: required!("cuptiGetTimestamp", FnU64Out),
        get_num_dropped: sym!("cuptiActivityGetNumDroppedRecords", FnDropped),
        set_thread_id_type: sym!("cuptiSetThreadIdType", FnKind),
        get_thread_id_type: sym!("cuptiGetThreadIdType", FnU32Out),
        get_result_string: sym!("cuptiGetResultString", FnResultString),
        set_attribute: sym!("cuptiActivitySetAttribute", FnSetAttribute),
        enable_and_dump: sym!("cuptiActivityEnableAndDump", FnKind),
        path,
    })
}

/// How a CUPTI version reads in a note: `CUPTI 13.5` (CUDA 13 numbers its API major x 10000 +
/// minor x 100), `CUPTI API 28` (CUDA 12's API versions count up from 1).
pub fn version_label(v: u32) -> String {
    if v >= 10_000 {
        format!("CUPTI {}.{}", v / 10_000, v % 10_000 / 100)
    } else {
        format!("CUPTI API {v}")
    }
}

/// A result as `Err(code)` unless it is success.
fn check(r: CuptiResult) -> Result<(), CuptiResult> {
    if r == SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

// SAFETY (every method below): each pointer came from `resolve` for the signature CUPTI's headers
// give it, and every pointer argument passed points to a live local of the right type.
impl Cupti {
    /// `cuptiGetVersion`.
    pub fn version(&self) -> Result<u32, CuptiResult> {
        let mut v = 0;
        // SAFETY: see the impl's comment.
        check(unsafe { (self.get_version)(&mut v) }).map(|_| v)
    }

    /// `cuptiActivityRegisterCallbacks`.
    pub fn register_callbacks(&self, req: BufferRequested, done: BufferCompleted) -> Result<(), CuptiResult> {
        // SAFETY: see the impl's comment; the callbacks are `extern "C"` and live forever.
        check(unsafe { (self.register_callbacks)(req, done) })
    }

    /// `cuptiActivityEnable`.
    pub fn enable(&self, kind: u32) -> Result<(), CuptiResult> {
        // SAFETY: see the impl's comment.
        check(unsafe { (self.enable)(kind) })
    }

    /// `cuptiActivityEnableAndDump` where this CUPTI has it (the records of what already exists
    /// come too: a late start still names its devices), else `cuptiActivityEnable`.
    pub fn enable_and_dump(&self, kind: u32) -> Result<(), CuptiResult> {
        match self.enable_and_dump {
            // SAFETY: see the impl's comment.
            Some(f) => check(unsafe { f(kind) }),
            None => self.enable(kind),
        }
    }

    /// `cuptiActivityDisable`.
    pub fn disable(&self, kind: u32) -> Result<(), CuptiResult> {
        // SAFETY: see the impl's comment.
        check(unsafe { (self.disable)(kind) })
    }

    /// `cuptiActivityFlushAll`.
    pub fn flush_all(&self, flag: u32) -> Result<(), CuptiResult> {
        // SAFETY: see the impl's comment.
        check(unsafe { (self.flush_all)(flag) })
    }

    /// `cuptiActivityGetNextRecord`: the next record after `*record` (NULL: the first), in the
    /// `valid` bytes of `buffer`.
    ///
    /// # Safety
    /// `buffer` holds `valid` bytes of records CUPTI completed; `*record` is NULL or the last record
    /// this returned for it.
    pub unsafe fn next_record(&self, buffer: *mut u8, valid: usize, record: &mut *mut u8) -> CuptiResult {
        // SAFETY: the caller's contract.
        unsafe { (self.get_next_record)(buffer, valid, record) }
    }

    /// `cuptiGetTimestamp`.
    pub fn timestamp(&self) -> Result<u64, CuptiResult> {
        let mut t = 0;
        // SAFETY: see the impl's comment.
        check(unsafe { (self.get_timestamp)(&mut t) }).map(|_| t)
    }

    /// `cuptiActivityGetNumDroppedRecords(NULL, 0, ..)` (CUPTI resets the count when read); 0
    /// without the function.
    pub fn dropped(&self) -> Result<u64, CuptiResult> {
        let Some(f) = self.get_num_dropped else { return Ok(0) };
        let mut n = 0usize;
        // SAFETY: see the impl's comment; NULL context and stream 0 are the documented "all".
        check(unsafe { f(std::ptr::null_mut(), 0, &mut n) }).map(|_| n as u64)
    }

    /// `cuptiGetThreadIdType`.
    pub fn thread_id_type(&self) -> Option<u32> {
        let f = self.get_thread_id_type?;
        let mut t = 0u32;
        // SAFETY: see the impl's comment (the enum is a C int).
        (unsafe { f(&mut t) } == SUCCESS).then_some(t)
    }

    /// `cuptiSetThreadIdType`.
    pub fn set_thread_id_type(&self, t: u32) -> Result<(), CuptiResult> {
        let Some(f) = self.set_thread_id_type else { return Err(-1) };
        // SAFETY: see the impl's comment.
        check(unsafe { f(t) })
    }

    /// `cuptiActivitySetAttribute` of a `size_t` attribute.
    pub fn set_size_attribute(&self, attr: c_int, value: usize) -> Result<(), CuptiResult> {
        let Some(f) = self.set_attribute else { return Err(-1) };
        let mut size = std::mem::size_of::<usize>();
        let mut v = value;
        // SAFETY: see the impl's comment; the value is a `size_t` and its size says so.
        check(unsafe { f(attr, &mut size, (&mut v as *mut usize).cast()) })
    }

    /// A result's name (`cuptiGetResultString`, else the names known here).
    pub fn result_name(&self, r: CuptiResult) -> String {
        if let Some(f) = self.get_result_string {
            let mut s: *const c_char = std::ptr::null();
            // SAFETY: see the impl's comment; CUPTI returns a static string.
            if unsafe { f(r, &mut s) } == SUCCESS && !s.is_null() {
                // SAFETY: a NUL-terminated static string of CUPTI's.
                let name = unsafe { CStr::from_ptr(s) }.to_string_lossy();
                return causeway_gpu_wire::truncate_str(&name, 200).to_string();
            }
        }
        result_name(r)
    }
}

/// The name of the results this library acts on, else the number.
pub fn result_name(r: CuptiResult) -> String {
    match r {
        -1 => "the function is missing from this libcupti".into(),
        0 => "CUPTI_SUCCESS".into(),
        1 => "CUPTI_ERROR_INVALID_PARAMETER".into(),
        7 => "CUPTI_ERROR_INVALID_OPERATION".into(),
        11 => "CUPTI_ERROR_API_NOT_IMPLEMENTED".into(),
        ERROR_NOT_COMPATIBLE => "CUPTI_ERROR_NOT_COMPATIBLE".into(),
        ERROR_NOT_INITIALIZED => "CUPTI_ERROR_NOT_INITIALIZED".into(),
        21 => "CUPTI_ERROR_INVALID_KIND".into(),
        27 => "CUPTI_ERROR_NOT_SUPPORTED".into(),
        35 => "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES".into(),
        ERROR_MULTIPLE_SUBSCRIBERS => "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED".into(),
        r => format!("CUPTI error {r}"),
    }
}

/// Why a result stops the library, in words; `None` when it does not (on its own).
pub fn fatal_hint(r: CuptiResult) -> Option<&'static str> {
    match r {
        ERROR_NOT_INITIALIZED => Some("a CUPTI newer than the driver?"),
        ERROR_NOT_COMPATIBLE => {
            Some("its v1 Activity API is not usable here: a CUPTI that serves only the v2 API, or another profiler?")
        }
        ERROR_MULTIPLE_SUBSCRIBERS => Some("another CUPTI client (a profiler) holds CUPTI"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_names_its_cupti() {
        assert_eq!(cudart_major("libcudart.so.12"), Some(12));
        assert_eq!(cudart_major("libcudart.so.13.0.48"), Some(13));
        assert_eq!(cudart_major("libcudart.so"), None);
        assert_eq!(cudart_major("libcudart_static.a"), None);
        let dirs = |p: &str| -> Vec<String> {
            candidate_dirs(Path::new(p)).into_iter().map(|d| d.to_string_lossy().into_owned()).collect()
        };
        assert_eq!(
            dirs("/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"),
            [
                "/venv/lib/python3.12/site-packages/nvidia/cuda_cupti/lib",
                "/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/lib",
                "/venv/lib/python3.12/site-packages/nvidia/cuda_runtime/extras/CUPTI/lib64",
            ]
        );
        assert_eq!(
            dirs("/venv/site-packages/nvidia/cu13/lib/libcudart.so.13")[0],
            "/venv/site-packages/nvidia/cu13/lib"
        );
        assert_eq!(dirs("/usr/local/cuda/lib64/libcudart.so.12")[1], "/usr/local/cuda/extras/CUPTI/lib64");
    }

    #[test]
    fn the_process_maps_objects_and_errors_have_names() {
        // a test binary maps libc at least
        assert!(mapped_objects().iter().any(|p| basename(p).starts_with("libc.so")), "{:?}", mapped_objects());
        assert_eq!(version_label(130500), "CUPTI 13.5");
        assert_eq!(version_label(28), "CUPTI API 28");
        assert_eq!(result_name(ERROR_NOT_INITIALIZED), "CUPTI_ERROR_NOT_INITIALIZED");
        assert!(fatal_hint(ERROR_MULTIPLE_SUBSCRIBERS).is_some());
        assert!(fatal_hint(27).is_none());
    }
}
