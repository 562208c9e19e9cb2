//! GEMMs and convolutions in FP32 on a GPU with tensor cores. Their kernels say how they ran:
//! SIMT FP32 (`sgemm`, `scudnn`, `fft2d`, `gemmk1_kernel<float...>`) or TF32 on tensor cores
//! (`tf32`, `s1688gemm`, `s16816gemm`); 16-bit kernels (`hsh`, `f16`, `bf16`, ...) are not FP32
//! whatever the op's recorded input dtypes say (under autocast the op is recorded with its FP32
//! inputs and casts them itself).
//!
//! The estimate keeps each op's efficiency against its ceiling: its floor now (FLOPs over the
//! FP32 or TF32 peak, or its bytes over the bandwidth, whichever is longer) and its floor in
//! bf16 (FLOPs over the 16-bit peak, half the bytes) scale its measured time. The FLOPs and
//! bytes come from the recorded shapes (`headroom::estimate`); ops without shapes are left out
//! of the saving and counted in the evidence.

use fuseprof_analyzer::headroom;

use super::{base, us, Ctx, Finder, Setting};

/// The ops whose kernels are matrix products or convolutions.
const GEMM_OPS: &[&str] = &[
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "matmul",
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "convolution",
    "_convolution",
    "cudnn_convolution",
];

/// How one GEMM or convolution kernel computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Math {
    /// 16-bit (or narrower) inputs on tensor cores.
    Half,
    /// FP32 inputs on tensor cores as TF32.
    Tf32,
    /// FP32 on the CUDA cores.
    Fp32,
}

/// What a kernel name says of its math; None when it says nothing.
pub(super) fn math_of(kernel: &str) -> Option<Math> {
    let k = kernel.to_ascii_lowercase();
    let half = [
        "f16", "fp16", "bf16", "bfloat16", "half", "h1688", "h16816", "h884", "hgemm", "_hsh",
        "_hhs", "_hss", "_bhh", "_bss", "_hsb", "e4m3", "e5m2", "int8", "i8816",
    ];
    if half.iter().any(|m| k.contains(m)) {
        return Some(Math::Half);
    }
    if ["tf32", "s1688", "s16816", "_tst"]
        .iter()
        .any(|m| k.contains(m))
    {
        return Some(Math::Tf32);
    }
    if [
        "sgemm", "scudnn", "fft2d", "gcgemm", "<float", "float,", "_sss", "f32",
    ]
    .iter()
    .any(|m| k.contains(m))
    {
        return Some(Math::Fp32);
    }
    None
}

/// autocast to bf16 (or TF32) for FP32 GEMMs and convolutions, on a GPU with tensor cores.
pub(super) fn rule(ctx: &Ctx) -> Option<Setting> {
    let trace = ctx.trace;
    let ceiling = ctx.ceiling?;
    let fp32_peak = ceiling.flops_32bit_per_s?;
    let bw = ceiling.mem_bytes_per_s;
    let cc = trace.context.compute_capability.first().copied().flatten();
    // Tensor cores came with compute capability 7.0; without it, a 16-bit peak several times the
    // FP32 one shows them.
    let tensor_cores = match cc {
        Some((major, _)) => major >= 7,
        None => ceiling.flops_16bit_per_s >= 4.0 * fp32_peak,
    };
    if !tensor_cores {
        return None;
    }
    // bf16 needs compute capability 8.0; Volta and Turing autocast to fp16.
    let bf16 = cc.is_none_or(|(major, _)| major >= 8);
    let tf32_ok = cc.is_none_or(|(major, _)| major >= 8);
    let half_peak = ceiling.flops_16bit_per_s;
    // NVIDIA's datasheets give dense TF32 at half the dense 16-bit rate (A100, H100, H200).
    let tf32_peak = half_peak / 2.0;

    let mut now_ns = 0.0;
    let mut half_ns = 0.0;
    let mut simt_ns = 0.0;
    let mut simt_tf32_ns = 0.0;
    let mut ops = 0usize;
    let mut no_shapes = 0usize;
    let mut no_shapes_ns = 0i64;
    let mut kernels: Vec<(String, i64)> = Vec::new();
    let mut by_op: Vec<(String, usize, f64)> = Vec::new();
    // The estimated ops and their FP32/TF32 kernels, by step.
    let mut find = Finder::default();
    for op in &trace.ops {
        let b = base(&op.name);
        if !GEMM_OPS.contains(&b) {
            continue;
        }
        // The op's GEMM and convolution kernels in FP32 or TF32.
        let mut simt = 0i64;
        let mut tf32 = 0i64;
        for r in &op.records {
            let name = &trace.kernel_names[r.name as usize];
            let math = math_of(name).or_else(|| {
                // A kernel name that says nothing: the op's recorded input dtype decides.
                let float = op
                    .dtypes
                    .as_ref()
                    .and_then(|t| t.first())
                    .is_some_and(|t| t == "float");
                (float && matches!(r.class, fuseprof_analyzer::Class::Gemm)).then_some(Math::Fp32)
            });
            match math {
                Some(Math::Fp32) => simt += r.dur_ns,
                Some(Math::Tf32) => tf32 += r.dur_ns,
                _ => continue,
            }
            match kernels.iter_mut().find(|(k, _)| k == name) {
                Some(k) => k.1 += r.dur_ns,
                None => kernels.push((name.clone(), r.dur_ns)),
            }
        }
        if simt + tf32 == 0 {
            continue;
        }
        let est = op
            .dims
            .as_ref()
            .and_then(|d| headroom::estimate(&op.name, d, op.dtypes.as_deref(), Some(4)));
        let Some(est) = est.filter(|e| e.flops > 0.0) else {
            no_shapes += 1;
            no_shapes_ns += simt + tf32;
            continue;
        };
        ops += 1;
        let floor = |flops_per_s: f64, bytes: f64| (est.flops / flops_per_s).max(bytes / bw);
        let floor_half = floor(half_peak, est.bytes / 2.0);
        let floor_tf32 = floor(tf32_peak, est.bytes);
        let floor_fp32 = floor(fp32_peak, est.bytes);
        // Each part keeps its efficiency against its own ceiling.
        find.at_step(op.step, (simt + tf32) as f64);
        find.op(&op.name, simt + tf32);
        let (simt, tf32) = (simt as f64, tf32 as f64);
        now_ns += simt + tf32;
        half_ns += simt * floor_half / floor_fp32 + tf32 * floor_half / floor_tf32;
        simt_ns += simt;
        simt_tf32_ns += simt * floor_tf32 / floor_fp32;
        match by_op.iter_mut().find(|(n, _, _)| *n == op.name) {
            Some(o) => {
                o.1 += 1;
                o.2 += simt + tf32;
            }
            None => by_op.push((op.name.clone(), 1, simt + tf32)),
        }
    }
    if ops == 0 {
        return None;
    }
    let (current, expected) = (ctx.per_step(now_ns), ctx.per_step(half_ns));
    let per = ctx.per();
    let dtype = if bf16 { "bfloat16" } else { "float16" };
    let mut s = ctx.setting(
        "precision-bf16",
        &format!(
            "FP32 GEMMs and convolutions on tensor cores -> autocast to {}",
            if bf16 { "bf16" } else { "fp16" }
        ),
        current,
        expected,
    );
    kernels.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (k, ns) in &kernels {
        find.kernel(k, *ns);
    }
    find.fill(ctx, &mut s);
    by_op.sort_by(|a, b| b.2.total_cmp(&a.2));
    s.evidence = by_op
        .iter()
        .map(|(name, n, ns)| {
            format!(
                "{name}: {:.1} a {per} in FP32/TF32, {} us of GEMM/conv kernels",
                ctx.per_step(*n as f64),
                us(ctx.per_step(*ns))
            )
        })
        .collect();
    for (k, ns) in kernels.iter().take(4) {
        let short: String = k.chars().take(80).collect();
        s.evidence.push(format!(
            "kernel {short} ({}): {} us a {per}",
            match math_of(k) {
                Some(Math::Tf32) => "TF32",
                _ => "FP32",
            },
            us(ctx.per_step(*ns as f64))
        ));
    }
    if no_shapes > 0 {
        s.evidence.push(format!(
            "{no_shapes} FP32 op(s) without recorded shapes ({} us a {per}) are not in the \
             estimate",
            us(ctx.per_step(no_shapes_ns as f64))
        ));
    }
    let tf32_saving = ctx.per_step(simt_ns - simt_tf32_ns);
    s.estimate = format!(
        "each op's FLOPs and bytes from its recorded shapes; its time scaled by its floor in \
         {} (FLOPs at {:.0} TFLOP/s, half the bytes at {:.2} TB/s) over its floor now (FP32 at \
         {:.1} TFLOP/s or TF32 at {:.0} TFLOP/s, half the 16-bit peak): the same efficiency \
         against the ceiling ({}); not counted: the casts autocast adds (one pass over each \
         weight a call) and the elementwise ops that also run in 16 bits{}",
        if bf16 { "bf16" } else { "fp16" },
        half_peak / 1e12,
        bw / 1e12,
        fp32_peak / 1e12,
        tf32_peak / 1e12,
        ceiling.source,
        if tf32_ok && simt_ns > 0.0 {
            format!(
                "; TF32 alone (FP32 numerics kept for everything but the products' inputs) \
                 would save {} us a {per}",
                us(tf32_saving)
            )
        } else {
            String::new()
        }
    );
    s.change = if tf32_ok && simt_ns > 0.0 {
        format!(
            "with torch.autocast(\"cuda\", dtype=torch.{dtype}):  # around forward and loss; \
             or, keeping FP32: torch.backends.cuda.matmul.allow_tf32 = True; \
             torch.backends.cudnn.allow_tf32 = True"
        )
    } else {
        format!("with torch.autocast(\"cuda\", dtype=torch.{dtype}):  # around forward and loss")
    };
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{h100, trace, Op};
    use super::super::Ctx;
    use super::*;
    use fuseprof_analyzer::Class;

    #[test]
    fn kernel_names_tell_the_math() {
        assert_eq!(math_of("ampere_sgemm_32x32_sliced1x4_tn"), Some(Math::Fp32));
        assert_eq!(
            math_of("cutlass_80_tensorop_s1688gemm_128x128_32x5_tn_align4"),
            Some(Math::Tf32)
        );
        assert_eq!(
            math_of("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw"),
            Some(Math::Tf32)
        );
        assert_eq!(
            math_of("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNN"),
            Some(Math::Half)
        );
        assert_eq!(
            math_of("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn"),
            Some(Math::Half)
        );
        assert_eq!(math_of("void at::native::elementwise_kernel<128, 4>"), None);
    }

    fn linear(kernel: &'static str, types: &'static str) -> Op<'static> {
        Op(
            "aten::linear",
            "[[8192, 768], [3072, 768], [3072]]",
            types,
            vec![(kernel, Class::Gemm, 400_000)],
        )
    }

    #[test]
    fn an_sgemm_linear_is_told_to_autocast_with_the_saving_from_its_flops() {
        let t = trace(
            &[linear("ampere_sgemm_128x64_nn", "[\"float\", \"float\"]")],
            2,
            false,
        );
        let c = h100();
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 400_000.0,
            step_wall_ns: 0.0,
            ceiling: Some(&c),
        };
        let s = rule(&ctx).expect("advice");
        // 2*8192*768*3072 FLOPs: compute-bound in both, so the time scales by the peaks.
        let flops = 2.0 * 8192.0 * 768.0 * 3072.0;
        let ratio = (flops / 800e12) / (flops / 67e12);
        assert!(
            (s.expected_ns_per_step - 400_000.0 * ratio).abs() < 1.0,
            "{s:?}"
        );
        assert!((s.current_ns_per_step - 400_000.0).abs() < 1e-6);
        assert!(s.change.contains("torch.autocast") && s.change.contains("allow_tf32"));
        assert!(s.estimate.contains("TF32 alone"), "{}", s.estimate);
        // No step windows: the names to search for, no worst step.
        assert_eq!(s.kernels, ["ampere_sgemm_128x64_nn"]);
        assert_eq!(s.ops, ["aten::linear"]);
        assert!(s.worst_step.is_none());
        assert_eq!(
            s.where_to_look(3, 60).unwrap(),
            "kernels ampere_sgemm_128x64_nn; ops aten::linear"
        );
    }

    #[test]
    fn the_step_with_the_slowest_fp32_gemms_is_where_to_look() {
        // Two steps, one linear each (at 0 and 10 us); step 1's SGEMM takes 600 us.
        let mut t = trace(
            &[linear("ampere_sgemm_128x64_nn", "[\"float\", \"float\"]")],
            2,
            false,
        );
        t.context.windows = vec![(0, 10_000), (10_000, 20_000)];
        t.ops[1].records[0].dur_ns = 600_000;
        let c = h100();
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 500_000.0,
            step_wall_ns: 0.0,
            ceiling: Some(&c),
        };
        let s = rule(&ctx).unwrap();
        let w = s.worst_step.unwrap();
        assert_eq!((w.step, w.start_ns, w.end_ns), (1, 10_000, 20_000));
        assert!((w.symptom_ns - 600_000.0).abs() < 1e-9);
    }

    #[test]
    fn a_16_bit_kernel_under_autocast_is_not_fp32_whatever_the_op_dtypes_say() {
        let t = trace(
            &[linear("nvjet_hsh_256x128", "[\"float\", \"float\"]")],
            2,
            false,
        );
        let c = h100();
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 400_000.0,
            step_wall_ns: 0.0,
            ceiling: Some(&c),
        };
        assert!(rule(&ctx).is_none());
    }

    #[test]
    fn tf32_kernels_are_told_to_autocast_only() {
        let t = trace(
            &[linear(
                "cutlass_80_tensorop_s1688gemm_128x128",
                "[\"float\", \"float\"]",
            )],
            1,
            false,
        );
        let c = h100();
        let ctx = Ctx {
            trace: &t,
            step_gpu_ns: 400_000.0,
            step_wall_ns: 0.0,
            ceiling: Some(&c),
        };
        let s = rule(&ctx).unwrap();
        assert!(!s.change.contains("allow_tf32"), "{}", s.change);
        // TF32 at half the 16-bit peak: bf16 halves a compute-bound product.
        assert!((s.expected_ns_per_step - 200_000.0).abs() < 1.0, "{s:?}");
    }
}
