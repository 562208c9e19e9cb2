//! Gets traces into the fuseprof store. `import` adapts the files other tools write
//! (PyTorch-profiler JSON, `nsys export` SQLite); every one lands in the same store through
//! one [`fuseprof_store::Writer`].
//!
//! ```no_run
//! use fuseprof_collector::import::{import, ImportOptions};
//! use std::path::Path;
//! let report = import(Path::new("trace.json.gz"), Path::new("run.sqlite"), &ImportOptions::default())?;
//! println!("{} kernels", report.counts.kernels);
//! # Ok::<(), fuseprof_collector::import::ImportError>(())
//! ```

pub mod collect;
pub mod import;
pub mod progress;
