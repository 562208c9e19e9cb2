//! What the run's hardware counters measured (`collect --metrics`), per kernel name: DRAM bytes
//! moved and the bandwidth achieved against the device's peak, and the tensor pipe's activity,
//! from each kernel's attributed samples (`store/src/counters.rs`). Absent without counters.

use std::collections::HashMap;

use fuseprof_store::{Device, NamedKernelCounter};
use serde::{Deserialize, Serialize};

/// Kernel names kept, by GPU time.
const TOP: usize = 50;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The quantities the run holds (`dram_read_bytes`, `tensor_pipe_pct`, ...).
    pub quantities: Vec<String>,
    /// Kernels with counters, and of those shared with concurrent work and estimated from
    /// samples longer than the kernel.
    pub kernels: u64,
    pub shared: u64,
    pub estimated: u64,
    pub by_kernel: Vec<MeasuredKernel>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredKernel {
    pub name: String,
    pub count: u64,
    pub gpu_ns: i64,
    /// DRAM bytes read plus written, summed over the kernel's executions.
    pub dram_bytes: Option<f64>,
    /// dram_bytes over the GPU time, and that against the device's peak bandwidth.
    pub achieved_bytes_per_s: Option<f64>,
    pub bandwidth_pct_of_peak: Option<f64>,
    /// The tensor pipe's activity, time-weighted over the executions (percent).
    pub tensor_pipe_pct: Option<f64>,
    /// Executions whose values are shared with concurrent work, or estimates.
    pub shared: u64,
    pub estimated: u64,
}

#[derive(Default)]
struct Acc {
    count: u64,
    gpu_ns: i64,
    bytes: Option<f64>,
    tensor_weighted: f64,
    tensor_ns: i64,
    shared: u64,
    estimated: u64,
    device: i64,
}

/// The measured table from each kernel's counter values (one row per kernel and counter, in
/// kernel order, as the store gives them); `None` when there are none.
pub fn measure(rows: &[NamedKernelCounter], devices: &[Device]) -> Option<Measured> {
    if rows.is_empty() {
        return None;
    }
    let mut quantities: Vec<String> = rows.iter().map(|r| r.quantity.clone()).collect();
    quantities.sort();
    quantities.dedup();
    let mut by_name: HashMap<&str, Acc> = HashMap::new();
    // A kernel's rows come together: its first one counts the execution.
    let (mut kernels, mut shared, mut estimated) = (0u64, 0u64, 0u64);
    let mut prev: Option<i64> = None;
    for r in rows {
        let first = prev != Some(r.kernel_id);
        prev = Some(r.kernel_id);
        let a = by_name.entry(&r.kernel_name).or_default();
        a.device = r.device_id;
        if first {
            a.count += 1;
            a.gpu_ns += r.duration_ns;
            kernels += 1;
            a.shared += r.shared as u64;
            a.estimated += r.estimated as u64;
            shared += r.shared as u64;
            estimated += r.estimated as u64;
        }
        match r.quantity.as_str() {
            "dram_read_bytes" | "dram_write_bytes" => {
                *a.bytes.get_or_insert(0.0) += r.value;
            }
            "tensor_pipe_pct" => {
                a.tensor_weighted += r.value * r.duration_ns as f64;
                a.tensor_ns += r.duration_ns;
            }
            _ => {}
        }
    }
    let peak = |device: i64| {
        devices
            .iter()
            .find(|d| d.id == device)
            .and_then(|d| d.mem_bandwidth_bytes_per_s)
            .filter(|v| *v > 0.0)
    };
    let mut by_kernel: Vec<MeasuredKernel> = by_name
        .into_iter()
        .map(|(name, a)| {
            let achieved = a
                .bytes
                .filter(|_| a.gpu_ns > 0)
                .map(|b| b / (a.gpu_ns as f64 * 1e-9));
            MeasuredKernel {
                name: name.to_string(),
                count: a.count,
                gpu_ns: a.gpu_ns,
                dram_bytes: a.bytes,
                achieved_bytes_per_s: achieved,
                bandwidth_pct_of_peak: achieved.zip(peak(a.device)).map(|(x, p)| 100.0 * x / p),
                tensor_pipe_pct: (a.tensor_ns > 0).then(|| a.tensor_weighted / a.tensor_ns as f64),
                shared: a.shared,
                estimated: a.estimated,
            }
        })
        .collect();
    by_kernel.sort_by(|a, b| (b.gpu_ns, &a.name).cmp(&(a.gpu_ns, &b.name)));
    by_kernel.truncate(TOP);
    Some(Measured {
        quantities,
        kernels,
        shared,
        estimated,
        by_kernel,
    })
}
