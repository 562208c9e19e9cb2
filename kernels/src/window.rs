//! Swin window ops in one pass each (`window.cu`).
//!
//! * [`launch_ln_shift_partition`]: LayerNorm, cyclic shift by `-shift`, zero padding up to a
//!   multiple of the window, window partition: `[B, H, W, C]` -> `[B * nWh * nWw, ws * ws, C]`
//!   (timm's `norm1` -> `roll` -> `pad` -> `window_partition`).
//! * [`launch_window_reverse_residual`]: window reverse, crop, cyclic shift by `+shift`, residual
//!   add, and optionally the next LayerNorm as a second output.
//! * [`launch_ln_shift_partition_backward`], [`launch_window_reverse_residual_backward`]: their
//!   backward passes: the inverse index map with LayerNorm's backward (statistics recomputed
//!   from the saved rows), dgamma and dbeta summed per block and added with fp32 atomics.

use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::runtime::{Args, DevPtr, Gpu, LaunchConfig, RawStream, Source};

/// `window.cu`, one build for any sm_80+ GPU.
pub const SOURCE: Source = Source {
    file_name: "window.cu",
    text: crate::sources::WINDOW,
    variants: None,
    arch_specific: None,
    kernels: &[
        "ln_shift_partition_1",
        "ln_shift_partition_2",
        "ln_shift_partition_3",
        "ln_shift_partition_4",
        "ln_shift_partition_scalar",
        "window_reverse_residual_1",
        "window_reverse_residual_2",
        "window_reverse_residual_3",
        "window_reverse_residual_4",
        "window_reverse_residual_scalar",
        "ln_shift_partition_backward",
        "window_reverse_residual_backward",
    ],
};

/// Threads per block (`WO_THREADS` in `window.cu`; the scalar kernels too).
const THREADS: u32 = 256;
/// Rows per lane group in the vector kernels (`RPT` in `window.cu`).
pub const ROWS_PER_GROUP: u32 = 2;
/// Largest number of 16-byte chunks one lane keeps in registers.
pub const MAX_CHUNKS_PER_LANE: usize = 4;

/// The geometry of one Swin block's window ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowShape {
    pub batch: usize,
    pub height: usize,
    pub width: usize,
    pub channels: usize,
    pub window: usize,
    /// Cyclic shift (0 for the regular blocks, window / 2 for the shifted ones).
    pub shift: usize,
}

impl WindowShape {
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.height == 0 || self.width == 0 || self.channels == 0 {
            return Err(invalid(format!("empty window-op shape {self:?}")));
        }
        if self.window == 0 {
            return Err(invalid("window size must be >= 1"));
        }
        if self.channels > i32::MAX as usize
            || self.height * self.width > i32::MAX as usize
            || self.partition_rows().max(self.image_rows()) > i32::MAX as usize
        {
            // the kernels index rows in 32 bits
            return Err(invalid(
                "window-op shape too large (rows must stay below 2^31)",
            ));
        }
        Ok(())
    }
    pub fn windows_h(&self) -> usize {
        self.height.div_ceil(self.window)
    }
    pub fn windows_w(&self) -> usize {
        self.width.div_ceil(self.window)
    }
    /// Windows over the whole batch (`B * nWh * nWw`).
    pub fn windows_total(&self) -> usize {
        self.batch * self.windows_h() * self.windows_w()
    }
    /// Rows of the partitioned tensor (padding rows included).
    pub fn partition_rows(&self) -> usize {
        self.windows_total() * self.window * self.window
    }
    /// Rows of the image tensor `[B, H, W, C]`.
    pub fn image_rows(&self) -> usize {
        self.batch * self.height * self.width
    }
    /// The shift reduced modulo each dimension, as the kernels take it.
    pub fn shifts(&self) -> (usize, usize) {
        (self.shift % self.height, self.shift % self.width)
    }
}

/// How rows are spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLayout {
    /// `lanes_per_row` lanes (a power of two) each keep `chunks_per_lane` 16-byte chunks.
    Vector {
        lanes_per_row: u32,
        chunks_per_lane: u32,
    },
    /// One warp per row, scalar accesses (C not a multiple of 8, or very wide rows).
    Scalar,
}

impl RowLayout {
    /// The smallest lane group that keeps a row of `channels` within 4 chunks per lane, which
    /// keeps every lane busy for the Swin widths (96 -> 4 lanes x 3 chunks, 768 -> 32 x 3).
    pub fn for_channels(channels: usize) -> Self {
        if !channels.is_multiple_of(8) || channels / 8 > 32 * MAX_CHUNKS_PER_LANE {
            return RowLayout::Scalar;
        }
        let nch = channels / 8;
        let mut lpr = 1usize;
        while lpr * MAX_CHUNKS_PER_LANE < nch {
            lpr *= 2;
        }
        RowLayout::Vector {
            lanes_per_row: lpr as u32,
            chunks_per_lane: nch.div_ceil(lpr) as u32,
        }
    }

    pub fn lanes_per_row(self) -> u32 {
        match self {
            RowLayout::Vector { lanes_per_row, .. } => lanes_per_row,
            RowLayout::Scalar => 32,
        }
    }

    /// Rows one CTA covers: each lane group of a vector layout handles [`ROWS_PER_GROUP`] rows
    /// (their loads all in flight before the first reduction); the scalar layout one row per warp.
    pub fn rows_per_block(self) -> u32 {
        match self {
            RowLayout::Vector { .. } => THREADS / self.lanes_per_row() * ROWS_PER_GROUP,
            RowLayout::Scalar => THREADS / 32,
        }
    }

    pub fn launch_config(self, rows: usize) -> Result<LaunchConfig> {
        LaunchConfig::linear(
            (rows as u64).div_ceil(self.rows_per_block() as u64),
            THREADS,
        )
    }
}

fn kernel_name(prefix: &str, layout: RowLayout) -> &'static str {
    match (prefix, layout) {
        ("ln", RowLayout::Scalar) => "ln_shift_partition_scalar",
        (
            "ln",
            RowLayout::Vector {
                chunks_per_lane, ..
            },
        ) => match chunks_per_lane {
            1 => "ln_shift_partition_1",
            2 => "ln_shift_partition_2",
            3 => "ln_shift_partition_3",
            _ => "ln_shift_partition_4",
        },
        (_, RowLayout::Scalar) => "window_reverse_residual_scalar",
        (
            _,
            RowLayout::Vector {
                chunks_per_lane, ..
            },
        ) => match chunks_per_lane {
            1 => "window_reverse_residual_1",
            2 => "window_reverse_residual_2",
            3 => "window_reverse_residual_3",
            _ => "window_reverse_residual_4",
        },
    }
}

fn layout_for(shape: &WindowShape, ptrs: &[DevPtr]) -> RowLayout {
    let l = RowLayout::for_channels(shape.channels);
    if ptrs.iter().any(|p| p % 16 != 0) {
        RowLayout::Scalar
    } else {
        l
    }
}

/// Buffers of [`launch_ln_shift_partition`].
#[derive(Debug, Clone, Copy)]
pub struct LnShiftPartitionBuffers {
    /// `[B, H, W, C]`
    pub x: DevPtr,
    /// `[C]`, or None for no scale
    pub gamma: Option<DevPtr>,
    /// `[C]`, or None for no shift
    pub beta: Option<DevPtr>,
    /// `[B * nWh * nWw, ws * ws, C]`
    pub out: DevPtr,
}

/// LayerNorm + cyclic shift + zero padding + window partition, one pass.
///
/// # Safety
/// Pointers must be device allocations of the current context with the extents documented on
/// [`LnShiftPartitionBuffers`]; `out` must not overlap `x`.
pub unsafe fn launch_ln_shift_partition(
    gpu: &Gpu,
    dtype: DType,
    shape: &WindowShape,
    eps: f32,
    bufs: &LnShiftPartitionBuffers,
    stream: RawStream,
) -> Result<()> {
    shape.validate()?;
    let mut ptrs = vec![bufs.x, bufs.out];
    ptrs.extend(bufs.gamma);
    ptrs.extend(bufs.beta);
    let layout = layout_for(shape, &ptrs);
    let cfg = layout.launch_config(shape.partition_rows())?;
    let (sh, sw) = shape.shifts();
    let args = Args::default()
        .ptr(bufs.x)
        .ptr(bufs.gamma.unwrap_or(0))
        .ptr(bufs.beta.unwrap_or(0))
        .ptr(bufs.out)
        .i32(shape.height as i32)
        .i32(shape.width as i32)
        .i32(shape.channels as i32)
        .i32(shape.window as i32)
        .i32(sh as i32)
        .i32(sw as i32)
        .i32(shape.windows_h() as i32)
        .i32(shape.windows_w() as i32)
        .i32(layout.lanes_per_row() as i32)
        .f32(eps)
        .i64(shape.partition_rows() as i64);
    // SAFETY: argument list matches ln_shift_partition_*; the grid covers partition_rows rows,
    // each kernel guards rows past the end; extents are the caller's contract.
    unsafe {
        gpu.launch(
            &SOURCE,
            dtype,
            0,
            kernel_name("ln", layout),
            cfg,
            stream,
            args,
        )
    }
}

/// Buffers of [`launch_window_reverse_residual`].
#[derive(Debug, Clone, Copy)]
pub struct WindowReverseBuffers {
    /// `[B * nWh * nWw, ws * ws, C]`
    pub windows: DevPtr,
    /// `[B, H, W, C]`
    pub shortcut: DevPtr,
    /// `[B, H, W, C]`: shortcut + the reversed, unshifted windows
    pub out: DevPtr,
    /// `Some((gamma, beta, ln_out))` to also write LayerNorm(out); gamma/beta may be 0 (none).
    pub layer_norm: Option<(DevPtr, DevPtr, DevPtr)>,
}

/// Window reverse + crop + reverse shift + residual add (+ LayerNorm), one pass.
///
/// # Safety
/// Pointers must be device allocations of the current context with the extents documented on
/// [`WindowReverseBuffers`]; the outputs must not overlap the inputs.
pub unsafe fn launch_window_reverse_residual(
    gpu: &Gpu,
    dtype: DType,
    shape: &WindowShape,
    eps: f32,
    bufs: &WindowReverseBuffers,
    stream: RawStream,
) -> Result<()> {
    shape.validate()?;
    if bufs.out == bufs.shortcut || bufs.out == bufs.windows {
        return Err(invalid("window reverse: out must not alias its inputs"));
    }
    let (gamma, beta, ln_out) = bufs.layer_norm.unwrap_or((0, 0, 0));
    let mut ptrs = vec![bufs.windows, bufs.shortcut, bufs.out];
    ptrs.extend([gamma, beta, ln_out].into_iter().filter(|p| *p != 0));
    let layout = layout_for(shape, &ptrs);
    let cfg = layout.launch_config(shape.image_rows())?;
    let (sh, sw) = shape.shifts();
    let args = Args::default()
        .ptr(bufs.windows)
        .ptr(bufs.shortcut)
        .ptr(bufs.out)
        .ptr(gamma)
        .ptr(beta)
        .ptr(ln_out)
        .i32(shape.height as i32)
        .i32(shape.width as i32)
        .i32(shape.channels as i32)
        .i32(shape.window as i32)
        .i32(sh as i32)
        .i32(sw as i32)
        .i32(shape.windows_h() as i32)
        .i32(shape.windows_w() as i32)
        .i32(layout.lanes_per_row() as i32)
        .f32(eps)
        .i64(shape.image_rows() as i64);
    // SAFETY: argument list matches window_reverse_residual_*; the grid covers image_rows rows
    // and kernels guard the tail; extents are the caller's contract.
    unsafe {
        gpu.launch(
            &SOURCE,
            dtype,
            0,
            kernel_name("rev", layout),
            cfg,
            stream,
            args,
        )
    }
}

/// Blocks of the backward kernels: one warp per row, grid-striding, at most this many blocks
/// (each adds its dgamma / dbeta sums once).
const BACKWARD_MAX_BLOCKS: u64 = 2048;

fn backward_config(shape: &WindowShape) -> Result<LaunchConfig> {
    let rows = shape.partition_rows() as u64;
    let warps = (THREADS / 32) as u64;
    let mut cfg =
        LaunchConfig::linear(rows.div_ceil(warps).clamp(1, BACKWARD_MAX_BLOCKS), THREADS)?;
    cfg.shared_bytes = (2 * shape.channels * std::mem::size_of::<f32>()) as u32;
    Ok(cfg)
}

/// `args` followed by the window geometry the backward kernels take (H, W, C, ws, the shifts,
/// the window grid).
fn window_args(args: Args, shape: &WindowShape) -> Args {
    let (sh, sw) = shape.shifts();
    args.i32(shape.height as i32)
        .i32(shape.width as i32)
        .i32(shape.channels as i32)
        .i32(shape.window as i32)
        .i32(sh as i32)
        .i32(sw as i32)
        .i32(shape.windows_h() as i32)
        .i32(shape.windows_w() as i32)
}

/// Buffers of [`launch_ln_shift_partition_backward`].
#[derive(Debug, Clone, Copy)]
pub struct LnShiftPartitionBackwardBuffers {
    /// `[B * nWh * nWw, ws * ws, C]`: the gradient of the partition's output.
    pub dy: DevPtr,
    /// `[B, H, W, C]`: the forward's input.
    pub x: DevPtr,
    /// `[C]`, or None for no scale.
    pub gamma: Option<DevPtr>,
    /// `[B, H, W, C]`, written whole.
    pub dx: DevPtr,
    /// `([C], [C])` fp32 dgamma and dbeta, zeroed by the caller, added into; None: not wanted.
    pub dparams: Option<(DevPtr, DevPtr)>,
}

/// The backward pass of [`launch_ln_shift_partition`].
///
/// # Safety
/// Pointers must be device allocations of the current context with the extents documented on
/// [`LnShiftPartitionBackwardBuffers`]; the outputs must not overlap the inputs.
pub unsafe fn launch_ln_shift_partition_backward(
    gpu: &Gpu,
    dtype: DType,
    shape: &WindowShape,
    eps: f32,
    bufs: &LnShiftPartitionBackwardBuffers,
    stream: RawStream,
) -> Result<()> {
    shape.validate()?;
    let (dgamma, dbeta) = bufs.dparams.unwrap_or((0, 0));
    let head = Args::default()
        .ptr(bufs.dy)
        .ptr(bufs.x)
        .ptr(bufs.gamma.unwrap_or(0))
        .ptr(bufs.dx)
        .ptr(dgamma)
        .ptr(dbeta);
    let args = window_args(head, shape)
        .f32(eps)
        .i64(shape.partition_rows() as i64);
    // SAFETY: the argument list matches ln_shift_partition_backward's; the kernel strides over
    // the partition rows whatever the grid; extents are the caller's contract.
    unsafe {
        gpu.launch(
            &SOURCE,
            dtype,
            0,
            "ln_shift_partition_backward",
            backward_config(shape)?,
            stream,
            args,
        )
    }
}

/// Buffers of [`launch_window_reverse_residual_backward`].
#[derive(Debug, Clone, Copy)]
pub struct WindowReverseBackwardBuffers {
    /// `[B, H, W, C]`: the gradient of the residual sum, or None where it was not used.
    pub g_out: Option<DevPtr>,
    /// `([B, H, W, C], [B, H, W, C])`: the gradient of the LayerNorm's output and the forward's
    /// residual sum (its input), where the forward had a LayerNorm.
    pub layer_norm: Option<(DevPtr, DevPtr)>,
    /// `[C]`, or None for no scale.
    pub gamma: Option<DevPtr>,
    /// `[B * nWh * nWw, ws * ws, C]`, written whole (zero on the padding rows).
    pub d_windows: DevPtr,
    /// `[B, H, W, C]`, or None where not wanted (it equals the sum's whole gradient).
    pub d_shortcut: Option<DevPtr>,
    /// `([C], [C])` fp32 dgamma and dbeta, zeroed by the caller, added into; None: not wanted.
    pub dparams: Option<(DevPtr, DevPtr)>,
}

/// The backward pass of [`launch_window_reverse_residual`].
///
/// # Safety
/// Pointers must be device allocations of the current context with the extents documented on
/// [`WindowReverseBackwardBuffers`]; the outputs must not overlap the inputs.
pub unsafe fn launch_window_reverse_residual_backward(
    gpu: &Gpu,
    dtype: DType,
    shape: &WindowShape,
    eps: f32,
    bufs: &WindowReverseBackwardBuffers,
    stream: RawStream,
) -> Result<()> {
    shape.validate()?;
    if bufs.g_out.is_none() && bufs.layer_norm.is_none() {
        return Err(invalid("window reverse backward: no gradient given"));
    }
    let (g_ln, y) = bufs.layer_norm.unwrap_or((0, 0));
    let (dgamma, dbeta) = bufs.dparams.unwrap_or((0, 0));
    let head = Args::default()
        .ptr(bufs.g_out.unwrap_or(0))
        .ptr(g_ln)
        .ptr(y)
        .ptr(bufs.gamma.unwrap_or(0))
        .ptr(bufs.d_shortcut.unwrap_or(0))
        .ptr(bufs.d_windows)
        .ptr(dgamma)
        .ptr(dbeta);
    let args = window_args(head, shape)
        .f32(eps)
        .i64(shape.partition_rows() as i64);
    // SAFETY: the argument list matches window_reverse_residual_backward's; the kernel strides
    // over the partition rows whatever the grid; extents are the caller's contract.
    unsafe {
        gpu.launch(
            &SOURCE,
            dtype,
            0,
            "window_reverse_residual_backward",
            backward_config(shape)?,
            stream,
            args,
        )
    }
}

/// CPU reference of LayerNorm's backward over the last dimension (f64, statistics recomputed):
/// `(dx, dgamma, dbeta)` for the output gradient `dy`.
pub fn layer_norm_backward_reference(
    x: &[f32],
    dy: &[f32],
    channels: usize,
    gamma: Option<&[f32]>,
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = channels;
    let mut dx = vec![0f32; x.len()];
    let mut dgamma = vec![0f64; c];
    let mut dbeta = vec![0f64; c];
    for ((row, g), out) in x.chunks(c).zip(dy.chunks(c)).zip(dx.chunks_mut(c)) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        let xhat: Vec<f64> = row.iter().map(|&v| (v as f64 - mean) * rstd).collect();
        let gw: Vec<f64> = (0..c)
            .map(|k| g[k] as f64 * gamma.map_or(1.0, |gm| gm[k] as f64))
            .collect();
        let a = gw.iter().sum::<f64>() / c as f64;
        let b = gw.iter().zip(&xhat).map(|(g, x)| g * x).sum::<f64>() / c as f64;
        for k in 0..c {
            out[k] = (rstd * (gw[k] - a - xhat[k] * b)) as f32;
            dgamma[k] += g[k] as f64 * xhat[k];
            dbeta[k] += g[k] as f64;
        }
    }
    let f = |v: Vec<f64>| v.into_iter().map(|x| x as f32).collect();
    (dx, f(dgamma), f(dbeta))
}

/// The windows' rows back in the image: the adjoint of [`shift_partition_reference`] (the
/// padding rows' values dropped).
pub fn unpartition_reference(shape: &WindowShape, windows: &[f32]) -> Vec<f32> {
    let c = shape.channels;
    let mut out = vec![0f32; shape.image_rows() * c];
    // The partition copies each image row once: run it on row numbers to find where each went.
    let rows: Vec<f32> = (0..shape.image_rows())
        .flat_map(|r| std::iter::repeat_n(r as f32 + 1.0, c))
        .collect();
    let at = shift_partition_reference(shape, &rows);
    for (dst, chunk) in at.chunks(c).enumerate() {
        if chunk[0] > 0.0 {
            let src = chunk[0] as usize - 1;
            out[src * c..(src + 1) * c].copy_from_slice(&windows[dst * c..(dst + 1) * c]);
        }
    }
    out
}

/// CPU reference of [`launch_ln_shift_partition_backward`]: `(dx, dgamma, dbeta)`.
pub fn ln_shift_partition_backward_reference(
    shape: &WindowShape,
    x: &[f32],
    dy: &[f32],
    gamma: Option<&[f32]>,
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    layer_norm_backward_reference(
        x,
        &unpartition_reference(shape, dy),
        shape.channels,
        gamma,
        eps,
    )
}

/// CPU reference of [`launch_window_reverse_residual_backward`]: `(d_windows, d_shortcut,
/// dgamma, dbeta)`, `layer_norm` being `(g_ln, y)` as in the buffers.
pub fn window_reverse_residual_backward_reference(
    shape: &WindowShape,
    g_out: Option<&[f32]>,
    layer_norm: Option<(&[f32], &[f32])>,
    gamma: Option<&[f32]>,
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = shape.channels;
    let n = shape.image_rows() * c;
    let mut gy = g_out.map_or(vec![0f32; n], <[f32]>::to_vec);
    let (mut dgamma, mut dbeta) = (vec![0f32; c], vec![0f32; c]);
    if let Some((g_ln, y)) = layer_norm {
        let (dx, dg, db) = layer_norm_backward_reference(y, g_ln, c, gamma, eps);
        for (a, b) in gy.iter_mut().zip(dx) {
            *a += b;
        }
        (dgamma, dbeta) = (dg, db);
    }
    (shift_partition_reference(shape, &gy), gy, dgamma, dbeta)
}

/// CPU reference: LayerNorm over the last dimension (f64 statistics)./// CPU reference: LayerNorm over the last dimension (f64 statistics).
pub fn layer_norm_reference(
    x: &[f32],
    channels: usize,
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for (row, o) in x.chunks(channels).zip(out.chunks_mut(channels)) {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / channels as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / channels as f64;
        let rstd = 1.0 / (var + eps as f64).sqrt();
        for c in 0..channels {
            let g = gamma.map_or(1.0, |g| g[c] as f64);
            let b = beta.map_or(0.0, |b| b[c] as f64);
            o[c] = ((row[c] as f64 - mean) * rstd * g + b) as f32;
        }
    }
    out
}

/// CPU reference of the index map alone: roll by `-shift`, pad with zeros, partition.
pub fn shift_partition_reference(shape: &WindowShape, x: &[f32]) -> Vec<f32> {
    let (c, ws) = (shape.channels, shape.window);
    let (sh, sw) = shape.shifts();
    let (nwh, nww) = (shape.windows_h(), shape.windows_w());
    let mut out = vec![0f32; shape.partition_rows() * c];
    for b in 0..shape.batch {
        for wh in 0..nwh {
            for ww in 0..nww {
                for i in 0..ws {
                    for j in 0..ws {
                        let (hh, wp) = (wh * ws + i, ww * ws + j);
                        if hh >= shape.height || wp >= shape.width {
                            continue;
                        }
                        let src = (b * shape.height + (hh + sh) % shape.height) * shape.width
                            + (wp + sw) % shape.width;
                        let dst = ((b * nwh + wh) * nww + ww) * ws * ws + i * ws + j;
                        out[dst * c..(dst + 1) * c].copy_from_slice(&x[src * c..(src + 1) * c]);
                    }
                }
            }
        }
    }
    out
}

/// CPU reference of [`launch_ln_shift_partition`].
pub fn ln_shift_partition_reference(
    shape: &WindowShape,
    x: &[f32],
    gamma: Option<&[f32]>,
    beta: Option<&[f32]>,
    eps: f32,
) -> Vec<f32> {
    let normed = layer_norm_reference(x, shape.channels, gamma, beta, eps);
    shift_partition_reference(shape, &normed)
}

/// `(gamma, beta, eps)` of an optional LayerNorm in the CPU references.
pub type LayerNormArgs<'a> = (Option<&'a [f32]>, Option<&'a [f32]>, f32);

/// CPU reference of [`launch_window_reverse_residual`]: returns `(out, ln_out)`. The sum is
/// rounded to `dtype` before the LayerNorm, as the kernel (and PyTorch) store it first.
pub fn window_reverse_residual_reference(
    shape: &WindowShape,
    dtype: DType,
    windows: &[f32],
    shortcut: &[f32],
    layer_norm: Option<LayerNormArgs<'_>>,
) -> (Vec<f32>, Option<Vec<f32>>) {
    let (c, ws) = (shape.channels, shape.window);
    let (sh, sw) = shape.shifts();
    let (h, w) = (shape.height, shape.width);
    let (nwh, nww) = (shape.windows_h(), shape.windows_w());
    let mut out = vec![0f32; shape.image_rows() * c];
    for b in 0..shape.batch {
        for i in 0..h {
            for j in 0..w {
                let (si, sj) = ((i + h - sh) % h, (j + w - sw) % w);
                let src =
                    ((b * nwh + si / ws) * nww + sj / ws) * ws * ws + (si % ws) * ws + sj % ws;
                let dst = (b * h + i) * w + j;
                for k in 0..c {
                    out[dst * c + k] = dtype.round(shortcut[dst * c + k] + windows[src * c + k]);
                }
            }
        }
    }
    let ln = layer_norm.map(|(g, bta, eps)| layer_norm_reference(&out, c, g, bta, eps));
    (out, ln)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::tests::noise as values;

    fn shape(b: usize, h: usize, w: usize, c: usize, ws: usize, shift: usize) -> WindowShape {
        WindowShape {
            batch: b,
            height: h,
            width: w,
            channels: c,
            window: ws,
            shift,
        }
    }

    #[test]
    fn row_layouts_for_swin_widths_keep_lanes_busy() {
        for (c, lpr, cpl) in [
            (96, 4, 3),
            (192, 8, 3),
            (384, 16, 3),
            (768, 32, 3),
            (8, 1, 1),
            (1024, 32, 4),
            (64, 2, 4),
        ] {
            assert_eq!(
                RowLayout::for_channels(c),
                RowLayout::Vector {
                    lanes_per_row: lpr,
                    chunks_per_lane: cpl
                },
                "C = {c}"
            );
        }
        assert_eq!(RowLayout::for_channels(100), RowLayout::Scalar);
        assert_eq!(RowLayout::for_channels(1032), RowLayout::Scalar);
        assert_eq!(RowLayout::for_channels(96).rows_per_block(), 128);
        assert_eq!(RowLayout::Scalar.rows_per_block(), 8);
    }

    #[test]
    fn launch_config_covers_all_rows() {
        let s = shape(64, 56, 56, 96, 7, 3);
        assert_eq!(s.partition_rows(), 64 * 3136);
        let cfg = RowLayout::for_channels(96)
            .launch_config(s.partition_rows())
            .unwrap();
        assert_eq!(cfg.grid.0 as usize * 128, 64 * 3136);
        // the kernels' rows per lane group is the launcher's
        assert!(SOURCE
            .text
            .contains(&format!("#define RPT {ROWS_PER_GROUP}\n")));
        assert!(SOURCE
            .text
            .contains(&format!("#define WO_THREADS {THREADS}\n")));
        let odd = RowLayout::Scalar.launch_config(9).unwrap();
        assert_eq!(odd.grid.0, 2);
    }

    #[test]
    fn padding_geometry_when_size_is_not_a_multiple_of_the_window() {
        let s = shape(2, 9, 10, 8, 7, 3);
        assert_eq!((s.windows_h(), s.windows_w()), (2, 2));
        assert_eq!(s.partition_rows(), 2 * 4 * 49);
        assert_eq!(s.shifts(), (3, 3));
        assert_eq!(shape(1, 2, 5, 8, 7, 3).shifts(), (1, 3));
        assert!(shape(1 << 20, 56, 56, 96, 7, 3).validate().is_err());
        assert!(shape(64, 56, 56, 96, 7, 3).validate().is_ok());
    }

    #[test]
    fn shift_partition_hand_checked() {
        // 2x2 image, one window of 2, shift 1: roll(-1, -1) of [[0,1],[2,3]] is [[3,2],[1,0]].
        let s = shape(1, 2, 2, 1, 2, 1);
        let out = shift_partition_reference(&s, &[0.0, 1.0, 2.0, 3.0]);
        assert_eq!(out, vec![3.0, 2.0, 1.0, 0.0]);
    }

    #[test]
    fn padded_rows_are_zero() {
        let s = shape(1, 3, 3, 2, 2, 0);
        let x: Vec<f32> = (1..=18).map(|v| v as f32).collect();
        let out = shift_partition_reference(&s, &x);
        // 4 windows of 4 rows = 16 rows, 9 real: 7 zero rows.
        let zero_rows = out
            .chunks(2)
            .filter(|r| r.iter().all(|&v| v == 0.0))
            .count();
        assert_eq!(zero_rows, 7);
        // window (0,0) row (0,0) is pixel (0,0)
        assert_eq!(&out[0..2], &[1.0, 2.0]);
        // window (1,1) row (0,0) is pixel (2,2)
        assert_eq!(&out[12 * 2..12 * 2 + 2], &[17.0, 18.0]);
    }

    #[test]
    fn reverse_undoes_partition_for_any_geometry() {
        for (h, w, ws, shift) in [
            (56, 56, 7, 3),
            (9, 10, 7, 3),
            (7, 7, 7, 0),
            (1, 1, 7, 0),
            (5, 13, 4, 2),
        ] {
            let s = shape(2, h, w, 3, ws, shift);
            let x: Vec<f32> = (0..s.image_rows() * 3).map(|v| (v % 251) as f32).collect();
            let part = shift_partition_reference(&s, &x);
            let zero = vec![0f32; x.len()];
            let (back, ln) = window_reverse_residual_reference(&s, DType::F16, &part, &zero, None);
            assert!(ln.is_none());
            assert_eq!(back, x, "{h}x{w} ws {ws} shift {shift}");
        }
    }

    #[test]
    fn layer_norm_reference_normalises() {
        let x = [1.0f32, 2.0, 3.0, 4.0, -5.0, 5.0, -5.0, 5.0];
        let y = layer_norm_reference(&x, 4, None, None, 0.0);
        for row in y.chunks(4) {
            let mean: f32 = row.iter().sum::<f32>() / 4.0;
            let var: f32 = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 4.0;
            assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5);
        }
        let g = [2.0f32; 4];
        let b = [1.0f32; 4];
        let y2 = layer_norm_reference(&x, 4, Some(&g), Some(&b), 0.0);
        assert!((y2[4] - (-2.0 + 1.0)).abs() < 1e-6);
    }

    #[test]
    fn reverse_residual_adds_shortcut_and_normalises() {
        let s = shape(1, 7, 7, 8, 7, 3);
        let win: Vec<f32> = (0..49 * 8).map(|v| (v % 7) as f32 * 0.25).collect();
        let sc: Vec<f32> = (0..49 * 8).map(|v| (v % 5) as f32).collect();
        let (out, ln) =
            window_reverse_residual_reference(&s, DType::F16, &win, &sc, Some((None, None, 1e-5)));
        let zero = vec![0f32; win.len()];
        let (rev, _) = window_reverse_residual_reference(&s, DType::F16, &win, &zero, None);
        for i in 0..out.len() {
            assert_eq!(out[i], DType::F16.round(rev[i] + sc[i]));
        }
        assert_eq!(ln.unwrap(), layer_norm_reference(&out, 8, None, None, 1e-5));
    }

    fn dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
    }

    fn close(what: &str, got: f32, want: f64) {
        assert!(
            (got as f64 - want).abs() < 2e-3 * (1.0 + want.abs()),
            "{what}: {got} vs finite differences {want}"
        );
    }

    #[test]
    fn ln_shift_partition_backward_is_the_forwards_gradient() {
        // A 9 x 10 map in windows of 4 (padded to 12 x 12), shifted by 2: padding rows, wrap.
        let s = shape(2, 9, 10, 6, 4, 2);
        let x = values(s.image_rows() * 6, 1);
        let gamma = values(6, 2);
        let beta = values(6, 3);
        let dy = values(s.partition_rows() * 6, 4);
        let eps = 1e-5;
        let loss = |x: &[f32], g: &[f32], b: &[f32]| {
            dot(
                &ln_shift_partition_reference(&s, x, Some(g), Some(b), eps),
                &dy,
            )
        };
        let (dx, dgamma, dbeta) =
            ln_shift_partition_backward_reference(&s, &x, &dy, Some(&gamma), eps);
        let h = 1e-3f32;
        let fd = |f: &dyn Fn(f32) -> f64| (f(h) - f(-h)) / (2.0 * h as f64);
        for i in (0..x.len()).step_by(5) {
            let d = fd(&|e| {
                let mut v = x.clone();
                v[i] += e;
                loss(&v, &gamma, &beta)
            });
            close(&format!("dx[{i}]"), dx[i], d);
        }
        for k in 0..6 {
            let dg = fd(&|e| {
                let mut v = gamma.clone();
                v[k] += e;
                loss(&x, &v, &beta)
            });
            close(&format!("dgamma[{k}]"), dgamma[k], dg);
            let db = fd(&|e| {
                let mut v = beta.clone();
                v[k] += e;
                loss(&x, &gamma, &v)
            });
            close(&format!("dbeta[{k}]"), dbeta[k], db);
        }
    }

    #[test]
    fn window_reverse_backward_is_the_forwards_gradient() {
        let s = shape(1, 9, 10, 6, 4, 2);
        let n = s.image_rows() * 6;
        let windows = values(s.partition_rows() * 6, 5);
        let shortcut = values(n, 6);
        let gamma = values(6, 7);
        let (g_out, g_ln) = (values(n, 8), values(n, 9));
        let eps = 1e-5;
        // The forward in f32 without rounding: the partition map's adjoint plus the shortcut.
        let forward = |w: &[f32], sc: &[f32], g: &[f32]| -> f64 {
            let y: Vec<f32> = unpartition_reference(&s, w)
                .iter()
                .zip(sc)
                .map(|(a, b)| a + b)
                .collect();
            dot(&y, &g_out) + dot(&layer_norm_reference(&y, 6, Some(g), None, eps), &g_ln)
        };
        let y: Vec<f32> = unpartition_reference(&s, &windows)
            .iter()
            .zip(&shortcut)
            .map(|(a, b)| a + b)
            .collect();
        let (d_win, d_sc, dgamma, _) = window_reverse_residual_backward_reference(
            &s,
            Some(&g_out),
            Some((&g_ln, &y)),
            Some(&gamma),
            eps,
        );
        let h = 1e-3f32;
        let fd = |f: &dyn Fn(f32) -> f64| (f(h) - f(-h)) / (2.0 * h as f64);
        for i in (0..windows.len()).step_by(7) {
            let d = fd(&|e| {
                let mut v = windows.clone();
                v[i] += e;
                forward(&v, &shortcut, &gamma)
            });
            close(&format!("d_windows[{i}]"), d_win[i], d);
        }
        for i in (0..n).step_by(11) {
            let d = fd(&|e| {
                let mut v = shortcut.clone();
                v[i] += e;
                forward(&windows, &v, &gamma)
            });
            close(&format!("d_shortcut[{i}]"), d_sc[i], d);
        }
        for k in 0..6 {
            let d = fd(&|e| {
                let mut v = gamma.clone();
                v[k] += e;
                forward(&windows, &shortcut, &v)
            });
            close(&format!("dgamma[{k}]"), dgamma[k], d);
        }
        // The padding rows of the window grid take no gradient.
        let rows: Vec<f32> = vec![1.0; n];
        let mapped = shift_partition_reference(&s, &rows);
        for (r, chunk) in mapped.chunks(6).enumerate() {
            if chunk[0] == 0.0 {
                assert!(
                    d_win[r * 6..(r + 1) * 6].iter().all(|v| *v == 0.0),
                    "row {r}"
                );
            }
        }
    }
}
