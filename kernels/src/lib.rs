//! fuseprof's bundled kernels: the fused replacements the fusion advisor can propose.
//!
//! * [`attention`]: fused multi-head attention for short sequences (Swin windows with relative
//!   position bias and shifted-window mask, ViT, BERT with a key-padding mask), reading the QKV
//!   projection's output in place and writing the layout the output projection reads; one
//!   module per kernel family ([`attention::short`], [`attention::long`], [`attention::sm90`]).
//! * [`window`]: Swin's LayerNorm + shift + pad + window partition, and window reverse + reverse
//!   shift + residual (+ the next LayerNorm), one pass each.
//! * [`gemm`]: GEMMs on operands padded to multiples of 8 through cuBLASLt, with bias, bias +
//!   exact GELU and bias + residual epilogues.
//! * [`elementwise`]: 16-byte bias + residual add, bias + GELU, zero-padding copies.
//! * [`mlp`]: a transformer MLP (fc1, exact GELU, fc2, bias and residual) in one kernel, its
//!   hidden tensor kept on chip.
//!
//! Each kernel family is a `.cu` file under `src/cu/` ([`sources`]) compiled at run time with
//! NVRTC (through cudarc, loaded dynamically), so this crate builds and its host code is tested
//! on machines with no CUDA at all. Each has a typed launcher, a CPU reference used by the tests,
//! and an entry in the C ABI ([`ffi`]) that `python/fuseprof_kernels.py` calls on PyTorch
//! tensors. [`runtime`] compiles, caches and launches; it knows no kernel family.
//!
//! ```
//! use fuseprof_kernels::attention::short::short_config;
//! use fuseprof_kernels::attention::{attention_reference, AttentionKernel, AttentionMask, AttentionParams};
//! use fuseprof_kernels::DType;
//!
//! // Swin-T stage 1: 4096 windows x 3 heads of 49 tokens, head dim 32.
//! let p = AttentionParams {
//!     dtype: DType::F16,
//!     batch: 4096,
//!     seq: 49,
//!     heads: 3,
//!     head_dim: 32,
//!     scale: 32f32.powf(-0.5),
//!     has_bias: true,
//!     mask: AttentionMask::Windows { n_windows: 64 },
//! };
//! p.validate()?;
//! // the same kernel on every GPU: one CTA of 128 threads per (window, head)
//! assert_eq!(p.kernel((8, 0)), AttentionKernel::Short);
//! assert_eq!(short_config(&p)?.grid.0, 4096 * 3);
//!
//! // The CPU reference computes the same function on small inputs.
//! let small = AttentionParams { batch: 1, seq: 1, has_bias: false, mask: AttentionMask::None, ..p };
//! let qkv = vec![0.5f32; small.sizes().0];
//! let out = attention_reference(&small, &qkv, None, None);
//! assert!(out.iter().all(|&v| v == 0.5)); // one key: the output is its value
//!
//! // On a machine with a GPU, `Gpu::global()` finds the driver; without one it is a clean error.
//! match fuseprof_kernels::Gpu::global() {
//!     Ok(_gpu) => { /* launch_attention(gpu, &p, &buffers, stream) */ }
//!     Err(e) => println!("no GPU here: {e}"),
//! }
//! # Ok::<(), fuseprof_kernels::Error>(())
//! ```

pub mod attention;
pub mod dtype;
pub mod elementwise;
pub mod error;
pub mod ffi;
pub mod gemm;
pub mod mlp;
pub mod runtime;
pub mod sources;
pub mod window;

pub use dtype::DType;
pub use error::{Error, Result};
pub use runtime::{DevPtr, Gpu, LaunchConfig, RawStream, Source};

/// Every kernel source of the crate, as its family declares it.
pub fn all_sources() -> [Source; 8] {
    [
        attention::short::SOURCE,
        attention::backward::SOURCE,
        attention::long::SOURCE,
        attention::sm90::SOURCE,
        window::SOURCE,
        elementwise::SOURCE,
        mlp::SOURCE,
        mlp::SOURCE_SM90,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when `text` defines kernel `name`, directly or through a macro such as
    /// `LN_SHIFT_PARTITION(4)` for `ln_shift_partition_4`.
    fn defines(text: &str, name: &str) -> bool {
        text.contains(&format!("{name}("))
            || name.rsplit_once('_').is_some_and(|(stem, n)| {
                n.parse::<u32>().is_ok() && text.contains(&format!("{}({n})", stem.to_uppercase()))
            })
    }

    #[test]
    fn sources_expand_and_define_their_kernels() {
        for s in all_sources() {
            let t = s.full_text().unwrap();
            let include = t.lines().any(|l| l.trim_start().starts_with("#include"));
            assert!(!include, "{}: an include left", s.file_name);
            assert!(t.contains("to_f32"), "{}: common.cuh included", s.file_name);
            assert!(!s.kernels.is_empty());
            for k in s.kernels {
                assert!(defines(&t, k), "{k} missing from {}", s.file_name);
                assert!(t.contains("__global__"), "{}", s.file_name);
            }
        }
        let kernels: usize = all_sources().iter().map(|s| s.kernels.len()).sum();
        let globals: usize = all_sources()
            .iter()
            .map(|s| s.full_text().unwrap().matches("__global__").count())
            .sum();
        // each listed kernel is one __global__ definition (the window ops' four widths come
        // from one macro definition each)
        assert_eq!(
            kernels,
            globals + 6,
            "a __global__ kernel that no family lists"
        );
    }
}
