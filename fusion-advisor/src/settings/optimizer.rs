//! The optimizer: Adam and AdamW with `foreach` (PyTorch's default on CUDA) run each step as a
//! series of `_foreach_*` kernels, each streaming whole lists of tensors (every parameter, its
//! gradient, its two moments) through memory; `fused=True` does the step in one pass, and a
//! GradScaler hands the fused optimizer its unscaling (no `_amp_foreach_non_finite_check_and_
//! unscale_` pass). The time of one pass over a list comes from the trace itself: the step's
//! cheapest op that reads one list and writes it back (`_foreach_mul_` by a scalar,
//! `_foreach_sqrt`) moves two lists.

use std::collections::BTreeMap;

use super::{base, Ctx, Finder, Setting};

/// The foreach ops that only Adam-family optimizers issue together.
const ADAM_SIGNATURE: [&str; 2] = ["_foreach_addcdiv_", "_foreach_sqrt"];
/// Ops of a foreach Adam step that read one tensor list and write one: two list passes.
const TWO_PASS: [&str; 2] = ["_foreach_mul_", "_foreach_sqrt"];
/// A fused Adam(W) step reads param, grad, exp_avg and exp_avg_sq and writes param, exp_avg and
/// exp_avg_sq.
const FUSED_PASSES: f64 = 7.0;
const AMP_UNSCALE: &str = "_amp_foreach_non_finite_check_and_unscale_";

/// `fused=True` for an Adam or AdamW stepping with `foreach`, where the trace has its ops.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let mut by_name: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    let mut fused = false;
    // One pass over a list: the cheapest call of an op that moves two lists, halved.
    let mut pass_ns = f64::INFINITY;
    // The optimizer's ops and their many small kernels, by step.
    let mut find = Finder::default();
    for op in &trace.ops {
        let b = base(&op.name);
        if b.starts_with("_fused_adam") {
            fused = true;
        }
        if b.starts_with("_foreach_") || b == AMP_UNSCALE {
            let e = by_name.entry(b).or_default();
            e.0 += 1;
            e.1 += op.gpu_ns;
            find.op_instance(ctx, op);
        }
        if TWO_PASS.contains(&b) && op.gpu_ns > 0 {
            pass_ns = pass_ns.min(op.gpu_ns as f64 / 2.0);
        }
    }
    if fused || !pass_ns.is_finite() || !ADAM_SIGNATURE.iter().all(|s| by_name.contains_key(s)) {
        return None;
    }
    let calls_per_step = |n: usize| n as f64 / trace.steps.max(1) as f64;
    let current: f64 = by_name.values().map(|&(_, ns)| trace.per_step(ns)).sum();
    let optimizer_steps = calls_per_step(by_name["_foreach_addcdiv_"].0);
    let expected = FUSED_PASSES * pass_ns * optimizer_steps;
    if expected >= current {
        return None;
    }
    let mut evidence: Vec<String> = by_name
        .iter()
        .filter(|(_, &(_, ns))| ns > 0)
        .map(|(name, &(n, ns))| {
            format!(
                "aten::{name}: {:.1} a step, {:.1} us",
                calls_per_step(n),
                trace.per_step(ns) / 1e3
            )
        })
        .collect();
    evidence.push(
        "no aten::_fused_adam(w)_: the optimizer steps with foreach, one kernel per op over \
         every parameter"
            .into(),
    );
    let amp = by_name.contains_key(AMP_UNSCALE);
    let mut s = ctx.setting(
        "optimizer-fused",
        "Adam/AdamW with foreach -> fused=True (one pass over the parameters a step)",
        current,
        expected,
    );
    s.estimate = format!(
        "{FUSED_PASSES} passes over the parameter lists (read param, grad, exp_avg, \
         exp_avg_sq; write param, exp_avg, exp_avg_sq) at {:.1} us a pass, the cheapest \
         op of the step that reads one list and writes one, halved{}",
        pass_ns / 1e3,
        if amp {
            "; the GradScaler's unscaling pass goes too (a fused optimizer unscales itself)"
        } else {
            ""
        }
    );
    s.evidence = evidence;
    s.change = "torch.optim.AdamW(model.parameters(), lr=..., fused=True)  # or Adam(..., \
                fused=True); needs the parameters on CUDA in fp32/fp16/bf16"
        .into();
    find.fill(ctx, &mut s);
    Some(s)
}
