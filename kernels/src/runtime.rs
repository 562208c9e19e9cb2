//! Run-time side: finding the driver, compiling sources with NVRTC, caching modules, launching.
//!
//! Nothing here links against CUDA: cudarc loads libcuda and libnvrtc by name when first asked,
//! and every entry point checks that they exist first so a machine without them gets
//! [`Error::DriverNotFound`] / [`Error::NvrtcNotFound`] instead of a panic.
//!
//! Launches go to the *caller's* current context and a raw `CUstream`, so a PyTorch process can
//! hand its own stream over (PyTorch uses the device's primary context, which is what we retain
//! when no context is current).

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys as cu;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// A raw device address (`CUdeviceptr`).
pub type DevPtr = u64;

/// A raw CUDA stream handle; null is the legacy default stream.
#[derive(Debug, Clone, Copy)]
pub struct RawStream(pub *mut c_void);

impl RawStream {
    pub fn null() -> Self {
        Self(std::ptr::null_mut())
    }
}

/// One `.cu` file and how it is built: the kernel family's module that launches its kernels
/// declares it. A module is compiled per (context, file, dtype, variant) on first use.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// The file's name under `src/cu/` (NVRTC's name for it in error messages).
    pub file_name: &'static str,
    /// The file's text (see [`crate::sources`]).
    pub text: &'static str,
    /// The macro a variant sets and the variants there are (`HEAD_DIM`, 32 and 64 for the
    /// attention sources); `None`: one build, variant 0.
    pub variants: Option<(&'static str, &'static [u32])>,
    /// Built for the architecture-specific target (`compute_90a`: wgmma, TMA) and run only on
    /// that architecture, `(9, 0)`; `None`: any sm_80+ GPU, plain `compute_XY`.
    pub arch_specific: Option<(i32, i32)>,
    /// The kernels the file defines (checked by a test; [`Gpu::precompile`] loads the first).
    pub kernels: &'static [&'static str],
}

impl Source {
    /// The variants a module is compiled for.
    pub fn variant_list(&self) -> &'static [u32] {
        self.variants.map_or(&[0], |(_, v)| v)
    }

    /// True when this source's kernels run on a GPU of compute capability `arch`.
    pub fn runs_on(&self, arch: (i32, i32)) -> bool {
        self.arch_specific.is_none_or(|a| a == arch)
    }

    /// The text handed to NVRTC: the file with each `#include "NAME"` of a crate header replaced
    /// by the header's text (once per header; `#line` directives keep error positions true).
    pub fn full_text(&self) -> Result<String> {
        let mut out = String::new();
        let mut seen = Vec::new();
        expand_includes(self.file_name, self.text, &mut seen, &mut out)?;
        Ok(out)
    }

    /// NVRTC options for one (dtype, variant) build, `arch` being e.g. `compute_90`.
    pub fn compile_options(&self, dtype: DType, variant: u32, arch: &str) -> Vec<String> {
        let mut o = vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".to_string(),
            "-lineinfo".to_string(),
            // The kernels have no host code; without this NVRTC takes a generic lambda in a
            // kernel (fmha_sm90.cu's wg_dispatch callers) for a host function.
            "--device-as-default-execution-space".to_string(),
            format!("-DFP_BF16={}", u32::from(dtype == DType::BF16)),
        ];
        if let Some((name, _)) = self.variants {
            o.push(format!("-D{name}={variant}"));
        }
        if arch.ends_with('a') {
            // Kernels that need the arch-specific features (wgmma) test this as well as
            // NVRTC's own __CUDA_ARCH_FEAT_* macros.
            o.push("-DFUSEPROF_ARCH_FEATURES=1".to_string());
        }
        o.extend(tuning_defines().iter().map(|(k, v)| format!("-D{k}={v}")));
        o
    }

    /// The NVRTC target on a GPU of compute capability `arch`: `compute_XY`, or `compute_90a`
    /// for an architecture-specific source on sm_90.
    pub fn nvrtc_arch(&self, arch: (i32, i32)) -> String {
        let feature = if self.arch_specific == Some(arch) {
            "a"
        } else {
            ""
        };
        format!("compute_{}{}{feature}", arch.0, arch.1)
    }
}

/// Append `text` (file `file`) to `out` with its crate-header includes expanded.
fn expand_includes(
    file: &str,
    text: &'static str,
    seen: &mut Vec<&'static str>,
    out: &mut String,
) -> Result<()> {
    out.push_str(&format!("#line 1 \"{file}\"\n"));
    for (i, line) in text.lines().enumerate() {
        let include = line
            .trim()
            .strip_prefix("#include")
            .map(|rest| rest.trim().trim_matches('"'));
        let Some(name) = include else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (name, header) = crate::sources::HEADERS
            .iter()
            .find(|(n, _)| *n == name)
            .copied()
            .ok_or_else(|| Error::Compile {
                kernel: file.to_string(),
                log: format!("line {}: no crate header named {name}", i + 1),
            })?;
        if seen.contains(&name) {
            out.push('\n'); // keeps the line count
        } else {
            seen.push(name);
            expand_includes(name, header, seen, out)?;
            out.push_str(&format!("#line {} \"{file}\"\n", i + 2));
        }
    }
    Ok(())
}

/// Environment variable of switches for the kernels: `FUSEPROF_KERNELS_DEFINES="FMHA_SM90=0"`.
/// Each `NAME=VALUE` (a non-negative integer) is passed to NVRTC as `-DNAME=VALUE`, and the
/// launchers read the same values through [`tuning_value`], so a kernel and its launch always
/// agree. The one switch shipped is `FMHA_SM90` (kernels/README.md); a kernel
/// engineer adds an `#ifndef NAME` constant to try a variant on a GPU without a rebuild.
pub const TUNING_ENV: &str = "FUSEPROF_KERNELS_DEFINES";

/// The `NAME=VALUE` pairs of [`TUNING_ENV`]; malformed entries are ignored with a warning.
pub fn parse_tuning(spec: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for item in spec.split_whitespace() {
        let parsed = item.split_once('=').and_then(|(k, v)| {
            let ok = !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            ok.then_some(())?;
            Some((k.to_string(), v.parse::<u32>().ok()?))
        });
        match parsed {
            Some(kv) => out.push(kv),
            None => tracing::warn!(entry = item, "ignoring malformed {TUNING_ENV} entry"),
        }
    }
    out
}

fn tuning_defines() -> &'static [(String, u32)] {
    static T: OnceLock<Vec<(String, u32)>> = OnceLock::new();
    T.get_or_init(|| {
        std::env::var(TUNING_ENV)
            .map(|s| parse_tuning(&s))
            .unwrap_or_default()
    })
}

/// The value of tuning constant `name`: from [`TUNING_ENV`] when set there, else `default`
/// (which must equal the source's own `#define` default).
pub fn tuning_value(name: &str, default: u32) -> u32 {
    tuning_defines()
        .iter()
        .find(|(k, _)| k == name)
        .map_or(default, |(_, v)| *v)
}

/// Grid and block of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

impl LaunchConfig {
    pub fn linear(grid: u64, block: u32) -> Result<Self> {
        if grid == 0 || grid > i32::MAX as u64 {
            return Err(crate::error::invalid(format!(
                "grid of {grid} blocks is outside 1..=2^31-1"
            )));
        }
        Ok(Self {
            grid: (grid as u32, 1, 1),
            block: (block, 1, 1),
            shared_bytes: 0,
        })
    }
}

/// Kernel arguments, each kept in an 8-byte slot (or, for a tensor map, a 128-byte one) that
/// outlives the launch call.
#[derive(Default)]
pub(crate) struct Args {
    slots: Vec<Slot>,
}

enum Slot {
    Word(u64),
    TensorMap(Box<cu::CUtensorMap>),
}

impl Args {
    pub fn ptr(mut self, p: DevPtr) -> Self {
        self.slots.push(Slot::Word(p));
        self
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.slots.push(Slot::Word(v as u32 as u64));
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.slots.push(Slot::Word(v as u64));
        self
    }
    pub fn f32(mut self, v: f32) -> Self {
        self.slots.push(Slot::Word(v.to_bits() as u64));
        self
    }
    /// A `CUtensorMap` passed by value (a `__grid_constant__` parameter).
    pub fn tensor_map(mut self, m: cu::CUtensorMap) -> Self {
        self.slots.push(Slot::TensorMap(Box::new(m)));
        self
    }
    fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots
            .iter_mut()
            .map(|s| match s {
                Slot::Word(w) => w as *mut u64 as *mut c_void,
                Slot::TensorMap(m) => m.as_mut() as *mut cu::CUtensorMap as *mut c_void,
            })
            .collect()
    }
}

/// A tiled TMA tensor map: `dims` (innermost first, elements), `strides` (bytes, of dims 1..),
/// `boxdim` (elements), 128-byte swizzle, out-of-bounds elements read as zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmaGeometry {
    pub dims: [u64; 4],
    pub strides: [u64; 3],
    pub boxdim: [u32; 4],
}

/// Encode `geometry` over the device buffer at `base` (16-byte aligned) for 16-bit `dtype`.
pub(crate) fn encode_tensor_map(
    base: DevPtr,
    dtype: DType,
    geometry: &TmaGeometry,
) -> Result<cu::CUtensorMap> {
    let mut map = cu::CUtensorMap { opaque: [0; 16] };
    let data_type = match dtype {
        DType::F16 => cu::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => cu::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    };
    let element_strides = [1u32; 4];
    // SAFETY: every array has the rank (4, strides 3) the call reads; `map` is written only.
    check(
        unsafe {
            cu::cuTensorMapEncodeTiled(
                &mut map,
                data_type,
                4,
                base as *mut c_void,
                geometry.dims.as_ptr(),
                geometry.strides.as_ptr(),
                geometry.boxdim.as_ptr(),
                element_strides.as_ptr(),
                cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                cu::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        },
        "cuTensorMapEncodeTiled",
    )?;
    Ok(map)
}

pub(crate) fn check(res: cu::CUresult, call: &'static str) -> Result<()> {
    if res == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Cuda {
            call,
            code: format!("{res:?}"),
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct ModuleKey {
    ctx: usize,
    file: &'static str,
    dtype: DType,
    variant: u32,
}

struct Module {
    handle: cu::CUmodule,
    functions: HashMap<&'static str, cu::CUfunction>,
}

#[derive(Default)]
struct State {
    modules: HashMap<ModuleKey, Module>,
    /// compute capability per device ordinal
    archs: HashMap<i32, (i32, i32)>,
    /// resident CTAs per (context, source, dtype, variant, kernel, block, dynamic smem)
    resident: HashMap<(ModuleKey, &'static str, u32, u32), u64>,
}

// SAFETY: the raw handles inside are only used while the mutex is held, and CUDA modules and
// functions may be used from any thread of the process.
unsafe impl Send for State {}

/// Handle to the process-wide kernel runtime: module cache, arch table.
pub struct Gpu {
    state: Mutex<State>,
}

static GPU: OnceLock<Gpu> = OnceLock::new();

/// True when libcuda can be loaded on this machine (does not initialise anything).
pub fn driver_present() -> bool {
    // SAFETY: only tries dlopen on the candidate library names.
    unsafe { cu::is_culib_present() }
}

/// True when libnvrtc can be loaded on this machine.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries dlopen on the candidate library names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

impl Gpu {
    /// The process-wide runtime, initialising the driver on first use.
    pub fn global() -> Result<&'static Gpu> {
        if let Some(g) = GPU.get() {
            return Ok(g);
        }
        if !driver_present() {
            return Err(Error::DriverNotFound);
        }
        if !nvrtc_present() {
            return Err(Error::NvrtcNotFound);
        }
        // SAFETY: the library is present; cuInit may be called any number of times.
        check(unsafe { cu::cuInit(0) }, "cuInit")?;
        let mut n = 0;
        // SAFETY: n is a valid out-pointer.
        check(unsafe { cu::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount")?;
        if n == 0 {
            return Err(Error::NoDevice);
        }
        Ok(GPU.get_or_init(|| Gpu {
            state: Mutex::new(State::default()),
        }))
    }

    /// The calling thread's current context, or device 0's primary context made current.
    pub(crate) fn current_context(&self) -> Result<(cu::CUcontext, i32)> {
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: ctx is a valid out-pointer.
        check(unsafe { cu::cuCtxGetCurrent(&mut ctx) }, "cuCtxGetCurrent")?;
        if ctx.is_null() {
            let mut dev = 0;
            // SAFETY: out-pointers are valid; the primary context is retained for the life of
            // the process on purpose (PyTorch shares it).
            unsafe {
                check(cu::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
                check(
                    cu::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                    "cuDevicePrimaryCtxRetain",
                )?;
                check(cu::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
            }
        }
        let mut dev = 0;
        // SAFETY: a context is current; dev is a valid out-pointer.
        check(unsafe { cu::cuCtxGetDevice(&mut dev) }, "cuCtxGetDevice")?;
        Ok((ctx, dev))
    }

    fn arch_of(state: &mut State, dev: i32) -> Result<(i32, i32)> {
        if let Some(a) = state.archs.get(&dev) {
            return Ok(*a);
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: valid device ordinal from cuCtxGetDevice, valid out-pointers.
        unsafe {
            check(
                cu::cuDeviceGetAttribute(
                    &mut major,
                    cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                    dev,
                ),
                "cuDeviceGetAttribute",
            )?;
            check(
                cu::cuDeviceGetAttribute(
                    &mut minor,
                    cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                    dev,
                ),
                "cuDeviceGetAttribute",
            )?;
        }
        if major < 8 {
            return Err(Error::UnsupportedArch { major, minor });
        }
        state.archs.insert(dev, (major, minor));
        Ok((major, minor))
    }

    /// Compute capability of the current context's device.
    pub(crate) fn current_arch(&self) -> Result<(i32, i32)> {
        let (_, dev) = self.current_context()?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Self::arch_of(&mut state, dev)
    }

    fn compile(source: &Source, dtype: DType, variant: u32, arch: (i32, i32)) -> Result<CString> {
        let ptx = compile_ptx(source, dtype, variant, arch)?;
        CString::new(ptx).map_err(|_| Error::Compile {
            kernel: source.file_name.to_string(),
            log: "PTX contains a NUL byte".into(),
        })
    }

    /// Look up (compiling and loading on first use) a kernel in the current context.
    pub(crate) fn function(
        &self,
        source: &Source,
        dtype: DType,
        variant: u32,
        name: &'static str,
    ) -> Result<cu::CUfunction> {
        let (ctx, dev) = self.current_context()?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let key = ModuleKey {
            ctx: ctx as usize,
            file: source.file_name,
            dtype,
            variant,
        };
        if !state.modules.contains_key(&key) {
            let arch = Self::arch_of(&mut state, dev)?;
            let ptx = Self::compile(source, dtype, variant, arch)?;
            let mut handle: cu::CUmodule = std::ptr::null_mut();
            // SAFETY: ptx is a NUL-terminated PTX image; the context is current.
            check(
                unsafe { cu::cuModuleLoadData(&mut handle, ptx.as_ptr() as *const c_void) },
                "cuModuleLoadData",
            )?;
            state.modules.insert(
                key,
                Module {
                    handle,
                    functions: HashMap::new(),
                },
            );
        }
        let module = state.modules.get_mut(&key).expect("inserted above");
        if let Some(f) = module.functions.get(name) {
            return Ok(*f);
        }
        let cname = CString::new(name).expect("kernel names have no NUL");
        let mut f: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: module handle is live; cname is NUL-terminated.
        check(
            unsafe { cu::cuModuleGetFunction(&mut f, module.handle, cname.as_ptr()) },
            "cuModuleGetFunction",
        )?;
        module.functions.insert(name, f);
        Ok(f)
    }

    /// How many CTAs of `name` (with `block` threads and `shared_bytes` of dynamic shared
    /// memory) the current device keeps resident at once: SMs x CTAs per SM. Persistent kernels
    /// size their grid with it.
    pub(crate) fn resident_ctas(
        &self,
        source: &Source,
        dtype: DType,
        variant: u32,
        name: &'static str,
        block: u32,
        shared_bytes: u32,
    ) -> Result<u64> {
        let f = self.function(source, dtype, variant, name)?;
        let (ctx, dev) = self.current_context()?;
        let key = (
            ModuleKey {
                ctx: ctx as usize,
                file: source.file_name,
                dtype,
                variant,
            },
            name,
            block,
            shared_bytes,
        );
        if let Some(n) = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resident
            .get(&key)
        {
            return Ok(*n);
        }
        let (mut sms, mut per_sm) = (0, 0);
        // SAFETY: f is a loaded function of the current context; out-pointers are valid.
        unsafe {
            set_dynamic_smem(f, shared_bytes)?;
            check(
                cu::cuDeviceGetAttribute(
                    &mut sms,
                    cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                    dev,
                ),
                "cuDeviceGetAttribute",
            )?;
            check(
                cu::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &mut per_sm,
                    f,
                    block as i32,
                    shared_bytes as usize,
                ),
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )?;
        }
        let n = (sms.max(1) as u64) * (per_sm.max(1) as u64);
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resident
            .insert(key, n);
        Ok(n)
    }

    /// Launch `name` from `source` on `stream`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number and type, and every device
    /// pointer in it must be valid for the extent the kernel touches under `cfg`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch(
        &self,
        source: &Source,
        dtype: DType,
        variant: u32,
        name: &'static str,
        cfg: LaunchConfig,
        stream: RawStream,
        mut args: Args,
    ) -> Result<()> {
        let f = self.function(source, dtype, variant, name)?;
        // SAFETY: f is a loaded function of the current context.
        unsafe { set_dynamic_smem(f, cfg.shared_bytes)? };
        let mut ptrs = args.pointers();
        // SAFETY: upheld by the caller (argument list and pointer extents); `ptrs` points into
        // `args`, which lives until after the call.
        check(
            unsafe {
                cu::cuLaunchKernel(
                    f,
                    cfg.grid.0,
                    cfg.grid.1,
                    cfg.grid.2,
                    cfg.block.0,
                    cfg.block.1,
                    cfg.block.2,
                    cfg.shared_bytes,
                    stream.0 as cu::CUstream,
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        )?;
        if std::env::var_os("FUSEPROF_KERNELS_SYNC").is_some() {
            // SAFETY: stream is the caller's live stream.
            check(
                unsafe { cu::cuStreamSynchronize(stream.0 as cu::CUstream) },
                "cuStreamSynchronize",
            )?;
        }
        Ok(())
    }

    /// Compile and load every (source, dtype, variant) of `sources` that runs on the current
    /// device now, returning each failure.
    ///
    /// Used by the device check script so that one run reports every compile error at once.
    pub fn precompile(&self, sources: &[Source]) -> Vec<Error> {
        let arch = match self.current_arch() {
            Ok(a) => a,
            Err(e) => return vec![e],
        };
        let mut errors = Vec::new();
        for source in sources.iter().filter(|s| s.runs_on(arch)) {
            for dtype in [DType::F16, DType::BF16] {
                for &variant in source.variant_list() {
                    if let Err(e) = self.function(source, dtype, variant, source.kernels[0]) {
                        errors.push(e);
                    }
                }
            }
        }
        errors
    }
}

/// Compile `source` to PTX with NVRTC for a GPU of compute capability `arch`, as the runtime
/// does before loading it. Needs libnvrtc, not a GPU.
pub fn compile_ptx(
    source: &Source,
    dtype: DType,
    variant: u32,
    arch: (i32, i32),
) -> Result<String> {
    if !nvrtc_present() {
        return Err(Error::NvrtcNotFound);
    }
    let arch_name = source.nvrtc_arch(arch);
    let opts = cudarc::nvrtc::CompileOptions {
        options: source.compile_options(dtype, variant, &arch_name),
        name: Some(source.file_name.to_string()),
        ..Default::default()
    };
    let kernel = format!("{} ({}, variant {variant})", source.file_name, dtype.name());
    tracing::debug!(%kernel, arch = %arch_name, "compiling with NVRTC");
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(source.full_text()?, opts).map_err(|e| {
        let log = match &e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        };
        Error::Compile {
            kernel: kernel.clone(),
            log,
        }
    })?;
    Ok(ptx.to_src())
}

/// Milliseconds per call of `f` on `stream`: one untimed call, then `reps` calls between two
/// events. Synchronises with the stream (used once per GEMM shape when tuning).
///
/// # Safety
/// `stream` must belong to the current context and `f` must only enqueue work on it.
pub(crate) unsafe fn time_on_stream(
    stream: RawStream,
    reps: u32,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f32> {
    let s = stream.0 as cu::CUstream;
    let mut ev = [std::ptr::null_mut(); 2];
    for e in ev.iter_mut() {
        // SAFETY: valid out-pointer; a context is current (the caller's contract).
        check(unsafe { cu::cuEventCreate(e, 0) }, "cuEventCreate")?;
    }
    let timed = (|| {
        f()?;
        // SAFETY: live events of the current context, on the caller's stream.
        unsafe {
            check(cu::cuEventRecord(ev[0], s), "cuEventRecord")?;
            for _ in 0..reps.max(1) {
                f()?;
            }
            check(cu::cuEventRecord(ev[1], s), "cuEventRecord")?;
            check(cu::cuEventSynchronize(ev[1]), "cuEventSynchronize")?;
            let mut ms = 0f32;
            check(
                cu::cuEventElapsedTime_v2(&mut ms, ev[0], ev[1]),
                "cuEventElapsedTime",
            )?;
            Ok(ms / reps.max(1) as f32)
        }
    })();
    for e in ev {
        // SAFETY: created above, no longer used.
        unsafe { cu::cuEventDestroy_v2(e) };
    }
    timed
}

/// Above 48 KiB a kernel must opt in to its dynamic shared memory.
///
/// # Safety
/// `f` must be a loaded function of the current context.
unsafe fn set_dynamic_smem(f: cu::CUfunction, shared_bytes: u32) -> Result<()> {
    if shared_bytes > 48 * 1024 {
        // SAFETY: upheld by the caller.
        check(
            unsafe {
                cu::cuFuncSetAttribute(
                    f,
                    cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            },
            "cuFuncSetAttribute",
        )?;
    }
    Ok(())
}

/// Allocate device memory in the current context (used for cuBLASLt's workspace).
pub(crate) fn alloc(bytes: usize) -> Result<DevPtr> {
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: p is a valid out-pointer; a context is current (callers went through Gpu).
    check(unsafe { cu::cuMemAlloc_v2(&mut p, bytes) }, "cuMemAlloc")?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_keep_values_in_slots() {
        let mut a = Args::default().ptr(0xdead_beef).i32(-3).f32(1.5).i64(-7);
        let p = a.pointers();
        assert_eq!(p.len(), 4);
        // SAFETY: pointers point at the live slots of `a`.
        unsafe {
            assert_eq!(*(p[0] as *const u64), 0xdead_beef);
            assert_eq!(*(p[1] as *const i32), -3);
            assert_eq!(*(p[2] as *const f32), 1.5);
            assert_eq!(*(p[3] as *const i64), -7);
        }
    }

    #[test]
    fn tuning_spec_parses_pairs_and_skips_junk() {
        assert_eq!(
            parse_tuning(" VPT=4  EW_THREADS=128 bad =3 X=-1 Y=z RPT=1"),
            vec![
                ("VPT".to_string(), 4),
                ("EW_THREADS".to_string(), 128),
                ("RPT".to_string(), 1)
            ]
        );
        assert!(parse_tuning("").is_empty());
    }

    #[test]
    fn compile_options_name_arch_dtype_and_variant() {
        let fmha = Source {
            file_name: "t.cu",
            text: "",
            variants: Some(("HEAD_DIM", &[32, 64])),
            arch_specific: Some((9, 0)),
            kernels: &["k"],
        };
        assert_eq!(fmha.nvrtc_arch((9, 0)), "compute_90a");
        assert_eq!(fmha.nvrtc_arch((8, 9)), "compute_89");
        assert!(fmha.runs_on((9, 0)) && !fmha.runs_on((10, 0)));
        assert!(fmha
            .compile_options(DType::F16, 64, "compute_90a")
            .contains(&"-DFUSEPROF_ARCH_FEATURES=1".to_string()));
        let o = fmha.compile_options(DType::BF16, 64, "compute_90");
        assert!(!o.iter().any(|x| x.contains("ARCH_FEATURES")));
        assert!(o.contains(&"--gpu-architecture=compute_90".to_string()));
        assert!(o.contains(&"-DFP_BF16=1".to_string()));
        assert!(o.contains(&"-DHEAD_DIM=64".to_string()));
        // fmha_sm90.cu's kernels call generic lambdas, which NVRTC otherwise takes for host code
        assert!(o.contains(&"--device-as-default-execution-space".to_string()));
        let plain = Source {
            variants: None,
            arch_specific: None,
            ..fmha
        };
        assert_eq!(plain.variant_list(), &[0]);
        assert_eq!(plain.nvrtc_arch((9, 0)), "compute_90");
        assert!(plain.runs_on((8, 0)));
        let w = plain.compile_options(DType::F16, 0, "compute_80");
        assert!(w.contains(&"-DFP_BF16=0".to_string()));
        assert!(!w.iter().any(|s| s.starts_with("-DHEAD_DIM")));
    }

    #[test]
    fn includes_expand_once_with_line_markers() {
        let s = Source {
            file_name: "t.cu",
            text: "#include \"fmha.cuh\"\n#include \"common.cuh\"\nint x;\n",
            variants: None,
            arch_specific: None,
            kernels: &[],
        };
        let t = s.full_text().unwrap();
        assert!(!t.lines().any(|l| l.trim_start().starts_with("#include")));
        // fmha.cuh includes common.cuh; the second include of it adds nothing
        assert_eq!(
            t.matches("__device__ __forceinline__ float to_f32").count(),
            1
        );
        assert!(t.starts_with("#line 1 \"t.cu\"\n#line 1 \"fmha.cuh\""));
        assert!(t.ends_with("#line 2 \"t.cu\"\n\nint x;\n"));
        let missing = Source {
            text: "#include \"nope.cuh\"\n",
            ..s
        };
        assert!(missing
            .full_text()
            .unwrap_err()
            .to_string()
            .contains("nope.cuh"));
    }

    #[test]
    fn launch_config_rejects_empty_and_huge_grids() {
        assert!(LaunchConfig::linear(0, 128).is_err());
        assert!(LaunchConfig::linear(1 << 31, 128).is_err());
        assert_eq!(LaunchConfig::linear(5, 128).unwrap().grid, (5, 1, 1));
    }

    #[test]
    fn runtime_without_driver_is_a_clean_error() {
        // On a machine without libcuda this must be DriverNotFound (never a panic); on a GPU
        // machine it succeeds. Either way the error, if any, is one line.
        match Gpu::global() {
            Ok(_) => assert!(driver_present()),
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n'), "{msg}");
                if !driver_present() {
                    assert!(matches!(e, Error::DriverNotFound), "{msg}");
                }
            }
        }
    }
}
