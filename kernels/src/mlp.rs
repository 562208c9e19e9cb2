//! A pre-norm transformer block's second half with the hidden tensor kept on chip (`mlp.cu`):
//! `out = x + gelu_erf(LayerNorm(x) W1^T + b1) W2^T + b2`, one kernel.
//!
//! The unfused chain (LayerNorm, fc1, GELU, fc2 + residual) moves the `[M, 4C]` hidden tensor
//! through memory four times and the normalised activations twice; at the widths of Swin's first stages (C = 96, 192) that is most of the block's
//! time, and no cuBLASLt epilogue computes the exact (erf) GELU. The kernel is built per width
//! (`MLP_C` in [`SUPPORTED_WIDTHS`]) because the width sizes each warp's accumulators; wider
//! models keep the GEMMs. At C = 96 with hidden 4C both weights fit in shared memory: a
//! persistent kernel loads them once per SM ([`RESIDENT_WIDTH`]); elsewhere they stream through
//! it in chunks of 64 hidden columns.
//!
//! On sm_90 GPUs the same function runs as `ln_mlp_residual_wg` (`mlp_sm90.cu`): warpgroup MMAs
//! fed by TMA, so that one warpgroup's GELU overlaps the other's products.

use crate::dtype::DType;
use crate::elementwise::gelu_erf;
use crate::error::{invalid, Result};
use crate::runtime::{
    encode_tensor_map, Args, DevPtr, Gpu, LaunchConfig, RawStream, Source, TmaGeometry,
};

/// The widths `C` the kernel is built for.
pub const SUPPORTED_WIDTHS: [u32; 3] = [96, 128, 192];
/// Rows per CTA (`MLP_BM`): 8 warps of 16 rows.
pub const ROWS_PER_CTA: usize = 128;
const THREADS: u32 = 256;
/// Hidden columns per chunk (`MLP_BH`): the hidden width must be a multiple of it.
pub const HIDDEN_CHUNK: usize = 64;
/// The width whose weights (hidden 4C) stay resident in shared memory (`ln_mlp_residual_resident`).
pub const RESIDENT_WIDTH: usize = 96;

/// `mlp.cu`, built per width for any sm_80+ GPU.
pub const SOURCE: Source = Source {
    file_name: "mlp.cu",
    text: crate::sources::MLP,
    variants: Some(("MLP_C", &SUPPORTED_WIDTHS)),
    arch_specific: None,
    kernels: &["ln_mlp_residual", "ln_mlp_residual_resident"],
};

/// `mlp_sm90.cu`, built per width for `compute_90a`, run on sm_90 GPUs.
pub const SOURCE_SM90: Source = Source {
    file_name: "mlp_sm90.cu",
    text: crate::sources::MLP_SM90,
    variants: Some(("MLP_C", &SUPPORTED_WIDTHS)),
    arch_specific: Some((9, 0)),
    kernels: &["ln_mlp_residual_wg"],
};
/// Threads of `ln_mlp_residual_wg` (`MW_THREADS`): two consumer warpgroups of 64 rows and a
/// producer, a warpgroup at C = 96 (which gives its registers to the consumers), else a warp.
pub fn sm90_threads(width: usize) -> u32 {
    if width <= 96 {
        3 * 128
    } else {
        2 * 128 + 32
    }
}
/// Rows per tile of `ln_mlp_residual_wg` (`MW_BM`).
const SM90_ROWS: usize = 128;
/// Bytes of one 64-row, 128-byte-swizzled TMA box (`MW_TILE`).
const SM90_BOX: usize = 8192;

/// The shape of one MLP call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlpShape {
    /// Rows (tokens).
    pub rows: usize,
    /// Model width `C` (fc1's input, fc2's output).
    pub width: usize,
    /// Hidden width (fc1's output).
    pub hidden: usize,
}

impl MlpShape {
    pub fn validate(&self) -> Result<()> {
        if self.rows == 0 || self.width == 0 || self.hidden == 0 {
            return Err(invalid(format!("empty MLP shape {self:?}")));
        }
        if !SUPPORTED_WIDTHS.contains(&(self.width as u32)) {
            return Err(invalid(format!(
                "MLP width {} is not one the kernel is built for {SUPPORTED_WIDTHS:?}",
                self.width
            )));
        }
        if !self.hidden.is_multiple_of(HIDDEN_CHUNK) || self.hidden > i32::MAX as usize {
            return Err(invalid(format!(
                "MLP hidden width {} must be a multiple of {HIDDEN_CHUNK}",
                self.hidden
            )));
        }
        if self.rows > i64::MAX as usize / self.width {
            return Err(invalid("MLP rows too many"));
        }
        Ok(())
    }

    /// Dynamic shared memory of one CTA of the streaming kernel, as `MLP_SMEM_ELEMS` in `mlp.cu`.
    pub fn shared_bytes(&self) -> u32 {
        let c = self.width;
        let elems =
            ROWS_PER_CTA * (c + 8) + 2 * HIDDEN_CHUNK * (c + 8) + 2 * c * (HIDDEN_CHUNK + 8);
        (elems * 2) as u32
    }

    /// True when the resident kernel takes this shape (it is built for C = 96, hidden 4C).
    pub fn resident(&self) -> bool {
        self.width == RESIDENT_WIDTH && self.hidden == 4 * RESIDENT_WIDTH
    }

    /// Dynamic shared memory of `ln_mlp_residual_wg`: up to 1023 bytes to align the tiles to
    /// 1024 (the swizzle atom), two slots of 128 rows, the ring's stages (W1's 64 rows and W2's
    /// 64 columns of a hidden chunk) and the barriers; a row of width C takes ceil(C / 64) boxes
    /// of 64 columns.
    pub fn sm90_shared_bytes(&self) -> u32 {
        let atoms = self.width.div_ceil(64);
        let slot = 2 * atoms * SM90_BOX;
        let stage = atoms * SM90_BOX + self.width * 128;
        let ring = sm90_ring(self.width);
        (1024 + 2 * slot + ring * stage + (2 * ring + 4) * 8) as u32
    }

    /// Dynamic shared memory of the resident kernel, as `MLP_RESIDENT_SMEM_ELEMS`: both weights
    /// and two row tiles.
    pub fn resident_shared_bytes(&self) -> u32 {
        let (c, h) = (self.width, self.hidden);
        ((h * (c + 8) + c * (h + 8) + 2 * ROWS_PER_CTA * (c + 8)) * 2) as u32
    }
}

/// Stages of `ln_mlp_residual_wg`'s weight ring (`MW_RING`): 2 where 3 would not fit.
fn sm90_ring(width: usize) -> usize {
    if width <= 128 {
        3
    } else {
        2
    }
}

/// The TMA views `ln_mlp_residual_wg` loads through, as 4-D maps with two unit dimensions: x
/// `[C][rows]` and W1 `[C][hidden]` in boxes of 64 columns by 64 rows, W2 `[hidden][C]` in
/// boxes of 64 hidden columns by all C rows. Columns and rows past the end read as zeros.
pub fn sm90_geometry(shape: &MlpShape, es: usize) -> [TmaGeometry; 3] {
    let (c, h, m) = (shape.width as u64, shape.hidden as u64, shape.rows as u64);
    let es = es as u64;
    let view = |cols: u64, rows: u64, box_rows: u32| TmaGeometry {
        dims: [cols, rows, 1, 1],
        strides: [cols * es, cols * rows * es, cols * rows * es],
        boxdim: [64, box_rows, 1, 1],
    };
    [view(c, m, 64), view(c, h, 64), view(h, c, c as u32)]
}

/// Buffers of [`launch_ln_mlp_residual`], all row-major in the element type.
#[derive(Debug, Clone, Copy)]
pub struct MlpBuffers {
    /// `[rows, C]`: the block's activations (LayerNorm's input and the residual).
    pub x: DevPtr,
    /// `[C]`: LayerNorm's scale.
    pub gamma: DevPtr,
    /// `[C]`: LayerNorm's shift.
    pub beta: DevPtr,
    /// `[hidden, C]`: fc1's weight.
    pub w1: DevPtr,
    /// `[hidden]`: fc1's bias.
    pub b1: DevPtr,
    /// `[C, hidden]`: fc2's weight.
    pub w2: DevPtr,
    /// `[C]`: fc2's bias.
    pub b2: DevPtr,
    /// `[rows, C]`: may be `x` (each CTA reads its rows before writing them).
    pub out: DevPtr,
}

/// `out = x + gelu_erf(LayerNorm(x) W1^T + b1) W2^T + b2` in one kernel.
///
/// # Safety
/// Pointers must be device allocations of the current context with the extents documented on
/// [`MlpBuffers`].
pub unsafe fn launch_ln_mlp_residual(
    gpu: &Gpu,
    dtype: DType,
    shape: &MlpShape,
    eps: f32,
    bufs: &MlpBuffers,
    stream: RawStream,
) -> Result<()> {
    shape.validate()?;
    let big = [bufs.x, bufs.w1, bufs.w2, bufs.out];
    let small = [bufs.gamma, bufs.beta, bufs.b1, bufs.b2];
    if big.iter().any(|p| *p == 0 || p % 16 != 0) || small.iter().any(|p| *p == 0 || p % 4 != 0) {
        return Err(invalid(
            "MLP buffers must be 16-byte aligned (LayerNorm and bias vectors 4-byte) and not null",
        ));
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(invalid(format!(
            "LayerNorm eps {eps} must be finite and >= 0"
        )));
    }
    let tiles = shape.rows.div_ceil(ROWS_PER_CTA);
    if tiles > i32::MAX as usize {
        return Err(invalid("MLP grid too large"));
    }
    let variant = shape.width as u32;
    if gpu.current_arch()? == (9, 0) {
        // SAFETY: as this function's; the buffers were checked above.
        return unsafe { launch_sm90(gpu, dtype, shape, eps, bufs, stream) };
    }
    // Both kernels take these; the streaming one also the hidden width.
    let args = Args::default()
        .ptr(bufs.x)
        .ptr(bufs.gamma)
        .ptr(bufs.beta)
        .f32(eps)
        .ptr(bufs.w1)
        .ptr(bufs.b1)
        .ptr(bufs.w2)
        .ptr(bufs.b2)
        .ptr(bufs.out)
        .i64(shape.rows as i64);
    if shape.resident() {
        // A GPU whose CTAs cannot have that much shared memory (sm_80: 163 KiB) refuses the
        // attribute: the streaming kernel runs there instead.
        let smem = shape.resident_shared_bytes();
        let name = "ln_mlp_residual_resident";
        if let Ok(resident @ 1..) = gpu.resident_ctas(&SOURCE, dtype, variant, name, THREADS, smem)
        {
            let cfg = LaunchConfig {
                grid: ((tiles as u64).min(resident) as u32, 1, 1),
                block: (THREADS, 1, 1),
                shared_bytes: smem,
            };
            // SAFETY: the argument list matches ln_mlp_residual_resident; its CTAs walk the
            // row tiles and guard rows past the end; extents are the caller's contract.
            return unsafe { gpu.launch(&SOURCE, dtype, variant, name, cfg, stream, args) };
        }
    }
    let cfg = LaunchConfig {
        grid: (tiles as u32, 1, 1),
        block: (THREADS, 1, 1),
        shared_bytes: shape.shared_bytes(),
    };
    let args = args.i32(shape.hidden as i32);
    // SAFETY: the argument list matches ln_mlp_residual; the grid covers `rows` rows and the
    // kernel guards rows past the end; extents are the caller's contract.
    unsafe {
        gpu.launch(
            &SOURCE,
            dtype,
            variant,
            "ln_mlp_residual",
            cfg,
            stream,
            args,
        )
    }
}

/// `ln_mlp_residual_wg` on an sm_90 GPU: persistent, one CTA per SM at most.
///
/// # Safety
/// As [`launch_ln_mlp_residual`], whose checks have passed.
unsafe fn launch_sm90(
    gpu: &Gpu,
    dtype: DType,
    shape: &MlpShape,
    eps: f32,
    bufs: &MlpBuffers,
    stream: RawStream,
) -> Result<()> {
    let name = "ln_mlp_residual_wg";
    let variant = shape.width as u32;
    let smem = shape.sm90_shared_bytes();
    let threads = sm90_threads(shape.width);
    let resident = gpu.resident_ctas(&SOURCE_SM90, dtype, variant, name, threads, smem)?;
    let tiles = shape.rows.div_ceil(SM90_ROWS) as u64;
    let cfg = LaunchConfig {
        grid: (tiles.min(resident.max(1)) as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes: smem,
    };
    let [gx, g1, g2] = sm90_geometry(shape, dtype.size_bytes());
    let args = Args::default()
        .ptr(bufs.x)
        .ptr(bufs.gamma)
        .ptr(bufs.beta)
        .f32(eps)
        .ptr(bufs.b1)
        .ptr(bufs.b2)
        .ptr(bufs.out)
        .i64(shape.rows as i64)
        .i32(shape.hidden as i32)
        .tensor_map(encode_tensor_map(bufs.x, dtype, &gx)?)
        .tensor_map(encode_tensor_map(bufs.w1, dtype, &g1)?)
        .tensor_map(encode_tensor_map(bufs.w2, dtype, &g2)?);
    // SAFETY: the argument list matches ln_mlp_residual_wg; its CTAs stride over the row tiles
    // whatever the grid and guard rows past the end; the maps view the caller's buffers with
    // the extents documented on MlpBuffers.
    unsafe { gpu.launch(&SOURCE_SM90, dtype, variant, name, cfg, stream, args) }
}

/// The weights of [`ln_mlp_residual_reference`], as f32 row-major slices.
#[derive(Debug, Clone, Copy)]
pub struct MlpWeights<'a> {
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub w1: &'a [f32],
    pub b1: &'a [f32],
    pub w2: &'a [f32],
    pub b2: &'a [f32],
}

/// CPU reference of [`launch_ln_mlp_residual`]: LayerNorm's output and the hidden activations
/// are rounded through `round` (the element type), as the kernel and the unfused chain round
/// them.
pub fn ln_mlp_residual_reference(
    shape: &MlpShape,
    x: &[f32],
    w: &MlpWeights,
    eps: f64,
    round: impl Fn(f64) -> f64,
) -> Vec<f32> {
    let (c, hid) = (shape.width, shape.hidden);
    let mut out = vec![0f32; shape.rows * c];
    let mut h = vec![0f64; hid];
    let mut xn = vec![0f64; c];
    for r in 0..shape.rows {
        let row = &x[r * c..(r + 1) * c];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for (i, n) in xn.iter_mut().enumerate() {
            *n = round((row[i] as f64 - mean) * rstd * w.gamma[i] as f64 + w.beta[i] as f64);
        }
        for (j, hj) in h.iter_mut().enumerate() {
            let wr = &w.w1[j * c..(j + 1) * c];
            let dot: f64 = xn.iter().zip(wr).map(|(&a, &b)| a * b as f64).sum();
            *hj = round(gelu_erf(dot + w.b1[j] as f64));
        }
        for o in 0..c {
            let wr = &w.w2[o * hid..(o + 1) * hid];
            let dot: f64 = h.iter().zip(wr).map(|(&a, &b)| a * b as f64).sum();
            out[r * c + o] = (dot + w.b2[o] as f64 + row[o] as f64) as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_outside_the_builds_are_refused() {
        let ok = MlpShape {
            rows: 200_704,
            width: 96,
            hidden: 384,
        };
        ok.validate().unwrap();
        for bad in [
            MlpShape { width: 768, ..ok },
            MlpShape { hidden: 100, ..ok },
            MlpShape { rows: 0, ..ok },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shared_memory_matches_the_kernel_and_fits_a_cta() {
        // (128 * 104 + 2 * 64 * 104 + 2 * 96 * 72) * 2
        let s = |width| {
            MlpShape {
                rows: 1,
                width,
                hidden: 64,
            }
            .shared_bytes()
        };
        assert_eq!(s(96), 80_896);
        // the largest build stays under the 163 KiB an sm_80 CTA may have
        assert!(s(192) <= 163 * 1024, "{}", s(192));
        // (384 * 104 + 96 * 392 + 2 * 128 * 104) * 2, under sm_90's 227 KiB
        let swin = MlpShape {
            rows: 1,
            width: 96,
            hidden: 384,
        };
        assert!(swin.resident());
        assert_eq!(swin.resident_shared_bytes(), 208_384);
        assert!(swin.resident_shared_bytes() <= 227 * 1024);
        assert!(!MlpShape {
            hidden: 768,
            ..swin
        }
        .resident());
    }

    #[test]
    fn the_sm90_kernel_fits_a_cta_and_views_its_operands_by_64_columns() {
        let s1 = MlpShape {
            rows: 200_704,
            width: 96,
            hidden: 384,
        };
        // 1 KiB slack, 2 slots of 2 warpgroups x 2 boxes, 3 stages of (2 boxes + 96 rows of
        // 128 bytes), 10 barriers
        assert_eq!(
            s1.sm90_shared_bytes() as usize,
            1024 + 2 * 32_768 + 3 * (16_384 + 12_288) + 80
        );
        let s2 = MlpShape {
            rows: 50_176,
            width: 192,
            hidden: 768,
        };
        for s in [s1, s2, MlpShape { width: 128, ..s2 }] {
            assert!(s.sm90_shared_bytes() <= 227 * 1024, "{s:?}");
        }
        // a producer warpgroup that gives its registers up at C = 96, a producer warp wider
        assert_eq!((sm90_threads(96), sm90_threads(192)), (384, 288));
        let [x, w1, w2] = sm90_geometry(&s2, 2);
        assert_eq!(
            (x.dims, x.strides[0], x.boxdim),
            ([192, 50_176, 1, 1], 384, [64, 64, 1, 1])
        );
        assert_eq!((w1.dims, w1.strides[0]), ([192, 768, 1, 1], 384));
        assert_eq!(
            (w2.dims, w2.strides[0], w2.boxdim),
            ([768, 192, 1, 1], 1536, [64, 192, 1, 1])
        );
        // TMA's rules: strides multiples of 16, a box row within the 128-byte swizzle span, at
        // most 256 rows a box
        for g in [x, w1, w2] {
            assert!(g.strides.iter().all(|s| s % 16 == 0), "{g:?}");
            assert!(g.boxdim[0] * 2 <= 128 && g.boxdim[1] <= 256);
        }
    }

    #[test]
    fn reference_is_layer_norm_then_the_unfused_mlp() {
        let shape = MlpShape {
            rows: 2,
            width: 2,
            hidden: 3,
        };
        // rows [1, 3] and [6, 2]: LayerNorm (no eps) gives [-1, 1] and [1, -1]; scaled by
        // gamma [1, 0.5] and shifted by beta [0, 1]: [-1, 1.5] and [1, 0.5]
        let x = [1.0, 3.0, 6.0, 2.0];
        let xn: [f32; 4] = [-1.0, 1.5, 1.0, 0.5];
        let w1 = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let b1 = [0.0, 0.5, -1.0];
        let w2 = [1.0, 1.0, 1.0, 0.0, 2.0, 0.0];
        let b2 = [0.25, -0.25];
        let weights = MlpWeights {
            gamma: &[1.0, 0.5],
            beta: &[0.0, 1.0],
            w1: &w1,
            b1: &b1,
            w2: &w2,
            b2: &b2,
        };
        let out = ln_mlp_residual_reference(&shape, &x, &weights, 0.0, |v| v);
        for r in 0..2 {
            let x_row = &x[r * 2..r * 2 + 2];
            let x = &xn[r * 2..r * 2 + 2];
            let h: Vec<f64> = (0..3)
                .map(|j| {
                    gelu_erf(
                        x[0] as f64 * w1[j * 2] as f64
                            + x[1] as f64 * w1[j * 2 + 1] as f64
                            + b1[j] as f64,
                    )
                })
                .collect();
            for o in 0..2 {
                let want = (0..3).map(|j| h[j] * w2[o * 3 + j] as f64).sum::<f64>()
                    + b2[o] as f64
                    + x_row[o] as f64;
                assert!((out[r * 2 + o] as f64 - want).abs() < 1e-5);
            }
        }
    }
}
