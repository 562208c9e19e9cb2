//! The step floor (`floor.rs`) against hand calculations on one block of Swin-T, ViT-B/16 and
//! BERT-base with the shapes PyTorch records for them (fp16), and its invariants on the
//! committed recordings of the three models.

use std::path::PathBuf;

use fuseprof_analyzer::headroom::ceiling_for;
use fuseprof_analyzer::{analyze, floor::step_floor, AnalyzeConfig, Ceiling, FloorOp, StepFloor};
use fuseprof_store::{Device, Store};

/// The built-in H200 ceilings: 4.25 TB/s, 670 TFLOP/s at 16 bits.
fn h200() -> Ceiling {
    let c = ceiling_for(&Device {
        id: 0,
        name: Some("NVIDIA H200".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!((c.mem_bytes_per_s, c.flops_16bit_per_s), (4.25e12, 670e12));
    c
}

/// Each op of one step on one thread, as (name, input shapes, GPU ns); 0 ns: a view, which
/// launches nothing. Element size 2 (fp16, as the kernels' names would say).
fn trace<'a>(ops: &'a [(&'a str, Vec<Vec<i64>>, i64)]) -> Vec<FloorOp<'a>> {
    ops.iter()
        .enumerate()
        .map(|(i, (name, dims, ns))| FloorOp {
            step: Some(0),
            thread: 0,
            start_ns: i as i64 * 1_000,
            name,
            dims: Some(dims.as_slice()),
            dtypes: None,
            elem_hint: Some(2),
            records: u64::from(*ns > 0),
            gpu_ns: *ns,
            module: None,
        })
        .collect()
}

/// Equal up to the rounding of the document: ns to 0.01, fractions to 1e-6, counts whole.
fn close(what: &str, got: f64, want: f64) {
    let tol: f64 = if want.abs() < 1.0 { 1e-6 } else { 0.01 };
    assert!(
        (got - want).abs() <= tol.max(1e-12 * want.abs()),
        "{what}: got {got}, want {want}"
    );
}

/// A sum of `rows` values each rounded to 0.01 ns against `want`.
fn close_sum(what: &str, got: f64, want: f64, rows: usize) {
    let tol = 0.005 * rows as f64 + 0.01;
    assert!((got - want).abs() <= tol, "{what}: got {got}, want {want}");
}

/// Checks the figures that follow from `flops` and `bytes` at the H200's ceilings.
fn check(f: &StepFloor, flops: f64, bytes: f64, unfused: Option<f64>, measured: i64) {
    close("flops", f.flops, flops);
    close("fused bytes", f.fused_bytes, bytes);
    if let Some(u) = unfused {
        close("unfused bytes", f.unfused_bytes, u);
    }
    // Every op here is 16-bit: all FLOPs at 670 TFLOP/s, all bytes at 4.25 TB/s.
    close("compute ns", f.compute_ns, flops / 670e12 * 1e9);
    close("memory ns", f.memory_ns, bytes / 4.25e12 * 1e9);
    let floor = f.compute_ns.max(f.memory_ns);
    close("floor ns", f.floor_ns, floor);
    close("fraction", f.fraction.unwrap(), floor / measured as f64);
    assert_eq!(f.measured_ns, measured as f64);
    // The ops' shares add up to the floor, and their gaps to measured - floor.
    let shares: f64 = f.by_op.iter().map(|r| r.floor_ns).sum();
    close_sum("shares", shares, f.floor_ns, f.by_op.len());
    let gaps: f64 = f.by_op.iter().map(|r| r.gap_ns).sum();
    close_sum("gaps", gaps, measured as f64 - f.floor_ns, f.by_op.len());
}

#[test]
fn vit_b16_block_matches_the_hand_calculation() {
    // One ViT-B/16 encoder block, batch 64: 197 tokens, width 768, MLP 3072, 12 heads of 64.
    // Tokens N = 64 * 197 = 12,608; X = N * 768 = 9,682,944 elements.
    let x = 64.0 * 197.0 * 768.0;
    let ops = [
        (
            "aten::layer_norm",
            vec![
                vec![64, 197, 768],
                vec![],
                vec![768],
                vec![768],
                vec![],
                vec![],
            ],
            28_000,
        ),
        (
            "aten::linear",
            vec![vec![64, 197, 768], vec![2304, 768], vec![2304]],
            71_000,
        ),
        ("aten::reshape", vec![vec![64, 197, 2304], vec![]], 0),
        ("aten::permute", vec![vec![64, 197, 3, 12, 64], vec![]], 0),
        ("aten::unbind", vec![vec![3, 64, 12, 197, 64], vec![]], 0),
        (
            "aten::scaled_dot_product_attention",
            vec![
                vec![64, 12, 197, 64],
                vec![64, 12, 197, 64],
                vec![64, 12, 197, 64],
                vec![],
                vec![],
            ],
            48_000,
        ),
        (
            "aten::transpose",
            vec![vec![64, 12, 197, 64], vec![], vec![]],
            0,
        ),
        ("aten::reshape", vec![vec![64, 197, 12, 64], vec![]], 0),
        (
            "aten::linear",
            vec![vec![64, 197, 768], vec![768, 768], vec![768]],
            26_000,
        ),
        (
            "aten::add",
            vec![vec![64, 197, 768], vec![64, 197, 768], vec![]],
            17_000,
        ),
        (
            "aten::layer_norm",
            vec![
                vec![64, 197, 768],
                vec![],
                vec![768],
                vec![768],
                vec![],
                vec![],
            ],
            28_000,
        ),
        (
            "aten::linear",
            vec![vec![64, 197, 768], vec![3072, 768], vec![3072]],
            97_000,
        ),
        ("aten::gelu", vec![vec![64, 197, 3072], vec![]], 55_000),
        (
            "aten::linear",
            vec![vec![64, 197, 3072], vec![768, 3072], vec![768]],
            78_000,
        ),
        (
            "aten::add",
            vec![vec![64, 197, 768], vec![64, 197, 768], vec![]],
            17_000,
        ),
    ];
    let measured: i64 = ops.iter().map(|o| o.2).sum();
    let f = step_floor(&trace(&ops), &h200(), measured, 1).unwrap();

    // FLOPs: layer norms 8 per element; linears 2 * N * K * Nout; attention 2 * (64 * 12
    // heads) * 197 * 197 * (64 + 64) for QK^T and PV; add and gelu one per output element.
    let flops = 2.0 * 8.0 * x
        + 2.0 * x * 2304.0
        + 2.0 * 768.0 * 197.0 * 197.0 * 128.0
        + 2.0 * x * 768.0
        + x
        + 2.0 * x * 3072.0
        + 4.0 * x
        + 2.0 * (4.0 * x) * 768.0
        + x;
    // Parameters, read once: 2 x (768 + 768) norm weights and biases, qkv 2304 * 768 + 2304,
    // proj 768 * 768 + 768, fc1 3072 * 768 + 3072, fc2 768 * 3072 + 768 = 7,087,872 elements.
    let params = 2.0 * 1536.0 + 1_771_776.0 + 590_592.0 + 2_362_368.0 + 2_360_064.0;
    // Activations, fused: norm1 reads the block input x (X; nothing in the step made it); its
    // output chains into qkv, whose 3X output the attention reads whole as q, k, v (chained);
    // attention -> proj -> add chain. The add's other input (X) is not the previous op's
    // output: it is matched to the latest unmatched output of X elements other than proj's,
    // the attention output, which kept on chip must now be written (X) and read (X). norm2,
    // fc1 (4X), gelu, fc2 and the last add chain; the add's residual input matches norm2's
    // output: written (X) and read (X). The block's output is written (X). 6X in all.
    let bytes = 2.0 * (params + 6.0 * x);
    // Unfused: each op reads its inputs and writes its output: norm 2X, qkv X + 3X, attention
    // 3X + X, proj 2X, add 3X, norm 2X, fc1 X + 4X, gelu 8X, fc2 4X + X, add 3X = 38X.
    let unfused = 2.0 * (params + 38.0 * x);
    check(&f, flops, bytes, Some(unfused), measured);
    // The linears do ~96% of the FLOPs and the step is compute-bound: their share is their
    // FLOPs' time, the layer norms' share is theirs (8X each at 670 TFLOP/s).
    assert_eq!(f.bound, "compute");
    let ln = f
        .by_op
        .iter()
        .find(|r| r.name == "aten::layer_norm")
        .unwrap();
    close("norm share", ln.floor_ns, 2.0 * 8.0 * x / 670e12 * 1e9);
    close("norm gap", ln.gap_ns, 56_000.0 - ln.floor_ns);
}

#[test]
fn bert_base_block_matches_the_hand_calculation() {
    // One BERT-base encoder layer (post-norm), batch 64, sequence 128, width 768, 12 heads:
    // X = 64 * 128 * 768 = 6,291,456 elements. q, k and v are three linears.
    let x = 64.0 * 128.0 * 768.0;
    let lin = |k: i64, n: i64| vec![vec![64, 128, k], vec![n, k], vec![n]];
    let ln = vec![
        vec![64, 128, 768],
        vec![],
        vec![768],
        vec![768],
        vec![],
        vec![],
    ];
    let ops = [
        ("aten::linear", lin(768, 768), 18_000),
        ("aten::view", vec![vec![64, 128, 768], vec![]], 0),
        (
            "aten::transpose",
            vec![vec![64, 128, 12, 64], vec![], vec![]],
            0,
        ),
        ("aten::linear", lin(768, 768), 18_000),
        ("aten::view", vec![vec![64, 128, 768], vec![]], 0),
        (
            "aten::transpose",
            vec![vec![64, 128, 12, 64], vec![], vec![]],
            0,
        ),
        ("aten::linear", lin(768, 768), 18_000),
        ("aten::view", vec![vec![64, 128, 768], vec![]], 0),
        (
            "aten::transpose",
            vec![vec![64, 128, 12, 64], vec![], vec![]],
            0,
        ),
        (
            "aten::scaled_dot_product_attention",
            vec![
                vec![64, 12, 128, 64],
                vec![64, 12, 128, 64],
                vec![64, 12, 128, 64],
                vec![],
            ],
            19_000,
        ),
        (
            "aten::transpose",
            vec![vec![64, 12, 128, 64], vec![], vec![]],
            0,
        ),
        ("aten::reshape", vec![vec![64, 128, 12, 64], vec![]], 0),
        ("aten::linear", lin(768, 768), 18_000),
        (
            "aten::add",
            vec![vec![64, 128, 768], vec![64, 128, 768], vec![]],
            11_000,
        ),
        ("aten::layer_norm", ln.clone(), 19_000),
        ("aten::linear", lin(768, 3072), 64_000),
        ("aten::gelu", vec![vec![64, 128, 3072], vec![]], 39_000),
        ("aten::linear", lin(3072, 768), 53_000),
        (
            "aten::add",
            vec![vec![64, 128, 768], vec![64, 128, 768], vec![]],
            10_000,
        ),
        ("aten::layer_norm", ln, 19_000),
    ];
    let measured: i64 = ops.iter().map(|o| o.2).sum();
    let f = step_floor(&trace(&ops), &h200(), measured, 1).unwrap();

    // FLOPs: q, k, v, output linears 2 * X * 768 each; attention 2 * (64 * 12) * 128 * 128 *
    // (64 + 64); fc1 2 * X * 3072; gelu 4X; fc2 2 * 4X * 768; two adds X; two norms 8X.
    let flops = 4.0 * 2.0 * x * 768.0
        + 2.0 * 768.0 * 128.0 * 128.0 * 128.0
        + 2.0 * x * 3072.0
        + 4.0 * x
        + 2.0 * (4.0 * x) * 768.0
        + 2.0 * x
        + 2.0 * 8.0 * x;
    // Parameters: four 768 * 768 + 768 linears, fc1 3072 * 768 + 3072, fc2 768 * 3072 + 768,
    // two norms 768 + 768: 7,087,872 elements.
    let params = 4.0 * 590_592.0 + 2_362_368.0 + 2_360_064.0 + 2.0 * 1536.0;
    // Activations, fused: the q linear reads the layer input (X). k's input has q's output's
    // size, so the chain runs q -> k -> v (each reads the previous output's X elements on
    // chip), and v's output chains into the attention as its first X-sized input. Its other
    // two inputs match the latest unmatched X outputs before v's: k's and q's, each written
    // and read (4X). attention -> output linear -> add chain; the add's residual matches the
    // attention output (write X, read X). norm1 -> fc1 -> gelu -> fc2 -> add chain; the
    // add's residual matches norm1's output (write X, read X). norm2's output is the step's
    // output (X). 1 + 4 + 2 + 2 + 1 = 10X.
    let bytes = 2.0 * (params + 10.0 * x);
    check(&f, flops, bytes, None, measured);
    assert_eq!(f.bound, "compute");
}

#[test]
fn swin_t_block_matches_the_hand_calculation() {
    // One Swin-T block of stage 1 (window attention, no shift), batch 64: 56 x 56 tokens of
    // width 96 in 4096 windows of 7 x 7, 3 heads of 32, MLP 384. S = 64 * 3136 * 96 =
    // 19,267,584 elements (= 4096 * 49 * 96 = 4096 * 3 * 49 * 32); attention scores
    // A = 4096 * 3 * 49 * 49 = 29,503,488.
    let s = 64.0 * 3136.0 * 96.0;
    let a = 4096.0 * 3.0 * 49.0 * 49.0;
    let ln = |d: Vec<i64>| vec![d, vec![], vec![96], vec![96], vec![], vec![]];
    let ops = [
        ("aten::layer_norm", ln(vec![64, 56, 56, 96]), 231_000),
        (
            "aten::pad",
            vec![vec![64, 56, 56, 96], vec![], vec![], vec![]],
            25_000,
        ),
        ("aten::view", vec![vec![64, 56, 56, 96], vec![]], 0),
        ("aten::permute", vec![vec![64, 8, 7, 8, 7, 96], vec![]], 0),
        (
            "aten::contiguous",
            vec![vec![64, 8, 8, 7, 7, 96], vec![]],
            57_000,
        ),
        ("aten::view", vec![vec![64, 8, 8, 7, 7, 96], vec![]], 0),
        (
            "aten::linear",
            vec![vec![4096, 49, 96], vec![288, 96], vec![288]],
            73_000,
        ),
        ("aten::reshape", vec![vec![4096, 49, 288], vec![]], 0),
        ("aten::permute", vec![vec![4096, 49, 3, 3, 32], vec![]], 0),
        ("aten::unbind", vec![vec![3, 4096, 3, 49, 32], vec![]], 0),
        ("aten::mul", vec![vec![4096, 3, 49, 32], vec![]], 54_000),
        (
            "aten::transpose",
            vec![vec![4096, 3, 49, 32], vec![], vec![]],
            0,
        ),
        (
            "aten::matmul",
            vec![vec![4096, 3, 49, 32], vec![4096, 3, 32, 49]],
            204_000,
        ),
        ("aten::view", vec![vec![49, 49], vec![]], 0),
        ("aten::index", vec![vec![169, 3], vec![2401]], 4_000),
        ("aten::view", vec![vec![2401, 3], vec![]], 0),
        ("aten::permute", vec![vec![49, 49, 3], vec![]], 0),
        ("aten::contiguous", vec![vec![3, 49, 49], vec![]], 2_000),
        ("aten::unsqueeze", vec![vec![3, 49, 49], vec![]], 0),
        (
            "aten::add",
            vec![vec![4096, 3, 49, 49], vec![1, 3, 49, 49], vec![]],
            78_000,
        ),
        (
            "aten::softmax",
            vec![vec![4096, 3, 49, 49], vec![], vec![]],
            83_000,
        ),
        (
            "aten::matmul",
            vec![vec![4096, 3, 49, 49], vec![4096, 3, 49, 32]],
            176_000,
        ),
        (
            "aten::transpose",
            vec![vec![4096, 3, 49, 32], vec![], vec![]],
            0,
        ),
        ("aten::reshape", vec![vec![4096, 49, 3, 32], vec![]], 56_000),
        (
            "aten::linear",
            vec![vec![4096, 49, 96], vec![96, 96], vec![96]],
            41_000,
        ),
        ("aten::view", vec![vec![4096, 49, 96], vec![]], 0),
        ("aten::permute", vec![vec![64, 8, 8, 7, 7, 96], vec![]], 0),
        (
            "aten::contiguous",
            vec![vec![64, 8, 7, 8, 7, 96], vec![]],
            58_000,
        ),
        (
            "aten::add",
            vec![vec![64, 56, 56, 96], vec![64, 56, 56, 96], vec![]],
            38_000,
        ),
        ("aten::reshape", vec![vec![64, 56, 56, 96], vec![]], 0),
        ("aten::layer_norm", ln(vec![64, 3136, 96]), 231_000),
        (
            "aten::linear",
            vec![vec![64, 3136, 96], vec![384, 96], vec![384]],
            92_000,
        ),
        ("aten::gelu", vec![vec![64, 3136, 384], vec![]], 108_000),
        (
            "aten::linear",
            vec![vec![64, 3136, 384], vec![96, 384], vec![96]],
            77_000,
        ),
        (
            "aten::add",
            vec![vec![64, 3136, 96], vec![64, 3136, 96], vec![]],
            38_000,
        ),
    ];
    let measured: i64 = ops.iter().map(|o| o.2).sum();
    let f = step_floor(&trace(&ops), &h200(), measured, 1).unwrap();

    // FLOPs: norms 8S each; qkv 2 * S * 288; q * scale S; QK^T 2 * (4096 * 3) * 49 * 32 * 49
    // = 2 * A * 32; bias add A; softmax 5A; PV 2 * (4096 * 3) * 49 * 49 * 32 = 2 * A * 32;
    // proj 2 * S * 96; residual adds S each; fc1 2 * S * 384; gelu 4S; fc2 2 * 4S * 96. The
    // layout ops (pad, contiguous, index, reshape copies) do none.
    let flops = 2.0 * 8.0 * s
        + 2.0 * s * 288.0
        + s
        + 2.0 * a * 32.0
        + a
        + 5.0 * a
        + 2.0 * a * 32.0
        + 2.0 * s * 96.0
        + 2.0 * s
        + 2.0 * s * 384.0
        + 4.0 * s
        + 2.0 * (4.0 * s) * 96.0;
    // Parameters: norms 2 x 192, qkv 288 * 96 + 288 = 27,936, proj 96 * 96 + 96 = 9,312,
    // fc1 384 * 96 + 384 = 37,248, fc2 96 * 384 + 96 = 36,960.
    let params = 2.0 * 192.0 + 27_936.0 + 9_312.0 + 37_248.0 + 36_960.0;
    // Activations, fused:
    // - norm1 reads the block input (S); pad and the window partition's contiguous are layout
    //   ops and chain it to qkv on chip.
    // - qkv's 3S output is not what the next op (q * scale, S) reads, so it is written (3S)
    //   and read in parts of S: q by the mul, k by QK^T, v by PV (3S).
    // - QK^T's scores (A) go to the bias gather next, which does not read them: written (A),
    //   read back by the bias add (A). The gather reads 2401 x 3 rows (2 bytes) and 2401
    //   int64 indices; its output chains through contiguous into the add (7,203 elements).
    // - add -> softmax -> PV -> reshape copy -> proj -> window reverse -> residual add chain;
    //   the add's residual input matches the latest unmatched S output other than the
    //   window reverse's: proj's, which is written and read (2S).
    // - norm2 -> fc1 (4S) -> gelu -> fc2 -> add chain; the residual matches norm2's output
    //   (2S); the block's output is written (S).
    // S: 1 + 3 + 3 + 2 + 2 + 1 = 12S; scores 2A.
    let bytes = 2.0 * (params + 12.0 * s + 2.0 * a + 2401.0 * 3.0) + 8.0 * 2401.0;
    check(&f, flops, bytes, None, measured);
    // 4.88e10 FLOPs take 72.8 us at 670 TFLOP/s; 5.81e8 bytes take 136.6 us at 4.25 TB/s:
    // unlike the ViT and BERT blocks, this one is memory-bound.
    assert_eq!(f.bound, "memory");
}

#[test]
fn ops_without_shapes_leave_the_fraction_unknown() {
    // A linear with shapes, then a gelu whose shapes were not recorded and an op the model
    // does not know: the floor covers the linear only and says what it left out.
    let listed = [
        (
            "aten::linear",
            vec![vec![64, 768], vec![3072, 768], vec![3072]],
            10_000,
        ),
        ("aten::gelu", vec![vec![64, 3072]], 4_000),
        ("aten::nonzero", vec![vec![64, 3072]], 3_000),
    ];
    let mut ops = trace(&listed);
    ops[1].dims = None;
    let f = step_floor(&ops, &h200(), 20_000, 1).unwrap();
    assert_eq!(f.fraction, None);
    assert_eq!(
        (f.left_out.no_shapes_ops, f.left_out.no_shapes_ns),
        (1.0, 4_000.0)
    );
    assert_eq!(
        (f.left_out.no_model_ops, f.left_out.no_model_ns),
        (1.0, 3_000.0)
    );
    assert_eq!(f.left_out.no_model_names, vec!["aten::nonzero".to_string()]);
    // 20 us measured, 17 us in ops: 3 us launched outside any op.
    assert_eq!(f.left_out.outside_ops_ns, 3_000.0);
    assert_eq!(f.covered_ns, 10_000.0);
    close(
        "covered fraction",
        f.covered_fraction,
        f.floor_ns / 10_000.0,
    );
    // The linear's output goes to memory, since the op after it is left out: 64 * 768 in,
    // 3072 * 768 + 3072 parameters, 64 * 3072 out, 2 bytes each.
    close(
        "bytes",
        f.fused_bytes,
        2.0 * (64.0 * 768.0 + 3072.0 * 768.0 + 3072.0 + 64.0 * 3072.0),
    );
}

/// The committed recordings, decompressed once per test.
fn recording(name: &str, dir: &tempfile::TempDir) -> PathBuf {
    let input = fuseprof_fixtures::path(&format!("recordings/{name}.sqlite.gz"));
    let out = dir.path().join(format!("{name}.sqlite"));
    let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(&input).unwrap());
    std::io::copy(&mut gz, &mut std::fs::File::create(&out).unwrap()).unwrap();
    out
}

#[test]
fn recordings_floor_is_below_the_measured_step() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "swin_t_infer_modules",
        "vit_b16_infer_shapes",
        "bert_base_infer_shapes",
    ] {
        let mut store = Store::open(&recording(name, &dir)).unwrap();
        let a = analyze(&mut store, &AnalyzeConfig::default()).unwrap();
        let f = a
            .floor
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no floor"));
        // Three annotated steps each; the measured time is their GPU time.
        assert_eq!(f.steps, a.steps.steps.len(), "{name}");
        let per_step = a.steps.steps.iter().map(|s| s.gpu_ns).sum::<i64>() as f64 / 3.0;
        assert_eq!(f.steps, 3, "{name}");
        close(name, f.measured_ns, per_step);
        assert!(f.floor_ns > 0.0, "{name}: floor {}", f.floor_ns);
        assert!(f.floor_ns <= f.measured_ns, "{name}: {f:?}");
        assert!(f.floor_ns <= f.covered_ns, "{name}: {f:?}");
        assert!(f.fused_bytes > 0.0 && f.flops > 0.0, "{name}: {f:?}");
        assert!(f.fused_bytes <= f.unfused_bytes, "{name}: {f:?}");
        if let Some(x) = f.fraction {
            close(name, x, f.floor_ns / f.measured_ns);
        }
        // Every op's gap and share add up to the covered time.
        let measured: f64 = f.by_op.iter().map(|r| r.measured_ns).sum();
        close_sum(name, measured, f.covered_ns, f.by_op.len());
        let shares: f64 = f.by_module.iter().map(|r| r.floor_ns).sum();
        close_sum(name, shares, f.floor_ns, f.by_module.len());
        // Step 1 alone: one step's figures, of the same order as the mean.
        let mut store = Store::open(&recording(name, &dir)).unwrap();
        let one = analyze(
            &mut store,
            &AnalyzeConfig {
                step: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
        let g = one.floor.unwrap();
        assert_eq!(g.steps, 1);
        close(name, g.measured_ns, a.steps.steps[1].gpu_ns as f64);
        // The same ops in each step: the same FLOPs.
        close(name, g.flops, f.flops);
    }
}
