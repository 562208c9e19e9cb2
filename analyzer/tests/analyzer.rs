//! The analyzer on real traces (fixtures/, and the collector's recordings when present) and on
//! small hand-made edge cases: snapshots of what users see, invariants on every fixture.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use fuseprof_analyzer::{
    analyze, diff, render_diff_text, render_text, Analysis, AnalyzeConfig, Class, Error, GroupBy,
    Rules,
};
use fuseprof_store::{
    Api, ApiCall, CreateOptions, Kernel, Memop, MemopKind, Range, RangeKind, RunInfo, Store, Writer,
};

/// Imported stores, made once per test process.
fn store_for(rel: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static DONE: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let mut done = DONE.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = done.get(rel) {
        return p.clone();
    }
    let input = fuseprof_fixtures::path(rel);
    let out = if rel.ends_with(".sqlite.gz") {
        // The collector's own recordings: a store, compressed for the repository.
        let out = dir.path().join(format!("{}.sqlite", stem(rel)));
        let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(&input).unwrap());
        let mut f = std::fs::File::create(&out).unwrap();
        std::io::copy(&mut gz, &mut f).unwrap();
        out
    } else if rel.ends_with(".sqlite") && Store::open(&input).is_ok() {
        input
    } else {
        let out = dir.path().join(format!("{}.sqlite", stem(rel)));
        fuseprof_collector::import::import(
            &input,
            &out,
            &fuseprof_collector::import::ImportOptions::default(),
        )
        .unwrap_or_else(|e| panic!("importing {rel}: {e}"));
        out
    };
    done.insert(rel.to_string(), out.clone());
    out
}

fn stem(rel: &str) -> String {
    let name = Path::new(rel)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    name.split('.').next().unwrap().to_string()
}

/// Runs under fixtures/recordings: the collector's stores (`.sqlite`, `.sqlite.gz`) and
/// PyTorch-profiler traces (`.json`, `.json.gz`); manifests and key_averages files are not runs.
fn recordings() -> Vec<String> {
    let dir = fuseprof_fixtures::path("recordings");
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let is_run = [".sqlite", ".sqlite.gz", ".json", ".json.gz"]
            .iter()
            .any(|ext| name.ends_with(ext));
        let is_side_file = ["key_averages", "manifest", "expected"]
            .iter()
            .any(|w| name.contains(w));
        if is_run && !is_side_file {
            out.push(format!("recordings/{name}"));
        }
    }
    out.sort();
    out
}

fn all_fixtures() -> Vec<String> {
    let mut v: Vec<String> = fuseprof_fixtures::KINETO
        .iter()
        .chain(fuseprof_fixtures::NSYS)
        .map(|s| s.to_string())
        .collect();
    v.extend(recordings());
    v
}

fn run(rel: &str, cfg: &AnalyzeConfig) -> Analysis {
    let mut store = Store::open(&store_for(rel)).unwrap();
    analyze(&mut store, cfg).unwrap_or_else(|e| panic!("analyzing {rel}: {e}"))
}

/// The invariants every analysis must keep.
fn check_invariants(rel: &str, a: &Analysis, store_kernel_ns: Option<i64>) {
    let t = &a.totals;
    assert_eq!(
        t.attributed_ns + t.unattributed_ns,
        t.gpu_ns,
        "{rel}: attributed + unattributed"
    );
    assert_eq!(
        t.kernel_ns + t.memcpy_ns + t.memset_ns,
        t.gpu_ns,
        "{rel}: kinds"
    );
    if let Some(k) = store_kernel_ns {
        assert_eq!(t.kernel_ns, k, "{rel}: kernel time = the store's");
    }
    assert_eq!(a.unattributed.ns, t.unattributed_ns, "{rel}");
    assert_eq!(
        a.unattributed.no_launch_record + a.unattributed.outside_ranges,
        a.unattributed.records,
        "{rel}"
    );
    let sum = |v: Vec<i64>| v.into_iter().sum::<i64>();
    assert_eq!(
        sum(a.by_class.iter().map(|r| r.total_ns).collect()),
        t.gpu_ns,
        "{rel}: classes"
    );
    assert_eq!(
        sum(a.by_kernel.iter().map(|r| r.total_ns).collect()),
        t.gpu_ns,
        "{rel}: kernels"
    );
    assert_eq!(
        sum(a.by_op.iter().map(|r| r.self_ns).collect()),
        t.gpu_ns,
        "{rel}: ops"
    );
    assert_eq!(
        sum(a.by_shape.iter().map(|r| r.self_ns).collect()),
        t.gpu_ns,
        "{rel}: shapes"
    );
    assert_eq!(
        sum(a.by_module.iter().map(|r| r.self_ns).collect()),
        t.gpu_ns,
        "{rel}: modules"
    );
    let outside = a
        .by_op
        .iter()
        .find(|r| r.role.is_none())
        .map_or(0, |r| r.self_ns);
    assert_eq!(
        outside, t.unattributed_ns,
        "{rel}: unattributed reported as a row"
    );
    let records: u64 = a.by_class.iter().map(|r| r.count).sum();
    assert_eq!(records, t.kernels + t.memcpys + t.memsets, "{rel}");
    for r in &a.by_op {
        assert!(
            r.self_ns >= 0 && r.total_ns >= r.self_ns,
            "{rel}: op {} self/total",
            r.name
        );
        assert!(r.gap_before_ns >= 0, "{rel}");
    }
    for r in &a.by_kernel {
        assert!(
            r.min_ns >= 0 && r.min_ns <= r.max_ns,
            "{rel}: kernel {}",
            r.name
        );
    }
    for d in &a.timeline {
        assert!(
            d.span_ns >= 0 && d.busy_ns >= 0 && d.idle_ns >= 0 && d.overlap_ns >= 0,
            "{rel}"
        );
        assert_eq!(
            d.busy_ns + d.idle_ns,
            d.span_ns,
            "{rel}: device {}",
            d.device
        );
        assert_eq!(
            d.gap_ns.iter().sum::<i64>(),
            d.idle_ns,
            "{rel}: gaps sum to idle"
        );
        assert!(d.launch_bound_ns <= d.span_ns, "{rel}");
    }
    let dev_records: u64 = a.timeline.iter().map(|d| d.records).sum();
    assert_eq!(
        dev_records, records,
        "{rel}: every record on a device timeline"
    );
    let step_gpu: i64 = a.steps.steps.iter().map(|s| s.gpu_ns).sum();
    assert!(
        step_gpu <= t.gpu_ns || a.step.is_some(),
        "{rel}: steps hold at most all GPU time"
    );
    for s in &a.steps.steps {
        assert!(s.wall_ns >= 0 && s.gpu_ns >= 0, "{rel}: step {}", s.index);
    }
    for h in &a.headroom.rows {
        assert!(
            h.floor_ns >= 0 && h.headroom_ns >= 0 && h.headroom_ns <= h.gpu_ns,
            "{rel}"
        );
    }
}

/// What the per-rank figures of a distributed run must keep.
fn check_rank_invariants(rel: &str, a: &Analysis) {
    let Some(r) = &a.ranks else { return };
    let comm_class: i64 = a
        .by_class
        .iter()
        .filter(|c| c.class == Class::Communication)
        .map(|c| c.total_ns)
        .sum();
    let mut comm = 0;
    let mut kernels = 0;
    for x in &r.ranks {
        assert_eq!(
            x.compute_ns + x.comm_ns,
            x.kernel_ns,
            "{rel}: rank {}",
            x.rank
        );
        assert_eq!(
            x.comm_wait_ns + x.comm_transfer_ns + x.comm_unmatched_ns,
            x.comm_ns,
            "{rel}: rank {} wait + transfer + unmatched",
            x.rank
        );
        assert!(x.comm_wait_ns >= 0 && x.comm_transfer_ns >= 0, "{rel}");
        assert!(x.overlap_ns >= 0 && x.overlap_ns <= x.comm_ns, "{rel}");
        comm += x.comm_ns;
        kernels += x.kernel_ns;
    }
    // Every kernel belongs to one rank here.
    assert_eq!(kernels, a.totals.kernel_ns, "{rel}: ranks' kernels");
    assert_eq!(
        comm, comm_class,
        "{rel}: ranks' comm = the communication class"
    );
    let by_kind: i64 = r.collectives.iter().map(|c| c.total_ns).sum();
    assert_eq!(by_kind, comm, "{rel}: collectives by kind");
    for c in &r.collectives {
        assert_eq!(
            c.wait_ns + c.transfer_ns + c.unmatched_ns,
            c.total_ns,
            "{rel}"
        );
    }
    for s in &r.steps {
        assert_eq!(s.wall_ns.len(), r.ranks.len(), "{rel}");
        let walls: Vec<i64> = s.wall_ns.iter().flatten().copied().collect();
        let max = walls.iter().max().copied().unwrap_or(0);
        let slowest = r
            .ranks
            .iter()
            .position(|x| x.rank == s.slowest_rank)
            .unwrap();
        assert_eq!(s.wall_ns[slowest], Some(max), "{rel}: slowest rank");
        assert_eq!(s.spread_ns, max - walls.iter().min().copied().unwrap_or(0));
    }
}

/// The two HTA ranks merged into one run, made once per test process.
fn hta_ranks_store() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let inputs: Vec<PathBuf> = fuseprof_fixtures::KINETO_RANKS
            .iter()
            .map(|p| fuseprof_fixtures::path(p))
            .collect();
        fuseprof_collector::import::ranks::import_ranks(
            &inputs,
            &dir.path().join("hta_ranks.sqlite"),
            &fuseprof_collector::import::ImportOptions::default(),
        )
        .unwrap();
        dir
    });
    dir.path().join("hta_ranks.sqlite")
}

#[test]
fn two_ranks_report_steps_waiting_transfer_and_overlap() {
    let mut store = Store::open(&hta_ranks_store()).unwrap();
    let cfg = AnalyzeConfig::default();
    let a = analyze(&mut store, &cfg).unwrap();
    check_invariants("hta ranks", &a, None);
    check_rank_invariants("hta ranks", &a);
    let r = a.ranks.as_ref().expect("a ranks section");
    assert_eq!(r.reference_rank, 0);
    let ranks: Vec<i64> = r.ranks.iter().map(|x| x.rank).collect();
    assert_eq!(ranks, [0, 1]);
    assert!(r.ranks[0].pids.contains(&4037));
    assert_eq!(r.ranks[1].devices, [1]);
    // Both ranks' ProfilerStep#551 and #552, matched by position.
    assert!(r.ranks.iter().all(|x| x.steps == 2));
    assert_eq!(r.steps.len(), 2);
    // Rank 0's collectives waited for rank 1 (tens of ms), rank 1's hardly: rank 1 is the
    // straggler, and the slower rank in both steps.
    assert!(r.ranks[0].comm_wait_ns > 10_000_000, "{:?}", r.ranks[0]);
    assert!(r.ranks[1].comm_wait_ns < 1_000_000, "{:?}", r.ranks[1]);
    assert_eq!(r.ranks[0].comm_transfer_ns, r.ranks[1].comm_transfer_ns);
    for s in &r.steps {
        assert_eq!(s.slowest_rank, 1);
        assert_eq!(s.straggler_rank, Some(1));
    }
    // Every collective of this trace is launched within one of the two steps: the steps'
    // waiting adds up to each rank's, and rank 0 waits in both.
    for (k, x) in r.ranks.iter().enumerate() {
        let by_step: i64 = r.steps.iter().map(|s| s.comm_wait_ns[k].unwrap()).sum();
        assert_eq!(by_step, x.comm_wait_ns, "rank {}", x.rank);
    }
    assert!(r
        .steps
        .iter()
        .all(|s| s.comm_wait_ns[0].unwrap() > 1_000_000));
    assert_eq!(r.collectives.len(), 1);
    assert_eq!(r.collectives[0].groups, 5);
    let text = render_text(&a, &cfg);
    let section = &text[text.find("Ranks: 2").expect("the ranks section")..];
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "line wider than 100 columns: {line}"
        );
    }
    insta::assert_snapshot!("text_ranks_hta_trace_filter", section);
    // The document reads back as what was written; single-rank documents have no `ranks`.
    let back: Analysis = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back, a);
    let single = run(fuseprof_fixtures::KINETO[1], &cfg);
    assert!(serde_json::to_value(&single)
        .unwrap()
        .get("ranks")
        .is_none());
}

/// A JSON document with every table cut to its first rows, so snapshots stay readable.
fn trimmed_json(a: &Analysis, rows: usize) -> serde_json::Value {
    let mut v = serde_json::to_value(a).unwrap();
    for key in ["by_op", "by_shape", "by_module", "by_kernel", "by_class"] {
        if let Some(arr) = v[key].as_array_mut() {
            arr.truncate(rows);
        }
    }
    for key in ["steps", "rows"] {
        let parent = if key == "rows" { "headroom" } else { "steps" };
        if let Some(arr) = v[parent][key].as_array_mut() {
            arr.truncate(rows);
        }
    }
    file_names_only(&mut v);
    v
}

/// Source paths reduced to their file names: the snapshots must not depend on where the
/// checkout is.
fn file_names_only(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if k == "source_path" {
                    if let Some(p) = x.as_str() {
                        let name = std::path::Path::new(p)
                            .file_name()
                            .map_or(p.to_string(), |n| n.to_string_lossy().into_owned());
                        *x = serde_json::Value::String(name);
                    }
                } else {
                    file_names_only(x);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(file_names_only),
        _ => {}
    }
}

#[test]
fn invariants_hold_on_every_fixture() {
    for rel in all_fixtures() {
        let kernel_ns = Store::open(&store_for(&rel))
            .unwrap()
            .info()
            .unwrap()
            .kernel_time_ns;
        let a = run(&rel, &AnalyzeConfig::default());
        check_invariants(&rel, &a, Some(kernel_ns));
        check_rank_invariants(&rel, &a);
        // Every step on its own keeps them too, and its totals are the step row's.
        for k in 0..a.steps.steps.len().min(3) {
            let cfg = AnalyzeConfig {
                step: Some(k),
                ..AnalyzeConfig::default()
            };
            let s = run(&rel, &cfg);
            check_invariants(&rel, &s, None);
            assert_eq!(s.totals.gpu_ns, a.steps.steps[k].gpu_ns, "{rel}: step {k}");
            assert_eq!(
                s.steps, a.steps,
                "{rel}: steps are always over the whole run"
            );
        }
    }
}

#[test]
fn text_and_json_snapshots_of_every_fixture() {
    for rel in all_fixtures() {
        let name = stem(&rel);
        let cfg = AnalyzeConfig::default();
        let a = run(&rel, &cfg);
        let text = render_text(&a, &cfg);
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{rel}: line wider than 100 columns: {line}"
            );
        }
        insta::assert_snapshot!(format!("text_{name}"), text);
        insta::assert_json_snapshot!(format!("json_{name}"), trimmed_json(&a, 12));
        // The document reads back as what was written.
        let back: Analysis = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a, "{rel}: JSON round trip");
    }
}

#[test]
fn every_table_snapshot_on_the_richest_fixtures() {
    let mut richest: Vec<String> = [
        "kineto/hta_timeline_analysis_sampled_rank-0.json.gz",
        "kineto/hta_critical_path_alexnet_trace.json.gz",
        "nsys/nsysai_mfu_2gpu_before.sqlite",
    ]
    .map(String::from)
    .to_vec();
    // The collector's H200 recordings with module ranges and with shapes, once they exist.
    for rec in recordings() {
        if rec.contains("modules") || rec.contains("shapes") {
            richest.push(rec);
        }
    }
    for rel in richest.iter().map(|s| s.as_str()) {
        for (by, label) in [
            (GroupBy::Shape, "shape"),
            (GroupBy::Module, "module"),
            (GroupBy::Kernel, "kernel"),
            (GroupBy::Class, "class"),
        ] {
            let cfg = AnalyzeConfig {
                by,
                top: 10,
                step: None,
            };
            let a = run(rel, &cfg);
            insta::assert_snapshot!(format!("by_{label}_{}", stem(rel)), render_text(&a, &cfg));
        }
    }
    let cfg = AnalyzeConfig {
        step: Some(1),
        ..AnalyzeConfig::default()
    };
    let rel = "kineto/hta_timeline_analysis_sampled_rank-0.json.gz";
    insta::assert_snapshot!("step_1_timeline", render_text(&run(rel, &cfg), &cfg));
}

#[test]
fn diff_snapshots_of_the_real_pairs() {
    for (before, after) in [
        (
            "kineto/hta_trace_compare_base_base.json.gz",
            "kineto/hta_trace_compare_test_test.json.gz",
        ),
        (
            "nsys/nsysai_mfu_2gpu_before.sqlite",
            "nsys/nsysai_mfu_2gpu_after.sqlite",
        ),
    ] {
        let cfg = AnalyzeConfig::default();
        let (b, a) = (run(before, &cfg), run(after, &cfg));
        let d = diff(&b, &a);
        // Per-row changes add up to the total change.
        let rows: f64 = d.kernels.iter().map(|r| r.delta_ns).sum();
        assert!(
            (rows - d.delta_ns).abs() < 1.0,
            "{before}: kernel deltas sum to the total"
        );
        let rows: f64 = d.ops.iter().map(|r| r.delta_ns).sum();
        assert!(
            (rows - d.delta_ns).abs() < 1.0,
            "{before}: op deltas sum to the total"
        );
        insta::assert_snapshot!(format!("diff_{}", stem(before)), render_diff_text(&d, 10));
        insta::assert_json_snapshot!(format!("diff_json_{}", stem(before)), {
            let mut v = serde_json::to_value(&d).unwrap();
            for key in ["ops", "shapes", "kernels"] {
                v[key].as_array_mut().unwrap().truncate(8);
            }
            v
        });
        // A run against itself: nothing changes.
        let same = diff(&b, &b);
        assert_eq!(same.delta_ns, 0.0);
        assert!(same
            .kernels
            .iter()
            .all(|r| r.status == fuseprof_analyzer::DiffStatus::Same));
    }
}

#[test]
fn real_kernel_names_classify_as_expected() {
    let rules = Rules::builtin();
    let mut seen = std::collections::BTreeMap::new();
    for rel in all_fixtures() {
        let mut store = Store::open(&store_for(&rel)).unwrap();
        let strings = store.strings().unwrap();
        store
            .for_each_kernel(|k| {
                let name = strings.get(k.name).to_string();
                let class = rules.classify(&name, &Default::default());
                seen.insert(name, class);
            })
            .unwrap();
    }
    let listing: String = seen
        .iter()
        .map(|(n, c)| {
            format!(
                "{:<14} {}\n",
                c.as_str(),
                n.chars().take(160).collect::<String>()
            )
        })
        .collect();
    insta::assert_snapshot!("classified_kernel_names", listing);
    let expect = [
        ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", Class::Gemm),
        ("ampere_sgemm_32x32_sliced1x4_tn", Class::Gemm),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4::Params)", Class::Gemm),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel__5x_cudnn", Class::Conv),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", Class::Communication),
        ("triton_poi_fused_add_cos_sin_0", Class::Elementwise),
        ("void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)", Class::Normalization),
        ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, (unsigned long)3>>(int, T2, T3)", Class::Elementwise),
        ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", Class::CopyLayout),
        ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, (int)4, (int)4>>(T3)", Class::Reduction),
        ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", Class::Gemm),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)", Class::Softmax),
        ("void at::native::roll_cuda_kernel<c10::Half>(c10::Half const*, c10::Half*, long, long, long, long, long, long)", Class::CopyLayout),
        ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t>>(flash::Flash_fwd_params)", Class::Attention),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]>(int, T1, T2)", Class::CopyLayout),
    ];
    for (name, class) in expect {
        assert_eq!(rules.classify(name, &Default::default()), class, "{name}");
    }
}

#[test]
fn rules_are_data_and_bad_rules_say_where() {
    let r = Rules::parse("gemm prefix nvjet\nconv contains fprop threads>= 128\n").unwrap();
    assert_eq!(r.classify("nvjet_x", &Default::default()), Class::Gemm);
    let shape = fuseprof_analyzer::classify::LaunchShape {
        grid: Some([1, 1, 1]),
        block: Some([256, 1, 1]),
        smem_bytes: None,
    };
    assert_eq!(r.classify("sm80_fprop", &shape), Class::Conv);
    assert_eq!(r.classify("sm80_fprop", &Default::default()), Class::Other);
    let e = Rules::parse("# c\nmatrix contains mm\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "classification rules, line 2: unknown class \"matrix\""
    );
    let e = Rules::parse("gemm threads>= many\n").unwrap_err();
    assert!(e.to_string().contains("line 1"), "{e}");
    assert!(Rules::parse("gemm prefix\n").is_err());
}

#[test]
fn nvtx_op_names_parse() {
    use fuseprof_analyzer::ops::{parse_range_name, step_family};
    let p = parse_range_name(
        "aten::addmm, seq = 12, sizes = [[256], [2048, 6948], []], input_op_ids = [1, 2]",
    );
    assert_eq!(p.name, "aten::addmm");
    assert_eq!(p.sizes, Some("[[256], [2048, 6948], []]"));
    assert!(p.has_fields);
    let p = parse_range_name("aten::empty, op_id = 990346");
    assert_eq!((p.name, p.sizes, p.has_fields), ("aten::empty", None, true));
    let p = parse_range_name("FSDP::pre_forward (blocks.3, x)");
    assert_eq!(
        (p.name, p.has_fields),
        ("FSDP::pre_forward (blocks.3, x)", false)
    );
    assert_eq!(
        step_family("ProfilerStep#551").as_deref(),
        Some("ProfilerStep#N")
    );
    assert_eq!(step_family("train_step 3").as_deref(), Some("train_step N"));
    assert_eq!(step_family("Optimizer.step#EMAOptimizer.step"), None);
}

#[test]
fn headroom_estimates_follow_the_shapes() {
    use fuseprof_analyzer::headroom::estimate;
    let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let e = estimate(
        "aten::mm",
        &[vec![4096, 4096], vec![4096, 4096]],
        Some(&t(&["c10::BFloat16", "c10::BFloat16"])),
        None,
    )
    .unwrap();
    assert_eq!(e.flops, 2.0 * 4096f64.powi(3));
    assert_eq!(e.bytes, 3.0 * 4096.0 * 4096.0 * 2.0);
    let e = estimate(
        "aten::linear",
        &[vec![64, 3136, 96], vec![288, 96], vec![288]],
        Some(&t(&["c10::Half", "c10::Half", "c10::Half"])),
        None,
    )
    .unwrap();
    assert_eq!(e.flops, 2.0 * 64.0 * 3136.0 * 96.0 * 288.0);
    let e = estimate(
        "aten::add",
        &[vec![200704, 96], vec![200704, 96], vec![]],
        Some(&t(&["float", "float", "Scalar"])),
        None,
    )
    .unwrap();
    assert_eq!(e.bytes, 3.0 * 200704.0 * 96.0 * 4.0);
    let e = estimate(
        "aten::copy_",
        &[vec![10], vec![10], vec![]],
        Some(&t(&["c10::Half", "float", ""])),
        None,
    )
    .unwrap();
    assert_eq!(e.bytes, 10.0 * 6.0);
    assert!(estimate("aten::view", &[vec![10]], None, None).is_none());
    let e = estimate("aten::softmax", &[vec![8, 49, 49]], None, None).unwrap();
    assert!(e.assumptions.iter().any(|a| a.contains("dtype unknown")));
}

// ---- hand-made edge cases ----

fn kernel(name: fuseprof_store::StrId, start: i64, end: i64, corr: Option<i64>) -> Kernel {
    Kernel {
        start_ns: start,
        end_ns: end,
        device_id: 0,
        stream_id: 7,
        pid: Some(1),
        correlation_id: corr,
        external_id: None,
        name,
        grid: Some([1, 1, 1]),
        block: Some([128, 1, 1]),
        registers_per_thread: None,
        static_smem_bytes: None,
        dynamic_smem_bytes: None,
        graph_id: None,
    }
}

fn launch(w: &mut Writer, corr: i64, start: i64, name: &str) {
    launch_on(w, 1, corr, start, name);
}

/// A launch call of 5 ns on thread `tid` of process 1.
fn launch_on(w: &mut Writer, tid: i64, corr: i64, start: i64, name: &str) {
    let n = w.intern(name);
    w.api_call(ApiCall {
        api: Api::Runtime,
        start_ns: start,
        end_ns: start + 5,
        pid: 1,
        tid,
        correlation_id: Some(corr),
        external_id: None,
        name: n,
        return_code: None,
    })
    .unwrap();
}

fn op(w: &mut Writer, name: &str, start: i64, end: Option<i64>) {
    let n = w.intern(name);
    let mut r = Range::new(RangeKind::CpuOp, n, 1, 1, start);
    r.end_ns = end;
    w.range(r).unwrap();
}

fn finish(w: Writer) {
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
}

fn analyze_path(p: &Path) -> fuseprof_analyzer::Result<Analysis> {
    fuseprof_analyzer::analyze_file(p, &AnalyzeConfig::default())
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let p = fuseprof_fixtures::path("handmade/newer_schema_v99.sqlite");
    let e = analyze_path(&p).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Store(fuseprof_store::Error::NewerSchema { found: 99, .. })
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("written by a newer fuseprof (store schema 99"),
        "{e}"
    );
}

#[test]
fn an_empty_run_is_an_error_that_says_what_to_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    op(&mut w, "aten::mm", 0, Some(10));
    finish(w);
    let e = analyze_path(&p).unwrap_err();
    assert!(matches!(e, Error::EmptyRun { .. }));
    assert!(e.to_string().contains("no GPU work"), "{e}");
}

#[test]
fn kernels_without_ranges_are_reported_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("noranges.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    let k = w.intern(
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
    );
    launch(&mut w, 1, 0, "cudaLaunchKernel");
    w.kernel(kernel(k, 100, 200, Some(1))).unwrap();
    w.kernel(kernel(k, 300, 450, None)).unwrap();
    finish(w);
    let a = analyze_path(&p).unwrap();
    check_invariants("noranges", &a, Some(250));
    assert_eq!(a.totals.unattributed_ns, 250);
    assert_eq!(a.unattributed.outside_ranges, 1);
    assert_eq!(a.unattributed.no_launch_record, 1);
    assert_eq!(a.by_op[0].name, "(outside any range)");
    assert!(a.notes.iter().any(|n| n.contains("no ranges")));
    insta::assert_snapshot!(
        "text_handmade_no_ranges",
        render_text(&a, &AnalyzeConfig::default())
    );
}

/// Kineto times ops to the microsecond, so an op and the one it calls often share their start
/// and end; the trace lists the caller first. When a run's ranges come in runs per thread
/// (not in time order overall), each such pair still nests as listed: the kernels go to the
/// callee.
#[test]
fn ops_with_the_same_times_nest_in_the_order_listed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("same_times.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    let k = w.intern("nvjet_tst_128x64");
    let (outer, inner) = (w.intern("aten::matmul"), w.intern("aten::mm"));
    for i in 0..400i64 {
        // Runs of ten pairs per thread, the two threads in turn.
        let tid = 1 + (i / 10) % 2;
        let s = 1_000 * i;
        for name in [outer, inner] {
            let mut r = Range::new(RangeKind::CpuOp, name, 1, tid, s);
            r.end_ns = Some(s + 100);
            w.range(r).unwrap();
        }
        launch_on(&mut w, tid, i + 1, s + 10, "cudaLaunchKernel");
        w.kernel(kernel(k, s + 20, s + 30, Some(i + 1))).unwrap();
    }
    finish(w);
    let a = analyze_path(&p).unwrap();
    check_invariants("same_times", &a, Some(4_000));
    let by: HashMap<&str, i64> = a
        .by_op
        .iter()
        .map(|r| (r.name.as_str(), r.self_ns))
        .collect();
    assert_eq!(by.get("aten::mm"), Some(&4_000), "{by:?}");
    assert!(by.get("aten::matmul").is_none_or(|&ns| ns == 0), "{by:?}");
}

#[test]
fn ranges_that_never_close_and_reversed_times_are_handled() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("odd.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    let k = w.intern("nvjet_tst_128x64");
    // Written out of time order on purpose.
    launch(&mut w, 3, 950, "cudaLaunchKernel");
    w.kernel(kernel(k, 1_000, 1_100, Some(3))).unwrap();
    op(&mut w, "aten::mm", 900, None); // never closes
    op(&mut w, "my_block", 0, Some(800));
    op(&mut w, "aten::addmm", 10, Some(900)); // overlaps its parent's end
    op(&mut w, "aten::bad", 500, Some(400)); // ends before it starts
    launch(&mut w, 1, 20, "cudaLaunchKernel");
    w.kernel(kernel(k, 60, 40, Some(1))).unwrap(); // ends before it starts
    launch(&mut w, 2, 850, "cudaLaunchKernel"); // after my_block closed, inside the clipped addmm? no: clipped at 800
    w.kernel(kernel(k, 860, 900, Some(2))).unwrap();
    let u = w.intern("user_range");
    let mut r = Range::new(RangeKind::UserAnnotation, u, 1, 1, 2_000);
    r.end_ns = None;
    w.range(r).unwrap();
    finish(w);
    let a = analyze_path(&p).unwrap();
    check_invariants("odd", &a, None);
    let by: HashMap<&str, i64> = a
        .by_op
        .iter()
        .map(|r| (r.name.as_str(), r.self_ns))
        .collect();
    assert_eq!(
        by.get("aten::mm"),
        Some(&100),
        "launch inside the unclosed range"
    );
    assert_eq!(
        by.get("aten::addmm"),
        Some(&0),
        "the reversed kernel counts 0 ns"
    );
    assert_eq!(
        by.get("(outside any range)"),
        Some(&40),
        "launched after addmm was cut at 800"
    );
    assert!(
        a.notes.iter().any(|n| n.contains("never closed")),
        "{:?}",
        a.notes
    );
    assert!(
        a.notes.iter().any(|n| n.contains("end before they start")),
        "{:?}",
        a.notes
    );
    assert!(
        a.notes.iter().any(|n| n.contains("overlapped")),
        "{:?}",
        a.notes
    );
}

#[test]
fn a_cuda_graph_launch_is_one_launch_of_many_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("graph.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    op(&mut w, "CUDAGraph::replay", 0, Some(1_000));
    launch(&mut w, 9, 10, "cudaGraphLaunch");
    let names = [
        "nvjet_a",
        "triton_poi_fused_add_0",
        "triton_red_fused_sum_1",
    ];
    for (i, n) in names.iter().enumerate() {
        let id = w.intern(n);
        let mut k = kernel(id, 100 + 100 * i as i64, 150 + 100 * i as i64, Some(9));
        k.graph_id = Some(4);
        w.kernel(k).unwrap();
    }
    w.memop(Memop {
        kind: MemopKind::Memset,
        start_ns: 500,
        end_ns: 510,
        device_id: 0,
        stream_id: 7,
        pid: Some(1),
        correlation_id: Some(9),
        external_id: None,
        bytes: Some(64),
        copy_kind: None,
        value: Some(0),
        src_memory: None,
        dst_memory: None,
    })
    .unwrap();
    finish(w);
    let a = analyze_path(&p).unwrap();
    check_invariants("graph", &a, Some(150));
    assert_eq!(a.totals.launches, 1);
    assert_eq!(a.totals.graph_kernels, 3);
    assert_eq!(a.by_op[0].name, "CUDAGraph::replay");
    assert_eq!(
        (a.by_op[0].kernels, a.by_op[0].launches, a.by_op[0].self_ns),
        (4, 1, 160)
    );
    let classes: Vec<Class> = a.by_class.iter().map(|c| c.class).collect();
    assert_eq!(
        classes,
        [
            Class::Gemm,
            Class::Elementwise,
            Class::Reduction,
            Class::Memset
        ]
    );
    // Gaps between 150-200, 250-300 and 350-500.
    assert_eq!(a.timeline[0].idle_ns, 50 + 50 + 150);
}

#[test]
fn asking_for_a_missing_step_says_how_many_there_are() {
    let rel = "kineto/hta_timeline_analysis_sampled_rank-0.json.gz";
    let mut store = Store::open(&store_for(rel)).unwrap();
    let cfg = AnalyzeConfig {
        step: Some(7),
        ..AnalyzeConfig::default()
    };
    let e = analyze(&mut store, &cfg).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--step 7: the run has 2 steps (numbered from 0)"
    );
}

/// Per-op self CUDA time against PyTorch's own `key_averages()` on the same run, within 1%.
///
/// Runs for each pair `NAME.key_averages.json` + `NAME.kineto.json.gz` (or `NAME.json.gz`,
/// `NAME.json`) under fixtures/recordings: the Kineto trace and a list of
/// `{"name", "input_shapes", "count", "self_device_time_total_us", ...}` written from
/// `prof.key_averages(group_by_input_shape=True)` in the same process (also accepted: `key`
/// for `name`, `self_device_time_total` / `self_cuda_time_total` in microseconds). Compared per
/// op type and per op type + shapes. Without such a pair it passes with a message.
#[test]
fn per_op_self_time_agrees_with_key_averages() {
    let dir = fuseprof_fixtures::path("recordings");
    let mut pairs = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(base) = name.strip_suffix(".key_averages.json") {
                for ext in [".kineto.json.gz", ".kineto.json", ".json.gz", ".json"] {
                    let trace = format!("{base}{ext}");
                    if dir.join(&trace).exists() {
                        pairs.push((format!("recordings/{trace}"), dir.join(&name)));
                        break;
                    }
                }
            }
        }
    }
    if pairs.is_empty() {
        eprintln!(
            "no key_averages pair under {}: comparison not run",
            dir.display()
        );
        return;
    }
    pairs.sort();
    let mut report = String::new();
    for (trace, ka) in pairs {
        let a = run(&trace, &AnalyzeConfig::default());
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&ka).unwrap()).unwrap();
        let entries = v
            .as_array()
            .cloned()
            .or_else(|| v["key_averages"].as_array().cloned())
            .expect("a list");
        let mut theirs_by_name: HashMap<String, f64> = HashMap::new();
        let mut theirs_by_shape: HashMap<(String, String), f64> = HashMap::new();
        for e in &entries {
            let key = e["name"].as_str().or(e["key"].as_str()).unwrap_or_default();
            let us = e["self_device_time_total_us"]
                .as_f64()
                .or(e["self_device_time_total"].as_f64())
                .or(e["self_cuda_time_total"].as_f64())
                .unwrap_or(0.0);
            *theirs_by_name.entry(key.to_string()).or_default() += us;
            if let Some(shapes) = e["input_shapes"].as_str() {
                *theirs_by_shape
                    .entry((
                        key.to_string(),
                        fuseprof_analyzer::ops::normalize_dims(shapes),
                    ))
                    .or_default() += us;
            }
        }
        let ours_by_name: HashMap<&str, i64> = a
            .by_op
            .iter()
            .map(|r| (r.name.as_str(), r.self_ns))
            .collect();
        let ours_by_shape: HashMap<(String, String), i64> = a
            .by_shape
            .iter()
            .map(|r| {
                (
                    (
                        r.name.clone(),
                        r.dims.clone().unwrap_or_else(|| "[]".into()),
                    ),
                    r.self_ns,
                )
            })
            .collect();
        let mut compared = 0;
        let mut worst = 0.0f64;
        let mut check = |what: String, ours_ns: i64, theirs_us: f64| {
            let ours_us = ours_ns as f64 / 1e3;
            let rel_err = (ours_us - theirs_us).abs() / theirs_us;
            assert!(
                rel_err <= 0.01,
                "{trace}: {what}: ours {ours_us:.1} us, key_averages {theirs_us:.1} us ({:.2}%)",
                rel_err * 100.0
            );
            worst = worst.max(rel_err);
            compared += 1;
        };
        // key_averages also lists kernels, copies, CUDA API calls and the profiler's own
        // buffer requests as keys; only ranges (ops, annotations) are compared.
        let kernels: std::collections::HashSet<&str> =
            a.by_kernel.iter().map(|k| k.name.as_str()).collect();
        let not_a_range = |name: &str| {
            kernels.contains(name)
                || name.starts_with("Memcpy")
                || name.starts_with("Memset")
                || name.starts_with("cuda")
                || name.starts_with("cu") && name[2..].starts_with(char::is_uppercase)
                || name == "Activity Buffer Request"
        };
        for (name, &us) in &theirs_by_name {
            // Tiny ops are at the mercy of microsecond rounding; step annotations are numbered
            // per step there and folded into one family here.
            if us < 10.0 || fuseprof_analyzer::ops::step_family(name).is_some() || not_a_range(name)
            {
                continue;
            }
            check(
                name.clone(),
                ours_by_name.get(name.as_str()).copied().unwrap_or(0),
                us,
            );
        }
        for ((name, shapes), &us) in &theirs_by_shape {
            if us < 10.0 || fuseprof_analyzer::ops::step_family(name).is_some() || not_a_range(name)
            {
                continue;
            }
            let ours = ours_by_shape
                .get(&(name.clone(), shapes.clone()))
                .copied()
                .unwrap_or(0);
            check(format!("{name} {shapes}"), ours, us);
        }
        assert!(compared > 0, "{trace}: nothing compared");
        report.push_str(&format!(
            "{trace}: {compared} op types and shapes agree with key_averages, worst {:.3}%\n",
            worst * 100.0
        ));
    }
    eprint!("{report}");
}

#[test]
fn headroom_uses_shapes_dtypes_and_the_builtin_ceilings() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("headroom.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    w.device(fuseprof_store::Device {
        id: 0,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        ..Default::default()
    });
    let name = w.intern("aten::mm");
    let dims = w.intern("[[4096, 4096], [4096, 4096]]");
    let types = w.intern(r#"["c10::BFloat16", "c10::BFloat16"]"#);
    let mut r = Range::new(RangeKind::CpuOp, name, 1, 1, 0);
    r.end_ns = Some(1_000);
    r.input_dims = Some(dims);
    r.input_types = Some(types);
    w.range(r).unwrap();
    launch(&mut w, 1, 10, "cudaLaunchKernel");
    let k = w.intern("nvjet_tst_256x128_64x4_1x2_h_bz_TNT");
    w.kernel(kernel(k, 100, 200_100, Some(1))).unwrap();
    finish(w);
    let a = analyze_path(&p).unwrap();
    check_invariants("headroom", &a, Some(200_000));
    assert_eq!(a.headroom.ceilings.len(), 1);
    assert!(a.headroom.ceilings[0].source.starts_with("built-in (H100"));
    let row = &a.headroom.rows[0];
    assert_eq!(row.bound, "compute");
    // 2 * 4096^3 FLOP at 800 TFLOP/s = 171.8 us.
    assert_eq!(row.floor_ns, 171_799);
    assert_eq!(row.headroom_ns, 200_000 - 171_799);
    assert_eq!(row.flops_pct, Some(85.9));
    insta::assert_snapshot!(
        "text_handmade_headroom",
        render_text(&a, &AnalyzeConfig::default())
    );
}

#[test]
fn the_op_tree_adds_up_to_the_tables_it_cuts() {
    use fuseprof_analyzer::{analyze_with_op_tree, OpNodeKind};
    for rel in [
        "recordings/swin_t_infer_modules.sqlite.gz",
        "kineto/hta_critical_path_alexnet_trace.json.gz",
    ] {
        let mut store = Store::open(&store_for(rel)).unwrap();
        let cfg = AnalyzeConfig::default();
        let (a, t) = analyze_with_op_tree(&mut store, &cfg, &Rules::builtin()).unwrap();
        assert_eq!(a, run(rel, &cfg), "{rel}: the analysis is the plain one");
        let root = &t.nodes[0];
        assert_eq!(root.total_ns, a.totals.gpu_ns, "{rel}");
        assert_eq!(
            root.records,
            a.totals.kernels + a.totals.memcpys + a.totals.memsets
        );
        for (i, n) in t.nodes.iter().enumerate() {
            let below: i64 = n.children.iter().map(|&c| t.nodes[c].total_ns).sum();
            if n.kind != OpNodeKind::Kernel {
                assert_eq!(n.total_ns, below, "{rel}: node {i} {}", n.name);
            }
            assert!(
                n.self_ns >= 0 && n.self_ns <= n.total_ns,
                "{rel}: {}",
                n.name
            );
            assert!(n
                .children
                .windows(2)
                .all(|w| t.nodes[w[0]].total_ns >= t.nodes[w[1]].total_ns));
        }
        // Kernel nodes add up to the kernel table, name by name.
        let mut by_name: HashMap<&str, i64> = HashMap::new();
        for n in t.nodes.iter().filter(|n| n.kind == OpNodeKind::Kernel) {
            *by_name.entry(n.name.as_str()).or_default() += n.total_ns;
        }
        for k in &a.by_kernel {
            assert_eq!(
                by_name.get(k.name.as_str()),
                Some(&k.total_ns),
                "{}",
                k.name
            );
        }
        // Op self times add up to the op table's (the innermost op launched the records).
        let mut op_self: HashMap<&str, i64> = HashMap::new();
        for n in t.nodes.iter().filter(|n| n.kind == OpNodeKind::Op) {
            *op_self.entry(n.name.as_str()).or_default() += n.self_ns;
        }
        for row in a
            .by_op
            .iter()
            .filter(|r| r.role == Some(fuseprof_analyzer::Role::Op))
        {
            assert_eq!(
                op_self.get(row.name.as_str()).copied().unwrap_or(0),
                row.self_ns,
                "{}",
                row.name
            );
        }
    }
    // Swin-T's modules are nodes, with the model at the top.
    let mut store = Store::open(&store_for("recordings/swin_t_infer_modules.sqlite.gz")).unwrap();
    let (_, t) =
        analyze_with_op_tree(&mut store, &AnalyzeConfig::default(), &Rules::builtin()).unwrap();
    let top = &t.nodes[t.nodes[0].children[0]];
    assert_eq!(
        (top.kind, top.name.as_str()),
        (OpNodeKind::Module, "SwinTransformer")
    );
    // The recording ran the model three times (three depth-0 ranges).
    assert_eq!(top.instances, 3);
}

#[test]
fn step_walls_come_from_the_step_ranges_alone() {
    // A run traced with CUDA activity off: NVTX `step` ranges and no GPU record. analyze has
    // nothing to attribute; the step walls are still there.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("steps-only.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    let step = w.intern("step");
    for (start, len) in [(0, 10_000), (20_000, 12_000), (40_000, 11_000)] {
        let mut r = Range::new(RangeKind::NvtxPushPop, step, 1, 1, start);
        r.end_ns = Some(start + len);
        w.range(r).unwrap();
    }
    finish(w);
    assert!(matches!(analyze_path(&p), Err(Error::EmptyRun { .. })));
    let wall = fuseprof_analyzer::annotated_step_wall(&p).unwrap().unwrap();
    assert_eq!(
        (wall.median_ns, wall.min_ns, wall.max_ns),
        (11_000.0, 10_000, 12_000)
    );
    // ... and the ranges' text, which `bench` records its op passes inside.
    let steps = fuseprof_analyzer::annotated_steps(&p).unwrap().unwrap();
    assert_eq!((steps.name.as_str(), steps.wall), ("step", Some(wall)));

    // Without step ranges there is nothing to time.
    let q = dir.path().join("no-steps.sqlite");
    let mut w = Writer::create(&q, CreateOptions::default()).unwrap();
    op(&mut w, "aten::mm", 0, Some(10));
    finish(w);
    assert_eq!(fuseprof_analyzer::annotated_step_wall(&q).unwrap(), None);

    // On a real recording with step ranges it agrees with the full analysis.
    let rec = store_for("recordings/swin_t_infer_modules.sqlite.gz");
    let a = run(
        "recordings/swin_t_infer_modules.sqlite.gz",
        &AnalyzeConfig::default(),
    );
    let light = fuseprof_analyzer::annotated_step_wall(&rec).unwrap();
    if a.steps.source == fuseprof_analyzer::StepSource::Annotation {
        assert_eq!(light, a.steps.wall);
    } else {
        assert_eq!(light, None);
    }
}

/// The store fuzz target's corpus and every input that once crashed it (fuzz/corpus/store,
/// fuzz/regressions/store): analyze and repair answer each with a result or an error, never a
/// panic, and a repair that succeeds leaves a file SQLite finds nothing wrong with.
#[test]
fn store_fuzz_corpus() {
    let files = fuseprof_fixtures::fuzz_inputs("store");
    assert!(!files.is_empty(), "no store corpus");
    for f in files {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.sqlite");
        std::fs::copy(&f, &p).unwrap();
        let _ = analyze_path(&p);
        let out = dir.path().join("repaired.sqlite");
        if let Ok(r) = fuseprof_store::repair(&p, Some(&out)) {
            let problems = fuseprof_store::integrity_check(&r.path, false).unwrap();
            assert!(problems.is_empty(), "{f:?}: {problems:?}");
        }
    }
}

/// The ranks fuzz target's corpus and every input that once crashed it (fuzz/corpus/ranks,
/// fuzz/regressions/ranks), run as the target runs them: each input cut at `\0RANK\0` into up
/// to four rank traces, imported as one job; an accepted job opens again, and its analysis
/// is a result or an error, never a panic.
#[test]
fn ranks_fuzz_corpus() {
    use fuseprof_collector::import::{ranks::import_ranks, Format, ImportOptions};
    let files = fuseprof_fixtures::fuzz_inputs("ranks");
    assert!(!files.is_empty(), "no ranks corpus");
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let inputs: Vec<PathBuf> = fuseprof_fixtures::split_ranks(&data)
            .iter()
            .enumerate()
            .map(|(i, part)| {
                let p = dir.path().join(format!("rank-{i}.json"));
                std::fs::write(&p, part).unwrap();
                p
            })
            .collect();
        let out = dir.path().join("run.sqlite");
        let opts = ImportOptions {
            overwrite: true,
            format: Some(Format::Kineto),
            progress: None,
            jobs: Some(1),
        };
        if import_ranks(&inputs, &out, &opts).is_ok() {
            let problems = fuseprof_store::integrity_check(&out, true).unwrap();
            assert!(problems.is_empty(), "{f:?}: {problems:?}");
            Store::open(&out)
                .and_then(|mut s| s.info())
                .unwrap_or_else(|e| panic!("{f:?}: the accepted job does not open: {e}"));
            let _ = analyze_path(&out);
        }
    }
}

/// A step's analysis read from the step alone (`analyze_step_with_op_tree`, what
/// `fuseprof tui` scopes its tables with) equals the step-scoped analysis of the whole run,
/// tables and operator tree, on every fixture with steps: with the ranges open at each step's
/// start named exactly (no lookback), and found as the explorer finds them (a lookback, and
/// the ranges at least that long).
#[test]
fn a_step_analysed_alone_equals_the_step_scoped_analysis() {
    use fuseprof_analyzer::scope::LongRange;
    use fuseprof_analyzer::{analyze_step_with_op_tree, analyze_with_op_tree, OpenRanges, Scoped};
    let rules = Rules::builtin();
    let mut scoped_steps = 0;
    let mut whole_run = Vec::new();
    for rel in all_fixtures() {
        let mut store = Store::open(&store_for(&rel)).unwrap();
        let (whole, _) = analyze_with_op_tree(&mut store, &AnalyzeConfig::default(), &rules)
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let steps = &whole.steps.steps;
        if steps.is_empty() {
            continue;
        }
        let mut ranges = Vec::new();
        store.for_each_range(|r| ranges.push(r)).unwrap();
        let open_at = |t: i64, before: i64, min_len: i64| -> Vec<LongRange> {
            ranges
                .iter()
                .filter(|r| r.start_ns < before && r.end_ns.is_none_or(|e| e > t))
                .filter(|r| r.end_ns.is_none_or(|e| e - r.start_ns >= min_len))
                .map(|r| LongRange {
                    pid: r.pid,
                    tid: r.tid,
                    start_ns: r.start_ns,
                    name: r.name,
                })
                .collect()
        };
        // Every step of small runs, a spread of the others.
        let picks: Vec<usize> = if steps.len() <= 12 {
            (0..steps.len()).collect()
        } else {
            (0..12).map(|i| i * (steps.len() - 1) / 11).collect()
        };
        let mut walls: Vec<i64> = steps.iter().map(|s| s.wall_ns).collect();
        walls.sort_unstable();
        let lookback = walls[walls.len() / 2] / 3;
        for k in picks {
            let cfg = AnalyzeConfig {
                step: Some(k),
                ..AnalyzeConfig::default()
            };
            let expected = analyze_with_op_tree(&mut store, &cfg, &rules).unwrap();
            let start = steps[k].start_ns;
            for open in [
                OpenRanges {
                    lookback_ns: 0,
                    long: open_at(start, start, 0),
                },
                OpenRanges {
                    lookback_ns: lookback,
                    long: open_at(start, start - lookback, lookback),
                },
            ] {
                match analyze_step_with_op_tree(&mut store, &whole, k, &rules, &open).unwrap() {
                    Scoped::Done(got) => {
                        assert!(
                            got.0 == expected.0,
                            "{rel} step {k} (lookback {}): the tables differ:\n{}\n---\n{}",
                            open.lookback_ns,
                            serde_json::to_string(&got.0).unwrap(),
                            serde_json::to_string(&expected.0).unwrap()
                        );
                        if got.1 != expected.1 {
                            for (i, (g, e)) in got.1.nodes.iter().zip(&expected.1.nodes).enumerate()
                            {
                                if g != e {
                                    eprintln!("node {i}: {g:?}\n  vs {e:?}");
                                }
                            }
                            panic!(
                                "{rel} step {k}: the operator trees differ ({} / {} nodes)",
                                got.1.nodes.len(),
                                expected.1.nodes.len()
                            );
                        }
                        scoped_steps += 1;
                    }
                    Scoped::NeedsWholeRun(why) => {
                        whole_run.push(format!("{rel}: {why}"));
                        break;
                    }
                }
            }
        }
    }
    eprintln!("{scoped_steps} steps analysed alone; needing the whole run: {whole_run:?}");
    assert!(scoped_steps >= 10, "{scoped_steps} steps analysed alone");
}

/// Two-GPU data-parallel jobs recorded by `fuseprof collect` (fixtures/ranks/): under torchrun,
/// where each process picks its GPU by LOCAL_RANK, and with each process seeing only its own
/// GPU, as device 0 (CUDA_VISIBLE_DEVICES). Rank 1 sleeps about 10 ms of GPU time before every
/// third step (0, 3, 6, 9), so rank 0 waits for it in those steps' all-reduces.
#[test]
fn collected_two_gpu_jobs_have_a_rank_per_gpu_and_show_their_straggler() {
    for rel in [
        "ranks/ddp2_torchrun.sqlite.gz",
        "ranks/ddp2_own_gpu.sqlite.gz",
    ] {
        let a = run(rel, &AnalyzeConfig::default());
        let r = a
            .ranks
            .as_ref()
            .unwrap_or_else(|| panic!("{rel}: no ranks"));
        let devices: Vec<&[i64]> = r.ranks.iter().map(|k| k.devices.as_slice()).collect();
        assert_eq!(devices, [[0], [1]], "{rel}");
        assert!(r.ranks.iter().all(|k| k.steps == 12), "{rel}");
        // Rank 0 is the reference; rank 1's collectives end with their partners on it.
        assert!(
            r.ranks[1].matched_collectives.unwrap_or(0) >= 70,
            "{rel}: {:?}",
            r.ranks[1]
        );
        let stragglers: Vec<Option<i64>> = [3, 6, 9].map(|s| r.steps[s].straggler_rank).to_vec();
        assert_eq!(stragglers, [Some(1); 3], "{rel}");
    }
}

/// What an observer of an analysis sees ([`fuseprof_analyzer::RowObserver`]): every row of
/// each table once, in row order, as the store's scans give them; and the analysis is the one
/// made without an observer.
#[test]
fn an_observer_sees_every_row_once_in_order() {
    #[derive(Default)]
    struct Seen {
        ranges: Vec<fuseprof_store::LeanRange>,
        calls: Vec<fuseprof_store::LeanCall>,
        kernels: Vec<fuseprof_store::LeanKernel>,
        memops: Vec<fuseprof_store::LeanMemop>,
    }
    impl fuseprof_analyzer::RowObserver for Seen {
        fn range(&mut self, r: &fuseprof_store::LeanRange) {
            self.ranges.push(*r);
        }
        fn call(&mut self, c: &fuseprof_store::LeanCall) {
            self.calls.push(*c);
        }
        fn kernel(&mut self, k: &fuseprof_store::LeanKernel) {
            self.kernels.push(*k);
        }
        fn memop(&mut self, m: &fuseprof_store::LeanMemop) {
            self.memops.push(*m);
        }
    }
    for rel in all_fixtures() {
        let mut store = Store::open(&store_for(&rel)).unwrap();
        let cfg = AnalyzeConfig::default();
        let mut seen = Seen::default();
        let observed = fuseprof_analyzer::analyze_with_op_tree_observed(
            &mut store,
            &cfg,
            &Rules::builtin(),
            Some(&mut seen),
        );
        let plain = fuseprof_analyzer::analyze_with_op_tree(&mut store, &cfg, &Rules::builtin());
        match (observed, plain) {
            (Ok(a), Ok(b)) => assert!(a == b, "{rel}: the analyses differ"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{rel}"),
            _ => panic!("{rel}: one analysis failed"),
        }
        let mut want = Seen::default();
        store.for_each_lean_range(|r| want.ranges.push(*r)).unwrap();
        store.for_each_lean_call(|c| want.calls.push(*c)).unwrap();
        store
            .for_each_lean_kernel(|k| want.kernels.push(*k))
            .unwrap();
        store.for_each_lean_memop(|m| want.memops.push(*m)).unwrap();
        assert!(!want.kernels.is_empty() || !want.memops.is_empty(), "{rel}");
        assert_eq!(seen.ranges, want.ranges, "{rel}: ranges");
        assert_eq!(seen.calls, want.calls, "{rel}: calls");
        assert_eq!(seen.kernels, want.kernels, "{rel}: kernels");
        assert_eq!(seen.memops, want.memops, "{rel}: memops");
    }
}

/// Steps found without annotation in real recordings of scripts that mark none: GPT-2's 24
/// forwards (one synchronize after the loop), Swin-S's 40 (no synchronize inside the loop), and
/// ResNet-18's 15 training steps (their optimizer steps, not the model and loss calls); each
/// step's GPU time steady (the earlier period search found none in the first two).
#[test]
fn steps_without_annotation_are_the_model_calls_or_the_optimizer_steps() {
    for (rec, count, name, cv_max) in [
        (
            "recordings/users/hf_gpt2.sqlite.gz",
            24,
            "calls of GPT2LMHeadModel",
            2.0,
        ),
        (
            "recordings/users/timm_swin_s.sqlite.gz",
            40,
            "calls of SwinTransformer",
            2.0,
        ),
        (
            "recordings/users/tv_resnet18_train.sqlite.gz",
            15,
            "optimizer steps (Optimizer.step#AdamW.step)",
            5.0,
        ),
    ] {
        let a = analyze_path(&store_for(rec)).unwrap();
        let s = &a.steps;
        assert_eq!(s.source, fuseprof_analyzer::StepSource::Calls, "{rec}");
        assert_eq!(s.name.as_deref(), Some(name), "{rec}");
        assert_eq!(s.steps.len(), count, "{rec}");
        let gpu = s.gpu.as_ref().unwrap();
        assert!(gpu.cv_pct < cv_max, "{rec}: cv {}", gpu.cv_pct);
        // Every step holds GPU work, and the steps hold nearly all of the run's.
        assert!(s.steps.iter().all(|x| x.gpu_ns > 0), "{rec}");
    }
}

/// A run with counters: each kernel name gets its measured DRAM bytes, the bandwidth they
/// make over its GPU time against the device's peak, and its tensor-pipe activity; the
/// text report shows the table. A run without counters has no `measured` at all.
#[test]
fn measured_counters_give_bandwidth_against_the_peak() {
    use fuseprof_store::{record_counters, CounterKind, CounterMetric, CounterSample, Device};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    w.device(Device {
        id: 0,
        name: Some("NVIDIA H200".into()),
        mem_bandwidth_bytes_per_s: Some(4.0e12),
        ..Default::default()
    });
    // A copy 0..10 us and a GEMM 10..30 us, one launch each.
    for (i, (name, start, end)) in [("copy_kernel", 0, 10_000), ("sm90_gemm", 10_000, 30_000)]
        .into_iter()
        .enumerate()
    {
        let name = w.intern(name);
        let launch = w.intern("cudaLaunchKernel");
        w.api_call(ApiCall {
            api: Api::Runtime,
            start_ns: start - 100,
            end_ns: start - 50,
            pid: 1,
            tid: 1,
            correlation_id: Some(i as i64 + 1),
            external_id: None,
            name: launch,
            return_code: Some(0),
        })
        .unwrap();
        w.kernel(Kernel {
            start_ns: start,
            end_ns: end,
            device_id: 0,
            stream_id: 7,
            pid: Some(1),
            correlation_id: Some(i as i64 + 1),
            external_id: None,
            name,
            grid: None,
            block: None,
            registers_per_thread: None,
            static_smem_bytes: None,
            dynamic_smem_bytes: None,
            graph_id: None,
        })
        .unwrap();
    }
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let mut store = Store::open(&path).unwrap();
    assert_eq!(
        analyze(&mut store, &AnalyzeConfig::default())
            .unwrap()
            .measured,
        None
    );
    drop(store);

    let metric = |id, quantity: &str, kind| CounterMetric {
        id,
        device_id: 0,
        name: quantity.into(),
        quantity: quantity.into(),
        kind,
        unit: String::new(),
        method: "pm_sampling".into(),
        interval_ns: Some(10_000),
    };
    let sample = |metric_id, start_ns, value| CounterSample {
        metric_id,
        start_ns,
        end_ns: start_ns + 10_000,
        value,
    };
    record_counters(
        &path,
        &[
            metric(1, "dram_read_bytes", CounterKind::Sum),
            metric(2, "tensor_pipe_pct", CounterKind::Average),
        ],
        &[
            // The copy moves 30 MB in 10 us (3 TB/s, 75% of 4 TB/s); the GEMM 8 MB in 20 us.
            sample(1, 0, 30e6),
            sample(1, 10_000, 4e6),
            sample(1, 20_000, 4e6),
            sample(2, 0, 0.0),
            sample(2, 10_000, 60.0),
            sample(2, 20_000, 80.0),
        ],
    )
    .unwrap();
    let mut store = Store::open(&path).unwrap();
    let a = analyze(&mut store, &AnalyzeConfig::default()).unwrap();
    let m = a.measured.as_ref().expect("counters are measured");
    assert_eq!(m.quantities, vec!["dram_read_bytes", "tensor_pipe_pct"]);
    assert_eq!((m.kernels, m.shared, m.estimated), (2, 0, 0));
    let row = |name: &str| m.by_kernel.iter().find(|r| r.name == name).unwrap().clone();
    let copy = row("copy_kernel");
    assert_eq!(copy.dram_bytes, Some(30e6));
    assert!((copy.achieved_bytes_per_s.unwrap() - 3e12).abs() < 1.0);
    assert!((copy.bandwidth_pct_of_peak.unwrap() - 75.0).abs() < 1e-9);
    assert_eq!(copy.tensor_pipe_pct, Some(0.0));
    let gemm = row("sm90_gemm");
    assert_eq!(gemm.dram_bytes, Some(8e6));
    assert_eq!(gemm.tensor_pipe_pct, Some(70.0));
    assert_eq!(m.by_kernel[0].name, "sm90_gemm", "ranked by GPU time");
    let text = render_text(
        &a,
        &AnalyzeConfig {
            by: GroupBy::Kernel,
            ..Default::default()
        },
    );
    assert!(text.contains("Measured by hardware counters"), "{text}");
}

/// Host copies by hand: two steps (ProfilerStep annotations); in each, a pageable
/// host-to-device copy whose `cudaMemcpyAsync` lasts through it (the host waited: flagged), a
/// pinned one the call returns before, and outside the steps a device-to-host copy of unknown
/// host memory.
#[test]
fn host_copies_split_by_direction_and_host_memory_and_flag_a_waited_pageable_copy() {
    use fuseprof_store::{CopyKind, MemoryKind};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copies.sqlite");
    let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
    let call = w.intern("cudaMemcpyAsync");
    for (i, step) in ["ProfilerStep#0", "ProfilerStep#1"].iter().enumerate() {
        let t0 = i as i64 * 1_000_000;
        let mut r = Range::new(RangeKind::UserAnnotation, w.intern(step), 1, 1, t0);
        r.end_ns = Some(t0 + 1_000_000);
        w.range(r).unwrap();
    }
    let mut corr = 0;
    let mut copy = |w: &mut Writer,
                    start: i64,
                    dur: i64,
                    call_end: i64,
                    bytes: i64,
                    kind: CopyKind,
                    host: Option<MemoryKind>| {
        corr += 1;
        w.api_call(ApiCall {
            api: Api::Runtime,
            start_ns: start - 1_000,
            end_ns: call_end,
            pid: 1,
            tid: 1,
            correlation_id: Some(corr),
            external_id: None,
            name: call,
            return_code: None,
        })
        .unwrap();
        let to_device = kind == CopyKind::HtoD;
        w.memop(Memop {
            kind: MemopKind::Memcpy,
            start_ns: start,
            end_ns: start + dur,
            device_id: 0,
            stream_id: 7,
            pid: Some(1),
            correlation_id: Some(corr),
            external_id: None,
            bytes: Some(bytes),
            copy_kind: Some(kind),
            value: None,
            src_memory: if to_device {
                host
            } else {
                Some(MemoryKind::Device)
            },
            dst_memory: if to_device {
                Some(MemoryKind::Device)
            } else {
                host
            },
        })
        .unwrap();
    };
    for t0 in [0, 1_000_000] {
        // 4 MB in 400 us (10 GB/s); the call ends 300 us into it (75%: the host waited).
        copy(
            &mut w,
            t0 + 100_000,
            400_000,
            t0 + 400_000,
            4_000_000,
            CopyKind::HtoD,
            Some(MemoryKind::Pageable),
        );
        // 1 MB in 50 us (20 GB/s); the call returns before it starts.
        copy(
            &mut w,
            t0 + 600_000,
            50_000,
            t0 + 590_000,
            1_000_000,
            CopyKind::HtoD,
            Some(MemoryKind::Pinned),
        );
    }
    copy(
        &mut w,
        2_500_000,
        10_000,
        2_400_000,
        1_000,
        CopyKind::DtoH,
        None,
    );
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let a = analyze(&mut Store::open(&path).unwrap(), &AnalyzeConfig::default()).unwrap();
    let c = &a.host_copies;
    assert_eq!(c.steps, 2);
    let row = |d: &str, h: &str| {
        c.rows
            .iter()
            .find(|r| r.direction == d && r.host_memory == h)
            .unwrap()
    };
    let p = row("HtoD", "pageable");
    assert_eq!(
        (p.count, p.ns, p.bytes, p.in_steps),
        (2, 800_000, 8_000_000, 2)
    );
    assert_eq!(p.bytes_per_s, 10e9);
    assert_eq!((p.ns_per_step, p.count_per_step), (400_000.0, 1.0));
    assert_eq!((p.synchronous, p.synchronous_in_steps), (Some(2), Some(2)));
    assert!(p.flagged);
    let q = row("HtoD", "pinned");
    assert_eq!((q.count, q.bytes_per_s, q.synchronous), (2, 20e9, Some(0)));
    assert!(!q.flagged);
    let u = row("DtoH", "unknown");
    assert_eq!((u.count, u.in_steps, u.ns_per_step), (1, 0, 0.0));
    assert_eq!(c.rows.len(), 3);
    // HtoD rows first, the larger time first.
    assert_eq!(c.rows[0].host_memory, "pageable");
    let text = render_text(&a, &AnalyzeConfig::default());
    assert!(
        text.contains("* pageable host-to-device copies inside the step"),
        "{text}"
    );
    assert!(text.contains("pin_memory"), "{text}");
    // In JSON, and back.
    let back: Analysis = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back.host_copies, a.host_copies);
}

/// The real traces that hold pageable copies: every host<->device copy the store holds is in
/// one row, with the store's count, time and bytes.
#[test]
fn host_copies_of_real_traces_add_up_to_the_stores_copies() {
    for rel in [
        "kineto/hta_critical_path_alexnet_trace.json.gz",
        "kineto/hta_timeline_analysis_sampled_rank-0.json.gz",
        "nsys/nsysai_mfu_2gpu_before.sqlite",
    ] {
        let path = store_for(rel);
        let mut store = Store::open(&path).unwrap();
        let mut want: HashMap<(String, String), (u64, i64, i64)> = HashMap::new();
        store
            .for_each_memop(|m| {
                let d = match m.copy_kind {
                    Some(fuseprof_store::CopyKind::HtoD) => "HtoD",
                    Some(fuseprof_store::CopyKind::DtoH) => "DtoH",
                    _ => return,
                };
                let host = if d == "HtoD" {
                    m.src_memory
                } else {
                    m.dst_memory
                };
                let e = want
                    .entry((d.into(), host.map_or("unknown", |k| k.as_str()).into()))
                    .or_default();
                e.0 += 1;
                e.1 += m.end_ns - m.start_ns;
                e.2 += m.bytes.unwrap_or(0);
            })
            .unwrap();
        let a = analyze(&mut store, &AnalyzeConfig::default()).unwrap();
        let got: HashMap<(String, String), (u64, i64, i64)> = a
            .host_copies
            .rows
            .iter()
            .map(|r| {
                (
                    (r.direction.clone(), r.host_memory.clone()),
                    (r.count, r.ns, r.bytes),
                )
            })
            .collect();
        assert_eq!(got, want, "{rel}");
        let pageable = &a
            .host_copies
            .rows
            .iter()
            .find(|r| r.host_memory == "pageable")
            .unwrap();
        assert!(pageable.count > 0 && pageable.bytes_per_s > 0.0, "{rel}");
        assert!(pageable.in_steps <= pageable.count);
        assert!(render_text(&a, &AnalyzeConfig::default()).contains("HtoD  pageable"));
    }
    // AlexNet's large pageable copies: the host waited in cudaMemcpyAsync through most of each.
    let a = analyze_file(&store_for("kineto/hta_critical_path_alexnet_trace.json.gz"));
    let p = a
        .host_copies
        .rows
        .iter()
        .find(|r| r.host_memory == "pageable")
        .unwrap();
    assert!(
        p.synchronous.unwrap() > 0 && p.synchronous.unwrap() < p.count,
        "{p:?}"
    );
}

fn analyze_file(p: &Path) -> Analysis {
    fuseprof_analyzer::analyze_file(p, &AnalyzeConfig::default()).unwrap()
}
