//! LayerNorm, RMSNorm, GELU and softmax written out by hand as chains of elementwise ops and
//! reductions (`x.mean()`, `x - mean`, `.pow(2)`, `torch.rsqrt`, ...; GPT-2's
//! `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`; `exp / sum`), each op a kernel
//! that reads and writes the whole tensor. PyTorch's own functions do each in one pass: read the
//! input once, write the output once.
//!
//! The estimate: the chain's bytes (each op's inputs and output, from the recorded shapes)
//! against one pass's (input and output of the chain's largest tensor); the chain's time scales
//! by that ratio, so it keeps the bandwidth the chain reached.

use std::collections::BTreeMap;

use fuseprof_analyzer::{headroom, OpInstance};

use super::{us, Ctx, Finder, Setting};

/// One hand-written function: the ops its chain is made of, the ops it may start with, what it
/// must contain, and the call that replaces it.
struct Family {
    name: &'static str,
    allowed: &'static [&'static str],
    starts: &'static [&'static str],
    /// Every group must have an op in the chain.
    requires: &'static [&'static [&'static str]],
    /// None of these may be in the chain.
    excludes: &'static [&'static str],
    call: &'static str,
}

const NORM_OPS: &[&str] = &[
    "mean",
    "var_mean",
    "var",
    "std",
    "sub",
    "pow",
    "square",
    "add",
    "sqrt",
    "rsqrt",
    "div",
    "mul",
    "reciprocal",
    "sub_",
    "add_",
    "mul_",
    "div_",
];

const FAMILIES: &[Family] = &[
    Family {
        name: "LayerNorm",
        allowed: NORM_OPS,
        starts: &["mean", "var_mean"],
        requires: &[
            &["sub", "sub_", "var_mean"],
            &["pow", "square", "var", "var_mean", "std"],
            &["sqrt", "rsqrt", "std"],
        ],
        excludes: &[],
        call: "F.layer_norm(x, x.shape[-1:], weight, bias, eps)",
    },
    Family {
        name: "RMSNorm",
        allowed: NORM_OPS,
        starts: &["pow", "square", "mul"],
        requires: &[&["pow", "square", "mul"], &["mean"], &["rsqrt", "sqrt"]],
        excludes: &["sub", "sub_", "var_mean", "var", "std"],
        call: "F.rms_norm(x, x.shape[-1:], weight, eps)",
    },
    Family {
        name: "GELU (tanh)",
        allowed: &["mul", "pow", "add", "tanh", "mul_", "add_"],
        starts: &["mul", "pow"],
        requires: &[&["tanh"], &["pow", "mul"], &["add", "add_"]],
        excludes: &[],
        call: "F.gelu(x, approximate=\"tanh\")",
    },
    Family {
        name: "GELU (erf)",
        allowed: &["mul", "div", "erf", "add", "mul_", "add_"],
        starts: &["mul", "div"],
        requires: &[&["erf"], &["add", "add_"]],
        excludes: &[],
        call: "F.gelu(x)",
    },
    Family {
        name: "softmax",
        allowed: &["amax", "max", "sub", "exp", "sum", "div", "exp_", "div_"],
        starts: &["amax", "max", "exp"],
        requires: &[&["exp", "exp_"], &["sum"], &["div", "div_"]],
        excludes: &[],
        call: "F.softmax(x, dim=-1)",
    },
];

fn numel(d: &[i64]) -> f64 {
    d.iter().map(|&x| x.max(0) as f64).product()
}

/// The chain of `f` starting at `ops[i]`: how many ops, or None.
fn chain_at(f: &Family, ops: &[&OpInstance], i: usize) -> Option<usize> {
    if !f.starts.contains(&ops[i].base_name()) {
        return None;
    }
    let mut j = i;
    while j < ops.len() && f.allowed.contains(&ops[j].base_name()) && j - i < 16 {
        j += 1;
    }
    let names: Vec<&str> = ops[i..j].iter().map(|o| o.base_name()).collect();
    let ok = j - i >= 3
        && f.requires
            .iter()
            .all(|g| names.iter().any(|n| g.contains(n)))
        && !names.iter().any(|n| f.excludes.contains(n));
    ok.then_some(j - i)
}

/// Bytes one op reads and writes, from its recorded shapes (None without them).
fn op_bytes(op: &OpInstance, kernel_names: &[String]) -> Option<(f64, f64)> {
    let dims = op.dims.as_ref()?;
    let e = op.elem_bytes(kernel_names).unwrap_or(4) as f64;
    let biggest = dims.iter().map(|d| numel(d)).fold(0.0, f64::max);
    let bytes = headroom::estimate(&op.name, dims, op.dtypes.as_deref(), Some(e as u32))
        .map(|est| est.bytes)
        // Reductions (mean, sum, amax): the inputs read, a small output.
        .unwrap_or_else(|| dims.iter().map(|d| numel(d)).sum::<f64>() * e);
    Some((bytes, biggest * e))
}

/// PyTorch's one-pass functions for hand-written norm, GELU and softmax chains.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let per = ctx.per();
    // The work stream of each thread: ops that launched GPU work.
    let mut streams: BTreeMap<u32, Vec<&OpInstance>> = BTreeMap::new();
    for op in &trace.ops {
        if !op.records.is_empty() {
            streams.entry(op.thread).or_default().push(op);
        }
    }
    // family -> (chains, ns, expected ns, first chain's ops)
    let mut found: BTreeMap<usize, (usize, f64, f64, Vec<String>)> = BTreeMap::new();
    // The chains' ops and their elementwise kernels, by step.
    let mut find = Finder::default();
    for ops in streams.values() {
        let mut i = 0;
        while i < ops.len() {
            let hit = FAMILIES
                .iter()
                .enumerate()
                .find_map(|(k, f)| chain_at(f, ops, i).map(|n| (k, n)));
            let Some((k, n)) = hit else {
                i += 1;
                continue;
            };
            let chain = &ops[i..i + n];
            let sizes: Option<Vec<(f64, f64)>> = chain
                .iter()
                .map(|o| op_bytes(o, &trace.kernel_names))
                .collect();
            if let Some(sizes) = sizes {
                let bytes: f64 = sizes.iter().map(|s| s.0).sum();
                let widest = sizes.iter().map(|s| s.1).fold(0.0, f64::max);
                let one_pass = 2.0 * widest;
                let ns: f64 = chain.iter().map(|o| o.gpu_ns as f64).sum();
                if bytes > one_pass && ns > 0.0 {
                    let e = found.entry(k).or_default();
                    e.0 += 1;
                    e.1 += ns;
                    e.2 += ns * one_pass / bytes;
                    for o in chain {
                        find.op_instance(ctx, o);
                    }
                    if e.3.is_empty() {
                        e.3 = chain.iter().map(|o| o.base_name().to_string()).collect();
                    }
                }
            }
            i += n;
        }
    }
    if found.is_empty() {
        return None;
    }
    let current = ctx.per_step(found.values().map(|f| f.1).sum());
    let expected = ctx.per_step(found.values().map(|f| f.2).sum());
    let names: Vec<&str> = found.keys().map(|&k| FAMILIES[k].name).collect();
    let mut s = ctx.setting(
        "handwritten-norms",
        &format!(
            "{} written out as elementwise chains -> PyTorch's one-pass functions",
            names.join(", ")
        ),
        current,
        expected,
    );
    s.evidence = found
        .iter()
        .map(|(&k, (n, ns, exp, ops))| {
            format!(
                "{} by hand ({}): {:.1} a {per}, {} us a {per}, one pass {} us",
                FAMILIES[k].name,
                ops.join(" -> "),
                ctx.per_step(*n as f64),
                us(ctx.per_step(*ns)),
                us(ctx.per_step(*exp))
            )
        })
        .collect();
    s.estimate = "each chain's time scaled by the bytes of one pass (read the input, write the \
                  output) over the bytes its ops move (every op's inputs and output, from the \
                  recorded shapes): the chain's bandwidth kept"
        .into();
    s.change = found
        .keys()
        .map(|&k| FAMILIES[k].call)
        .collect::<Vec<_>>()
        .join("; ");
    find.fill(ctx, &mut s);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::Class;

    const X: &str = "[[64, 128, 768], []]";
    const F: &str = "[\"float\"]";

    fn k(ns: i64) -> Vec<(&'static str, Class, i64)> {
        vec![("elementwise_kernel", Class::Elementwise, ns)]
    }

    /// GPT-2's NewGELUActivation as the profiler records it.
    fn gelu_tanh() -> Vec<Op<'static>> {
        vec![
            Op("aten::mul", X, F, k(10_000)),
            Op("aten::pow", X, F, k(10_000)),
            Op("aten::mul", X, F, k(10_000)),
            Op(
                "aten::add",
                "[[64, 128, 768], [64, 128, 768], []]",
                F,
                k(15_000),
            ),
            Op("aten::mul", X, F, k(10_000)),
            Op("aten::tanh", "[[64, 128, 768]]", F, k(10_000)),
            Op("aten::add", X, F, k(10_000)),
            Op(
                "aten::mul",
                "[[64, 128, 768], [64, 128, 768]]",
                F,
                k(15_000),
            ),
        ]
    }

    #[test]
    fn a_tanh_gelu_by_hand_is_told_to_use_f_gelu_with_the_bytes_saved() {
        let t = trace(&gelu_tanh(), 1, false);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 90_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!(
            s.change.contains("F.gelu(x, approximate=\"tanh\")"),
            "{}",
            s.change
        );
        assert!((s.current_ns_per_step - 90_000.0).abs() < 1e-6);
        // Unary ops move 2 tensors, binary ones 3 (scalars count nothing): 18 tensors in all,
        // one pass 2.
        let ratio = 2.0 / 18.0;
        assert!(
            (s.expected_ns_per_step - 90_000.0 * ratio).abs() < 1.0,
            "{s:?}"
        );
    }

    #[test]
    fn a_layer_norm_by_hand_is_found_and_f_layer_norm_is_not() {
        let stat = "[[64, 128, 768], [], []]";
        let hand = vec![
            Op("aten::mean", stat, F, k(10_000)),
            Op(
                "aten::sub",
                "[[64, 128, 768], [64, 128, 1], []]",
                F,
                k(10_000),
            ),
            Op("aten::pow", X, F, k(10_000)),
            Op("aten::mean", stat, F, k(10_000)),
            Op("aten::add", "[[64, 128, 1], []]", F, k(2_000)),
            Op("aten::sqrt", "[[64, 128, 1]]", F, k(2_000)),
            Op("aten::div", "[[64, 128, 768], [64, 128, 1]]", F, k(10_000)),
        ];
        let t = trace(&hand, 1, false);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 54_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!(s.title.contains("LayerNorm"), "{}", s.title);
        assert!(s.change.contains("F.layer_norm"));
        let fused = vec![Op(
            "aten::layer_norm",
            "[[64, 128, 768], [], [768], [768], [], []]",
            F,
            k(12_000),
        )];
        let t = trace(&fused, 1, false);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 12_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }

    #[test]
    fn a_lone_residual_add_and_mul_are_no_chain() {
        let ops = vec![
            Op("aten::mul", X, F, k(10_000)),
            Op(
                "aten::add",
                "[[64, 128, 768], [64, 128, 768], []]",
                F,
                k(15_000),
            ),
            Op("aten::mul", X, F, k(10_000)),
        ];
        let t = trace(&ops, 1, false);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 35_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
