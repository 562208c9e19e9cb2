//! What fuseprof writes for people and other tools. Today: a Chrome-trace JSON export of a run
//! that opens in the Perfetto UI (ui.perfetto.dev) and chrome://tracing.
//!
//! ```no_run
//! use fuseprof_store::Store;
//! let mut store = Store::open("run.sqlite".as_ref())?;
//! let summary = fuseprof_reports::chrome::export(&mut store, "trace.json".as_ref(), false)?;
//! println!("{} events", summary.events);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod chrome;
