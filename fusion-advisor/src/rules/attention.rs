//! Attention chains: Swin window attention (bias + shifted-window mask), full attention written
//! as matmul-softmax-matmul, and SDPA calls, all replaced by the bundled fMHA, which reads the
//! QKV projection's output as it lies and writes the output projection's input.

use super::{needs_16bit, Ctx, Replacement, Verdict};
use crate::estimate::Kernel;

/// Head dims the fMHA kernels are built for.
const HEAD_DIMS: [i64; 2] = [32, 64];
/// Longest window the persistent window kernel (bias + mask combined) takes.
const WINDOW_MAX_SEQ: i64 = 64;
/// Longest sequence the advisor proposes the full-attention fMHA for.
const FULL_MAX_SEQ: i64 = 512;

// window_attention | mul matmul index? contiguous? add add? softmax matmul reshape
pub(super) fn window(ctx: &Ctx) -> Verdict {
    let (Some(q), Some(bias)) = (ctx.dims(0, 0), ctx.dims(4, 1)) else {
        return Verdict::NoMatch;
    };
    let [bw, heads, seq, d] = *q else {
        return Verdict::NoMatch;
    };
    // The relative-position bias: [1, heads, N, N] (or [heads, N, N]).
    let bias_ok = matches!(*bias, [1, h, a, b] | [h, a, b] if h == heads && a == seq && b == seq);
    if !bias_ok || ctx.dims(1, 1) != Some(&[bw, heads, d, seq][..]) {
        return Verdict::NoMatch;
    }
    // The shifted-window mask: [1, nW, 1, N, N] added to scores viewed as [B, nW, heads, N, N].
    let windows = match ctx.dims(5, 1) {
        None => 0,
        Some(&[1, nw, 1, a, b]) if a == seq && b == seq && nw > 0 && bw % nw == 0 => nw,
        Some(other) => {
            return Verdict::NotProposed(format!(
                "a second additive term of shape {other:?}: the window kernel takes a \
                 [1, nW, 1, N, N] shifted-window mask"
            ))
        }
    };
    let mut assumptions = match needs_16bit(ctx) {
        Ok(a) => a,
        Err(why) => return Verdict::NotProposed(why),
    };
    if !HEAD_DIMS.contains(&d) {
        return Verdict::NotProposed(format!(
            "head_dim {d}: the bundled fMHA is built for head_dim 32 and 64"
        ));
    }
    if seq > WINDOW_MAX_SEQ {
        return Verdict::NotProposed(format!(
            "windows of {seq} tokens: the window kernel takes up to {WINDOW_MAX_SEQ}"
        ));
    }
    assumptions.push(
        "the relative-position bias and the window mask are constants at inference: they are \
         combined once per layer (fk.attention_add), outside the step"
            .into(),
    );
    let (mask, mask_note) = if windows > 0 {
        (
            ", window_mask=attn_mask",
            format!("; attn_mask: [{windows}, {seq}, {seq}]"),
        )
    } else {
        ("", String::new())
    };
    Verdict::Replace(Replacement {
        kernel: Kernel::WindowFmha {
            batch: bw,
            heads,
            seq,
            head_dim: d,
            windows,
        },
        shape: format!(
            "{bw}x{heads}x{seq}x{d}{}",
            if windows > 0 { ", shifted" } else { "" }
        ),
        call: format!(
            "add = fk.attention_add({heads}, {seq}, bias=rel_pos_bias{mask})  # once per layer; \
             rel_pos_bias: [{heads}, {seq}, {seq}]{mask_note}\n\
             out = fk.attention(qkv, heads={heads}, seq={seq}, add=add)  # qkv: the qkv Linear's \
             output [{}, {}] -> [{}, {}]",
            bw * seq,
            3 * heads * d,
            bw * seq,
            heads * d
        ),
        params: vec![
            ("batch", bw),
            ("heads", heads),
            ("seq", seq),
            ("head_dim", d),
            ("windows", windows),
        ],
        assumptions,
    })
}

/// The fMHA for a full-attention chain or SDPA call on [B, heads, N, d] with an optional
/// key-padding mask, or why not.
fn full_attention(
    ctx: &Ctx,
    q: &[i64],
    mask: Option<&[i64]>,
    mut assumptions: Vec<String>,
) -> Verdict {
    let [b, heads, seq, d] = *q else {
        return Verdict::NotProposed(format!(
            "queries of shape {q:?}: heads and head_dim are not known from a {}-D tensor",
            q.len()
        ));
    };
    let key_mask = match mask {
        None => false,
        Some(&[mb, 1, 1, n]) if (mb == b || mb == 1) && n == seq => true,
        Some(&[mb, n]) if mb == b && n == seq => true,
        // Hugging Face's SDPA path hands the [B, N] padding mask on expanded over the query
        // rows; the recorded shape cannot tell that from a mask that differs per query.
        Some(&[mb, 1, nq, n]) if mb == b && nq == seq && n == seq => {
            assumptions.push(
                "a [B, 1, N, N] mask, taken as a key-padding mask expanded over the queries \
                 (as Hugging Face's SDPA path passes one); a mask that differs per query is not \
                 replaced"
                    .into(),
            );
            true
        }
        // A per-head additive term on short sequences, shared by every M-th batch entry: a
        // relative-position bias ([1, heads, N, N]), or bias and shifted-window mask combined
        // ([B or nW, heads, N, N]) as Hugging Face's Swin passes them to SDPA. The window kernel
        // reads it as its `add`.
        Some(&[m, h, nq, n])
            if h == heads
                && nq == seq
                && n == seq
                && m > 0
                && b % m == 0
                && seq <= WINDOW_MAX_SEQ =>
        {
            return short_with_add(ctx, [b, heads, seq, d], m, assumptions);
        }
        Some(other) => {
            return Verdict::NotProposed(format!(
                "an additive mask of shape {other:?}: the fMHA takes a key-padding mask \
                 ([B, 1, 1, N]) or, up to {WINDOW_MAX_SEQ} tokens, a per-head term \
                 ([M, heads, N, N], M dividing the batch)"
            ))
        }
    };
    if let Err(why) = fmha_takes(ctx, d, &mut assumptions) {
        return Verdict::NotProposed(why);
    }
    if seq > FULL_MAX_SEQ {
        return Verdict::NotProposed(format!(
            "sequences of {seq} tokens: the bundled fMHA is proposed up to {FULL_MAX_SEQ}"
        ));
    }
    Verdict::Replace(Replacement {
        kernel: Kernel::Fmha {
            batch: b,
            heads,
            seq,
            head_dim: d,
            key_mask,
        },
        shape: format!(
            "{b}x{heads}x{seq}x{d}{}",
            if key_mask { ", key mask" } else { "" }
        ),
        call: format!(
            "out = fk.attention(qkv, heads={heads}, seq={seq}{})  # qkv: the QKV projection's \
             output [{}, {}] -> [{}, {}]",
            if key_mask {
                ", key_padding_mask=mask  # additive [B, N]"
            } else {
                ""
            },
            b * seq,
            3 * heads * d,
            b * seq,
            heads * d
        ),
        params: vec![
            ("batch", b),
            ("heads", heads),
            ("seq", seq),
            ("head_dim", d),
            ("key_mask", i64::from(key_mask)),
        ],
        assumptions,
    })
}

/// Whether the bundled fMHA takes the chain's data (fp16/bf16, head_dim 32 or 64), adding what
/// it had to assume.
fn fmha_takes(ctx: &Ctx, d: i64, assumptions: &mut Vec<String>) -> Result<(), String> {
    assumptions.extend(needs_16bit(ctx)?);
    if !HEAD_DIMS.contains(&d) {
        return Err(format!(
            "head_dim {d}: the bundled fMHA is built for head_dim 32 and 64"
        ));
    }
    Ok(())
}

/// The window fMHA for attention on `[b, heads, seq, d]` with an additive `[m, heads, seq, seq]`
/// term (batch entry i adds term i % m), or why not.
fn short_with_add(ctx: &Ctx, q: [i64; 4], m: i64, mut assumptions: Vec<String>) -> Verdict {
    let [b, heads, seq, d] = q;
    if let Err(why) = fmha_takes(ctx, d, &mut assumptions) {
        return Verdict::NotProposed(why);
    }
    // Kernel::WindowFmha counts one term for no mask, as timm's unshifted blocks have.
    let windows = if m == 1 { 0 } else { m };
    let pad = (seq + 7) / 8 * 8 - seq;
    Verdict::Replace(Replacement {
        kernel: Kernel::WindowFmha {
            batch: b,
            heads,
            seq,
            head_dim: d,
            windows,
        },
        shape: format!("{b}x{heads}x{seq}x{d}, add {m}x{heads}"),
        call: format!(
            "add = torch.nn.functional.pad(attn_mask, (0, {pad}), value=float('-inf'))  # the \
             additive [{m}, {heads}, {seq}, {seq}] term, rows padded to 8 with -inf\n\
             out = fk.attention(qkv, heads={heads}, seq={seq}, add=add)  # qkv: the QKV \
             projection's output [{}, {}] -> [{}, {}]",
            b * seq,
            3 * heads * d,
            b * seq,
            heads * d
        ),
        params: vec![
            ("batch", b),
            ("heads", heads),
            ("seq", seq),
            ("head_dim", d),
            ("windows", windows),
        ],
        assumptions,
    })
}

// full_attention | mul? matmul (div|mul)? add? softmax matmul (reshape|contiguous)?
pub(super) fn full(ctx: &Ctx) -> Verdict {
    let (Some(q), Some(k)) = (ctx.dims(1, 0), ctx.dims(1, 1)) else {
        return Verdict::NoMatch;
    };
    // q . k^T: the last two dims of k are (d, N).
    if q.len() != k.len() || q.len() < 3 || q[q.len() - 1] != k[k.len() - 2] {
        return Verdict::NoMatch;
    }
    full_attention(ctx, q, ctx.dims(3, 1), Vec::new())
}

// sdpa | scaled_dot_product_attention
pub(super) fn sdpa(ctx: &Ctx) -> Verdict {
    let Some(q) = ctx.dims(0, 0) else {
        return Verdict::NoMatch;
    };
    let assumptions = vec![
        "is_causal is not recorded: taken as False (a causal call is not replaced)".to_string(),
    ];
    full_attention(ctx, q, ctx.dims(0, 3), assumptions)
}

/// The SDPA backend that ran, from the ops nested in the call.
pub(crate) fn sdpa_backend(op: &fuseprof_analyzer::OpInstance, names: &[String]) -> &'static str {
    let mut backend = "unknown";
    for r in &op.records {
        let n = names[r.launched_by as usize].as_str();
        backend = if n.contains("cudnn") {
            "cuDNN"
        } else if n.contains("flash") {
            "flash"
        } else if n.contains("efficient") {
            "memory-efficient"
        } else {
            "math"
        };
        if backend != "math" {
            break;
        }
    }
    backend
}
