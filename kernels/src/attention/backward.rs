//! `fmha_bwd.cu`: the backward pass of the short attention (seq <= 64) on a combined additive
//! tensor ([`AttentionMask::Combined`]) or none: dq, dk and dv in the qkv layout, and the
//! additive tensor's gradient summed over the batch entries that share each entry.
//!
//! The CPU reference is [`attention_backward_reference`]; its own check is finite differences
//! of [`super::attention_reference`].

use super::{padded_seq, AttentionMask, AttentionParams, BLOCK_M};
use crate::error::{invalid, Result};
use crate::runtime::{Args, DevPtr, Gpu, LaunchConfig, RawStream, Source};

/// `fmha_bwd.cu`, built per head dimension for any sm_80+ GPU.
pub const SOURCE: Source = Source {
    file_name: "fmha_bwd.cu",
    text: crate::sources::FMHA_BWD,
    variants: Some(("HEAD_DIM", &super::SUPPORTED_HEAD_DIMS)),
    arch_specific: None,
    kernels: &["fmha_bwd_window"],
};

/// Threads of `fmha_bwd_window`: 4 warps of 16 query (then key) rows.
const THREADS: u32 = 128;

/// Device buffers of one backward call.
#[derive(Debug, Clone, Copy)]
pub struct BackwardBuffers {
    /// `[batch * seq, 3, heads, head_dim]`, the forward's input.
    pub qkv: DevPtr,
    /// `[batch * seq, heads * head_dim]`: the gradient of the forward's output.
    pub dout: DevPtr,
    /// The forward's combined additive tensor, when it had one.
    pub add: Option<DevPtr>,
    /// `[batch * seq, 3, heads, head_dim]`, written whole.
    pub dqkv: DevPtr,
    /// `[n_entries, heads, seq, seq]` fp32, zeroed by the caller, accumulated into; None: the
    /// additive tensor's gradient is not needed.
    pub dadd: Option<DevPtr>,
}

/// Dynamic shared memory: q, k, v and dO tiles (64 rows of head_dim + 8) and the staged P and
/// dS tiles (64 rows of 72), all 16-bit.
pub fn backward_smem_bytes(p: &AttentionParams) -> usize {
    (4 * BLOCK_M * (p.head_dim + 8) + 2 * BLOCK_M * (BLOCK_M + 8)) * p.dtype.size_bytes()
}

/// Launch `fmha_bwd_window`.
///
/// # Safety
/// The buffers must be device allocations of the current context with the extents above
/// (`p.sizes()` for qkv, dout and add; `dqkv` as qkv; `dadd` `n_entries * heads * seq * seq`
/// floats), `dqkv` and `dadd` not overlapping the inputs.
pub unsafe fn launch_attention_backward(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &BackwardBuffers,
    stream: RawStream,
) -> Result<()> {
    p.validate()?;
    if p.seq > BLOCK_M {
        return Err(invalid(format!(
            "the attention backward takes seq <= {BLOCK_M} (got {})",
            p.seq
        )));
    }
    let n_entries = match p.mask {
        AttentionMask::None => 1,
        AttentionMask::Combined { n_entries } => n_entries,
        _ => {
            return Err(invalid(
                "the attention backward takes a combined additive tensor or none",
            ))
        }
    };
    if p.has_bias {
        return Err(invalid(
            "the attention backward takes the bias inside the combined tensor",
        ));
    }
    if (p.mask != AttentionMask::None) != bufs.add.is_some() {
        return Err(invalid("mask kind and the additive buffer disagree"));
    }
    if bufs.dadd.is_some() && bufs.add.is_none() {
        return Err(invalid("an additive gradient needs an additive tensor"));
    }
    if [bufs.qkv, bufs.dout, bufs.dqkv]
        .iter()
        .any(|b| !b.is_multiple_of(16))
    {
        return Err(invalid("qkv, dout and dqkv must be 16-byte aligned"));
    }
    let mut cfg = LaunchConfig::linear(p.batch as u64 * p.heads as u64, THREADS)?;
    cfg.shared_bytes = backward_smem_bytes(p) as u32;
    let args = Args::default()
        .ptr(bufs.qkv)
        .ptr(bufs.dout)
        .ptr(bufs.add.unwrap_or(0))
        .ptr(bufs.dqkv)
        .ptr(bufs.dadd.unwrap_or(0))
        .i32(p.batch as i32)
        .i32(p.seq as i32)
        .i32(p.heads as i32)
        .i32(n_entries as i32)
        .i32(padded_seq(p.seq) as i32)
        .f32(p.scale);
    // SAFETY: the argument list matches fmha_bwd_window's; one CTA per (batch, head); the
    // extents are the caller's contract.
    unsafe {
        gpu.launch(
            &SOURCE,
            p.dtype,
            p.head_dim as u32,
            "fmha_bwd_window",
            cfg,
            stream,
            args,
        )
    }
}

/// The backward pass on the CPU, in f64: `(dqkv, dadd)` for the output gradient `dout`, `add`
/// being the combined tensor `[n_entries, heads, seq, padded_seq]` (or None). `dadd` is
/// `[n_entries, heads, seq, seq]`, summed over the batch entries that share an entry.
pub fn attention_backward_reference(
    p: &AttentionParams,
    qkv: &[f32],
    dout: &[f32],
    add: Option<&[f32]>,
) -> (Vec<f32>, Vec<f32>) {
    let (n, h, d) = (p.seq, p.heads, p.head_dim);
    let (qkv_len, out_len, _, _) = p.sizes();
    assert_eq!(qkv.len(), qkv_len, "qkv length");
    assert_eq!(dout.len(), out_len, "dout length");
    let (n_entries, stride) = match p.mask {
        AttentionMask::Combined { n_entries } => (n_entries, padded_seq(n)),
        _ => (1, 0),
    };
    let at = |b: usize, row: usize, which: usize, head: usize, k: usize| -> f64 {
        qkv[(((b * n + row) * 3 + which) * h + head) * d + k] as f64
    };
    let mut dqkv = vec![0f64; qkv_len];
    let mut dadd = vec![0f64; n_entries * h * n * n];
    let mut prob = vec![0f64; n * n];
    let mut dprob = vec![0f64; n * n];
    for b in 0..p.batch {
        let e = b % n_entries;
        for head in 0..h {
            for i in 0..n {
                let mut max = f64::NEG_INFINITY;
                for j in 0..n {
                    let dot: f64 = (0..d)
                        .map(|k| at(b, i, 0, head, k) * at(b, j, 1, head, k))
                        .sum();
                    let mut s = dot * p.scale as f64;
                    if let Some(add) = add {
                        s += add[((e * h + head) * n + i) * stride + j] as f64;
                    }
                    prob[i * n + j] = s;
                    max = max.max(s);
                }
                let sum: f64 = (0..n).map(|j| (prob[i * n + j] - max).exp()).sum();
                for j in 0..n {
                    prob[i * n + j] = (prob[i * n + j] - max).exp() / sum;
                }
                let go = |k: usize| dout[((b * n + i) * h + head) * d + k] as f64;
                for j in 0..n {
                    dprob[i * n + j] = (0..d).map(|k| go(k) * at(b, j, 2, head, k)).sum();
                }
                let row: f64 = (0..n).map(|j| prob[i * n + j] * dprob[i * n + j]).sum();
                for j in 0..n {
                    // dS, in place of dP.
                    dprob[i * n + j] = prob[i * n + j] * (dprob[i * n + j] - row);
                    dadd[((e * h + head) * n + i) * n + j] += dprob[i * n + j];
                }
            }
            for i in 0..n {
                for k in 0..d {
                    let dq: f64 = (0..n)
                        .map(|j| dprob[i * n + j] * at(b, j, 1, head, k))
                        .sum();
                    let dk: f64 = (0..n)
                        .map(|j| dprob[j * n + i] * at(b, j, 0, head, k))
                        .sum();
                    let dv: f64 = (0..n)
                        .map(|j| prob[j * n + i] * dout[((b * n + j) * h + head) * d + k] as f64)
                        .sum();
                    let base = |which: usize| (((b * n + i) * 3 + which) * h + head) * d + k;
                    dqkv[base(0)] = dq * p.scale as f64;
                    dqkv[base(1)] = dk * p.scale as f64;
                    dqkv[base(2)] = dv;
                }
            }
        }
    }
    (
        dqkv.into_iter().map(|x| x as f32).collect(),
        dadd.into_iter().map(|x| x as f32).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::super::attention_reference;
    use super::super::tests::noise as values;
    use super::*;
    use crate::dtype::DType;

    /// sum(out * dout): the scalar whose gradient the backward gives.
    fn loss(p: &AttentionParams, qkv: &[f32], dout: &[f32], add: Option<&[f32]>) -> f64 {
        attention_reference(p, qkv, None, add)
            .iter()
            .zip(dout)
            .map(|(o, g)| *o as f64 * *g as f64)
            .sum()
    }

    #[test]
    fn the_reference_backward_is_the_forwards_gradient() {
        // 4 windows sharing 2 additive entries, 3 heads, 5 tokens (padded to 8), head dim 32.
        let p = AttentionParams {
            dtype: DType::F16,
            batch: 4,
            seq: 5,
            heads: 3,
            head_dim: 32,
            scale: 0.3,
            has_bias: false,
            mask: AttentionMask::Combined { n_entries: 2 },
        };
        let (qkv_len, out_len, _, add_len) = p.sizes();
        let qkv = values(qkv_len, 1);
        let dout = values(out_len, 2);
        let mut add = values(add_len, 3);
        for (i, a) in add.iter_mut().enumerate() {
            if i % padded_seq(p.seq) >= p.seq {
                *a = f32::NEG_INFINITY; // the padding columns, as the combine writes them
            }
        }
        let (dqkv, dadd) = attention_backward_reference(&p, &qkv, &dout, Some(&add));
        let eps = 1e-3f32;
        // Central differences in f32 inputs: every 7th qkv element, every additive element.
        for i in (0..qkv_len).step_by(7) {
            let (mut up, mut down) = (qkv.clone(), qkv.clone());
            up[i] += eps;
            down[i] -= eps;
            let num = (loss(&p, &up, &dout, Some(&add)) - loss(&p, &down, &dout, Some(&add)))
                / (2.0 * eps as f64);
            assert!(
                (num - dqkv[i] as f64).abs() < 2e-3 * (1.0 + num.abs()),
                "dqkv[{i}]: {} vs finite differences {num}",
                dqkv[i]
            );
        }
        let n = p.seq;
        for e in 0..2 {
            for head in 0..p.heads {
                for i in 0..n {
                    for j in 0..n {
                        let at = ((e * p.heads + head) * n + i) * padded_seq(n) + j;
                        let (mut up, mut down) = (add.clone(), add.clone());
                        up[at] += eps;
                        down[at] -= eps;
                        let num = (loss(&p, &qkv, &dout, Some(&up))
                            - loss(&p, &qkv, &dout, Some(&down)))
                            / (2.0 * eps as f64);
                        let got = dadd[((e * p.heads + head) * n + i) * n + j] as f64;
                        assert!(
                            (num - got).abs() < 2e-3 * (1.0 + num.abs()),
                            "dadd[{e}, {head}, {i}, {j}]: {got} vs {num}"
                        );
                    }
                }
            }
        }
        // Without an additive tensor the same function of q, k, v.
        let none = AttentionParams {
            mask: AttentionMask::None,
            ..p
        };
        let (d2, dadd2) = attention_backward_reference(&none, &qkv, &dout, None);
        assert_eq!(dadd2.len(), p.heads * n * n);
        let i = 11;
        let (mut up, mut down) = (qkv.clone(), qkv.clone());
        up[i] += eps;
        down[i] -= eps;
        let num =
            (loss(&none, &up, &dout, None) - loss(&none, &down, &dout, None)) / (2.0 * eps as f64);
        assert!((num - d2[i] as f64).abs() < 2e-3 * (1.0 + num.abs()));
    }

    #[test]
    fn the_shared_memory_holds_six_tiles() {
        let p = AttentionParams {
            dtype: DType::BF16,
            batch: 2,
            seq: 49,
            heads: 3,
            head_dim: 32,
            scale: 0.17,
            has_bias: false,
            mask: AttentionMask::Combined { n_entries: 1 },
        };
        // 4 tiles of 64 x 40 and 2 of 64 x 72, 2 bytes each.
        assert_eq!(backward_smem_bytes(&p), (4 * 64 * 40 + 2 * 64 * 72) * 2);
        let d64 = AttentionParams { head_dim: 64, ..p };
        assert!(
            backward_smem_bytes(&d64) > 48 * 1024,
            "opts in above 48 KiB"
        );
    }
}
