//! What each matched chain means: the shapes a pattern needs, the bundled kernel that replaces
//! it exactly, its parameters and its Python call, or why it cannot be replaced. One function per
//! pattern id of `patterns.txt`.

mod attention;
mod block;
mod gemm;
mod window;

pub(crate) use attention::sdpa_backend;
use fuseprof_analyzer::OpInstance;

use crate::chain::Match;
use crate::estimate::Kernel;

/// A chain the advisor can replace.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Replacement {
    pub kernel: Kernel,
    /// `4096x3x49x32, 64 masks`: the part of the proposal id and title that names the shape.
    pub shape: String,
    /// The Python call that uses the kernel.
    pub call: String,
    /// Parameters the bench rebuilds the chain from (and the replacement's arguments).
    pub params: Vec<(&'static str, i64)>,
    /// What the advisor had to assume because the trace does not record it.
    pub assumptions: Vec<String>,
}

/// What a rule says of a match.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    Replace(Replacement),
    /// The chain is this pattern, but the bundled kernel cannot replace it exactly.
    NotProposed(String),
    /// The shapes say it is not this pattern after all: the ops stay free for other patterns.
    NoMatch,
}

/// The ops of one match, by pattern step.
pub(crate) struct Ctx<'a> {
    pub ops: &'a [&'a OpInstance],
    pub m: &'a Match,
    pub kernel_names: &'a [String],
}

impl<'a> Ctx<'a> {
    pub fn op(&self, step: usize) -> Option<&'a OpInstance> {
        self.m.at(step).map(|p| self.ops[p])
    }
    /// The base name (`roll` for `aten::roll`) of the op at `step`.
    pub fn base(&self, step: usize) -> Option<&'a str> {
        self.op(step).map(|o| o.base_name())
    }
    /// Input `i` of the op at `step`.
    pub fn dims(&self, step: usize, i: usize) -> Option<&'a [i64]> {
        self.op(step)?
            .dims
            .as_ref()?
            .get(i)
            .map(Vec::as_slice)
            .filter(|d| !d.is_empty())
    }
}

/// Element bytes of the chain's data: the first op's dtype, or what its kernels' names say.
pub(crate) fn elem_bytes(ctx: &Ctx) -> Option<u32> {
    ctx.m
        .positions
        .iter()
        .find_map(|&(_, p)| ctx.ops[p].elem_bytes(ctx.kernel_names))
}

/// The bundled kernels take fp16 and bf16: the assumptions about the dtype, or why not.
pub(crate) fn needs_16bit(ctx: &Ctx) -> Result<Vec<String>, String> {
    match elem_bytes(ctx) {
        Some(2) => Ok(Vec::new()),
        Some(b) => Err(format!(
            "{}-bit data: the bundled kernels take fp16 and bf16",
            b * 8
        )),
        None => Ok(vec![
            "dtype not recorded and not in the kernel names: fp16 assumed".into(),
        ]),
    }
}

pub(crate) fn judge(pattern: &str, ctx: &Ctx) -> Verdict {
    match pattern {
        "window_attention" => attention::window(ctx),
        "full_attention" => attention::full(ctx),
        "sdpa" => attention::sdpa(ctx),
        "window_partition" => window::partition(ctx),
        "window_reverse" => window::reverse(ctx),
        "gemm_gelu" => gemm::gelu(ctx),
        "gemm_residual" => gemm::residual(ctx),
        "bias_residual" => gemm::bias_residual(ctx),
        "odd_gemm" => gemm::odd(ctx),
        "fused_mlp" => block::mlp(ctx),
        "patch_embed" => block::patch_embed(ctx),
        _ => Verdict::NoMatch,
    }
}

/// The first step of a pattern whose ops only confirm the match (a shape the rule reads) and
/// are not replaced: they are no part of the chain's time, and stay free for other chains.
pub(crate) fn context_from(pattern: &str) -> Option<usize> {
    match pattern {
        // The op after the convolution tells its stride; the patch embedding replaces the
        // convolution alone.
        "patch_embed" => Some(1),
        _ => None,
    }
}

/// Product of all but the last dimension (the rows of a `[..., cols]` tensor).
pub(crate) fn rows(d: &[i64]) -> i64 {
    d[..d.len().saturating_sub(1)].iter().product()
}
