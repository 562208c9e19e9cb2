//! The whole explorer on real recordings, driven with synthetic keys and drawn into ratatui's
//! TestBackend: snapshots of every view, key sequences and the state they lead to, bad input.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use fuseprof_store::{CreateOptions, Range, RangeKind, RunInfo, Writer};
use fuseprof_tui::model::ItemRef;
use fuseprof_tui::{App, Error, Loading, TuiConfig, View};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use ratatui::Terminal;

/// A store for a fixture: recordings are decompressed, Kineto traces imported; once per test
/// process.
fn store_for(rel: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static DONE: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let mut done = DONE.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = done.get(rel) {
        return p.clone();
    }
    let input = fuseprof_fixtures::path(rel);
    let stem = Path::new(rel)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .split('.')
        .next()
        .unwrap()
        .to_string();
    let out = dir.path().join(format!("{stem}.sqlite"));
    if rel.ends_with(".sqlite.gz") {
        let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(&input).unwrap());
        let mut f = std::fs::File::create(&out).unwrap();
        std::io::copy(&mut gz, &mut f).unwrap();
    } else {
        fuseprof_collector::import::import(
            &input,
            &out,
            &fuseprof_collector::import::ImportOptions::default(),
        )
        .unwrap_or_else(|e| panic!("importing {rel}: {e}"));
    }
    done.insert(rel.to_string(), out.clone());
    out
}

fn app(rels: &[&str]) -> App {
    let mut cfg = TuiConfig::new(rels.iter().map(|r| store_for(r)).collect());
    cfg.loading = Loading::Blocking;
    App::new(cfg).unwrap()
}

/// The screen as text, one line per row.
fn screen(app: &mut App, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| fuseprof_tui::draw(f, app)).unwrap();
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn key(app: &mut App, code: KeyCode) {
    app.on_key(KeyEvent::new(code, KeyModifiers::NONE));
}

fn keys(app: &mut App, s: &str) {
    for c in s.chars() {
        key(app, KeyCode::Char(c));
    }
}

const SWIN: &str = "recordings/swin_t_infer_modules.sqlite.gz";
const GPU_TEST: &str = "recordings/gpu_test.sqlite.gz";

#[test]
fn timeline_snapshots() {
    let mut a = app(&[SWIN]);
    insta::assert_snapshot!("timeline_fit_swin", screen(&mut a, 120, 30));
    // Zoom into the first forward pass and select the kernel under the cursor.
    keys(&mut a, "+++++");
    screen(&mut a, 120, 30);
    key(&mut a, KeyCode::Enter);
    insta::assert_snapshot!("timeline_zoomed_selected_swin", screen(&mut a, 120, 34));
    let mut g = app(&[GPU_TEST]);
    insta::assert_snapshot!("timeline_fit_gpu_test", screen(&mut g, 120, 24));
    let mut k = app(&["kineto/hta_critical_path_alexnet_trace.json.gz"]);
    insta::assert_snapshot!("timeline_fit_alexnet_kineto", screen(&mut k, 120, 24));
}

#[test]
fn hotspot_tree_details_help_snapshots() {
    let mut a = app(&[SWIN]);
    key(&mut a, KeyCode::Char('2'));
    insta::assert_snapshot!("hotspots_by_op_swin", screen(&mut a, 120, 24));
    keys(&mut a, "lll");
    insta::assert_snapshot!("hotspots_by_kernel_swin", screen(&mut a, 120, 24));
    key(&mut a, KeyCode::Char('3'));
    key(&mut a, KeyCode::Enter);
    keys(&mut a, "jl");
    insta::assert_snapshot!("tree_swin", screen(&mut a, 120, 24));
    // Details of the heaviest kernel, reached from the hotspot table.
    key(&mut a, KeyCode::Char('2'));
    key(&mut a, KeyCode::Enter);
    key(&mut a, KeyCode::Char('4'));
    insta::assert_snapshot!("details_kernel_swin", screen(&mut a, 120, 30));
    key(&mut a, KeyCode::Char('?'));
    insta::assert_snapshot!("help", screen(&mut a, 120, 30));
}

#[test]
fn diff_view_snapshot() {
    let mut a = app(&[
        "kineto/hta_trace_compare_base_base.json.gz",
        "kineto/hta_trace_compare_test_test.json.gz",
    ]);
    assert_eq!(a.view, View::Diff);
    insta::assert_snapshot!("diff_trace_compare", screen(&mut a, 120, 30));
    // t steps through the op, shape and kernel tables.
    keys(&mut a, "tt");
    let kernels = screen(&mut a, 120, 30);
    let header = |s: &str| s.lines().nth(2).unwrap_or_default().to_string();
    assert!(header(&kernels).starts_with("kernel "), "{kernels}");
    assert!(kernels.contains("diff by kernel"), "{kernels}");
    key(&mut a, KeyCode::Char('t'));
    assert!(header(&screen(&mut a, 120, 30)).starts_with("op "));
}

/// The explorer as `fuseprof tui` runs it (summary pass, window reads and analysis on
/// threads of their own) settles on the same screen as the blocking one of the snapshots.
#[test]
fn background_loading_settles_on_the_blocking_picture() {
    let mut cfg = TuiConfig::new(vec![store_for(SWIN)]);
    cfg.loading = Loading::Background;
    let mut bg = App::new(cfg).unwrap();
    let t = std::time::Instant::now();
    let mut first = true;
    loop {
        bg.poll();
        let s = screen(&mut bg, 120, 30);
        if first {
            // Drawn at once, before any of it is known.
            assert!(s.contains("GPU0 s7"), "{s}");
            first = false;
        }
        if bg.runs[0].timeline_ready() && !bg.busy() && !bg.frame_unknown && !bg.frame_sampled {
            break;
        }
        assert!(t.elapsed().as_secs() < 60, "never settled:\n{s}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut blocking = app(&[SWIN]);
    assert_eq!(screen(&mut bg, 120, 30), screen(&mut blocking, 120, 30));
    // The same after a zoom, once the window read has come back.
    for a in [&mut bg, &mut blocking] {
        keys(a, "+++");
    }
    for _ in 0..6000 {
        bg.poll();
        screen(&mut bg, 120, 30);
        if !bg.busy() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(screen(&mut bg, 120, 30), screen(&mut blocking, 120, 30));
    // A search runs on a thread of its own and selects what it finds when it comes back.
    for a in [&mut bg, &mut blocking] {
        key(a, KeyCode::Char('/'));
        keys(a, "gelu");
        key(a, KeyCode::Enter);
    }
    assert!(bg.message.contains("searching"), "{}", bg.message);
    for _ in 0..6000 {
        bg.poll();
        if !bg.busy() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(bg.selection, blocking.selection);
    assert!(bg.selection.is_some());
}

#[test]
fn a_small_terminal_says_so_and_redraws_when_resized() {
    let mut a = app(&[SWIN]);
    let small = screen(&mut a, 50, 10);
    assert!(small.contains("terminal too small: 50x10"), "{small}");
    let big = screen(&mut a, 100, 20);
    assert!(big.contains("GPU0 s7") && !big.contains("too small"));
}

#[test]
fn zoom_pan_and_fit_keys() {
    let mut a = app(&[SWIN]);
    screen(&mut a, 120, 30);
    let (f0, t0) = (a.from_ns, a.to_ns);
    let w0 = t0 - f0;
    key(&mut a, KeyCode::Char('+'));
    assert_eq!(a.to_ns - a.from_ns, w0 / 2);
    assert_eq!(a.cursor_ns() / 1000, (f0 / 2 + t0 / 2) / 1000);
    key(&mut a, KeyCode::Char('-'));
    assert_eq!(a.to_ns - a.from_ns, w0);
    let before = a.from_ns;
    key(&mut a, KeyCode::Char('l'));
    assert_eq!(a.from_ns - before, w0 / 8);
    key(&mut a, KeyCode::Left);
    assert_eq!(a.from_ns, before);
    keys(&mut a, "++++0");
    assert_eq!((a.from_ns, a.to_ns), (f0, t0));
    // The wheel zooms around the pointer; a drag pans by what the pointer moved.
    let (x, y) = (a.plot.x + 10, a.plot.y + 1);
    let t_at = a.time_at(x);
    a.on_mouse(MouseEvent {
        kind: MouseEventKind::ScrollUp,
        column: x,
        row: y,
        modifiers: KeyModifiers::NONE,
    });
    assert!((a.time_at(x) - t_at).abs() < (a.to_ns - a.from_ns) / 100);
    assert!(a.to_ns - a.from_ns < w0);
    let from = a.from_ns;
    let per_col = (a.to_ns - a.from_ns) / a.plot.width as i64;
    for (kind, col) in [
        (MouseEventKind::Down(MouseButton::Left), x),
        (MouseEventKind::Drag(MouseButton::Left), x + 10),
        (MouseEventKind::Up(MouseButton::Left), x + 10),
    ] {
        a.on_mouse(MouseEvent {
            kind,
            column: col,
            row: y,
            modifiers: KeyModifiers::NONE,
        });
    }
    assert!(((from - a.from_ns) - 10 * per_col).abs() <= per_col);
    key(&mut a, KeyCode::Char('q'));
    assert!(a.quit);
}

#[test]
fn hotspot_enter_jumps_to_instances_and_n_steps_through_them() {
    let mut a = app(&[SWIN]);
    screen(&mut a, 120, 30);
    key(&mut a, KeyCode::Char('2'));
    // aten::addmm is the third row of the op table.
    keys(&mut a, "jj");
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.view, View::Timeline);
    let first = a.selection.expect("an instance is selected");
    assert!(matches!(first.span.item, ItemRef::Range(_)));
    let d = a.details.clone().unwrap();
    assert_eq!(d.title, "nvtx_push_pop aten::addmm");
    // The view holds the instance.
    assert!(a.from_ns <= first.span.start_ns && a.to_ns >= first.span.end_ns);
    key(&mut a, KeyCode::Char('n'));
    let second = a.selection.unwrap();
    assert!(second.span.start_ns > first.span.start_ns);
    key(&mut a, KeyCode::Char('N'));
    assert_eq!(a.selection.unwrap().span, first.span);

    // The kernel table: instances are kernels on the stream.
    key(&mut a, KeyCode::Char('2'));
    keys(&mut a, "lll");
    key(&mut a, KeyCode::Enter);
    let k = a.selection.unwrap();
    assert!(matches!(k.span.item, ItemRef::Kernel(_)));
    let d = a.details.clone().unwrap();
    assert!(d.lines.iter().any(|(k, _)| k == "launched by"));
    assert!(d.lines.iter().any(|(k, _)| k == "op"));
    assert!(d.lines.iter().any(|(k, _)| k == "module"));
    // f follows the launch flow to the API call and back.
    key(&mut a, KeyCode::Char('f'));
    assert!(matches!(a.selection.unwrap().span.item, ItemRef::Api(_)));
    key(&mut a, KeyCode::Char('f'));
    assert_eq!(a.selection.unwrap().span.item, k.span.item);
}

#[test]
fn search_tree_jump_steps_and_scope() {
    let mut a = app(&[SWIN]);
    screen(&mut a, 120, 30);
    key(&mut a, KeyCode::Char('/'));
    keys(&mut a, "softmax");
    key(&mut a, KeyCode::Enter);
    let s = a.selection.expect("a softmax instance");
    let name = a.details.clone().unwrap().title.to_lowercase();
    assert!(name.contains("softmax"), "{name}");
    key(&mut a, KeyCode::Char('n'));
    assert!(a.selection.unwrap().span.start_ns > s.span.start_ns);

    // The tree: the model's node, expanded, then g jumps to its instances.
    key(&mut a, KeyCode::Char('3'));
    key(&mut a, KeyCode::Char('g'));
    assert_eq!(a.view, View::Timeline);
    assert!(a.details.clone().unwrap().title.contains("SwinTransformer"));

    // Steps: the recording ran the model three times.
    key(&mut a, KeyCode::Char(']'));
    assert_eq!(a.current_step, Some(0));
    let w0 = (a.from_ns, a.to_ns);
    key(&mut a, KeyCode::Char(']'));
    assert_eq!(a.current_step, Some(1));
    assert!(a.from_ns > w0.0);
    key(&mut a, KeyCode::Char('['));
    assert_eq!((a.from_ns, a.to_ns), w0);
    // The step selector scopes the tables.
    key(&mut a, KeyCode::Char('S'));
    keys(&mut a, "jj");
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.step, Some(1));
    key(&mut a, KeyCode::Char('2'));
    let text = screen(&mut a, 120, 24);
    assert!(text.contains("scope: step 1"), "{text}");
}

/// Scoping the tables to a step (`S`) shows the analysis of that step's records, read from
/// the step alone: equal to the analyzer's step-scoped analysis of the whole run, tables and
/// operator tree, for every step of real recordings with steps (the explorer's summary names
/// the long ranges open at each step's start).
#[test]
fn scoping_to_a_step_shows_that_steps_analysis() {
    use fuseprof_analyzer::{analyze_with_op_tree, AnalyzeConfig, Rules};
    let mut checked = 0;
    for rel in [
        SWIN,
        "recordings/swin_t_train_step_shapes.sqlite.gz",
        "kineto/hta_timeline_analysis_sampled_rank-0.json.gz",
        "kineto/hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ] {
        let mut a = app(&[rel]);
        let whole = a.runs[0].analysis(None).expect("the whole run's analysis");
        let steps = whole.analysis.steps.steps.len();
        let mut store = fuseprof_store::Store::open(&store_for(rel)).unwrap();
        for k in 0..steps.min(8) {
            // Through the selector, as a user picks it.
            key(&mut a, KeyCode::Char('S'));
            key(&mut a, KeyCode::Char('g'));
            for _ in 0..=k {
                key(&mut a, KeyCode::Char('j'));
            }
            key(&mut a, KeyCode::Enter);
            assert_eq!(a.step, Some(k));
            let got = a.runs[0]
                .ready_analysis(Some(k))
                .expect("the step's analysis");
            assert!(
                got.step_alone,
                "{rel} step {k}: analysed with the whole run"
            );
            let cfg = AnalyzeConfig {
                step: Some(k),
                ..AnalyzeConfig::default()
            };
            let (analysis, tree) =
                analyze_with_op_tree(&mut store, &cfg, &Rules::builtin()).unwrap();
            assert!(
                got.analysis == analysis,
                "{rel} step {k}: the tables differ"
            );
            assert!(
                got.tree == tree,
                "{rel} step {k}: the operator trees differ"
            );
            checked += 1;
        }
    }
    assert!(checked >= 8, "{checked} steps checked");
}

/// The step selector on a run of many steps: pages, either end, and back to the whole run.
#[test]
fn the_step_selector_pages_and_jumps_to_either_end() {
    let mut a = app(&[SWIN]);
    let steps = a.runs[0].analysis(None).unwrap().analysis.steps.steps.len();
    assert!(steps >= 2, "{steps} steps");
    key(&mut a, KeyCode::Char('S'));
    assert_eq!(a.step_popup, Some(0));
    key(&mut a, KeyCode::End);
    assert_eq!(a.step_popup, Some(steps));
    key(&mut a, KeyCode::PageDown);
    assert_eq!(a.step_popup, Some(steps), "stays on the last step");
    key(&mut a, KeyCode::PageUp);
    assert_eq!(
        a.step_popup,
        Some(0),
        "a page up from the last of a few steps"
    );
    key(&mut a, KeyCode::PageDown);
    assert_eq!(a.step_popup, Some(steps.min(20)));
    key(&mut a, KeyCode::Char('g'));
    assert_eq!(a.step_popup, Some(0));
    key(&mut a, KeyCode::Char('G'));
    assert_eq!(a.step_popup, Some(steps));
    let text = screen(&mut a, 120, 30);
    assert!(text.contains(&format!("step {}:", steps - 1)), "{text}");
    key(&mut a, KeyCode::Enter);
    assert_eq!((a.step, a.step_popup), (Some(steps - 1), None));
    // Home, Enter: the whole run again.
    key(&mut a, KeyCode::Char('S'));
    assert_eq!(a.step_popup, Some(steps));
    key(&mut a, KeyCode::Home);
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.step, None);
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a run").unwrap();
    let open = |p: &Path| {
        let mut cfg = TuiConfig::new(vec![p.to_path_buf()]);
        cfg.loading = Loading::Blocking;
        App::new(cfg).err().expect("refused").to_string()
    };
    let e = open(&text);
    assert!(e.contains("not a fuseprof run file"), "{e}");
    let missing = open(&dir.path().join("missing.sqlite"));
    assert!(missing.contains("missing.sqlite"), "{missing}");

    // A run with ranges but no kernels.
    let p = dir.path().join("no_kernels.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    let n = w.intern("step");
    let mut r = Range::new(RangeKind::NvtxPushPop, n, 1, 1, 0);
    r.end_ns = Some(10);
    w.range(r).unwrap();
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let e = open(&p);
    assert!(e.contains("holds no kernels"), "{e}");
    assert!(matches!(
        fuseprof_tui::run(TuiConfig::new(vec![p])),
        Err(Error::NoTty) | Err(Error::NoGpuWork { .. })
    ));

    // Kernels 200 years apart (a corrupt clock): refused, not a window that overflows.
    let p = dir.path().join("centuries.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    let n = w.intern("k");
    let year = 365 * 24 * 3600 * 1_000_000_000_i64;
    for start_ns in [-100 * year, 100 * year] {
        w.kernel(fuseprof_store::Kernel {
            start_ns,
            end_ns: start_ns + 1_000,
            device_id: 0,
            stream_id: 7,
            pid: None,
            correlation_id: None,
            external_id: None,
            name: n,
            grid: None,
            block: None,
            registers_per_thread: None,
            static_smem_bytes: None,
            dynamic_smem_bytes: None,
            graph_id: None,
        })
        .unwrap();
    }
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let e = open(&p);
    assert!(
        e.contains("centuries.sqlite") && e.contains("more than the explorer draws"),
        "{e}"
    );
}

/// Every real trace and recording of the fixtures opens, draws every view, and takes a
/// session of keys (zoom, pan, lanes, select, step, search, tables, tree) without a panic.
#[test]
fn every_fixture_survives_every_view_and_a_session() {
    let mut rels: Vec<String> = fuseprof_fixtures::KINETO
        .iter()
        .chain(fuseprof_fixtures::NSYS)
        .map(|s| s.to_string())
        .collect();
    for f in std::fs::read_dir(fuseprof_fixtures::path("recordings")).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().to_string();
        if name.ends_with(".sqlite.gz") {
            rels.push(format!("recordings/{name}"));
        }
    }
    for rel in &rels {
        // Kineto and nsys files are imported, recordings decompressed.
        let mut cfg = TuiConfig::new(vec![store_for(rel)]);
        cfg.loading = Loading::Blocking;
        let mut a = App::new(cfg).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for k in "1+++jj\r.,f]S\x1bjjj\r2ljs\rr3\rjjlg4/a\rnN5q".chars() {
            let code = match k {
                '\r' => KeyCode::Enter,
                '\x1b' => KeyCode::Esc,
                c => KeyCode::Char(c),
            };
            screen(&mut a, 100, 30);
            key(&mut a, code);
        }
        let s = screen(&mut a, 100, 30);
        assert!(a.quit && s.contains("fuseprof"), "{rel}:\n{s}");
    }
}

#[test]
fn the_advisor_view_lists_proposals_and_enter_jumps_to_their_instances() {
    let mut a = app(&["recordings/swin_t_infer_modules.sqlite.gz"]);
    key(&mut a, KeyCode::Char('6'));
    assert_eq!(a.view, View::Advisor);
    let s = screen(&mut a, 160, 40);
    insta::assert_snapshot!("advisor_swin", s);
    assert!(s.contains("6 Advisor"), "{s}");
    assert!(s.contains("proposals cover"), "{s}");
    assert!(s.contains("wattn-4096x3x49x32-shifted"), "{s}");
    // The settings before kernels, each with its rank among settings and proposals and its
    // change: this recording is launch-bound under the tracer.
    assert!(
        s.contains("before kernels: the program's own settings"),
        "{s}"
    );
    assert!(s.contains("launch-cuda-graphs"), "{s}");
    assert!(s.contains("change: model = torch.compile(model"), "{s}");
    // The setting comes first and is selected: its details say where to look, and Enter
    // shows its worst step on the timeline.
    let st = match a.runs[0].advice() {
        fuseprof_tui::run::AdviceState::Ready(adv) => adv.settings[0].clone(),
        _ => panic!("no advice"),
    };
    let w = st.worst_step.clone().unwrap();
    assert!(s.contains(&format!(" worst: {}", w.describe())), "{s}");
    key(&mut a, KeyCode::Enter);
    assert_eq!(a.view, View::Timeline, "{}", a.message);
    let o = a.offsets[0];
    assert!(
        a.from_ns <= w.start_ns - o && a.to_ns >= w.end_ns - o,
        "{} {} {w:?}",
        a.from_ns,
        a.to_ns
    );
    assert!(a.to_ns - a.from_ns < 2 * (w.end_ns - w.start_ns));
    assert!(
        a.message.starts_with("launch-cuda-graphs: step"),
        "{}",
        a.message
    );
    key(&mut a, KeyCode::Char('6'));
    key(&mut a, KeyCode::Char('j'));
    key(&mut a, KeyCode::Char('j'));
    assert_eq!(a.advisor_row, 2);
    let s = screen(&mut a, 160, 40);
    assert!(s.contains("call: out = fk.attention(qkv, heads=12"), "{s}");
    key(&mut a, KeyCode::Enter);
    // The second proposal's chain starts with aten::mul on [256, 12, 49, 32]: its first
    // instance is selected on the timeline.
    assert_eq!(a.view, View::Timeline, "{}", a.message);
    assert!(
        a.message.contains("wattn-256x12x49x32-shifted"),
        "{}",
        a.message
    );
    assert!(a.selection.is_some());
}

#[test]
fn the_advisor_view_says_why_a_run_has_no_advice() {
    let mut a = app(&["kineto/hta_critical_path_alexnet_trace.json.gz"]);
    key(&mut a, KeyCode::Char('6'));
    let s = screen(&mut a, 160, 20);
    assert!(
        s.contains("no advice:") && s.contains("input shapes"),
        "{s}"
    );
}

/// The tui fuzz target's corpus and every input that once crashed it (fuzz/corpus/tui,
/// fuzz/regressions/tui), run as the target runs them: opened as `fuseprof tui` opens a run,
/// zoomed in, a record selected, every view drawn; an error or a screen, never a panic.
#[test]
fn tui_fuzz_corpus() {
    let mut opened = 0;
    for f in fuseprof_fixtures::fuzz_inputs("tui") {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        std::fs::copy(&f, &path).unwrap();
        let mut cfg = TuiConfig::new(vec![path]);
        cfg.loading = Loading::Blocking;
        let Ok(mut app) = App::new(cfg) else {
            continue;
        };
        opened += 1;
        screen(&mut app, 120, 40);
        for k in "++++++j\rf2341]L".chars() {
            let code = match k {
                '\r' => KeyCode::Enter,
                c => KeyCode::Char(c),
            };
            key(&mut app, code);
            screen(&mut app, 120, 40);
        }
    }
    assert!(opened > 0, "no tui corpus that opens");
}

/// A hand-made run with hardware counters: one op launching a 20 us kernel that holds a whole
/// sample and a 2 us one inside a longer sample (its values an estimate), on an H100-like
/// device of 3.35 TB/s.
fn counters_run(dir: &Path) -> PathBuf {
    use fuseprof_store::{
        record_counters, Api, ApiCall, CounterKind, CounterMetric, CounterSample, Device, Kernel,
    };
    let p = dir.join("counters.sqlite");
    let mut w = Writer::create(&p, CreateOptions::default()).unwrap();
    w.device(Device {
        id: 0,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        mem_bandwidth_bytes_per_s: Some(3.35e12),
        ..Default::default()
    });
    let op = w.intern("aten::mul");
    let mut r = Range::new(RangeKind::CpuOp, op, 1, 1, 0);
    r.end_ns = Some(50_000);
    r.input_dims = Some(w.intern("[[4096, 4096], []]"));
    w.range(r).unwrap();
    let launch = w.intern("cudaLaunchKernel");
    for (corr, name, start_ns, end_ns) in [
        (1, "vectorized_elementwise_kernel", 10_000, 30_000),
        (2, "reduce_kernel", 32_000, 34_000),
    ] {
        w.api_call(ApiCall {
            api: Api::Runtime,
            start_ns: corr * 1_000,
            end_ns: corr * 1_000 + 500,
            pid: 1,
            tid: 1,
            correlation_id: Some(corr),
            external_id: None,
            name: launch,
            return_code: Some(0),
        })
        .unwrap();
        let name = w.intern(name);
        w.kernel(Kernel {
            start_ns,
            end_ns,
            device_id: 0,
            stream_id: 7,
            pid: Some(1),
            correlation_id: Some(corr),
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
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let metric = |id, quantity: &str, kind| CounterMetric {
        id,
        device_id: 0,
        name: quantity.into(),
        quantity: quantity.into(),
        kind,
        unit: "byte".into(),
        method: "pm_sampling".into(),
        interval_ns: Some(20_000),
    };
    let sample = |metric_id, start_ns, value| CounterSample {
        metric_id,
        start_ns,
        end_ns: start_ns + 20_000,
        value,
    };
    record_counters(
        &p,
        &[
            metric(1, "dram_read_bytes", CounterKind::Sum),
            metric(2, "tensor_pipe_pct", CounterKind::Average),
        ],
        &[
            // 40 MB in the first kernel's 20 us: 2 TB/s, 59.7% of 3.35 TB/s.
            sample(1, 10_000, 40e6),
            sample(1, 30_000, 2e6),
            sample(2, 10_000, 0.0),
            sample(2, 30_000, 30.0),
        ],
    )
    .unwrap();
    p
}

/// The details of a kernel and of an op in a run with counters show the DRAM bytes, the
/// bandwidth against the peak, the tensor pipe and whether the values are estimates.
#[test]
fn details_show_what_the_counters_measured() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = TuiConfig::new(vec![counters_run(dir.path())]);
    cfg.loading = Loading::Blocking;
    let mut a = App::new(cfg).unwrap();
    screen(&mut a, 120, 30);
    // The op, from the op table.
    key(&mut a, KeyCode::Char('2'));
    key(&mut a, KeyCode::Enter);
    let d = a.details.clone().unwrap();
    assert_eq!(d.title, "cpu_op aten::mul");
    let line = |d: &fuseprof_tui::Details, k: &str| {
        d.lines
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no {k:?} in {:?}", d.lines))
    };
    assert_eq!(
        line(&d, "DRAM bytes"),
        "42.00 MB read + written, measured (2 kernels)"
    );
    assert_eq!(
        line(&d, "counter values"),
        "of 2 kernels, 0 shared, 1 estimated"
    );
    key(&mut a, KeyCode::Char('4'));
    insta::assert_snapshot!("details_op_counters", screen(&mut a, 120, 30));
    // The heaviest kernel, from the kernel table.
    key(&mut a, KeyCode::Char('2'));
    keys(&mut a, "lll");
    key(&mut a, KeyCode::Enter);
    let d = a.details.clone().unwrap();
    assert_eq!(line(&d, "DRAM bytes"), "40.00 MB read + written, measured");
    assert_eq!(line(&d, "achieved"), "2000.0 GB/s, 59.7% of peak");
    assert_eq!(line(&d, "tensor pipe"), "0.0% active");
    assert_eq!(line(&d, "counter values"), "measured (CUPTI PM sampling)");
    key(&mut a, KeyCode::Char('4'));
    insta::assert_snapshot!("details_kernel_counters", screen(&mut a, 120, 30));
}
