//! Fused attention for short sequences: Swin window attention, ViT, BERT.
//!
//! Input is the QKV projection's output as it lies, `[batch * seq, 3, heads, head_dim]`; output
//! is `[batch * seq, heads * head_dim]`, ready for the output projection. Optional additive terms:
//! a per-head bias `[heads, seq, seq]` (Swin's relative-position bias, gathered once) and a mask,
//! either per window `[n_windows, seq, seq]` used by batch entry `b % n_windows` (Swin's shifted
//! windows) or per key `[batch, seq]` (BERT's key-padding mask, already additive).
//!
//! [`launch_attention`] picks one kernel per case ([`AttentionParams::kernel`]), each the
//! fastest measured there (`kernels/NOTES.md`); the three families are one `.cu` file and one
//! module each:
//!
//! | GPU | shape | kernel | module |
//! |---|---|---|---|
//! | any sm_80+ | seq <= 64, a [combined](AttentionMask::Combined) additive tensor or none | `fmha_fwd_window` | [`short`] |
//! | any sm_80+ | seq <= 64, separate bias / window mask / key mask | `fmha_fwd_short` | [`short`] |
//! | sm_90 | head_dim 64, seq 65 to 128, no bias, at most a key mask | `fmha_fwd_item_tma` | [`sm90`] |
//! | sm_90 | head_dim 64, seq over 128, no bias, at most a key mask | `fmha_fwd_long_tma` | [`sm90`] |
//! | any sm_80+ | every other seq over 64 (the portable path) | `fmha_fwd_long` | [`long`] |
//!
//! They all compute the function of [`attention_reference`]. Its gradient, for seq <= 64 on a
//! combined additive tensor or none, is `fmha_bwd_window` ([`backward`]).

pub mod backward;
pub mod long;
pub mod short;
pub mod sm90;

pub use backward::{attention_backward_reference, launch_attention_backward, BackwardBuffers};
pub use short::{add_smem_stride, combine_reference, launch_attention_combine};

use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::runtime::{tuning_value, Args, DevPtr, Gpu, LaunchConfig, RawStream};

/// Head dimensions the kernels are built for.
pub const SUPPORTED_HEAD_DIMS: [u32; 2] = [32, 64];
/// The longest sequence of the short kernels (4 warps x 16 query rows, one 64-key block).
pub const BLOCK_M: usize = 64;
/// Query rows per item of the kernels for longer sequences (`fmha_fwd_long`'s CTA, the sm_90
/// kernels' two warpgroups).
pub const LONG_BLOCK_M: usize = 128;

/// False when `FUSEPROF_KERNELS_DEFINES` has `FMHA_SM90=0`: then sm_90 GPUs run the portable
/// kernels too, as every other GPU does (to rule the Hopper kernels out, or to check the
/// portable path on a Hopper GPU).
pub fn sm90_enabled() -> bool {
    tuning_value("FMHA_SM90", 1) != 0
}

/// The attention kernels, one per case [`launch_attention`] can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// `fmha_fwd_window` ([`short`]): persistent, two cp.async stages per item.
    Window,
    /// `fmha_fwd_short` ([`short`]): one CTA per (batch, head), bias and mask summed in shared
    /// memory.
    Short,
    /// `fmha_fwd_long` ([`long`]): 128 query rows per CTA, 64-key blocks through a ring of
    /// cp.async stages, mma.sync; any sm_80+ GPU.
    Long,
    /// `fmha_fwd_long_tma` ([`sm90`]): persistent, TMA + mbarriers + wgmma, 64-key blocks.
    LongTma,
    /// `fmha_fwd_item_tma` ([`sm90`]): persistent, TMA + mbarriers + wgmma, one 128-key block
    /// per (batch, head).
    ItemTma,
}

impl AttentionKernel {
    /// The kernel's name in its `.cu` file (and in profiles).
    pub fn name(self) -> &'static str {
        match self {
            AttentionKernel::Window => "fmha_fwd_window",
            AttentionKernel::Short => "fmha_fwd_short",
            AttentionKernel::Long => "fmha_fwd_long",
            AttentionKernel::LongTma => "fmha_fwd_long_tma",
            AttentionKernel::ItemTma => "fmha_fwd_item_tma",
        }
    }
}

/// How the optional mask is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionMask {
    None,
    /// `[n_windows, seq, seq]`; batch entry `b` uses window `b % n_windows`.
    Windows {
        n_windows: usize,
    },
    /// `[batch, seq]`: one additive value per key, shared by all queries and heads.
    KeyPadding,
    /// A precombined additive tensor `[n_entries, heads, seq, padded_seq(seq)]` (bias + window
    /// mask, -inf in the padding columns, made once by [`launch_attention_combine`]); batch entry `b` uses entry
    /// `b % n_entries`. Needs `seq <= 64` and `has_bias == false` (the bias is inside).
    Combined {
        n_entries: usize,
    },
}

/// `seq` rounded up to a multiple of 8: the row length of a [`AttentionMask::Combined`] tensor,
/// so each row is whole 16-byte chunks.
pub fn padded_seq(seq: usize) -> usize {
    seq.div_ceil(8) * 8
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionParams {
    pub dtype: DType,
    /// Number of independent sequences (windows x images for Swin).
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Multiplies q k^T; usually `head_dim^-0.5`.
    pub scale: f32,
    pub has_bias: bool,
    pub mask: AttentionMask,
}

impl AttentionParams {
    pub fn validate(&self) -> Result<()> {
        if !SUPPORTED_HEAD_DIMS.contains(&(self.head_dim as u32)) {
            return Err(invalid(format!(
                "head_dim {} is not supported (supported: {:?})",
                self.head_dim, SUPPORTED_HEAD_DIMS
            )));
        }
        if self.batch == 0 || self.seq == 0 || self.heads == 0 {
            return Err(invalid(format!(
                "attention needs batch, seq and heads >= 1 (got {}, {}, {})",
                self.batch, self.seq, self.heads
            )));
        }
        if !self.scale.is_finite() {
            return Err(invalid("scale must be finite"));
        }
        if let AttentionMask::Windows { n_windows } = self.mask {
            if n_windows == 0 {
                return Err(invalid("a window mask needs n_windows >= 1"));
            }
        }
        if let AttentionMask::Combined { n_entries } = self.mask {
            if n_entries == 0 {
                return Err(invalid("a combined additive tensor needs n_entries >= 1"));
            }
            if self.seq > BLOCK_M {
                return Err(invalid(format!(
                    "a combined additive tensor needs seq <= {BLOCK_M} (got {})",
                    self.seq
                )));
            }
            if self.has_bias {
                return Err(invalid(
                    "a combined additive tensor already holds the bias (has_bias must be false)",
                ));
            }
        }
        let tokens = self.batch as u64 * self.seq as u64;
        if tokens * 3 * self.heads as u64 * self.head_dim as u64 > i64::MAX as u64 / 4
            || self.seq > i32::MAX as usize
            || self.batch > i32::MAX as usize
            || self.batch as u64 * self.heads as u64 > i32::MAX as u64
        {
            return Err(invalid("attention shape too large"));
        }
        // one CTA per item is the largest grid of any of the kernels
        LaunchConfig::linear(
            self.batch as u64 * self.heads as u64 * self.n_qblocks() as u64,
            1,
        )
        .map(|_| ())
    }

    /// Query blocks per (batch, head): one up to 64 tokens, else one per 128 rows.
    pub fn n_qblocks(&self) -> usize {
        if self.seq <= BLOCK_M {
            1
        } else {
            self.seq.div_ceil(LONG_BLOCK_M)
        }
    }

    /// The kernel [`launch_attention`] runs for this call on a GPU of compute capability `arch`
    /// (the table in the module doc).
    pub fn kernel(&self, arch: (i32, i32)) -> AttentionKernel {
        if self.seq <= BLOCK_M {
            match self.mask {
                AttentionMask::Combined { .. } => AttentionKernel::Window,
                AttentionMask::None if !self.has_bias => AttentionKernel::Window,
                _ => AttentionKernel::Short,
            }
        } else if arch == (9, 0) && sm90_enabled() && sm90::takes(self) {
            if self.seq <= sm90::ITEM_KEYS {
                AttentionKernel::ItemTma
            } else {
                AttentionKernel::LongTma
            }
        } else {
            AttentionKernel::Long
        }
    }

    /// `(n_mask, mask_row_stride)` as the kernel reads them.
    pub fn mask_args(&self) -> (usize, usize) {
        match self.mask {
            AttentionMask::None => (1, 0),
            AttentionMask::Windows { n_windows } => (n_windows, self.seq),
            AttentionMask::KeyPadding => (self.batch, 0),
            AttentionMask::Combined { n_entries } => (n_entries, padded_seq(self.seq)),
        }
    }

    /// Elements of each buffer: (qkv, out, bias, mask).
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
        let t = self.batch * self.seq;
        let bias = if self.has_bias {
            self.heads * self.seq * self.seq
        } else {
            0
        };
        let mask = match self.mask {
            AttentionMask::None => 0,
            AttentionMask::Windows { n_windows } => n_windows * self.seq * self.seq,
            AttentionMask::KeyPadding => self.batch * self.seq,
            AttentionMask::Combined { n_entries } => {
                n_entries * self.heads * self.seq * padded_seq(self.seq)
            }
        };
        (
            t * 3 * self.heads * self.head_dim,
            t * self.heads * self.head_dim,
            bias,
            mask,
        )
    }

    /// Bytes that must cross device memory at least once (q, k, v, out; bias and mask once).
    pub fn min_bytes(&self) -> u64 {
        let (qkv, out, bias, mask) = self.sizes();
        ((qkv + out + bias + mask) * self.dtype.size_bytes()) as u64
    }

    /// Floating-point operations of q k^T and p v.
    pub fn flops(&self) -> u64 {
        4 * (self.batch * self.heads * self.seq * self.seq * self.head_dim) as u64
    }
}

/// Device buffers of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttentionBuffers {
    pub qkv: DevPtr,
    pub out: DevPtr,
    pub bias: Option<DevPtr>,
    pub mask: Option<DevPtr>,
}

/// Launch the fused attention: the kernel [`AttentionParams::kernel`] names for the current
/// device.
///
/// # Safety
/// Every pointer must be a device allocation of the current context holding at least the
/// element counts of [`AttentionParams::sizes`], `qkv` and `out` 16-byte aligned, and `out` must
/// not overlap the inputs.
pub unsafe fn launch_attention(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &AttentionBuffers,
    stream: RawStream,
) -> Result<()> {
    p.validate()?;
    if !bufs.qkv.is_multiple_of(16) || !bufs.out.is_multiple_of(16) {
        return Err(invalid("qkv and out must be 16-byte aligned"));
    }
    if p.has_bias != bufs.bias.is_some() {
        return Err(invalid("has_bias and the bias buffer disagree"));
    }
    if (p.mask != AttentionMask::None) != bufs.mask.is_some() {
        return Err(invalid("mask kind and the mask buffer disagree"));
    }
    // SAFETY: in each arm the call is validated above, pointer extents are the caller's
    // contract, and `kernel` chose the launcher whose kernel takes this shape.
    match p.kernel(gpu.current_arch()?) {
        AttentionKernel::Window => unsafe { short::launch_window(gpu, p, bufs, stream) },
        AttentionKernel::Short => unsafe { short::launch_short(gpu, p, bufs, stream) },
        AttentionKernel::Long => unsafe { long::launch(gpu, p, bufs, stream) },
        k @ (AttentionKernel::LongTma | AttentionKernel::ItemTma) => unsafe {
            sm90::launch(gpu, p, bufs, k, stream)
        },
    }
}

/// The arguments of `FMHA_PARAMS` (fmha.cuh), shared by `fmha_fwd_short`, `fmha_fwd_long` and
/// the sm_90 kernels.
fn fmha_args(p: &AttentionParams, bufs: &AttentionBuffers) -> Args {
    let (n_mask, row_stride) = p.mask_args();
    Args::default()
        .ptr(bufs.qkv)
        .ptr(bufs.out)
        .ptr(bufs.bias.unwrap_or(0))
        .ptr(bufs.mask.unwrap_or(0))
        .i32(p.batch as i32)
        .i32(p.seq as i32)
        .i32(p.heads as i32)
        .i32(n_mask as i32)
        .i32(row_stride as i32)
        .f32(p.scale * std::f32::consts::LOG2_E)
        .i32(p.n_qblocks() as i32)
}

/// CPU reference in f64: the function the kernel computes, on f32 inputs.
pub fn attention_reference(
    p: &AttentionParams,
    qkv: &[f32],
    bias: Option<&[f32]>,
    mask: Option<&[f32]>,
) -> Vec<f32> {
    let (n, h, d) = (p.seq, p.heads, p.head_dim);
    let (qkv_len, out_len, _, _) = p.sizes();
    assert_eq!(qkv.len(), qkv_len, "qkv length");
    let (n_mask, row_stride) = p.mask_args();
    let at = |b: usize, row: usize, which: usize, head: usize, k: usize| -> f64 {
        qkv[(((b * n + row) * 3 + which) * h + head) * d + k] as f64
    };
    let mut out = vec![0f32; out_len];
    let mut scores = vec![0f64; n];
    for b in 0..p.batch {
        for head in 0..h {
            for i in 0..n {
                let mut max = f64::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    let mut dot = 0f64;
                    for k in 0..d {
                        dot += at(b, i, 0, head, k) * at(b, j, 1, head, k);
                    }
                    let mut v = dot * p.scale as f64;
                    if let Some(bias) = bias {
                        v += bias[(head * n + i) * n + j] as f64;
                    }
                    if let Some(mask) = mask {
                        if let AttentionMask::Combined { .. } = p.mask {
                            // [n_entries, heads, seq, padded_seq]
                            v += mask[(((b % n_mask) * h + head) * n + i) * row_stride + j] as f64;
                        } else {
                            let entry = if row_stride == 0 { n } else { n * row_stride };
                            v += mask[(b % n_mask) * entry + i * row_stride + j] as f64;
                        }
                    }
                    *s = v;
                    max = max.max(v);
                }
                let mut sum = 0f64;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                for k in 0..d {
                    let mut acc = 0f64;
                    for (j, s) in scores.iter().enumerate() {
                        acc += s * at(b, j, 2, head, k);
                    }
                    out[(b * n + i) * h * d + head * d + k] = (acc / sum) as f32;
                }
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(super) fn params(
        batch: usize,
        seq: usize,
        heads: usize,
        head_dim: usize,
    ) -> AttentionParams {
        AttentionParams {
            dtype: DType::F16,
            batch,
            seq,
            heads,
            head_dim,
            scale: (head_dim as f32).powf(-0.5),
            has_bias: false,
            mask: AttentionMask::None,
        }
    }

    /// Deterministic pseudo-random values in [-1, 1).
    pub(crate) fn noise(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn one_kernel_per_gpu_and_shape_class() {
        use AttentionKernel::*;
        let hopper = (9, 0);
        let ampere = (8, 0);
        let swin = params(4096, 49, 3, 32);
        let mut swin_sep = swin;
        swin_sep.has_bias = true;
        swin_sep.mask = AttentionMask::Windows { n_windows: 64 };
        let mut swin_comb = swin;
        swin_comb.mask = AttentionMask::Combined { n_entries: 64 };
        let vit = params(64, 197, 12, 64);
        let mut bert_kpm = params(64, 128, 12, 64);
        bert_kpm.mask = AttentionMask::KeyPadding;
        let bert = params(64, 128, 12, 64);
        let mut biased = params(2, 100, 4, 64);
        biased.has_bias = true;
        let mut windows = params(2, 100, 4, 64);
        windows.mask = AttentionMask::Windows { n_windows: 2 };
        let mut kpm64 = params(8, 64, 2, 64);
        kpm64.mask = AttentionMask::KeyPadding;
        for arch in [ampere, (8, 9), hopper, (10, 0)] {
            assert_eq!(swin.kernel(arch), Window);
            assert_eq!(swin_comb.kernel(arch), Window);
            assert_eq!(params(2, 64, 1, 32).kernel(arch), Window);
            assert_eq!(swin_sep.kernel(arch), Short);
            assert_eq!(kpm64.kernel(arch), Short);
            // head_dim 32, a per-head bias, per-query masks: the portable kernel everywhere
            assert_eq!(params(2, 65, 1, 32).kernel(arch), Long);
            assert_eq!(params(64, 197, 12, 32).kernel(arch), Long);
            assert_eq!(biased.kernel(arch), Long);
            assert_eq!(windows.kernel(arch), Long);
        }
        for arch in [ampere, (8, 9), (10, 0)] {
            assert_eq!(vit.kernel(arch), Long);
            assert_eq!(bert.kernel(arch), Long);
        }
        assert_eq!(vit.kernel(hopper), LongTma);
        assert_eq!(params(2, 129, 4, 64).kernel(hopper), LongTma);
        assert_eq!(bert.kernel(hopper), ItemTma);
        assert_eq!(bert_kpm.kernel(hopper), ItemTma);
        assert_eq!(params(2, 65, 4, 64).kernel(hopper), ItemTma);
        assert!(sm90_enabled());
        assert_eq!(vit.n_qblocks(), 2);
        assert_eq!(bert.n_qblocks(), 1);
        assert_eq!(swin.n_qblocks(), 1);
    }

    #[test]
    fn validation_rejects_bad_shapes() {
        assert!(params(1, 49, 3, 48).validate().is_err());
        assert!(params(0, 49, 3, 32).validate().is_err());
        assert!(params(1, 0, 3, 32).validate().is_err());
        let mut p = params(2, 49, 3, 32);
        p.mask = AttentionMask::Windows { n_windows: 0 };
        assert!(p.validate().is_err());
        p.mask = AttentionMask::Windows { n_windows: 3 };
        assert!(p.validate().is_ok());
        p.mask = AttentionMask::Combined { n_entries: 3 };
        assert!(p.validate().is_ok());
        p.has_bias = true;
        assert!(
            p.validate().is_err(),
            "the bias is inside the combined tensor"
        );
        p.has_bias = false;
        p.mask = AttentionMask::Combined { n_entries: 0 };
        assert!(p.validate().is_err());
        let mut long = params(2, 65, 1, 32);
        long.mask = AttentionMask::Combined { n_entries: 1 };
        assert!(long.validate().is_err(), "combined needs seq <= 64");
    }

    #[test]
    fn mask_layouts() {
        let mut p = params(8, 49, 3, 32);
        p.mask = AttentionMask::Windows { n_windows: 4 };
        assert_eq!(p.mask_args(), (4, 49));
        assert_eq!(p.sizes().3, 4 * 49 * 49);
        p.mask = AttentionMask::KeyPadding;
        assert_eq!(p.mask_args(), (8, 0));
        assert_eq!(p.sizes().3, 8 * 49);
    }

    #[test]
    fn swin_stage1_byte_floor_matches_anchor() {
        // q, k, v, out for 4096 windows x 3 heads x 49 x 32 in fp16: 154 MB (ANCHORS.md).
        let p = params(4096, 49, 3, 32);
        let (qkv, out, _, _) = p.sizes();
        assert_eq!((qkv + out) * 2, 154_140_672);
    }

    #[test]
    fn single_token_returns_its_value() {
        // N = 1: softmax over one key is 1, so the output is v whatever q, k, bias are.
        let p = AttentionParams {
            has_bias: true,
            ..params(3, 1, 2, 32)
        };
        let qkv = noise(p.sizes().0, 1);
        let bias = noise(p.sizes().2, 2);
        let out = attention_reference(&p, &qkv, Some(&bias), None);
        for b in 0..3 {
            for h in 0..2 {
                for k in 0..32 {
                    let v = qkv[((b * 3 + 2) * 2 + h) * 32 + k];
                    assert!((out[(b * 2 + h) * 32 + k] - v).abs() < 1e-6);
                }
            }
        }
    }

    #[test]
    fn zero_queries_average_the_values() {
        // q = 0 gives equal scores: each output row is the mean of v over the keys.
        let p = params(1, 5, 1, 32);
        let mut qkv = noise(p.sizes().0, 3);
        for row in 0..5 {
            for k in 0..32 {
                qkv[row * 96 + k] = 0.0;
            }
        }
        let out = attention_reference(&p, &qkv, None, None);
        for k in 0..32 {
            let mean: f32 = (0..5).map(|r| qkv[r * 96 + 64 + k]).sum::<f32>() / 5.0;
            for r in 0..5 {
                assert!((out[r * 32 + k] - mean).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn key_padding_mask_hides_keys() {
        // A -1e9 key mask on the last two keys must give the same result as dropping them.
        let mut p = params(1, 6, 2, 32);
        p.mask = AttentionMask::KeyPadding;
        let qkv = noise(p.sizes().0, 4);
        let mask = vec![0.0, 0.0, 0.0, 0.0, -1e9, -1e9];
        let masked = attention_reference(&p, &qkv, None, Some(&mask));
        let short = params(1, 4, 2, 32);
        let short_out = attention_reference(&short, &qkv[..short.sizes().0], None, None);
        for i in 0..4 * 64 {
            assert!((masked[i] - short_out[i]).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn window_mask_is_chosen_by_batch_modulo_windows() {
        // Two windows' masks; batch entries 0 and 2 must use window 0, entry 1 window 1.
        let mut p = params(3, 4, 1, 32);
        p.mask = AttentionMask::Windows { n_windows: 2 };
        let mut qkv = noise(p.sizes().0, 5);
        // make all three batch entries identical so only the mask differs
        let per = 4 * 3 * 32;
        let first = qkv[..per].to_vec();
        qkv[per..2 * per].copy_from_slice(&first);
        qkv[2 * per..].copy_from_slice(&first);
        let mut mask = vec![0f32; 2 * 16];
        for v in mask[16..].iter_mut().step_by(3) {
            *v = -100.0;
        }
        let out = attention_reference(&p, &qkv, None, Some(&mask));
        let row = 4 * 32;
        assert_eq!(out[..row], out[2 * row..]);
        assert!(out[..row]
            .iter()
            .zip(&out[row..2 * row])
            .any(|(a, b)| (a - b).abs() > 1e-3));
    }
}
