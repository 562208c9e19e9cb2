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

use std::collections::BTreeMap;

use fuseprof_analyzer::headroom::Ceiling;
use fuseprof_analyzer::{OpInstance, OpTrace};
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
    /// The step where the symptom costs most, to look at in a timeline (None in a run
    /// without steps, and in documents from before it).
    #[serde(default)]
    pub worst_step: Option<WorstStep>,
    /// The kernel names behind the saving, as a timeline shows them, most time first (at
    /// most [`MAX_NAMES`]).
    #[serde(default)]
    pub kernels: Vec<String>,
    /// The host ranges behind the saving (ops, user ranges such as the data loader's,
    /// synchronising CUDA calls), as a timeline shows them, most time first (at most
    /// [`MAX_NAMES`]).
    #[serde(default)]
    pub ops: Vec<String>,
}

/// The most names [`Setting::kernels`] and [`Setting::ops`] keep each.
pub const MAX_NAMES: usize = 5;

/// One step's window on the run's clock, where a setting's symptom costs most.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorstStep {
    /// The step's index among the run's steps (what `advise --step` takes).
    pub step: usize,
    /// The step's host window on the run's clock.
    pub start_ns: i64,
    pub end_ns: i64,
    /// The same window in milliseconds from the run's first record: the times a timeline of
    /// the run shows (Perfetto on the trace or on `fuseprof export`).
    pub start_ms: f64,
    pub end_ms: f64,
    /// What the symptom costs in this step (the rule's `current_ns_per_step`, of this step
    /// alone).
    pub symptom_ns: f64,
}

impl WorstStep {
    /// `step 7, 1234.5-1290.2 ms`; three decimals for a step shorter than 1 ms, which one
    /// decimal would not tell apart.
    pub fn describe(&self) -> String {
        let d = if self.end_ms - self.start_ms < 1.0 {
            3
        } else {
            1
        };
        format!(
            "step {}, {:.d$}-{:.d$} ms",
            self.step, self.start_ms, self.end_ms
        )
    }
}

/// Collects what a rule shows a user to find in a timeline: the symptom's time per step and
/// the kernel and host-range names behind it, each with its time.
#[derive(Default)]
pub(crate) struct Finder {
    per_step: BTreeMap<usize, f64>,
    kernels: BTreeMap<String, i64>,
    ops: BTreeMap<String, i64>,
}

impl Finder {
    /// `ns` of the symptom in `step` (nothing in a run without steps).
    pub fn at_step(&mut self, step: Option<usize>, ns: f64) {
        if let Some(k) = step {
            *self.per_step.entry(k).or_default() += ns;
        }
    }

    /// `ns` of the symptom at time `t` on the run's clock, in the step whose window holds it.
    pub fn at_time(&mut self, ctx: &Ctx, t: i64, ns: f64) {
        self.at_step(ctx.step_at(t), ns);
    }

    pub fn kernel(&mut self, name: &str, ns: i64) {
        *self.kernels.entry(name.to_string()).or_default() += ns;
    }

    pub fn op(&mut self, name: &str, ns: i64) {
        *self.ops.entry(name.to_string()).or_default() += ns;
    }

    /// `op` as a whole: its step, its name and every kernel it launched, at their GPU time.
    pub fn op_instance(&mut self, ctx: &Ctx, op: &OpInstance) {
        self.at_step(op.step, op.gpu_ns as f64);
        self.op(&op.name, op.gpu_ns);
        for r in &op.records {
            self.kernel(&ctx.trace.kernel_names[r.name as usize], r.dur_ns);
        }
    }

    /// Fills `s`'s worst step and names.
    pub fn fill(self, ctx: &Ctx, s: &mut Setting) {
        // The most symptom; the earliest step among equals.
        let worst = self.per_step.iter().filter(|(_, &ns)| ns > 0.0).fold(
            None::<(usize, f64)>,
            |best, (&k, &ns)| match best {
                Some((_, b)) if b >= ns => best,
                _ => Some((k, ns)),
            },
        );
        s.worst_step = worst.and_then(|(k, ns)| ctx.worst_step(k, ns));
        s.kernels = top_names(self.kernels);
        s.ops = top_names(self.ops);
    }
}

/// The names with the most time, most first (then by name), at most [`MAX_NAMES`].
fn top_names(by_name: BTreeMap<String, i64>) -> Vec<String> {
    let mut v: Vec<(String, i64)> = by_name.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.into_iter().take(MAX_NAMES).map(|(n, _)| n).collect()
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

    /// Where to look in a timeline, in one line: `step 7, 1234.5-1290.2 ms: kernels A, B;
    /// ops C` (the step's window in ms from the run's first record), with at most `names`
    /// names of each kind, each without a leading `void ` and cut to `chars` characters (the
    /// start of a name is what a timeline search needs); None where the setting has neither a
    /// worst step nor names.
    pub fn where_to_look(&self, names: usize, chars: usize) -> Option<String> {
        let cut = |n: &String| {
            let n = n.strip_prefix("void ").unwrap_or(n);
            if n.chars().count() > chars {
                format!("{}...", n.chars().take(chars).collect::<String>())
            } else {
                n.to_string()
            }
        };
        let list = |label: &str, v: &[String]| {
            (!v.is_empty()).then(|| {
                let mut l = v.iter().take(names).map(cut).collect::<Vec<_>>().join(", ");
                if v.len() > names {
                    l.push_str(", ...");
                }
                format!("{label} {l}")
            })
        };
        let named: Vec<String> = [list("kernels", &self.kernels), list("ops", &self.ops)]
            .into_iter()
            .flatten()
            .collect();
        let at = self.worst_step.as_ref().map(|w| w.describe());
        match (at, named.is_empty()) {
            (None, true) => None,
            (Some(at), true) => Some(at),
            (None, false) => Some(named.join("; ")),
            (Some(at), false) => Some(format!("{at}: {}", named.join("; "))),
        }
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
            worst_step: None,
            kernels: Vec::new(),
            ops: Vec::new(),
        }
    }

    /// The step (its index among the run's steps) whose window holds `t`.
    pub fn step_at(&self, t: i64) -> Option<usize> {
        let w = &self.trace.context.windows;
        let i = w.partition_point(|&(s, _)| s <= t);
        (i > 0 && t < w[i - 1].1).then(|| self.trace.step.unwrap_or(i - 1))
    }

    /// Step `k`'s window (an index among the run's steps) with `symptom_ns` in it.
    pub fn worst_step(&self, k: usize, symptom_ns: f64) -> Option<WorstStep> {
        let c = &self.trace.context;
        // A trace restricted to one step holds that step's window alone.
        let &(start_ns, end_ns) = match self.trace.step {
            Some(only) if only == k => c.windows.first()?,
            Some(_) => return None,
            None => c.windows.get(k)?,
        };
        let ms = |t: i64| (t - c.origin_ns) as f64 / 1e6;
        Some(WorstStep {
            step: k,
            start_ns,
            end_ns,
            start_ms: ms(start_ns),
            end_ms: ms(end_ns),
            symptom_ns,
        })
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
