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

/// What the counters measured for one kernel execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordCounters {
    /// DRAM bytes read plus written, where recorded.
    pub dram_bytes: Option<f64>,
    /// The tensor pipe's activity over the kernel's time (percent), where recorded.
    pub tensor_pipe_pct: Option<f64>,
    /// Another kernel or copy ran on the device at the same time: the values are its share.
    pub shared: bool,
    /// No sample lay wholly inside the kernel: the values are its share of longer samples.
    pub estimated: bool,
}

/// The key a kernel execution is found by in both the store's counter rows and the analyzer's
/// records: (device id, start_ns, duration_ns). Two kernels of one device that start at the
/// same nanosecond with the same duration would share it; the first one's values are kept.
pub type RecordKey = (i64, i64, i64);

/// Each kernel execution's counters from the store's rows (one per kernel and counter).
pub fn per_record(rows: &[NamedKernelCounter]) -> HashMap<RecordKey, RecordCounters> {
    let mut out: HashMap<RecordKey, RecordCounters> = HashMap::new();
    let mut prev: Option<i64> = None;
    let mut key = (0, 0, 0);
    for r in rows {
        if prev != Some(r.kernel_id) {
            prev = Some(r.kernel_id);
            key = (r.device_id, r.start_ns, r.duration_ns);
            if out.contains_key(&key) {
                // Another kernel with the same key came first: keep its values alone.
                key = (i64::MIN, r.kernel_id, 0);
            }
        }
        let c = out.entry(key).or_default();
        c.shared |= r.shared;
        c.estimated |= r.estimated;
        match r.quantity.as_str() {
            "dram_read_bytes" | "dram_write_bytes" => {
                *c.dram_bytes.get_or_insert(0.0) += r.value;
            }
            "tensor_pipe_pct" => c.tensor_pipe_pct = Some(r.value),
            _ => {}
        }
    }
    out.retain(|k, _| k.0 != i64::MIN);
    out
}

/// The counters of a group of kernel executions (an op type and shape, a chain, one op's
/// kernels) summed: DRAM bytes over the time of the executions that recorded them, the tensor
/// pipe time-weighted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasuredGroup {
    /// Executions with counters, and their GPU time.
    pub kernels: u64,
    pub gpu_ns: i64,
    /// DRAM bytes read plus written, summed over the executions that recorded them.
    pub dram_bytes: Option<f64>,
    /// `dram_bytes` over those executions' GPU time, and that against the peak bandwidth.
    pub achieved_bytes_per_s: Option<f64>,
    pub bandwidth_pct_of_peak: Option<f64>,
    /// Percent, time-weighted over the executions that recorded it.
    pub tensor_pipe_pct: Option<f64>,
    /// Executions whose values are shared with concurrent work, or estimates.
    pub shared: u64,
    pub estimated: u64,
    #[serde(skip)]
    dram_ns: i64,
    #[serde(skip)]
    tensor_weighted: f64,
    #[serde(skip)]
    tensor_ns: i64,
}

impl MeasuredGroup {
    /// Adds one execution of `dur_ns` with counters `c`.
    pub fn add(&mut self, c: &RecordCounters, dur_ns: i64) {
        self.kernels += 1;
        self.gpu_ns += dur_ns;
        self.shared += u64::from(c.shared);
        self.estimated += u64::from(c.estimated);
        if let Some(b) = c.dram_bytes {
            *self.dram_bytes.get_or_insert(0.0) += b;
            self.dram_ns += dur_ns;
        }
        if let Some(t) = c.tensor_pipe_pct {
            self.tensor_weighted += t * dur_ns as f64;
            self.tensor_ns += dur_ns;
        }
    }

    /// Sets the rates once every execution is added; `peak_bytes_per_s` is the device's
    /// memory bandwidth, where known.
    pub fn finish(mut self, peak_bytes_per_s: Option<f64>) -> MeasuredGroup {
        self.achieved_bytes_per_s = self
            .dram_bytes
            .filter(|_| self.dram_ns > 0)
            .map(|b| b / (self.dram_ns as f64 * 1e-9));
        self.bandwidth_pct_of_peak = self
            .achieved_bytes_per_s
            .zip(peak_bytes_per_s.filter(|p| *p > 0.0))
            .map(|(x, p)| 100.0 * x / p);
        self.tensor_pipe_pct =
            (self.tensor_ns > 0).then(|| self.tensor_weighted / self.tensor_ns as f64);
        self
    }

    /// Of the executions, the share whose values are shared or estimated (0..1).
    pub fn flagged_fraction(&self) -> f64 {
        if self.kernels == 0 {
            return 0.0;
        }
        self.shared.max(self.estimated) as f64 / self.kernels as f64
    }
}

/// The group of the executions among `rows` (one op's kernels, read from the store).
pub fn group(rows: &[NamedKernelCounter], peak_bytes_per_s: Option<f64>) -> Option<MeasuredGroup> {
    if rows.is_empty() {
        return None;
    }
    let durations: HashMap<RecordKey, i64> = rows
        .iter()
        .map(|r| ((r.device_id, r.start_ns, r.duration_ns), r.duration_ns))
        .collect();
    let mut g = MeasuredGroup::default();
    let mut recs: Vec<_> = per_record(rows).into_iter().collect();
    recs.sort_by_key(|(k, _)| *k);
    for (k, c) in recs {
        g.add(&c, durations[&k]);
    }
    Some(g.finish(peak_bytes_per_s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuseprof_store::CounterKind;

    fn row(
        kernel_id: i64,
        start_ns: i64,
        quantity: &str,
        value: f64,
        shared: bool,
    ) -> NamedKernelCounter {
        NamedKernelCounter {
            kernel_id,
            kernel_name: "k".into(),
            device_id: 0,
            start_ns,
            duration_ns: 1_000,
            quantity: quantity.into(),
            kind: CounterKind::Sum,
            value,
            shared,
            estimated: false,
        }
    }

    /// Read and written bytes add up per execution; a group's bandwidth is its bytes over the
    /// time of the executions that recorded bytes, its tensor pipe time-weighted.
    #[test]
    fn groups_sum_bytes_and_weight_the_tensor_pipe() {
        let rows = [
            row(1, 0, "dram_read_bytes", 3e6, false),
            row(1, 0, "dram_write_bytes", 1e6, false),
            row(1, 0, "tensor_pipe_pct", 10.0, false),
            row(2, 5_000, "tensor_pipe_pct", 50.0, true),
        ];
        let per = per_record(&rows);
        assert_eq!(per[&(0, 0, 1_000)].dram_bytes, Some(4e6));
        assert!(per[&(0, 5_000, 1_000)].shared);
        let g = group(&rows, Some(8e12)).unwrap();
        assert_eq!((g.kernels, g.gpu_ns, g.shared), (2, 2_000, 1));
        assert_eq!(g.dram_bytes, Some(4e6));
        // 4 MB in the 1 us of kernel 1 alone: 4 TB/s, half of 8 TB/s.
        assert!((g.achieved_bytes_per_s.unwrap() - 4e12).abs() < 1.0);
        assert!((g.bandwidth_pct_of_peak.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(g.tensor_pipe_pct, Some(30.0));
        assert_eq!(g.flagged_fraction(), 0.5);
        assert_eq!(group(&[], None), None);
    }
}
