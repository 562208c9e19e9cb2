//! `fuseprof tui`: a terminal timeline explorer for a run. One track per GPU stream (kernels,
//! copies, fills) and per host thread (ranges nested as lanes by depth, module ranges in lanes
//! of their own, CUDA API calls), the analyzer's hotspot tables and operator tree, details of
//! any record with its launch flow, search, steps, and a diff of two runs.
//!
//! It stays fast on runs of ten million kernels because it never loads a run: the timeline
//! reads the records of a window through the store's indexes ([`model::RAW_LIMIT`] at most per
//! track) and draws anything wider from a whole-run summary in fixed bins that one pass per
//! table builds in the background ([`model::Summary`]); each screen column shows the aggregate
//! of what it holds (busy fraction, dominant class), so a frame costs what the screen holds.
//!
//! The library never touches the terminal outside [`run`]; [`App`] takes synthetic keys and
//! draws into any ratatui backend, which is how the tests drive it:
//!
//! ```
//! use fuseprof_store::{Api, ApiCall, CreateOptions, Kernel, RunInfo, Writer};
//! use fuseprof_tui::{App, Loading, TuiConfig};
//! use ratatui::{backend::TestBackend, Terminal};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("run.sqlite");
//! let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
//! let name = w.intern("ampere_sgemm_128x64_nn");
//! let launch = w.intern("cudaLaunchKernel");
//! w.api_call(ApiCall { api: Api::Runtime, start_ns: 0, end_ns: 5_000, pid: 1, tid: 1,
//!     correlation_id: Some(1), external_id: None, name: launch, return_code: None }).unwrap();
//! w.kernel(Kernel { start_ns: 10_000, end_ns: 90_000, device_id: 0, stream_id: 7, pid: Some(1),
//!     correlation_id: Some(1), external_id: None, name, grid: None, block: None,
//!     registers_per_thread: None, static_smem_bytes: None, dynamic_smem_bytes: None,
//!     graph_id: None }).unwrap();
//! w.finish(RunInfo { source_format: "cupti".into(), ..Default::default() }).unwrap();
//!
//! let mut cfg = TuiConfig::new(vec![path]);
//! cfg.loading = Loading::Blocking;
//! let mut app = App::new(cfg).unwrap();
//! let mut term = Terminal::new(TestBackend::new(100, 20)).unwrap();
//! term.draw(|f| fuseprof_tui::draw(f, &mut app)).unwrap();
//! let screen = format!("{:?}", term.backend().buffer());
//! assert!(screen.contains("GPU0 s7") && screen.contains("ampere_sgemm"));
//! ```

pub mod app;
mod data;
mod details;
mod error;
pub mod format;
pub mod model;
mod rows;
pub mod run;
pub mod summary;
mod term;
mod ui;

pub use app::{App, Details, Instances, Selection, TuiConfig, View};
pub use error::{Error, Result};
pub use run::Loading;
pub use ui::{draw, MIN_HEIGHT, MIN_WIDTH};

/// Opens the runs in `cfg` and runs the explorer in the terminal until `q`.
pub fn run(cfg: TuiConfig) -> Result<()> {
    // The files first: a wrong file is the more useful thing to hear about.
    let app = App::new(cfg)?;
    term::check_tty()?;
    let r = term::run(app);
    // A summary being kept in the run is finished, not cut short (the terminal is back).
    summary::wait_for_keeps(std::time::Duration::from_secs(15));
    r
}
