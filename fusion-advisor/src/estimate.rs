//! The expected time of a bundled kernel on a shape: its bytes and FLOPs against the device's
//! ceilings (the floor), divided by the efficiency (floor / measured) that the same kernel reached
//! in fuseprof's benchmark of record on the nearest benchmarked shape (`calibration.tsv`).

use fuseprof_analyzer::headroom::{ceiling_for, Ceiling};
use fuseprof_store::Device;
use serde::{Deserialize, Serialize};

/// A bundled kernel on one shape. Sizes are elements; `elem_bytes` is 2 (fp16/bf16).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "family", rename_all = "snake_case")]
pub enum Kernel {
    /// `fmha_fwd_window` on the precombined bias + mask: `batch` windows x heads.
    WindowFmha {
        batch: i64,
        heads: i64,
        seq: i64,
        head_dim: i64,
        /// Distinct shifted-window masks (0: no mask).
        windows: i64,
    },
    /// The fMHA for sequences up to 512 tokens (Hopper TMA kernels on sm_90).
    Fmha {
        batch: i64,
        heads: i64,
        seq: i64,
        head_dim: i64,
        key_mask: bool,
    },
    /// LayerNorm + cyclic shift + zero pad + window partition.
    LnPartition {
        b: i64,
        h: i64,
        w: i64,
        c: i64,
        window: i64,
    },
    /// Window reverse + reverse shift + residual (+ the next LayerNorm).
    WindowReverse {
        b: i64,
        h: i64,
        w: i64,
        c: i64,
        window: i64,
        with_ln: bool,
    },
    /// A plain cuBLASLt GEMM (calibrates the epilogues' increments).
    Gemm { m: i64, n: i64, k: i64 },
    /// cuBLASLt GEMM with a bias + exact GELU epilogue.
    GemmGelu { m: i64, n: i64, k: i64 },
    /// cuBLASLt GEMM with a bias + residual epilogue.
    GemmResidual { m: i64, n: i64, k: i64 },
    /// GEMM on operands padded to multiples of 8 (`n`, `k` are the padded sizes);
    /// `pad_bytes` is the activation copying the padding costs per call.
    PaddedGemm {
        batch: i64,
        m: i64,
        n: i64,
        k: i64,
        pad_bytes: i64,
    },
    /// 16-byte-vector bias + residual add.
    BiasResidual { rows: i64, cols: i64 },
    /// LayerNorm + fc1 + bias + exact GELU + fc2 + bias + residual in one kernel, the
    /// `[rows, hidden]` tensor kept on chip.
    LnMlp { rows: i64, width: i64, hidden: i64 },
    /// A convolution whose kernel (`patch` x `patch_w`) equals its stride, as a patchify copy of
    /// the image and one GEMM.
    PatchEmbed {
        b: i64,
        cin: i64,
        h: i64,
        w: i64,
        c: i64,
        patch: i64,
        patch_w: i64,
    },
}

fn up8(x: i64) -> i64 {
    (x + 7) / 8 * 8
}

impl Kernel {
    pub fn family(&self) -> &'static str {
        match self {
            Kernel::WindowFmha { .. } => "window_fmha",
            Kernel::Fmha { .. } => "fmha",
            Kernel::LnPartition { .. } => "ln_partition",
            Kernel::WindowReverse { .. } => "window_reverse",
            Kernel::Gemm { .. } => "gemm",
            Kernel::GemmGelu { .. } => "gemm_gelu",
            Kernel::GemmResidual { .. } => "gemm_residual",
            Kernel::PaddedGemm { .. } => "padded_gemm",
            Kernel::BiasResidual { .. } => "bias_residual",
            Kernel::LnMlp { .. } => "ln_mlp",
            Kernel::PatchEmbed { .. } => "patch_embed",
        }
    }

    /// The calibration rows it is estimated from: its own family's, or for the patch
    /// embedding (not benchmarked on its own) the padded GEMM's, a memory-bound linear with
    /// as many rows.
    fn calibrated_by(&self) -> &'static str {
        match self {
            Kernel::PatchEmbed { .. } => "padded_gemm",
            other => other.family(),
        }
    }

    /// The build a shape runs on, where the family has several whose efficiencies differ (the
    /// fused MLP is compiled per width, and only at C = 96 are its weights resident): rows of
    /// the same build calibrate it when there are any.
    fn build(&self) -> Option<i64> {
        match *self {
            Kernel::LnMlp { width, .. } => Some(width),
            _ => None,
        }
    }

    /// Bytes it must move through device memory (each input read once, each output written
    /// once) and the FLOPs it does, for elements of `e` bytes.
    pub fn cost(&self, e: f64) -> (f64, f64) {
        let f = |x: i64| x as f64;
        match *self {
            Kernel::WindowFmha {
                batch,
                heads,
                seq,
                head_dim,
                windows,
            } => {
                let tokens = f(batch * seq * heads * head_dim);
                let add = f(windows.max(1) * heads * seq * up8(seq));
                (
                    (4.0 * tokens + add) * e,
                    4.0 * f(batch * heads) * f(seq * seq) * f(head_dim),
                )
            }
            Kernel::Fmha {
                batch,
                heads,
                seq,
                head_dim,
                key_mask,
            } => {
                let tokens = f(batch * seq * heads * head_dim);
                let mask = if key_mask { f(batch * seq) } else { 0.0 };
                (
                    (4.0 * tokens + mask) * e,
                    4.0 * f(batch * heads) * f(seq * seq) * f(head_dim),
                )
            }
            Kernel::LnPartition { b, h, w, c, window } => {
                let padded = f(b * up_to(h, window) * up_to(w, window) * c);
                ((f(b * h * w * c) + padded) * e, 0.0)
            }
            Kernel::WindowReverse {
                b,
                h,
                w,
                c,
                window,
                with_ln,
            } => {
                let padded = f(b * up_to(h, window) * up_to(w, window) * c);
                let x = f(b * h * w * c);
                let outs = if with_ln { 3.0 } else { 2.0 };
                ((padded + outs * x) * e, 0.0)
            }
            Kernel::Gemm { m, n, k } | Kernel::GemmGelu { m, n, k } => (
                (f(m * k) + f(n * k) + f(m * n) + f(n)) * e,
                2.0 * f(m) * f(n) * f(k),
            ),
            Kernel::GemmResidual { m, n, k } => (
                (f(m * k) + f(n * k) + 2.0 * f(m * n) + f(n)) * e,
                2.0 * f(m) * f(n) * f(k),
            ),
            Kernel::PaddedGemm {
                batch,
                m,
                n,
                k,
                pad_bytes,
            } => (
                f(batch) * (f(m * k) + f(n * k) + f(m * n)) * e + f(pad_bytes),
                2.0 * f(batch) * f(m) * f(n) * f(k),
            ),
            Kernel::BiasResidual { rows, cols } => ((3.0 * f(rows * cols) + f(cols)) * e, 0.0),
            Kernel::LnMlp {
                rows,
                width,
                hidden,
            } => (
                // x in, y out, both weights, LayerNorm's and both biases.
                (2.0 * f(rows * width) + 2.0 * f(width * hidden) + f(hidden + 3 * width)) * e,
                4.0 * f(rows) * f(width) * f(hidden),
            ),
            Kernel::PatchEmbed {
                b,
                cin,
                h,
                w,
                c,
                patch,
                patch_w,
            } => {
                let image = f(b * cin * h * w);
                let tokens = f(b * (h / patch) * (w / patch_w));
                let k = f(up8(cin * patch * patch_w));
                // The patchify copy (image in, patches out), then the GEMM (patches and the
                // padded weight in, tokens out).
                (
                    (2.0 * image + tokens * k + f(c) * k + tokens * f(c) + f(c)) * e,
                    2.0 * tokens * f(c) * k,
                )
            }
        }
    }

    /// Time at the ceilings, seconds.
    pub fn floor_s(&self, e: f64, c: &Ceiling) -> f64 {
        let (bytes, flops) = self.cost(e);
        (bytes / c.mem_bytes_per_s).max(flops / c.flops_16bit_per_s)
    }
}

fn up_to(x: i64, window: i64) -> i64 {
    (x + window - 1) / window * window
}

/// One benchmarked shape of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationRow {
    pub kernel: Kernel,
    pub ours_us: f64,
    pub bench_kernel: String,
    pub bench_shape: String,
}

/// The device the calibration was measured on, and where its figures are.
pub const CALIBRATION_DEVICE: &str = "NVIDIA H100 80GB HBM3";
pub const CALIBRATION_SOURCE: &str = "kernels/bench/results/run13-h100/bench.json and \
                                      kernels/bench/results/mlp-h100-2026-11-26/mlp.json";
/// The benchmark files of record the calibration's rows come from (same device, driver, torch).
#[cfg(test)]
const CALIBRATION_FILES: [&str; 2] = [
    "kernels/bench/results/run13-h100/bench.json",
    "kernels/bench/results/mlp-h100-2026-11-26/mlp.json",
];

fn param(params: &str, name: &str) -> Result<i64, String> {
    params
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .ok_or_else(|| format!("no {name}= in {params:?}"))?
        .parse()
        .map_err(|e| format!("{name} in {params:?}: {e}"))
}

/// Parses `calibration.tsv`.
pub fn parse_calibration(text: &str) -> Result<Vec<CalibrationRow>, String> {
    let mut rows = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let [family, p, ours, bench_kernel, bench_shape] = cols[..] else {
            return Err(format!(
                "calibration line {line:?}: expected 5 tab-separated columns"
            ));
        };
        let g = |n: &str| param(p, n);
        let kernel = match family {
            "window_fmha" => Kernel::WindowFmha {
                batch: g("batch")?,
                heads: g("heads")?,
                seq: g("seq")?,
                head_dim: g("head_dim")?,
                windows: g("windows")?,
            },
            "fmha" => Kernel::Fmha {
                batch: g("batch")?,
                heads: g("heads")?,
                seq: g("seq")?,
                head_dim: g("head_dim")?,
                key_mask: g("key_mask")? != 0,
            },
            "ln_partition" => Kernel::LnPartition {
                b: g("b")?,
                h: g("h")?,
                w: g("w")?,
                c: g("c")?,
                window: g("window")?,
            },
            "window_reverse" => Kernel::WindowReverse {
                b: g("b")?,
                h: g("h")?,
                w: g("w")?,
                c: g("c")?,
                window: g("window")?,
                with_ln: g("with_ln")? != 0,
            },
            "gemm" => Kernel::Gemm {
                m: g("m")?,
                n: g("n")?,
                k: g("k")?,
            },
            "gemm_gelu" => Kernel::GemmGelu {
                m: g("m")?,
                n: g("n")?,
                k: g("k")?,
            },
            "gemm_residual" => Kernel::GemmResidual {
                m: g("m")?,
                n: g("n")?,
                k: g("k")?,
            },
            "padded_gemm" => Kernel::PaddedGemm {
                batch: g("batch")?,
                m: g("m")?,
                n: g("n")?,
                k: g("k")?,
                pad_bytes: 0,
            },
            "bias_residual" => Kernel::BiasResidual {
                rows: g("rows")?,
                cols: g("cols")?,
            },
            "ln_mlp" => Kernel::LnMlp {
                rows: g("rows")?,
                width: g("width")?,
                hidden: g("hidden")?,
            },
            other => return Err(format!("calibration: unknown family {other:?}")),
        };
        rows.push(CalibrationRow {
            kernel,
            ours_us: ours.parse().map_err(|e| format!("{line:?}: {e}"))?,
            bench_kernel: bench_kernel.to_string(),
            bench_shape: bench_shape.to_string(),
        });
    }
    Ok(rows)
}

/// The built-in ceilings for a device name (the figures measured on the project's devices);
/// the calibration's efficiencies are relative to these.
pub fn builtin_ceiling(name: &str) -> Option<Ceiling> {
    ceiling_for(&Device {
        name: Some(name.to_string()),
        ..Device::default()
    })
}

/// An expected time and how it was reached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    pub ns: f64,
    pub bytes: f64,
    pub flops: f64,
    /// Time at the target device's ceilings.
    pub floor_ns: f64,
    /// floor / measured of the calibration row used.
    pub efficiency: f64,
    /// `window fMHA s1 (4096x3x49x32 bias+mask): 84.0 us`
    pub calibrated_on: String,
    /// The calibration row's floor over this shape's (1 = same size).
    pub size_ratio: f64,
}

/// Estimates `kernel` on the device with ceilings `target`.
pub fn expected(kernel: &Kernel, target: &Ceiling, table: &[CalibrationRow]) -> Option<Expected> {
    let bench = builtin_ceiling(CALIBRATION_DEVICE)?;
    let floor = kernel.floor_s(2.0, target);
    let here = kernel.floor_s(2.0, &bench);
    let family = || {
        table
            .iter()
            .filter(|r| r.kernel.family() == kernel.calibrated_by())
    };
    let same_build = family().any(|r| r.kernel.build() == kernel.build());
    let (row, row_floor) = family()
        .filter(|r| !same_build || r.kernel.build() == kernel.build())
        .map(|r| (r, r.kernel.floor_s(2.0, &bench)))
        .min_by(|a, b| {
            let d = |f: f64| (f / here).ln().abs();
            d(a.1).total_cmp(&d(b.1))
        })?;
    let efficiency = (row_floor / (row.ours_us * 1e-6)).min(1.0);
    let (bytes, flops) = kernel.cost(2.0);
    Some(Expected {
        ns: floor / efficiency * 1e9,
        bytes,
        flops,
        floor_ns: floor * 1e9,
        efficiency,
        calibrated_on: format!(
            "{} ({}): {:.1} us",
            row.bench_kernel, row.bench_shape, row.ours_us
        ),
        size_ratio: row_floor / here,
    })
}

/// The expected time of a GEMM epilogue replacing a recorded GEMM (`gemm_ns` per call) and
/// the elementwise op after it. The GEMM itself is the same cuBLASLt GEMM, so its recorded time
/// stands; what changes is the epilogue, whose cost does not follow the GEMM's efficiency:
/// - bias + exact GELU: cuBLASLt's erf epilogue costs a fixed time per output element, taken
///   from the benchmark's GEMM + bias + GELU minus the plain GEMM on the same shape;
/// - bias + residual: the residual is read while the GEMM computes, so the time is the larger of
///   the recorded GEMM and the GEMM's bytes plus the residual's at the memory efficiency of the
///   vectorised bias + residual kernel on the nearest size.
pub fn expected_epilogue(
    kernel: &Kernel,
    gemm_ns: f64,
    target: &Ceiling,
    table: &[CalibrationRow],
) -> Option<Expected> {
    let bench = builtin_ceiling(CALIBRATION_DEVICE)?;
    let (bytes, flops) = kernel.cost(2.0);
    let floor = kernel.floor_s(2.0, target);
    let (increment_s, calibrated_on) = match *kernel {
        Kernel::GemmGelu { m, n, .. } => {
            let (gelu, plain) = table.iter().find_map(|g| {
                let Kernel::GemmGelu {
                    m: gm,
                    n: gn,
                    k: gk,
                } = g.kernel
                else {
                    return None;
                };
                let p = table.iter().find(|p| {
                    p.kernel
                        == Kernel::Gemm {
                            m: gm,
                            n: gn,
                            k: gk,
                        }
                })?;
                Some((g, p))
            })?;
            let elems = |k: &Kernel| match *k {
                Kernel::GemmGelu { m, n, .. } => (m * n) as f64,
                _ => 1.0,
            };
            let per_elem_s = (gelu.ours_us - plain.ours_us) * 1e-6 / elems(&gelu.kernel);
            (
                per_elem_s * (m * n) as f64 * bench.mem_bytes_per_s / target.mem_bytes_per_s,
                format!(
                    "recorded GEMM {:.1} us + the erf-GELU epilogue at {:.2} ns per 1000 output \
                     elements ({} {:.1} us - {} {:.1} us)",
                    gemm_ns / 1e3,
                    per_elem_s * 1e12,
                    gelu.bench_kernel,
                    gelu.ours_us,
                    plain.bench_kernel,
                    plain.ours_us
                ),
            )
        }
        Kernel::GemmResidual { m, n, k } => {
            let read = Kernel::BiasResidual { rows: m, cols: n };
            let here = read.floor_s(2.0, &bench);
            let row = table
                .iter()
                .filter(|r| r.kernel.family() == "bias_residual")
                .min_by(|a, b| {
                    let d = |r: &CalibrationRow| (r.kernel.floor_s(2.0, &bench) / here).ln().abs();
                    d(a).total_cmp(&d(b))
                })?;
            let eff = (row.kernel.floor_s(2.0, &bench) / (row.ours_us * 1e-6)).min(1.0);
            let residual_bytes = (m * n) as f64 * 2.0;
            let gemm_bytes = (m * k + n * k + m * n + n) as f64 * 2.0;
            // The residual is read while the GEMM computes: it costs time only where the GEMM's
            // bytes plus the residual's, at the memory efficiency the elementwise kernels reach,
            // take longer than the recorded GEMM.
            let memory_s = (gemm_bytes + residual_bytes) / target.mem_bytes_per_s / eff;
            (
                (memory_s - gemm_ns * 1e-9).max(0.0),
                format!(
                    "max(recorded GEMM {:.1} us, its {:.1} MB + the residual's {:.1} MB at {:.0}% \
                     of the memory ceiling = {:.1} us; {} ({}): {:.1} us)",
                    gemm_ns / 1e3,
                    gemm_bytes / 1e6,
                    residual_bytes / 1e6,
                    eff * 100.0,
                    memory_s * 1e6,
                    row.bench_kernel,
                    row.bench_shape,
                    row.ours_us
                ),
            )
        }
        _ => return None,
    };
    let ns = gemm_ns + increment_s * 1e9;
    Some(Expected {
        ns,
        bytes,
        flops,
        floor_ns: floor * 1e9,
        efficiency: (floor * 1e9 / ns).min(1.0),
        calibrated_on,
        size_ratio: 1.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<CalibrationRow> {
        parse_calibration(include_str!("calibration.tsv")).unwrap()
    }

    /// Every calibration line is the benchmark of record's figure, not a typed-in one.
    #[test]
    fn the_calibration_is_the_committed_benchmark() {
        let mut rows = Vec::new();
        for file in CALIBRATION_FILES {
            let path = format!("{}/../{file}", env!("CARGO_MANIFEST_DIR"));
            let bench: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            rows.extend(bench["rows"].as_array().unwrap().iter().cloned());
        }
        let run13: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(format!(
                "{}/../{}",
                env!("CARGO_MANIFEST_DIR"),
                CALIBRATION_FILES[0]
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            run13["info"]["device"].as_str(),
            Some(CALIBRATION_DEVICE),
            "{}",
            run13["info"]
        );
        let t = table();
        assert!(t.len() >= 22);
        for c in &t {
            let r = rows
                .iter()
                .find(|r| {
                    r["kernel"] == c.bench_kernel.as_str() && r["shape"] == c.bench_shape.as_str()
                })
                .unwrap_or_else(|| {
                    panic!(
                        "{} / {} not in {CALIBRATION_FILES:?}",
                        c.bench_kernel, c.bench_shape
                    )
                });
            let us = r["ours_us"].as_f64().unwrap();
            assert!(
                (us - c.ours_us).abs() < 5e-4,
                "{}: {us} vs {}",
                c.bench_kernel,
                c.ours_us
            );
        }
    }

    #[test]
    fn a_benchmarked_shape_is_expected_at_its_benchmarked_time() {
        let h100 = builtin_ceiling(CALIBRATION_DEVICE).unwrap();
        for row in table() {
            let e = expected(&row.kernel, &h100, &table()).unwrap();
            assert!(
                (e.ns / 1e3 - row.ours_us).abs() < 0.01 * row.ours_us,
                "{}: {} vs {}",
                row.bench_kernel,
                e.ns / 1e3,
                row.ours_us
            );
            assert!(e.efficiency > 0.0 && e.efficiency <= 1.0);
        }
    }

    #[test]
    fn an_epilogue_costs_the_recorded_gemm_plus_its_increment() {
        let h100 = builtin_ceiling(CALIBRATION_DEVICE).unwrap();
        // On the calibration shape, GEMM + erf-GELU is the plain GEMM + the measured difference.
        let k = Kernel::GemmGelu {
            m: 8192,
            n: 3072,
            k: 768,
        };
        let e = expected_epilogue(&k, 58_688.0, &h100, &table()).unwrap();
        assert!((e.ns - 106_080.0).abs() < 1.0, "{}", e.ns);
        // A memory-bound GEMM pays for the residual read (231 MB at 86% of 3 TB/s: 90 us) ...
        let r = Kernel::GemmResidual {
            m: 200704,
            n: 96,
            k: 384,
        };
        let e = expected_epilogue(&r, 80_000.0, &h100, &table()).unwrap();
        assert!(e.ns > 88_000.0 && e.ns < 92_000.0, "{}", e.ns);
        // ... a slower (compute-bound) one hides it.
        let e = expected_epilogue(&r, 200_000.0, &h100, &table()).unwrap();
        assert_eq!(e.ns, 200_000.0);
        assert!(expected_epilogue(
            &Kernel::BiasResidual { rows: 1, cols: 8 },
            1.0,
            &h100,
            &table()
        )
        .is_none());
    }

    #[test]
    fn a_faster_device_and_a_smaller_shape_are_expected_faster() {
        let h100 = builtin_ceiling(CALIBRATION_DEVICE).unwrap();
        let h200 = builtin_ceiling("NVIDIA H200").unwrap();
        let k = Kernel::LnPartition {
            b: 64,
            h: 56,
            w: 56,
            c: 96,
            window: 7,
        };
        let a = expected(&k, &h100, &table()).unwrap();
        let b = expected(&k, &h200, &table()).unwrap();
        assert!(b.ns < a.ns * 0.8, "{} vs {}", b.ns, a.ns);
        let small = Kernel::LnPartition {
            b: 32,
            h: 56,
            w: 56,
            c: 96,
            window: 7,
        };
        assert!(expected(&small, &h100, &table()).unwrap().ns < a.ns * 0.6);
    }
}
