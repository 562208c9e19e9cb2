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

/// An accepted input's run: SQLite's own `quick_check` finds nothing wrong with the file, and
/// it opens again as a store.
fn reopen(out: &Path) {
    let problems = fuseprof_store::integrity_check(out, true).expect("SQLite opens the run");
    assert!(problems.is_empty(), "SQLite's quick_check: {problems:?}");
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

/// The ranks of one job, as `fuseprof import rank-*.json -o run.sqlite` merges them: `data` cut
/// at each `\0RANK\0` into up to four PyTorch-profiler traces, `rank-0.json` on. The
/// clocks' alignment and the merge read every time, id and name the traces hold; an accepted
/// job must open again and its analysis (per rank and across ranks) must not panic.
pub fn ranks(data: &[u8]) {
    let dir = scratch().join("ranks");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a ranks folder");
    let inputs: Vec<PathBuf> = fuseprof_fixtures::split_ranks(data)
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let path = dir.join(format!("rank-{i}.json"));
            std::fs::write(&path, part).expect("write a rank");
            path
        })
        .collect();
    let out = scratch().join("ranks-run.sqlite");
    let opts = fuseprof_collector::import::ImportOptions {
        overwrite: true,
        format: Some(fuseprof_collector::import::Format::Kineto),
        progress: None,
        jobs: Some(1),
    };
    if fuseprof_collector::import::ranks::import_ranks(&inputs, &out, &opts).is_ok() {
        reopen(&out);
        let _ = fuseprof_analyzer::analyze_file(&out, &fuseprof_analyzer::AnalyzeConfig::default());
    }
}

/// A run file as `fuseprof tui` opens it: the summaries kept in it (the lane bins, the
/// analysis), then the timeline zoomed in until it reads records through the indexes, a
/// record selected, and every view drawn.
pub fn tui(data: &[u8]) {
    use fuseprof_tui::{App, Loading, TuiConfig};
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::Terminal;

    let path = scratch().join("tui-run.sqlite");
    std::fs::write(&path, data).expect("write the run");
    let mut cfg = TuiConfig::new(vec![path]);
    cfg.loading = Loading::Blocking;
    let Ok(mut app) = App::new(cfg) else {
        return;
    };
    let mut term = Terminal::new(TestBackend::new(120, 40)).expect("a test terminal");
    let mut draw = |app: &mut App| {
        term.draw(|f| fuseprof_tui::draw(f, app)).expect("drawing into memory");
    };
    draw(&mut app);
    // Zoom in six times, down a row, select, follow the flow, each view, the next step, pan.
    for k in "++++++j\rf2341]L".chars() {
        let code = match k {
            '\r' => KeyCode::Enter,
            c => KeyCode::Char(c),
        };
        app.on_key(KeyEvent::new(code, KeyModifiers::NONE));
        draw(&mut app);
    }
}

/// A run file as the commands that write something from it read it: `info`, `analyze`'s text,
/// `report` (the HTML page with its charts, the run as its own baseline under a gate, the
/// Markdown summary and JUnit XML), `export` (Chrome trace JSON) and `advise`.
pub fn outputs(data: &[u8]) {
    use fuseprof_reports::{chrome, gate::Gate, report};

    let dir = scratch().join("outputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("an outputs folder");
    let run = dir.join("run.sqlite");
    std::fs::write(&run, data).expect("write the run");
    if let Ok(mut store) = fuseprof_store::Store::open(&run) {
        let _ = store.info();
        let _ = chrome::export(&mut store, &dir.join("trace.json"), true);
    }
    let cfg = fuseprof_analyzer::AnalyzeConfig::default();
    if let Ok(a) = fuseprof_analyzer::analyze_file(&run, &cfg) {
        let _ = fuseprof_analyzer::render_text(&a, &cfg);
    }
    let gate = Gate::from_arg("step_time<=+3%,op:aten::addmm<=+10%,new_kernels<=0")
        .expect("the gate's rules parse");
    let _ = report::generate(&report::ReportConfig {
        run: run.clone(),
        output: dir.join("report.html"),
        baseline: Some(run.clone()),
        gate: Some(gate),
        summary: Some(dir.join("summary.md")),
        junit: Some(dir.join("gate.xml")),
        history: None,
    });
    let advice_cfg = fuseprof_fusion_advisor::AdviseConfig::default();
    if let Ok(advice) = fuseprof_fusion_advisor::advise_file(&run, &advice_cfg) {
        let _ = fuseprof_fusion_advisor::render_text(&advice, 10);
    }
}

/// A run file as `analyze` and `repair` open it: corrupted pages, cut files, other SQLite
/// files. A repair that succeeds leaves a file SQLite finds nothing wrong with.
pub fn store(data: &[u8]) {
    let path = scratch().join("corrupt.sqlite");
    std::fs::write(&path, data).expect("write the run");
    let _ = fuseprof_analyzer::analyze_file(&path, &fuseprof_analyzer::AnalyzeConfig::default());
    let out = scratch().join("repaired.sqlite");
    let _ = std::fs::remove_file(&out);
    if let Ok(r) = fuseprof_store::repair(&path, Some(&out)) {
        let problems = fuseprof_store::integrity_check(&r.path, false).expect("SQLite opens it");
        assert!(problems.is_empty(), "PRAGMA integrity_check: {problems:?}");
    }
}
