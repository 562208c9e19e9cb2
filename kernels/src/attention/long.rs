//! `fmha_long.cu`: `fmha_fwd_long`, attention over sequences of any length with mma.sync on
//! every sm_80+ GPU: the portable path for everything over 64 tokens that the Hopper kernels
//! ([`super::sm90`]) do not take.
//!
//! One CTA of 4 warps per (batch, head, 128-row query block); keys in 64-key blocks with an
//! online softmax through a ring of shared-memory stages. Its CPU reference is
//! [`super::attention_reference`].

use super::{fmha_args, AttentionBuffers, AttentionParams, LONG_BLOCK_M};
use crate::error::Result;
use crate::runtime::{Gpu, LaunchConfig, RawStream, Source};

/// `fmha_long.cu`, built per head dimension for any sm_80+ GPU.
pub const SOURCE: Source = Source {
    file_name: "fmha_long.cu",
    text: crate::sources::FMHA_LONG,
    variants: Some(("HEAD_DIM", &super::SUPPORTED_HEAD_DIMS)),
    arch_specific: None,
    kernels: &["fmha_fwd_long"],
};

const THREADS: u32 = 128;
/// Keys per block.
const BLOCK_N: usize = 64;
/// Stages of the key-block ring (`LONG_RING` in fmha_long.cu).
const RING: usize = 2;

/// Dynamic shared memory: 128 query rows, `RING` x (64 key + 64 value rows) of head_dim + 8
/// elements, `RING` 64-float rows of per-key additive terms.
pub fn smem_bytes(p: &AttentionParams) -> usize {
    (LONG_BLOCK_M + 2 * RING * BLOCK_N) * (p.head_dim + 8) * p.dtype.size_bytes()
        + RING * BLOCK_N * 4
}

/// One CTA per (batch, head, 128-row query block).
pub fn config(p: &AttentionParams) -> Result<LaunchConfig> {
    let mut cfg = LaunchConfig::linear(
        p.batch as u64 * p.heads as u64 * p.n_qblocks() as u64,
        THREADS,
    )?;
    cfg.shared_bytes = smem_bytes(p) as u32;
    Ok(cfg)
}

/// Launch `fmha_fwd_long` (seq over 64).
///
/// # Safety
/// As [`super::launch_attention`], which has validated `p` and `bufs`.
pub(super) unsafe fn launch(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &AttentionBuffers,
    stream: RawStream,
) -> Result<()> {
    let cfg = config(p)?;
    let args = fmha_args(p, bufs);
    // SAFETY: the argument list matches FMHA_PARAMS; the grid covers exactly batch x heads x
    // 128-row query blocks; the shared memory is sized for the ring the kernel compiled with.
    unsafe {
        gpu.launch(
            &SOURCE,
            p.dtype,
            p.head_dim as u32,
            "fmha_fwd_long",
            cfg,
            stream,
            args,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::params;
    use super::*;

    #[test]
    fn launch_shape() {
        let vit = params(64, 197, 12, 64);
        assert_eq!(config(&vit).unwrap().grid.0, 64 * 12 * 2);
        assert_eq!(config(&vit).unwrap().block.0, 128);
        // Q 128 rows + K, V 2 x 64 rows each, of 72 fp16; 2 x 64 fp32 key terms
        assert_eq!(smem_bytes(&vit), 384 * 72 * 2 + 512);
        assert_eq!(config(&vit).unwrap().shared_bytes, 384 * 72 * 2 + 512);
        assert_eq!(
            config(&params(64, 384, 12, 64)).unwrap().grid.0,
            64 * 12 * 3
        );
        assert_eq!(smem_bytes(&params(3, 65, 1, 32)), 384 * 40 * 2 + 512);
    }
}
