//! Hardware counters by CUPTI's PM sampling API (`cupti_pmsampling.h`, CUDA 12.6 and up):
//! chosen counters sampled device-wide at a fixed GPU-time interval into a hardware buffer
//! that a thread of ours decodes, so the program's threads do nothing more per kernel.
//!
//! `FUSEPROF_METRICS` names the set (`memory`, `compute`, `all`, or metric names separated by
//! commas). When a context is created on a device (CUPTI's resource callback, which only
//! queues the device), the `fuseprof-pm` thread sets sampling up there: for each quantity of
//! the set it keeps the first metric name the chip accepts (names differ between chips and
//! between PM sampling and Nsight Compute), drops quantities from the end while the set needs
//! more than one pass, then enables, configures and starts sampling. Every 20 ms it decodes
//! the buffer and spools the samples (tag COUNTER_SAMPLES, raw GPU times) with a pair of
//! clock readings (GPU_CLOCK) that put them on CUPTI's clock. At exit it stops sampling and
//! decodes what is left.
//!
//! Every failure (no PM sampling in this CUPTI, a GPU or driver without it, counters reserved
//! to administrators, another profiler holding them, a metric the chip lacks) becomes one
//! status line naming it; tracing goes on without counters. `FUSEPROF_TRACER_DEBUG=1` prints
//! each step, and the metric names the chip offers, on stderr.

use std::ffi::{c_char, c_void, CStr, CString};
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use cudarc::cupti::sys::{self, CUptiResult};

use crate::spool::{tag, ENV_METRICS, ENV_METRICS_INTERVAL_NS};
use crate::Tracer;

/// Default sampling interval: 20 µs of GPU time.
const DEFAULT_INTERVAL_NS: u64 = 20_000;
/// How often the buffer is decoded.
const DECODE_PERIOD: Duration = Duration::from_millis(20);
/// The hardware buffer CUPTI samples into between decodes (64 MB and 1024 samples a decode are
/// what PyTorch's own profiler configures).
const HW_BUFFER_BYTES: usize = 64 << 20;
/// Samples one decode takes at most (more wait for the next round of the same decode).
const MAX_SAMPLES_PER_DECODE: u32 = 1024;
/// How long the exit flush waits for the final decode.
const FINAL_DECODE_WAIT: Duration = Duration::from_secs(3);

/// One quantity fuseprof reads, and the metric names that give it, in order of preference.
struct Quantity {
    quantity: &'static str,
    /// 0: a count over the sample (split between kernels); 1: a rate or percentage.
    kind: u8,
    unit: &'static str,
    /// (metric name, factor to the unit).
    candidates: &'static [(&'static str, f64)],
}

const MEMORY: &[Quantity] = &[
    Quantity {
        quantity: "dram_read_bytes",
        kind: 0,
        unit: "byte",
        candidates: &[
            ("dram__bytes_read.sum", 1.0),
            ("dramc__read_bytes.sum", 1.0),
            ("dram__sectors_read.sum", 32.0),
        ],
    },
    Quantity {
        quantity: "dram_write_bytes",
        kind: 0,
        unit: "byte",
        candidates: &[
            ("dram__bytes_write.sum", 1.0),
            ("dramc__write_bytes.sum", 1.0),
            ("dram__sectors_write.sum", 32.0),
        ],
    },
    Quantity {
        quantity: "l2_hit_pct",
        kind: 1,
        unit: "percent",
        candidates: &[("lts__t_sector_hit_rate.pct", 1.0)],
    },
];

const COMPUTE: &[Quantity] = &[
    Quantity {
        quantity: "tensor_pipe_pct",
        kind: 1,
        unit: "percent",
        candidates: &[
            (
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
            (
                "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
            (
                "sm__pipe_tensor_op_hmma_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
            (
                "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
        ],
    },
    Quantity {
        quantity: "fma_pipe_pct",
        kind: 1,
        unit: "percent",
        candidates: &[
            (
                "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
            (
                "sm__pipe_fma_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
            (
                "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_elapsed",
                1.0,
            ),
        ],
    },
    Quantity {
        quantity: "warps_active_pct",
        kind: 1,
        unit: "percent",
        candidates: &[
            ("sm__warps_active.avg.pct_of_peak_sustained_elapsed", 1.0),
            ("sm__warps_active.avg.pct_of_peak_sustained_active", 1.0),
        ],
    },
];

/// The metrics chosen for one device, as the API accepted them.
struct Chosen {
    names: Vec<CString>,
    /// (quantity, kind, unit, scale) per name.
    meta: Vec<(String, u8, &'static str, f64)>,
}

/// Sampling as set up on one device.
struct Device {
    ordinal: u32,
    context: usize,
    host: *mut sys::CUpti_Profiler_Host_Object,
    sampler: *mut sys::CUpti_PmSampling_Object,
    names: Vec<CString>,
    image: Vec<u8>,
    samples: u64,
    overflowed: bool,
}

// SAFETY: the CUPTI objects are used only by the one thread that owns the list of devices.
unsafe impl Send for Device {}

/// Devices whose first context was created: (ordinal, context), for the sampling thread.
static PENDING: Mutex<Vec<(u32, usize)>> = Mutex::new(Vec::new());
static WAKE: Condvar = Condvar::new();
/// 0 running, 1 asked to stop (exit), 2 stopped and drained.
static STATE: AtomicU8 = AtomicU8::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
static DONE: Mutex<bool> = Mutex::new(false);
static DONE_CV: Condvar = Condvar::new();

fn debug_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::cupti::env_flag("FUSEPROF_TRACER_DEBUG"))
}

macro_rules! debug {
    ($($arg:tt)*) => {
        if debug_on() {
            eprintln!("fuseprof-tracer[{}] pm: {}", std::process::id(), format!($($arg)*));
        }
    };
}

/// A CUPTI parameter struct, zeroed, with `structSize` up to and including `$last` (as the
/// headers' `*_STRUCT_SIZE` macros give it: CUPTI checks it to tell versions apart).
macro_rules! params {
    ($ty:ident, $last:ident) => {{
        // SAFETY: the parameter structs are plain C data (pointers, integers and C enums whose
        // zero is a valid value), for which all-zero is valid.
        let mut p: sys::$ty = unsafe { std::mem::zeroed() };
        p.structSize = offset_of!(sys::$ty, $last) + std::mem::size_of_val(&p.$last);
        p
    }};
}

fn status(t: &'static Tracer, level: u8, message: &str) {
    debug!("{message}");
    t.record(|e| {
        let at = e.begin(tag::STATUS);
        e.u8(level);
        e.str(message);
        e.end(at);
    });
}

/// The set asked for, when counters are wanted at all.
pub fn wanted() -> Option<String> {
    std::env::var(ENV_METRICS).ok().filter(|s| !s.is_empty())
}

/// Called from `cupti::start` when `FUSEPROF_METRICS` is set: checks that this CUPTI has the
/// PM sampling API and starts the sampling thread. Returns whether the caller should enable
/// the context-created callback that feeds it.
pub fn arm(t: &'static Tracer) -> bool {
    let Some(set) = wanted() else {
        return false;
    };
    let missing: Vec<&str> = [
        "cuptiPmSamplingEnable",
        "cuptiProfilerHostInitialize",
        "cuptiProfilerInitialize",
    ]
    .into_iter()
    .filter(|name| {
        // SAFETY: looking a symbol up in the loaded libcupti.
        unsafe { sys::culib().get::<*const c_void>(name.as_bytes()) }.is_err()
    })
    .collect();
    if !missing.is_empty() {
        status(
            t,
            1,
            &format!(
                "--metrics {set}: this libcupti has no PM sampling API ({} missing; it needs \
                 CUDA 12.6 or newer); the trace is recorded without counters",
                missing.join(", ")
            ),
        );
        return false;
    }
    if STARTED.swap(true, Ordering::AcqRel) {
        return true;
    }
    let spawned = std::thread::Builder::new()
        .name("fuseprof-pm".into())
        .spawn(move || {
            let _ = std::panic::catch_unwind(|| sampling_thread(t, &set));
            *DONE.lock().unwrap_or_else(|e| e.into_inner()) = true;
            DONE_CV.notify_all();
        });
    spawned.is_ok()
}

/// CUPTI's context-created callback: queues the device for the sampling thread. Does no CUPTI
/// profiling call itself (the driver holds its locks here).
pub fn context_created(context: usize) {
    if !STARTED.load(Ordering::Acquire) || context == 0 {
        return;
    }
    let mut device = 0u32;
    // SAFETY: a context CUPTI handed to the callback.
    let r = unsafe { sys::cuptiGetDeviceId(context as _, &mut device) };
    if r != CUptiResult::CUPTI_SUCCESS {
        debug!("cuptiGetDeviceId: {r:?}");
        return;
    }
    if let Ok(mut p) = PENDING.lock() {
        p.push((device, context));
    }
    WAKE.notify_all();
}

/// At exit: stops sampling and waits (bounded) for the last samples to be spooled.
pub fn finish() {
    if !STARTED.load(Ordering::Acquire) {
        return;
    }
    STATE.store(1, Ordering::Release);
    WAKE.notify_all();
    let done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let _ = DONE_CV.wait_timeout_while(done, FINAL_DECODE_WAIT, |d| !*d);
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

/// Why a device refused, in words a user can act on.
fn refusal(r: CUptiResult) -> String {
    use CUptiResult as R;
    match r {
        R::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
        | R::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => {
            "the GPU's performance counters are reserved to administrators (ERR_NVGPUCTRPERM: \
             run as root or load the driver with NVreg_RestrictProfilingToAdminUsers=0)"
                .into()
        }
        R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => {
            "another profiler (Nsight Compute or Systems, DCGM, the PyTorch profiler) already \
             holds the GPU's performance counters"
                .into()
        }
        R::CUPTI_ERROR_NOT_SUPPORTED
        | R::CUPTI_ERROR_NOT_COMPATIBLE
        | R::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED
        | R::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED
        | R::CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED => format!(
            "this GPU or driver does not support PM sampling ({})",
            result_text(r)
        ),
        _ => result_text(r),
    }
}

fn check(r: CUptiResult, what: &str) -> Result<(), String> {
    if r == CUptiResult::CUPTI_SUCCESS {
        debug!("{what}: ok");
        Ok(())
    } else {
        debug!("{what}: {r:?}");
        Err(format!("{what} failed: {}", refusal(r)))
    }
}

fn sampling_thread(t: &'static Tracer, set: &str) {
    let interval_ns = std::env::var(ENV_METRICS_INTERVAL_NS)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&v| v >= 1000)
        .unwrap_or(DEFAULT_INTERVAL_NS);
    let mut p = params!(CUpti_Profiler_Initialize_Params, pPriv);
    // SAFETY: a valid parameter struct.
    if let Err(e) = check(
        unsafe { sys::cuptiProfilerInitialize(&mut p) },
        "cuptiProfilerInitialize",
    ) {
        status(
            t,
            1,
            &format!("--metrics {set}: {e}; no counters are recorded"),
        );
        return;
    }
    let mut devices: Vec<Device> = Vec::new();
    let mut refused: Vec<u32> = Vec::new();
    loop {
        let stopping = STATE.load(Ordering::Acquire) == 1;
        let pending: Vec<(u32, usize)> = PENDING
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        for (ordinal, context) in pending {
            if stopping
                || devices.iter().any(|d| d.ordinal == ordinal)
                || refused.contains(&ordinal)
            {
                continue;
            }
            match set_up(t, set, ordinal, context, interval_ns) {
                Ok(d) => devices.push(d),
                Err(e) => {
                    refused.push(ordinal);
                    status(
                        t,
                        1,
                        &format!(
                            "--metrics {set} on device {ordinal}: {e}; the trace is recorded \
                             without counters there"
                        ),
                    );
                }
            }
        }
        if stopping {
            for d in &mut devices {
                let mut p = params!(CUpti_PmSampling_Stop_Params, pPmSamplingObject);
                p.pPmSamplingObject = d.sampler;
                // SAFETY: the sampler this thread enabled.
                let _ = check(
                    unsafe { sys::cuptiPmSamplingStop(&mut p) },
                    "cuptiPmSamplingStop",
                );
                decode(t, d);
                // A second pair of clock readings: the collector interpolates between them,
                // so a drift between the clocks over the run is followed.
                clock_pair(t, d.ordinal, d.context);
                debug!("device {}: {} samples in all", d.ordinal, d.samples);
            }
            break;
        }
        for d in &mut devices {
            decode(t, d);
        }
        let guard = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let _ = WAKE.wait_timeout_while(guard, DECODE_PERIOD, |p| {
            p.is_empty() && STATE.load(Ordering::Acquire) == 0
        });
    }
    STATE.store(2, Ordering::Release);
}

fn chip_name(ordinal: u32) -> Result<String, String> {
    let mut p = params!(CUpti_Device_GetChipName_Params, pChipName);
    p.deviceIndex = ordinal as usize;
    // SAFETY: a valid parameter struct.
    check(
        unsafe { sys::cuptiDeviceGetChipName(&mut p) },
        "cuptiDeviceGetChipName",
    )?;
    if p.pChipName.is_null() {
        return Err("cuptiDeviceGetChipName gave no name".into());
    }
    // SAFETY: a NUL-terminated string CUPTI keeps.
    Ok(unsafe { CStr::from_ptr(p.pChipName) }
        .to_string_lossy()
        .into_owned())
}

fn counter_availability(ordinal: u32) -> Result<Vec<u8>, String> {
    let mut p = params!(
        CUpti_PmSampling_GetCounterAvailability_Params,
        pCounterAvailabilityImage
    );
    p.deviceIndex = ordinal as usize;
    // SAFETY: a valid parameter struct; a null image asks for its size.
    check(
        unsafe { sys::cuptiPmSamplingGetCounterAvailability(&mut p) },
        "cuptiPmSamplingGetCounterAvailability (size)",
    )?;
    let mut image = vec![0u8; p.counterAvailabilityImageSize];
    p.pCounterAvailabilityImage = image.as_mut_ptr();
    // SAFETY: the image has the size CUPTI asked for.
    check(
        unsafe { sys::cuptiPmSamplingGetCounterAvailability(&mut p) },
        "cuptiPmSamplingGetCounterAvailability",
    )?;
    Ok(image)
}

/// A profiler host object for PM sampling on `chip`.
fn host_object(
    chip: &CStr,
    availability: &[u8],
) -> Result<*mut sys::CUpti_Profiler_Host_Object, String> {
    let mut p = params!(CUpti_Profiler_Host_Initialize_Params, pHostObject);
    p.profilerType = sys::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_PM_SAMPLING;
    p.pChipName = chip.as_ptr();
    p.pCounterAvailabilityImage = availability.as_ptr();
    // SAFETY: a valid parameter struct; the strings and image outlive the call.
    let r = unsafe { sys::cuptiProfilerHostInitialize(&mut p) };
    if r != CUptiResult::CUPTI_SUCCESS {
        return Err(format!(
            "cuptiProfilerHostInitialize failed: {}",
            refusal(r)
        ));
    }
    Ok(p.pHostObject)
}

fn host_free(host: *mut sys::CUpti_Profiler_Host_Object) {
    let mut p = params!(CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
    p.pHostObject = host;
    // SAFETY: a host object from cuptiProfilerHostInitialize, not used after this.
    unsafe { sys::cuptiProfilerHostDeinitialize(&mut p) };
}

fn add_metrics(host: *mut sys::CUpti_Profiler_Host_Object, names: &[CString]) -> CUptiResult {
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut p = params!(CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
    p.pHostObject = host;
    p.ppMetricNames = ptrs.as_mut_ptr();
    p.numMetrics = ptrs.len();
    // SAFETY: a valid parameter struct; the names outlive the call.
    unsafe { sys::cuptiProfilerHostConfigAddMetrics(&mut p) }
}

/// The metric names the chip offers for PM sampling (base metrics of every type).
fn base_metrics(host: *mut sys::CUpti_Profiler_Host_Object) -> Vec<String> {
    let mut out = Vec::new();
    for ty in [
        sys::CUpti_MetricType::CUPTI_METRIC_TYPE_COUNTER,
        sys::CUpti_MetricType::CUPTI_METRIC_TYPE_RATIO,
        sys::CUpti_MetricType::CUPTI_METRIC_TYPE_THROUGHPUT,
    ] {
        let mut p = params!(CUpti_Profiler_Host_GetBaseMetrics_Params, numMetrics);
        p.pHostObject = host;
        p.metricType = ty;
        // SAFETY: a valid parameter struct; CUPTI keeps the names it points to.
        let r = unsafe { sys::cuptiProfilerHostGetBaseMetrics(&mut p) };
        if r != CUptiResult::CUPTI_SUCCESS || p.ppMetricNames.is_null() {
            debug!("cuptiProfilerHostGetBaseMetrics({ty:?}): {r:?}");
            continue;
        }
        for i in 0..p.numMetrics {
            // SAFETY: numMetrics pointers to NUL-terminated names.
            let n = unsafe { *p.ppMetricNames.add(i) };
            if !n.is_null() {
                // SAFETY: checked non-null.
                out.push(unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// The config image for `names`, and the passes it needs.
fn config_image(
    chip: &CStr,
    availability: &[u8],
    names: &[CString],
) -> Result<(Vec<u8>, usize, *mut sys::CUpti_Profiler_Host_Object), String> {
    let host = host_object(chip, availability)?;
    let fail = |e: String| {
        host_free(host);
        e
    };
    check(
        add_metrics(host, names),
        "cuptiProfilerHostConfigAddMetrics",
    )
    .map_err(fail)?;
    let mut s = params!(
        CUpti_Profiler_Host_GetConfigImageSize_Params,
        configImageSize
    );
    s.pHostObject = host;
    // SAFETY: a valid parameter struct.
    check(
        unsafe { sys::cuptiProfilerHostGetConfigImageSize(&mut s) },
        "cuptiProfilerHostGetConfigImageSize",
    )
    .map_err(fail)?;
    let mut image = vec![0u8; s.configImageSize];
    let mut g = params!(CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
    g.pHostObject = host;
    g.configImageSize = image.len();
    g.pConfigImage = image.as_mut_ptr();
    // SAFETY: the image has the size CUPTI gave.
    check(
        unsafe { sys::cuptiProfilerHostGetConfigImage(&mut g) },
        "cuptiProfilerHostGetConfigImage",
    )
    .map_err(fail)?;
    let mut n = params!(CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
    n.configImageSize = image.len();
    n.pConfigImage = image.as_mut_ptr();
    // SAFETY: a valid parameter struct and image.
    check(
        unsafe { sys::cuptiProfilerHostGetNumOfPasses(&mut n) },
        "cuptiProfilerHostGetNumOfPasses",
    )
    .map_err(fail)?;
    Ok((image, n.numOfPasses, host))
}

/// A quantity asked for: (quantity, kind, unit, candidate names with their scale).
type Wanted = (String, u8, &'static str, Vec<(String, f64)>);

/// The quantities of `set`, or metric names given directly.
fn quantities(set: &str) -> Result<Vec<Wanted>, String> {
    let from = |qs: &[Quantity]| -> Vec<Wanted> {
        qs.iter()
            .map(|q| {
                (
                    q.quantity.to_string(),
                    q.kind,
                    q.unit,
                    q.candidates
                        .iter()
                        .map(|(n, s)| (n.to_string(), *s))
                        .collect(),
                )
            })
            .collect()
    };
    match set {
        "memory" => Ok(from(MEMORY)),
        "compute" => Ok(from(COMPUTE)),
        "all" => Ok(from(MEMORY).into_iter().chain(from(COMPUTE)).collect()),
        names if names.contains("__") => Ok(names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                // A `.sum` counts over the sample; anything else is read as a rate.
                let kind = u8::from(!n.ends_with(".sum"));
                (n.to_string(), kind, "", vec![(n.to_string(), 1.0)])
            })
            .collect()),
        other => Err(format!(
            "unknown metric set {other:?} (expected memory, compute, all, or metric names)"
        )),
    }
}

/// Picks, for each quantity, the first name the chip accepts; then drops quantities from the
/// end until the whole set fits one pass. Each quantity left out is named in a status line.
fn choose(
    t: &'static Tracer,
    set: &str,
    ordinal: u32,
    chip: &CStr,
    availability: &[u8],
) -> Result<(Chosen, Vec<u8>, *mut sys::CUpti_Profiler_Host_Object), String> {
    let mut chosen = Chosen {
        names: Vec::new(),
        meta: Vec::new(),
    };
    let mut lacking = Vec::new();
    for (quantity, kind, unit, candidates) in quantities(set)? {
        let mut found = false;
        for (name, scale) in &candidates {
            let Ok(c) = CString::new(name.as_str()) else {
                continue;
            };
            let host = host_object(chip, availability)?;
            let r = add_metrics(host, std::slice::from_ref(&c));
            host_free(host);
            debug!("device {ordinal}: {quantity} <- {name}: {r:?}");
            if r == CUptiResult::CUPTI_SUCCESS {
                chosen.names.push(c);
                chosen.meta.push((quantity.clone(), kind, unit, *scale));
                found = true;
                break;
            }
        }
        if !found {
            let tried: Vec<&str> = candidates.iter().map(|(n, _)| n.as_str()).collect();
            lacking.push(format!("{quantity} (tried {})", tried.join(", ")));
        }
    }
    if !lacking.is_empty() {
        status(
            t,
            1,
            &format!(
                "--metrics {set} on device {ordinal} ({}): the chip has no metric for {}",
                chip.to_string_lossy(),
                lacking.join("; ")
            ),
        );
    }
    loop {
        if chosen.names.is_empty() {
            return Err(format!(
                "no metric of the set is available on {}",
                chip.to_string_lossy()
            ));
        }
        let (image, passes, host) = config_image(chip, availability, &chosen.names)?;
        debug!(
            "device {ordinal}: {} metrics need {passes} pass(es)",
            chosen.names.len()
        );
        if passes == 1 {
            return Ok((chosen, image, host));
        }
        host_free(host);
        let dropped = chosen.names.pop();
        let meta = chosen.meta.pop();
        status(
            t,
            1,
            &format!(
                "--metrics {set} on device {ordinal}: the set needs {passes} passes, one is \
                 sampled; {} ({}) is left out",
                meta.map(|m| m.0).unwrap_or_default(),
                dropped
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
        );
    }
}

fn set_up(
    t: &'static Tracer,
    set: &str,
    ordinal: u32,
    context: usize,
    interval_ns: u64,
) -> Result<Device, String> {
    let chip = chip_name(ordinal)?;
    debug!("device {ordinal}: chip {chip}");
    let chip_c = CString::new(chip.clone()).map_err(|e| e.to_string())?;
    let availability = counter_availability(ordinal)?;
    if debug_on() {
        let host = host_object(&chip_c, &availability)?;
        let names = base_metrics(host);
        host_free(host);
        let interesting: Vec<&String> = names
            .iter()
            .filter(|n| {
                [
                    "dram",
                    "lts__t_sector",
                    "sm__pipe",
                    "sm__warps_active",
                    "sm__inst_executed_pipe_tensor",
                ]
                .iter()
                .any(|p| n.starts_with(p))
            })
            .collect();
        debug!(
            "device {ordinal}: {} base metrics; memory and pipe ones: {:?}",
            names.len(),
            interesting
        );
    }
    let (chosen, config, host) = choose(t, set, ordinal, &chip_c, &availability)?;
    let fail = |e: String| {
        host_free(host);
        e
    };
    let mut en = params!(CUpti_PmSampling_Enable_Params, pPmSamplingObject);
    en.deviceIndex = ordinal as usize;
    // SAFETY: a valid parameter struct.
    check(
        unsafe { sys::cuptiPmSamplingEnable(&mut en) },
        "cuptiPmSamplingEnable",
    )
    .map_err(fail)?;
    let sampler = en.pPmSamplingObject;
    let disable = |e: String| {
        let mut p = params!(CUpti_PmSampling_Disable_Params, pPmSamplingObject);
        p.pPmSamplingObject = sampler;
        // SAFETY: the sampler just enabled.
        unsafe { sys::cuptiPmSamplingDisable(&mut p) };
        host_free(host);
        e
    };
    let mut cfg = params!(CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode);
    cfg.pPmSamplingObject = sampler;
    cfg.configSize = config.len();
    cfg.pConfig = config.as_ptr();
    cfg.hardwareBufferSize = HW_BUFFER_BYTES;
    cfg.samplingInterval = interval_ns;
    cfg.triggerMode =
        sys::CUpti_PmSampling_TriggerMode::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
    cfg.hwBufferAppendMode =
        sys::CUpti_PmSampling_HardwareBuffer_AppendMode::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
    // SAFETY: a valid parameter struct; the config image outlives the call.
    check(
        unsafe { sys::cuptiPmSamplingSetConfig(&mut cfg) },
        "cuptiPmSamplingSetConfig",
    )
    .map_err(disable)?;
    let mut ptrs: Vec<*const c_char> = chosen.names.iter().map(|n| n.as_ptr()).collect();
    let mut sz = params!(CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize);
    sz.pPmSamplingObject = sampler;
    sz.pMetricNames = ptrs.as_mut_ptr();
    sz.numMetrics = ptrs.len();
    sz.maxSamples = MAX_SAMPLES_PER_DECODE;
    // SAFETY: a valid parameter struct; the names outlive the call.
    check(
        unsafe { sys::cuptiPmSamplingGetCounterDataSize(&mut sz) },
        "cuptiPmSamplingGetCounterDataSize",
    )
    .map_err(disable)?;
    let mut image = vec![0u8; sz.counterDataSize];
    init_image(sampler, &mut image).map_err(disable)?;
    for (i, (name, (quantity, kind, unit, scale))) in
        chosen.names.iter().zip(&chosen.meta).enumerate()
    {
        t.record(|e| {
            let at = e.begin(tag::COUNTER_METRIC);
            e.u32(ordinal);
            e.u32(i as u32);
            e.u8(*kind);
            e.f64(*scale);
            e.u64(interval_ns);
            e.str("pm_sampling");
            e.str(&name.to_string_lossy());
            e.str(quantity);
            e.str(unit);
            e.end(at);
        });
    }
    clock_pair(t, ordinal, context);
    let mut st = params!(CUpti_PmSampling_Start_Params, pPmSamplingObject);
    st.pPmSamplingObject = sampler;
    // SAFETY: a configured sampler.
    check(
        unsafe { sys::cuptiPmSamplingStart(&mut st) },
        "cuptiPmSamplingStart",
    )
    .map_err(disable)?;
    let names: Vec<String> = chosen
        .names
        .iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    status(
        t,
        0,
        &format!(
            "device {ordinal} ({chip}): PM sampling every {} us: {}",
            interval_ns as f64 / 1000.0,
            names.join(", ")
        ),
    );
    Ok(Device {
        ordinal,
        context,
        host,
        sampler,
        names: chosen.names,
        image,
        samples: 0,
        overflowed: false,
    })
}

/// Initializes a counter data image (at set-up, and after each decode has been read).
fn init_image(sampler: *mut sys::CUpti_PmSampling_Object, image: &mut [u8]) -> Result<(), String> {
    let mut init = params!(
        CUpti_PmSampling_CounterDataImage_Initialize_Params,
        pCounterData
    );
    init.pPmSamplingObject = sampler;
    init.counterDataSize = image.len();
    init.pCounterData = image.as_mut_ptr();
    // SAFETY: the image has the size CUPTI gave for this sampler.
    check(
        unsafe { sys::cuptiPmSamplingCounterDataImageInitialize(&mut init) },
        "cuptiPmSamplingCounterDataImageInitialize",
    )
}

/// `cuptiDeviceGetTimestamp(context, *timestamp)`: the device's clock. CUDA 13's headers
/// dropped it with the event API; where the library still exports it, it is used.
type DeviceTimestamp = unsafe extern "C" fn(*mut c_void, *mut u64) -> CUptiResult;

/// Spools a pair of readings of CUPTI's clock and the device's, taken back to back, so the
/// collector can put sample times (the device's clock) on CUPTI's. Without
/// `cuptiDeviceGetTimestamp` nothing is spooled and the times are taken as they are (the
/// collector then checks how much of the counted traffic falls inside recorded GPU work).
fn clock_pair(t: &'static Tracer, ordinal: u32, context: usize) {
    // SAFETY: looking a symbol up in the loaded libcupti; its C signature is as above.
    let f: Option<DeviceTimestamp> =
        unsafe { sys::culib().get::<DeviceTimestamp>(b"cuptiDeviceGetTimestamp") }
            .ok()
            .map(|s| *s);
    let Some(f) = f else {
        debug!("no cuptiDeviceGetTimestamp: sample times taken as CUPTI's");
        return;
    };
    let (mut a, mut gpu, mut b) = (0u64, 0u64, 0u64);
    // SAFETY: valid out pointers; a context CUPTI reported.
    let r = unsafe {
        sys::cuptiGetTimestamp(&mut a);
        let r = f(context as *mut c_void, &mut gpu);
        sys::cuptiGetTimestamp(&mut b);
        r
    };
    if r != CUptiResult::CUPTI_SUCCESS {
        debug!("cuptiDeviceGetTimestamp: {r:?}: sample times taken as CUPTI's");
        return;
    }
    let cupti = a / 2 + b / 2;
    debug!(
        "device {ordinal}: clocks cupti {cupti} gpu {gpu} (cupti - gpu = {} ns, read in {} ns)",
        cupti as i64 - gpu as i64,
        b - a
    );
    t.record(|e| {
        let at = e.begin(tag::GPU_CLOCK);
        e.u32(ordinal);
        e.u64(cupti);
        e.u64(gpu);
        e.end(at);
    });
}

/// Decodes what the hardware buffer holds and spools it, until the buffer is empty.
fn decode(t: &'static Tracer, d: &mut Device) {
    for _round in 0..64 {
        let mut p = params!(CUpti_PmSampling_DecodeData_Params, overflow);
        p.pPmSamplingObject = d.sampler;
        p.pCounterDataImage = d.image.as_mut_ptr();
        p.counterDataImageSize = d.image.len();
        // SAFETY: a started sampler and its counter data image.
        let r = unsafe { sys::cuptiPmSamplingDecodeData(&mut p) };
        if r != CUptiResult::CUPTI_SUCCESS {
            if !d.overflowed {
                d.overflowed = true;
                status(
                    t,
                    1,
                    &format!(
                        "PM sampling on device {}: decoding failed ({}); counters after this \
                         point are missing",
                        d.ordinal,
                        refusal(r)
                    ),
                );
            }
            return;
        }
        // SAFETY: read as plain integers: CUPTI may write values our enums do not name.
        let stop = unsafe { std::ptr::addr_of!(p.decodeStopReason).cast::<u32>().read() };
        let overflow = p.overflow != 0;
        if overflow && !d.overflowed {
            d.overflowed = true;
            status(
                t,
                1,
                &format!(
                    "PM sampling on device {}: the hardware buffer overflowed, samples were \
                     lost (a longer interval, FUSEPROF_METRICS_INTERVAL_NS, avoids it)",
                    d.ordinal
                ),
            );
        }
        let mut info = params!(
            CUpti_PmSampling_GetCounterDataInfo_Params,
            numCompletedSamples
        );
        info.pCounterDataImage = d.image.as_ptr();
        info.counterDataImageSize = d.image.len();
        // SAFETY: a valid parameter struct and image.
        if unsafe { sys::cuptiPmSamplingGetCounterDataInfo(&mut info) }
            != CUptiResult::CUPTI_SUCCESS
        {
            return;
        }
        let completed = info.numCompletedSamples;
        if completed > 0 {
            spool_samples(t, d, completed);
        }
        // The image is initialized afresh by CUPTI (not restored from a copy: it may hold
        // state of the sampler's own).
        if let Err(e) = init_image(d.sampler, &mut d.image) {
            status(t, 1, &format!("PM sampling on device {}: {e}", d.ordinal));
            return;
        }
        // 2: END_OF_RECORDS; 1: the image filled up first, so go on.
        if stop != 1 {
            return;
        }
    }
}

fn spool_samples(t: &'static Tracer, d: &mut Device, completed: usize) {
    let n = d.names.len();
    let mut ptrs: Vec<*const c_char> = d.names.iter().map(|x| x.as_ptr()).collect();
    let mut values = vec![0f64; n];
    let mut rows: Vec<(u64, u64, Vec<f64>)> = Vec::with_capacity(completed);
    for i in 0..completed {
        let mut s = params!(
            CUpti_PmSampling_CounterData_GetSampleInfo_Params,
            endTimestamp
        );
        s.pPmSamplingObject = d.sampler;
        s.pCounterDataImage = d.image.as_ptr();
        s.counterDataImageSize = d.image.len();
        s.sampleIndex = i;
        // SAFETY: a valid parameter struct and image.
        if unsafe { sys::cuptiPmSamplingCounterDataGetSampleInfo(&mut s) }
            != CUptiResult::CUPTI_SUCCESS
        {
            continue;
        }
        let mut ev = params!(
            CUpti_Profiler_Host_EvaluateToGpuValues_Params,
            pMetricValues
        );
        ev.pHostObject = d.host;
        ev.pCounterDataImage = d.image.as_ptr();
        ev.counterDataImageSize = d.image.len();
        ev.rangeIndex = i;
        ev.ppMetricNames = ptrs.as_mut_ptr();
        ev.numMetrics = n;
        ev.pMetricValues = values.as_mut_ptr();
        // SAFETY: n names and n values; the image holds sample i.
        if unsafe { sys::cuptiProfilerHostEvaluateToGpuValues(&mut ev) }
            != CUptiResult::CUPTI_SUCCESS
        {
            continue;
        }
        rows.push((s.startTimestamp, s.endTimestamp, values.clone()));
    }
    if d.samples == 0 {
        if let Some(first) = rows.first() {
            debug!(
                "device {}: first sample {}..{} values {:?}",
                d.ordinal, first.0, first.1, first.2
            );
        }
    }
    d.samples += rows.len() as u64;
    let ordinal = d.ordinal;
    // Keep each record under a few MB.
    for chunk in rows.chunks(8192) {
        t.record(|e| {
            let at = e.begin(tag::COUNTER_SAMPLES);
            e.u32(ordinal);
            e.u32(n as u32);
            e.u32(chunk.len() as u32);
            for (start, end, vals) in chunk {
                e.u64(*start);
                e.u64(*end);
                for v in vals {
                    e.f64(*v);
                }
            }
            e.end(at);
        });
    }
}
