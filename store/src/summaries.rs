//! Summary tables: what a reader derives from a whole run (the timeline's per-lane bins, the
//! analysis the TUI's tables show) kept in the run itself, so that opening a large run does not
//! derive it again. They live in one table, `summaries(name, stamp, data)`, that is not part of
//! the schema's migrations: a run without it reads exactly as before, and only
//! [`write_summary`] creates it.
//!
//! Each summary carries a stamp: what the run held when it was derived ([`Store::run_stamp`]:
//! the row id range of every table the summaries read) plus the caller's own version text.
//! [`Store::summary`] hands back the data only when the stamp still matches, so a summary of
//! a run that has changed since, or of an older summary format, is never used.

use std::path::Path;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{ConnectOptions, Row};

use crate::{Error, Result, Store};

impl Store {
    /// What the run holds, as a text that changes when a row is added to or removed from the
    /// end of any table the summaries derive from (the record tables' `INTEGER PRIMARY KEY` ids only grow
    /// at the end; threads and processes, small, are counted). Index seeks only.
    pub fn run_stamp(&mut self) -> Result<String> {
        const TABLES: [&str; 7] = [
            "kernels",
            "memops",
            "ranges",
            "api_calls",
            "strings",
            "threads",
            "processes",
        ];
        let (rt, conn) = self.rt_conn();
        let row = rt.block_on(
            sqlx::query(
                "SELECT (SELECT min(id) FROM kernels), (SELECT max(id) FROM kernels), \
                 (SELECT min(id) FROM memops), (SELECT max(id) FROM memops), \
                 (SELECT min(id) FROM ranges), (SELECT max(id) FROM ranges), \
                 (SELECT min(id) FROM api_calls), (SELECT max(id) FROM api_calls), \
                 (SELECT min(id) FROM strings), (SELECT max(id) FROM strings), \
                 0, (SELECT count(*) FROM threads), 0, (SELECT count(*) FROM processes)",
            )
            .fetch_one(&mut *conn),
        )?;
        let mut out = Vec::new();
        for (i, table) in TABLES.iter().enumerate() {
            let lo: Option<i64> = row.try_get(2 * i)?;
            let hi: Option<i64> = row.try_get(2 * i + 1)?;
            out.push(format!("{table}={}..{}", lo.unwrap_or(0), hi.unwrap_or(0)));
        }
        let out = out.join(" ");
        Ok(out)
    }

    /// The summary `name` of this run when it was derived by a reader of version `version`
    /// from the run as it is now; None when the run has none, or only a stale one.
    pub fn summary(&mut self, name: &str, version: &str) -> Result<Option<Vec<u8>>> {
        let want = format!("{version}; {}", self.run_stamp()?);
        let (rt, conn) = self.rt_conn();
        let has: Option<i64> = rt.block_on(
            sqlx::query_scalar(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'summaries'",
            )
            .fetch_optional(&mut *conn),
        )?;
        if has.is_none() {
            return Ok(None);
        }
        let row: Option<(String, Vec<u8>)> = rt.block_on(
            sqlx::query_as("SELECT stamp, data FROM summaries WHERE name = ?")
                .bind(name)
                .fetch_optional(&mut *conn),
        )?;
        Ok(match row {
            Some((stamp, data)) if stamp == want => Some(data),
            Some((stamp, _)) => {
                tracing::debug!("summary {name}: stale ({stamp:?}, the run is {want:?})");
                None
            }
            None => None,
        })
    }
}

/// Keeps `data` in the run at `path` as its summary `name`, derived by a reader of version
/// `version` from the run as it is now (replacing an earlier one). The run must be one that
/// [`Store::open`] accepts; a run being read elsewhere is waited for (up to 10 s).
pub fn write_summary(path: &Path, name: &str, version: &str, data: &[u8]) -> Result<()> {
    let stamp = format!("{version}; {}", Store::open(path)?.run_stamp()?);
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
            .busy_timeout(Duration::from_secs(10))
            .disable_statement_logging()
            .connect()
            .await?;
        let mut tx = sqlx::Connection::begin(&mut conn).await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS summaries (name TEXT PRIMARY KEY, stamp TEXT NOT NULL, \
             data BLOB NOT NULL)",
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query("INSERT OR REPLACE INTO summaries (name, stamp, data) VALUES (?, ?, ?)")
            .bind(name)
            .bind(&stamp)
            .bind(data)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateOptions, Kernel, RunInfo, Writer};

    fn kernel(w: &mut Writer, at: i64) {
        let name = w.intern("k");
        w.kernel(Kernel {
            start_ns: at,
            end_ns: at + 10,
            device_id: 0,
            stream_id: 7,
            pid: Some(1),
            correlation_id: None,
            external_id: None,
            name,
            grid: None,
            block: None,
            registers_per_thread: None,
            static_smem_bytes: None,
            dynamic_smem_bytes: None,
            graph_id: None,
        })
        .unwrap();
    }

    #[test]
    fn a_summary_is_kept_and_a_stale_one_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
        kernel(&mut w, 0);
        kernel(&mut w, 100);
        w.finish(RunInfo {
            source_format: "cupti".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            Store::open(&path).unwrap().summary("lanes", "v1").unwrap(),
            None
        );
        write_summary(&path, "lanes", "v1", b"abc").unwrap();
        let mut s = Store::open(&path).unwrap();
        assert_eq!(
            s.summary("lanes", "v1").unwrap().as_deref(),
            Some(&b"abc"[..])
        );
        // Another reader version, or another name: not this summary.
        assert_eq!(s.summary("lanes", "v2").unwrap(), None);
        assert_eq!(s.summary("analysis", "v1").unwrap(), None);
        drop(s);
        write_summary(&path, "lanes", "v1", b"abcd").unwrap();
        assert_eq!(
            Store::open(&path)
                .unwrap()
                .summary("lanes", "v1")
                .unwrap()
                .as_deref(),
            Some(&b"abcd"[..])
        );

        // A run whose rows changed since: the stamp no longer matches.
        delete_last_kernel(&path);
        assert_eq!(
            Store::open(&path).unwrap().summary("lanes", "v1").unwrap(),
            None
        );
    }

    /// Deletes the last kernel through plain SQL (what no fuseprof writer does).
    fn delete_last_kernel(path: &Path) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut conn = SqliteConnectOptions::new()
                .filename(path)
                .connect()
                .await
                .unwrap();
            sqlx::query("DELETE FROM kernels WHERE id = (SELECT max(id) FROM kernels)")
                .execute(&mut conn)
                .await
                .unwrap();
        });
    }
}
