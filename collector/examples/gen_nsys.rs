//! Writes a large `nsys export --type sqlite` file by repeating a real one's event tables, for
//! the import benchmark: the copies double until there are at least COPIES, each shifted past
//! the previous ones in time, its correlation ids offset so that each copy's kernels pair with
//! its own launches (other ids and names stay as they are).
//!
//! cargo run --release -p fuseprof-collector --example gen_nsys -- SOURCE.sqlite COPIES OUT.sqlite

use sqlx::{ConnectOptions, Connection};

/// The tables of events the importer reads.
const TABLES: [&str; 6] = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, source, copies, out] = &args[..] else {
        return Err("usage: gen_nsys SOURCE.sqlite COPIES OUT.sqlite".into());
    };
    let copies: i64 = copies.parse()?;
    std::fs::copy(source, out)?;
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    rt.block_on(async {
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(out)
            .disable_statement_logging()
            .connect()
            .await?;
        let mut tables = Vec::new();
        for t in TABLES {
            let cols: Vec<(String,)> =
                sqlx::query_as("SELECT name FROM pragma_table_info(?) ORDER BY cid")
                    .bind(t)
                    .fetch_all(&mut c)
                    .await?;
            if !cols.is_empty() {
                tables.push((t, cols.into_iter().map(|c| c.0).collect::<Vec<_>>()));
            }
        }
        let (lo, hi): (Option<i64>, Option<i64>) =
            sqlx::query_as("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
                .fetch_one(&mut c)
                .await?;
        let span = hi.unwrap_or(0) - lo.unwrap_or(0) + 1_000;
        let mut corr_span = 0i64;
        for (t, cols) in &tables {
            if cols.iter().any(|c| c == "correlationId") {
                let (m,): (Option<i64>,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT max(correlationId) FROM {t}"
                )))
                .fetch_one(&mut c)
                .await?;
                corr_span = corr_span.max(m.unwrap_or(0) + 1);
            }
        }
        let mut have = 1;
        let mut events = 0;
        while have < copies {
            let mut tx = c.begin().await?;
            for (t, cols) in &tables {
                let names: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
                let values: Vec<String> = cols
                    .iter()
                    .map(|c| match c.as_str() {
                        "start" | "end" => format!("\"{c}\" + {}", span * have),
                        "correlationId" => format!("\"{c}\" + {}", corr_span * have),
                        _ => format!("\"{c}\""),
                    })
                    .collect();
                let sql = format!(
                    "INSERT INTO {t} ({}) SELECT {} FROM {t}",
                    names.join(", "),
                    values.join(", ")
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            have *= 2;
        }
        for (t, _) in &tables {
            let (n,): (i64,) =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {t}")))
                    .fetch_one(&mut c)
                    .await?;
            events += n;
        }
        c.close().await?;
        eprintln!("wrote {have} copies, {events} events, to {out}");
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
