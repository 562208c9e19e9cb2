//! `fuseprof bench -- CMD ARGS...`: the user's program run as it is (baseline) and with the
//! bundled kernels swapped in by the patch layer (`python/patch/`), each side traced by
//! `collect` in its own process, interleaved for a number of rounds. Step times come from the
//! analyzer's steps; a last pass per side with op ranges gives the per-op diff; the patch layer's
//! report gives the numerics verdict.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use fuseprof_analyzer::{AnalyzeConfig, Diff};
use fuseprof_collector::collect::{self, Capture, CollectConfig, PytorchMode};
use serde::Serialize;

use crate::{Error, Result};

const PATCH: &str = include_str!("../python/patch/fuseprof_patch.py");
const PATCH_SITE: &str = include_str!("../python/patch/sitecustomize.py");
const KERNELS_PY: &str = include_str!("../../kernels/python/fuseprof_kernels.py");

/// What `fuseprof bench -- CMD` was asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelBenchConfig {
    pub command: Vec<OsString>,
    /// Timed rounds; each runs the baseline and the patched side once, in alternating order.
    pub rounds: u32,
    /// Run both sides under torch.compile with this mode (`default`, `reduce-overhead`,
    /// `max-autotune`).
    pub compile: Option<String>,
    /// Capture both sides' models in CUDA graphs.
    pub cuda_graphs: bool,
    /// Advisor patterns to apply (None: every one the patch layer knows).
    pub apply: Option<Vec<String>>,
    /// Keep the runs here (None: a temporary folder, removed at the end).
    pub keep: Option<PathBuf>,
    pub kernels_lib: Option<PathBuf>,
}

/// Step times of one side over the rounds, ms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Side {
    /// Median step time of each round.
    pub rounds_ms: Vec<f64>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
}

impl Side {
    fn new(rounds_ms: Vec<f64>) -> Side {
        let mut s = rounds_ms.clone();
        s.sort_by(f64::total_cmp);
        Side {
            median_ms: s[s.len() / 2],
            min_ms: s[0],
            max_ms: s[s.len() - 1],
            rounds_ms,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelBenchReport {
    pub command: String,
    pub compile: Option<String>,
    pub cuda_graphs: bool,
    pub baseline: Side,
    pub patched: Side,
    /// Baseline median over patched median.
    pub speedup: f64,
    /// The last pass of each side, with op ranges: what disappeared, what appeared.
    pub diff: Diff,
    /// What the patch layer patched and left alone, and its numerics (JSON, see fuseprof_patch).
    pub patch: serde_json::Value,
    pub numerics_passed: bool,
    /// Why not, when not.
    pub numerics_problem: Option<String>,
    pub runs: Vec<PathBuf>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |error| Error::Io {
        path: path.into(),
        error,
    }
}

struct Work {
    dir: PathBuf,
    keep: bool,
}

impl Drop for Work {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Median step wall time (ms) of a run, from the analyzer's steps.
fn step_ms(run: &Path) -> Result<f64> {
    let a = fuseprof_analyzer::analyze_file(run, &AnalyzeConfig::default())?;
    let wall = a.steps.wall.ok_or_else(|| {
        Error::Bench(format!(
            "{}: the program's steps were not found; mark each step with an NVTX range named \
             `step` (torch.cuda.nvtx.range_push(\"step\")) or run it under the PyTorch profiler's \
             schedule",
            run.display()
        ))
    })?;
    Ok(wall.median_ns / 1e6)
}

/// Runs the baseline and patched sides, interleaved, and compares them.
pub fn run(cfg: &ModelBenchConfig) -> Result<ModelBenchReport> {
    if cfg.command.is_empty() {
        return Err(Error::Bench("no command to run after `--`".into()));
    }
    let lib = crate::bench::find_kernels_lib(cfg.kernels_lib.as_deref())?;
    let dir = match &cfg.keep {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("fuseprof-model-bench-{}", std::process::id())),
    };
    let work = Work {
        dir: dir.clone(),
        keep: cfg.keep.is_some(),
    };
    let patch_dir = dir.join("patch");
    std::fs::create_dir_all(&patch_dir).map_err(io(&patch_dir))?;
    for (name, text) in [
        ("fuseprof_patch.py", PATCH),
        ("sitecustomize.py", PATCH_SITE),
        ("fuseprof_kernels.py", KERNELS_PY),
    ] {
        let p = patch_dir.join(name);
        std::fs::write(&p, text).map_err(io(&p))?;
    }
    let report_path = dir.join("patch-report.json");
    let mut common: Vec<(OsString, OsString)> =
        vec![("FUSEPROF_KERNELS_LIB".into(), lib.clone().into_os_string())];
    if let Some(mode) = &cfg.compile {
        common.push(("FUSEPROF_COMPILE".into(), mode.into()));
    }
    if cfg.cuda_graphs {
        common.push(("FUSEPROF_CUDA_GRAPHS".into(), "1".into()));
    }
    // The baseline loads the patch layer only to compile or graph as the patched side does.
    let mut patched_env = common.clone();
    patched_env.push(("FUSEPROF_PATCH".into(), "1".into()));
    patched_env.push(("FUSEPROF_PATCH_REPORT".into(), report_path.clone().into()));
    if let Some(apply) = &cfg.apply {
        patched_env.push(("FUSEPROF_PATCH_APPLY".into(), apply.join(",").into()));
    }
    let side = |name: &str, round: u32, patched: bool, pytorch: PytorchMode| -> Result<PathBuf> {
        let output = dir.join(format!("{name}-{round}.sqlite"));
        let cfg = CollectConfig {
            output: output.clone(),
            overwrite: true,
            pytorch,
            capture: Capture::All,
            command: cfg.command.clone(),
            tracer_path: None,
            all_api: false,
            python_path: vec![patch_dir.clone()],
            env: if patched {
                patched_env.clone()
            } else {
                common.clone()
            },
        };
        let outcome = collect::run(&cfg).map_err(|e| Error::Bench(format!("{name} side: {e}")))?;
        if outcome.exit_code != 0 {
            return Err(Error::Bench(format!(
                "the {name} side of `{}` exited with code {}",
                cfg.command
                    .iter()
                    .map(|s| s.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" "),
                outcome.exit_code
            )));
        }
        Ok(output)
    };
    let mut base_ms = Vec::new();
    let mut patched_ms = Vec::new();
    let mut runs = Vec::new();
    let rounds = cfg.rounds.max(1);
    for round in 0..rounds {
        // Alternate which side goes first, so that neither always runs on a warmer machine.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for patched in order {
            let name = if patched { "patched" } else { "baseline" };
            tracing::info!("round {}/{rounds}: {name}", round + 1);
            let run = side(name, round, patched, PytorchMode::None)?;
            let ms = step_ms(&run)?;
            if patched {
                patched_ms.push(ms);
            } else {
                base_ms.push(ms);
            }
            runs.push(run);
        }
    }
    // One more pass per side with op ranges, for the per-op diff (op annotation costs host
    // time, so these runs are not timed).
    let base_ops = side("baseline-ops", rounds, false, PytorchMode::Ops)?;
    let patched_ops = side("patched-ops", rounds, true, PytorchMode::Ops)?;
    let analysis = |p: &Path| fuseprof_analyzer::analyze_file(p, &AnalyzeConfig::default());
    let diff = fuseprof_analyzer::diff(&analysis(&base_ops)?, &analysis(&patched_ops)?);
    runs.push(base_ops);
    runs.push(patched_ops);

    let patch: serde_json::Value = std::fs::read_to_string(&report_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    let (numerics_passed, numerics_problem) = verdict(&patch);
    let baseline = Side::new(base_ms);
    let patched = Side::new(patched_ms);
    let report = ModelBenchReport {
        command: cfg
            .command
            .iter()
            .map(|s| s.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        compile: cfg.compile.clone(),
        cuda_graphs: cfg.cuda_graphs,
        speedup: baseline.median_ms / patched.median_ms,
        baseline,
        patched,
        diff,
        patch,
        numerics_passed,
        numerics_problem,
        runs: if work.keep { runs } else { Vec::new() },
    };
    drop(work);
    Ok(report)
}

/// Whether the patch layer's numerics pass: something was patched, every patched module and
/// every checked model is within tolerance, and no output has NaN.
pub fn verdict(patch: &serde_json::Value) -> (bool, Option<String>) {
    let modules = patch["modules"].as_object();
    let Some(modules) = modules.filter(|m| !m.is_empty()) else {
        return (
            false,
            Some(
                "nothing was patched (the patch layer saw no module it replaces; see `left \
                 alone`)"
                    .into(),
            ),
        );
    };
    for (name, m) in modules {
        if m["passed"] != true {
            return (
                false,
                Some(format!(
                    "module {name}: relative error {} over the tolerance",
                    m["rel_error"]
                )),
            );
        }
    }
    match patch["models"].as_object() {
        Some(models) if !models.is_empty() => {
            for (name, m) in models {
                if m["passed"] != true || m["any_nan"] == true {
                    return (
                        false,
                        Some(format!(
                            "model {name}: output relative error {}{}",
                            m["rel_error"],
                            if m["any_nan"] == true { ", NaN" } else { "" }
                        )),
                    );
                }
            }
            (true, None)
        }
        _ => (
            false,
            Some("the model's output was not compared (no model from timm.create_model)".into()),
        ),
    }
}

/// The before/after table for people.
pub fn render(r: &ModelBenchReport, top: usize) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let mode = match (&r.compile, r.cuda_graphs) {
        (Some(m), true) => format!("torch.compile({m}) + CUDA graphs"),
        (Some(m), false) => format!("torch.compile({m})"),
        (None, true) => "eager + CUDA graphs".into(),
        (None, false) => "eager".into(),
    };
    let _ = writeln!(
        o,
        "fuseprof bench -- {}  ({mode}, {} rounds interleaved, each side traced by fuseprof collect)",
        r.command,
        r.baseline.rounds_ms.len()
    );
    let _ = writeln!(o, "{:<10} {:>10} {:>20}", "", "step ms", "rounds (min-max)");
    for (name, s) in [("baseline", &r.baseline), ("patched", &r.patched)] {
        let _ = writeln!(
            o,
            "{name:<10} {:>10.3} {:>20}",
            s.median_ms,
            format!("{:.3}-{:.3}", s.min_ms, s.max_ms)
        );
    }
    let _ = writeln!(o, "speed-up   {:>9.2}x", r.speedup);
    let modules = r.patch["modules"].as_object();
    let worst = modules.and_then(|m| {
        m.iter()
            .filter_map(|(k, v)| Some((k.clone(), v["rel_error"].as_f64()?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    });
    let _ = writeln!(
        o,
        "numerics: {} module(s) patched{}{}: {}",
        modules.map_or(0, |m| m.len()),
        worst
            .map(|(k, e)| format!(", worst relative error {e:.1e} ({k})"))
            .unwrap_or_default(),
        r.patch["models"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, v)| format!(
                    "; model {k} output {:.1e}",
                    v["rel_error"].as_f64().unwrap_or(f64::NAN)
                ))
                .collect::<String>())
            .unwrap_or_default(),
        if r.numerics_passed {
            "PASSED".to_string()
        } else {
            format!(
                "FAILED ({})",
                r.numerics_problem.as_deref().unwrap_or("unknown")
            )
        }
    );
    if let Some(left) = r.patch["left_alone"].as_object() {
        for (why, what) in left {
            let n = what.as_array().map_or(0, |a| a.len());
            let _ = writeln!(o, "left alone: {n} module(s): {why}");
        }
    }
    let _ = writeln!(o);
    o.push_str(&fuseprof_analyzer::render_diff_text(&r.diff, top));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_verdict_needs_a_patched_module_and_every_error_in_tolerance() {
        let ok = json!({
            "modules": {"M/layers.0.blocks.0": {"rel_error": 3e-4, "passed": true}},
            "models": {"swin": {"rel_error": 7e-4, "passed": true, "any_nan": false}}
        });
        assert_eq!(verdict(&ok), (true, None));
        let (pass, why) = verdict(&json!({"modules": {}, "models": {}}));
        assert!(!pass && why.unwrap().contains("nothing was patched"));
        let bad_module = json!({
            "modules": {"M/b": {"rel_error": 0.3, "passed": false}},
            "models": {"swin": {"rel_error": 7e-4, "passed": true, "any_nan": false}}
        });
        assert!(verdict(&bad_module).1.unwrap().contains("module M/b"));
        let nan = json!({
            "modules": {"M/b": {"rel_error": 3e-4, "passed": true}},
            "models": {"swin": {"rel_error": 7e-4, "passed": true, "any_nan": true}}
        });
        assert!(verdict(&nan).1.unwrap().contains("NaN"));
        let unchecked = json!({"modules": {"M/b": {"rel_error": 3e-4, "passed": true}}});
        assert!(!verdict(&unchecked).0);
        assert!(!verdict(&serde_json::Value::Null).0);
    }

    #[test]
    fn a_side_reports_the_median_and_spread_of_its_rounds() {
        let s = Side::new(vec![10.2, 10.0, 10.4]);
        assert_eq!((s.median_ms, s.min_ms, s.max_ms), (10.2, 10.0, 10.4));
    }
}
