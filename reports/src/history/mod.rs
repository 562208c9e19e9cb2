//! Run history shared by a team: `fuseprof push` stores a run's summary (per-step times,
//! per-op and per-class totals, device, versions, labels) in a database, `fuseprof history`
//! lists runs and their trend, and `report --history` draws it.
//!
//! The database is a local SQLite file by default, or PostgreSQL (`postgres://...`); both run
//! the same migrations (`migrations/history/`) through sqlx's `Any` driver. Each run has an
//! idempotency key derived from the run itself, and a push inserts the run row with `ON
//! CONFLICT DO NOTHING` in the same transaction as its details: concurrent pushes of the same
//! run store it once, pushes of different runs all land.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use fuseprof_analyzer::{Analysis, AnalyzeConfig};
use fuseprof_store::Store;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::cell::RefCell;

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Connection, Row};

use crate::{Error, Result};

/// Where the history lives when `--db` is not given.
pub const DEFAULT_DB: &str = "fuseprof-history.sqlite";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/history");

/// `branch=main,commit=abc` as sorted pairs.
pub type Labels = BTreeMap<String, String>;

/// Parses `NAME=VALUE` pairs separated by commas.
pub fn parse_labels(text: &str) -> Result<Labels> {
    let mut out = Labels::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| Error::BadLabel(text.into()))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(Error::BadLabel(text.into()));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// What `push` stores about a run.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub key: String,
    pub file: String,
    pub source_format: String,
    pub recorded_unix_ns: i64,
    pub command: Option<String>,
    pub host: Option<String>,
    pub device: Option<String>,
    pub driver: Option<String>,
    pub cuda_runtime: Option<String>,
    pub tool_version: Option<String>,
    /// (GPU ns, wall ns) per step; the whole run as one step when it has none.
    pub steps: Vec<(i64, i64)>,
    pub gpu_ns: i64,
    /// Op type -> (instances, self ns), whole run.
    pub ops: BTreeMap<String, (i64, i64)>,
    /// Kernel class -> (records, ns), whole run.
    pub classes: BTreeMap<String, (i64, i64)>,
    pub labels: Labels,
}

/// A run as `history` lists it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HistoryRun {
    pub key: String,
    pub file: String,
    pub recorded_unix_ns: i64,
    pub pushed_unix_ns: i64,
    pub device: Option<String>,
    pub steps: i64,
    pub step_gpu_median_ns: f64,
    pub step_gpu_mean_ns: f64,
    pub step_gpu_stddev_ns: f64,
    pub labels: Labels,
}

/// The idempotency key of a run: a hash of what identifies one recording (when and where it
/// started, its command, its record counts and GPU time), not of the file's bytes, so a copy
/// or a re-import of the same recording gets the same key.
pub fn run_key(path: &Path) -> Result<String> {
    let mut store = Store::open(path)?;
    let info = store.info()?;
    Ok(key_of(&info))
}

fn key_of(info: &fuseprof_store::Info) -> String {
    let mut h = Sha256::new();
    let r = &info.run;
    let c = &info.counts;
    let text = format!(
        "{}\n{:?}\n{:?}\n{:?}\n{:?}\n{}\n{}\n{}\n{}\n{:?}\n{:?}",
        r.source_format,
        r.start_unix_ns,
        r.host,
        r.command,
        r.source_path,
        c.kernels,
        c.memcpys,
        c.memsets,
        info.kernel_time_ns,
        info.first_ns,
        info.last_ns
    );
    h.update(text.as_bytes());
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads a run's summary for `push`.
pub fn summarize(path: &Path, labels: Labels) -> Result<RunSummary> {
    let mut store = Store::open(path)?;
    let info = store.info()?;
    let a: Analysis = fuseprof_analyzer::analyze(&mut store, &AnalyzeConfig::default())?;
    let steps: Vec<(i64, i64)> = if a.steps.steps.is_empty() {
        vec![(
            a.totals.gpu_ns,
            info.last_ns.unwrap_or(0) - info.first_ns.unwrap_or(0),
        )]
    } else {
        a.steps
            .steps
            .iter()
            .map(|s| (s.gpu_ns, s.wall_ns))
            .collect()
    };
    let mut ops = BTreeMap::new();
    for r in &a.by_op {
        let e = ops.entry(r.name.clone()).or_insert((0i64, 0i64));
        e.0 += r.instances as i64;
        e.1 += r.self_ns;
    }
    let classes = a
        .by_class
        .iter()
        .map(|c| (c.class.as_str().to_string(), (c.count as i64, c.total_ns)))
        .collect();
    Ok(RunSummary {
        key: key_of(&info),
        file: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        source_format: info.run.source_format.clone(),
        recorded_unix_ns: info.run.start_unix_ns.unwrap_or(0),
        command: info.run.command.clone(),
        host: info.run.host.clone(),
        device: info.devices.first().and_then(|d| d.name.clone()),
        driver: info.run.cuda_driver_version.clone(),
        cuda_runtime: info.run.cuda_runtime_version.clone(),
        tool_version: info.run.tool_version.clone(),
        steps,
        gpu_ns: a.totals.gpu_ns,
        ops,
        classes,
        labels,
    })
}

/// `url` with any password replaced, for messages.
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((userinfo, host)) = rest.rsplit_once('@') {
            if let Some((user, _password)) = userinfo.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
    }
    url.to_string()
}

/// `--db` as a sqlx URL: a URL as given, a plain path as an SQLite file (created if missing).
pub fn db_url(db: &str) -> String {
    if db.contains("://") || db.starts_with("sqlite:") {
        db.to_string()
    } else {
        format!("sqlite://{db}?mode=rwc")
    }
}

/// An open, migrated history database.
pub struct History {
    rt: tokio::runtime::Runtime,
    /// One connection: a CLI command runs its statements one after another.
    conn: RefCell<AnyConnection>,
    url: String,
}

/// Whether a push stored the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    Stored,
    /// A run with the same key was already there; nothing changed.
    AlreadyThere,
}

fn sigma(v: &[f64]) -> (f64, f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.is_empty() {
        0.0
    } else if s.len().is_multiple_of(2) {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    } else {
        s[s.len() / 2]
    };
    (median, mean, sd)
}

impl History {
    /// Connects (within 10 s) and applies the migrations. `db` is a URL (`postgres://...`,
    /// `sqlite://...`) or a path to an SQLite file.
    pub fn open(db: &str) -> Result<History> {
        let url = db_url(db);
        let shown = redact(&url);
        let err = |what: &str, e: &dyn std::fmt::Display| Error::History {
            url: shown.clone(),
            reason: format!("{what}: {e}"),
        };
        sqlx::any::install_default_drivers();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err("cannot start the runtime", &e))?;
        let conn = rt.block_on(async {
            // One attempt, bounded: an unreachable server is reported, not retried.
            let mut conn =
                tokio::time::timeout(Duration::from_secs(10), AnyConnection::connect(&url))
                    .await
                    .map_err(|_| err("cannot connect", &"no answer within 10 s"))?
                    .map_err(|e| err("cannot connect", &e))?;
            if url.starts_with("sqlite:") {
                // Concurrent pushes wait for each other instead of failing at once.
                sqlx::query("PRAGMA busy_timeout = 30000")
                    .execute(&mut conn)
                    .await
                    .map_err(|e| err("cannot configure", &e))?;
                // WAL lets `history` read while a push writes; a failure to switch (another
                // connection holds the file) leaves the mode as it was.
                if let Err(e) = sqlx::query("PRAGMA journal_mode = WAL")
                    .execute(&mut conn)
                    .await
                {
                    tracing::debug!("journal_mode = WAL: {e}");
                }
            }
            MIGRATOR
                .run(&mut conn)
                .await
                .map_err(|e| err("cannot apply the history schema", &e))?;
            Ok::<_, Error>(conn)
        })?;
        Ok(History {
            rt,
            conn: RefCell::new(conn),
            url: shown,
        })
    }

    fn db_err(&self, what: &str, e: sqlx::Error) -> Error {
        Error::History {
            url: self.url.clone(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Stores a run's summary, all of it or nothing; a run already there is left as it is.
    pub fn push(&self, s: &RunSummary, pushed_unix_ns: i64) -> Result<Pushed> {
        let gpu: Vec<f64> = s.steps.iter().map(|x| x.0 as f64).collect();
        let (median, mean, sd) = sigma(&gpu);
        let mut conn = self.conn.borrow_mut();
        self.rt
            .block_on(async {
                let mut tx = conn.begin().await?;
                let inserted = sqlx::query(
                    "INSERT INTO history_runs (run_key, pushed_unix_ns, recorded_unix_ns, file, \
                     source_format, command, host, device, driver, cuda_runtime, tool_version, \
                     steps, gpu_ns, step_gpu_median_ns, step_gpu_mean_ns, step_gpu_stddev_ns) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
                     ON CONFLICT (run_key) DO NOTHING",
                )
                .bind(&s.key)
                .bind(pushed_unix_ns)
                .bind(s.recorded_unix_ns)
                .bind(&s.file)
                .bind(&s.source_format)
                .bind(s.command.clone())
                .bind(s.host.clone())
                .bind(s.device.clone())
                .bind(s.driver.clone())
                .bind(s.cuda_runtime.clone())
                .bind(s.tool_version.clone())
                .bind(s.steps.len() as i64)
                .bind(s.gpu_ns)
                .bind(median)
                .bind(mean)
                .bind(sd)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if inserted == 0 {
                    tx.rollback().await?;
                    return Ok(Pushed::AlreadyThere);
                }
                for (k, v) in &s.labels {
                    sqlx::query(
                        "INSERT INTO history_labels (run_key, name, value) VALUES ($1, $2, $3)",
                    )
                    .bind(&s.key)
                    .bind(k)
                    .bind(v)
                    .execute(&mut *tx)
                    .await?;
                }
                for (i, (g, w)) in s.steps.iter().enumerate() {
                    sqlx::query(
                        "INSERT INTO history_steps (run_key, step_index, gpu_ns, wall_ns) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(&s.key)
                    .bind(i as i64)
                    .bind(*g)
                    .bind(*w)
                    .execute(&mut *tx)
                    .await?;
                }
                for (name, (n, ns)) in &s.ops {
                    sqlx::query(
                        "INSERT INTO history_ops (run_key, name, instances, self_ns) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(&s.key)
                    .bind(name)
                    .bind(*n)
                    .bind(*ns)
                    .execute(&mut *tx)
                    .await?;
                }
                for (class, (n, ns)) in &s.classes {
                    sqlx::query(
                        "INSERT INTO history_classes (run_key, class, records, total_ns) \
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(&s.key)
                    .bind(class)
                    .bind(*n)
                    .bind(*ns)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(Pushed::Stored)
            })
            .map_err(|e| self.db_err("cannot store the run", e))
    }

    /// The latest `limit` runs that carry every label in `labels`, oldest first.
    pub fn runs(&self, labels: &Labels, limit: usize) -> Result<Vec<HistoryRun>> {
        let mut sql = String::from(
            "SELECT r.run_key, r.file, r.recorded_unix_ns, r.pushed_unix_ns, r.device, r.steps, \
             r.step_gpu_median_ns, r.step_gpu_mean_ns, r.step_gpu_stddev_ns \
             FROM history_runs r WHERE 1 = 1",
        );
        for i in 0..labels.len() {
            sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM history_labels l WHERE l.run_key = r.run_key \
                 AND l.name = ${} AND l.value = ${})",
                2 * i + 1,
                2 * i + 2
            ));
        }
        sql.push_str(&format!(
            " ORDER BY r.recorded_unix_ns DESC, r.pushed_unix_ns DESC, r.run_key LIMIT {}",
            limit.min(1_000_000)
        ));
        let mut conn = self.conn.borrow_mut();
        self.rt
            .block_on(async {
                // Audited: `sql` is literal text plus placeholder numbers and the limit; the label
                // names and values are bound.
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                for (k, v) in labels {
                    q = q.bind(k.clone()).bind(v.clone());
                }
                let rows: Vec<AnyRow> = q.fetch_all(&mut *conn).await?;
                let mut runs = Vec::new();
                for row in rows {
                    runs.push(HistoryRun {
                        key: row.try_get(0)?,
                        file: row.try_get(1)?,
                        recorded_unix_ns: row.try_get(2)?,
                        pushed_unix_ns: row.try_get(3)?,
                        device: row.try_get(4)?,
                        steps: row.try_get(5)?,
                        step_gpu_median_ns: row.try_get(6)?,
                        step_gpu_mean_ns: row.try_get(7)?,
                        step_gpu_stddev_ns: row.try_get(8)?,
                        labels: Labels::new(),
                    });
                }
                for r in &mut runs {
                    let rows: Vec<AnyRow> = sqlx::query(
                        "SELECT name, value FROM history_labels WHERE run_key = $1 ORDER BY name",
                    )
                    .bind(r.key.clone())
                    .fetch_all(&mut *conn)
                    .await?;
                    for row in rows {
                        r.labels.insert(row.try_get(0)?, row.try_get(1)?);
                    }
                }
                runs.reverse();
                Ok(runs)
            })
            .map_err(|e: sqlx::Error| self.db_err("cannot read the runs", e))
    }

    /// Per-step GPU times of one stored run.
    pub fn steps(&self, key: &str) -> Result<Vec<i64>> {
        let mut conn = self.conn.borrow_mut();
        self.rt
            .block_on(async {
                let rows: Vec<AnyRow> = sqlx::query(
                    "SELECT gpu_ns FROM history_steps WHERE run_key = $1 ORDER BY step_index",
                )
                .bind(key.to_string())
                .fetch_all(&mut *conn)
                .await?;
                rows.iter()
                    .map(|r| r.try_get::<i64, _>(0))
                    .collect::<Result<Vec<i64>, _>>()
            })
            .map_err(|e: sqlx::Error| self.db_err("cannot read the steps", e))
    }
}

/// The `history` table: one line per run, oldest first, with the change from the previous.
pub fn render_text(runs: &[HistoryRun]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<20} {:<34} {:>6} {:>12} {:>8} {:>8}  labels",
        "recorded", "file", "steps", "step ms", "cv %", "change"
    );
    let mut prev: Option<f64> = None;
    for r in runs {
        let change = match prev {
            Some(p) if p > 0.0 => format!("{:+.2}%", (r.step_gpu_median_ns - p) * 100.0 / p),
            _ => "".into(),
        };
        let cv = if r.step_gpu_mean_ns > 0.0 {
            r.step_gpu_stddev_ns * 100.0 / r.step_gpu_mean_ns
        } else {
            0.0
        };
        let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            o,
            "{:<20} {:<34} {:>6} {:>12.3} {:>8.2} {:>8}  {}",
            crate::text::utc_text(r.recorded_unix_ns),
            crate::text::short(&r.file, 34),
            r.steps,
            r.step_gpu_median_ns / 1e6,
            cv,
            change,
            labels.join(",")
        );
        prev = Some(r.step_gpu_median_ns);
    }
    if let (Some(first), Some(last)) = (runs.first(), runs.last()) {
        if runs.len() > 1 && first.step_gpu_median_ns > 0.0 {
            let _ = writeln!(
                o,
                "trend: {:+.2}% step GPU time over {} runs",
                (last.step_gpu_median_ns - first.step_gpu_median_ns) * 100.0
                    / first.step_gpu_median_ns,
                runs.len()
            );
        }
    }
    if runs.is_empty() {
        o.push_str("(no runs)\n");
    }
    o
}
