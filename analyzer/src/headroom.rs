//! Headroom: for ops whose bytes and FLOPs follow from their input shapes, the bandwidth and
//! FLOP/s they achieved against the device's ceilings, and the time that would remain at the
//! ceiling. The gap between measured and floor time is what fusion or a better kernel can win.

use fuseprof_store::Device;
use serde::{Deserialize, Serialize};

/// A device's ceilings and where they came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    pub device: i64,
    pub name: Option<String>,
    /// Memory bandwidth, bytes per second.
    pub mem_bytes_per_s: f64,
    /// Dense matrix FLOP/s for 16-bit inputs (fp16/bf16 tensor cores).
    pub flops_16bit_per_s: f64,
    /// FLOP/s for 32-bit inputs (plain FP32; TF32 may run faster).
    pub flops_32bit_per_s: Option<f64>,
    /// `store (measured)`, `store (nominal)`, `built-in (...)`, or a mix of the two.
    pub source: String,
}

struct Known {
    contains: &'static str,
    mem_bytes_per_s: f64,
    flops_16bit_per_s: f64,
    flops_32bit_per_s: f64,
    source: &'static str,
}

/// Built-in ceilings, matched on the device name; first match wins. H100/H200 figures are the
/// ones measured on the project's device (../shared/ANCHORS.md), the others vendor datasheets.
const KNOWN_GPUS: &[Known] = &[
    Known {
        contains: "H200",
        mem_bytes_per_s: 4.25e12,
        flops_16bit_per_s: 670e12,
        flops_32bit_per_s: 67e12,
        source: "built-in (H200: measured copy 4.25 TB/s, bf16 GEMM 670 TFLOP/s)",
    },
    Known {
        contains: "H100",
        mem_bytes_per_s: 3.0e12,
        flops_16bit_per_s: 800e12,
        flops_32bit_per_s: 67e12,
        source: "built-in (H100: measured copy 3.0 TB/s, bf16 ~800 TFLOP/s)",
    },
    Known {
        contains: "A100-SXM4-80GB",
        mem_bytes_per_s: 2.039e12,
        flops_16bit_per_s: 312e12,
        flops_32bit_per_s: 19.5e12,
        source: "built-in (A100 80GB datasheet)",
    },
    Known {
        contains: "A100",
        mem_bytes_per_s: 1.555e12,
        flops_16bit_per_s: 312e12,
        flops_32bit_per_s: 19.5e12,
        source: "built-in (A100 40GB datasheet)",
    },
    Known {
        contains: "L40S",
        mem_bytes_per_s: 0.864e12,
        flops_16bit_per_s: 362e12,
        flops_32bit_per_s: 91.6e12,
        source: "built-in (L40S datasheet)",
    },
    Known {
        contains: "L4",
        mem_bytes_per_s: 0.3e12,
        flops_16bit_per_s: 121e12,
        flops_32bit_per_s: 30.3e12,
        source: "built-in (L4 datasheet)",
    },
    Known {
        contains: "A10",
        mem_bytes_per_s: 0.6e12,
        flops_16bit_per_s: 125e12,
        flops_32bit_per_s: 31.2e12,
        source: "built-in (A10 datasheet)",
    },
    Known {
        contains: "V100",
        mem_bytes_per_s: 0.9e12,
        flops_16bit_per_s: 125e12,
        flops_32bit_per_s: 15.7e12,
        source: "built-in (V100 SXM2 datasheet)",
    },
    Known {
        contains: "MI250",
        mem_bytes_per_s: 3.2e12,
        flops_16bit_per_s: 362e12,
        flops_32bit_per_s: 47.9e12,
        source: "built-in (MI250X datasheet)",
    },
];

/// The ceilings of `d`: the store's peaks where it has them, else the built-in table by name.
pub fn ceiling_for(d: &Device) -> Option<Ceiling> {
    let known = d
        .name
        .as_deref()
        .and_then(|n| KNOWN_GPUS.iter().find(|k| n.contains(k.contains)));
    let store_bw = d.mem_bandwidth_bytes_per_s.filter(|v| *v > 0.0);
    let store_flops = d.peak_flops_fp16.filter(|v| *v > 0.0);
    let from_store = format!(
        "store ({})",
        d.peak_source.as_deref().unwrap_or("unspecified")
    );
    let (mem_bytes_per_s, flops_16bit_per_s, source) = match (store_bw, store_flops, known) {
        (Some(bw), Some(f), _) => (bw, f, from_store),
        (Some(bw), None, Some(k)) => (
            bw,
            k.flops_16bit_per_s,
            format!("bandwidth from the {from_store}, FLOP/s {}", k.source),
        ),
        (None, Some(f), Some(k)) => (
            k.mem_bytes_per_s,
            f,
            format!("FLOP/s from the {from_store}, bandwidth {}", k.source),
        ),
        (None, None, Some(k)) => (k.mem_bytes_per_s, k.flops_16bit_per_s, k.source.to_string()),
        _ => return None,
    };
    Some(Ceiling {
        device: d.id,
        name: d.name.clone(),
        mem_bytes_per_s,
        flops_16bit_per_s,
        flops_32bit_per_s: known.map(|k| k.flops_32bit_per_s),
        source,
    })
}

/// Bytes moved and FLOPs done by one op instance, as estimated from its shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub bytes: f64,
    pub flops: f64,
    /// Element size of the main input, which picks the FLOP ceiling.
    pub elem_bytes: u32,
    pub assumptions: Vec<&'static str>,
}

/// Bytes per element of a PyTorch dtype name, as Kineto spells it.
pub fn dtype_bytes(t: &str) -> Option<u32> {
    Some(match t {
        "double" | "long" | "long int" | "int64_t" | "c10::complex<float>" => 8,
        "float" | "int" | "c10::complex<c10::Half>" => 4,
        "c10::Half" | "c10::BFloat16" | "Half" | "BFloat16" | "short" => 2,
        "bool" | "unsigned char" | "signed char" | "char" => 1,
        s if s.starts_with("c10::Float8") => 1,
        _ => return None,
    })
}

/// A dtype guessed from a kernel name (`..._kernel<c10::BFloat16>`), for traces without dtypes.
pub fn dtype_bytes_from_kernel(name: &str) -> Option<u32> {
    let sixteen = ["BFloat16", "bfloat16", "bf16", "Half", "half", "f16"];
    if sixteen.iter().any(|t| name.contains(t)) {
        Some(2)
    } else if name.contains("float") || name.contains("f32") || name.contains("sgemm") {
        Some(4)
    } else {
        None
    }
}

fn numel(d: &[i64]) -> f64 {
    d.iter().map(|&x| x.max(0) as f64).product()
}

const ELEMENTWISE: &[&str] = &[
    "add",
    "sub",
    "rsub",
    "mul",
    "div",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "neg",
    "pow",
    "rsqrt",
    "sqrt",
    "exp",
    "log",
    "abs",
    "clamp",
    "clamp_min",
    "clamp_max",
    "where",
    "masked_fill",
    "threshold",
    "threshold_backward",
    "gelu_backward",
    "silu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "leaky_relu",
    "hardtanh",
    "maximum",
    "minimum",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "cos",
    "sin",
    "erf",
    "reciprocal",
    "lerp",
    "addcmul",
    "addcdiv",
    "square",
    "hardswish",
    "mish",
    "elu",
    "native_dropout",
    "fused_dropout",
];
const COPIES: &[&str] = &["to", "_to_copy", "contiguous", "clone", "copy"];
const FILLS: &[&str] = &["fill", "zero", "zeros_like", "ones_like", "full_like"];
const NORMS: &[&str] = &[
    "layer_norm",
    "native_layer_norm",
    "batch_norm",
    "native_batch_norm",
    "cudnn_batch_norm",
    "_batch_norm_impl_index",
    "group_norm",
    "native_group_norm",
    "rms_norm",
    "_fused_rms_norm",
];
const SOFTMAX: &[&str] = &["softmax", "_softmax", "log_softmax", "_log_softmax"];
const SOFTMAX_BACKWARD: &[&str] = &["_softmax_backward_data", "_log_softmax_backward_data"];
const CONVS: &[&str] = &[
    "convolution",
    "_convolution",
    "cudnn_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
];

/// Estimates one instance of op `op` with input `dims` and `types` (where known); `hint` is the
/// element size guessed from its kernels. None for ops this model does not cover.
pub fn estimate(
    op: &str,
    dims: &[Vec<i64>],
    types: Option<&[String]>,
    hint: Option<u32>,
) -> Option<Estimate> {
    let base = op.rsplit("::").next().unwrap_or(op);
    let in_place = base.ends_with('_') && !base.starts_with('_');
    let base = base.trim_end_matches('_');
    let mut assumptions = Vec::new();
    let es = |i: usize, assumptions: &mut Vec<&'static str>| -> f64 {
        types
            .and_then(|t| t.get(i))
            .and_then(|t| dtype_bytes(t))
            .or(hint)
            .unwrap_or_else(|| {
                assumptions.push("dtype unknown: 2 bytes per element assumed");
                2
            }) as f64
    };
    let d = |i: usize| dims.get(i).map(|v| v.as_slice()).unwrap_or(&[]);
    let gemm = |m: f64, k: f64, n: f64, batch: f64, extra_in: f64, e: f64| {
        (
            (batch * (m * k + k * n + m * n) + extra_in) * e,
            2.0 * batch * m * k * n,
        )
    };
    let (bytes, flops, e0) = match base {
        "mm" => {
            let (a, b) = (d(0), d(1));
            if a.len() != 2 || b.len() != 2 {
                return None;
            }
            let e = es(0, &mut assumptions);
            let (bytes, flops) = gemm(a[0] as f64, a[1] as f64, b[1] as f64, 1.0, 0.0, e);
            (bytes, flops, e)
        }
        "addmm" => {
            let (c, a, b) = (d(0), d(1), d(2));
            if a.len() != 2 || b.len() != 2 {
                return None;
            }
            let e = es(1, &mut assumptions);
            let (bytes, flops) = gemm(a[0] as f64, a[1] as f64, b[1] as f64, 1.0, numel(c), e);
            (bytes, flops, e)
        }
        "bmm" | "baddbmm" => {
            let off = usize::from(base == "baddbmm");
            let (a, b) = (d(off), d(off + 1));
            if a.len() != 3 || b.len() != 3 {
                return None;
            }
            let e = es(off, &mut assumptions);
            let extra = if off == 1 { numel(d(0)) } else { 0.0 };
            let (bytes, flops) = gemm(a[1] as f64, a[2] as f64, b[2] as f64, a[0] as f64, extra, e);
            (bytes, flops, e)
        }
        "matmul" if d(0).len() >= 2 && d(1).len() >= 3 => {
            // Batched: [..., M, K] x [..., K, N], the batch dimensions broadcast against each
            // other from the right.
            let (a, b) = (d(0), d(1));
            let e = es(0, &mut assumptions);
            let (ba, bb) = (&a[..a.len() - 2], &b[..b.len() - 2]);
            let batch: f64 = (0..ba.len().max(bb.len()))
                .map(|i| {
                    let x = |v: &[i64]| v.len().checked_sub(i + 1).map_or(1, |j| v[j]);
                    x(ba).max(x(bb)).max(0) as f64
                })
                .product();
            let (m, k, n) = (
                a[a.len() - 2] as f64,
                a[a.len() - 1] as f64,
                *b.last()? as f64,
            );
            let bytes = (numel(a) + numel(b) + batch * m * n) * e;
            (bytes, 2.0 * batch * m * k * n, e)
        }
        "scaled_dot_product_attention" => {
            // q [.., Tq, d], k [.., Tk, d], v [.., Tk, dv]: two matrix products (QK^T and PV);
            // a flash-style kernel reads q, k, v (and a mask, if given) and writes the output
            // once, so the Tq x Tk scores never reach memory.
            let (q, k, v) = (d(0), d(1), d(2));
            if q.len() < 2 || k.len() != q.len() || v.len() != q.len() {
                return None;
            }
            let e = es(0, &mut assumptions);
            assumptions.push("attention taken as not causal (the flag is not recorded)");
            let heads = numel(&q[..q.len() - 2]);
            let (tq, dk) = (q[q.len() - 2] as f64, q[q.len() - 1] as f64);
            let (tk, dv) = (k[k.len() - 2] as f64, v[v.len() - 1] as f64);
            let out = heads * tq * dv;
            let mask = numel(d(3)) * f64::from(!d(3).is_empty());
            let bytes = (numel(q) + numel(k) + numel(v) + out + mask) * e;
            (bytes, 2.0 * heads * tq * tk * (dk + dv), e)
        }
        "linear" | "matmul" => {
            let (a, b) = (d(0), d(1));
            if a.len() < 2 || b.len() != 2 {
                return None;
            }
            let e = es(0, &mut assumptions);
            let k = *a.last()? as f64;
            let m = numel(&a[..a.len() - 1]);
            // linear's weight is [N, K]; matmul's right side is [K, N].
            let n = if base == "linear" { b[0] } else { b[1] } as f64;
            let bias = if base == "linear" { numel(d(2)) } else { 0.0 };
            let (bytes, flops) = gemm(m, k, n, 1.0, bias, e);
            (bytes, flops, e)
        }
        b if CONVS.contains(&b) => {
            let (x, w) = (d(0), d(1));
            if x.len() < 3 || w.len() != x.len() {
                return None;
            }
            let e = es(0, &mut assumptions);
            assumptions.push("conv output size taken as input size (stride 1, same padding)");
            let spatial = numel(&x[2..]);
            let out = x[0] as f64 * w[0] as f64 * spatial;
            let flops = 2.0 * out * numel(&w[1..]);
            ((numel(x) + numel(w) + out) * e, flops, e)
        }
        b if ELEMENTWISE.contains(&b) => {
            let mut bytes = 0.0;
            let mut out = 0.0f64;
            let mut e_out = 0.0;
            for (i, dd) in dims.iter().enumerate() {
                if dd.is_empty() {
                    continue;
                }
                let e = es(i, &mut assumptions);
                bytes += numel(dd) * e;
                if numel(dd) > out {
                    out = numel(dd);
                    e_out = e;
                }
            }
            if out == 0.0 {
                return None;
            }
            if !in_place || dims.first().is_some_and(|d0| numel(d0) < out) {
                assumptions.push("output takes the largest input's shape and dtype");
            }
            (bytes + out * e_out, out, e_out)
        }
        b if COPIES.contains(&b) => {
            let src = if b == "copy" { 1 } else { 0 };
            let x = d(src);
            if x.is_empty() && b != "copy" {
                return None;
            }
            let n = numel(x);
            let e_src = es(src, &mut assumptions);
            let e_dst = if b == "copy" {
                es(0, &mut assumptions)
            } else {
                e_src
            };
            (n * (e_src + e_dst), 0.0, e_src)
        }
        b if FILLS.contains(&b) => {
            let x = d(0);
            if x.is_empty() {
                return None;
            }
            let e = es(0, &mut assumptions);
            (numel(x) * e, 0.0, e)
        }
        b if NORMS.contains(&b) => {
            let x = d(0);
            if x.is_empty() {
                return None;
            }
            let e = es(0, &mut assumptions);
            let params: f64 = dims
                .iter()
                .skip(1)
                .map(|p| numel(p))
                .filter(|&n| n > 1.0)
                .sum();
            ((2.0 * numel(x)) * e + params * e, 8.0 * numel(x), e)
        }
        b if SOFTMAX.contains(&b) => {
            let x = d(0);
            if x.is_empty() {
                return None;
            }
            let e = es(0, &mut assumptions);
            (2.0 * numel(x) * e, 5.0 * numel(x), e)
        }
        b if SOFTMAX_BACKWARD.contains(&b) => {
            let x = d(0);
            if x.is_empty() {
                return None;
            }
            let e = es(0, &mut assumptions);
            (3.0 * numel(x) * e, 3.0 * numel(x), e)
        }
        _ => return None,
    };
    assumptions.sort_unstable();
    assumptions.dedup();
    (bytes > 0.0).then_some(Estimate {
        bytes,
        flops,
        elem_bytes: e0 as u32,
        assumptions,
    })
}
