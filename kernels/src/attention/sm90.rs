//! `fmha_sm90.cu`: the Hopper attention kernels (TMA loads, mbarrier hand-offs, wgmma), built
//! for `compute_90a` and run on sm_90 GPUs only, for head_dim-64 sequences over 64 tokens with
//! no bias and at most a key-padding mask (ViT, BERT):
//!
//! * `fmha_fwd_item_tma` up to 128 tokens: one 128-key block per (batch, head);
//! * `fmha_fwd_long_tma` beyond: 64-key blocks through a ring of three stages.
//!
//! Both are persistent (the grid is the resident CTAs) and load through a TMA tensor map of
//! `qkv` that the launcher encodes per call. Their CPU reference is
//! [`super::attention_reference`].

use super::{fmha_args, AttentionBuffers, AttentionKernel, AttentionMask, AttentionParams};
use super::{LONG_BLOCK_M, SUPPORTED_HEAD_DIMS};
use crate::error::Result;
use crate::runtime::{encode_tensor_map, Gpu, LaunchConfig, RawStream, Source, TmaGeometry};

/// `fmha_sm90.cu`: head_dim 64 only, `compute_90a` on sm_90 GPUs only.
pub const SOURCE: Source = Source {
    file_name: "fmha_sm90.cu",
    text: crate::sources::FMHA_SM90,
    variants: Some(("HEAD_DIM", &HEAD_DIM_64)),
    arch_specific: Some((9, 0)),
    kernels: &["fmha_fwd_item_tma", "fmha_fwd_long_tma"],
};
const HEAD_DIM_64: [u32; 1] = [SUPPORTED_HEAD_DIMS[1]];

/// Two warpgroups of 64 query rows.
const THREADS: u32 = 256;
/// Keys per block of `fmha_fwd_long_tma` (rows of its TMA box).
const BLOCK_N: usize = 64;
/// Stages of `fmha_fwd_long_tma`'s ring (`TMA_RING` in fmha_sm90.cu).
const RING: usize = 3;
/// Keys (and query rows) of `fmha_fwd_item_tma`'s one block per item (rows of its TMA box).
pub const ITEM_KEYS: usize = 128;

/// True when these kernels can take the call: head_dim 64, more than 64 tokens, no bias, at
/// most one additive value per key. (Every such call has at least the `RING - 1` key blocks
/// per item that `fmha_fwd_long_tma`'s producer needs.)
pub fn takes(p: &AttentionParams) -> bool {
    p.head_dim == 64
        && p.seq > BLOCK_N
        && !p.has_bias
        && matches!(p.mask, AttentionMask::None | AttentionMask::KeyPadding)
}

/// Dynamic shared memory of `fmha_fwd_long_tma`: up to 1023 bytes to align the tiles to 1024
/// (the swizzle atom), two Q slots of 128 rows (this item's and the next one's), `RING` times
/// 64 key and 64 value rows of 64 elements, `RING` 64-float rows of per-key terms, and the
/// mbarriers (full, empty and V's own per stage, two Q-slot ones), 8 bytes each.
pub fn long_tma_smem_bytes(p: &AttentionParams) -> usize {
    (2 * LONG_BLOCK_M + 2 * RING * BLOCK_N) * p.head_dim * p.dtype.size_bytes()
        + RING * BLOCK_N * 4
        + 1024
        + (3 * RING + 2) * 8
}

/// Dynamic shared memory of `fmha_fwd_item_tma`: up to 1023 bytes to align the tiles to 1024,
/// two stages of Q, K and V (128 rows of 64 elements each), two rows of 128 per-key terms,
/// and six mbarriers (full, fullv and empty per stage).
pub fn item_smem_bytes(p: &AttentionParams) -> usize {
    1024 + 2 * 3 * ITEM_KEYS * p.head_dim * p.dtype.size_bytes() + 2 * ITEM_KEYS * 4 + 6 * 8
}

/// The TMA view of `qkv` that the kernels load through: `[head_dim elements][seq
/// tokens][3 x heads slabs][batch]`, one box of `box_rows` token rows of one head's key,
/// value or query (64 for `fmha_fwd_long_tma`, 128 for `fmha_fwd_item_tma`); rows past `seq`
/// read as zeros.
pub fn tma_geometry(p: &AttentionParams, box_rows: usize) -> TmaGeometry {
    let es = p.dtype.size_bytes() as u64;
    let (d, n, slabs, b) = (
        p.head_dim as u64,
        p.seq as u64,
        3 * p.heads as u64,
        p.batch as u64,
    );
    TmaGeometry {
        dims: [d, n, slabs, b],
        strides: [slabs * d * es, d * es, n * slabs * d * es],
        boxdim: [p.head_dim as u32, box_rows as u32, 1, 1],
    }
}

/// Dynamic shared memory of `kernel` (`LongTma` or `ItemTma`).
pub fn smem_bytes(p: &AttentionParams, kernel: AttentionKernel) -> usize {
    if kernel == AttentionKernel::ItemTma {
        item_smem_bytes(p)
    } else {
        long_tma_smem_bytes(p)
    }
}

/// Token rows of `kernel`'s TMA box: a whole item, or one key block.
fn box_rows(kernel: AttentionKernel) -> usize {
    if kernel == AttentionKernel::ItemTma {
        ITEM_KEYS
    } else {
        BLOCK_N
    }
}

/// The launch of `kernel` (`LongTma` or `ItemTma`) with the device keeping `resident` CTAs of
/// it at once: one CTA per item (batch x heads x 128-row query blocks), at most `resident`
/// (the kernels stride over the items).
pub fn config(p: &AttentionParams, kernel: AttentionKernel, resident: u64) -> Result<LaunchConfig> {
    let items = p.batch as u64 * p.heads as u64 * p.n_qblocks() as u64;
    let mut cfg = LaunchConfig::linear(items.min(resident.max(1)), THREADS)?;
    cfg.shared_bytes = smem_bytes(p, kernel) as u32;
    Ok(cfg)
}

/// Launch `kernel` (`LongTma` or `ItemTma`, as [`AttentionParams::kernel`] chose on sm_90).
///
/// # Safety
/// As [`super::launch_attention`], which has validated `p` and `bufs`.
pub(super) unsafe fn launch(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &AttentionBuffers,
    kernel: AttentionKernel,
    stream: RawStream,
) -> Result<()> {
    let name = kernel.name();
    let variant = p.head_dim as u32;
    let smem = smem_bytes(p, kernel) as u32;
    let resident = gpu.resident_ctas(&SOURCE, p.dtype, variant, name, THREADS, smem)?;
    let cfg = config(p, kernel, resident)?;
    let geometry = tma_geometry(p, box_rows(kernel));
    let tensor_map = encode_tensor_map(bufs.qkv, p.dtype, &geometry)?;
    let args = fmha_args(p, bufs).tensor_map(tensor_map);
    // SAFETY: the argument list matches FMHA_PARAMS plus the tensor map of qkv, encoded above
    // with the kernel's box (64 rows, or 128 for fmha_fwd_item_tma, which takes only sequences
    // of at most 128: one query block per (batch, head)); `takes` held for this call (head_dim
    // 64, no bias, no per-row mask); the kernels stride over the items whatever their grid, in
    // the shared memory `config` gives.
    unsafe { gpu.launch(&SOURCE, p.dtype, variant, name, cfg, stream, args) }
}

#[cfg(test)]
mod tests {
    use super::super::tests::params;
    use super::*;

    #[test]
    fn the_tma_view_is_qkv_as_element_token_slab_batch() {
        // ViT: qkv [64 * 197, 3, 12, 64] fp16: a token row is 3 x 12 x 64 x 2 = 4608 bytes, a
        // head's 64 elements 128 bytes (one swizzled row), a batch entry 197 token rows
        let g = tma_geometry(&params(64, 197, 12, 64), BLOCK_N);
        assert_eq!(g.dims, [64, 197, 36, 64]);
        assert_eq!(g.strides, [4608, 128, 197 * 4608]);
        assert_eq!(g.boxdim, [64, 64, 1, 1]);
        // TMA's rules: strides multiples of 16, the box row within the 128-byte swizzle span
        assert!(g.strides.iter().all(|s| s % 16 == 0));
        assert_eq!(g.boxdim[0] as usize * 2, 128);
        // fmha_fwd_item_tma's box: a whole item's 128 rows (at most 256 per box dimension)
        let g = tma_geometry(&params(64, 128, 12, 64), ITEM_KEYS);
        assert_eq!(g.dims, [64, 128, 36, 64]);
        assert_eq!(g.boxdim, [64, 128, 1, 1]);
    }

    #[test]
    fn persistent_launches_fit_two_ctas_per_sm() {
        let vit = params(64, 197, 12, 64);
        // 64 x 12 x 2 items; at most the resident CTAs
        let cfg = config(&vit, AttentionKernel::LongTma, 264).unwrap();
        assert_eq!((cfg.grid.0, cfg.block.0), (264, 256));
        assert_eq!(box_rows(AttentionKernel::LongTma), 64);
        let small = params(1, 200, 2, 64);
        assert_eq!(
            config(&small, AttentionKernel::LongTma, 264)
                .unwrap()
                .grid
                .0,
            4
        );
        // two Q slots of 128 rows + K, V 3 x 64 rows of 64 fp16; 3 x 64 fp32 key terms; 1 KiB
        // alignment slack; 3 x 3 stage barriers + 2 Q-slot barriers; 2 CTAs fit an H100 SM
        assert_eq!(long_tma_smem_bytes(&vit), 640 * 64 * 2 + 768 + 1024 + 88);
        assert_eq!(cfg.shared_bytes as usize, long_tma_smem_bytes(&vit));
        assert!(2 * (long_tma_smem_bytes(&vit) + 1024) <= 228 * 1024);
        let bert128 = params(64, 128, 12, 64);
        let cfg = config(&bert128, AttentionKernel::ItemTma, 264).unwrap();
        assert_eq!(cfg.grid.0, 264);
        assert_eq!(box_rows(AttentionKernel::ItemTma), 128);
        // 1 KiB alignment slack, 2 x 48 KiB of Q / K / V, 2 x 512 bytes of per-key terms, 6 barriers
        assert_eq!(item_smem_bytes(&bert128), 1024 + 2 * 49152 + 1024 + 48);
        assert!(2 * (item_smem_bytes(&bert128) + 1024) <= 228 * 1024);
    }

    #[test]
    fn takes_head_dim_64_over_64_tokens_with_at_most_a_key_mask() {
        let mut bert = params(64, 384, 12, 64);
        bert.mask = AttentionMask::KeyPadding;
        assert!(takes(&bert) && takes(&params(2, 65, 4, 64)));
        assert!(!takes(&params(2, 64, 4, 64)));
        assert!(!takes(&params(64, 197, 12, 32)));
        let mut biased = params(2, 100, 4, 64);
        biased.has_bias = true;
        assert!(!takes(&biased));
        let mut windows = params(2, 100, 4, 64);
        windows.mask = AttentionMask::Windows { n_windows: 2 };
        assert!(!takes(&windows));
        assert_eq!(SOURCE.nvrtc_arch((9, 0)), "compute_90a");
        assert!(!SOURCE.runs_on((8, 0)) && !SOURCE.runs_on((10, 0)));
        assert_eq!(SOURCE.variant_list(), &[64]);
    }
}
