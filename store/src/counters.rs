//! Hardware counters recorded with a trace (migration 8): the samples as collected, and their
//! attribution to kernels.
//!
//! PM sampling reads device-wide counters every interval; a sample cannot name the kernel it
//! measured. [`attribute`] splits each sample between the kernels and copies that ran during
//! it (a `sum` counter such as DRAM bytes, in proportion to the time each ran in the sample) or
//! averages it over each kernel's time (an `average` counter such as a pipe's utilisation). A
//! kernel that overlaps other work on its device gets a shared value, flagged; one that holds
//! no whole sample gets its share of longer samples, flagged as an estimate.
//!
//! ```
//! use fuseprof_store::{attribute, CounterKind, CounterSample, Span};
//! let samples = [CounterSample { metric_id: 1, start_ns: 0, end_ns: 100, value: 1000.0 }];
//! let spans = [
//!     Span { kernel_id: Some(1), device_id: 0, stream_id: 7, start_ns: 0, end_ns: 25 },
//!     Span { kernel_id: Some(2), device_id: 0, stream_id: 7, start_ns: 25, end_ns: 100 },
//! ];
//! let got = attribute(CounterKind::Sum, &samples, &spans);
//! assert_eq!(got[0].value, 250.0);
//! assert_eq!(got[1].value, 750.0);
//! ```

use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{ConnectOptions, Connection, Row, SqliteConnection};

use crate::{Error, Result, Store};

/// How a counter's samples combine over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// A count over the sample's interval (bytes): split between the work that ran in it.
    Sum,
    /// A rate or percentage: averaged over each kernel's time.
    Average,
}

impl CounterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CounterKind::Sum => "sum",
            CounterKind::Average => "average",
        }
    }
    pub fn parse(s: &str) -> Option<CounterKind> {
        match s {
            "sum" => Some(CounterKind::Sum),
            "average" => Some(CounterKind::Average),
            _ => None,
        }
    }
}

/// One counter as collected on one device (a row of `counter_metrics`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CounterMetric {
    pub id: i64,
    pub device_id: i64,
    /// The name the collection API accepted (`dram__bytes_read.sum`).
    pub name: String,
    /// What fuseprof reads it as (`dram_read_bytes`, `tensor_pipe_pct`, ...).
    pub quantity: String,
    pub kind: CounterKind,
    pub unit: String,
    /// `pm_sampling`.
    pub method: String,
    pub interval_ns: Option<i64>,
}

/// One sample of one counter over `[start_ns, end_ns)` on the run's clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CounterSample {
    pub metric_id: i64,
    pub start_ns: i64,
    pub end_ns: i64,
    pub value: f64,
}

/// GPU work on one device that a sample may be split between: a kernel, or a copy or fill
/// (`kernel_id` `None`), which takes its share of a sample but is not written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub kernel_id: Option<i64>,
    pub device_id: i64,
    pub stream_id: i64,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// One counter's value for one kernel (a row of `kernel_counters`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelCounter {
    pub kernel_id: i64,
    pub metric_id: i64,
    pub device_id: i64,
    pub stream_id: i64,
    pub start_ns: i64,
    pub value: f64,
    /// The fraction of the kernel's time that samples covered.
    pub coverage: f64,
    /// Other work ran on the device at the same time: the value is a shared attribution.
    pub shared: bool,
    /// No sample lay wholly inside the kernel: the value is its share of longer samples.
    pub estimated: bool,
}

fn overlap(a0: i64, a1: i64, b0: i64, b1: i64) -> i64 {
    (a1.min(b1) - a0.max(b0)).max(0)
}

/// Attributes one counter's samples (of one device; samples of other metrics or devices must
/// be filtered out by the caller) to the kernels among `spans` on that device. Samples may come
/// in any order but must not overlap each other (PM sampling's do not). Returns one value per
/// kernel that a sample covered, in the order of `spans`; kernels no sample touched get none.
pub fn attribute(
    kind: CounterKind,
    samples: &[CounterSample],
    spans: &[Span],
) -> Vec<KernelCounter> {
    let mut samples: Vec<CounterSample> = samples
        .iter()
        .filter(|s| s.end_ns > s.start_ns && s.value.is_finite())
        .copied()
        .collect();
    samples.sort_by_key(|s| s.start_ns);
    // Work sorted by start, to find which spans overlap another (the shared flag).
    let mut order: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].end_ns > spans[i].start_ns)
        .collect();
    order.sort_by_key(|&i| (spans[i].device_id, spans[i].start_ns));
    let mut shared = vec![false; spans.len()];
    let mut open: Option<(i64, i64, usize)> = None; // (device, latest end, its span)
    for &i in &order {
        let s = &spans[i];
        if let Some((dev, end, j)) = open {
            if dev == s.device_id && end > s.start_ns {
                shared[i] = true;
                shared[j] = true;
            }
        }
        if open.is_none_or(|(dev, end, _)| dev != s.device_id || s.end_ns > end) {
            open = Some((s.device_id, s.end_ns, i));
        }
    }
    // The samples a span overlaps: from the first one ending after its start.
    let first_sample = |start: i64| samples.partition_point(|x| x.end_ns <= start);
    // Pass 1: the time all work ran in each sample (the denominator of a `sum` split).
    let mut busy = vec![0i64; samples.len()];
    for s in spans.iter().filter(|s| s.end_ns > s.start_ns) {
        let mut k = first_sample(s.start_ns);
        while k < samples.len() && samples[k].start_ns < s.end_ns {
            busy[k] += overlap(s.start_ns, s.end_ns, samples[k].start_ns, samples[k].end_ns);
            k += 1;
        }
    }
    // Pass 2: each kernel's value.
    let mut out = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        let Some(kernel_id) = s.kernel_id else {
            continue;
        };
        if s.end_ns <= s.start_ns {
            continue;
        }
        let mut covered = 0i64;
        let mut weighted = 0.0f64;
        let mut whole_sample = false;
        let mut k = first_sample(s.start_ns);
        while k < samples.len() && samples[k].start_ns < s.end_ns {
            let x = &samples[k];
            let o = overlap(s.start_ns, s.end_ns, x.start_ns, x.end_ns);
            if o > 0 {
                covered += o;
                whole_sample |= x.start_ns >= s.start_ns && x.end_ns <= s.end_ns;
                weighted += match kind {
                    CounterKind::Sum => x.value * o as f64 / busy[k] as f64,
                    CounterKind::Average => x.value * o as f64,
                };
            }
            k += 1;
        }
        if covered == 0 {
            continue;
        }
        let value = match kind {
            CounterKind::Sum => weighted,
            CounterKind::Average => weighted / covered as f64,
        };
        out.push(KernelCounter {
            kernel_id,
            metric_id: samples.first().map_or(0, |x| x.metric_id),
            device_id: s.device_id,
            stream_id: s.stream_id,
            start_ns: s.start_ns,
            value,
            coverage: covered as f64 / (s.end_ns - s.start_ns) as f64,
            shared: shared[i],
            estimated: !whole_sample,
        });
    }
    out
}

/// What [`attribute_counters`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttributionReport {
    pub metrics: usize,
    pub samples: usize,
    /// Kernel values written (one per kernel and metric).
    pub kernel_values: usize,
    /// Of those, shared with concurrent work, and estimates from longer samples.
    pub shared: usize,
    pub estimated: usize,
    /// Kernels of devices with counters that no sample covered.
    pub uncovered_kernels: usize,
}

/// Rows per multi-row INSERT (five or nine bound values each, under SQLite's limit).
const ROWS_PER_INSERT: usize = 200;

async fn connect_rw(path: &Path) -> Result<SqliteConnection> {
    Ok(SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Delete)
        .disable_statement_logging()
        .connect()
        .await?)
}

fn runtime(path: &Path) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|error| Error::Io {
            path: path.into(),
            error,
        })
}

/// Writes the counters' metrics and samples into the complete run at `path` (in one
/// transaction), then attributes them to its kernels ([`attribute_counters`]). The ids of
/// `metrics` are kept; every sample's `metric_id` must name one of them.
pub fn record_counters(
    path: &Path,
    metrics: &[CounterMetric],
    samples: &[CounterSample],
) -> Result<AttributionReport> {
    drop(Store::open(path)?);
    let rt = runtime(path)?;
    rt.block_on(async {
        let mut conn = connect_rw(path).await?;
        sqlx::migrate!("./migrations").run(&mut conn).await?;
        let mut tx = conn.begin().await?;
        for m in metrics {
            sqlx::query(
                "INSERT INTO counter_metrics (id, device_id, name, quantity, kind, unit, method, \
                 interval_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(m.id)
            .bind(m.device_id)
            .bind(&m.name)
            .bind(&m.quantity)
            .bind(m.kind.as_str())
            .bind(&m.unit)
            .bind(&m.method)
            .bind(m.interval_ns)
            .execute(&mut *tx)
            .await?;
        }
        for chunk in samples.chunks(ROWS_PER_INSERT) {
            let sql = format!(
                "INSERT INTO counter_samples (metric_id, start_ns, end_ns, value) VALUES {}",
                vec!["(?, ?, ?, ?)"; chunk.len()].join(", ")
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for s in chunk {
                q = q
                    .bind(s.metric_id)
                    .bind(s.start_ns)
                    .bind(s.end_ns)
                    .bind(s.value);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        conn.close().await?;
        Ok::<_, Error>(())
    })?;
    attribute_counters(path)
}

/// Attributes the run's counter samples to its kernels and (re)writes `kernel_counters`.
pub fn attribute_counters(path: &Path) -> Result<AttributionReport> {
    let mut store = Store::open(path)?;
    let metrics = store.counter_metrics()?;
    let mut report = AttributionReport {
        metrics: metrics.len(),
        ..Default::default()
    };
    if metrics.is_empty() {
        return Ok(report);
    }
    let (rt, conn) = store.rt_conn();
    let spans: Vec<Span> = rt
        .block_on(
            sqlx::query(
                "SELECT id, device_id, stream_id, start_ns, end_ns FROM kernels \
                 UNION ALL SELECT NULL, device_id, stream_id, start_ns, end_ns FROM memops",
            )
            .fetch_all(&mut *conn),
        )?
        .iter()
        .map(|r| {
            Ok(Span {
                kernel_id: r.try_get(0)?,
                device_id: r.try_get(1)?,
                stream_id: r.try_get(2)?,
                start_ns: r.try_get(3)?,
                end_ns: r.try_get(4)?,
            })
        })
        .collect::<Result<_>>()?;
    let mut rows = Vec::new();
    for m in &metrics {
        let samples = store.counter_samples(m.id)?;
        report.samples += samples.len();
        let on_device: Vec<Span> = spans
            .iter()
            .filter(|s| s.device_id == m.device_id)
            .copied()
            .collect();
        let got = attribute(m.kind, &samples, &on_device);
        report.uncovered_kernels = report
            .uncovered_kernels
            .max(on_device.iter().filter(|s| s.kernel_id.is_some()).count() - got.len());
        rows.extend(got.into_iter().map(|mut k| {
            k.metric_id = m.id;
            k
        }));
    }
    report.kernel_values = rows.len();
    report.shared = rows.iter().filter(|r| r.shared).count();
    report.estimated = rows.iter().filter(|r| r.estimated).count();
    drop(store);
    let rt = runtime(path)?;
    rt.block_on(async {
        let mut conn = connect_rw(path).await?;
        let mut tx = conn.begin().await?;
        sqlx::query("DELETE FROM kernel_counters")
            .execute(&mut *tx)
            .await?;
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let sql = format!(
                "INSERT INTO kernel_counters (kernel_id, metric_id, device_id, stream_id, \
                 start_ns, value, coverage, shared, estimated) VALUES {}",
                vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ")
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for r in chunk {
                q = q
                    .bind(r.kernel_id)
                    .bind(r.metric_id)
                    .bind(r.device_id)
                    .bind(r.stream_id)
                    .bind(r.start_ns)
                    .bind(r.value)
                    .bind(r.coverage)
                    .bind(r.shared)
                    .bind(r.estimated);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        conn.close().await?;
        Ok(report)
    })
}

/// What a run holds of one counter (`fuseprof info`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CounterSummary {
    pub metric: CounterMetric,
    pub samples: i64,
    /// The time the samples cover, ns.
    pub sampled_ns: i64,
    /// The samples' total (a `sum` counter's count over the run), `None` for an average.
    pub total: Option<f64>,
    /// Kernels with a value, and of those shared and estimated.
    pub kernels: i64,
    pub shared: i64,
    pub estimated: i64,
}

/// One kernel's value of one counter, with what the analyzer groups it by.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedKernelCounter {
    pub kernel_id: i64,
    pub kernel_name: String,
    pub device_id: i64,
    /// The kernel's start on the run's clock: with `device_id` and `duration_ns`, what the
    /// analyzer finds its record by.
    pub start_ns: i64,
    pub duration_ns: i64,
    pub quantity: String,
    pub kind: CounterKind,
    pub value: f64,
    pub shared: bool,
    pub estimated: bool,
}

impl Store {
    /// Every kernel's counter values with the kernel's name and duration.
    pub fn named_kernel_counters(&mut self) -> Result<Vec<NamedKernelCounter>> {
        self.named_counters_where("", &[])
    }

    /// One kernel's counter values (none where it has none or the run has no counters).
    pub fn counters_of_kernel(&mut self, kernel_id: i64) -> Result<Vec<NamedKernelCounter>> {
        self.named_counters_where("WHERE c.kernel_id = ?", &[kernel_id])
    }

    /// The counter values of the kernels launched by API calls of thread (`pid`, `tid`) that
    /// start in `[start_ns, end_ns)`: what an op range's kernels measured. The calls are found
    /// through the `(pid, tid, start_ns)` index and their kernels through the
    /// `(correlation_id, pid)` one.
    pub fn counters_launched_from(
        &mut self,
        pid: i64,
        tid: i64,
        start_ns: i64,
        end_ns: i64,
    ) -> Result<Vec<NamedKernelCounter>> {
        self.named_counters_where(
            "WHERE c.kernel_id IN (SELECT k2.id FROM api_calls a \
             JOIN kernels k2 ON k2.correlation_id = a.correlation_id AND k2.pid = a.pid \
             WHERE a.pid = ? AND a.tid = ? AND a.start_ns >= ? AND a.start_ns < ?)",
            &[pid, tid, start_ns, end_ns],
        )
    }

    fn named_counters_where(
        &mut self,
        filter: &str,
        binds: &[i64],
    ) -> Result<Vec<NamedKernelCounter>> {
        if !self.has_table("kernel_counters")? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        let sql = format!(
            "SELECT c.kernel_id, s.value, k.device_id, k.start_ns, k.end_ns - k.start_ns, \
             m.quantity, m.kind, c.value, c.shared, c.estimated FROM kernel_counters c \
             JOIN kernels k ON k.id = c.kernel_id \
             JOIN counter_metrics m ON m.id = c.metric_id \
             JOIN strings s ON s.id = k.name_id {filter} ORDER BY c.kernel_id, c.metric_id"
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for b in binds {
            q = q.bind(*b);
        }
        let rows = rt.block_on(q.fetch_all(&mut *conn))?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get(6)?;
                Ok(NamedKernelCounter {
                    kernel_id: r.try_get(0)?,
                    kernel_name: r.try_get(1)?,
                    device_id: r.try_get(2)?,
                    start_ns: r.try_get(3)?,
                    duration_ns: r.try_get(4)?,
                    quantity: r.try_get(5)?,
                    kind: CounterKind::parse(&kind).unwrap_or(CounterKind::Average),
                    value: r.try_get(7)?,
                    shared: r.try_get(8)?,
                    estimated: r.try_get(9)?,
                })
            })
            .collect()
    }

    /// One summary per counter the run holds.
    pub fn counter_summaries(&mut self) -> Result<Vec<CounterSummary>> {
        let metrics = self.counter_metrics()?;
        let mut out = Vec::with_capacity(metrics.len());
        for metric in metrics {
            let (rt, conn) = self.rt_conn();
            let s = rt.block_on(
                sqlx::query(
                    "SELECT COUNT(*), COALESCE(SUM(end_ns - start_ns), 0), \
                     COALESCE(SUM(value), 0.0) FROM counter_samples WHERE metric_id = ?",
                )
                .bind(metric.id)
                .fetch_one(&mut *conn),
            )?;
            let k = rt.block_on(
                sqlx::query(
                    "SELECT COUNT(*), COALESCE(SUM(shared), 0), COALESCE(SUM(estimated), 0) \
                     FROM kernel_counters WHERE metric_id = ?",
                )
                .bind(metric.id)
                .fetch_one(&mut *conn),
            )?;
            let total: f64 = s.try_get(2)?;
            out.push(CounterSummary {
                samples: s.try_get(0)?,
                sampled_ns: s.try_get(1)?,
                total: (metric.kind == CounterKind::Sum).then_some(total),
                kernels: k.try_get(0)?,
                shared: k.try_get(1)?,
                estimated: k.try_get(2)?,
                metric,
            });
        }
        Ok(out)
    }

    fn has_table(&mut self, name: &str) -> Result<bool> {
        let (rt, conn) = self.rt_conn();
        let has: Option<i64> = rt.block_on(
            sqlx::query_scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
                .bind(name)
                .fetch_optional(&mut *conn),
        )?;
        Ok(has.is_some())
    }

    /// The counters the run holds (none in a run without them or written before them).
    pub fn counter_metrics(&mut self) -> Result<Vec<CounterMetric>> {
        if !self.has_table("counter_metrics")? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        let rows = rt.block_on(
            sqlx::query(
                "SELECT id, device_id, name, quantity, kind, unit, method, interval_ns \
                 FROM counter_metrics ORDER BY id",
            )
            .fetch_all(&mut *conn),
        )?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get(4)?;
                Ok(CounterMetric {
                    id: r.try_get(0)?,
                    device_id: r.try_get(1)?,
                    name: r.try_get(2)?,
                    quantity: r.try_get(3)?,
                    kind: CounterKind::parse(&kind).ok_or_else(|| {
                        Error::Sqlite(format!("counter_metrics: unknown kind {kind:?}"))
                    })?,
                    unit: r.try_get(5)?,
                    method: r.try_get(6)?,
                    interval_ns: r.try_get(7)?,
                })
            })
            .collect()
    }

    /// One counter's samples, in time order.
    pub fn counter_samples(&mut self, metric_id: i64) -> Result<Vec<CounterSample>> {
        if !self.has_table("counter_samples")? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        let rows = rt.block_on(
            sqlx::query(
                "SELECT start_ns, end_ns, value FROM counter_samples WHERE metric_id = ? \
                 ORDER BY start_ns",
            )
            .bind(metric_id)
            .fetch_all(&mut *conn),
        )?;
        rows.iter()
            .map(|r| {
                Ok(CounterSample {
                    metric_id,
                    start_ns: r.try_get(0)?,
                    end_ns: r.try_get(1)?,
                    value: r.try_get(2)?,
                })
            })
            .collect()
    }

    /// Every kernel's attributed counter values, by kernel then metric.
    pub fn kernel_counters(&mut self) -> Result<Vec<KernelCounter>> {
        if !self.has_table("kernel_counters")? {
            return Ok(Vec::new());
        }
        let (rt, conn) = self.rt_conn();
        let rows = rt.block_on(
            sqlx::query(
                "SELECT kernel_id, metric_id, device_id, stream_id, start_ns, value, coverage, \
                 shared, estimated FROM kernel_counters ORDER BY kernel_id, metric_id",
            )
            .fetch_all(&mut *conn),
        )?;
        rows.iter()
            .map(|r| {
                Ok(KernelCounter {
                    kernel_id: r.try_get(0)?,
                    metric_id: r.try_get(1)?,
                    device_id: r.try_get(2)?,
                    stream_id: r.try_get(3)?,
                    start_ns: r.try_get(4)?,
                    value: r.try_get(5)?,
                    coverage: r.try_get(6)?,
                    shared: r.try_get(7)?,
                    estimated: r.try_get(8)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(start_ns: i64, end_ns: i64, value: f64) -> CounterSample {
        CounterSample {
            metric_id: 1,
            start_ns,
            end_ns,
            value,
        }
    }
    fn kernel(id: i64, stream_id: i64, start_ns: i64, end_ns: i64) -> Span {
        Span {
            kernel_id: Some(id),
            device_id: 0,
            stream_id,
            start_ns,
            end_ns,
        }
    }
    fn values(got: &[KernelCounter]) -> Vec<(i64, f64)> {
        got.iter().map(|k| (k.kernel_id, k.value)).collect()
    }

    /// Back-to-back kernels on one stream: each sample goes to the kernels inside it by time,
    /// and the total is kept.
    #[test]
    fn serialized_kernels_split_by_time() {
        let samples: Vec<_> = (0..10)
            .map(|i| sample(i * 10, i * 10 + 10, 100.0))
            .collect();
        let spans = [
            kernel(1, 7, 0, 40),
            kernel(2, 7, 40, 45),
            kernel(3, 7, 45, 100),
        ];
        let got = attribute(CounterKind::Sum, &samples, &spans);
        assert_eq!(values(&got), vec![(1, 400.0), (2, 50.0), (3, 550.0)]);
        let total: f64 = got.iter().map(|k| k.value).sum();
        assert_eq!(total, 1000.0);
        assert!(got.iter().all(|k| !k.shared && k.coverage == 1.0));
        // Kernel 2 is shorter than a sample: its value is its share of one, an estimate.
        assert_eq!(
            got.iter().map(|k| k.estimated).collect::<Vec<_>>(),
            vec![false, true, false]
        );
    }

    /// A sample straddling a boundary with idle time in it goes wholly to the kernel that ran
    /// in it (idle time moves no bytes); a gap in the samples lowers coverage.
    #[test]
    fn straddling_samples_and_gaps() {
        let samples = [
            sample(0, 10, 80.0),
            sample(10, 20, 60.0),
            sample(30, 40, 10.0),
        ];
        let spans = [kernel(1, 7, 5, 15), kernel(2, 7, 25, 45)];
        let got = attribute(CounterKind::Sum, &samples, &spans);
        // Kernel 1 ran 5 ns of each of the first two samples and alone in both.
        assert_eq!(values(&got), vec![(1, 140.0), (2, 10.0)]);
        assert_eq!(got[0].coverage, 1.0);
        // Kernel 2: samples cover 30..40 of its 25..45.
        assert_eq!(got[1].coverage, 0.5);
        assert!(!got[1].estimated, "sample 30..40 lies inside it");
    }

    /// Kernels on two streams at once share each sample by time and are flagged; the one
    /// that ran alone is not.
    #[test]
    fn overlapping_kernels_share_and_are_flagged() {
        let samples = [sample(0, 10, 100.0), sample(10, 20, 100.0)];
        let spans = [
            kernel(1, 7, 0, 10),
            kernel(2, 8, 0, 10),
            kernel(3, 7, 10, 20),
        ];
        let got = attribute(CounterKind::Sum, &samples, &spans);
        assert_eq!(values(&got), vec![(1, 50.0), (2, 50.0), (3, 100.0)]);
        assert_eq!(
            got.iter().map(|k| k.shared).collect::<Vec<_>>(),
            vec![true, true, false]
        );
        // A copy takes its share of the sample but gets no row.
        let with_copy = [
            kernel(1, 7, 0, 10),
            Span {
                kernel_id: None,
                ..kernel(0, 9, 0, 10)
            },
        ];
        let got = attribute(CounterKind::Sum, &samples[..1], &with_copy);
        assert_eq!(values(&got), vec![(1, 50.0)]);
        assert!(got[0].shared);
    }

    /// An average counter is each kernel's time-weighted mean of the samples it ran in.
    #[test]
    fn averages_are_time_weighted() {
        let samples = [sample(0, 10, 20.0), sample(10, 20, 80.0)];
        let spans = [kernel(1, 7, 5, 20), kernel(2, 8, 0, 4)];
        let got = attribute(CounterKind::Average, &samples, &spans);
        assert_eq!(values(&got), vec![(1, 60.0), (2, 20.0)]);
        assert!(
            !got[0].shared && !got[1].shared,
            "5..20 and 0..4 do not overlap"
        );
    }

    /// No samples, no kernels, or samples outside every kernel: nothing is attributed.
    #[test]
    fn empty_streams() {
        assert!(attribute(CounterKind::Sum, &[], &[kernel(1, 7, 0, 10)]).is_empty());
        assert!(attribute(CounterKind::Sum, &[sample(0, 10, 5.0)], &[]).is_empty());
        assert!(attribute(
            CounterKind::Sum,
            &[sample(0, 10, 5.0)],
            &[kernel(1, 7, 20, 30)]
        )
        .is_empty());
        // A zero-length kernel or sample is skipped rather than divided by.
        assert!(attribute(
            CounterKind::Sum,
            &[sample(0, 0, 5.0)],
            &[kernel(1, 7, 0, 10)]
        )
        .is_empty());
        assert!(attribute(
            CounterKind::Sum,
            &[sample(0, 10, 5.0)],
            &[kernel(1, 7, 3, 3)]
        )
        .is_empty());
    }
}
