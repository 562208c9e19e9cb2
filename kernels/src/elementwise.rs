//! Bias + residual add, bias + exact GELU, zero-padding copies (`elementwise.cu`).

use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::runtime::{Args, DevPtr, Gpu, LaunchConfig, RawStream, Source};

/// `elementwise.cu`, one build for any sm_80+ GPU.
pub const SOURCE: Source = Source {
    file_name: "elementwise.cu",
    text: crate::sources::ELEMENTWISE,
    variants: None,
    arch_specific: None,
    kernels: &[
        "bias_residual_vec",
        "bias_residual_scalar",
        "bias_act_vec",
        "bias_act_scalar",
        "pad_copy_vec",
    ],
};

/// Threads per block of the vector kernels (`EW_THREADS` in elementwise.cu).
const THREADS: u32 = 128;
/// Threads per block of the grid-stride kernels (scalar paths, padding copy).
const STRIDE_THREADS: u32 = 256;
/// 16-byte vectors per thread in the vector kernels (`VPT` in elementwise.cu).
pub const VECTORS_PER_THREAD: u64 = 4;

/// Grid cap of the grid-stride kernels.
const MAX_STRIDE_BLOCKS: u64 = 65_536;

/// Activation applied after the bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity = 0,
    /// Exact GELU, `0.5 x (1 + erf(x / sqrt 2))` (PyTorch's default, timm's and BERT's).
    GeluErf = 1,
}

/// Vector (16-byte) or scalar path for a `[rows, cols]` elementwise op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementwisePath {
    Vector { n_vec: u64, cols_vec: u32 },
    Scalar { n: u64, cols: u32 },
}

impl ElementwisePath {
    /// 16-byte accesses need rows of whole vectors and aligned pointers.
    pub fn choose(rows: usize, cols: usize, ptrs: &[DevPtr]) -> Result<Self> {
        if rows == 0 || cols == 0 {
            return Err(invalid(format!("empty elementwise shape {rows} x {cols}")));
        }
        if cols > i32::MAX as usize {
            return Err(invalid("too many columns"));
        }
        let n = rows as u64 * cols as u64;
        if n / 8 > i32::MAX as u64 {
            // the vector kernels index vectors in 32 bits
            return Err(invalid(format!(
                "elementwise op of {n} elements is too large"
            )));
        }
        if cols.is_multiple_of(8) && ptrs.iter().all(|p| p % 16 == 0) {
            Ok(Self::Vector {
                n_vec: n / 8,
                cols_vec: (cols / 8) as u32,
            })
        } else {
            Ok(Self::Scalar {
                n,
                cols: cols as u32,
            })
        }
    }

    pub fn launch_config(self) -> Result<LaunchConfig> {
        match self {
            Self::Vector { n_vec, .. } => {
                LaunchConfig::linear(n_vec.div_ceil(THREADS as u64 * VECTORS_PER_THREAD), THREADS)
            }
            Self::Scalar { n, .. } => LaunchConfig::linear(
                n.div_ceil(STRIDE_THREADS as u64).min(MAX_STRIDE_BLOCKS),
                STRIDE_THREADS,
            ),
        }
    }
}

/// `out = x + bias + res` over `[rows, cols]`, bias `[cols]`. `out` may alias `x` or `res`.
///
/// # Safety
/// `x`, `res`, `out` must be device allocations of `rows * cols` elements, `bias` of `cols`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_bias_residual(
    gpu: &Gpu,
    dtype: DType,
    rows: usize,
    cols: usize,
    x: DevPtr,
    bias: DevPtr,
    res: DevPtr,
    out: DevPtr,
    stream: RawStream,
) -> Result<()> {
    let path = ElementwisePath::choose(rows, cols, &[x, bias, res, out])?;
    let cfg = path.launch_config()?;
    let (name, args) = match path {
        ElementwisePath::Vector { n_vec, cols_vec } => (
            "bias_residual_vec",
            Args::default()
                .ptr(x)
                .ptr(bias)
                .ptr(res)
                .ptr(out)
                .i64(n_vec as i64)
                .i32(cols_vec as i32),
        ),
        ElementwisePath::Scalar { n, cols } => (
            "bias_residual_scalar",
            Args::default()
                .ptr(x)
                .ptr(bias)
                .ptr(res)
                .ptr(out)
                .i64(n as i64)
                .i32(cols as i32),
        ),
    };
    // SAFETY: arguments match the kernels' signatures; the vector kernel guards i < n_vec and
    // the scalar one strides to n; extents are the caller's contract.
    unsafe { gpu.launch(&SOURCE, dtype, 0, name, cfg, stream, args) }
}

/// `out = act(x + bias)` over `[rows, cols]`; `bias` may be None; `out` may alias `x`.
///
/// # Safety
/// `x`, `out` must be device allocations of `rows * cols` elements, `bias` of `cols`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_bias_act(
    gpu: &Gpu,
    dtype: DType,
    rows: usize,
    cols: usize,
    x: DevPtr,
    bias: Option<DevPtr>,
    out: DevPtr,
    act: Activation,
    stream: RawStream,
) -> Result<()> {
    let mut ptrs = vec![x, out];
    ptrs.extend(bias);
    let path = ElementwisePath::choose(rows, cols, &ptrs)?;
    let cfg = path.launch_config()?;
    let (name, n, c) = match path {
        ElementwisePath::Vector { n_vec, cols_vec } => ("bias_act_vec", n_vec, cols_vec),
        ElementwisePath::Scalar { n, cols } => ("bias_act_scalar", n, cols),
    };
    let args = Args::default()
        .ptr(x)
        .ptr(bias.unwrap_or(0))
        .ptr(out)
        .i64(n as i64)
        .i32(c as i32)
        .i32(act as i32);
    // SAFETY: arguments match bias_act_{vec,scalar}; bounds are guarded in the kernels.
    unsafe { gpu.launch(&SOURCE, dtype, 0, name, cfg, stream, args) }
}

/// A zero-padding copy `[batch, rows, cols]` (row stride `ld_src`, batch stride
/// `src_batch_stride`) into a contiguous `[batch, rows_dst, cols_dst]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadCopy {
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld_src: usize,
    pub src_batch_stride: usize,
    pub rows_dst: usize,
    pub cols_dst: usize,
}

impl PadCopy {
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.rows == 0 || self.cols == 0 {
            return Err(invalid("empty pad copy"));
        }
        if self.rows_dst < self.rows || self.cols_dst < self.cols {
            return Err(invalid(
                "pad copy: the destination is smaller than the source",
            ));
        }
        if !self.cols_dst.is_multiple_of(8) {
            return Err(invalid(
                "pad copy: destination columns must be a multiple of 8",
            ));
        }
        if self.ld_src < self.cols {
            return Err(invalid("pad copy: ld_src < cols"));
        }
        if self.rows_dst > i32::MAX as usize
            || self.cols_dst > i32::MAX as usize
            || self.batch * self.rows_dst * self.cols_dst / 8 > i32::MAX as usize
        {
            return Err(invalid("pad copy too large"));
        }
        Ok(())
    }

    pub fn launch_config(&self) -> Result<LaunchConfig> {
        let n_vec = (self.batch * self.rows_dst * self.cols_dst / 8) as u64;
        LaunchConfig::linear(
            n_vec.div_ceil(STRIDE_THREADS as u64).min(MAX_STRIDE_BLOCKS),
            STRIDE_THREADS,
        )
    }
}

/// Zero-padding copy (see [`PadCopy`]).
///
/// # Safety
/// `src` must hold the strided source extent, `dst` (16-byte aligned) `batch * rows_dst *
/// cols_dst` elements; they must not overlap.
pub unsafe fn launch_pad_copy(
    gpu: &Gpu,
    dtype: DType,
    p: &PadCopy,
    src: DevPtr,
    dst: DevPtr,
    stream: RawStream,
) -> Result<()> {
    p.validate()?;
    if !dst.is_multiple_of(16) {
        return Err(invalid("pad copy: dst must be 16-byte aligned"));
    }
    let args = Args::default()
        .ptr(src)
        .ptr(dst)
        .i64(p.batch as i64)
        .i32(p.rows as i32)
        .i32(p.cols as i32)
        .i64(p.src_batch_stride as i64)
        .i32(p.ld_src as i32)
        .i32(p.rows_dst as i32)
        .i32(p.cols_dst as i32);
    // SAFETY: arguments match pad_copy_vec; it strides over exactly the destination extent and
    // reads the source only inside (rows, cols).
    unsafe {
        gpu.launch(
            &SOURCE,
            dtype,
            0,
            "pad_copy_vec",
            p.launch_config()?,
            stream,
            args,
        )
    }
}

/// Round `x` up to a multiple of 8 (the alignment tensor cores and cuBLASLt's fast paths want).
pub fn round_up8(x: usize) -> usize {
    x.div_ceil(8) * 8
}

/// erf(x) in f64 (std has no stable erf): the Maclaurin series for |x| < 2, the continued
/// fraction of erfc (Lentz) beyond; agrees with tabulated values to 1e-12 (see the tests).
pub fn erf(x: f64) -> f64 {
    if x.abs() < 2.0 {
        // Maclaurin series: erf x = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)).
        let mut term = x;
        let mut sum = x;
        let x2 = x * x;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs().max(1e-300) {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
            if n > 200.0 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // Continued fraction for erfc (Lentz), converges fast for |x| >= 2.
        let ax = x.abs();
        let mut f = ax;
        let mut c = ax;
        let mut d = 0.0;
        for k in 1..200 {
            let a = k as f64 / 2.0;
            d = ax + a * d;
            d = if d == 0.0 { 1e-300 } else { 1.0 / d };
            c = ax + a / c;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        let erfc = (-ax * ax).exp() / (f * std::f64::consts::PI.sqrt());
        (1.0 - erfc).copysign(x)
    }
}

/// Exact GELU in f64.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// CPU reference of [`launch_bias_residual`].
pub fn bias_residual_reference(x: &[f32], bias: &[f32], res: &[f32]) -> Vec<f32> {
    let cols = bias.len();
    x.iter()
        .zip(res)
        .enumerate()
        .map(|(i, (&a, &r))| (a as f64 + bias[i % cols] as f64 + r as f64) as f32)
        .collect()
}

/// CPU reference of [`launch_bias_act`].
pub fn bias_act_reference(
    x: &[f32],
    bias: Option<&[f32]>,
    cols: usize,
    act: Activation,
) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &a)| {
            let v = a as f64 + bias.map_or(0.0, |b| b[i % cols] as f64);
            (match act {
                Activation::Identity => v,
                Activation::GeluErf => gelu_erf(v),
            }) as f32
        })
        .collect()
}

/// CPU reference of [`launch_pad_copy`].
pub fn pad_reference(p: &PadCopy, src: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; p.batch * p.rows_dst * p.cols_dst];
    for b in 0..p.batch {
        for r in 0..p.rows {
            for c in 0..p.cols {
                out[(b * p.rows_dst + r) * p.cols_dst + c] =
                    src[b * p.src_batch_stride + r * p.ld_src + c];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_path_needs_whole_vectors_and_alignment() {
        assert_eq!(
            ElementwisePath::choose(200_704, 96, &[0, 256, 512]).unwrap(),
            ElementwisePath::Vector {
                n_vec: 200_704 * 12,
                cols_vec: 12
            }
        );
        assert!(matches!(
            ElementwisePath::choose(3, 49, &[0]).unwrap(),
            ElementwisePath::Scalar { n: 147, cols: 49 }
        ));
        assert!(matches!(
            ElementwisePath::choose(3, 96, &[0, 8]).unwrap(),
            ElementwisePath::Scalar { .. }
        ));
        assert!(ElementwisePath::choose(0, 96, &[]).is_err());
    }

    #[test]
    fn source_defaults_match_the_launcher() {
        let src = SOURCE.text;
        assert!(src.contains(&format!("#define VPT {VECTORS_PER_THREAD}\n")));
        assert!(src.contains(&format!("#define EW_THREADS {THREADS}\n")));
    }

    #[test]
    fn vector_grid_covers_every_vector_once() {
        let p = ElementwisePath::Vector {
            n_vec: 200_704 * 12,
            cols_vec: 12,
        };
        let cfg = p.launch_config().unwrap();
        let covered = cfg.grid.0 as u64 * THREADS as u64 * VECTORS_PER_THREAD;
        assert!(covered >= 200_704 * 12 && covered - 200_704 * 12 < 512);
        let s = ElementwisePath::Scalar {
            n: 1 << 30,
            cols: 3,
        };
        assert_eq!(s.launch_config().unwrap().grid.0, 65_536);
        assert!(ElementwisePath::choose(1 << 30, 128, &[]).is_err());
    }

    #[test]
    fn erf_matches_tabulated_values() {
        for (x, e) in [
            (0.0, 0.0),
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (1.5, 0.966_105_146_475_310_7),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (-1.0, -0.842_700_792_949_714_9),
        ] {
            assert!((erf(x) - e).abs() < 1e-12, "erf({x}) = {} vs {e}", erf(x));
        }
        // GELU: 0 at 0, ~x for large x, ~0 for very negative x; gelu(1) = 0.8413447460685429.
        assert_eq!(gelu_erf(0.0), 0.0);
        assert!((gelu_erf(1.0) - 0.841_344_746_068_542_9).abs() < 1e-12);
        assert!((gelu_erf(10.0) - 10.0).abs() < 1e-12);
        assert!(gelu_erf(-10.0).abs() < 1e-12);
    }

    #[test]
    fn bias_residual_and_act_references() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let r = [0.5f32, 0.5, -1.0, -1.0];
        let b = [10.0f32, 20.0];
        assert_eq!(
            bias_residual_reference(&x, &b, &r),
            vec![11.5, 22.5, 12.0, 23.0]
        );
        let g = bias_act_reference(&[0.0, 1.0], None, 2, Activation::GeluErf);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 0.841_344_7).abs() < 1e-6);
        assert_eq!(
            bias_act_reference(&x, Some(&b), 2, Activation::Identity),
            vec![11.0, 22.0, 13.0, 24.0]
        );
    }

    #[test]
    fn pad_copy_validation_and_reference() {
        let p = PadCopy {
            batch: 2,
            rows: 3,
            cols: 5,
            ld_src: 5,
            src_batch_stride: 15,
            rows_dst: 4,
            cols_dst: 8,
        };
        p.validate().unwrap();
        let src: Vec<f32> = (0..30).map(|v| v as f32 + 1.0).collect();
        let out = pad_reference(&p, &src);
        assert_eq!(out.len(), 2 * 4 * 8);
        assert_eq!(&out[0..8], &[1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0]);
        assert!(out[24..32].iter().all(|&v| v == 0.0)); // padded row of batch 0
        assert_eq!(out[32], 16.0); // batch 1 starts at src[15]
        assert!(PadCopy { cols_dst: 7, ..p }.validate().is_err());
        assert!(PadCopy { rows_dst: 2, ..p }.validate().is_err());
        assert_eq!(round_up8(49), 56);
        assert_eq!(round_up8(4095), 4096);
        assert_eq!(round_up8(96), 96);
    }
}
