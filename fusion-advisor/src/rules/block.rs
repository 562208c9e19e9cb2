//! Whole pieces of a transformer block: the MLP (LayerNorm, fc1, GELU, fc2, residual) as one
//! kernel with its hidden tensor kept on chip, and the patch embedding (a convolution whose
//! kernel equals its stride) as a patchify copy and one GEMM.

use super::gemm::{linear_mnk, GELU_ASSUMED};
use super::{needs_16bit, rows, Ctx, Replacement, Verdict};
use crate::estimate::Kernel;

/// The widths `C` the fused MLP kernel is built for (`kernels/src/mlp.rs`).
const MLP_WIDTHS: [i64; 3] = [96, 128, 192];
/// Its hidden width must be a multiple of this (the chunk it streams fc1's outputs in).
const MLP_HIDDEN_CHUNK: i64 = 64;

// fused_mlp | layer_norm? linear gelu linear add
pub(super) fn mlp(ctx: &Ctx) -> Verdict {
    let (Some((m, hidden, c, bias1)), Some((m2, c2, hidden2, bias2))) =
        (linear_mnk(ctx, 1), linear_mnk(ctx, 3))
    else {
        return Verdict::NoMatch;
    };
    let (Some(out), Some(res)) = (ctx.dims(4, 0), ctx.dims(4, 1)) else {
        return Verdict::NoMatch;
    };
    // fc2 reads fc1's hidden tensor and gives back C columns, added to a same-shaped residual.
    if m2 != m || hidden2 != hidden || c2 != c || out != res || out.last() != Some(&c) {
        return Verdict::NoMatch;
    }
    if rows(out) != m {
        return Verdict::NoMatch;
    }
    let ln = ctx.op(0).is_some();
    if ln
        && ctx
            .dims(0, 0)
            .is_none_or(|x| x.last() != Some(&c) || rows(x) != m)
    {
        return Verdict::NoMatch;
    }
    // Other widths keep the GEMMs (and their epilogues): the ops stay free for those patterns.
    if !MLP_WIDTHS.contains(&c) || hidden % MLP_HIDDEN_CHUNK != 0 {
        return Verdict::NoMatch;
    }
    let mut assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    if !(bias1 && bias2) {
        return Verdict::NotProposed(
            "a linear without bias: the fused MLP adds both biases".into(),
        );
    }
    if ln && ctx.dims(0, 2) != Some(&[c][..]) {
        return Verdict::NotProposed(
            "a LayerNorm without a weight per channel: the fused MLP applies one".into(),
        );
    }
    assumptions.push(GELU_ASSUMED.into());
    if !ln {
        assumptions.push(
            "the LayerNorm before fc1 went to the chain before (the window reverse): the fused \
             MLP applies it itself, and that chain drops it"
                .into(),
        );
    }
    Verdict::Replace(Replacement {
        kernel: Kernel::LnMlp {
            rows: m,
            width: c,
            hidden,
        },
        shape: format!("{m}x{c}, hidden {hidden}"),
        call: format!(
            "y = fk.ln_mlp_residual(x, norm2.weight, norm2.bias, fc1.weight, fc1.bias, \
             fc2.weight, fc2.bias)  # x: [{m}, {c}], hidden {hidden} kept on chip; y = x + mlp(norm(x))"
        ),
        params: vec![("rows", m), ("width", c), ("hidden", hidden)],
        assumptions,
    })
}

// patch_embed | (conv2d|convolution) (layer_norm|cat|add)?
pub(super) fn patch_embed(ctx: &Ctx) -> Verdict {
    let (Some(&[b, cin, h, w]), Some(&[c, cin2, ph, pw])) = (ctx.dims(0, 0), ctx.dims(0, 1)) else {
        return Verdict::NoMatch;
    };
    if cin2 != cin || ph * pw < 2 || h % ph != 0 || w % pw != 0 {
        return Verdict::NoMatch;
    }
    // The stride is not recorded; the op after the convolution (its norm, the class token's
    // concatenation or the position embedding's add, on the tokens) tells it: one input holds
    // exactly B x (H/ph) x (W/pw) tokens of C channels only when the stride is the kernel.
    let tokens = b * (h / ph) * (w / pw);
    let Some(after) = ctx.op(1).and_then(|op| op.dims.as_ref()) else {
        return Verdict::NoMatch;
    };
    let confirmed = after
        .iter()
        .any(|d| d.last() == Some(&c) && rows(d) == tokens && d.len() >= 2);
    if !confirmed {
        return Verdict::NoMatch;
    }
    let assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    let k = cin * ph * pw;
    Verdict::Replace(Replacement {
        kernel: Kernel::PatchEmbed {
            b,
            cin,
            h,
            w,
            c,
            patch: ph,
            patch_w: pw,
        },
        shape: format!("{b}x{cin}x{h}x{w}, patch {ph}x{pw}, to {c}"),
        call: format!(
            "patches = x.reshape({b}, {cin}, {gh}, {ph}, {gw}, {pw}).permute(0, 2, 4, 1, 3, 5)\
             .reshape({tokens}, {k})\n\
             y = fk.gemm(patches, w_pad, \"nk\", bias=proj.bias, epilogue=\"bias\")  \
             # w_pad: proj.weight as [{c}, {k}] padded once; y: [{tokens}, {c}] tokens in NHWC order",
            gh = h / ph,
            gw = w / pw,
        ),
        params: vec![
            ("b", b),
            ("cin", cin),
            ("h", h),
            ("w", w),
            ("c", c),
            ("ph", ph),
            ("pw", pw),
        ],
        assumptions,
    })
}
