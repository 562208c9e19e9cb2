//! What each fuzz target does with its input: write it where the code under test reads files
//! from (a per-process folder in /dev/shm when there is one), run it, and let any panic, hang
//! or runaway allocation surface to libFuzzer. Errors are the expected outcome for most
//! inputs; a run that is accepted must open again as a valid store.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("fuseprof-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    })
}

fn reopen(out: &Path) {
    let mut store = fuseprof_store::Store::open(out).expect("an accepted input makes a valid run");
    store.info().expect("its counts read back");
}

/// Imports `data` as a file named `name`; whether it was accepted.
fn import_as(data: &[u8], name: &str, format: fuseprof_collector::import::Format) -> bool {
    let input = scratch().join(name);
    let out = scratch().join("run.sqlite");
    std::fs::write(&input, data).expect("write the input");
    let opts = fuseprof_collector::import::ImportOptions {
        overwrite: true,
        format: Some(format),
        progress: None,
        jobs: None,
    };
    let accepted = fuseprof_collector::import::import(&input, &out, &opts).is_ok();
    if accepted {
        reopen(&out);
    }
    accepted
}

/// A PyTorch-profiler JSON trace (plain; gzip framing is flate2's). A plain trace that is
/// accepted must be UTF-8 JSON as serde_json reads it: the importer's scanner reads most of it
/// itself, and must refuse what serde_json would.
pub fn kineto(data: &[u8]) {
    if import_as(data, "trace.json", fuseprof_collector::import::Format::Kineto)
        && !data.starts_with(&[0x1f, 0x8b])
    {
        serde_json::from_slice::<serde::de::IgnoredAny>(data)
            .expect("an accepted plain trace is JSON as serde_json reads it");
    }
}

/// An `nsys export --type sqlite` file.
pub fn nsys(data: &[u8]) {
    import_as(data, "export.sqlite", fuseprof_collector::import::Format::Nsys);
}

/// One process's spool file, as the tracer writes it (also cut short, as a crash leaves it).
pub fn spool(data: &[u8]) {
    let dir = scratch().join("spool");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a spool folder");
    std::fs::write(dir.join("fuseprof-4242-1.spool"), data).expect("write the spool");
    let out = scratch().join("spool-run.sqlite");
    let _ = std::fs::remove_file(&out);
    if fuseprof_collector::collect::ingest_spool_dir(&dir, &out).is_ok() {
        reopen(&out);
    }
}

/// A run file as `analyze` opens it: corrupted pages, cut files, other SQLite files.
pub fn store(data: &[u8]) {
    let path = scratch().join("corrupt.sqlite");
    std::fs::write(&path, data).expect("write the run");
    let _ = fuseprof_analyzer::analyze_file(&path, &fuseprof_analyzer::AnalyzeConfig::default());
}
