//! `fmha_short.cu`: attention over at most 64 tokens (Swin's windows), one 64-key block.
//!
//! * `fmha_fwd_window`: the fast path, on a bias + window mask combined once per layer
//!   ([`launch_attention_combine`]) or no additive term; persistent CTAs, each item's loads in
//!   flight while the previous item computes.
//! * `fmha_fwd_short`: separate bias and window mask, or a key-padding mask; one CTA per
//!   (batch, head).
//!
//! The CPU reference of both is [`super::attention_reference`]; of the combine,
//! [`combine_reference`].

use super::{fmha_args, padded_seq, AttentionBuffers, AttentionMask, AttentionParams, BLOCK_M};
use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::runtime::{Args, DevPtr, Gpu, LaunchConfig, RawStream, Source};

/// `fmha_short.cu`, built per head dimension for any sm_80+ GPU.
pub const SOURCE: Source = Source {
    file_name: "fmha_short.cu",
    text: crate::sources::FMHA_SHORT,
    variants: Some(("HEAD_DIM", &super::SUPPORTED_HEAD_DIMS)),
    arch_specific: None,
    kernels: &["fmha_fwd_window", "fmha_fwd_short", "fmha_add_combine"],
};

/// Threads of both kernels: 4 warps of 16 query rows.
const THREADS: u32 = 128;

/// Shared-memory row stride (elements) of the additive tile in `fmha_fwd_window`: the padded
/// row, plus 8 when its length in 32-bit words is a multiple of 8 (which would put the 8 row
/// groups of an mma fragment on the same banks).
pub fn add_smem_stride(seq: usize) -> usize {
    let np = padded_seq(seq);
    if np % 16 == 8 {
        np
    } else {
        np + 8
    }
}

/// Dynamic shared memory of `fmha_fwd_window`: two stages of q, k, v (64 rows of
/// head_dim + 8) and the additive tile (seq rows of [`add_smem_stride`]).
pub fn window_smem_bytes(p: &AttentionParams) -> usize {
    let qkv = 3 * BLOCK_M * (p.head_dim + 8);
    let add = if matches!(p.mask, AttentionMask::Combined { .. }) {
        p.seq * add_smem_stride(p.seq)
    } else {
        0
    };
    2 * (qkv + add) * p.dtype.size_bytes()
}

/// `fmha_fwd_window`'s launch: one CTA per (batch, head) item, at most the `resident` CTAs the
/// device keeps at once (the kernel strides over the items).
pub fn window_config(p: &AttentionParams, resident: u64) -> Result<LaunchConfig> {
    let items = p.batch as u64 * p.heads as u64;
    let mut cfg = LaunchConfig::linear(items.min(resident.max(1)), THREADS)?;
    cfg.shared_bytes = window_smem_bytes(p) as u32;
    Ok(cfg)
}

/// `fmha_fwd_short`'s launch: one CTA per (batch, head), static shared memory only.
pub fn short_config(p: &AttentionParams) -> Result<LaunchConfig> {
    LaunchConfig::linear(p.batch as u64 * p.heads as u64, THREADS)
}

/// Launch `fmha_fwd_window` (seq <= 64, a combined additive tensor or none).
///
/// # Safety
/// As [`super::launch_attention`], which has validated `p` and `bufs`.
pub(super) unsafe fn launch_window(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &AttentionBuffers,
    stream: RawStream,
) -> Result<()> {
    let name = "fmha_fwd_window";
    let variant = p.head_dim as u32;
    let smem = window_smem_bytes(p) as u32;
    let resident = gpu.resident_ctas(&SOURCE, p.dtype, variant, name, THREADS, smem)?;
    let cfg = window_config(p, resident)?;
    let (n_mask, _) = p.mask_args();
    let args = Args::default()
        .ptr(bufs.qkv)
        .ptr(bufs.out)
        .ptr(bufs.mask.unwrap_or(0))
        .i32(p.batch as i32)
        .i32(p.seq as i32)
        .i32(p.heads as i32)
        .i32(n_mask as i32)
        .i32(padded_seq(p.seq) as i32)
        .i32(add_smem_stride(p.seq) as i32)
        .f32(p.scale * std::f32::consts::LOG2_E);
    // SAFETY: the argument list matches fmha_fwd_window's; the kernel strides over the
    // batch x heads items whatever the grid; the combined tensor holds n_entries x heads x
    // seq x padded_seq elements (the caller's contract).
    unsafe { gpu.launch(&SOURCE, p.dtype, variant, name, cfg, stream, args) }
}

/// Launch `fmha_fwd_short` (seq <= 64, separate bias / window mask or a key mask).
///
/// # Safety
/// As [`super::launch_attention`], which has validated `p` and `bufs`.
pub(super) unsafe fn launch_short(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &AttentionBuffers,
    stream: RawStream,
) -> Result<()> {
    let cfg = short_config(p)?;
    let args = fmha_args(p, bufs);
    // SAFETY: the argument list matches FMHA_PARAMS; the grid is one CTA per (batch, head),
    // one query block each (seq <= 64).
    unsafe {
        gpu.launch(
            &SOURCE,
            p.dtype,
            p.head_dim as u32,
            "fmha_fwd_short",
            cfg,
            stream,
            args,
        )
    }
}

/// Launch `fmha_add_combine`: `add[e, h, r, c] = bias[h, r, c] + mask[e, r, c]` for `c < seq`,
/// -inf for the padding columns (they mask the padded keys), into a `[n_entries, heads, seq, padded_seq(seq)]` tensor (see
/// [`AttentionMask::Combined`]). A one-time setup per layer: bias and mask are constants.
/// `n_entries` is the mask's window count, or 1 without a mask.
///
/// # Safety
/// `bias` (`[heads, seq, seq]`), `mask` (`[n_entries, seq, seq]`) and `out` must be device
/// allocations of the current context of those extents; `out` 16-byte aligned and not
/// overlapping the inputs.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_attention_combine(
    gpu: &Gpu,
    dtype: DType,
    seq: usize,
    heads: usize,
    n_entries: usize,
    bias: Option<DevPtr>,
    mask: Option<DevPtr>,
    out: DevPtr,
    stream: RawStream,
) -> Result<()> {
    if seq == 0 || heads == 0 || n_entries == 0 {
        return Err(invalid("combine needs seq, heads and n_entries >= 1"));
    }
    if seq > BLOCK_M {
        return Err(invalid(format!(
            "a combined additive tensor needs seq <= {BLOCK_M} (got {seq})"
        )));
    }
    if !out.is_multiple_of(16) {
        return Err(invalid("the combined tensor must be 16-byte aligned"));
    }
    if mask.is_none() && n_entries != 1 {
        return Err(invalid("without a mask n_entries must be 1"));
    }
    let total = n_entries as u64 * heads as u64 * seq as u64 * padded_seq(seq) as u64;
    if total > i32::MAX as u64 {
        return Err(invalid(
            "combined additive tensor too large (2^31 elements)",
        ));
    }
    let cfg = LaunchConfig::linear(total.div_ceil(256).min(4096), 256)?;
    let args = Args::default()
        .ptr(bias.unwrap_or(0))
        .ptr(mask.unwrap_or(0))
        .ptr(out)
        .i32(seq as i32)
        .i32(heads as i32)
        .i32(n_entries as i32)
        .i32(padded_seq(seq) as i32);
    // SAFETY: the argument list matches fmha_add_combine's; the grid-stride loop covers exactly
    // `total` output elements; input extents are the caller's contract.
    unsafe { gpu.launch(&SOURCE, dtype, 32, "fmha_add_combine", cfg, stream, args) }
}

/// CPU reference of [`launch_attention_combine`].
pub fn combine_reference(
    seq: usize,
    heads: usize,
    n_entries: usize,
    bias: Option<&[f32]>,
    mask: Option<&[f32]>,
) -> Vec<f32> {
    let np = padded_seq(seq);
    let mut out = vec![f32::NEG_INFINITY; n_entries * heads * seq * np];
    for e in 0..n_entries {
        for h in 0..heads {
            for r in 0..seq {
                for c in 0..seq {
                    let mut v = 0f32;
                    if let Some(b) = bias {
                        v += b[(h * seq + r) * seq + c];
                    }
                    if let Some(m) = mask {
                        v += m[(e * seq + r) * seq + c];
                    }
                    out[((e * heads + h) * seq + r) * np + c] = v;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{noise, params};
    use super::super::{attention_reference, AttentionKernel};
    use super::*;

    #[test]
    fn launch_shapes_of_the_short_kernels() {
        let swin1 = params(4096, 49, 3, 32);
        assert_eq!(short_config(&swin1).unwrap().grid, (4096 * 3, 1, 1));
        assert_eq!(short_config(&swin1).unwrap().block, (128, 1, 1));
        assert_eq!(short_config(&swin1).unwrap().shared_bytes, 0);
        assert_eq!(short_config(&params(1, 1, 1, 32)).unwrap().grid.0, 1);
        let mut comb = params(4096, 49, 3, 32);
        comb.mask = AttentionMask::Combined { n_entries: 64 };
        assert_eq!(comb.kernel((8, 0)), AttentionKernel::Window);
        // two stages of (3 x 64 x 40 + 49 x 56) fp16 elements
        assert_eq!(window_smem_bytes(&comb), 2 * (3 * 64 * 40 + 49 * 56) * 2);
        let cfg = window_config(&comb, 132 * 5).unwrap();
        assert_eq!(
            (cfg.grid.0, cfg.block.0, cfg.shared_bytes),
            (660, 128, 41_696)
        );
        assert_eq!(window_config(&params(1, 49, 3, 32), 660).unwrap().grid.0, 3);
    }

    #[test]
    fn padded_rows_and_conflict_free_strides() {
        assert_eq!(padded_seq(49), 56);
        assert_eq!(padded_seq(1), 8);
        assert_eq!(padded_seq(64), 64);
        for seq in 1..=64 {
            let s = add_smem_stride(seq);
            assert!(s >= padded_seq(seq) && s.is_multiple_of(8), "{seq}");
            // row stride in 32-bit words is 4 mod 8: rows g = 0..7 of a fragment hit distinct
            // bank quads
            assert_eq!((s / 2) % 8, 4, "{seq}");
        }
        assert_eq!(add_smem_stride(49), 56);
        assert_eq!(add_smem_stride(64), 72);
    }

    #[test]
    fn combined_tensor_gives_the_same_attention_as_bias_plus_mask() {
        let (b, n, h, d, nw) = (5, 13, 2, 32, 3);
        let mut sep = params(b, n, h, d);
        sep.has_bias = true;
        sep.mask = AttentionMask::Windows { n_windows: nw };
        let qkv = noise(sep.sizes().0, 11);
        let bias = noise(sep.sizes().2, 12);
        let mask: Vec<f32> = noise(sep.sizes().3, 13)
            .iter()
            .map(|v| if *v > 0.4 { -100.0 } else { 0.0 })
            .collect();
        let want = attention_reference(&sep, &qkv, Some(&bias), Some(&mask));
        let add = combine_reference(n, h, nw, Some(&bias), Some(&mask));
        let mut comb = params(b, n, h, d);
        comb.mask = AttentionMask::Combined { n_entries: nw };
        assert_eq!(add.len(), comb.sizes().3);
        // padding columns are -inf (they mask the padded keys)
        assert!(add
            .chunks(padded_seq(n))
            .all(|r| r[n..].iter().all(|v| *v == f32::NEG_INFINITY)));
        let got = attention_reference(&comb, &qkv, None, Some(&add));
        for (x, y) in want.iter().zip(&got) {
            assert!((x - y).abs() < 1e-5);
        }
        // bias only: one entry
        let add1 = combine_reference(n, h, 1, Some(&bias), None);
        let mut sep1 = params(b, n, h, d);
        sep1.has_bias = true;
        let want1 = attention_reference(&sep1, &qkv, Some(&bias), None);
        let mut comb1 = params(b, n, h, d);
        comb1.mask = AttentionMask::Combined { n_entries: 1 };
        let got1 = attention_reference(&comb1, &qkv, None, Some(&add1));
        for (x, y) in want1.iter().zip(&got1) {
            assert!((x - y).abs() < 1e-5);
        }
    }
}
