//! What fuseprof writes for people and other tools: the HTML performance report with its CI
//! gate, Markdown summary and JUnit XML ([`report`]), the run history on SQLite or PostgreSQL
//! ([`history`]), and a Chrome-trace JSON export that opens in the Perfetto UI ([`chrome`]).
//!
//! ```no_run
//! use fuseprof_reports::gate::Gate;
//! use fuseprof_reports::report::{generate, ReportConfig};
//! let cfg = ReportConfig {
//!     run: "run.sqlite".into(),
//!     output: "report.html".into(),
//!     baseline: Some("base.sqlite".into()),
//!     gate: Some(Gate::parse("step_time<=+3%,new_kernels<=0")?),
//!     ..Default::default()
//! };
//! let outcome = generate(&cfg)?;
//! println!("gate passed: {:?}", outcome.gate.map(|g| g.passed()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod chrome;
mod data;
mod error;
pub mod gate;
pub mod history;
pub mod html;
pub mod report;
pub mod summary;
mod text;

pub use error::{Error, Result};
