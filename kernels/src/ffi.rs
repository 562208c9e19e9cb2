//! C ABI: what `python/fuseprof_kernels.py` calls through ctypes.
//!
//! Every function takes raw device addresses (`tensor.data_ptr()`), sizes as `int64`, a dtype
//! code (0 = fp16, 1 = bf16) and a `CUstream` (`torch.cuda.current_stream().cuda_stream`), and
//! returns a status: 0 on success, otherwise one of the `FPK_ERR_*` codes with a one-line message
//! in [`fpk_last_error`]. Arguments are checked before the GPU is touched, and no panic crosses
//! the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::attention::{
    launch_attention, launch_attention_combine, AttentionBuffers, AttentionMask, AttentionParams,
};
use crate::dtype::DType;
use crate::elementwise::{
    launch_bias_act, launch_bias_residual, launch_pad_copy, Activation, PadCopy,
};
use crate::error::{invalid, Error, Result};
use crate::gemm::{launch_gemm, BLayout, Epilogue, GemmBuffers, GemmParams};
use crate::mlp::{launch_ln_mlp_residual, MlpBuffers, MlpShape};
use crate::runtime::{DevPtr, Gpu, RawStream};
use crate::window::{
    launch_ln_shift_partition, launch_window_reverse_residual, LnShiftPartitionBuffers,
    WindowReverseBuffers, WindowShape,
};

pub const FPK_OK: i32 = 0;
pub const FPK_ERR_INVALID: i32 = 1;
pub const FPK_ERR_NO_DRIVER: i32 = 2;
pub const FPK_ERR_NO_LIBRARY: i32 = 3;
pub const FPK_ERR_NO_DEVICE: i32 = 4;
pub const FPK_ERR_COMPILE: i32 = 5;
pub const FPK_ERR_CUDA: i32 = 6;
pub const FPK_ERR_CUBLAS: i32 = 7;
pub const FPK_ERR_UNSUPPORTED: i32 = 8;
pub const FPK_ERR_PANIC: i32 = 99;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn code_of(e: &Error) -> i32 {
    match e {
        Error::DriverNotFound => FPK_ERR_NO_DRIVER,
        Error::NvrtcNotFound | Error::CublasLtNotFound => FPK_ERR_NO_LIBRARY,
        Error::NoDevice => FPK_ERR_NO_DEVICE,
        Error::UnsupportedArch { .. } => FPK_ERR_UNSUPPORTED,
        Error::InvalidArgument(_) => FPK_ERR_INVALID,
        Error::Compile { .. } => FPK_ERR_COMPILE,
        Error::Cuda { .. } => FPK_ERR_CUDA,
        Error::Cublas { .. } => FPK_ERR_CUBLAS,
    }
}

fn set_error(msg: String) {
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
}

/// Run `f`, turning errors and panics into status codes.
fn guard(f: impl FnOnce() -> Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => FPK_OK,
        Ok(Err(e)) => {
            let code = code_of(&e);
            set_error(e.to_string());
            code
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_error(format!("internal panic: {msg}"));
            FPK_ERR_PANIC
        }
    }
}

fn usize_arg(name: &str, v: i64) -> Result<usize> {
    if v < 0 {
        return Err(invalid(format!("{name} must be >= 0 (got {v})")));
    }
    Ok(v as usize)
}

fn ptr_arg(name: &str, p: DevPtr) -> Result<DevPtr> {
    if p == 0 {
        return Err(invalid(format!("{name} is a null pointer")));
    }
    Ok(p)
}

fn opt_ptr(p: DevPtr) -> Option<DevPtr> {
    (p != 0).then_some(p)
}

/// Copy the calling thread's last error message into `buf` (NUL-terminated, truncated to
/// `len`); returns the message's full length in bytes.
///
/// # Safety
/// `buf` must be null or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn fpk_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|l| {
        let msg = l.borrow();
        if !buf.is_null() && len > 0 {
            let n = msg.len().min(len - 1);
            // SAFETY: caller guarantees buf holds len bytes; n < len.
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        msg.len()
    })
}

/// ABI version; bump on any signature change.
#[no_mangle]
pub extern "C" fn fpk_abi_version() -> i32 {
    1
}

/// Find the driver and NVRTC and make a context current. Returns a status.
#[no_mangle]
pub extern "C" fn fpk_init() -> i32 {
    guard(|| Gpu::global().and_then(|g| g.current_context()).map(|_| ()))
}

/// Compile every kernel variant now; on failure the message lists every compile error.
#[no_mangle]
pub extern "C" fn fpk_precompile_all() -> i32 {
    guard(|| {
        let errors = Gpu::global()?.precompile(&crate::all_sources());
        if errors.is_empty() {
            return Ok(());
        }
        let joined = errors
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n---\n");
        Err(Error::Compile {
            kernel: format!("{} module(s)", errors.len()),
            log: joined,
        })
    })
}

/// Fused attention; see [`crate::attention`]. `mask_kind`: 0 none, 1 windows
/// (`[n_mask, seq, seq]`), 2 key padding (`[batch, seq]`), 3 a combined additive tensor
/// `[n_mask, heads, seq, padded_seq]` from [`fpk_attention_combine`] (bias must then be 0).
/// `bias` may be 0.
///
/// # Safety
/// Pointers must be device allocations of the extents [`AttentionParams::sizes`] gives.
#[no_mangle]
pub unsafe extern "C" fn fpk_attention(
    dtype: i32,
    qkv: DevPtr,
    out: DevPtr,
    bias: DevPtr,
    mask: DevPtr,
    batch: i64,
    seq: i64,
    heads: i64,
    head_dim: i64,
    mask_kind: i32,
    n_mask: i64,
    scale: f32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let mask_kind = match mask_kind {
            0 => AttentionMask::None,
            1 => AttentionMask::Windows {
                n_windows: usize_arg("n_mask", n_mask)?,
            },
            2 => AttentionMask::KeyPadding,
            3 => AttentionMask::Combined {
                n_entries: usize_arg("n_mask", n_mask)?,
            },
            k => return Err(invalid(format!("mask_kind {k} is not 0, 1, 2 or 3"))),
        };
        let p = AttentionParams {
            dtype: DType::from_code(dtype)?,
            batch: usize_arg("batch", batch)?,
            seq: usize_arg("seq", seq)?,
            heads: usize_arg("heads", heads)?,
            head_dim: usize_arg("head_dim", head_dim)?,
            scale,
            has_bias: bias != 0,
            mask: mask_kind,
        };
        p.validate()?;
        let bufs = AttentionBuffers {
            qkv: ptr_arg("qkv", qkv)?,
            out: ptr_arg("out", out)?,
            bias: opt_ptr(bias),
            mask: opt_ptr(mask),
        };
        // SAFETY: extents are the caller's contract, documented above.
        unsafe { launch_attention(Gpu::global()?, &p, &bufs, RawStream(stream)) }
    })
}

/// The backward pass of [`fpk_attention`] for seq <= 64 on a combined additive tensor
/// (`add`, mask_kind 3's `[n_mask, heads, seq, padded_seq]`) or none (`add` 0): writes `dqkv`
/// (the qkv layout) from `dout` (the output's gradient, `[batch * seq, heads * head_dim]`), and
/// adds the additive tensor's gradient, summed over the batch entries sharing an entry, into
/// `dadd` (`[n_mask, heads, seq, seq]` float32, zeroed by the caller; 0: not wanted).
///
/// # Safety
/// Pointers must be device allocations of those extents; `dqkv` and `dadd` not overlapping the
/// inputs.
#[no_mangle]
pub unsafe extern "C" fn fpk_attention_backward(
    dtype: i32,
    qkv: DevPtr,
    dout: DevPtr,
    add: DevPtr,
    dqkv: DevPtr,
    dadd: DevPtr,
    batch: i64,
    seq: i64,
    heads: i64,
    head_dim: i64,
    n_mask: i64,
    scale: f32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let p = AttentionParams {
            dtype: DType::from_code(dtype)?,
            batch: usize_arg("batch", batch)?,
            seq: usize_arg("seq", seq)?,
            heads: usize_arg("heads", heads)?,
            head_dim: usize_arg("head_dim", head_dim)?,
            scale,
            has_bias: false,
            mask: if add == 0 {
                AttentionMask::None
            } else {
                AttentionMask::Combined {
                    n_entries: usize_arg("n_mask", n_mask)?,
                }
            },
        };
        let bufs = crate::attention::BackwardBuffers {
            qkv: ptr_arg("qkv", qkv)?,
            dout: ptr_arg("dout", dout)?,
            add: opt_ptr(add),
            dqkv: ptr_arg("dqkv", dqkv)?,
            dadd: opt_ptr(dadd),
        };
        // SAFETY: extents are the caller's contract, documented above.
        unsafe {
            crate::attention::launch_attention_backward(
                Gpu::global()?,
                &p,
                &bufs,
                RawStream(stream),
            )
        }
    })
}

/// The backward pass of [`fpk_ln_shift_partition`]: `dx` (`[B, H, W, C]`) from `dy` (the
/// windows' gradient) and the forward's input `x`; `dgamma` and `dbeta` (`[C]` float32, zeroed by
/// the caller, added into; both 0: not wanted). `gamma` may be 0.
///
/// # Safety
/// Pointers must be device allocations of those extents; the outputs not overlapping the inputs.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fpk_ln_shift_partition_backward(
    dtype: i32,
    dy: DevPtr,
    x: DevPtr,
    gamma: DevPtr,
    dx: DevPtr,
    dgamma: DevPtr,
    dbeta: DevPtr,
    batch: i64,
    height: i64,
    width: i64,
    channels: i64,
    window: i64,
    shift: i64,
    eps: f32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let shape = window_shape(batch, height, width, channels, window, shift)?;
        let bufs = crate::window::LnShiftPartitionBackwardBuffers {
            dy: ptr_arg("dy", dy)?,
            x: ptr_arg("x", x)?,
            gamma: opt_ptr(gamma),
            dx: ptr_arg("dx", dx)?,
            dparams: (dgamma != 0 && dbeta != 0).then_some((dgamma, dbeta)),
        };
        // SAFETY: extents are the caller's contract.
        unsafe {
            crate::window::launch_ln_shift_partition_backward(
                Gpu::global()?,
                dtype,
                &shape,
                eps,
                &bufs,
                RawStream(stream),
            )
        }
    })
}

/// The backward pass of [`fpk_window_reverse_residual`]: `d_windows` (the windows' layout) and
/// `d_shortcut` (`[B, H, W, C]`, 0: not wanted) from `g_out` (the sum's gradient, 0: unused) and,
/// where the forward had a LayerNorm, `g_ln` (its output's gradient) with `y` (the sum, its
/// input); `dgamma` and `dbeta` as in [`fpk_ln_shift_partition_backward`].
///
/// # Safety
/// Pointers must be device allocations of those extents; the outputs not overlapping the inputs.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn fpk_window_reverse_residual_backward(
    dtype: i32,
    g_out: DevPtr,
    g_ln: DevPtr,
    y: DevPtr,
    gamma: DevPtr,
    d_shortcut: DevPtr,
    d_windows: DevPtr,
    dgamma: DevPtr,
    dbeta: DevPtr,
    batch: i64,
    height: i64,
    width: i64,
    channels: i64,
    window: i64,
    shift: i64,
    eps: f32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let shape = window_shape(batch, height, width, channels, window, shift)?;
        if (g_ln == 0) != (y == 0) {
            return Err(invalid("g_ln and y go together"));
        }
        let bufs = crate::window::WindowReverseBackwardBuffers {
            g_out: opt_ptr(g_out),
            layer_norm: (g_ln != 0).then_some((g_ln, y)),
            gamma: opt_ptr(gamma),
            d_windows: ptr_arg("d_windows", d_windows)?,
            d_shortcut: opt_ptr(d_shortcut),
            dparams: (dgamma != 0 && dbeta != 0).then_some((dgamma, dbeta)),
        };
        // SAFETY: extents are the caller's contract.
        unsafe {
            crate::window::launch_window_reverse_residual_backward(
                Gpu::global()?,
                dtype,
                &shape,
                eps,
                &bufs,
                RawStream(stream),
            )
        }
    })
}

/// Combine a bias `[heads, seq, seq]` (may be 0) and a window mask `[n_mask, seq, seq]` (may be
/// 0, then n_mask must be 1) into the `[n_mask, heads, seq, padded_seq]` additive tensor that
/// `fpk_attention` takes with mask_kind 3. Once per layer (seq <= 64).
///
/// # Safety
/// Pointers must be device allocations of those extents; `out` 16-byte aligned.
#[no_mangle]
pub unsafe extern "C" fn fpk_attention_combine(
    dtype: i32,
    bias: DevPtr,
    mask: DevPtr,
    out: DevPtr,
    seq: i64,
    heads: i64,
    n_mask: i64,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let (seq, heads, n_mask) = (
            usize_arg("seq", seq)?,
            usize_arg("heads", heads)?,
            usize_arg("n_mask", n_mask)?,
        );
        let out = ptr_arg("out", out)?;
        if bias == 0 && mask == 0 {
            return Err(invalid("combine needs a bias or a mask"));
        }
        // SAFETY: extents are the caller's contract, documented above.
        unsafe {
            launch_attention_combine(
                Gpu::global()?,
                dtype,
                seq,
                heads,
                n_mask,
                opt_ptr(bias),
                opt_ptr(mask),
                out,
                RawStream(stream),
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn window_shape(
    batch: i64,
    h: i64,
    w: i64,
    c: i64,
    window: i64,
    shift: i64,
) -> Result<WindowShape> {
    let s = WindowShape {
        batch: usize_arg("batch", batch)?,
        height: usize_arg("height", h)?,
        width: usize_arg("width", w)?,
        channels: usize_arg("channels", c)?,
        window: usize_arg("window", window)?,
        shift: usize_arg("shift", shift)?,
    };
    s.validate()?;
    Ok(s)
}

/// LayerNorm + shift + pad + window partition; see [`crate::window`]. gamma/beta may be 0.
///
/// # Safety
/// Pointers must be device allocations of the extents documented in [`crate::window`].
#[no_mangle]
pub unsafe extern "C" fn fpk_ln_shift_partition(
    dtype: i32,
    x: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    out: DevPtr,
    batch: i64,
    height: i64,
    width: i64,
    channels: i64,
    window: i64,
    shift: i64,
    eps: f32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let shape = window_shape(batch, height, width, channels, window, shift)?;
        let bufs = LnShiftPartitionBuffers {
            x: ptr_arg("x", x)?,
            gamma: opt_ptr(gamma),
            beta: opt_ptr(beta),
            out: ptr_arg("out", out)?,
        };
        // SAFETY: extents are the caller's contract.
        unsafe {
            launch_ln_shift_partition(Gpu::global()?, dtype, &shape, eps, &bufs, RawStream(stream))
        }
    })
}

/// Window reverse + reverse shift + residual (+ LayerNorm into `ln_out` when it is not 0).
///
/// # Safety
/// Pointers must be device allocations of the extents documented in [`crate::window`].
#[no_mangle]
pub unsafe extern "C" fn fpk_window_reverse_residual(
    dtype: i32,
    windows: DevPtr,
    shortcut: DevPtr,
    out: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    ln_out: DevPtr,
    batch: i64,
    height: i64,
    width: i64,
    channels: i64,
    window: i64,
    shift: i64,
    eps: f32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let shape = window_shape(batch, height, width, channels, window, shift)?;
        if out == windows || out == shortcut {
            return Err(invalid("window reverse: out must not alias its inputs"));
        }
        let bufs = WindowReverseBuffers {
            windows: ptr_arg("windows", windows)?,
            shortcut: ptr_arg("shortcut", shortcut)?,
            out: ptr_arg("out", out)?,
            layer_norm: opt_ptr(ln_out).map(|l| (gamma, beta, l)),
        };
        // SAFETY: extents are the caller's contract.
        unsafe {
            launch_window_reverse_residual(
                Gpu::global()?,
                dtype,
                &shape,
                eps,
                &bufs,
                RawStream(stream),
            )
        }
    })
}

/// `out = x + bias + res` over `[rows, cols]`.
///
/// # Safety
/// `x`, `res`, `out` hold `rows * cols` elements, `bias` `cols`.
#[no_mangle]
pub unsafe extern "C" fn fpk_bias_residual(
    dtype: i32,
    x: DevPtr,
    bias: DevPtr,
    res: DevPtr,
    out: DevPtr,
    rows: i64,
    cols: i64,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let (rows, cols) = (usize_arg("rows", rows)?, usize_arg("cols", cols)?);
        let (x, bias, res, out) = (
            ptr_arg("x", x)?,
            ptr_arg("bias", bias)?,
            ptr_arg("res", res)?,
            ptr_arg("out", out)?,
        );
        crate::elementwise::ElementwisePath::choose(rows, cols, &[])?;
        // SAFETY: extents are the caller's contract.
        unsafe {
            launch_bias_residual(
                Gpu::global()?,
                dtype,
                rows,
                cols,
                x,
                bias,
                res,
                out,
                RawStream(stream),
            )
        }
    })
}

/// `out = x + gelu_erf(LayerNorm(x) w1^T + b1) w2^T + b2`, one kernel; see [`crate::mlp`].
/// `out` may be `x`.
///
/// # Safety
/// `x`, `out` hold `rows * width` elements, `gamma`, `beta`, `b2` `width`, `w1`
/// `hidden * width`, `b1` `hidden`, `w2` `width * hidden`.
#[no_mangle]
pub unsafe extern "C" fn fpk_ln_mlp_residual(
    dtype: i32,
    x: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    eps: f32,
    w1: DevPtr,
    b1: DevPtr,
    w2: DevPtr,
    b2: DevPtr,
    out: DevPtr,
    rows: i64,
    width: i64,
    hidden: i64,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let shape = MlpShape {
            rows: usize_arg("rows", rows)?,
            width: usize_arg("width", width)?,
            hidden: usize_arg("hidden", hidden)?,
        };
        let bufs = MlpBuffers {
            x: ptr_arg("x", x)?,
            gamma: ptr_arg("gamma", gamma)?,
            beta: ptr_arg("beta", beta)?,
            w1: ptr_arg("w1", w1)?,
            b1: ptr_arg("b1", b1)?,
            w2: ptr_arg("w2", w2)?,
            b2: ptr_arg("b2", b2)?,
            out: ptr_arg("out", out)?,
        };
        // SAFETY: extents are the caller's contract.
        unsafe {
            launch_ln_mlp_residual(Gpu::global()?, dtype, &shape, eps, &bufs, RawStream(stream))
        }
    })
}

/// `out = act(x + bias)`; act 0 identity, 1 exact GELU; bias may be 0.
///
/// # Safety
/// `x`, `out` hold `rows * cols` elements, `bias` `cols`.
#[no_mangle]
pub unsafe extern "C" fn fpk_bias_act(
    dtype: i32,
    x: DevPtr,
    bias: DevPtr,
    out: DevPtr,
    rows: i64,
    cols: i64,
    act: i32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let (rows, cols) = (usize_arg("rows", rows)?, usize_arg("cols", cols)?);
        let act = match act {
            0 => Activation::Identity,
            1 => Activation::GeluErf,
            a => return Err(invalid(format!("activation {a} is not 0 or 1"))),
        };
        let (x, out) = (ptr_arg("x", x)?, ptr_arg("out", out)?);
        crate::elementwise::ElementwisePath::choose(rows, cols, &[])?;
        // SAFETY: extents are the caller's contract.
        unsafe {
            launch_bias_act(
                Gpu::global()?,
                dtype,
                rows,
                cols,
                x,
                opt_ptr(bias),
                out,
                act,
                RawStream(stream),
            )
        }
    })
}

/// Zero-padding copy `[batch, rows, cols]` (strided) -> `[batch, rows_dst, cols_dst]`.
///
/// # Safety
/// `src` covers the strided source, `dst` `batch * rows_dst * cols_dst` elements.
#[no_mangle]
pub unsafe extern "C" fn fpk_pad(
    dtype: i32,
    src: DevPtr,
    dst: DevPtr,
    batch: i64,
    rows: i64,
    cols: i64,
    src_batch_stride: i64,
    ld_src: i64,
    rows_dst: i64,
    cols_dst: i64,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let dtype = DType::from_code(dtype)?;
        let p = PadCopy {
            batch: usize_arg("batch", batch)?,
            rows: usize_arg("rows", rows)?,
            cols: usize_arg("cols", cols)?,
            ld_src: usize_arg("ld_src", ld_src)?,
            src_batch_stride: usize_arg("src_batch_stride", src_batch_stride)?,
            rows_dst: usize_arg("rows_dst", rows_dst)?,
            cols_dst: usize_arg("cols_dst", cols_dst)?,
        };
        p.validate()?;
        let (src, dst) = (ptr_arg("src", src)?, ptr_arg("dst", dst)?);
        // SAFETY: extents are the caller's contract.
        unsafe { launch_pad_copy(Gpu::global()?, dtype, &p, src, dst, RawStream(stream)) }
    })
}

/// GEMM through cuBLASLt; see [`crate::gemm`]. `b_layout`: 0 = `[N, K]` (weight), 1 = `[K, N]`.
/// `epilogue`: 0 none, 1 bias, 2 bias + exact GELU, 3 bias + tanh GELU (cuBLASLt), 4 bias +
/// residual. bias/residual may be 0 when the epilogue does not use them.
///
/// # Safety
/// Pointers must cover the extents implied by the sizes, leading dimensions and strides.
#[no_mangle]
pub unsafe extern "C" fn fpk_gemm(
    dtype: i32,
    m: i64,
    n: i64,
    k: i64,
    batch: i64,
    a: DevPtr,
    lda: i64,
    stride_a: i64,
    b: DevPtr,
    ldb: i64,
    stride_b: i64,
    b_layout: i32,
    bias: DevPtr,
    residual: DevPtr,
    d: DevPtr,
    ldd: i64,
    stride_d: i64,
    epilogue: i32,
    stream: *mut c_void,
) -> i32 {
    guard(|| {
        let p = GemmParams {
            dtype: DType::from_code(dtype)?,
            m: usize_arg("m", m)?,
            n: usize_arg("n", n)?,
            k: usize_arg("k", k)?,
            batch: usize_arg("batch", batch)?,
            lda: usize_arg("lda", lda)?,
            stride_a: usize_arg("stride_a", stride_a)?,
            b_layout: match b_layout {
                0 => BLayout::Nk,
                1 => BLayout::Kn,
                l => return Err(invalid(format!("b_layout {l} is not 0 or 1"))),
            },
            ldb: usize_arg("ldb", ldb)?,
            stride_b: usize_arg("stride_b", stride_b)?,
            ldd: usize_arg("ldd", ldd)?,
            stride_d: usize_arg("stride_d", stride_d)?,
            epilogue: Epilogue::from_code(epilogue)?,
        };
        p.validate()?;
        let bufs = GemmBuffers {
            a: ptr_arg("a", a)?,
            b: ptr_arg("b", b)?,
            bias: if p.epilogue.needs_bias() {
                Some(ptr_arg("bias", bias)?)
            } else {
                None
            },
            residual: if p.epilogue.needs_residual() {
                Some(ptr_arg("residual", residual)?)
            } else {
                None
            },
            d: ptr_arg("d", d)?,
        };
        // SAFETY: extents are the caller's contract.
        unsafe { launch_gemm(Gpu::global()?, &p, &bufs, RawStream(stream)) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        let mut buf = vec![0 as c_char; 512];
        // SAFETY: buf holds 512 bytes.
        let n = unsafe { fpk_last_error(buf.as_mut_ptr(), buf.len()) };
        let bytes: Vec<u8> = buf[..n.min(511)].iter().map(|&c| c as u8).collect();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn invalid_arguments_are_rejected_before_the_gpu() {
        // SAFETY: these calls fail validation before any pointer is used.
        unsafe {
            let r = fpk_attention(
                0,
                0,
                16,
                0,
                0,
                1,
                49,
                3,
                32,
                0,
                0,
                0.1,
                std::ptr::null_mut(),
            );
            assert_eq!(r, FPK_ERR_INVALID);
            assert!(
                last_error().contains("qkv is a null pointer"),
                "{}",
                last_error()
            );
            let r = fpk_attention(
                0,
                16,
                16,
                0,
                0,
                1,
                49,
                3,
                48,
                0,
                0,
                0.1,
                std::ptr::null_mut(),
            );
            assert_eq!(r, FPK_ERR_INVALID);
            assert!(last_error().contains("head_dim 48"));
            assert_eq!(
                fpk_attention(
                    2,
                    16,
                    16,
                    0,
                    0,
                    1,
                    49,
                    3,
                    32,
                    0,
                    0,
                    0.1,
                    std::ptr::null_mut()
                ),
                FPK_ERR_INVALID
            );
            assert_eq!(
                fpk_attention(
                    0,
                    16,
                    16,
                    0,
                    0,
                    1,
                    49,
                    3,
                    32,
                    7,
                    0,
                    0.1,
                    std::ptr::null_mut()
                ),
                FPK_ERR_INVALID
            );
            assert_eq!(
                fpk_ln_shift_partition(
                    0,
                    16,
                    0,
                    0,
                    16,
                    1,
                    0,
                    7,
                    96,
                    7,
                    0,
                    1e-5,
                    std::ptr::null_mut()
                ),
                FPK_ERR_INVALID
            );
            assert_eq!(
                fpk_window_reverse_residual(
                    0,
                    16,
                    32,
                    16,
                    0,
                    0,
                    0,
                    1,
                    7,
                    7,
                    96,
                    7,
                    3,
                    1e-5,
                    std::ptr::null_mut()
                ),
                FPK_ERR_INVALID,
                "out aliasing windows must be refused"
            );
            assert_eq!(
                fpk_bias_residual(0, 16, 16, 16, 16, -1, 96, std::ptr::null_mut()),
                FPK_ERR_INVALID
            );
            assert_eq!(
                fpk_bias_act(0, 16, 0, 16, 4, 96, 5, std::ptr::null_mut()),
                FPK_ERR_INVALID
            );
            assert_eq!(
                fpk_pad(0, 16, 32, 1, 4, 5, 20, 5, 4, 7, std::ptr::null_mut()),
                FPK_ERR_INVALID
            );
            assert_eq!(
                fpk_gemm(
                    0,
                    4,
                    4,
                    4,
                    1,
                    16,
                    3,
                    16,
                    16,
                    4,
                    16,
                    0,
                    0,
                    0,
                    16,
                    4,
                    16,
                    0,
                    std::ptr::null_mut()
                ),
                FPK_ERR_INVALID,
                "lda < K"
            );
            assert_eq!(
                fpk_gemm(
                    0,
                    4,
                    4,
                    4,
                    1,
                    16,
                    4,
                    16,
                    16,
                    4,
                    16,
                    0,
                    0,
                    0,
                    16,
                    4,
                    16,
                    1,
                    std::ptr::null_mut()
                ),
                FPK_ERR_INVALID,
                "bias epilogue without bias"
            );
        }
    }

    #[test]
    fn valid_calls_without_a_driver_report_it_in_one_line() {
        if crate::runtime::driver_present() {
            return; // a GPU machine: covered by the device check script instead
        }
        // SAFETY: with no driver the call stops at Gpu::global() and never dereferences.
        let r = unsafe { fpk_bias_residual(0, 16, 16, 16, 16, 4, 96, std::ptr::null_mut()) };
        assert_eq!(r, FPK_ERR_NO_DRIVER);
        let msg = last_error();
        assert!(
            msg.contains("no CUDA driver") && !msg.contains('\n'),
            "{msg}"
        );
        assert_eq!(fpk_init(), FPK_ERR_NO_DRIVER);
    }

    #[test]
    fn combine_arguments_are_checked_before_the_gpu() {
        // SAFETY: these calls fail validation before any pointer is used.
        unsafe {
            let r = fpk_attention_combine(0, 16, 16, 0, 49, 3, 64, std::ptr::null_mut());
            assert_eq!(r, FPK_ERR_INVALID);
            assert!(
                last_error().contains("out is a null pointer"),
                "{}",
                last_error()
            );
            let r = fpk_attention_combine(0, 0, 0, 16, 49, 3, 1, std::ptr::null_mut());
            assert_eq!(r, FPK_ERR_INVALID);
            // combined tensor with a separate bias is refused by validation
            let r = fpk_attention(
                0,
                16,
                16,
                16,
                16,
                1,
                49,
                3,
                32,
                3,
                64,
                0.1,
                std::ptr::null_mut(),
            );
            assert_eq!(r, FPK_ERR_INVALID);
            assert!(
                last_error().contains("already holds the bias"),
                "{}",
                last_error()
            );
        }
    }

    #[test]
    fn last_error_truncates_safely() {
        set_error("abcdef".into());
        let mut buf = [1 as c_char; 4];
        // SAFETY: buf holds 4 bytes.
        let n = unsafe { fpk_last_error(buf.as_mut_ptr(), 4) };
        assert_eq!(n, 6);
        assert_eq!(buf.map(|c| c as u8), *b"abc\0");
        // SAFETY: a null buffer is allowed and only the length is returned.
        assert_eq!(unsafe { fpk_last_error(std::ptr::null_mut(), 0) }, 6);
    }

    #[test]
    fn panics_become_status_codes() {
        assert_eq!(guard(|| panic!("boom")), FPK_ERR_PANIC);
        assert!(last_error().contains("boom"));
    }
}
