//! CUPTI activity: subscription, buffers, and decoding records into spool records.
//!
//! Record kinds are read as raw `u32` and fields through `offset_of!` on cudarc's CUDA 13.0
//! structs, never by forming a reference to a struct that holds an enum: an unknown enum value
//! would be undefined behaviour. Newer CUPTI versions only append fields to these records.

use std::alloc::{alloc, dealloc, Layout};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::Mutex;

use cudarc::cupti::sys::{self, CUptiResult, CUpti_ActivityKind as K};

use crate::spool::{flush_reason, tag, Enc};
use crate::{capture as mode, now_ns, tracer, wake_writer, Tracer, CAPTURE_MODE, CAPTURING};

/// CUPTI activity buffer size: 8 MB, or FUSEPROF_CUPTI_BUFFER_MB (a diagnostic).
fn buffer_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("FUSEPROF_CUPTI_BUFFER_MB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&mb| (1..=256).contains(&mb))
            .unwrap_or(8)
            << 20
    })
}
const BUFFER_ALIGN: usize = 8;
/// The record layouts below are CUDA 13.0's (cuptiGetVersion 130000 and up).
const MIN_VERSION: u32 = 130000;
const MAX_VERSION_EXCL: u32 = 140000;

static ACTIVE: AtomicBool = AtomicBool::new(false);
static SUBSCRIBER: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
pub static VERSION: AtomicU32 = AtomicU32::new(0);

/// The kinds recorded while capturing (all of them unless FUSEPROF_CUPTI_KINDS narrows it).
const RECORDED: [K; 7] = [
    K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    K::CUPTI_ACTIVITY_KIND_MEMCPY,
    K::CUPTI_ACTIVITY_KIND_MEMSET,
    K::CUPTI_ACTIVITY_KIND_RUNTIME,
    K::CUPTI_ACTIVITY_KIND_DRIVER,
    K::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    K::CUPTI_ACTIVITY_KIND_OVERHEAD,
];

/// The names FUSEPROF_CUPTI_KINDS accepts, in RECORDED's order.
const KIND_NAMES: [&str; 7] = [
    "kernel", "memcpy", "memset", "runtime", "driver", "sync", "overhead",
];

/// The kinds to record: FUSEPROF_CUPTI_KINDS (a comma list of KIND_NAMES, or "none") measures
/// what each kind costs, and "none" is how `fuseprof bench -- CMD` times a program by its NVTX
/// step ranges alone; unset means all of them.
fn recorded_kinds() -> &'static [K] {
    static KINDS: std::sync::OnceLock<Vec<K>> = std::sync::OnceLock::new();
    KINDS.get_or_init(|| match std::env::var("FUSEPROF_CUPTI_KINDS") {
        Ok(list) => {
            let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
            RECORDED
                .iter()
                .zip(KIND_NAMES)
                .filter(|(_, n)| wanted.contains(n))
                .map(|(k, _)| *k)
                .collect()
        }
        Err(_) => RECORDED.to_vec(),
    })
}

pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

const RAW_MEMCPY: u32 = 1;
const RAW_MEMSET: u32 = 2;
const RAW_KERNEL: u32 = 3;
const RAW_DRIVER: u32 = 4;
const RAW_RUNTIME: u32 = 5;
const RAW_DEVICE: u32 = 8;
const RAW_CONTEXT: u32 = 9;
const RAW_CONCURRENT_KERNEL: u32 = 10;
const RAW_OVERHEAD: u32 = 17;
const RAW_SYNCHRONIZATION: u32 = 38;

const CB_DOMAIN_DRIVER: u32 = 1;
const CB_DOMAIN_RUNTIME: u32 = 2;
const CBID_RT_PROFILER_START: u32 = 171;
const CBID_RT_PROFILER_STOP: u32 = 172;
const CBID_DRV_PROFILER_START: u32 = 308;
const CBID_DRV_PROFILER_STOP: u32 = 309;
const CB_DOMAIN_RESOURCE: u32 = 3;
const CBID_RESOURCE_CONTEXT_CREATED: u32 = 1;

fn status(t: &'static Tracer, level: u8, message: &str) {
    t.record(|e| {
        let at = e.begin(tag::STATUS);
        e.u8(level);
        e.str(message);
        e.end(at);
    });
}

fn result_text(r: CUptiResult) -> String {
    let mut s: *const c_char = std::ptr::null();
    // SAFETY: valid out pointer; CUPTI returns a static string.
    unsafe {
        if sys::cuptiGetResultString(r, &mut s) == CUptiResult::CUPTI_SUCCESS && !s.is_null() {
            return CStr::from_ptr(s).to_string_lossy().into_owned();
        }
    }
    format!("{r:?}")
}

/// Starts CUPTI activity recording for this process. Runs inside `cuInit`.
pub fn start(t: &'static Tracer) {
    if ACTIVE.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: only tries to dlopen the library.
    let present = std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        status(
            t,
            2,
            "libcupti was not found on the library path, so no CUDA activity is recorded in \
             this process (set LD_LIBRARY_PATH to the folder holding libcupti.so)",
        );
        return;
    }
    let mut version = 0u32;
    // SAFETY: valid out pointer.
    let r = unsafe { sys::cuptiGetVersion(&mut version) };
    if r != CUptiResult::CUPTI_SUCCESS || !(MIN_VERSION..MAX_VERSION_EXCL).contains(&version) {
        status(
            t,
            2,
            &format!(
                "CUPTI API version {version} is not one this tracer decodes (CUDA 13.x, \
                 {MIN_VERSION} to {}); no CUDA activity is recorded",
                MAX_VERSION_EXCL - 1
            ),
        );
        return;
    }
    VERSION.store(version, Ordering::Relaxed);

    let mut sub: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: the callback has CUPTI's C signature, with the domain read as a plain u32.
    let r = unsafe {
        let cb: sys::CUpti_CallbackFunc = std::mem::transmute(
            api_callback as unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void),
        );
        sys::cuptiSubscribe(&mut sub, cb, std::ptr::null_mut())
    };
    if r != CUptiResult::CUPTI_SUCCESS {
        let why = if r == CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
            "another CUPTI client (the PyTorch profiler, Nsight Systems, ...) already holds \
             the CUPTI subscription"
                .to_string()
        } else {
            format!("cuptiSubscribe failed: {}", result_text(r))
        };
        status(
            t,
            2,
            &format!("{why}; fuseprof stops tracing CUDA in this process"),
        );
        return;
    }
    SUBSCRIBER.store(sub as *mut c_void, Ordering::Release);
    if crate::pmsampling::arm(t) {
        // Contexts created from now on are where counters can be sampled.
        // SAFETY: sub is the handle cuptiSubscribe returned.
        unsafe {
            sys::cuptiEnableCallback(
                1,
                sub,
                sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE,
                CBID_RESOURCE_CONTEXT_CREATED,
            )
        };
    }
    for (domain, cbid) in [
        (
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
            CBID_RT_PROFILER_START,
        ),
        (
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
            CBID_RT_PROFILER_STOP,
        ),
        (
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
            CBID_DRV_PROFILER_START,
        ),
        (
            sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
            CBID_DRV_PROFILER_STOP,
        ),
    ] {
        // SAFETY: sub is the handle cuptiSubscribe returned.
        unsafe { sys::cuptiEnableCallback(1, sub, domain, cbid) };
    }
    // SAFETY: the callbacks have CUPTI's signatures.
    let r = unsafe {
        sys::cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed))
    };
    if r != CUptiResult::CUPTI_SUCCESS {
        status(
            t,
            2,
            &format!("cuptiActivityRegisterCallbacks failed: {}", result_text(r)),
        );
        return;
    }
    // Diagnostics for measuring CUPTI's own cost (collector/README.md), set before any kind
    // is enabled.
    if env_flag("FUSEPROF_CUPTI_PER_THREAD") {
        set_attribute(
            t,
            sys::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER,
            1,
        );
    }
    // CUPTI zeroes each activity buffer before use by default; on the H100 that cost the Swin-T
    // loop most of its tracing overhead (collector/README.md). Our buffers are zeroed once when
    // allocated and records are read only up to the valid size, so the zeroing is not needed.
    // FUSEPROF_CUPTI_ZERO=1 restores CUPTI's default, for measuring it.
    if !env_flag("FUSEPROF_CUPTI_ZERO") {
        set_attribute(
            t,
            sys::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
            0,
        );
    }
    if env_flag("FUSEPROF_CUPTI_HW_TRACE") {
        // SAFETY: plain CUPTI call.
        let r = unsafe { sys::cuptiActivityEnableHWTrace(1) };
        if r != CUptiResult::CUPTI_SUCCESS {
            status(
                t,
                1,
                &format!("cuptiActivityEnableHWTrace: {}", result_text(r)),
            );
        }
    }
    ACTIVE.store(true, Ordering::Release);
    // SAFETY: plain CUPTI calls with known kinds.
    unsafe {
        // Thread ids as the OS numbers them (gettid), the same ids NVTX records carry.
        // FUSEPROF_CUPTI_DEFAULT_TID=1 (a diagnostic) leaves CUPTI's default, whose ids do not
        // match NVTX's, so API calls then lose their ranges.
        if !env_flag("FUSEPROF_CUPTI_DEFAULT_TID") {
            sys::cuptiSetThreadIdType(
                sys::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM,
            );
        }
        sys::cuptiActivityEnable(K::CUPTI_ACTIVITY_KIND_DEVICE);
        sys::cuptiActivityEnable(K::CUPTI_ACTIVITY_KIND_CONTEXT);
        // No periodic flush by default: CUPTI's flush thread contends with the program's
        // launches (on the H100, Swin-T with shapes: +110 % with a 1 s period, +71 % without;
        // collector/README.md). Buffers still reach us when full, at cudaProfilerStop, at exit
        // and on SIGINT/SIGTERM; a SIGKILL loses what CUPTI held in its partly filled buffer.
        // FUSEPROF_CUPTI_FLUSH_PERIOD_MS=N turns the periodic hand-over back on.
        let period = std::env::var("FUSEPROF_CUPTI_FLUSH_PERIOD_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0u32);
        if period > 0 {
            sys::cuptiActivityFlushPeriod(period);
        }
    }
    top_up_pool();
    if CAPTURING.load(Ordering::Acquire) {
        enable_recorded(true, t);
    }
    let mut cupti_ts = 0u64;
    // SAFETY: valid out pointer.
    unsafe { sys::cuptiGetTimestamp(&mut cupti_ts) };
    let host_ts = now_ns();
    t.record(|e| {
        crate::write_process(e, t.pid, version);
        let at = e.begin(tag::CLOCK);
        e.i64(cupti_ts as i64 - host_ts as i64);
        e.end(at);
    });
}

/// Calls that only ask the driver something and put no work on the GPU. PyTorch makes
/// thousands per step (cudaGetDevice alone ~3300 per Swin-T forward); recording them costs
/// more time than everything else together, so they are left out unless FUSEPROF_ALL_API=1.
const QUIET_RUNTIME: &[&str] = &[
    "cudaGetDevice",
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaGetDeviceCount",
    "cudaGetErrorString",
    "cudaGetErrorName",
    "cudaDeviceGetAttribute",
    "cudaGetDeviceProperties",
    "cudaStreamIsCapturing",
    "cudaStreamGetCaptureInfo",
    "cudaPointerGetAttributes",
    "cudaDriverGetVersion",
    "cudaRuntimeGetVersion",
    "cudaFuncGetAttributes",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cudaGetDriverEntryPoint",
    "cudaGetDriverEntryPointByVersion",
];
const QUIET_DRIVER: &[&str] = &[
    "cuDevicePrimaryCtxGetState",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxGetId",
    "cuCtxGetFlags",
    "cuCtxGetStreamPriorityRange",
    "cuKernelGetName",
    "cuKernelGetAttribute",
    "cuKernelGetFunction",
    "cuFuncGetAttribute",
    "cuFuncGetName",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetCount",
    "cuDriverGetVersion",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
    "cuGetExportTable",
    "cuStreamIsCapturing",
    "cuStreamGetCaptureInfo",
    "cuStreamGetCaptureInfo_v2",
    "cuStreamGetCaptureInfo_v3",
    "cuPointerGetAttribute",
    "cuPointerGetAttributes",
    "cuGetErrorString",
    "cuGetErrorName",
];

/// (is_runtime, cbid) of the quiet calls, found by name so that ids from any CUPTI 13.x match.
fn quiet_cbids() -> &'static [(bool, u32)] {
    static IDS: std::sync::OnceLock<Vec<(bool, u32)>> = std::sync::OnceLock::new();
    IDS.get_or_init(|| {
        if env_flag("FUSEPROF_ALL_API") {
            return Vec::new();
        }
        let mut ids = Vec::new();
        for (runtime, domain, names) in [
            (
                true,
                sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
                QUIET_RUNTIME,
            ),
            (
                false,
                sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
                QUIET_DRIVER,
            ),
        ] {
            for cbid in 1..2048u32 {
                let mut p: *const c_char = std::ptr::null();
                // SAFETY: valid out pointer; CUPTI returns a static string or an error.
                let ok = unsafe { sys::cuptiGetCallbackName(domain, cbid, &mut p) }
                    == CUptiResult::CUPTI_SUCCESS
                    && !p.is_null();
                if !ok {
                    continue;
                }
                // SAFETY: checked non-null, NUL-terminated.
                let name = unsafe { CStr::from_ptr(p) }.to_string_lossy();
                // Runtime names carry a version suffix: cudaGetDevice_v3020.
                let base = if runtime {
                    name.rsplit_once("_v")
                        .filter(|(_, v)| v.chars().all(|c| c.is_ascii_digit()))
                        .map_or(&*name, |(b, _)| b)
                } else {
                    &*name
                };
                if names.contains(&base) {
                    ids.push((runtime, cbid));
                }
            }
        }
        ids
    })
}

fn enable_recorded(on: bool, t: &'static Tracer) {
    for &kind in recorded_kinds() {
        // SAFETY: known activity kinds.
        let r = unsafe {
            if on {
                sys::cuptiActivityEnable(kind)
            } else {
                sys::cuptiActivityDisable(kind)
            }
        };
        if on && r != CUptiResult::CUPTI_SUCCESS {
            status(
                t,
                1,
                &format!("cuptiActivityEnable({kind:?}) failed: {}", result_text(r)),
            );
        }
    }
    if on {
        for &(runtime, cbid) in quiet_cbids() {
            // SAFETY: plain CUPTI calls with ids CUPTI named.
            unsafe {
                if runtime {
                    sys::cuptiActivityEnableRuntimeApi(cbid, 0);
                } else {
                    sys::cuptiActivityEnableDriverApi(cbid, 0);
                }
            }
        }
    }
}

/// Opens or closes the capture window (`--capture`).
pub fn capture(on: bool) {
    let Some(t) = tracer() else { return };
    if CAPTURING.load(Ordering::Acquire) == on {
        return;
    }
    if on {
        CAPTURING.store(true, Ordering::Release);
    }
    if ACTIVE.load(Ordering::Acquire) {
        enable_recorded(on, t);
    }
    t.record(|e| {
        let at = e.begin(tag::CAPTURE);
        e.u8(on as u8);
        e.u64(now_ns());
        e.end(at);
    });
    if !on {
        CAPTURING.store(false, Ordering::Release);
        ask_flush(flush_reason::CAPTURE_END);
    }
}

/// Asks the writer thread for a complete flush without waiting for it.
fn ask_flush(reason: u8) {
    if let Some(t) = tracer() {
        t.ask_flush(reason);
        wake_writer();
    }
}

/// Forces CUPTI to hand over every buffer it holds (they land in the tracer's queue).
pub fn flush_all() {
    if ACTIVE.load(Ordering::Acquire) {
        // SAFETY: plain CUPTI call; 1 = CUPTI_ACTIVITY_FLAG_FLUSH_FORCED.
        unsafe { sys::cuptiActivityFlushAll(1) };
    }
}

pub fn forget_after_fork() {
    ACTIVE.store(false, Ordering::Release);
}

unsafe extern "C" fn api_callback(_ud: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    let _ = std::panic::catch_unwind(|| {
        if data.is_null() {
            return;
        }
        if domain == CB_DOMAIN_RESOURCE {
            if cbid == CBID_RESOURCE_CONTEXT_CREATED {
                // SAFETY: for the resource domain `data` is a CUpti_ResourceData whose first
                // field is the context.
                let context = unsafe { *(data as *const usize) };
                crate::pmsampling::context_created(context);
            }
            return;
        }
        // SAFETY: for API domains `data` is a CUpti_CallbackData whose first field is the
        // callback site (0 enter, 1 exit), read as a plain u32.
        let site = unsafe { *(data as *const u32) };
        let is_start = (domain == CB_DOMAIN_RUNTIME && cbid == CBID_RT_PROFILER_START)
            || (domain == CB_DOMAIN_DRIVER && cbid == CBID_DRV_PROFILER_START);
        let is_stop = (domain == CB_DOMAIN_RUNTIME && cbid == CBID_RT_PROFILER_STOP)
            || (domain == CB_DOMAIN_DRIVER && cbid == CBID_DRV_PROFILER_STOP);
        let profiler_api = CAPTURE_MODE.load(Ordering::Relaxed) == mode::PROFILER_API;
        if is_start && site == 1 && profiler_api {
            capture(true);
        } else if is_stop && site == 0 {
            if profiler_api {
                capture(false);
            } else {
                ask_flush(flush_reason::PROFILER_STOP);
            }
        }
    });
}

/// Buffers CUPTI handed back, kept for reuse: a fresh 8 MB allocation is faulted in page by
/// page by whichever thread CUPTI is recording on (the program's own), which shows up as a
/// stall in the traced loop.
static POOL: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// Buffers kept in the pool at most; more than this in flight are freed when returned.
const POOL_MAX: usize = 16;
/// Buffers allocated and touched when tracing starts.
const POOL_PREFILL: usize = 4;

fn layout() -> Layout {
    // SAFETY: constant, non-zero size and a power-of-two alignment.
    unsafe { Layout::from_size_align_unchecked(buffer_bytes(), BUFFER_ALIGN) }
}

/// A new buffer with every page already faulted in, or null.
fn new_buffer() -> *mut u8 {
    // SAFETY: non-zero layout.
    let p = unsafe { alloc(layout()) };
    if !p.is_null() {
        // SAFETY: p holds buffer_bytes() bytes.
        unsafe { std::ptr::write_bytes(p, 0, buffer_bytes()) };
    }
    p
}

/// Fills the pool up to POOL_PREFILL buffers: when tracing starts, then on the writer thread, so
/// that CUPTI's buffer requests (made on the program's threads) never allocate and fault in a
/// fresh buffer there.
pub fn top_up_pool() {
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let missing = POOL
        .lock()
        .map_or(0, |p| POOL_PREFILL.saturating_sub(p.len()));
    for _ in 0..missing {
        let p = new_buffer();
        if p.is_null() {
            return;
        }
        free_buffer(p);
    }
}

unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        let reused = POOL.lock().ok().and_then(|mut p| p.pop());
        let p = reused.map_or_else(new_buffer, |p| p as *mut u8);
        // SAFETY: out pointers come from CUPTI.
        unsafe {
            *buffer = p;
            *size = if p.is_null() { 0 } else { buffer_bytes() };
            *max = 0;
        }
    });
}

unsafe extern "C" fn buffer_completed(
    ctx: cudarc::driver::sys::CUcontext,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let mut dropped = 0usize;
        // SAFETY: context and stream as CUPTI passed them.
        unsafe { sys::cuptiActivityGetNumDroppedRecords(ctx, stream, &mut dropped) };
        match tracer() {
            Some(t) if !buffer.is_null() => {
                t.cupti_dropped.fetch_add(dropped as u64, Ordering::Relaxed);
                if let Ok(mut q) = t.cupti_buffers.lock() {
                    q.push((buffer as usize, valid));
                    drop(q);
                    wake_writer();
                    return;
                }
                free_buffer(buffer);
            }
            _ => free_buffer(buffer),
        }
    });
}

/// Returns a buffer to the pool (or frees it when the pool is full).
pub fn free_buffer(p: *mut u8) {
    if p.is_null() {
        return;
    }
    if let Ok(mut pool) = POOL.lock() {
        if pool.len() < POOL_MAX {
            pool.push(p as usize);
            return;
        }
    }
    // SAFETY: every buffer came from new_buffer with this layout.
    unsafe { dealloc(p, layout()) };
}

fn set_attribute(t: &'static Tracer, attr: sys::CUpti_ActivityAttribute, value: u8) {
    let mut v = value;
    let mut size = std::mem::size_of::<u8>();
    // SAFETY: a valid value pointer and its size.
    let r = unsafe { sys::cuptiActivitySetAttribute(attr, &mut size, (&mut v as *mut u8).cast()) };
    if r != CUptiResult::CUPTI_SUCCESS {
        status(
            t,
            1,
            &format!("cuptiActivitySetAttribute({attr:?}): {}", result_text(r)),
        );
    }
}

// ---- decoding ---------------------------------------------------------------------------------

/// Names already spooled: kernel name pointers (stable for the process's life) and API ids.
struct Names {
    by_ptr: HashMap<usize, u32>,
    by_api: HashMap<(u32, u32), u32>,
    next: u32,
}

static NAMES: Mutex<Option<Names>> = Mutex::new(None);

/// Reads a `T` at byte offset `off` of a record.
///
/// # Safety
/// `rec + off .. + size_of::<T>()` must lie inside the record.
unsafe fn rd<T: Copy>(rec: *const u8, off: usize) -> T {
    // SAFETY: per the caller.
    unsafe { (rec.add(off) as *const T).read_unaligned() }
}

type Demangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

/// Demangles a C++ name with the process's own `__cxa_demangle` (as Kineto does), so names
/// match the PyTorch profiler's. Returns the input when it is not a mangled name.
fn demangle(name: &CStr) -> String {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let f = *F.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names. libstdc++ is usually loaded already
        // (CUDA libraries need it) but not always into the global scope, so open it by name.
        unsafe {
            let h = libc::dlopen(c"libstdc++.so.6".as_ptr(), libc::RTLD_LAZY);
            let sym = if h.is_null() {
                libc::dlsym(libc::RTLD_DEFAULT, c"__cxa_demangle".as_ptr())
            } else {
                libc::dlsym(h, c"__cxa_demangle".as_ptr())
            };
            sym as usize
        }
    });
    if f != 0 && name.to_bytes().starts_with(b"_Z") {
        let mut status: c_int = -1;
        // SAFETY: f is __cxa_demangle; with a null buffer it mallocs the result.
        unsafe {
            let f: Demangle = std::mem::transmute(f);
            let out = f(
                name.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut status,
            );
            if status == 0 && !out.is_null() {
                let s = CStr::from_ptr(out).to_string_lossy().into_owned();
                libc::free(out as *mut c_void);
                return s;
            }
        }
    }
    name.to_string_lossy().into_owned()
}

fn name_id(names: &mut Names, out: &mut Vec<u8>, ptr: *const c_char) -> u32 {
    if let Some(&id) = names.by_ptr.get(&(ptr as usize)) {
        return id;
    }
    let text = if ptr.is_null() {
        "<unknown kernel>".to_string()
    } else {
        // SAFETY: CUPTI kernel names are NUL-terminated and live as long as the process.
        demangle(unsafe { CStr::from_ptr(ptr) })
    };
    names.next += 1;
    let id = names.next;
    names.by_ptr.insert(ptr as usize, id);
    let mut e = Enc(out);
    let at = e.begin(tag::STRING);
    e.u32(id);
    e.str(&text);
    e.end(at);
    id
}

fn api_name_id(names: &mut Names, out: &mut Vec<u8>, raw_kind: u32, cbid: u32) -> u32 {
    if let Some(&id) = names.by_api.get(&(raw_kind, cbid)) {
        return id;
    }
    let domain = if raw_kind == RAW_DRIVER {
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API
    } else {
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API
    };
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: valid out pointer; CUPTI returns a static string.
    let text = unsafe {
        if sys::cuptiGetCallbackName(domain, cbid, &mut p) == CUptiResult::CUPTI_SUCCESS
            && !p.is_null()
        {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        } else {
            format!("cbid {cbid}")
        }
    };
    names.next += 1;
    let id = names.next;
    names.by_api.insert((raw_kind, cbid), id);
    let mut e = Enc(out);
    let at = e.begin(tag::STRING);
    e.u32(id);
    e.str(&text);
    e.end(at);
    id
}

/// Decodes one completed CUPTI buffer into spool records appended to `out`.
pub fn decode_buffer(buffer: *mut u8, valid: usize, out: &mut Vec<u8>) {
    if buffer.is_null() || valid == 0 {
        return;
    }
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = guard.get_or_insert_with(|| Names {
        by_ptr: HashMap::new(),
        by_api: HashMap::new(),
        next: 0,
    });
    let mut rec: *mut sys::CUpti_Activity = std::ptr::null_mut();
    loop {
        // SAFETY: buffer/valid as CUPTI completed them; rec is CUPTI's cursor.
        let r = unsafe { sys::cuptiActivityGetNextRecord(buffer, valid, &mut rec) };
        if r != CUptiResult::CUPTI_SUCCESS || rec.is_null() {
            break;
        }
        // SAFETY: rec points at a whole record of the kind its first u32 names.
        unsafe { decode_record(rec as *const u8, names, out) };
    }
}

/// # Safety
/// `r` must point at a complete CUPTI activity record.
unsafe fn decode_record(r: *const u8, names: &mut Names, out: &mut Vec<u8>) {
    use sys::{
        CUpti_ActivityAPI as Api, CUpti_ActivityContext3 as Ctx, CUpti_ActivityDevice5 as Dev,
        CUpti_ActivityKernel10 as Kern, CUpti_ActivityMemcpy6 as Mcpy,
        CUpti_ActivityMemset4 as Mset, CUpti_ActivityOverhead3 as Ovh,
        CUpti_ActivitySynchronization2 as Sync,
    };
    // SAFETY (whole body): each offset is of a field of the struct the record kind names, and
    // CUPTI 13.x writes at least that struct for that kind.
    unsafe {
        let kind: u32 = rd(r, 0);
        match kind {
            RAW_CONCURRENT_KERNEL | RAW_KERNEL => {
                let name = name_id(names, out, rd(r, offset_of!(Kern, name)));
                let mut e = Enc(out);
                let at = e.begin(tag::KERNEL);
                e.u64(rd(r, offset_of!(Kern, start)));
                e.u64(rd(r, offset_of!(Kern, end)));
                e.u32(rd(r, offset_of!(Kern, deviceId)));
                e.u32(rd(r, offset_of!(Kern, contextId)));
                e.u32(rd(r, offset_of!(Kern, streamId)));
                e.u32(rd(r, offset_of!(Kern, correlationId)));
                e.i32(rd(r, offset_of!(Kern, gridX)));
                e.i32(rd(r, offset_of!(Kern, gridY)));
                e.i32(rd(r, offset_of!(Kern, gridZ)));
                e.i32(rd(r, offset_of!(Kern, blockX)));
                e.i32(rd(r, offset_of!(Kern, blockY)));
                e.i32(rd(r, offset_of!(Kern, blockZ)));
                e.u16(rd(r, offset_of!(Kern, registersPerThread)));
                e.i32(rd(r, offset_of!(Kern, staticSharedMemory)));
                e.i32(rd(r, offset_of!(Kern, dynamicSharedMemory)));
                e.u32(name);
                e.u32(rd(r, offset_of!(Kern, graphId)));
                e.end(at);
            }
            RAW_MEMCPY => {
                let mut e = Enc(out);
                let at = e.begin(tag::MEMCPY);
                e.u64(rd(r, offset_of!(Mcpy, start)));
                e.u64(rd(r, offset_of!(Mcpy, end)));
                e.u32(rd(r, offset_of!(Mcpy, deviceId)));
                e.u32(rd(r, offset_of!(Mcpy, contextId)));
                e.u32(rd(r, offset_of!(Mcpy, streamId)));
                e.u32(rd(r, offset_of!(Mcpy, correlationId)));
                e.u64(rd(r, offset_of!(Mcpy, bytes)));
                e.u8(rd(r, offset_of!(Mcpy, copyKind)));
                e.u32(rd(r, offset_of!(Mcpy, graphId)));
                // Read as plain bytes, not as the enum: CUPTI may add kinds this build does
                // not know, which the reader maps to unknown.
                e.u8(rd(r, offset_of!(Mcpy, srcKind)));
                e.u8(rd(r, offset_of!(Mcpy, dstKind)));
                e.end(at);
            }
            RAW_MEMSET => {
                let mut e = Enc(out);
                let at = e.begin(tag::MEMSET);
                e.u64(rd(r, offset_of!(Mset, start)));
                e.u64(rd(r, offset_of!(Mset, end)));
                e.u32(rd(r, offset_of!(Mset, deviceId)));
                e.u32(rd(r, offset_of!(Mset, contextId)));
                e.u32(rd(r, offset_of!(Mset, streamId)));
                e.u32(rd(r, offset_of!(Mset, correlationId)));
                e.u64(rd(r, offset_of!(Mset, bytes)));
                e.u32(rd(r, offset_of!(Mset, value)));
                e.u32(rd(r, offset_of!(Mset, graphId)));
                e.end(at);
            }
            RAW_DRIVER | RAW_RUNTIME => {
                let cbid: u32 = rd(r, offset_of!(Api, cbid));
                let name = api_name_id(names, out, kind, cbid);
                let mut e = Enc(out);
                let at = e.begin(tag::API);
                e.u8((kind == RAW_RUNTIME) as u8);
                e.u32(cbid);
                e.u64(rd(r, offset_of!(Api, start)));
                e.u64(rd(r, offset_of!(Api, end)));
                e.u32(rd(r, offset_of!(Api, processId)));
                e.u32(rd(r, offset_of!(Api, threadId)));
                e.u32(rd(r, offset_of!(Api, correlationId)));
                e.u32(rd(r, offset_of!(Api, returnValue)));
                e.u32(name);
                e.end(at);
            }
            RAW_SYNCHRONIZATION => {
                let mut e = Enc(out);
                let at = e.begin(tag::SYNC);
                e.u32(rd(r, offset_of!(Sync, type_)));
                e.u64(rd(r, offset_of!(Sync, start)));
                e.u64(rd(r, offset_of!(Sync, end)));
                e.u32(rd(r, offset_of!(Sync, correlationId)));
                e.u32(rd(r, offset_of!(Sync, contextId)));
                e.u32(rd(r, offset_of!(Sync, streamId)));
                e.u32(rd(r, offset_of!(Sync, cudaEventId)));
                e.end(at);
            }
            RAW_OVERHEAD => {
                let id = offset_of!(Ovh, objectId);
                let mut e = Enc(out);
                let at = e.begin(tag::OVERHEAD);
                e.u32(rd(r, offset_of!(Ovh, overheadKind)));
                e.u32(rd(r, offset_of!(Ovh, objectKind)));
                e.u32(rd(r, id));
                e.u32(rd(r, id + 4));
                e.u64(rd(r, offset_of!(Ovh, start)));
                e.u64(rd(r, offset_of!(Ovh, end)));
                e.end(at);
            }
            RAW_DEVICE => {
                let name: *const c_char = rd(r, offset_of!(Dev, name));
                let name = if name.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(name).to_string_lossy().into_owned()
                };
                let mut e = Enc(out);
                let at = e.begin(tag::DEVICE);
                e.u32(rd(r, offset_of!(Dev, id)));
                e.u32(rd(r, offset_of!(Dev, computeCapabilityMajor)));
                e.u32(rd(r, offset_of!(Dev, computeCapabilityMinor)));
                e.u32(rd(r, offset_of!(Dev, numMultiprocessors)));
                e.u64(rd(r, offset_of!(Dev, globalMemorySize)));
                e.u32(rd(r, offset_of!(Dev, coreClockRate)));
                e.u64(rd(r, offset_of!(Dev, globalMemoryBandwidth)));
                e.str(&name);
                e.end(at);
            }
            RAW_CONTEXT => {
                let mut e = Enc(out);
                let at = e.begin(tag::CONTEXT);
                e.u32(rd(r, offset_of!(Ctx, contextId)));
                e.u32(rd(r, offset_of!(Ctx, deviceId)));
                e.end(at);
            }
            _ => {}
        }
    }
}
