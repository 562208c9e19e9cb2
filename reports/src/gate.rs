//! The CI gate: rules such as `step_time<=+3%,op:aten::addmm<=+10%,new_kernels<=0`, checked
//! against a run and its baseline.
//!
//! Step time is compared through the per-step distributions of both runs: a change counts only
//! when it is larger than the noise, `noise_sigmas` standard errors of the difference of the two
//! means (Welch: `sqrt(s_b^2/n_b + s_a^2/n_a)`, sample standard deviations of the steps' GPU
//! time). Op, kernel and class rules compare per-step totals (the diff's), ignoring changes
//! under 1 us per step, as `fuseprof diff` does.

use std::path::Path;

use fuseprof_analyzer::{Analysis, Diff, DiffStatus};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Changes smaller than this per step are never a regression (the diff's `same`).
const MIN_DELTA_NS: f64 = 1_000.0;

/// What a rule measures.
#[derive(Clone, Debug, PartialEq)]
pub enum Metric {
    /// GPU time per step (kernels, copies, fills launched in the step).
    StepTime,
    /// Host wall time per step.
    StepWall,
    /// Self GPU time per step of one op type (`aten::addmm`).
    Op(String),
    /// GPU time per step of one kernel name.
    Kernel(String),
    /// GPU time per step of one kernel class (`gemm`).
    Class(String),
    /// Kernel names in the run that the baseline does not have.
    NewKernels,
    /// Kernel names of the baseline that the run does not have.
    RemovedKernels,
    /// Op types in the run that the baseline does not have.
    NewOps,
}

/// The bound a rule sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// Change against the baseline, percent (`+3%`).
    RelativePct(f64),
    /// Change against the baseline, ns (`+50us`).
    DeltaNs(f64),
    /// The run's own value, ns (`12ms`, no sign): needs no baseline.
    AbsoluteNs(f64),
    /// A count (`0`).
    Count(f64),
}

/// One parsed rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// As written.
    pub text: String,
    pub metric: Metric,
    /// `<` rather than `<=`.
    pub strict: bool,
    pub limit: Limit,
}

/// Rules plus how noise is judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    pub rules: Vec<Rule>,
    /// How many standard errors of the step-time difference count as noise.
    pub noise_sigmas: f64,
}

/// The TOML form of a gate: `rules = ["step_time<=+3%"]`, `noise_sigmas = 2.0`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GateFile {
    rules: Vec<String>,
    noise_sigmas: Option<f64>,
}

impl Gate {
    /// Rules separated by commas (commas inside `<>`, `()` or `[]`, as in kernel names, do not
    /// split), with the default noise of 2 standard errors.
    pub fn parse(text: &str) -> Result<Gate> {
        let rules = split_rules(text)
            .into_iter()
            .map(|r| parse_rule(r.trim()))
            .collect::<Result<Vec<_>>>()?;
        if rules.is_empty() {
            return Err(Error::BadRule {
                rule: text.into(),
                reason: "no rules".into(),
            });
        }
        Ok(Gate {
            rules,
            noise_sigmas: 2.0,
        })
    }

    /// A TOML file with `rules = [...]` and optionally `noise_sigmas`.
    pub fn from_toml_file(path: &Path) -> Result<Gate> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let file: GateFile = toml::from_str(&text).map_err(|e| Error::BadInput {
            path: path.into(),
            reason: format!(
                "not a gate file (rules = [\"step_time<=+3%\", ...]): {}",
                e.message()
            ),
        })?;
        let mut gate = Gate::parse(&file.rules.join(","))?;
        if let Some(s) = file.noise_sigmas {
            if !(s.is_finite() && s >= 0.0) {
                return Err(Error::BadInput {
                    path: path.into(),
                    reason: format!("noise_sigmas = {s}: expected a number >= 0"),
                });
            }
            gate.noise_sigmas = s;
        }
        Ok(gate)
    }

    /// `--gate ARG`: a TOML file when ARG names an existing file or ends in `.toml`, rules
    /// otherwise.
    pub fn from_arg(arg: &str) -> Result<Gate> {
        let p = Path::new(arg);
        if arg.ends_with(".toml") || p.is_file() {
            Gate::from_toml_file(p)
        } else {
            Gate::parse(arg)
        }
    }

    /// Whether any rule compares against a baseline.
    pub fn needs_baseline(&self) -> bool {
        self.rules
            .iter()
            .any(|r| !matches!(r.limit, Limit::AbsoluteNs(_)))
    }
}

fn split_rules(text: &str) -> Vec<&str> {
    // Only kernel names carry brackets (`void gemm<half, 128>(...)`): inside a kernel rule, a
    // `<` that is not followed by `=`, `+` or `-` opens a template argument list.
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let in_kernel = text[start..i].trim_start().starts_with("kernel:");
        let next = text[i + c.len_utf8()..].chars().next();
        match c {
            '<' if in_kernel && !matches!(next, Some('=' | '+' | '-')) => depth += 1,
            '>' if in_kernel => depth -= 1,
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth <= 0 => {
                out.push(&text[start..i]);
                start = i + 1;
                depth = 0;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter().filter(|r| !r.trim().is_empty()).collect()
}

fn bad(rule: &str, reason: impl Into<String>) -> Error {
    Error::BadRule {
        rule: rule.into(),
        reason: reason.into(),
    }
}

/// `METRIC<=VALUE` or `METRIC<VALUE`.
pub fn parse_rule(text: &str) -> Result<Rule> {
    // The operator is the last `<` of the rule: kernel names may hold `<` themselves.
    let at = text
        .rfind('<')
        .ok_or_else(|| bad(text, "expected METRIC<=VALUE, e.g. step_time<=+3%"))?;
    let (lhs, rest) = text.split_at(at);
    let (strict, value) = match rest.strip_prefix("<=") {
        Some(v) => (false, v),
        None => (true, &rest[1..]),
    };
    let lhs = lhs.trim();
    let metric = match lhs {
        "step_time" => Metric::StepTime,
        "step_wall" => Metric::StepWall,
        "new_kernels" => Metric::NewKernels,
        "removed_kernels" => Metric::RemovedKernels,
        "new_ops" => Metric::NewOps,
        _ => {
            let (kind, name) = lhs.split_once(':').ok_or_else(|| {
                bad(
                    text,
                    format!(
                        "unknown metric {lhs:?}: expected step_time, step_wall, new_kernels, \
                         removed_kernels, new_ops, op:NAME, kernel:NAME or class:NAME"
                    ),
                )
            })?;
            let name = name.trim().to_string();
            if name.is_empty() {
                return Err(bad(text, format!("{kind}: needs a name")));
            }
            match kind {
                "op" => Metric::Op(name),
                "kernel" => Metric::Kernel(name),
                "class" => {
                    if fuseprof_analyzer::Class::parse(&name).is_none() {
                        return Err(bad(text, format!("unknown kernel class {name:?}")));
                    }
                    Metric::Class(name)
                }
                _ => {
                    return Err(bad(
                        text,
                        format!("unknown metric kind {kind:?}: expected op, kernel or class"),
                    ))
                }
            }
        }
    };
    let limit = parse_limit(text, value.trim(), &metric)?;
    Ok(Rule {
        text: text.to_string(),
        metric,
        strict,
        limit,
    })
}

fn parse_limit(rule: &str, v: &str, metric: &Metric) -> Result<Limit> {
    let counts = matches!(
        metric,
        Metric::NewKernels | Metric::RemovedKernels | Metric::NewOps
    );
    if counts {
        return match v.parse::<u64>() {
            Ok(n) => Ok(Limit::Count(n as f64)),
            Err(_) => Err(bad(rule, format!("{v:?}: expected a count such as 0"))),
        };
    }
    let signed = v.starts_with('+') || v.starts_with('-');
    let (num, unit) = match v.find(|c: char| c.is_ascii_alphabetic() || c == '%' || c == 'µ') {
        Some(i) => (&v[..i], &v[i..]),
        None => (v, ""),
    };
    let x: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite())
        .ok_or_else(|| {
            bad(
                rule,
                format!("{v:?}: expected a number such as +3% or +50us"),
            )
        })?;
    let scale = match unit.trim() {
        "%" => return Ok(Limit::RelativePct(x)),
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "" => {
            return Err(bad(
                rule,
                format!("{v:?}: give a unit: % (change), or ns/us/ms/s"),
            ))
        }
        u => {
            return Err(bad(
                rule,
                format!("unknown unit {u:?}: expected %, ns, us, ms or s"),
            ))
        }
    };
    Ok(if signed {
        Limit::DeltaNs(x * scale)
    } else {
        Limit::AbsoluteNs(x * scale)
    })
}

/// Step time of two runs compared through their per-step distributions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepComparison {
    pub before_steps: usize,
    pub after_steps: usize,
    /// Mean GPU time per step.
    pub before_mean_ns: f64,
    pub after_mean_ns: f64,
    pub before_stddev_ns: f64,
    pub after_stddev_ns: f64,
    pub delta_ns: f64,
    pub delta_pct: f64,
    /// `noise_sigmas` standard errors of the difference; 0 when a run has fewer than 2 steps.
    pub noise_ns: f64,
    pub noise_pct: f64,
    /// Whether the change is larger than the noise.
    pub significant: bool,
    /// How the noise was judged, for the report.
    pub method: String,
}

/// Per-step values of a run: the steps' GPU (or wall) time, or the whole run as one step.
pub fn step_values(a: &Analysis, wall: bool) -> Vec<f64> {
    if a.steps.steps.is_empty() {
        return vec![a.totals.gpu_ns as f64];
    }
    a.steps
        .steps
        .iter()
        .map(|s| if wall { s.wall_ns } else { s.gpu_ns } as f64)
        .collect()
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, sd)
}

/// Compares the per-step times of `before` and `after` (GPU time, or wall time with `wall`).
pub fn compare_steps(before: &[f64], after: &[f64], noise_sigmas: f64) -> StepComparison {
    let (mb, sb) = mean_sd(before);
    let (ma, sa) = mean_sd(after);
    let delta = ma - mb;
    let enough = before.len() > 1 && after.len() > 1;
    let noise = if enough {
        noise_sigmas * (sb * sb / before.len() as f64 + sa * sa / after.len() as f64).sqrt()
    } else {
        0.0
    };
    let method = if enough {
        format!(
            "mean of {} steps against mean of {} steps; noise = {noise_sigmas} standard errors \
             of the difference (Welch, sample standard deviation of each run's steps) = {:.3} ms; \
             a change inside it is not a regression",
            after.len(),
            before.len(),
            noise / 1e6
        )
    } else {
        format!(
            "{} and {} steps: too few to estimate the noise, so every change beyond the rule's \
             limit counts",
            before.len(),
            after.len()
        )
    };
    StepComparison {
        before_steps: before.len(),
        after_steps: after.len(),
        before_mean_ns: mb,
        after_mean_ns: ma,
        before_stddev_ns: sb,
        after_stddev_ns: sa,
        delta_ns: delta,
        delta_pct: if mb > 0.0 { delta * 100.0 / mb } else { 0.0 },
        noise_ns: noise,
        noise_pct: if mb > 0.0 { noise * 100.0 / mb } else { 0.0 },
        significant: delta.abs() > noise,
        method,
    }
}

/// One rule's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleOutcome {
    pub rule: String,
    pub passed: bool,
    /// What was measured, in words (`+4.1% (9.71 -> 10.11 ms per step, noise ±0.3%)`).
    pub measured: String,
}

/// Every rule's verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateResult {
    pub outcomes: Vec<RuleOutcome>,
}

impl GateResult {
    pub fn passed(&self) -> bool {
        self.outcomes.iter().all(|o| o.passed)
    }
    pub fn failed(&self) -> impl Iterator<Item = &RuleOutcome> {
        self.outcomes.iter().filter(|o| !o.passed)
    }
}

fn within(x: f64, limit: f64, strict: bool) -> bool {
    if strict {
        x < limit
    } else {
        x <= limit
    }
}

fn ms(ns: f64) -> String {
    format!("{:.3} ms", ns / 1e6)
}

fn pct_text(before: f64, after: f64) -> String {
    if before > 0.0 {
        format!("{:+.1}%", (after - before) * 100.0 / before)
    } else if after > 0.0 {
        "new".into()
    } else {
        "+0.0%".into()
    }
}

/// The baseline's analysis and the diff against it.
pub struct Baseline<'a> {
    pub analysis: &'a Analysis,
    pub diff: &'a Diff,
}

/// Checks every rule. A rule that compares against a baseline fails with an error when there
/// is none (a gate that silently passes is worse than none).
pub fn evaluate(gate: &Gate, run: &Analysis, baseline: Option<&Baseline>) -> Result<GateResult> {
    let mut outcomes = Vec::new();
    for rule in &gate.rules {
        outcomes.push(evaluate_rule(gate, rule, run, baseline)?);
    }
    Ok(GateResult { outcomes })
}

fn per_step_value(a: &Analysis, metric: &Metric) -> Option<f64> {
    let steps = a.steps.steps.len().max(1) as f64;
    let total = match metric {
        Metric::Op(n) => a.by_op.iter().find(|r| &r.name == n).map(|r| r.self_ns),
        Metric::Kernel(n) => a
            .by_kernel
            .iter()
            .find(|r| &r.name == n)
            .map(|r| r.total_ns),
        Metric::Class(n) => a
            .by_class
            .iter()
            .find(|r| r.class.as_str() == n)
            .map(|r| r.total_ns),
        _ => None,
    }?;
    Some(total as f64 / steps)
}

fn evaluate_rule(
    gate: &Gate,
    rule: &Rule,
    run: &Analysis,
    baseline: Option<&Baseline>,
) -> Result<RuleOutcome> {
    let need = |what: &str| {
        baseline.ok_or_else(|| {
            bad(
                &rule.text,
                format!("{what} compares against a baseline; pass --baseline"),
            )
        })
    };
    let outcome = |passed: bool, measured: String| RuleOutcome {
        rule: rule.text.clone(),
        passed,
        measured,
    };
    match &rule.metric {
        Metric::StepTime | Metric::StepWall => {
            let wall = rule.metric == Metric::StepWall;
            let after = step_values(run, wall);
            if let Limit::AbsoluteNs(limit) = rule.limit {
                let (mean, _) = mean_sd(&after);
                return Ok(outcome(
                    within(mean, limit, rule.strict),
                    format!("{} per step (mean of {} steps)", ms(mean), after.len()),
                ));
            }
            let b = need("a change")?;
            let before = step_values(b.analysis, wall);
            let c = compare_steps(&before, &after, gate.noise_sigmas);
            let x = match rule.limit {
                Limit::RelativePct(_) => c.delta_pct,
                _ => c.delta_ns,
            };
            let limit = match rule.limit {
                Limit::RelativePct(p) => p,
                Limit::DeltaNs(d) => d,
                _ => unreachable!("counts are rejected by the parser for step metrics"),
            };
            // A change beyond the limit still passes when it is inside the noise.
            let passed = within(x, limit, rule.strict) || !c.significant;
            let mut m = format!(
                "{:+.2}% ({} -> {} per step, noise ±{:.2}%)",
                c.delta_pct,
                ms(c.before_mean_ns),
                ms(c.after_mean_ns),
                c.noise_pct
            );
            if !within(x, limit, rule.strict) && !c.significant {
                m.push_str(": inside the noise");
            }
            Ok(outcome(passed, m))
        }
        Metric::Op(name) | Metric::Kernel(name) | Metric::Class(name) => {
            let after = per_step_value(run, &rule.metric);
            if let Limit::AbsoluteNs(limit) = rule.limit {
                let v = after.unwrap_or(0.0);
                return Ok(outcome(
                    within(v, limit, rule.strict),
                    format!("{} per step", ms(v)),
                ));
            }
            let b = need("a change")?;
            let before = per_step_value(b.analysis, &rule.metric);
            let (before, after) = match (before, after) {
                (None, None) => {
                    return Ok(outcome(
                        false,
                        format!("{name:?} is in neither run (a typo?)"),
                    ))
                }
                (b, a) => (b.unwrap_or(0.0), a.unwrap_or(0.0)),
            };
            let delta = after - before;
            let x = match rule.limit {
                Limit::RelativePct(_) if before > 0.0 => delta * 100.0 / before,
                Limit::RelativePct(_) => {
                    if after > 0.0 {
                        f64::INFINITY
                    } else {
                        0.0
                    }
                }
                _ => delta,
            };
            let limit = match rule.limit {
                Limit::RelativePct(p) | Limit::DeltaNs(p) => p,
                _ => unreachable!("counts are rejected by the parser for time metrics"),
            };
            let passed = within(x, limit, rule.strict) || delta.abs() < MIN_DELTA_NS;
            Ok(outcome(
                passed,
                format!(
                    "{} ({} -> {} per step)",
                    pct_text(before, after),
                    ms(before),
                    ms(after)
                ),
            ))
        }
        Metric::NewKernels | Metric::RemovedKernels | Metric::NewOps => {
            let b = need("a count of added or removed names")?;
            let (rows, status) = match rule.metric {
                Metric::NewKernels => (&b.diff.kernels, DiffStatus::Added),
                Metric::RemovedKernels => (&b.diff.kernels, DiffStatus::Removed),
                _ => (&b.diff.ops, DiffStatus::Added),
            };
            let names: Vec<&str> = rows
                .iter()
                .filter(|r| r.status == status)
                .map(|r| r.name.as_str())
                .collect();
            let Limit::Count(limit) = rule.limit else {
                unreachable!("the parser gives count metrics a count")
            };
            let mut m = format!("{}", names.len());
            if !names.is_empty() {
                let shown: Vec<String> = names
                    .iter()
                    .take(3)
                    .map(|n| crate::text::short(n, 60))
                    .collect();
                m.push_str(&format!(": {}", shown.join("; ")));
                if names.len() > 3 {
                    m.push_str(&format!("; and {} more", names.len() - 3));
                }
            }
            Ok(outcome(within(names.len() as f64, limit, rule.strict), m))
        }
    }
}
