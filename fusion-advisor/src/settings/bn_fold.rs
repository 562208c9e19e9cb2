//! Inference only (no backward op in the trace): a BatchNorm right after a convolution, in eval
//! mode, is an affine map per channel that folds into the convolution's weights and bias. The
//! saving is the BatchNorm ops' recorded time; the folded convolution keeps its time (its bias
//! add is part of the kernel or of the same epilogue).

use std::collections::BTreeSet;

use super::conv_layout::CONVS;
use super::{base, us, Ctx, Finder, Setting};

const BATCH_NORMS: &[&str] = &[
    "batch_norm",
    "_batch_norm_impl_index",
    "native_batch_norm",
    "cudnn_batch_norm",
    "miopen_batch_norm",
    "_native_batch_norm_legit_no_training",
];

/// Fold BatchNorm into the convolution before it, at inference.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    if trace.has_backward {
        return None;
    }
    let per = ctx.per();
    // The work stream of each thread, in order.
    let mut last: Vec<Option<&str>> = vec![None; trace.threads.len().max(1)];
    let (mut n, mut ns) = (0usize, 0i64);
    let mut modules: BTreeSet<String> = BTreeSet::new();
    // The BatchNorm ops and their kernels, by step.
    let mut find = Finder::default();
    for op in &trace.ops {
        if op.records.is_empty() {
            continue;
        }
        let b = base(&op.name);
        let slot = (op.thread as usize).min(last.len() - 1);
        if BATCH_NORMS.contains(&b) && last[slot].is_some_and(|p| CONVS.contains(&p)) {
            n += 1;
            ns += op.gpu_ns;
            find.op_instance(ctx, op);
            if let Some(m) = &op.module {
                if modules.len() < 3 {
                    modules.insert(m.clone());
                }
            }
        }
        last[slot] = Some(b);
    }
    if n == 0 || ns <= 0 {
        return None;
    }
    let current = ctx.per_step(ns as f64);
    let mut s = ctx.setting(
        "bn-fold",
        "inference BatchNorm after a convolution -> folded into the convolution",
        current,
        0.0,
    );
    s.evidence = vec![format!(
        "{:.1} BatchNorm ops a {per} right after a convolution, no backward op in the trace: \
         {} us a {per}",
        ctx.per_step(n as f64),
        us(current)
    )];
    if !modules.is_empty() {
        s.evidence.push(format!(
            "in {}",
            modules.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    s.estimate = "the BatchNorm ops' recorded time, all of it: folded, the convolution's weights \
                  and bias absorb the scale and shift"
        .into();
    s.change = "model = torch.fx.experimental.optimization.fuse(model.eval())  # or \
                torch.ao.quantization.fuse_modules(model, [[\"conv\", \"bn\"], ...])"
        .into();
    find.fill(ctx, &mut s);
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::Class;

    fn net() -> Vec<Op<'static>> {
        vec![
            Op(
                "aten::conv2d",
                "[[32, 64, 56, 56], [64, 64, 3, 3]]",
                "",
                vec![("conv_kernel", Class::Conv, 80_000)],
            ),
            Op(
                "aten::batch_norm",
                "[[32, 64, 56, 56], [64], [64], [64], [64]]",
                "",
                vec![("bn_fw_inf_1C11_kernel_NCHW", Class::Normalization, 12_000)],
            ),
            Op(
                "aten::relu_",
                "[[32, 64, 56, 56]]",
                "",
                vec![("elementwise_kernel", Class::Elementwise, 8_000)],
            ),
        ]
    }

    #[test]
    fn an_inference_batch_norm_after_a_convolution_is_folded() {
        let t = trace(&net(), 2, false);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 100_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 12_000.0).abs() < 1e-6, "{s:?}");
        assert!(s.change.contains("optimization.fuse"));
    }

    #[test]
    fn the_step_with_the_slowest_batch_norms_is_where_to_look() {
        // Three ops 10 us apart a step: step 1 runs from 30 to 60 us; its BatchNorm takes
        // 20 us against step 0's 12 us. The run's first record is at -10 us.
        let mut t = trace(&net(), 2, false);
        t.context.windows = vec![(0, 30_000), (30_000, 60_000)];
        t.context.origin_ns = -10_000;
        t.ops[4].gpu_ns = 20_000;
        t.ops[4].records[0].dur_ns = 20_000;
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 100_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        let w = s.worst_step.as_ref().unwrap();
        assert_eq!((w.step, w.start_ns, w.end_ns), (1, 30_000, 60_000));
        assert!((w.start_ms - 0.04).abs() < 1e-12 && (w.end_ms - 0.07).abs() < 1e-12);
        assert!((w.symptom_ns - 20_000.0).abs() < 1e-9, "{w:?}");
        assert_eq!(s.kernels, ["bn_fw_inf_1C11_kernel_NCHW"]);
        assert_eq!(s.ops, ["aten::batch_norm"]);
        assert_eq!(
            s.where_to_look(3, 60).unwrap(),
            "step 1, 0.040-0.070 ms: kernels bn_fw_inf_1C11_kernel_NCHW; ops aten::batch_norm"
        );
    }

    #[test]
    fn training_or_a_batch_norm_not_after_a_convolution_says_nothing() {
        let t = trace(&net(), 2, true);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 100_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
        let mut ops = net();
        ops.swap(0, 2);
        let t = trace(&ops, 2, false);
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 100_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
