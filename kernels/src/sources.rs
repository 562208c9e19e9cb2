//! The CUDA sources under `src/cu/`, embedded at build time: one `.cu` file per kernel family
//! and the `.cuh` headers they include. Nothing here runs on a GPU; the runtime compiles a
//! `runtime::Source` when a launcher first needs one of its kernels.

/// `fmha_short.cu`: attention over at most 64 tokens (Swin windows): `fmha_fwd_window`,
/// `fmha_fwd_short`, `fmha_add_combine`.
pub const FMHA_SHORT: &str = include_str!("cu/fmha_short.cu");
/// `fmha_long.cu`: `fmha_fwd_long`, attention over any length on every sm_80+ GPU.
pub const FMHA_LONG: &str = include_str!("cu/fmha_long.cu");
/// `fmha_sm90.cu`: `fmha_fwd_long_tma` and `fmha_fwd_item_tma`, the Hopper (sm_90a) kernels.
pub const FMHA_SM90: &str = include_str!("cu/fmha_sm90.cu");
/// `fmha_bwd.cu`: `fmha_bwd_window`, the backward pass of attention over at most 64 tokens.
pub const FMHA_BWD: &str = include_str!("cu/fmha_bwd.cu");
/// `window.cu`: Swin's LayerNorm + shift + partition and window reverse + shift + residual.
pub const WINDOW: &str = include_str!("cu/window.cu");
/// `elementwise.cu`: bias + residual, bias + GELU, the zero-padding copy.
pub const ELEMENTWISE: &str = include_str!("cu/elementwise.cu");
/// `mlp.cu`: `mlp_gelu_residual`, the MLP with its hidden tensor kept on chip.
pub const MLP: &str = include_str!("cu/mlp.cu");
/// `mlp_sm90.cu`: `ln_mlp_residual_wg`, the same MLP with warpgroup MMAs (sm_90a).
pub const MLP_SM90: &str = include_str!("cu/mlp_sm90.cu");

/// The headers, by the name a source's `#include "NAME"` gives.
pub const HEADERS: [(&str, &str); 6] = [
    ("common.cuh", include_str!("cu/common.cuh")),
    ("fmha.cuh", include_str!("cu/fmha.cuh")),
    ("mma_sm80.cuh", include_str!("cu/mma_sm80.cuh")),
    ("fmha_sm80.cuh", include_str!("cu/fmha_sm80.cuh")),
    ("wgmma_sm90.cuh", include_str!("cu/wgmma_sm90.cuh")),
    ("fmha_sm90.cuh", include_str!("cu/fmha_sm90.cuh")),
];

/// The text of header `name`, if the crate has one by that name.
pub fn header(name: &str) -> Option<&'static str> {
    HEADERS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_under_cu_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cu");
        let embedded: Vec<&str> = HEADERS
            .iter()
            .map(|(n, _)| *n)
            .chain([
                "fmha_short.cu",
                "fmha_long.cu",
                "fmha_bwd.cu",
                "fmha_sm90.cu",
                "window.cu",
                "elementwise.cu",
                "mlp.cu",
                "mlp_sm90.cu",
            ])
            .collect();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(embedded.contains(&name.as_str()), "{name} is not embedded");
        }
    }
}
