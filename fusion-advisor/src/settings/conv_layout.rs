//! Convolutions in NCHW whose tensor-core kernels work in NHWC: cuDNN transposes the input and
//! the weights to NHWC on every call (`nchwToNhwcKernel`) and the output back
//! (`nhwcToNchwKernel`). With the model and its input in channels-last those transposes go; the
//! saving is their recorded time. What else channels-last or `cudnn.benchmark` would change in
//! the convolutions' own kernels (another algorithm, another tile) cannot be read from the
//! trace, so it is named and not counted. Neither can whether `cudnn.benchmark` is on: the
//! trace does not show cuDNN's search.

use std::collections::BTreeSet;

use super::{base, us, Ctx, Finder, Setting};

/// Convolution ops (the outermost op a model's `Conv2d` records).
pub(super) const CONVS: &[&str] = &[
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "_convolution",
    "cudnn_convolution",
    "conv_transpose2d",
    "cudnn_convolution_transpose",
];

/// cuDNN's layout transposes.
fn is_transpose(kernel: &str) -> bool {
    kernel.contains("nchwToNhwc") || kernel.contains("nhwcToNchw")
}

/// channels-last (and cudnn.benchmark) for NCHW convolutions transposed on every call.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let per = ctx.per();
    let cc = trace.context.compute_capability.first().copied().flatten();
    if cc.is_some_and(|(major, _)| major < 7) {
        return None;
    }
    let (mut convs, mut conv_ns, mut transposes, mut transpose_ns) = (0usize, 0i64, 0usize, 0i64);
    let mut shapes: BTreeSet<String> = BTreeSet::new();
    let mut nchw_kernels: BTreeSet<String> = BTreeSet::new();
    // The transpose kernels and the convolutions that launch them, by step.
    let mut find = Finder::default();
    for op in &trace.ops {
        if !CONVS.contains(&base(&op.name)) {
            continue;
        }
        convs += 1;
        if let Some(d) = &op.dims {
            shapes.insert(format!("{d:?}"));
        }
        for r in &op.records {
            let name = &trace.kernel_names[r.name as usize];
            if is_transpose(name) {
                transposes += 1;
                transpose_ns += r.dur_ns;
                find.at_step(op.step, r.dur_ns as f64);
                find.kernel(name, r.dur_ns);
                find.op(&op.name, r.dur_ns);
            } else {
                conv_ns += r.dur_ns;
                if name.to_ascii_lowercase().contains("nchw") && nchw_kernels.len() < 3 {
                    nchw_kernels.insert(name.chars().take(80).collect());
                }
            }
        }
    }
    if transposes == 0 {
        return None;
    }
    let current = ctx.per_step(transpose_ns as f64);
    let mut s = ctx.setting(
        "conv-channels-last",
        "NCHW convolutions transposed to NHWC on every call -> channels-last",
        current,
        0.0,
    );
    s.evidence = vec![format!(
        "{:.1} convolutions a {per} ({} us of their other kernels) with {:.1} layout \
         transposes (nchwToNhwc / nhwcToNchw) a {per}: {} us",
        ctx.per_step(convs as f64),
        us(ctx.per_step(conv_ns as f64)),
        ctx.per_step(transposes as f64),
        us(ctx.per_step(transpose_ns as f64))
    )];
    for k in &nchw_kernels {
        s.evidence.push(format!("NCHW kernel: {k}"));
    }
    if !shapes.is_empty() {
        s.evidence.push(format!(
            "{} distinct convolution input shape(s) over {convs} calls: {}",
            shapes.len(),
            if shapes.len() * trace.steps.max(2) <= convs {
                "fixed shapes, which cudnn.benchmark searches once each"
            } else {
                "shapes that vary, for which cudnn.benchmark would search again and again"
            }
        ));
    }
    s.estimate = "the transposes' recorded time, all of it (with channels-last tensors cuDNN \
                  reads and writes NHWC directly); not estimated, as the trace cannot show it: \
                  what channels-last or torch.backends.cudnn.benchmark = True would change in \
                  the convolution kernels themselves, and whether benchmark is already on"
        .into();
    s.change = "model = model.to(memory_format=torch.channels_last); x = \
                x.to(memory_format=torch.channels_last); torch.backends.cudnn.benchmark = True"
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

    fn conv(kernels: Vec<(&'static str, Class, i64)>) -> Op<'static> {
        Op(
            "aten::conv2d",
            "[[64, 64, 56, 56], [64, 64, 3, 3], [64]]",
            "[\"c10::Half\", \"c10::Half\", \"c10::Half\"]",
            kernels,
        )
    }

    #[test]
    fn the_transposes_around_an_nchw_convolution_are_the_saving() {
        let t = trace(
            &[conv(vec![
                (
                    "void cudnn::ops::nchwToNhwcKernel<__half>",
                    Class::CopyLayout,
                    20_000,
                ),
                (
                    "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nchw",
                    Class::Conv,
                    100_000,
                ),
                (
                    "void cudnn::ops::nhwcToNchwKernel<__half>",
                    Class::CopyLayout,
                    15_000,
                ),
            ])],
            4,
            false,
        );
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 135_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        let s = rule(&ctx).unwrap();
        assert!((s.saving_ns_per_step - 35_000.0).abs() < 1e-6, "{s:?}");
        assert!(s.change.contains("channels_last") && s.change.contains("cudnn.benchmark"));
        assert!(s.estimate.contains("not estimated"), "{}", s.estimate);
    }

    #[test]
    fn a_channels_last_convolution_says_nothing() {
        let t = trace(
            &[conv(vec![(
                "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nhwc",
                Class::Conv,
                100_000,
            )])],
            4,
            false,
        );
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 100_000.0,
            step_wall_ns: 0.0,
            ceiling: None,
        };
        assert!(rule(&ctx).is_none());
    }
}
