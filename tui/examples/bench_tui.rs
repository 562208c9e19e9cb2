//! Benchmark (not a test): how fast `fuseprof tui` draws on large runs, on one core.
//!
//! ```text
//! cargo build --release -p fuseprof-analyzer --example bench_analyze
//! target/release/examples/bench_analyze --kernels 1000000,10000000 --hta-kernels '' \
//!     --generate-only --dir /tmp/fuseprof-bench       # synthetic runs (analyzer/BENCH.md)
//! cargo build --release -p fuseprof-tui --example bench_tui
//! target/release/examples/bench_tui /tmp/fuseprof-bench/synthetic-1000000.sqlite \
//!     /tmp/fuseprof-bench/synthetic-10000000.sqlite
//! ```
//!
//! Each store is measured in a child pinned to one core (`taskset -c 0`), with the explorer
//! exactly as `fuseprof tui` runs it (background summary pass and window reads), drawing into
//! an in-memory 200x50 terminal: the time from start to the first frame, to the first frame
//! with every lane known (the summary of every table in), then a scripted session of zooms,
//! pans and selections: from each input to its next frame (the key handled, e.g. a
//! selection's details read, and the frame drawn: what the user waits for) and how long until
//! the view is refined (raw windows and details read), then the hotspot view (from its key to
//! the frame that shows the table). Peak RSS is the child's VmHWM, after the timeline session
//! and after the hotspot view. Then the tables are scoped to one step (`S`, the step, Enter) for
//! the first, middle and last step: from the key to the frame with the step's table, and the
//! peak RSS of that alone (the peak is reset before it). Prints a Markdown table; the `summaries` column says whether the
//! run had the explorer's summaries kept in it (`fuseprof import` keeps them).
//! `--measure STORE` runs one child alone (`BENCH_TUI_KEEP=1`: keeping what it derives in a
//! run without summaries, as `fuseprof tui` does); `--keep STORE...` keeps the summaries in each run as
//! `fuseprof import` does, one child each on one core, and prints its time and peak RSS.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fuseprof_tui::{App, Loading, TuiConfig};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

const W: u16 = 200;
const H: u16 = 50;

fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn measure(path: &Path) {
    let t = Instant::now();
    let mut cfg = TuiConfig::new(vec![path.to_path_buf()]);
    cfg.loading = Loading::Background;
    // The timeline alone: the analysis (hotspots, tree) starts when a view needs it, and its
    // cost is analyzer/BENCH.md's.
    cfg.auto_analyze_max_kernels = 0;
    // BENCH_TUI_KEEP: keep what it derives in the run, as `fuseprof tui` does.
    cfg.keep_summaries = std::env::var_os("BENCH_TUI_KEEP").is_some();
    let mut app = App::new(cfg).expect("open");
    let mut term = Terminal::new(TestBackend::new(W, H)).unwrap();
    let mut draw = |app: &mut App| {
        let f = Instant::now();
        term.draw(|f| fuseprof_tui::draw(f, app)).unwrap();
        f.elapsed().as_secs_f64() * 1e3
    };
    draw(&mut app);
    let first = t.elapsed().as_secs_f64();
    // Until every lane of the screen is drawn (sampled or exact), then until it is exact.
    let mut complete = if app.frame_unknown { f64::NAN } else { first };
    while complete.is_nan() && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(2));
        if app.poll() {
            draw(&mut app);
            if !app.frame_unknown {
                complete = t.elapsed().as_secs_f64();
            }
        }
    }
    let settle = |app: &mut App, draw: &mut dyn FnMut(&mut App) -> f64| {
        let s = Instant::now();
        loop {
            app.poll();
            draw(app);
            // Everything the input asked for: windows, details, searches (no analysis runs
            // here, so `busy` is about the view).
            if app.runs[0].timeline_ready() && !app.busy() {
                return s.elapsed().as_secs_f64() * 1e3;
            }
            if s.elapsed() > Duration::from_secs(120) {
                return f64::NAN;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    settle(&mut app, &mut draw);
    let full = t.elapsed().as_secs_f64();
    let summary_s = app.runs[0].pass_seconds.unwrap_or(f64::NAN);

    // A session around a busy moment (the first kernel after the middle of the run): zoom
    // in step by step to single kernels, panning back and forth at each level, move between
    // lanes and select, step along a lane, zoom back out and fit.
    let mid = app.from_ns / 2 + app.to_ns / 2;
    let tracks = app.runs[0].meta.tracks.clone();
    let busy = tracks.iter().find_map(|t| match t.key {
        fuseprof_tui::model::TrackKey::Stream { device, stream } => app.runs[0]
            .store
            .stream_window(device, stream, mid, i64::MAX, 1)
            .ok()
            .and_then(|v| v.first().map(|g| g.start_ns)),
        _ => None,
    });
    if let Some(t) = busy {
        let half = (app.to_ns - app.from_ns) / 2;
        app.from_ns = t - half;
        app.to_ns = t + half;
    }
    let mut script: Vec<KeyCode> = Vec::new();
    for _ in 0..16 {
        script.push(KeyCode::Char('+'));
        script.push(KeyCode::Char('l'));
        script.push(KeyCode::Char('h'));
    }
    for c in ['j', 'j', 'j', 'j', 'j', 'j'] {
        script.push(KeyCode::Char(c));
        script.push(KeyCode::Enter);
    }
    for _ in 0..4 {
        script.push(KeyCode::Char('.'));
    }
    script.push(KeyCode::Char('k'));
    script.push(KeyCode::Enter);
    for _ in 0..4 {
        script.push(KeyCode::Char('L'));
    }
    for _ in 0..16 {
        script.push(KeyCode::Char('-'));
    }
    script.push(KeyCode::Char('0'));
    let mut frames = Vec::new();
    let mut settles = Vec::new();
    for k in &script {
        // What the user waits for: the key handled (a selection reads its details) and the
        // next frame drawn.
        let t = Instant::now();
        app.on_key(KeyEvent::new(*k, KeyModifiers::NONE));
        draw(&mut app);
        frames.push(t.elapsed().as_secs_f64() * 1e3);
        settles.push(settle(&mut app, &mut draw));
        if std::env::var_os("BENCH_TUI_VERBOSE").is_some() {
            eprintln!(
                "{k:?}: frame {:.2} ms, refined {:.1} ms, view {} ns",
                frames[frames.len() - 1],
                settles[settles.len() - 1],
                app.to_ns - app.from_ns
            );
        }
    }
    let timeline_rss = peak_rss_mb();

    // The hotspot view: from the key to the frame that shows its table (the analysis read
    // from the run's summary, or computed), and the peak memory after it.
    let h = Instant::now();
    app.on_key(KeyEvent::new(KeyCode::Char('2'), KeyModifiers::NONE));
    draw(&mut app);
    while app.runs[0].ready_analysis(None).is_none() && h.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(2));
        if app.poll() {
            draw(&mut app);
        }
    }
    draw(&mut app);
    let hotspot_s = h.elapsed().as_secs_f64();
    let hotspot_rss = peak_rss_mb();

    // Scoping every table to one step (`S`, a step, Enter): the first, middle and last step,
    // from the key to the frame with the step's table; the peak memory of that alone (the
    // peak is reset first: the hotspot view's analysis is not counted again).
    let steps = app.runs[0]
        .ready_analysis(None)
        .map_or(0, |a| a.analysis.steps.steps.len());
    let reset_peak = || {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    };
    reset_peak();
    let rss_before_scope = peak_rss_mb();
    let mut scopes = Vec::new();
    let mut scope_frames = Vec::new();
    for k in [0, steps / 2, steps.saturating_sub(1)] {
        if steps == 0 {
            break;
        }
        let s = Instant::now();
        app.on_key(KeyEvent::new(KeyCode::Char('S'), KeyModifiers::NONE));
        draw(&mut app);
        app.step_popup = Some(k + 1);
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        draw(&mut app);
        scope_frames.push(s.elapsed().as_secs_f64() * 1e3);
        while app.runs[0].ready_analysis(Some(k)).is_none()
            && s.elapsed() < Duration::from_secs(300)
        {
            std::thread::sleep(Duration::from_millis(1));
            if app.poll() {
                draw(&mut app);
            }
        }
        draw(&mut app);
        scopes.push(s.elapsed().as_secs_f64());
    }
    let scope_worst = scopes.iter().cloned().fold(f64::NAN, f64::max);
    let scope_median = pct(&mut scopes, 0.5);
    let scope_frame_worst = scope_frames.iter().cloned().fold(f64::NAN, f64::max);
    let scope_rss = peak_rss_mb();
    let n = frames.len();
    let worst = frames.iter().cloned().fold(0.0, f64::max);
    let median = pct(&mut frames, 0.5);
    let settle_worst = settles.iter().cloned().fold(0.0, f64::max);
    let settle_median = pct(&mut settles, 0.5);
    let rows = &app.runs[0].meta.rows;
    println!(
        "RESULT kept={} kernels={} ranges={} api_calls={} first_frame_s={first:.3} complete_frame_s={complete:.3} full_frame_s={full:.3} \
         summary_s={summary_s:.3} inputs={n} frame_median_ms={median:.2} frame_worst_ms={worst:.2} \
         settle_median_ms={settle_median:.1} settle_worst_ms={settle_worst:.1} peak_rss_mb={timeline_rss:.0} \
         hotspot_s={hotspot_s:.3} hotspot_peak_rss_mb={hotspot_rss:.0} steps={steps} \
         scope_median_s={scope_median:.3} scope_worst_s={scope_worst:.3} \
         scope_frame_worst_ms={scope_frame_worst:.2} scope_rss_before_mb={rss_before_scope:.0} \
         scope_peak_rss_mb={scope_rss:.0}",
        if app.runs[0].summary_kept { "kept" } else { "none" },
        rows.kernels,
        rows.ranges,
        rows.api_calls,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure") {
        measure(Path::new(&args[1]));
        return;
    }
    let me = std::env::current_exe().unwrap();
    if args.first().map(String::as_str) == Some("--write") {
        let t = Instant::now();
        let w = fuseprof_tui::summary::write(Path::new(&args[1])).expect("keep the summaries");
        println!(
            "RESULT write_s={:.3} peak_rss_mb={:.0} lanes_kb={} analysis_kb={}",
            t.elapsed().as_secs_f64(),
            peak_rss_mb(),
            w.lanes_bytes / 1024,
            w.analysis_bytes
                .map_or_else(|e| e, |b| (b / 1024).to_string())
        );
        return;
    }
    if args.first().map(String::as_str) == Some("--keep") {
        for a in &args[1..] {
            let out = Command::new("taskset")
                .args(["-c", "0"])
                .arg(&me)
                .arg("--write")
                .arg(a)
                .output()
                .expect("run the child");
            println!(
                "{a}: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        return;
    }
    println!("| store | summaries | kernels | ranges | API calls | size GB | first frame s | first full frame (sampled) s | exact frame (summary in) s | frame after input: median / worst ms | refined after input: median / worst ms | peak RSS MB | hotspot view s | peak RSS with hotspots MB | steps | scope to a step: median / worst s | scope key frame worst ms | RSS before scoping / peak while scoping MB |");
    println!(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for a in &args {
        let store = PathBuf::from(a);
        let size = std::fs::metadata(&store).map_or(0.0, |m| m.len() as f64 / 1e9);
        let out = Command::new("taskset")
            .args(["-c", "0"])
            .arg(&me)
            .arg("--measure")
            .arg(&store)
            .output()
            .expect("run the child");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(line) = text.lines().find(|l| l.starts_with("RESULT ")) else {
            eprintln!(
                "{}: no result: {}",
                store.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            continue;
        };
        let get = |k: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "| {} | {} | {} | {} | {} | {size:.2} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} / {} | {} | {} / {} |",
            store.file_name().unwrap().to_string_lossy(),
            get("kept"),
            get("kernels"),
            get("ranges"),
            get("api_calls"),
            get("first_frame_s"),
            get("complete_frame_s"),
            get("full_frame_s"),
            get("frame_median_ms"),
            get("frame_worst_ms"),
            get("settle_median_ms"),
            get("settle_worst_ms"),
            get("peak_rss_mb"),
            get("hotspot_s"),
            get("hotspot_peak_rss_mb"),
            get("steps"),
            get("scope_median_s"),
            get("scope_worst_s"),
            get("scope_frame_worst_ms"),
            get("scope_rss_before_mb"),
            get("scope_peak_rss_mb"),
        );
    }
}
