//! The fusion advisor: reads a run through the analyzer's op stream, finds the operator chains
//! that a bundled kernel replaces exactly (`patterns.txt` says which op sequences, `rules/` what
//! shapes they need), estimates each replacement from its bytes and FLOPs against the device's
//! ceilings and the efficiency that kernel reached in fuseprof's own benchmark
//! (`calibration.tsv`), and ranks the proposals by the time they save per step. Chains that no
//! bundled kernel covers are listed with the bytes a fusion would save. [`bench`] measures the
//! proposals on the recorded shapes on a GPU and stores the results in the run.
//!
//! ```
//! use fuseprof_analyzer::{OpInstance, OpTrace};
//! use fuseprof_fusion_advisor::{advise_trace, AdviseConfig};
//! let op = |name: &str, dims: &str| OpInstance {
//!     thread: 0, start_ns: 0, end_ns: 1, name: name.into(),
//!     dims: Some(serde_json::from_str(dims).unwrap()), dtypes: Some(vec!["c10::Half".into()]),
//!     module: None, step: None, gpu_ns: 50_000,
//!     records: vec![fuseprof_analyzer::GpuRecord {
//!         name: 0, class: fuseprof_analyzer::Class::Gemm, dur_ns: 50_000, launched_by: 0,
//!         counters: None }],
//! };
//! let trace = OpTrace {
//!     file: "run.sqlite".into(), source_format: "cupti".into(), devices: vec![],
//!     ceilings: vec![], threads: vec![(1, 1)], step: None, steps: 0, gpu_ns: 100_000,
//!     ops: vec![op("aten::linear", "[[8192, 768], [3072, 768], [3072]]"),
//!               op("aten::gelu", "[[8192, 3072], []]")],
//!     kernel_names: vec!["nvjet_hsh".into()], op_ranges: 2, op_ranges_with_shapes: 2,
//!     has_backward: false, context: Default::default(),
//! };
//! let advice = advise_trace(&trace, &AdviseConfig::default()).unwrap();
//! // No device is named, so there are no ceilings to estimate against: the chain is matched
//! // and listed with the reason it is not proposed.
//! assert_eq!(advice.not_proposed[0].pattern, "gemm_gelu");
//! ```

pub mod bench;
mod chain;
pub mod counters;
mod error;
pub mod estimate;
pub mod model_bench;
mod progress;
mod render;
mod rules;
mod settings;
pub use settings::{Setting, WorstStep, MAX_NAMES as SETTING_MAX_NAMES};
pub mod steps;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use fuseprof_analyzer::headroom::Ceiling;
use fuseprof_analyzer::{AnalyzeConfig, OpInstance, OpTrace};
use serde::{Deserialize, Serialize};

pub use bench::Measured;
pub use counters::CounterCheck;
pub use error::{Error, Result};
pub use estimate::{Expected, Kernel};
pub use render::render_text;

/// The version of the advice document; bumped when a field changes meaning or goes away.
pub const ADVICE_VERSION: u32 = 1;

/// What `fuseprof advise` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct AdviseConfig {
    /// Restrict to one step (numbered as in `analyze`'s steps table).
    pub step: Option<usize>,
    /// Proposals expected to save less than this share of the step (percent) are listed as
    /// not proposed.
    pub min_saving_pct: f64,
    /// Also propose replacements the estimate expects no saving from (for `bench` to measure:
    /// the estimate's efficiency comes from a benchmark on a cold cache, and the chain's time
    /// from the run).
    pub unprofitable: bool,
}

impl Default for AdviseConfig {
    fn default() -> Self {
        AdviseConfig {
            step: None,
            min_saving_pct: 0.2,
            unprofitable: false,
        }
    }
}

/// The advice document (`fuseprof advise --json`; fields in `JSON.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// Always `"fuseprof-advice"`.
    pub format: String,
    /// [`ADVICE_VERSION`].
    pub version: u32,
    pub run: RunRef,
    /// GPU time per step (per run when the run has no steps).
    pub step_gpu_ns: f64,
    /// The ceilings the estimates use and where the efficiencies come from.
    pub ceiling: Option<Ceiling>,
    pub calibration: String,
    pub proposals: Vec<Proposal>,
    pub not_proposed: Vec<NotProposed>,
    pub unbundled: Vec<Unbundled>,
    pub totals: Totals,
    pub notes: Vec<String>,
    /// Changes to the program's settings that come before kernels (`settings/`: the fused
    /// optimizer, precision, the input pipeline, syncs, layout, CUDA graphs, hand-written
    /// functions, BatchNorm folding), largest saving first.
    #[serde(default)]
    pub settings: Vec<Setting>,
    /// The settings and the proposals together, largest saving first.
    #[serde(default)]
    pub ranking: Vec<Ranked>,
}

/// One line of [`Advice::ranking`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// 1 = largest saving.
    pub rank: usize,
    /// `setting` or `proposal`.
    pub kind: String,
    /// The setting's or the proposal's id.
    pub id: String,
    pub title: String,
    pub saving_ns_per_step: f64,
    pub saving_pct_of_step: f64,
    /// What `saving_pct_of_step` is a share of: `gpu_time` or `wall_time` ([`Setting::pct_of`]).
    #[serde(default = "gpu_time")]
    pub pct_of: String,
}

fn gpu_time() -> String {
    "gpu_time".into()
}

/// Orders the settings and the proposals by saving into one ranking, and gives each setting
/// its place in it (proposals keep their rank among proposals, which `bench` and the reports
/// use).
fn rank_all(settings: &mut [Setting], proposals: &[Proposal]) -> Vec<Ranked> {
    let mut all: Vec<Ranked> = settings
        .iter()
        .map(|s| Ranked {
            rank: 0,
            kind: "setting".into(),
            id: s.id.clone(),
            title: s.title.clone(),
            saving_ns_per_step: s.saving_ns_per_step,
            saving_pct_of_step: s.saving_pct_of_step,
            pct_of: s.pct_of.clone(),
        })
        .chain(proposals.iter().map(|p| Ranked {
            rank: 0,
            kind: "proposal".into(),
            id: p.id.clone(),
            title: p.title.clone(),
            saving_ns_per_step: p.saving_ns_per_step,
            saving_pct_of_step: p.saving_pct_of_step,
            pct_of: gpu_time(),
        }))
        .collect();
    all.sort_by(|a, b| {
        b.saving_ns_per_step
            .total_cmp(&a.saving_ns_per_step)
            .then_with(|| a.kind.cmp(&b.kind).reverse())
            .then_with(|| a.id.cmp(&b.id))
    });
    for (i, r) in all.iter_mut().enumerate() {
        r.rank = i + 1;
        if r.kind == "setting" {
            if let Some(s) = settings.iter_mut().find(|s| s.id == r.id) {
                s.rank = r.rank;
            }
        }
    }
    all
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRef {
    pub file: String,
    pub source_format: String,
    pub device: Option<String>,
    /// Steps the per-step figures divide by (0: the run has none; figures are per run).
    pub steps: usize,
    /// The step the advice is restricted to, if any.
    pub step: Option<usize>,
}

/// Where one instance of a chain ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Location {
    pub module: Option<String>,
    pub pid: i64,
    pub tid: i64,
    /// Host time the chain's first op started.
    pub start_ns: i64,
    pub step: Option<usize>,
}

/// A chain a bundled kernel replaces, over all its instances with the same shapes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// Stable id (`wattn-4096x3x49x32-shifted`): `bench --proposal ID` takes it.
    pub id: String,
    /// 1 = largest saving.
    pub rank: usize,
    /// The pattern id of `patterns.txt`.
    pub pattern: String,
    pub title: String,
    pub kernel: Kernel,
    pub shape: String,
    /// `fp16` or `bf16`.
    pub dtype: String,
    /// The ops of the first instance, with their input shapes.
    pub ops: Vec<String>,
    /// Distinct module paths of the instances (op positions where there are none).
    pub modules: Vec<String>,
    pub locations: Vec<Location>,
    pub instances: u64,
    pub instances_per_step: f64,
    /// The chain's GPU time now, and the replacement's expected time.
    pub current_ns_per_step: f64,
    pub expected_ns_per_step: f64,
    pub saving_ns_per_step: f64,
    /// Of the step's GPU time.
    pub saving_pct_of_step: f64,
    pub estimate: Expected,
    /// `high`, `medium` or `low`, and why it is not higher.
    pub confidence: String,
    pub confidence_notes: Vec<String>,
    pub assumptions: Vec<String>,
    /// The Python call that uses the kernel (`import fuseprof_kernels as fk`).
    pub call: String,
    /// What `bench` rebuilds the chain from.
    pub params: BTreeMap<String, i64>,
    /// `bench`'s result, where the store has one.
    pub measured: Option<Measured>,
    /// The hardware counters' check of the estimate (runs recorded with `collect --metrics`;
    /// absent otherwise): `confidence` already includes it (`counters.rs` states the rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterCheck>,
}

/// A chain that matched a pattern but is not proposed, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotProposed {
    pub pattern: String,
    pub ops: Vec<String>,
    pub modules: Vec<String>,
    pub instances: u64,
    pub instances_per_step: f64,
    pub current_ns_per_step: f64,
    pub reason: String,
}

/// Consecutive memory-bound ops (optionally after a GEMM) that no bundled kernel covers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unbundled {
    pub ops: Vec<String>,
    pub modules: Vec<String>,
    pub instances: u64,
    pub instances_per_step: f64,
    pub current_ns_per_step: f64,
    /// Intermediates written and read back between the ops, per step.
    pub bytes_saved_per_step: f64,
    /// Those bytes at the memory ceiling: what one fused kernel would save at least.
    pub saving_ns_per_step: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub proposals: usize,
    /// GPU time per step of the chains proposed, their expected time, and the saving.
    pub current_ns_per_step: f64,
    pub expected_ns_per_step: f64,
    pub saving_ns_per_step: f64,
    pub saving_pct_of_step: f64,
    /// Share of the step's GPU time the proposed chains take now.
    pub coverage_pct_of_step: f64,
    /// Over the proposals `bench` measured and passed: the measured saving per step.
    pub measured_saving_ns_per_step: Option<f64>,
    pub unbundled_saving_ns_per_step: f64,
}

/// Short names for proposal ids.
fn slug(pattern: &str) -> &str {
    match pattern {
        "window_attention" => "wattn",
        "full_attention" => "attn",
        "sdpa" => "sdpa",
        "window_partition" => "wpart",
        "window_reverse" => "wrev",
        "gemm_gelu" => "gemm-gelu",
        "gemm_residual" => "gemm-res",
        "bias_residual" => "bias-res",
        "odd_gemm" => "pad-gemm",
        "fused_mlp" => "mlp",
        "patch_embed" => "patch",
        other => other,
    }
}

fn title(pattern: &str) -> &'static str {
    match pattern {
        "window_attention" => "window attention (q.k^T + bias + mask, softmax, .v) -> window fMHA",
        "full_attention" => "attention (matmul, softmax, matmul) -> fMHA",
        "sdpa" => "SDPA call -> fMHA",
        "window_partition" => "LayerNorm + shift + window partition -> one pass",
        "window_reverse" => "window reverse + shift + residual -> one pass",
        "gemm_gelu" => "linear + GELU -> GEMM with bias + GELU epilogue",
        "gemm_residual" => "linear + residual add -> GEMM with bias + residual epilogue",
        "bias_residual" => "bias add + residual add -> one vectorised pass",
        "odd_gemm" => "GEMM with N or K not a multiple of 8 -> padded GEMM",
        "fused_mlp" => {
            "LayerNorm + fc1 + GELU + fc2 + residual -> one kernel, hidden tensor on chip"
        }
        "patch_embed" => "patch embedding (convolution, kernel = stride) -> patchify + GEMM",
        _ => "chain",
    }
}

fn op_text(op: &OpInstance) -> String {
    match &op.dims {
        Some(d) => format!(
            "{} {}",
            op.name,
            serde_json::to_string(d).unwrap_or_default()
        ),
        None => op.name.clone(),
    }
}

fn dtype_name(ops: &[&OpInstance], names: &[String]) -> &'static str {
    let bf = |s: &str| s.contains("BFloat16") || s.contains("bf16") || s.contains("bfloat16");
    let recorded = ops
        .iter()
        .filter_map(|o| o.dtypes.as_ref()?.first())
        .next()
        .map(|t| bf(t));
    let from_kernels = || {
        ops.iter()
            .flat_map(|o| &o.records)
            .any(|r| bf(&names[r.name as usize]))
    };
    if recorded.unwrap_or_else(from_kernels) {
        "bf16"
    } else {
        "fp16"
    }
}

/// The op kinds whose chains a fused kernel could shorten (memory-bound, one pass each).
const MEMORY_BOUND: &[&str] = &[
    "add",
    "add_",
    "sub",
    "sub_",
    "mul",
    "mul_",
    "div",
    "div_",
    "gelu",
    "relu",
    "relu_",
    "silu",
    "sigmoid",
    "tanh",
    "hardswish",
    "layer_norm",
    "group_norm",
    "batch_norm",
    "rms_norm",
    "softmax",
    "log_softmax",
    "copy_",
    "contiguous",
    "clone",
    "to",
    "roll",
    "pad",
    "where",
    "masked_fill",
    "exp",
    "pow",
    "rsqrt",
    "neg",
    "reshape",
    "transpose",
    "permute",
];
const GEMMS: &[&str] = &[
    "linear",
    "addmm",
    "mm",
    "bmm",
    "matmul",
    "baddbmm",
    "conv2d",
    "convolution",
    "conv1d",
];

struct Group {
    positions: Vec<Vec<usize>>,
    ns: i64,
    replacement: Option<rules::Replacement>,
    reason: Option<String>,
    dtype: &'static str,
}

/// Advises on the run in `path`.
pub fn advise_file(path: &Path, cfg: &AdviseConfig) -> Result<Advice> {
    let mut store = fuseprof_store::Store::open(path).map_err(fuseprof_analyzer::Error::from)?;
    let trace = fuseprof_analyzer::op_trace(
        &mut store,
        &AnalyzeConfig {
            step: cfg.step,
            ..AnalyzeConfig::default()
        },
    )?;
    let mut advice = advise_trace(&trace, cfg)?;
    let measured = bench::read_results(&mut store)?;
    attach_measured(&mut advice, &measured);
    Ok(advice)
}

/// How far the replayed eager chain may lie from the recorded one (per call) before the saving
/// is said to rest on the smaller of the two.
pub const REPLAY_AGREEMENT: f64 = 0.25;

/// A proposal's measured saving, and what it rests on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeasuredSaving {
    /// (eager chain - ours) x instances per step, never more than the chain's recorded time.
    pub ns_per_step: f64,
    /// The eager chain's time per call the saving uses.
    pub eager_ns: f64,
    /// Where the replayed and the recorded chain differ by more than [`REPLAY_AGREEMENT`]:
    /// both, and which one the saving uses.
    pub note: Option<String>,
}

/// The saving `m` measured for `p`: the replayed eager chain against the bundled kernel, per
/// call, times the calls per step. Where the replay and the recording of the same chain differ
/// by more than [`REPLAY_AGREEMENT`] (the replay can run ops that the recording gives to another
/// proposal, as the LayerNorm the window reverse and the MLP both name), the smaller one is
/// used and the note says so; a saving is never more than the time the chain takes now.
pub fn measured_saving(p: &Proposal, m: &Measured) -> MeasuredSaving {
    let recorded = p.current_ns_per_step / p.instances_per_step.max(f64::MIN_POSITIVE);
    let replayed = m.baseline_ns;
    let apart = (replayed - recorded) / recorded;
    let (eager_ns, note) = if recorded > 0.0 && apart.abs() > REPLAY_AGREEMENT {
        let used = replayed.min(recorded);
        (
            used,
            Some(format!(
                "the replayed eager chain took {:.1} us a call, the recorded one {:.1} us \
                 ({:+.0}%); the saving uses the {} one",
                replayed / 1e3,
                recorded / 1e3,
                apart * 100.0,
                if used == recorded {
                    "recorded"
                } else {
                    "replayed"
                }
            )),
        )
    } else {
        (replayed, None)
    };
    // f64::min would take the current time for a NaN (a chain that failed to run): no saving.
    let saving = (eager_ns - m.ours_ns) * p.instances_per_step;
    MeasuredSaving {
        ns_per_step: if saving.is_nan() {
            f64::NAN
        } else {
            saving.min(p.current_ns_per_step)
        },
        eager_ns,
        note,
    }
}

/// Fills each proposal's `measured` from `bench` results (by id, for the same shape).
pub fn attach_measured(advice: &mut Advice, results: &[Measured]) {
    let mut total = 0.0;
    let mut any = false;
    for p in &mut advice.proposals {
        p.measured = results
            .iter()
            .find(|m| m.proposal_id == p.id && m.shape == p.shape)
            .cloned();
        if let Some(m) = &p.measured {
            if m.status == "passed" {
                any = true;
                total += measured_saving(p, m).ns_per_step;
            }
        }
    }
    advice.totals.measured_saving_ns_per_step = any.then_some(total);
}

/// Advises on an op trace.
pub fn advise_trace(trace: &OpTrace, cfg: &AdviseConfig) -> Result<Advice> {
    if trace.op_ranges == 0 {
        return Err(Error::NoOps {
            file: trace.file.clone(),
        });
    }
    if trace.op_ranges_with_shapes == 0 {
        return Err(Error::NoShapes {
            file: trace.file.clone(),
            ops: trace.op_ranges,
        });
    }
    let patterns = chain::parse_patterns(chain::PATTERNS).map_err(Error::Rules)?;
    let table =
        estimate::parse_calibration(include_str!("calibration.tsv")).map_err(Error::Rules)?;
    let mut notes = Vec::new();
    let device = trace.devices.first().and_then(|d| d.name.clone());
    // The calibration's efficiencies are against the built-in (measured) ceilings: use those
    // for a known GPU, the store's otherwise.
    let ceiling = device
        .as_deref()
        .and_then(estimate::builtin_ceiling)
        .or_else(|| trace.ceilings.first().cloned());
    let same_class = device
        .as_deref()
        .is_some_and(|d| d.contains("H100") || d.contains("H200"));
    if trace.steps == 0 {
        notes.push("no repeating step was found: every figure is per run, not per step".into());
    }
    if trace.op_ranges_with_shapes < trace.op_ranges {
        notes.push(format!(
            "{} of {} ops carry no input shapes; chains through them cannot be matched",
            trace.op_ranges - trace.op_ranges_with_shapes,
            trace.op_ranges
        ));
    }
    if trace.devices.len() > 1 {
        notes.push(format!(
            "{} devices: estimates use the first one's ceilings ({})",
            trace.devices.len(),
            device.as_deref().unwrap_or("unnamed")
        ));
    }
    let training = trace.has_backward;
    if training {
        notes.push(
            "the run trains (backward ops were recorded): the estimates cover forward passes \
             (the bundled kernels' backward passes are not benchmarked yet), so no chain is \
             proposed; they are listed as not proposed"
                .into(),
        );
    }

    // The work stream of each thread: ops that launched GPU work.
    let mut streams: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, op) in trace.ops.iter().enumerate() {
        if !op.records.is_empty() {
            streams.entry(op.thread).or_default().push(i);
        }
    }

    let mut groups: Vec<(String, String, Group)> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    let mut unbundled: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
    for stream in streams.values() {
        let ops: Vec<&OpInstance> = stream.iter().map(|&i| &trace.ops[i]).collect();
        let mut taken = vec![false; ops.len()];
        for start in 0..ops.len() {
            for p in &patterns {
                if taken[start] {
                    break;
                }
                let Some(m) = chain::match_at(p, &ops, &taken, start, true) else {
                    continue;
                };
                let ctx = rules::Ctx {
                    ops: &ops,
                    m: &m,
                    kernel_names: &trace.kernel_names,
                };
                let verdict = rules::judge(&p.id, &ctx);
                let (mut replacement, mut reason) = match verdict {
                    rules::Verdict::NoMatch => continue,
                    rules::Verdict::Replace(r) => (Some(r), None),
                    rules::Verdict::NotProposed(why) => (None, Some(why)),
                };
                let mut m = m;
                if let Some(from) = rules::context_from(&p.id) {
                    m.positions.retain(|&(step, _)| step < from);
                }
                if let Some(s) = m.split_by {
                    replacement = None;
                    reason = Some(format!(
                        "split by {} between its ops: one kernel would have to run that op in \
                         the middle",
                        op_text(ops[s])
                    ));
                } else if training && replacement.is_some() {
                    replacement = None;
                    reason = Some("training run: the estimate covers the forward pass only".into());
                }
                let matched: Vec<&OpInstance> = m.positions.iter().map(|&(_, q)| ops[q]).collect();
                let positions: Vec<usize> = m.positions.iter().map(|&(_, q)| stream[q]).collect();
                for &(_, q) in &m.positions {
                    taken[q] = true;
                }
                let ns: i64 = matched.iter().map(|o| o.gpu_ns).sum();
                let dtype = dtype_name(&matched, &trace.kernel_names);
                let shape_key = match &replacement {
                    Some(r) => format!("{}|{dtype}", r.shape),
                    None => format!(
                        "{}|{}",
                        reason.as_deref().unwrap_or(""),
                        matched
                            .iter()
                            .map(|o| op_text(o))
                            .collect::<Vec<_>>()
                            .join(";")
                    ),
                };
                let key = (p.id.clone(), shape_key);
                match index.get(&key) {
                    Some(&g) => {
                        groups[g].2.positions.push(positions);
                        groups[g].2.ns += ns;
                    }
                    None => {
                        index.insert(key.clone(), groups.len());
                        groups.push((
                            key.0,
                            key.1,
                            Group {
                                positions: vec![positions],
                                ns,
                                replacement,
                                reason,
                                dtype,
                            },
                        ));
                    }
                }
            }
        }
        // What no pattern took: runs of memory-bound ops (a GEMM may lead).
        let mut i = 0;
        while i < ops.len() {
            let lead = !taken[i] && GEMMS.contains(&ops[i].base_name());
            let mut j = i + usize::from(lead);
            while j < ops.len() && !taken[j] && MEMORY_BOUND.contains(&ops[j].base_name()) {
                j += 1;
            }
            if j - i >= 2 && j - i - usize::from(lead) >= 1 {
                let names: Vec<String> = ops[i..j].iter().map(|o| op_text(o)).collect();
                unbundled.push((names, stream[i..j].to_vec()));
                i = j;
            } else {
                i += 1;
            }
        }
    }

    let per_step = |ns: f64| ns / trace.steps.max(1) as f64;
    let step_gpu_ns = per_step(trace.gpu_ns as f64);
    let pct_of_step = |ns: f64| {
        if step_gpu_ns > 0.0 {
            ns * 100.0 / step_gpu_ns
        } else {
            0.0
        }
    };
    let modules_of = |positions: &[Vec<usize>]| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in positions {
            let op = &trace.ops[p[0]];
            let m = op.module.clone().unwrap_or_else(|| {
                format!(
                    "{} #{} (thread {}{})",
                    op.name,
                    p[0],
                    op.thread,
                    op.step.map(|s| format!(", step {s}")).unwrap_or_default()
                )
            });
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    };

    let mut proposals = Vec::new();
    let mut not_proposed = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (pattern, _, g) in groups {
        let instances = g.positions.len() as u64;
        let instances_per_step = per_step(instances as f64);
        let current = per_step(g.ns as f64);
        let first: Vec<&OpInstance> = g.positions[0].iter().map(|&i| &trace.ops[i]).collect();
        let ops: Vec<String> = first.iter().map(|o| op_text(o)).collect();
        let modules = modules_of(&g.positions);
        let not = |reason: String| NotProposed {
            pattern: pattern.clone(),
            ops: ops.clone(),
            modules: modules.clone(),
            instances,
            instances_per_step,
            current_ns_per_step: current,
            reason,
        };
        let Some(r) = g.replacement else {
            not_proposed.push(not(g.reason.unwrap_or_default()));
            continue;
        };
        let Some(ceiling) = &ceiling else {
            not_proposed.push(not(
                "no ceilings for this device (unknown GPU and none in the store): no estimate"
                    .into(),
            ));
            continue;
        };
        let est = match r.kernel {
            Kernel::GemmGelu { .. } | Kernel::GemmResidual { .. } => {
                // The chain's first op is the GEMM; its recorded time per call stands.
                let gemm_ns = g
                    .positions
                    .iter()
                    .map(|p| trace.ops[p[0]].gpu_ns as f64)
                    .sum::<f64>()
                    / instances as f64;
                estimate::expected_epilogue(&r.kernel, gemm_ns, ceiling, &table)
            }
            _ => estimate::expected(&r.kernel, ceiling, &table),
        };
        let Some(est) = est else {
            not_proposed.push(not("no calibration for this kernel".into()));
            continue;
        };
        let expected = est.ns * instances_per_step;
        let saving = current - expected;
        let mut title = title(&pattern).to_string();
        if pattern == "sdpa" {
            let backend = rules::sdpa_backend(first[0], &trace.kernel_names);
            title = format!("SDPA ({backend} backend) -> fMHA");
        }
        if saving <= 0.0 && !cfg.unprofitable {
            not_proposed.push(not(format!(
                "no saving expected: the chain takes {:.1} us per instance, the bundled kernel \
                 is expected at {:.1} us",
                g.ns as f64 / instances as f64 / 1e3,
                est.ns / 1e3
            )));
            continue;
        }
        if pct_of_step(saving) < cfg.min_saving_pct && !cfg.unprofitable {
            not_proposed.push(not(format!(
                "expected saving {:.2}% of the step, under --min-saving-pct {}",
                pct_of_step(saving),
                cfg.min_saving_pct
            )));
            continue;
        }
        let mut confidence_notes = Vec::new();
        if !same_class {
            confidence_notes.push(format!(
                "efficiencies were measured on an {}; this run's device is {}",
                estimate::CALIBRATION_DEVICE,
                device.as_deref().unwrap_or("unnamed")
            ));
        }
        if !(0.5..=2.0).contains(&est.size_ratio) {
            confidence_notes.push(format!(
                "the nearest benchmarked shape is {:.1}x this one's size",
                1.0 / est.size_ratio
            ));
        }
        let guessed = r
            .assumptions
            .iter()
            .filter(|a| !a.contains("constants at inference"))
            .count();
        if guessed > 0 {
            confidence_notes.push(format!(
                "{guessed} assumption(s) about what was not recorded"
            ));
        }
        let confidence = if !same_class {
            "low"
        } else if confidence_notes.is_empty() {
            "high"
        } else {
            "medium"
        };
        // What the chain's kernels measured, where the run has counters, moves it.
        let instances_ops: Vec<Vec<&OpInstance>> = g
            .positions
            .iter()
            .map(|p| p.iter().map(|&i| &trace.ops[i]).collect())
            .collect();
        let mut counter_check = counters::check(&instances_ops, &trace.kernel_names, ceiling);
        let confidence = match counter_check.as_mut() {
            Some(c) => {
                let adjusted = counters::adjust(confidence, c);
                if c.verdict != "inconclusive" || adjusted != confidence {
                    confidence_notes.push(c.note.clone());
                }
                adjusted
            }
            None => confidence.to_string(),
        };
        let shape_slug: String = r
            .shape
            .replace(" -> ", "-to-")
            .replace(", + ", "-")
            .replace(", ", "-")
            .replace(' ', "")
            .to_lowercase();
        let mut id = format!("{}-{}", slug(&pattern), shape_slug);
        if g.dtype == "bf16" {
            id.push_str("-bf16");
        }
        let n = ids.entry(id.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            id = format!("{id}-{n}");
        }
        proposals.push(Proposal {
            id,
            rank: 0,
            pattern: pattern.clone(),
            title,
            kernel: r.kernel.clone(),
            shape: r.shape.clone(),
            dtype: g.dtype.into(),
            ops,
            modules,
            locations: g
                .positions
                .iter()
                .map(|p| {
                    let op = &trace.ops[p[0]];
                    let (pid, tid) = trace.threads[op.thread as usize];
                    Location {
                        module: op.module.clone(),
                        pid,
                        tid,
                        start_ns: op.start_ns,
                        step: op.step,
                    }
                })
                .collect(),
            instances,
            instances_per_step,
            current_ns_per_step: current,
            expected_ns_per_step: expected,
            saving_ns_per_step: saving,
            saving_pct_of_step: pct_of_step(saving),
            estimate: est,
            confidence,
            confidence_notes,
            assumptions: r.assumptions.clone(),
            call: r.call.clone(),
            params: r.params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            measured: None,
            counters: counter_check,
        });
    }
    proposals.sort_by(|a, b| {
        b.saving_ns_per_step
            .total_cmp(&a.saving_ns_per_step)
            .then_with(|| a.id.cmp(&b.id))
    });
    for (i, p) in proposals.iter_mut().enumerate() {
        p.rank = i + 1;
    }
    not_proposed.sort_by(|a, b| {
        b.current_ns_per_step
            .total_cmp(&a.current_ns_per_step)
            .then_with(|| a.ops.cmp(&b.ops))
    });

    // Unbundled runs, grouped by their ops and shapes.
    let mut ub: Vec<Unbundled> = Vec::new();
    let mut ub_index: HashMap<Vec<String>, usize> = HashMap::new();
    let bw = ceiling.as_ref().map(|c| c.mem_bytes_per_s);
    for (names, positions) in unbundled {
        let ops: Vec<&OpInstance> = positions.iter().map(|&i| &trace.ops[i]).collect();
        let e = ops
            .iter()
            .find_map(|o| o.elem_bytes(&trace.kernel_names))
            .unwrap_or(2) as f64;
        // Each intermediate is written by one op and read by the next.
        let bytes: f64 = ops[1..]
            .iter()
            .map(|o| {
                o.dims
                    .as_ref()
                    .and_then(|d| d.first())
                    .map_or(0.0, |d| d.iter().product::<i64>() as f64 * e * 2.0)
            })
            .sum();
        let ns: i64 = ops.iter().map(|o| o.gpu_ns).sum();
        let module = ops[0].module.clone();
        let slot = *ub_index.entry(names.clone()).or_insert_with(|| {
            ub.push(Unbundled {
                ops: names.clone(),
                modules: Vec::new(),
                instances: 0,
                instances_per_step: 0.0,
                current_ns_per_step: 0.0,
                bytes_saved_per_step: 0.0,
                saving_ns_per_step: 0.0,
            });
            ub.len() - 1
        });
        let u = &mut ub[slot];
        u.instances += 1;
        u.instances_per_step = per_step(u.instances as f64);
        u.current_ns_per_step += per_step(ns as f64);
        u.bytes_saved_per_step += per_step(bytes);
        u.saving_ns_per_step = bw.map_or(0.0, |bw| u.bytes_saved_per_step / bw * 1e9);
        if let Some(m) = module {
            if !u.modules.contains(&m) {
                u.modules.push(m);
            }
        }
    }
    ub.retain(|u| u.saving_ns_per_step > 0.0);
    ub.sort_by(|a, b| {
        b.saving_ns_per_step
            .total_cmp(&a.saving_ns_per_step)
            .then_with(|| a.ops.cmp(&b.ops))
    });

    // `+ 0.0`: an empty f64 sum is -0.0, which prints as "-0.0%".
    let current: f64 = proposals.iter().map(|p| p.current_ns_per_step).sum::<f64>() + 0.0;
    let expected: f64 = proposals
        .iter()
        .map(|p| p.expected_ns_per_step)
        .sum::<f64>()
        + 0.0;
    let totals = Totals {
        proposals: proposals.len(),
        current_ns_per_step: current,
        expected_ns_per_step: expected,
        saving_ns_per_step: current - expected,
        saving_pct_of_step: pct_of_step(current - expected),
        coverage_pct_of_step: pct_of_step(current),
        measured_saving_ns_per_step: None,
        unbundled_saving_ns_per_step: ub.iter().map(|u| u.saving_ns_per_step).sum::<f64>() + 0.0,
    };
    let mut settings = settings::all(trace, step_gpu_ns, ceiling.as_ref(), cfg.min_saving_pct);
    let ranking = rank_all(&mut settings, &proposals);
    Ok(Advice {
        format: "fuseprof-advice".into(),
        version: ADVICE_VERSION,
        run: RunRef {
            file: trace.file.clone(),
            source_format: trace.source_format.clone(),
            device,
            steps: trace.steps,
            step: trace.step,
        },
        step_gpu_ns,
        calibration: format!(
            "{} on an {} (each kernel's time interpolated between its layer's benchmarked batch \
             sizes, scaled to this device by the ceilings)",
            estimate::CALIBRATION_SOURCE,
            estimate::CALIBRATION_DEVICE
        ),
        ceiling,
        proposals,
        not_proposed,
        unbundled: ub,
        totals,
        notes,
        settings,
        ranking,
    })
}
