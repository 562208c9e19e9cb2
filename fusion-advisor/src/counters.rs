//! What the hardware counters say about a proposal's chain (runs recorded with
//! `collect --metrics memory`): whether its kernels measure memory-bound or compute-bound as
//! the shapes estimate, and the confidence that follows.
//!
//! The rule, per proposal:
//! - **Estimate.** The chain's bytes and FLOPs per instance are the sum of its ops' estimates
//!   from their shapes (`analyzer::headroom::estimate`, as the headroom table makes them); ops
//!   without an estimate (a reshape that copies) are left out here and of the measurement. It is
//!   estimated memory-bound when those bytes at the device's bandwidth take at least as long as
//!   those FLOPs at the peak of its element type, compute-bound otherwise.
//! - **Measurement.** The DRAM bytes (read plus written) its kernels measured over all
//!   instances, scaled up to the chain's whole GPU time where some kernels had no counters
//!   (they must cover at least [`MIN_COVERAGE`] of it, else the check is `inconclusive`), per
//!   instance; achieved bandwidth is those bytes over the time of the kernels that measured
//!   them. The chain measures memory-bound when the estimated FLOPs over the measured bytes lie
//!   below the device's ridge point (peak FLOP/s over bandwidth), compute-bound otherwise.
//! - **Verdict.** `contradicts` where the measured bound is not the estimated one: the
//!   confidence goes down one level. `confirms` where a memory-bound estimate measures
//!   memory-bound with the measured bytes within [`BYTES_FACTOR`] of the estimate and at least
//!   [`CONFIRM_PCT_OF_PEAK`] of peak bandwidth, or a compute-bound estimate measures
//!   compute-bound at under that share of peak bandwidth: the confidence goes up one level.
//!   Otherwise `inconclusive` (for instance a memory-bound chain far below peak bandwidth,
//!   limited by latency or launches), and the confidence stays.
//! - Where more than half of the measured kernels hold values shared with concurrent work or
//!   estimated from samples longer than the kernel, the verdict is given but the confidence
//!   is left as it is: the split between kernels is a guess.

use fuseprof_analyzer::headroom::{self, Ceiling};
use fuseprof_analyzer::OpInstance;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

/// Measured bytes within this factor of the estimate (either way) confirm it.
pub const BYTES_FACTOR: f64 = 2.0;
/// The share of peak bandwidth (percent) above which a chain is using the memory system hard
/// enough to call it memory-bound, and under which a compute-bound chain is not held by memory.
pub const CONFIRM_PCT_OF_PEAK: f64 = 50.0;
/// The share of the chain's GPU time that kernels with DRAM counters must cover.
pub const MIN_COVERAGE: f64 = 0.5;

/// The counters' check of one proposal (`counters` in the advice JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterCheck {
    /// `memory` or `compute`: from the shapes, and from the measured bytes.
    pub estimated_bound: String,
    pub measured_bound: Option<String>,
    /// Per instance: bytes and FLOPs estimated from the shapes, DRAM bytes measured.
    pub estimated_bytes: f64,
    pub flops: f64,
    pub measured_dram_bytes: Option<f64>,
    pub achieved_bytes_per_s: Option<f64>,
    pub bandwidth_pct_of_peak: Option<f64>,
    /// Time-weighted over the kernels that recorded it.
    pub tensor_pipe_pct: Option<f64>,
    /// Share of the chain's GPU time whose kernels had DRAM counters (percent).
    pub coverage_pct: f64,
    /// Kernels with counters, and of those with shared or estimated values.
    pub kernels: u64,
    pub shared: u64,
    pub estimated: u64,
    /// `confirms`, `contradicts` or `inconclusive`.
    pub verdict: String,
    /// The sentence the text report and the confidence notes give.
    pub note: String,
    /// The confidence before the check, where the check changed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence_before: Option<String>,
}

/// Checks a chain's instances (each the op instances of one match) against its kernels'
/// counters; None where none of its kernels has counters (a run without them).
pub fn check(
    instances: &[Vec<&OpInstance>],
    kernel_names: &[String],
    ceiling: &Ceiling,
) -> Option<CounterCheck> {
    let records = || instances.iter().flatten().flat_map(|o| o.records.iter());
    if !records().any(|r| r.counters.is_some()) {
        return None;
    }
    // The estimate, from the first instance's shapes (the instances share them). Ops the
    // model has no estimate for (a reshape that copies) are left out of both sides.
    let first = instances.first()?;
    let mut bytes = 0.0;
    let mut flops = 0.0;
    let mut elem = None;
    let mut left_out = Vec::new();
    let mut kept = vec![false; first.len()];
    for (j, op) in first.iter().enumerate().filter(|(_, o)| o.gpu_ns > 0) {
        let hint = op.elem_bytes(kernel_names);
        elem = elem.or(hint);
        let e = op
            .dims
            .as_deref()
            .and_then(|d| headroom::estimate(&op.name, d, op.dtypes.as_deref(), hint));
        match e {
            Some(e) => {
                bytes += e.bytes;
                flops += e.flops;
                kept[j] = true;
            }
            None => left_out.push(op.name.clone()),
        }
    }
    let peak = match elem {
        Some(4) => ceiling
            .flops_32bit_per_s
            .unwrap_or(ceiling.flops_16bit_per_s),
        _ => ceiling.flops_16bit_per_s,
    };
    let bw = ceiling.mem_bytes_per_s;
    let estimated_memory = bytes / bw >= flops / peak;
    let bound = |memory: bool| if memory { "memory" } else { "compute" }.to_string();

    // The measurement, over every instance's kept ops.
    let (mut total_ns, mut dram_ns, mut dram) = (0i64, 0i64, 0.0f64);
    let (mut kernels, mut shared, mut estimated) = (0u64, 0u64, 0u64);
    let (mut tensor_weighted, mut tensor_ns) = (0.0f64, 0i64);
    let kept_records = instances.iter().flat_map(|inst| {
        inst.iter()
            .enumerate()
            .filter(|(j, _)| kept.get(*j).copied().unwrap_or(false))
            .flat_map(|(_, o)| o.records.iter())
    });
    for r in kept_records {
        total_ns += r.dur_ns;
        let Some(c) = r.counters else { continue };
        kernels += 1;
        shared += u64::from(c.shared);
        estimated += u64::from(c.estimated);
        if let Some(b) = c.dram_bytes {
            dram += b;
            dram_ns += r.dur_ns;
        }
        if let Some(t) = c.tensor_pipe_pct {
            tensor_weighted += t * r.dur_ns as f64;
            tensor_ns += r.dur_ns;
        }
    }
    let coverage = if total_ns > 0 {
        dram_ns as f64 / total_ns as f64
    } else {
        0.0
    };
    let mut out = CounterCheck {
        estimated_bound: bound(estimated_memory),
        measured_bound: None,
        estimated_bytes: bytes,
        flops,
        measured_dram_bytes: None,
        achieved_bytes_per_s: None,
        bandwidth_pct_of_peak: None,
        tensor_pipe_pct: (tensor_ns > 0).then(|| tensor_weighted / tensor_ns as f64),
        coverage_pct: coverage * 100.0,
        kernels,
        shared,
        estimated,
        verdict: "inconclusive".into(),
        note: String::new(),
        confidence_before: None,
    };
    if bytes <= 0.0 {
        out.note = "counters not compared: no estimate from shapes for the chain's ops".into();
        return Some(out);
    }
    if dram_ns == 0 || coverage < MIN_COVERAGE {
        out.note = format!(
            "counters not compared: DRAM bytes cover {:.0}% of the chain's GPU time",
            coverage * 100.0
        );
        return Some(out);
    }
    let per_instance = dram * (total_ns as f64 / dram_ns as f64) / instances.len() as f64;
    let achieved = dram / (dram_ns as f64 * 1e-9);
    let pct = 100.0 * achieved / bw;
    let measured_memory = per_instance > 0.0 && flops / per_instance < peak / bw;
    out.measured_dram_bytes = Some(per_instance);
    out.achieved_bytes_per_s = Some(achieved);
    out.bandwidth_pct_of_peak = Some(pct);
    out.measured_bound = Some(bound(measured_memory));
    let ratio = per_instance / bytes;
    let mut what = format!(
        "its kernels moved {:.1} MB of DRAM per instance against {:.1} MB estimated, at {:.0}% \
         of peak bandwidth",
        per_instance / 1e6,
        bytes / 1e6,
        pct
    );
    if !left_out.is_empty() {
        let _ = write!(what, " ({} left out: no estimate)", left_out.join(", "));
    }
    out.verdict = if measured_memory != estimated_memory {
        out.note = format!(
            "measured {}-bound, not {}-bound as estimated: {what}",
            bound(measured_memory),
            bound(estimated_memory)
        );
        "contradicts"
    } else if estimated_memory
        && (1.0 / BYTES_FACTOR..=BYTES_FACTOR).contains(&ratio)
        && pct >= CONFIRM_PCT_OF_PEAK
    {
        out.note = format!("measured memory-bound as estimated: {what}");
        "confirms"
    } else if !estimated_memory && pct < CONFIRM_PCT_OF_PEAK {
        out.note = format!("measured compute-bound as estimated: {what}");
        "confirms"
    } else {
        out.note = format!(
            "measured {}-bound as estimated, but not clearly: {what}",
            bound(measured_memory)
        );
        "inconclusive"
    }
    .into();
    Some(out)
}

/// The confidence after the check: one level down where it contradicts the estimate, one up
/// where it confirms it, unchanged where inconclusive or where most values are shared or
/// estimated (then the note says so).
pub fn adjust(confidence: &str, check: &mut CounterCheck) -> String {
    const LEVELS: [&str; 3] = ["low", "medium", "high"];
    let Some(i) = LEVELS.iter().position(|l| *l == confidence) else {
        return confidence.to_string();
    };
    let flagged = check.shared.max(check.estimated) as f64 > 0.5 * check.kernels as f64;
    let to = match check.verdict.as_str() {
        "contradicts" | "confirms" if flagged => {
            check
                .note
                .push_str("; most values are shared with concurrent work or estimated, so the confidence stays");
            i
        }
        "contradicts" => i.saturating_sub(1),
        "confirms" => (i + 1).min(LEVELS.len() - 1),
        _ => i,
    };
    if to != i {
        check.confidence_before = Some(confidence.to_string());
    }
    LEVELS[to].to_string()
}
