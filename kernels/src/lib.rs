//! fuseprof's bundled kernels: the fused replacements the fusion advisor can propose.
//!
//! * [`attention`]: fused multi-head attention for short sequences (Swin windows with relative
//!   position bias and shifted-window mask, ViT, BERT with a key-padding mask), reading the QKV
//!   projection's output in place and writing the layout the output projection reads.
//! * [`window`]: Swin's LayerNorm + shift + pad + window partition, and window reverse + reverse
//!   shift + residual (+ the next LayerNorm), one pass each.
//! * [`gemm`]: GEMMs on operands padded to multiples of 8 through cuBLASLt, with bias, bias +
//!   exact GELU and bias + residual epilogues.
//! * [`elementwise`]: 16-byte bias + residual add, bias + GELU, zero-padding copies.
//!
//! Each kernel is a `.cu` file under `src/cu/` compiled at run time with NVRTC (through cudarc,
//! loaded dynamically), so this crate builds and its host code is tested on machines with no
//! CUDA at all. Each has a typed launcher, a CPU reference used by the tests, and an entry in
//! the C ABI ([`ffi`]) that `python/fuseprof_kernels.py` calls on PyTorch tensors.
//!
//! ```
//! use fuseprof_kernels::attention::{attention_reference, AttentionMask, AttentionParams};
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
//! assert_eq!(p.launch_config()?.grid.0, 4096 * 3);
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
pub mod runtime;
pub mod window;

pub use dtype::DType;
pub use error::{Error, Result};
pub use runtime::{DevPtr, Gpu, LaunchConfig, RawStream, Source};
