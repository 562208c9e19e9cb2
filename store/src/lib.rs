//! The fuseprof store: one SQLite file per run, written by one [`Writer`] and read through
//! [`Store`]. Every source (Kineto JSON, `nsys export` SQLite, live CUPTI capture) lands here,
//! and every later stage reads only this.
//!
//! The schema lives in `migrations/` (applied with `sqlx::migrate!`); `meta` holds the format
//! name and [`SCHEMA_VERSION`]. sqlx is async; this crate hides that behind a blocking API with
//! its own current-thread runtime, because its callers are parsers and number crunchers.
//!
//! ```
//! use fuseprof_store::{CreateOptions, Range, RangeKind, RunInfo, Store, Writer};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("run.sqlite");
//! let mut w = Writer::create(&path, CreateOptions::default()).unwrap();
//! let name = w.intern("aten::addmm");
//! let mut r = Range::new(RangeKind::CpuOp, name, 100, 100, 1_000);
//! r.end_ns = Some(2_000);
//! w.range(r).unwrap();
//! w.finish(RunInfo { source_format: "kineto".into(), ..Default::default() }).unwrap();
//!
//! let mut store = Store::open(&path).unwrap();
//! let strings = store.strings().unwrap();
//! store.for_each_range(|r| assert_eq!(strings.get(r.name), "aten::addmm")).unwrap();
//! ```

mod counters;
mod error;
mod fileformat;
#[cfg(test)]
mod large_files;
mod mapped;
mod model;
mod names;
mod ranks;
mod raw;
mod reader;
mod repair;
mod results;
mod rows;
mod summaries;
mod tables;
mod writer;

pub use counters::{
    attribute, attribute_counters, record_counters, AttributionReport, CounterKind, CounterMetric,
    CounterSample, CounterSummary, KernelCounter, NamedKernelCounter, Span,
};
pub use error::{Error, Result};
pub use mapped::Mapped;
pub use model::*;
pub use names::{parse_range_name, ParsedName};
pub use ranks::{
    align_collectives, match_collectives, merge_ranks, publish_with_ranks, write_ranks, Alignment,
    Collective, MergePart, MergeReport, RankInfo,
};
pub use reader::{
    schema_text_is_utf8, ApiSpan, Direction, GpuKind, GpuSpan, HostCopies, HostSpan, Info,
    PassKernel, PassMemop, PassRange, RowEstimates, Store, Strings, TableCounts, SCHEMA_NOT_UTF8,
};
pub use repair::{integrity_check, repair, Repaired};
pub use results::{record_bench_results, BenchResult};
pub use rows::{RawHandle, RawRows};
pub use summaries::write_summary;
pub use tables::{Leaves, ResumeAt, TableCursor, TableFile};
pub use writer::{Counts, CreateOptions, Writer};

/// The cores this process may use (its CPU affinity and cgroup quota included), at least 1:
/// where there is more than one, the import's stages that can run side by side do.
pub fn usable_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Sets the C allocator up for a process that writes a run and then reads it back (`import`):
/// one arena for all its threads, and memory freed kept in the process (neither returned at the
/// top of the heap nor mapped apart below 32 MB). The summaries that end an import then reuse
/// the pages that the import's buffers were given, instead of the kernel mapping and zeroing
/// fresh ones: about a third fewer page faults. Call it before any thread starts. The cost is a
/// peak that stays at its high-water mark until the process ends, so long-lived commands (the
/// explorer) do not call it. Returns whether the C library took every setting (false where it
/// is not glibc, which is left as it is).
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // 32 MB: the largest mapping threshold glibc would pick by itself.
        const SETTINGS: [(libc::c_int, libc::c_int); 3] = [
            (libc::M_ARENA_MAX, 1),
            (libc::M_MMAP_THRESHOLD, 32 << 20),
            (libc::M_TRIM_THRESHOLD, libc::c_int::MAX),
        ];
        // Every setting is made, whether or not one before it was refused.
        SETTINGS.iter().fold(true, |all_taken, &(param, value)| {
            // SAFETY: mallopt only changes glibc's allocation policy; it returns 0 for a
            // setting it refuses.
            let taken = unsafe { libc::mallopt(param, value) } == 1;
            all_taken && taken
        })
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    /// glibc takes every setting (mallopt returns 0 for a parameter or value it refuses).
    #[test]
    fn glibc_takes_the_allocator_settings() {
        assert!(super::keep_freed_memory());
    }
}

/// The schema version this build writes and the newest it reads.
pub const SCHEMA_VERSION: i64 = 4;
