//! `fuseprof bench` results kept in the run they were measured for (migration 3). A run written
//! before it opens as before and has no results; the first write applies the migration.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{ConnectOptions, Row};

use crate::{Error, Result, Store};

/// One measured proposal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    pub proposal_id: String,
    pub pattern: String,
    pub shape: String,
    /// `passed`, `failed` (numerics) or `error` (it did not run).
    pub status: String,
    /// Medians per call, ns.
    pub ours_ns: f64,
    pub baseline_ns: f64,
    pub compiled_ns: Option<f64>,
    pub expected_ns: Option<f64>,
    pub max_rel_error: Option<f64>,
    pub tolerance: Option<f64>,
    pub device: Option<String>,
    pub driver: Option<String>,
    pub torch_version: Option<String>,
    pub measured_unix_ns: i64,
    /// Anything else, as JSON text.
    pub detail: Option<String>,
}

impl Store {
    /// The bench results of this run (none for a run that never had any).
    pub fn bench_results(&mut self) -> Result<Vec<BenchResult>> {
        let (rt, conn) = self.rt_conn();
        let has: Option<i64> = rt.block_on(
            sqlx::query_scalar(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'bench_results'",
            )
            .fetch_optional(&mut *conn),
        )?;
        if has.is_none() {
            return Ok(Vec::new());
        }
        let rows = rt.block_on(
            sqlx::query(
                "SELECT proposal_id, pattern, shape, status, ours_ns, baseline_ns, compiled_ns, \
                 expected_ns, max_rel_error, tolerance, device, driver, torch_version, \
                 measured_unix_ns, detail FROM bench_results ORDER BY proposal_id",
            )
            .fetch_all(&mut *conn),
        )?;
        rows.iter()
            .map(|r| {
                Ok(BenchResult {
                    proposal_id: r.try_get(0)?,
                    pattern: r.try_get(1)?,
                    shape: r.try_get(2)?,
                    status: r.try_get(3)?,
                    ours_ns: r.try_get::<Option<f64>, _>(4)?.unwrap_or(f64::NAN),
                    baseline_ns: r.try_get::<Option<f64>, _>(5)?.unwrap_or(f64::NAN),
                    compiled_ns: r.try_get(6)?,
                    expected_ns: r.try_get(7)?,
                    max_rel_error: r.try_get(8)?,
                    tolerance: r.try_get(9)?,
                    device: r.try_get(10)?,
                    driver: r.try_get(11)?,
                    torch_version: r.try_get(12)?,
                    measured_unix_ns: r.try_get(13)?,
                    detail: r.try_get(14)?,
                })
            })
            .collect()
    }
}

fn nan_to_null(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Writes `results` into the run at `path` (replacing earlier results of the same proposals),
/// applying the results migration first where the run predates it. The run must be one that
/// [`Store::open`] accepts; all rows land in one transaction or none do.
pub fn record_bench_results(path: &Path, results: &[BenchResult]) -> Result<()> {
    // Refuses what is not a complete run of a schema this build reads.
    drop(Store::open(path)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|error| Error::Io {
            path: path.into(),
            error,
        })?;
    rt.block_on(async {
        let mut conn = SqliteConnectOptions::new()
            .filename(path)
            .journal_mode(SqliteJournalMode::Delete)
            .disable_statement_logging()
            .connect()
            .await?;
        sqlx::migrate!("./migrations").run(&mut conn).await?;
        let mut tx = sqlx::Connection::begin(&mut conn).await?;
        for r in results {
            sqlx::query(
                "INSERT OR REPLACE INTO bench_results (proposal_id, pattern, shape, status, \
                 ours_ns, baseline_ns, compiled_ns, expected_ns, max_rel_error, tolerance, \
                 device, driver, torch_version, measured_unix_ns, detail) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&r.proposal_id)
            .bind(&r.pattern)
            .bind(&r.shape)
            .bind(&r.status)
            .bind(nan_to_null(r.ours_ns))
            .bind(nan_to_null(r.baseline_ns))
            .bind(r.compiled_ns.and_then(nan_to_null))
            .bind(r.expected_ns.and_then(nan_to_null))
            .bind(r.max_rel_error.and_then(nan_to_null))
            .bind(r.tolerance)
            .bind(&r.device)
            .bind(&r.driver)
            .bind(&r.torch_version)
            .bind(r.measured_unix_ns)
            .bind(&r.detail)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    })
}
