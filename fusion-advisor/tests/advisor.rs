//! The advisor on every fixture (snapshots of what users see), on hand-made edge cases, and
//! `bench`'s Rust side driven by stand-in drivers (no GPU here): its errors, and its results
//! going into the store.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use fuseprof_fusion_advisor::bench::{self, BenchConfig, Selection};
use fuseprof_fusion_advisor::{advise_file, Advice, AdviseConfig, Error};
use fuseprof_store::{
    Api, ApiCall, CreateOptions, Device, Kernel, Range, RangeKind, RunInfo, Store, Writer,
};

/// A store for a fixture (recordings decompressed, traces imported), made once per process.
fn store_for(rel: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static DONE: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let mut done = DONE.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = done.get(rel) {
        return p.clone();
    }
    let input = fuseprof_fixtures::path(rel);
    let name = Path::new(rel).file_name().unwrap().to_string_lossy();
    let out = dir
        .path()
        .join(format!("{}.sqlite", name.split('.').next().unwrap()));
    if rel.ends_with(".sqlite.gz") {
        let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(&input).unwrap());
        std::io::copy(&mut gz, &mut std::fs::File::create(&out).unwrap()).unwrap();
    } else if rel.ends_with(".sqlite") && Store::open(&input).is_ok() {
        std::fs::copy(&input, &out).unwrap();
    } else {
        fuseprof_collector::import::import(
            &input,
            &out,
            &fuseprof_collector::import::ImportOptions::default(),
        )
        .unwrap_or_else(|e| panic!("importing {rel}: {e}"));
    }
    done.insert(rel.to_string(), out.clone());
    out
}

/// What a user sees of the advice, with numbers rounded to what the estimate can say.
fn summary(a: &Advice) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} ({}), {:?}, steps {}: {:.1} us per step",
        a.run.file,
        a.run.source_format,
        a.run.device,
        a.run.steps,
        a.step_gpu_ns / 1e3
    );
    for n in &a.notes {
        let _ = writeln!(o, "note: {n}");
    }
    let t = &a.totals;
    let _ = writeln!(
        o,
        "{} proposals: {:.1}% of the step now, saving {:.1} us ({:.1}%)",
        t.proposals,
        t.coverage_pct_of_step,
        t.saving_ns_per_step / 1e3,
        t.saving_pct_of_step
    );
    for p in &a.proposals {
        let _ = writeln!(
            o,
            "  #{} {} x{:.2}: {:.1} -> {:.1} us/step, {} [{}]",
            p.rank,
            p.id,
            p.instances_per_step,
            p.current_ns_per_step / 1e3,
            p.expected_ns_per_step / 1e3,
            p.confidence,
            p.ops
                .iter()
                .map(|s| s.split(' ').next().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    for n in &a.not_proposed {
        let _ = writeln!(
            o,
            "  not {} x{:.2} ({:.1} us/step): {}",
            n.pattern,
            n.instances_per_step,
            n.current_ns_per_step / 1e3,
            n.reason
        );
    }
    for u in a.unbundled.iter().take(8) {
        let _ = writeln!(
            o,
            "  unbundled x{:.2} >= {:.1} us: {}",
            u.instances_per_step,
            u.saving_ns_per_step / 1e3,
            u.ops
                .iter()
                .map(|s| s.split(' ').next().unwrap())
                .collect::<Vec<_>>()
                .join(" + ")
        );
    }
    o
}

fn fixtures() -> Vec<String> {
    let mut v: Vec<String> = fuseprof_fixtures::KINETO
        .iter()
        .chain(fuseprof_fixtures::NSYS)
        .map(|s| s.to_string())
        .collect();
    for r in [
        "swin_t_infer_modules",
        "vit_b16_infer_shapes",
        "bert_base_infer_shapes",
        "swin_t_train_step_shapes",
        "gpu_test",
    ] {
        v.push(format!("recordings/{r}.sqlite.gz"));
    }
    v.push("recordings/swin_t_infer.kineto.json.gz".into());
    v
}

#[test]
fn advice_on_every_fixture() {
    for rel in fixtures() {
        let text = match advise_file(&store_for(&rel), &AdviseConfig::default()) {
            Ok(a) => {
                // Rendering never fails and the JSON round-trips.
                assert!(!fuseprof_fusion_advisor::render_text(&a, 10).is_empty());
                let back: Advice =
                    serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
                assert_eq!(back.proposals.len(), a.proposals.len());
                summary(&a)
            }
            Err(e) => format!("error: {e}\n"),
        };
        let name = Path::new(&rel).file_name().unwrap().to_string_lossy();
        insta::assert_snapshot!(name.split('.').next().unwrap().to_string(), text);
    }
}

#[test]
fn swin_t_proposals_cover_half_the_step_and_count_each_op_once() {
    let a = advise_file(
        &store_for("recordings/swin_t_infer_modules.sqlite.gz"),
        &AdviseConfig::default(),
    )
    .unwrap();
    assert!(a.totals.coverage_pct_of_step >= 50.0, "{:?}", a.totals);
    assert!(a.totals.saving_ns_per_step > 0.0);
    for kind in ["window_attention", "window_partition", "window_reverse"] {
        assert!(a.proposals.iter().any(|p| p.pattern == kind), "{kind}");
    }
    // Overlaps are resolved: no op start appears in two chains.
    let mut starts = std::collections::HashSet::new();
    for p in &a.proposals {
        for l in &p.locations {
            assert!(starts.insert((l.tid, l.start_ns)), "{} overlaps", p.id);
        }
    }
    // Ranked by saving, ids unique.
    assert!(a
        .proposals
        .windows(2)
        .all(|w| w[0].saving_ns_per_step >= w[1].saving_ns_per_step));
    let ids: std::collections::HashSet<_> = a.proposals.iter().map(|p| &p.id).collect();
    assert_eq!(ids.len(), a.proposals.len());
    // A step restricts and keeps the per-step figures.
    let one = advise_file(
        &store_for("recordings/swin_t_infer_modules.sqlite.gz"),
        &AdviseConfig {
            step: Some(1),
            ..AdviseConfig::default()
        },
    )
    .unwrap();
    assert_eq!(one.run.steps, 1);
    assert_eq!(one.proposals.len(), a.proposals.len());
    let d = (one.totals.current_ns_per_step - a.totals.current_ns_per_step).abs();
    assert!(d < 0.02 * a.totals.current_ns_per_step, "{d}");
}

// ---- hand-made runs --------------------------------------------------------------------------

/// One op of a hand-made run: its name, input dims, dtypes, and its kernel's duration (0: none).
#[derive(Clone, Copy)]
struct Op(&'static str, &'static str, &'static str, i64);

/// A kernel on device 0, stream 7, launched by process 1 under `corr`.
fn kernel(name: fuseprof_store::StrId, start_ns: i64, end_ns: i64, corr: Option<i64>) -> Kernel {
    Kernel {
        start_ns,
        end_ns,
        device_id: 0,
        stream_id: 7,
        pid: Some(1),
        correlation_id: corr,
        external_id: None,
        name,
        grid: None,
        block: None,
        registers_per_thread: None,
        static_smem_bytes: None,
        dynamic_smem_bytes: None,
        graph_id: None,
    }
}

/// Writes a run of `ops`, one after another on one thread, each launching one kernel, on an H100.
fn handmade(dir: &Path, name: &str, ops: &[Op], shapes: bool) -> PathBuf {
    handmade_on(dir, name, ops, shapes, "NVIDIA H100 80GB HBM3")
}

/// [`handmade`] on the GPU named `device`.
fn handmade_on(dir: &Path, name: &str, ops: &[Op], shapes: bool, device: &str) -> PathBuf {
    let path = dir.join(format!("{name}.sqlite"));
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    w.device(Device {
        id: 0,
        name: Some(device.into()),
        ..Device::default()
    });
    let launch = w.intern("cudaLaunchKernel");
    let mut t = 1_000_000;
    for (i, op) in ops.iter().enumerate() {
        let corr = i as i64 + 1;
        let name = w.intern(op.0);
        let mut r = Range::new(RangeKind::CpuOp, name, 1, 1, t);
        r.end_ns = Some(t + 10_000);
        if shapes {
            r.input_dims = Some(w.intern(op.1));
            r.input_types = Some(w.intern(op.2));
        }
        w.range(r).unwrap();
        if op.3 > 0 {
            w.api_call(ApiCall {
                api: Api::Runtime,
                start_ns: t + 1_000,
                end_ns: t + 2_000,
                pid: 1,
                tid: 1,
                correlation_id: Some(corr),
                external_id: None,
                name: launch,
                return_code: None,
            })
            .unwrap();
            let k = w.intern(&format!("kernel_{i}"));
            w.kernel(kernel(k, t + 3_000, t + 3_000 + op.3, Some(corr)))
                .unwrap();
        }
        t += 20_000;
    }
    w.finish(RunInfo {
        source_format: "kineto".into(),
        ..Default::default()
    })
    .unwrap();
    path
}

const H: &str = "[\"c10::Half\", \"c10::Half\"]";
const F32: &str = "[\"float\", \"float\"]";

/// Swin stage-3 window attention (256 windows x 12 heads, N 49, d = `d`), with a shifted mask.
fn window_chain(d: &'static str, types: &'static str) -> Vec<Op> {
    let (q, k, s, v, o) = match d {
        "32" => (
            "[[256, 12, 49, 32], []]",
            "[[256, 12, 49, 32], [256, 12, 32, 49]]",
            "[[256, 12, 49, 49], [], []]",
            "[[256, 12, 49, 49], [256, 12, 49, 32]]",
            "[[256, 49, 12, 32], []]",
        ),
        _ => (
            "[[256, 12, 49, 48], []]",
            "[[256, 12, 49, 48], [256, 12, 48, 49]]",
            "[[256, 12, 49, 49], [], []]",
            "[[256, 12, 49, 49], [256, 12, 49, 48]]",
            "[[256, 49, 12, 48], []]",
        ),
    };
    vec![
        Op("aten::mul", q, types, 20_000),
        Op("aten::matmul", k, types, 60_000),
        Op(
            "aten::add",
            "[[256, 12, 49, 49], [1, 12, 49, 49], []]",
            types,
            20_000,
        ),
        Op(
            "aten::add",
            "[[64, 4, 12, 49, 49], [1, 4, 1, 49, 49], []]",
            types,
            20_000,
        ),
        Op("aten::softmax", s, types, 35_000),
        Op("aten::matmul", v, types, 60_000),
        Op("aten::reshape", o, types, 25_000),
    ]
}

fn advise(path: &Path) -> fuseprof_fusion_advisor::Result<Advice> {
    advise_file(path, &AdviseConfig::default())
}

#[test]
fn a_window_attention_chain_is_proposed_with_its_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let a = advise(&handmade(dir.path(), "w", &window_chain("32", H), true)).unwrap();
    assert_eq!(a.proposals.len(), 1, "{}", summary(&a));
    let p = &a.proposals[0];
    assert_eq!(p.id, "wattn-256x12x49x32-shifted");
    assert_eq!(p.params["windows"], 4);
    assert_eq!(p.params["head_dim"], 32);
    assert_eq!(p.dtype, "fp16");
    assert!(p
        .call
        .contains("fk.attention(qkv, heads=12, seq=49, add=add)"));
    // The run has no steps: everything is per run, and said so.
    assert!(a.notes.iter().any(|n| n.contains("per run")));
    assert!((p.current_ns_per_step - 240_000.0).abs() < 1.0);
}

#[test]
fn a_chain_split_by_an_unrelated_op_is_explained_not_proposed() {
    let dir = tempfile::tempdir().unwrap();
    // The cat reads the scores (an op that reads none of the chain's tensors is stepped over).
    let mut ops = window_chain("32", H);
    ops.insert(
        5,
        Op("aten::cat", "[[256, 12, 49, 49], [64, 3], []]", H, 5_000),
    );
    let a = advise(&handmade(dir.path(), "split", &ops, true)).unwrap();
    assert!(a.proposals.is_empty(), "{}", summary(&a));
    let n = &a.not_proposed[0];
    assert_eq!(n.pattern, "window_attention");
    assert!(n.reason.contains("split by aten::cat"), "{}", n.reason);
}

#[test]
fn a_float32_chain_is_not_proposed() {
    let dir = tempfile::tempdir().unwrap();
    let a = advise(&handmade(dir.path(), "f32", &window_chain("32", F32), true)).unwrap();
    assert!(a.proposals.is_empty());
    assert!(
        a.not_proposed[0].reason.contains("32-bit data"),
        "{}",
        summary(&a)
    );
}

#[test]
fn a_head_dim_the_kernel_lacks_is_not_proposed() {
    let dir = tempfile::tempdir().unwrap();
    let a = advise(&handmade(dir.path(), "d48", &window_chain("48", H), true)).unwrap();
    assert!(a.proposals.is_empty());
    assert!(
        a.not_proposed[0].reason.contains("head_dim 48"),
        "{}",
        summary(&a)
    );
}

#[test]
fn an_sdpa_mask_expanded_over_the_queries_is_taken_as_key_padding_with_the_assumption_said() {
    let dir = tempfile::tempdir().unwrap();
    let sdpa = |mask: &'static str| {
        [Op(
            "aten::scaled_dot_product_attention",
            mask,
            "[\"c10::Half\", \"c10::Half\", \"c10::Half\", \"bool\"]",
            40_000,
        )]
    };
    let cfg = AdviseConfig {
        unprofitable: true,
        ..AdviseConfig::default()
    };
    let expanded = "[[64, 12, 128, 64], [64, 12, 128, 64], [64, 12, 128, 64], [64, 1, 128, 128]]";
    let a = advise_file(&handmade(dir.path(), "hf", &sdpa(expanded), true), &cfg).unwrap();
    assert_eq!(a.proposals.len(), 1, "{}", summary(&a));
    let p = &a.proposals[0];
    assert_eq!(p.params["key_mask"], 1);
    assert!(p
        .assumptions
        .iter()
        .any(|x| x.contains("expanded over the queries")));
    // A mask over other query and key lengths is not a key-padding mask.
    let other = "[[64, 12, 128, 64], [64, 12, 128, 64], [64, 12, 128, 64], [64, 12, 128, 128]]";
    let a = advise_file(&handmade(dir.path(), "other", &sdpa(other), true), &cfg).unwrap();
    assert!(a.proposals.is_empty(), "{}", summary(&a));
    assert!(
        a.not_proposed[0].reason.contains("key-padding mask"),
        "{}",
        summary(&a)
    );
}

#[test]
fn a_run_without_shapes_says_how_to_record_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = advise(&handmade(
        dir.path(),
        "noshapes",
        &window_chain("32", H),
        false,
    ))
    .unwrap_err();
    assert!(matches!(e, Error::NoShapes { .. }), "{e}");
    assert!(e.to_string().contains("--pytorch shapes"), "{e}");
    assert!(e.to_string().contains("record_shapes=True"), "{e}");
}

#[test]
fn a_run_without_op_ranges_is_refused_with_a_reason() {
    let e = advise(&store_for(
        "kineto/hta_triton_example_triton_example.json.gz",
    ));
    // Either no ops at all or no shapes: both are one-line errors that say what to record.
    let e = e.err().map(|e| e.to_string());
    if let Some(msg) = e {
        assert!(msg.contains("record"), "{msg}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    let n = w.intern("my_kernel");
    w.kernel(kernel(n, 0, 10, None)).unwrap();
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let e = advise(&path).unwrap_err();
    assert!(matches!(e, Error::NoOps { .. }), "{e}");
}

#[test]
fn epilogues_bias_residual_and_odd_gemms_are_matched() {
    let dir = tempfile::tempdir().unwrap();
    let ops = [
        Op(
            "aten::linear",
            "[[8192, 768], [768, 768], [768]]",
            H,
            18_000,
        ),
        Op("aten::add", "[[8192, 768], [8192, 768], []]", H, 11_000),
        Op(
            "aten::layer_norm",
            "[[8192, 768], [], [768], [768], [], []]",
            H,
            0,
        ),
        Op("aten::linear", "[[200704, 96], [49, 96]]", H, 52_000),
        Op("aten::softmax", "[[4096, 49], [], []]", H, 0),
        Op("aten::add", "[[200704, 96], [96], []]", H, 60_000),
        Op("aten::add", "[[200704, 96], [200704, 96], []]", H, 60_000),
    ];
    let a = advise(&handmade(dir.path(), "gemms", &ops, true)).unwrap();
    let ids: Vec<&str> = a.proposals.iter().map(|p| p.id.as_str()).collect();
    assert!(ids.contains(&"gemm-res-8192x768x768"), "{}", summary(&a));
    assert!(
        ids.contains(&"pad-gemm-200704x49x96-to-56x96"),
        "{}",
        summary(&a)
    );
    assert!(ids.contains(&"bias-res-200704x96"), "{}", summary(&a));
}

/// Swin's MLP at width `c` (hidden 4c) over 200,704 tokens: fc1, GELU, fc2, residual.
fn mlp_chain(c: i64, gemm_ns: i64) -> Vec<Op> {
    let h = 4 * c;
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    vec![
        Op(
            "aten::linear",
            leak(format!("[[64, 3136, {c}], [{h}, {c}], [{h}]]")),
            H,
            gemm_ns,
        ),
        Op(
            "aten::gelu",
            leak(format!("[[64, 3136, {h}], []]")),
            H,
            150_000,
        ),
        Op(
            "aten::linear",
            leak(format!("[[64, 3136, {h}], [{c}, {h}], [{c}]]")),
            H,
            gemm_ns,
        ),
        Op(
            "aten::add",
            leak(format!("[[64, 3136, {c}], [64, 3136, {c}], []]")),
            H,
            60_000,
        ),
    ]
}

#[test]
fn an_mlp_at_a_width_the_fused_kernel_has_is_one_proposal_and_others_keep_their_gemms() {
    let dir = tempfile::tempdir().unwrap();
    let a = advise(&handmade(
        dir.path(),
        "mlp96",
        &mlp_chain(96, 120_000),
        true,
    ))
    .unwrap();
    let ids: Vec<&str> = a.proposals.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["mlp-200704x96-hidden384"], "{}", summary(&a));
    assert_eq!(a.proposals[0].pattern, "fused_mlp");
    assert_eq!(a.proposals[0].ops.len(), 4);
    // Width 384 has no fused build: the chain stays free for the epilogue patterns.
    let a = advise(&handmade(
        dir.path(),
        "mlp384",
        &mlp_chain(384, 120_000),
        true,
    ))
    .unwrap();
    assert!(
        a.proposals.iter().all(|p| p.pattern != "fused_mlp")
            && a.not_proposed.iter().all(|p| p.pattern != "fused_mlp"),
        "{}",
        summary(&a)
    );
    let residual = a.proposals.iter().map(|p| &p.pattern);
    let residual_too = a.not_proposed.iter().map(|p| &p.pattern);
    assert!(
        residual.chain(residual_too).any(|p| p == "gemm_residual"),
        "{}",
        summary(&a)
    );
}

#[test]
fn a_convolution_is_a_patch_embedding_only_when_the_next_op_shows_its_stride() {
    let dir = tempfile::tempdir().unwrap();
    let conv = Op(
        "aten::conv2d",
        "[[64, 3, 224, 224], [96, 3, 4, 4], [96], [], [], [], []]",
        H,
        450_000,
    );
    // Stride 4: the norm after it sees 64 x 56 x 56 tokens of 96 channels.
    let ln = |d: &'static str| Op("aten::layer_norm", d, H, 40_000);
    let a = advise(&handmade(
        dir.path(),
        "patch",
        &[conv, ln("[[64, 56, 56, 96], [], [96], [96], [], []]")],
        true,
    ))
    .unwrap();
    let ids: Vec<&str> = a.proposals.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["patch-64x3x224x224-patch4x4-to96"], "{}", summary(&a));
    // The norm only shows the stride: the chain, and its time, is the convolution's.
    assert_eq!(a.proposals[0].ops.len(), 1, "{}", summary(&a));
    let steps = a.proposals[0].current_ns_per_step / a.proposals[0].instances_per_step;
    assert!((steps - 450_000.0).abs() < 1.0, "{}", summary(&a));
    // Stride 1 (same padding): 224 x 224 positions, not a patch embedding.
    let a = advise(&handmade(
        dir.path(),
        "conv",
        &[conv, ln("[[64, 224, 224, 96], [], [96], [96], [], []]")],
        true,
    ))
    .unwrap();
    assert!(
        a.proposals.iter().all(|p| p.pattern != "patch_embed"),
        "{}",
        summary(&a)
    );
    // Nothing after it to tell the stride: not proposed either.
    let a = advise(&handmade(dir.path(), "alone", &[conv], true)).unwrap();
    assert!(
        a.proposals.iter().all(|p| p.pattern != "patch_embed"),
        "{}",
        summary(&a)
    );
}

// ---- bench without a GPU ---------------------------------------------------------------------

fn copy_of(rel: &str, dir: &Path) -> PathBuf {
    let p = dir.join("run.sqlite");
    std::fs::copy(store_for(rel), &p).unwrap();
    p
}

fn digest(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}

/// A stand-in for python3: a shell script that runs `body` with the driver's arguments.
fn fake_python(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("python3");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn cfg(dir: &Path, python: PathBuf, selection: Selection) -> BenchConfig {
    // Any file stands in for the kernels library: the stand-in driver does not load it.
    let lib = dir.join("libfuseprof_kernels.so");
    std::fs::write(&lib, b"").unwrap();
    BenchConfig {
        selection,
        python: Some(python),
        kernels_lib: Some(lib),
        ..BenchConfig::default()
    }
}

#[test]
fn bench_refuses_an_unknown_proposal_and_leaves_the_store_alone() {
    let dir = tempfile::tempdir().unwrap();
    let run = copy_of("recordings/bert_base_infer_shapes.sqlite.gz", dir.path());
    let before = digest(&run);
    let py = fake_python(dir.path(), "exit 0");
    let e = bench::bench(
        &run,
        &cfg(dir.path(), py, Selection::Ids(vec!["nope".into()])),
    )
    .unwrap_err();
    assert!(matches!(e, Error::NoSuchProposal { .. }), "{e}");
    assert!(e.to_string().contains("gemm-res-8192x768x768"), "{e}");
    assert_eq!(digest(&run), before);
}

#[test]
fn bench_without_a_gpu_or_torch_says_so_in_one_line_and_leaves_the_store_alone() {
    let dir = tempfile::tempdir().unwrap();
    let run = copy_of("recordings/bert_base_infer_shapes.sqlite.gz", dir.path());
    let before = digest(&run);
    for (body, expect) in [
        (
            "echo 'fuseprof bench: no CUDA GPU is visible to PyTorch' >&2; exit 3",
            "no CUDA GPU",
        ),
        (
            "echo 'fuseprof bench: this python3 cannot import torch' >&2; exit 2",
            "cannot import torch",
        ),
    ] {
        let py = fake_python(dir.path(), body);
        let e = bench::bench(&run, &cfg(dir.path(), py, Selection::All)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(expect) && !msg.contains('\n'), "{msg}");
        assert_eq!(digest(&run), before);
    }
    let e = bench::bench(
        &run,
        &cfg(
            dir.path(),
            dir.path().join("no-such-python"),
            Selection::All,
        ),
    )
    .unwrap_err();
    assert!(e.to_string().contains("python3 with PyTorch"), "{e}");
    assert_eq!(digest(&run), before);
}

#[test]
fn bench_results_go_into_the_store_and_show_in_advise() {
    let dir = tempfile::tempdir().unwrap();
    let run = copy_of("recordings/bert_base_infer_shapes.sqlite.gz", dir.path());
    assert_eq!(Store::open(&run).unwrap().schema_version, 1);
    // The stand-in driver (the real python3 runs it: $1 is the driver, $2 the job, $3 the
    // results) answers every proposal of the job: one passes, one fails numerics.
    let py = fake_python(
        dir.path(),
        r#"python3 - "$2" "$3" <<'EOF' || exit 1
import json, sys
job = json.load(open(sys.argv[1]))
res = []
for i, p in enumerate(job["proposals"]):
    res.append({"id": p["id"], "status": "passed" if i == 0 else "failed", "ours_us": 20.0,
                "eager_us": 30.0, "compiled_us": 25.0, "rel_error": 2e-4 if i == 0 else 0.5,
                "tolerance": 1e-2, "detail": {"rounds_us": {}}})
json.dump({"device": "Stand-in GPU", "driver": "1.0", "torch": "0.0", "results": res},
          open(sys.argv[2], "w"))
EOF"#,
    );
    let out = dir.path().join("results.json");
    let mut c = cfg(dir.path(), py, Selection::All);
    c.output = Some(out.clone());
    let report = bench::bench(&run, &c).unwrap();
    assert_eq!(report.rows.len(), 2);
    assert_eq!(report.device, "Stand-in GPU");
    let text = bench::render_report(&report);
    assert!(text.contains("PASSED") && text.contains("FAILED"), "{text}");
    assert!(text.contains("1 of 2 passed the numerics gate"), "{text}");
    assert!(out.is_file());

    // The store was migrated to the current schema and holds both results.
    let mut store = Store::open(&run).unwrap();
    assert_eq!(store.schema_version, fuseprof_store::SCHEMA_VERSION);
    let rows = store.bench_results().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows
        .iter()
        .all(|r| r.device.as_deref() == Some("Stand-in GPU")));
    drop(store);

    let a = advise(&run).unwrap();
    let measured: Vec<_> = a
        .proposals
        .iter()
        .filter_map(|p| p.measured.as_ref())
        .collect();
    assert_eq!(measured.len(), 2);
    let passed = &a
        .proposals
        .iter()
        .find(|p| p.measured.as_ref().unwrap().status == "passed")
        .unwrap();
    let want = 10_000.0 * passed.instances_per_step;
    assert_eq!(a.totals.measured_saving_ns_per_step, Some(want));
    let text = fuseprof_fusion_advisor::render_text(&a, 5);
    assert!(
        text.contains("FAILED") && text.contains("measured by bench"),
        "{text}"
    );
}

// ---- the patterns `fuseprof bench -- CMD` applies by default -------------------------------

/// `bench`'s result for a proposal: `ours` and `eager` µs per call, and its status.
fn measured(
    p: &fuseprof_fusion_advisor::Proposal,
    ours: f64,
    eager: f64,
    status: &str,
) -> bench::BenchRow {
    bench::BenchRow {
        proposal: p.clone(),
        measured: bench::Measured {
            proposal_id: p.id.clone(),
            pattern: p.pattern.clone(),
            shape: p.shape.clone(),
            status: status.into(),
            ours_ns: ours * 1e3,
            baseline_ns: eager * 1e3,
            compiled_ns: None,
            expected_ns: Some(p.estimate.ns),
            max_rel_error: Some(3e-4),
            tolerance: Some(1e-2),
            device: None,
            driver: None,
            torch_version: None,
            measured_unix_ns: 0,
            detail: None,
        },
        measured_saving_ns_per_step: (eager - ours) * 1e3 * p.instances_per_step,
        saving_note: None,
        saving_error_pct: 0.0,
    }
}

#[test]
fn the_default_applies_each_pattern_whose_proposals_measured_faster_and_within_tolerance() {
    use fuseprof_fusion_advisor::model_bench::choose;
    let swin = store_for("recordings/swin_t_infer_modules.sqlite.gz");
    let cfg = AdviseConfig {
        unprofitable: true,
        ..AdviseConfig::default()
    };
    let a = advise_file(&swin, &cfg).unwrap();
    // Chains the estimate expects nothing from are proposed too, for bench to measure; the
    // tanh-form GEMM + GELU among them is never chosen (below).
    let plain = advise_file(&swin, &AdviseConfig::default()).unwrap();
    assert!(plain.proposals.iter().all(|p| p.pattern != "gemm_gelu"));
    assert!(a.proposals.iter().any(|p| p.pattern == "gemm_gelu"));
    assert!(a.proposals.len() > plain.proposals.len());
    // BERT's SDPA, expected no faster as the fMHA, goes to bench all the same.
    let bert = store_for("recordings/bert_base_infer_shapes.sqlite.gz");
    let b = advise_file(&bert, &cfg).unwrap();
    let plain = advise_file(&bert, &AdviseConfig::default()).unwrap();
    assert!(plain.proposals.iter().all(|p| p.pattern != "sdpa"));
    assert!(
        b.proposals.iter().any(|p| p.pattern == "sdpa"),
        "{}",
        summary(&b)
    );
    let c = choose(
        &b.proposals
            .iter()
            .map(|p| measured(p, 10.0, 50.0, "passed"))
            .collect::<Vec<_>>(),
    );
    assert!(c.apply.iter().any(|p| p == "full_attention"), "{c:#?}");
    // Every chain faster: every pattern advise proposed on Swin-T goes to the patch layer.
    let rows: Vec<_> = a
        .proposals
        .iter()
        .map(|p| measured(p, 10.0, 50.0, "passed"))
        .collect();
    let c = choose(&rows);
    assert!(!c.named);
    assert_eq!(
        c.apply
            .iter()
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>(),
        [
            "fused_mlp",
            "gemm_residual",
            "patch_embed",
            "window_attention",
            "window_partition",
            "window_reverse"
        ]
        .into_iter()
        .collect(),
        "{c:#?}"
    );
    // One attention shape over tolerance keeps the pattern out (the patch layer would apply it
    // to that shape too); GEMM epilogues slower in total stay out, with the measured loss.
    let rows: Vec<_> = a
        .proposals
        .iter()
        .map(|p| match p.pattern.as_str() {
            "window_attention" if p.id == "wattn-256x12x49x32" => measured(p, 10.0, 50.0, "failed"),
            "gemm_residual" => measured(p, 60.0, 50.0, "passed"),
            _ => measured(p, 10.0, 50.0, "passed"),
        })
        .collect();
    let c = choose(&rows);
    for (pattern, why) in [
        ("window_attention", "wattn-256x12x49x32 failed"),
        ("gemm_residual", "measured slower"),
    ] {
        assert!(!c.apply.iter().any(|p| p == pattern), "{c:#?}");
        let p = c.patterns.iter().find(|p| p.pattern == pattern).unwrap();
        assert!(p.why_not.as_deref().unwrap().contains(why), "{p:?}");
    }
    assert!(c.apply.iter().any(|p| p == "fused_mlp"));
    // Proposals the patch layer has nothing for are listed, not applied.
    let dir = tempfile::tempdir().unwrap();
    let ops = [
        Op("aten::linear", "[[200704, 96], [49, 96]]", H, 52_000),
        Op("aten::softmax", "[[4096, 49], [], []]", H, 0),
        Op("aten::add", "[[200704, 96], [96], []]", H, 60_000),
        Op("aten::add", "[[200704, 96], [200704, 96], []]", H, 60_000),
        Op(
            "aten::linear",
            "[[8192, 768], [3072, 768], [3072]]",
            H,
            60_000,
        ),
        Op("aten::gelu", "[[8192, 3072], []]", H, 200_000),
    ];
    let a = advise(&handmade(dir.path(), "odd", &ops, true)).unwrap();
    let c = choose(
        &a.proposals
            .iter()
            .map(|p| measured(p, 10.0, 50.0, "passed"))
            .collect::<Vec<_>>(),
    );
    assert_eq!(c.apply, ["gemm_padded"], "{c:#?}");
    // Nor is an approximation: the patch layer's GEMM + GELU epilogue is the tanh form.
    for pattern in ["bias_residual", "gemm_gelu"] {
        let x = c.advised.iter().find(|x| x.pattern == pattern).unwrap();
        assert!(
            x.patch_pattern.is_none() && x.unpatchable.is_some(),
            "{x:?}"
        );
    }
}

/// A measured saving is never more than the chain's recorded time, and where the replayed eager
/// chain and the recorded one disagree by more than a quarter the saving uses the smaller and
/// says so (the MLP's replay runs the LayerNorm the recording gives to the window reverse).
#[test]
fn measured_savings_are_bounded_by_the_chain_and_say_what_they_use() {
    use fuseprof_fusion_advisor::{measured_saving, REPLAY_AGREEMENT};
    let swin = store_for("recordings/swin_t_infer_modules.sqlite.gz");
    let cfg = AdviseConfig {
        unprofitable: true,
        ..AdviseConfig::default()
    };
    let a = advise_file(&swin, &cfg).unwrap();
    let p = a
        .proposals
        .iter()
        .find(|p| p.pattern == "mlp")
        .or_else(|| a.proposals.first())
        .unwrap();
    let recorded_us = p.current_ns_per_step / p.instances_per_step / 1e3;
    // The replay agrees with the recording: the saving is the replay's.
    let agree = measured(p, recorded_us * 0.5, recorded_us * 1.1, "passed");
    let s = measured_saving(p, &agree.measured);
    assert!(s.note.is_none(), "{s:?}");
    assert!((s.eager_ns - recorded_us * 1.1e3).abs() < 1e-6);
    // The replay runs more than the recording holds (as the MLP's 498 us against 268): the
    // recorded time is used, and the saving cannot exceed the chain's time.
    let more = measured(p, 0.0, recorded_us * (2.0 + REPLAY_AGREEMENT), "passed");
    let s = measured_saving(p, &more.measured);
    assert!(
        s.note.as_deref().unwrap().contains("uses the recorded one"),
        "{s:?}"
    );
    assert!(s.ns_per_step <= p.current_ns_per_step + 1e-6, "{s:?}");
    assert!(
        (s.ns_per_step - p.current_ns_per_step).abs() < 1e-3,
        "{s:?}"
    );
    // The replay runs faster than the recording (a warm cache): the replay is used.
    let less = measured(p, recorded_us * 0.1, recorded_us * 0.5, "passed");
    let s = measured_saving(p, &less.measured);
    assert!(
        s.note.as_deref().unwrap().contains("uses the replayed one"),
        "{s:?}"
    );
    // The advice's total is the sum of these savings.
    let mut advice = a.clone();
    fuseprof_fusion_advisor::attach_measured(&mut advice, std::slice::from_ref(&more.measured));
    let total = advice.totals.measured_saving_ns_per_step.unwrap();
    assert!((total - p.current_ns_per_step).abs() < 1e-3, "{total}");
}

/// The window ops found in Swin-T as torchvision and Hugging Face write it, not only as timm
/// does: Hugging Face's SDPA with the bias and shifted-window mask as one additive term goes to
/// the window fMHA, its pad-then-roll partition and its reverse on [B, H*W, C] tokens to the
/// window kernels; torchvision's window attention, its partition (with the relative-position
/// bias gathered between its LayerNorm and its padding) and its reverse, whose copy is a reshape.
#[test]
fn swin_window_ops_are_found_in_torchvision_and_hugging_face_swin() {
    let kinds = |rec: &str| -> Vec<(String, String)> {
        let a = advise_file(&store_for(rec), &AdviseConfig::default()).unwrap();
        a.proposals
            .iter()
            .map(|p| (p.pattern.clone(), p.kernel.family().to_string()))
            .collect()
    };
    let hf = kinds("recordings/users/hf_swin_t.sqlite.gz");
    for want in [
        ("sdpa", "window_fmha"),
        ("window_partition", "ln_partition"),
        ("window_reverse", "window_reverse"),
        ("fused_mlp", "ln_mlp"),
        ("patch_embed", "patch_embed"),
    ] {
        assert!(
            hf.iter().any(|(p, k)| (p.as_str(), k.as_str()) == want),
            "Hugging Face Swin: no {want:?} in {hf:?}"
        );
    }
    let tv = kinds("recordings/users/tv_swin_t.sqlite.gz");
    for want in [
        ("window_attention", "window_fmha"),
        ("window_partition", "ln_partition"),
        ("window_reverse", "window_reverse"),
        ("fused_mlp", "ln_mlp"),
    ] {
        assert!(
            tv.iter().any(|(p, k)| (p.as_str(), k.as_str()) == want),
            "torchvision Swin: no {want:?} in {tv:?}"
        );
    }
}

/// Advice before kernels: the Swin-T training step's AdamW runs with `foreach` (nine list ops a
/// step and the GradScaler's unscaling) and is told `fused=True`, with the saving; ResNet-18's,
/// already fused, is told nothing.
#[test]
fn a_foreach_adam_step_is_told_to_fuse_and_a_fused_one_is_not() {
    let a = advise_file(
        &store_for("recordings/swin_t_train_step_shapes.sqlite.gz"),
        &AdviseConfig::default(),
    )
    .unwrap();
    let s = setting(&a, "optimizer-fused");
    // The ten ops' GPU time a step, and seven passes at half the cheapest two-list op.
    assert!(
        (s.current_ns_per_step - 1.108e6).abs() < 5e3,
        "{}",
        s.current_ns_per_step
    );
    assert!(
        (s.expected_ns_per_step - 7.0 * 100_860.0 / 2.0).abs() < 2e3,
        "{s:?}"
    );
    assert!((s.saving_ns_per_step - (s.current_ns_per_step - s.expected_ns_per_step)).abs() < 1.0);
    assert!(
        s.evidence.iter().any(|e| e.contains("_foreach_addcdiv_")),
        "{:?}",
        s.evidence
    );
    assert!(s.estimate.contains("unscaling"), "{}", s.estimate);
    assert!(s.change.contains("fused=True"));
    let text = fuseprof_fusion_advisor::render_text(&a, 5);
    assert!(
        text.contains("Before kernels") && text.contains("optimizer-fused"),
        "{text}"
    );
    // The text ranks settings and proposals together, the setting at its rank.
    assert!(text.contains("By saving per step, settings and kernel proposals together"));
    assert!(
        text.contains(&format!("#{} optimizer-fused", s.rank)),
        "{text}"
    );
    let r = advise_file(
        &store_for("recordings/users/tv_resnet18_train.sqlite.gz"),
        &AdviseConfig::default(),
    )
    .unwrap();
    assert!(
        r.settings.iter().all(|s| s.id != "optimizer-fused"),
        "{:?}",
        r.settings
    );
}

/// Every committed recording (`fixtures/recordings`, the users' scripts included), found on
/// disk so that a new one is not missed.
fn recordings() -> Vec<String> {
    let root = fuseprof_fixtures::path("recordings");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.to_string_lossy().to_string();
            if p.is_dir() {
                dirs.push(p);
            } else if name.ends_with(".sqlite.gz") || name.ends_with(".kineto.json.gz") {
                let rel = p.strip_prefix(root.parent().unwrap()).unwrap();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// The settings each recording is told, by id, and why. The recordings are AMP (or TF32) runs
/// of models written with PyTorch's own functions, so most rules are silent; what fires is
/// what the run shows.
fn expected_settings(rel: &str) -> Option<&'static [&'static str]> {
    const LAUNCH: &str = "launch-cuda-graphs";
    Some(match rel.rsplit('/').next().unwrap() {
        // No op ranges: nothing to advise on (advise refuses it).
        "gpu_test.sqlite.gz" => return None,
        // ViT's patch embedding is an NCHW fp16 convolution that cuDNN transposes each call.
        "vit_b16_infer_shapes.sqlite.gz" => &[LAUNCH, "conv-channels-last"],
        // foreach AdamW; GradScaler's .item() on found_inf drains the queue each step.
        "swin_t_train_step_shapes.sqlite.gz" => &[LAUNCH, "sync-in-step", "optimizer-fused"],
        // GPT-2's NewGELUActivation is the tanh GELU written out.
        "hf_gpt2.sqlite.gz" => &[LAUNCH, "handwritten-norms"],
        // Run without autocast: its linears are TF32.
        "timm_swin_s.sqlite.gz" => &[LAUNCH, "precision-bf16"],
        // NCHW ResNet-18: cuDNN transposes around every convolution.
        "tv_resnet18_train.sqlite.gz" => &[LAUNCH, "conv-channels-last"],
        _ => &[LAUNCH],
    })
}

/// All rules over every committed recording: each is silent unless the run shows its symptom
/// (the expected list says which, and why), what is said holds together (a saving no larger
/// than the time it comes from, evidence, a change), and the launch-bound saving, measured
/// under a tracer, says it is an upper bound.
#[test]
fn every_rule_over_every_committed_recording_is_silent_or_shows_its_symptom() {
    let all = recordings();
    assert!(all.len() >= 10, "{all:?}");
    for rel in all {
        let Some(expected) = expected_settings(&rel) else {
            continue;
        };
        let a = advise_file(&store_for(&rel), &AdviseConfig::default())
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let mut ids: Vec<&str> = a.settings.iter().map(|s| s.id.as_str()).collect();
        ids.sort_unstable();
        let mut want = expected.to_vec();
        want.sort_unstable();
        assert_eq!(ids, want, "{rel}: {:#?}", a.settings);
        for s in &a.settings {
            assert!(s.saving_ns_per_step > 0.0, "{rel} {s:?}");
            assert!(
                s.saving_ns_per_step <= s.current_ns_per_step + 1e-6,
                "{rel} {s:?}"
            );
            assert!(s.saving_pct_of_step >= AdviseConfig::default().min_saving_pct);
            assert!(!s.evidence.is_empty() && !s.change.is_empty() && !s.estimate.is_empty());
            if s.id == "launch-cuda-graphs" {
                // A share of the step's wall time, which a saving out of idle time stays in;
                // the tracer's cost is bounded from the run, or the figure says it is an
                // upper bound.
                assert_eq!(s.pct_of, "wall_time", "{rel}");
                assert!(s.saving_pct_of_step < 100.0, "{rel} {s:?}");
                assert!(
                    s.estimate.contains("for the tracer") || s.estimate.contains("upper bound"),
                    "{}",
                    s.estimate
                );
            }
        }
        // One ranking of settings and proposals, by saving.
        assert_eq!(
            a.ranking.len(),
            a.settings.len() + a.proposals.len(),
            "{rel}"
        );
        for w in a.ranking.windows(2) {
            assert!(w[0].saving_ns_per_step >= w[1].saving_ns_per_step, "{rel}");
        }
        for s in &a.settings {
            assert_eq!(a.ranking[s.rank - 1].id, s.id, "{rel}");
        }
    }
}

/// Every setting a real recording fires says where to look: its worst step is one of the run's
/// step windows, on the run's clock and in ms from the run's first record (the export's
/// origin), holding at least the mean per step of what the rule counts; and the names a
/// timeline search needs are ones the run recorded.
#[test]
fn every_setting_of_a_real_recording_names_its_worst_step_and_what_to_search() {
    let mut fired: Vec<String> = Vec::new();
    let mut all = recordings();
    all.push("kineto/hta_timeline_analysis_sampled_rank-0.json.gz".into());
    for rel in all {
        if expected_settings(&rel).is_none() {
            continue;
        }
        let path = store_for(&rel);
        let a = advise(&path).unwrap();
        let mut store = fuseprof_store::Store::open(&path).unwrap();
        let first_ns = store.info().unwrap().first_ns.unwrap();
        let t = fuseprof_analyzer::op_trace(&mut store, &Default::default()).unwrap();
        let c = &t.context;
        assert_eq!(c.origin_ns, first_ns, "{rel}");
        // Every name the run recorded that a rule could name.
        let mut known: std::collections::HashSet<&str> =
            t.kernel_names.iter().map(String::as_str).collect();
        known.extend(t.ops.iter().map(|o| o.name.as_str()));
        known.extend(c.annotations.iter().map(|a| a.name.as_str()));
        known.extend(c.syncs.iter().map(|s| s.name.as_str()));
        known.extend(c.syncs.iter().filter_map(|s| s.op.as_deref()));
        known.extend(
            c.timeline
                .iter()
                .flat_map(|d| d.launch_bound_kernels.iter().map(|k| k.0.as_str())),
        );
        known.insert("Memcpy HtoD (Pageable -> Device)");
        for s in &a.settings {
            fired.push(s.id.clone());
            let w = s
                .worst_step
                .as_ref()
                .unwrap_or_else(|| panic!("{rel} {s:#?}"));
            assert_eq!(c.windows[w.step], (w.start_ns, w.end_ns), "{rel} {}", s.id);
            assert!((w.start_ms - (w.start_ns - first_ns) as f64 / 1e6).abs() < 1e-9);
            assert!((w.end_ms - (w.end_ns - first_ns) as f64 / 1e6).abs() < 1e-9);
            // The worst step holds at least the mean; the launch rule counts the gaps of the
            // stretches (its current time holds their kernels too).
            let mean = if s.id == "launch-cuda-graphs" {
                s.saving_ns_per_step.min(w.symptom_ns)
            } else {
                s.current_ns_per_step
            };
            assert!(w.symptom_ns >= mean - 1.0, "{rel} {}: {w:?}", s.id);
            let (kernels, ops) = match s.id.as_str() {
                "sync-in-step" => (false, true),
                "input-pipeline" => (true, true),
                "launch-cuda-graphs" => (true, false),
                _ => (true, true),
            };
            assert_eq!(!s.kernels.is_empty(), kernels, "{rel} {s:#?}");
            assert_eq!(!s.ops.is_empty(), ops, "{rel} {s:#?}");
            for n in s.kernels.iter().chain(&s.ops) {
                assert!(known.contains(n.as_str()), "{rel} {}: {n}", s.id);
            }
            let see = s.where_to_look(3, 60).unwrap();
            assert!(see.starts_with(&format!("step {}, ", w.step)), "{see}");
        }
    }
    fired.sort_unstable();
    fired.dedup();
    assert_eq!(
        fired,
        [
            "conv-channels-last",
            "handwritten-norms",
            "input-pipeline",
            "launch-cuda-graphs",
            "optimizer-fused",
            "precision-bf16",
            "sync-in-step"
        ]
    );
}

/// The Swin-T training step's optimizer: its worst step's names are the foreach ops and the
/// kernels they launch, which a timeline search finds.
#[test]
fn the_foreach_optimizer_names_its_ops_and_kernels() {
    let a = advise(&store_for("recordings/swin_t_train_step_shapes.sqlite.gz")).unwrap();
    let s = setting(&a, "optimizer-fused");
    assert!(s
        .ops
        .iter()
        .all(|o| o.contains("_foreach_") || o.contains("_amp_")));
    assert!(
        s.kernels.iter().any(|k| k.contains("multi_tensor_apply")),
        "{:?}",
        s.kernels
    );
    let s = setting(&a, "sync-in-step");
    assert_eq!(
        s.ops[..2],
        ["aten::item", "cudaStreamSynchronize"],
        "{:?}",
        s.ops
    );
}

fn setting<'a>(a: &'a Advice, id: &str) -> &'a fuseprof_fusion_advisor::Setting {
    a.settings
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no {id} in {:#?}", a.settings))
}

/// Swin-S run in FP32 on an H200: its linears ran as TF32 (`nvjet_sm90_tst`), so autocast to
/// bf16 halves them at the same efficiency (TF32's ceiling is half the 16-bit one); TF32 is
/// not offered again.
#[test]
fn tf32_linears_of_a_real_run_are_told_to_autocast_and_amp_runs_are_not() {
    let a = advise(&store_for("recordings/users/timm_swin_s.sqlite.gz")).unwrap();
    let s = setting(&a, "precision-bf16");
    let ratio = s.expected_ns_per_step / s.current_ns_per_step;
    assert!((0.45..=0.55).contains(&ratio), "{s:#?}");
    assert!(s
        .evidence
        .iter()
        .any(|e| e.contains("tst") && e.contains("TF32")));
    assert!(s.change.contains("torch.autocast") && !s.change.contains("allow_tf32"));
    for rel in [
        "recordings/swin_t_train_step_shapes.sqlite.gz",
        "recordings/users/tv_resnet18_train.sqlite.gz",
    ] {
        let a = advise(&store_for(rel)).unwrap();
        assert!(a.settings.iter().all(|s| s.id != "precision-bf16"), "{rel}");
    }
}

/// GPT-2's tanh GELU, written out as eight ops in each of its 12 blocks.
#[test]
fn gpt2s_hand_written_gelu_is_told_to_use_f_gelu() {
    let a = advise(&store_for("recordings/users/hf_gpt2.sqlite.gz")).unwrap();
    let s = setting(&a, "handwritten-norms");
    assert!(s.title.contains("GELU (tanh)"), "{}", s.title);
    assert!(
        s.evidence[0].contains("mul -> pow -> mul -> add -> mul -> tanh -> add -> mul")
            && s.evidence[0].contains("12.0 a step"),
        "{:?}",
        s.evidence
    );
    assert_eq!(s.change, "F.gelu(x, approximate=\"tanh\")");
    // Eight passes become one: at most an eighth of the time stays.
    assert!(
        s.expected_ns_per_step < s.current_ns_per_step / 4.0,
        "{s:#?}"
    );
}

/// HTA's training rank: its `## data_load ##` range leaves the GPU idle part of the time.
#[test]
fn a_real_data_load_range_with_the_gpu_idle_is_told_about_loader_workers() {
    let a = advise(&store_for(
        "kineto/hta_timeline_analysis_sampled_rank-0.json.gz",
    ))
    .unwrap();
    let s = setting(&a, "input-pipeline");
    assert!(
        s.evidence[0].starts_with("## data_load ##"),
        "{:?}",
        s.evidence
    );
    assert!(s.change.contains("num_workers") && s.change.contains("pin_memory=True"));
    // Its step also copies from pageable memory (`Memcpy HtoD (Pageable -> Device)`, 1 to 5 KB
    // each): what stays is those copies at pinned speed, measured on the run's own pinned
    // copies of 512 to 768 KB.
    let pageable = s
        .evidence
        .iter()
        .find(|e| e.contains("from pageable memory"))
        .unwrap_or_else(|| panic!("{:?}", s.evidence));
    assert!(pageable.contains("GB/s achieved"), "{pageable}");
    assert!(
        s.estimate.contains("the run's own pinned copies"),
        "{}",
        s.estimate
    );
    assert!(
        s.expected_ns_per_step > 0.0 && s.expected_ns_per_step < s.current_ns_per_step,
        "{s:#?}"
    );
}

/// The Swin-T training step reads GradScaler's found_inf with `.item()`: the GPU idles after it.
#[test]
fn a_real_item_inside_the_step_is_found_with_the_idle_after_it() {
    let a = advise(&store_for("recordings/swin_t_train_step_shapes.sqlite.gz")).unwrap();
    let s = setting(&a, "sync-in-step");
    assert!(
        s.evidence[0].starts_with("cudaStreamSynchronize in aten::item"),
        "{:?}",
        s.evidence
    );
    assert!(s.change.contains(".item()"), "{}", s.change);
}

/// The transposes around NCHW convolutions, against the analysis's own kernel table: the
/// saving is their time (those launched by convolutions), per step.
#[test]
fn channels_last_saves_the_recorded_transposes() {
    for rel in [
        "recordings/users/tv_resnet18_train.sqlite.gz",
        "recordings/vit_b16_infer_shapes.sqlite.gz",
    ] {
        let path = store_for(rel);
        let a = advise(&path).unwrap();
        let s = setting(&a, "conv-channels-last");
        let an = fuseprof_analyzer::analyze_file(&path, &Default::default()).unwrap();
        let transposes: i64 = an
            .by_kernel
            .iter()
            .filter(|k| k.name.contains("nchwToNhwc") || k.name.contains("nhwcToNchw"))
            .map(|k| k.total_ns)
            .sum();
        let per_step = transposes as f64 / an.steps.steps.len().max(1) as f64;
        assert!(
            s.saving_ns_per_step > 0.0 && s.saving_ns_per_step <= per_step + 1.0,
            "{rel}"
        );
        assert!(s.estimate.contains("not estimated"), "{}", s.estimate);
    }
}

/// The launch-bound saving is the gaps of the analysis's launch-bound stretches.
#[test]
fn the_launch_bound_saving_is_inside_the_analysis_launch_bound_time() {
    let path = store_for("recordings/swin_t_infer_modules.sqlite.gz");
    let a = advise(&path).unwrap();
    let s = setting(&a, "launch-cuda-graphs");
    let an = fuseprof_analyzer::analyze_file(&path, &Default::default()).unwrap();
    let steps = an.steps.steps.len().max(1) as f64;
    let lb: i64 = an.timeline.iter().map(|d| d.launch_bound_ns).sum();
    let idle: i64 = an.timeline.iter().map(|d| d.idle_ns).sum();
    // The step scope holds what the whole run's timeline holds, or less.
    assert!(s.current_ns_per_step <= lb as f64 / steps + 1.0, "{s:#?}");
    assert!(s.saving_ns_per_step <= idle as f64 / steps + 1.0);
}

/// timm's Swin-S, recorded under the tracer: its launch-bound gaps alone come to more than the
/// step's GPU time, so the saving cannot be a share of it. It is at most the GPU's idle time
/// inside the steps and a share of the step's wall time below 100%; the tracer's cost per
/// host range, measured between the run's launches, cannot be told from the program's own per
/// op, so the figure is an upper bound with the lower one beside it.
#[test]
fn a_traced_swin_s_launch_saving_stays_inside_the_steps_idle_and_wall_time() {
    let path = store_for("recordings/users/timm_swin_s.sqlite.gz");
    let a = advise(&path).unwrap();
    let s = setting(&a, "launch-cuda-graphs");
    let mut store = fuseprof_store::Store::open(&path).unwrap();
    let t = fuseprof_analyzer::op_trace(&mut store, &Default::default()).unwrap();
    let c = &t.context;
    assert!(!c.windows.is_empty() && !c.launch_host_gaps.is_empty());
    let steps = t.steps as f64;
    let idle: i64 = c.windows.iter().map(|&(s, e)| c.idle_between(s, e)).sum();
    let wall: i64 = c.windows.iter().map(|&(s, e)| e - s).sum();
    let gaps: i64 = c.timeline.iter().map(|d| d.launch_bound_gap_ns).sum();
    // The recorded gaps exceed the step's GPU time: a share of it would pass 100%.
    assert!(gaps as f64 / steps > a.step_gpu_ns, "{s:#?}");
    assert!(s.saving_ns_per_step <= idle as f64 / steps + 1e-6, "{s:#?}");
    assert!(s.saving_ns_per_step <= gaps as f64 / steps + 1e-6, "{s:#?}");
    assert_eq!(s.pct_of, "wall_time");
    let pct = 100.0 * s.saving_ns_per_step / (wall as f64 / steps);
    assert!(
        (s.saving_pct_of_step - pct).abs() < 1e-6 && pct < 100.0,
        "{s:#?}"
    );
    // Thousands of ranges a step at a few us each: the bounds lie far apart.
    assert!(c.host_ranges as f64 / steps > 1_000.0);
    assert!(s.estimate.contains("for the tracer"), "{}", s.estimate);
    assert!(
        s.estimate.contains("an upper bound: at most"),
        "{}",
        s.estimate
    );
    let ranked = a.ranking.iter().find(|r| r.id == s.id).unwrap();
    assert_eq!(
        (ranked.saving_pct_of_step, ranked.pct_of.as_str()),
        (s.saving_pct_of_step, "wall_time")
    );
}

/// The window-attention chain with each kernel as long as its op's bytes estimated from shapes
/// take at 95% of `mem_bytes_per_s` (each under the 20 us the hand-made run gives an op, so no
/// two kernels overlap), and each op's estimated bytes (the reshape has no estimate: 5 us, and
/// 0 bytes here, which the check leaves out).
fn window_chain_at(mem_bytes_per_s: f64) -> (Vec<Op>, Vec<f64>) {
    let mut ops = window_chain("32", H);
    let mut bytes = Vec::new();
    for op in &mut ops {
        let dims: Vec<Vec<i64>> = serde_json::from_str(op.1).unwrap();
        let types: Vec<String> = serde_json::from_str(op.2).unwrap();
        let Some(e) = fuseprof_analyzer::headroom::estimate(op.0, &dims, Some(&types), None) else {
            assert_eq!(op.0, "aten::reshape");
            op.3 = 5_000;
            bytes.push(0.0);
            continue;
        };
        op.3 = (e.bytes / (0.95 * mem_bytes_per_s) * 1e9).round() as i64;
        assert!(op.3 > 0 && op.3 < 20_000, "{} {}", op.0, op.3);
        bytes.push(e.bytes);
    }
    (ops, bytes)
}

/// Stores DRAM-read counters into a hand-made run: one sample exactly over each op's kernel
/// (as `handmade` lays them out) holding `bytes[i]`.
fn record_kernel_bytes(path: &Path, ops: &[Op], bytes: &[f64]) {
    use fuseprof_store::{record_counters, CounterKind, CounterMetric, CounterSample};
    let samples: Vec<CounterSample> = ops
        .iter()
        .zip(bytes)
        .enumerate()
        .map(|(i, (op, &value))| {
            let start_ns = 1_000_000 + i as i64 * 20_000 + 3_000;
            CounterSample {
                metric_id: 1,
                start_ns,
                end_ns: start_ns + op.3,
                value,
            }
        })
        .collect();
    let metric = CounterMetric {
        id: 1,
        device_id: 0,
        name: "dram__bytes_read.sum".into(),
        quantity: "dram_read_bytes".into(),
        kind: CounterKind::Sum,
        unit: "byte".into(),
        method: "pm_sampling".into(),
        interval_ns: Some(20_000),
    };
    let report = record_counters(path, &[metric], &samples).unwrap();
    assert_eq!((report.kernel_values, report.shared), (ops.len(), 0));
}

/// A memory-bound chain whose kernels measure the bytes the shapes say at 95% of peak
/// bandwidth is confirmed and its confidence raised; the same chain measuring a hundredth of
/// those bytes (compute-bound by the ridge point) is contradicted, said so, and lowered. A run
/// without counters has no check at all. On an A100 (the calibration ran on an H200) the
/// confidence starts low, with room to rise; on an H100 it starts high, with room to fall.
#[test]
fn counters_raise_or_lower_a_proposals_confidence() {
    let dir = tempfile::tempdir().unwrap();
    let a100 = "NVIDIA A100-SXM4-80GB";
    let on =
        |name: &str, ops: &[Op], device: &str| handmade_on(dir.path(), name, ops, true, device);
    let plain = advise(&on("plain", &window_chain("32", H), a100)).unwrap();
    let bw = plain.ceiling.as_ref().unwrap().mem_bytes_per_s;
    let (ops, bytes) = window_chain_at(bw);
    let levels = ["low", "medium", "high"];
    let level = |c: &str| levels.iter().position(|l| *l == c).unwrap();

    let path = on("confirmed", &ops, a100);
    let before = advise(&path).unwrap();
    assert_eq!(before.proposals.len(), 1, "{}", summary(&before));
    let p0 = &before.proposals[0];
    assert_eq!(p0.counters, None);
    let json = serde_json::to_string(&before).unwrap();
    assert!(!json.contains("\"counters\""), "absent without counters");
    assert!(
        level(&p0.confidence) < 2,
        "room to raise: {}",
        p0.confidence
    );

    record_kernel_bytes(&path, &ops, &bytes);
    let after = advise(&path).unwrap();
    let p = &after.proposals[0];
    let c = p.counters.as_ref().expect("a check from the counters");
    assert_eq!(c.estimated_bound, "memory");
    assert_eq!(c.measured_bound.as_deref(), Some("memory"));
    assert_eq!(c.verdict, "confirms", "{}", c.note);
    let total: f64 = bytes.iter().sum();
    assert!((c.measured_dram_bytes.unwrap() - total).abs() < 1.0);
    assert!((c.estimated_bytes - total).abs() < 1.0);
    assert!((c.bandwidth_pct_of_peak.unwrap() - 95.0).abs() < 0.5);
    assert_eq!(c.coverage_pct, 100.0);
    assert_eq!(level(&p.confidence), level(&p0.confidence) + 1);
    assert_eq!(c.confidence_before.as_deref(), Some(p0.confidence.as_str()));
    let text = fuseprof_fusion_advisor::render_text(&after, 10);
    assert!(text.contains("counters (confirms"), "{text}");
    let json: serde_json::Value = serde_json::to_value(&after).unwrap();
    assert_eq!(json["proposals"][0]["counters"]["verdict"], "confirms");

    // The same chain measuring a hundredth of the bytes: its FLOPs per measured byte lie
    // above the ridge point, so it measures compute-bound.
    let h100 = "NVIDIA H100 80GB HBM3";
    let bw = advise(&on("plain_h100", &window_chain("32", H), h100))
        .unwrap()
        .ceiling
        .unwrap()
        .mem_bytes_per_s;
    let (ops, bytes) = window_chain_at(bw);
    let path = on("contradicted", &ops, h100);
    let p0 = advise(&path).unwrap().proposals[0].clone();
    assert_eq!(p0.confidence, "high");
    let few: Vec<f64> = bytes.iter().map(|b| b / 100.0).collect();
    record_kernel_bytes(&path, &ops, &few);
    let a = advise(&path).unwrap();
    let p = &a.proposals[0];
    let c = p.counters.as_ref().unwrap();
    assert_eq!(c.verdict, "contradicts", "{}", c.note);
    assert_eq!(c.measured_bound.as_deref(), Some("compute"));
    assert_eq!(p.confidence, "medium");
    assert!(p
        .confidence_notes
        .iter()
        .any(|n| n.starts_with("measured compute-bound, not memory-bound as estimated")));
    let text = fuseprof_fusion_advisor::render_text(&a, 10);
    assert!(text.contains("counters (contradicts"), "{text}");
}
