//! Advice that comes before kernels: a change to the program's own settings that the trace
//! says would pay, with the time it costs now, the expected saving, the evidence and the
//! one-line change. One file per rule; each reads the [`OpTrace`] (ops, their kernels, and the
//! run around them in [`fuseprof_analyzer::TraceContext`]) and returns nothing where the
//! symptom is absent:
//!
//! - `optimizer`: foreach Adam/AdamW -> `fused=True`;
//! - `precision`: GEMMs and convolutions in FP32 on tensor-core GPUs -> autocast bf16 or TF32;
//! - `input`: the GPU idle while the host is in the data loader -> workers, pinned memory;
//! - `sync`: synchronising calls inside the step followed by GPU idle;
//! - `conv_layout`: NCHW convolutions transposed to NHWC on every call -> channels-last;
//! - `launch`: launch-bound stretches -> CUDA graphs (`torch.compile(mode="reduce-overhead")`);
//! - `handwritten`: LayerNorm, RMSNorm, GELU and softmax written out as elementwise chains;
//! - `bn_fold`: inference BatchNorm right after a convolution -> folded into it.

mod bn_fold;
mod conv_layout;
mod handwritten;
mod input;
mod launch;
mod optimizer;
mod precision;
mod sync;

use fuseprof_analyzer::headroom::Ceiling;
use fuseprof_analyzer::OpTrace;
use serde::{Deserialize, Serialize};

/// A change to the program (not a kernel) and what it should save.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// `optimizer-fused`, `precision-bf16`, `input-pipeline`, `sync-in-step`,
    /// `conv-channels-last`, `launch-cuda-graphs`, `handwritten-norms`, `bn-fold`.
    pub id: String,
    /// Position among the settings and the kernel proposals together, by saving (1 = largest;
    /// [`crate::Advice::ranking`] lists them all).
    #[serde(default)]
    pub rank: usize,
    pub title: String,
    /// GPU time per step of what the change removes or shortens (for the idle-time rules: the
    /// GPU's idle time per step they account for).
    pub current_ns_per_step: f64,
    pub expected_ns_per_step: f64,
    pub saving_ns_per_step: f64,
    pub saving_pct_of_step: f64,
    /// What `saving_pct_of_step` is a share of: `gpu_time` (the step's GPU time, as the
    /// proposals' are) or `wall_time` (the step's wall time, for a saving out of the GPU's
    /// idle time, which the GPU time does not hold).
    #[serde(default = "gpu_time")]
    pub pct_of: String,
    /// How the expected time was reached, and what the estimate leaves out.
    pub estimate: String,
    /// What in the trace shows it: the kernels, ops and gaps, their counts and times.
    pub evidence: Vec<String>,
    /// The change, as one line of the program.
    pub change: String,
}

fn gpu_time() -> String {
    "gpu_time".into()
}

impl Setting {
    /// Gives the saving as a share of the step's wall time.
    pub(crate) fn of_wall_time(&mut self, ctx: &Ctx) {
        self.pct_of = "wall_time".into();
        self.saving_pct_of_step = ctx.pct_of_wall(self.saving_ns_per_step);
    }

    /// `the step` or `the step's wall time`, for the texts beside the percentage.
    pub fn pct_basis(&self, per: &str) -> String {
        if self.pct_of == "wall_time" {
            format!("the {per}'s wall time")
        } else {
            format!("the {per}")
        }
    }
}

/// What every rule reads.
pub(crate) struct Ctx<'a> {
    pub trace: &'a OpTrace,
    /// GPU time per step (per run without steps).
    pub step_gpu_ns: f64,
    /// Wall time per step: the steps' host windows (without steps, the devices' span), the
    /// GPU's busy and idle time together.
    pub step_wall_ns: f64,
    /// The ceilings the kernel estimates use (built-in for a known GPU, else the store's).
    pub ceiling: Option<&'a Ceiling>,
}

impl Ctx<'_> {
    pub fn pct(&self, ns: f64) -> f64 {
        if self.step_gpu_ns > 0.0 {
            100.0 * ns / self.step_gpu_ns
        } else {
            0.0
        }
    }

    /// `ns` as a share of the step's wall time.
    pub fn pct_of_wall(&self, ns: f64) -> f64 {
        if self.step_wall_ns > 0.0 {
            100.0 * ns / self.step_wall_ns
        } else {
            0.0
        }
    }

    /// A run-wide sum per step.
    pub fn per_step(&self, ns: f64) -> f64 {
        ns / self.trace.steps.max(1) as f64
    }

    /// `step` or `run`, for the texts.
    pub fn per(&self) -> &'static str {
        if self.trace.steps == 0 {
            "run"
        } else {
            "step"
        }
    }

    /// A setting from `current` to `expected` per step; the rule fills in the texts.
    pub fn setting(&self, id: &str, title: &str, current: f64, expected: f64) -> Setting {
        Setting {
            id: id.into(),
            rank: 0,
            title: title.into(),
            current_ns_per_step: current,
            expected_ns_per_step: expected,
            saving_ns_per_step: current - expected,
            saving_pct_of_step: self.pct(current - expected),
            pct_of: gpu_time(),
            estimate: String::new(),
            evidence: Vec::new(),
            change: String::new(),
        }
    }
}

/// Microseconds with one decimal, for the texts.
pub(crate) fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

/// The op name without its namespace.
pub(crate) fn base(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

/// Every rule's advice on `trace`, largest saving first. A setting expected to save less than
/// `min_saving_pct` of the step is left out, as proposals are: a rule whose symptom is present
/// but costs next to nothing says nothing.
pub(crate) fn all(
    trace: &OpTrace,
    step_gpu_ns: f64,
    ceiling: Option<&Ceiling>,
    min_saving_pct: f64,
) -> Vec<Setting> {
    let c = &trace.context;
    let step_wall_ns = if c.windows.is_empty() {
        c.timeline
            .iter()
            .map(|d| d.timeline.span_ns)
            .max()
            .unwrap_or(0) as f64
    } else {
        c.windows.iter().map(|&(s, e)| (e - s) as f64).sum::<f64>() / c.windows.len() as f64
    };
    let ctx = Ctx {
        trace,
        step_gpu_ns,
        step_wall_ns,
        ceiling,
    };
    let mut out: Vec<Setting> = [
        optimizer::rule(&ctx),
        precision::rule(&ctx),
        input::rule(&ctx),
        sync::rule(&ctx),
        conv_layout::rule(&ctx),
        launch::rule(&ctx),
        handwritten::rule(&ctx),
        bn_fold::rule(&ctx),
    ]
    .into_iter()
    .flatten()
    .filter(|s| s.saving_ns_per_step > 0.0 && s.saving_pct_of_step >= min_saving_pct)
    .collect();
    out.sort_by(|a, b| {
        b.saving_ns_per_step
            .total_cmp(&a.saving_ns_per_step)
            .then_with(|| a.id.cmp(&b.id))
    });
    out
}

#[cfg(test)]
pub(crate) mod testing {
    //! Synthetic traces for the rules' unit tests: ops on one thread, each with its kernels.
    use fuseprof_analyzer::{Class, DeviceSummary, GpuRecord, OpInstance, OpTrace};

    /// An op: name, input dims (JSON, "" for none), dtypes (JSON, "" for none), and its
    /// kernels (name, class, ns).
    pub struct Op<'a>(
        pub &'a str,
        pub &'a str,
        pub &'a str,
        pub Vec<(&'a str, Class, i64)>,
    );

    /// A trace of `ops` on an H100 (compute capability 9.0), one after another 10 us apart,
    /// `steps` steps (the ops are each step's ops repeated).
    pub fn trace(ops: &[Op], steps: usize, backward: bool) -> OpTrace {
        let mut kernel_names: Vec<String> = Vec::new();
        let mut out = Vec::new();
        let mut t = 0;
        let mut gpu_ns = 0;
        for step in 0..steps.max(1) {
            for op in ops {
                let mut records = Vec::new();
                for &(k, class, ns) in &op.3 {
                    let name = match kernel_names.iter().position(|n| n == k) {
                        Some(i) => i,
                        None => {
                            kernel_names.push(k.into());
                            kernel_names.len() - 1
                        }
                    } as u32;
                    records.push(GpuRecord {
                        name,
                        class,
                        dur_ns: ns,
                        launched_by: name,
                        counters: None,
                    });
                    gpu_ns += ns;
                }
                out.push(OpInstance {
                    thread: 0,
                    start_ns: t,
                    end_ns: t + 5_000,
                    name: op.0.into(),
                    dims: (!op.1.is_empty()).then(|| serde_json::from_str(op.1).unwrap()),
                    dtypes: (!op.2.is_empty()).then(|| serde_json::from_str(op.2).unwrap()),
                    module: None,
                    step: (steps > 0).then_some(step),
                    gpu_ns: op.3.iter().map(|k| k.2).sum(),
                    records,
                });
                t += 10_000;
            }
        }
        let context = fuseprof_analyzer::TraceContext {
            compute_capability: vec![Some((9, 0))],
            ..Default::default()
        };
        OpTrace {
            file: "synthetic.sqlite".into(),
            source_format: "kineto".into(),
            devices: vec![DeviceSummary {
                id: 0,
                name: Some("NVIDIA H100 80GB HBM3".into()),
            }],
            ceilings: vec![],
            threads: vec![(1, 1)],
            step: None,
            steps,
            gpu_ns,
            ops: out,
            kernel_names,
            op_ranges: ops.len() as u64,
            op_ranges_with_shapes: ops.len() as u64,
            has_backward: backward,
            context,
        }
    }

    /// The built-in H100 ceilings.
    pub fn h100() -> fuseprof_analyzer::headroom::Ceiling {
        crate::estimate::builtin_ceiling("NVIDIA H100 80GB HBM3").unwrap()
    }
}
