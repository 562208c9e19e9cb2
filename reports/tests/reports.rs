//! The HTML report, the gate and its CI outputs on the committed recordings (real H100 runs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use fuseprof_reports::gate::{self, Gate};
use fuseprof_reports::report::{self, ReportConfig};
use fuseprof_reports::Error;

const RECORDINGS: &[&str] = &[
    "recordings/swin_t_infer_modules.sqlite.gz",
    "recordings/vit_b16_infer_shapes.sqlite.gz",
    "recordings/bert_base_infer_shapes.sqlite.gz",
    "recordings/swin_t_train_step_shapes.sqlite.gz",
];
const SWIN: &str = "recordings/swin_t_infer_modules.sqlite.gz";

fn tmpdir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// A recording decompressed once per process.
fn recording(rel: &str) -> PathBuf {
    static DONE: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut done = DONE.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = done.get(rel) {
        return p.clone();
    }
    let name = Path::new(rel).file_name().unwrap().to_string_lossy();
    let out = tmpdir().join(name.trim_end_matches(".gz"));
    let mut gz =
        flate2::read::GzDecoder::new(std::fs::File::open(fuseprof_fixtures::path(rel)).unwrap());
    std::io::copy(&mut gz, &mut std::fs::File::create(&out).unwrap()).unwrap();
    done.insert(rel.to_string(), out.clone());
    out
}

/// Runs SQL statements on a copy of a run (to make a modified run).
fn edited_copy(rel: &str, name: &str, sql: &str) -> PathBuf {
    let out = tmpdir().join(name);
    std::fs::copy(recording(rel), &out).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::{ConnectOptions, Executor};
        // A rollback journal, as the store uses: nothing is left in a WAL file beside the copy.
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&out)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Delete)
            .connect()
            .await
            .unwrap();
        c.execute(sqlx::AssertSqlSafe(sql.to_string()))
            .await
            .unwrap();
    });
    out
}

/// The Swin-T run with its heaviest bias GEMM kernel (102 calls, about 1 ms per step) made
/// 50% slower: a real regression of about +5% of the step, all in `aten::addmm`.
fn slower_swin() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        edited_copy(
            SWIN,
            "swin_slower_gemm.sqlite",
            "UPDATE kernels SET end_ns = end_ns + (end_ns - start_ns) / 2 WHERE name_id = \
             (SELECT id FROM strings WHERE value = \
              'nvjet_sm90_hsh_192x192_64x4_1x2_h_bz_coopB_bias_TNN')",
        )
    })
    .clone()
}

fn out(name: &str) -> PathBuf {
    tmpdir().join(name)
}

/// Parses the page as XML (the page is written to be well-formed) and checks what makes it
/// self-contained and readable: no URL or external reference anywhere, every chart with a
/// size and something drawn in it, the named sections present.
fn check_page(html: &str, sections: &[&str]) -> roxmltree::Document<'static> {
    let leaked: &'static str = Box::leak(html.to_string().into_boxed_str());
    let doc = roxmltree::Document::parse_with_options(
        leaked,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("the page is not well-formed: {e}"));
    let lower = html.to_ascii_lowercase();
    for bad in [
        "http:", "https:", "src=", "href=", "url(", "@import", "//cdn",
    ] {
        assert!(!lower.contains(bad), "the page holds {bad:?}");
    }
    let ids: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("section"))
        .filter_map(|n| n.attribute("id"))
        .collect();
    for s in sections {
        assert!(ids.contains(s), "section {s} missing; have {ids:?}");
    }
    let svgs: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("svg"))
        .collect();
    assert!(!svgs.is_empty());
    for svg in svgs {
        let w: f64 = svg.attribute("width").unwrap().parse().unwrap();
        let h: f64 = svg.attribute("height").unwrap().parse().unwrap();
        assert!(w > 0.0 && h > 0.0);
        assert!(
            svg.descendants().count() > 10,
            "a chart with nothing drawn in it"
        );
    }
    doc
}

const ALWAYS: &[&str] = &[
    "run", "steps", "gpu-time", "timeline", "hotspots", "floor", "roofline", "advice",
];

#[test]
fn every_recording_gets_every_section() {
    for rel in RECORDINGS {
        let run = recording(rel);
        let page = out(&format!(
            "{}.html",
            run.file_stem().unwrap().to_string_lossy()
        ));
        let cfg = ReportConfig {
            run: run.clone(),
            output: page.clone(),
            baseline: Some(run.clone()),
            gate: Some(Gate::parse("step_time<=+3%,new_kernels<=0").unwrap()),
            ..Default::default()
        };
        let o = report::generate(&cfg).unwrap();
        assert!(o.gate.unwrap().passed(), "{rel} against itself");
        assert!(o.warnings.is_empty(), "{rel}: {:?}", o.warnings);
        let html = std::fs::read_to_string(&page).unwrap();
        let mut want = ALWAYS.to_vec();
        want.extend(["diff", "gate"]);
        let doc = check_page(&html, &want);
        let text: String = doc
            .descendants()
            .filter(|n| n.is_text())
            .map(|n| n.text().unwrap())
            .collect();
        assert!(text.contains("GPU records on"), "{rel}: no timeline");
        assert!(
            text.contains("ops with FLOPs are drawn"),
            "{rel}: no roofline"
        );
        // The page shows every setting the advisor gives, with its rank, change, saving and
        // how it was estimated; the training recording's AdamW steps with foreach, so its
        // settings include fused=True.
        let advice = fuseprof_fusion_advisor::advise_file(&run, &Default::default()).unwrap();
        assert_eq!(
            text.contains("Before kernels"),
            !advice.settings.is_empty(),
            "{rel}"
        );
        for s in &advice.settings {
            assert!(text.contains(&s.change), "{rel}: {}", s.change);
            assert!(text.contains(&format!("{}: {}", s.id, s.title)), "{rel}");
            assert!(
                text.contains(&format!("{:.2}", s.saving_pct_of_step)),
                "{rel}"
            );
            // Where to see it in a timeline: the worst step's window and the names.
            let w = s.worst_step.as_ref().unwrap();
            assert!(text.contains(&w.describe()), "{rel}: {}", w.describe());
            for k in &s.kernels {
                let k = k.strip_prefix("void ").unwrap_or(k);
                let start: String = k.chars().take(120).collect();
                assert!(text.contains(&start), "{rel}: {k}");
            }
        }
        if !advice.settings.is_empty() {
            assert!(text.contains("how estimated"), "{rel}");
            assert!(text.contains("where to look"), "{rel}");
        }
        assert_eq!(
            text.contains("fused=True"),
            rel.contains("swin_t_train"),
            "{rel}"
        );
    }
}

#[test]
fn swin_report_shows_proposals_with_expected_and_measured_savings() {
    // The bench results measured on the H100 for this recording, stored into a copy of it as
    // `fuseprof bench` does.
    let run = edited_copy(SWIN, "swin_benched.sqlite", "SELECT 1");
    let bench: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fuseprof_fixtures::path("bench/swin_t_infer_modules.json")).unwrap(),
    )
    .unwrap();
    let results: Vec<fuseprof_store::BenchResult> = bench["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| serde_json::from_value(r["measured"].clone()).unwrap())
        .collect();
    assert_eq!(results.len(), 20);
    fuseprof_store::record_bench_results(&run, &results).unwrap();
    let page = out("swin_benched.html");
    report::generate(&ReportConfig {
        run,
        output: page.clone(),
        ..Default::default()
    })
    .unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    check_page(&html, ALWAYS);
    assert!(html.contains("wattn-4096x3x49x32-shifted"));
    assert!(html.contains("22 proposals"));
    assert!(html.contains(", measured "), "measured savings shown");
    assert!(!html.contains("id=\"diff\""), "no baseline, no diff");
}

#[test]
fn the_gate_fails_on_a_kernel_made_slower() {
    let base = recording(SWIN);
    let cfg = ReportConfig {
        run: slower_swin(),
        output: out("slower.html"),
        baseline: Some(base),
        gate: Some(
            Gate::parse("step_time<=+3%,op:aten::addmm<=+10%,new_kernels<=0,class:gemm<=+50%")
                .unwrap(),
        ),
        summary: Some(out("slower.md")),
        junit: Some(out("slower.xml")),
        history: None,
    };
    let o = report::generate(&cfg).unwrap();
    let g = o.gate.unwrap();
    let verdicts: Vec<(String, bool)> = g
        .outcomes
        .iter()
        .map(|o| (o.rule.clone(), o.passed))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("step_time<=+3%".to_string(), false),
            ("op:aten::addmm<=+10%".to_string(), false),
            ("new_kernels<=0".to_string(), true),
            ("class:gemm<=+50%".to_string(), true),
        ],
        "{:#?}",
        g.outcomes
    );
    // The failed rules lead the page, and the diff names the op that got slower.
    let html = std::fs::read_to_string(out("slower.html")).unwrap();
    let doc = check_page(&html, &["gate", "diff"]);
    let first = doc
        .descendants()
        .find(|n| n.has_tag_name("section"))
        .unwrap();
    assert_eq!(first.attribute("id"), Some("gate"));
    assert!(html.contains("FAIL: 2 of 4 rules broken"));
    let md = std::fs::read_to_string(out("slower.md")).unwrap();
    assert!(md.contains("**FAIL**: 2 of 4 gate rules broken"), "{md}");
    assert!(md.contains("| `aten::addmm` |"), "{md}");
    let junit = std::fs::read_to_string(out("slower.xml")).unwrap();
    let doc = roxmltree::Document::parse(&junit).unwrap();
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("tests"), Some("4"));
    assert_eq!(suite.attribute("failures"), Some("2"));
    assert_eq!(
        doc.descendants()
            .filter(|n| n.has_tag_name("failure"))
            .count(),
        2
    );
}

#[test]
fn the_step_time_change_is_judged_against_the_noise() {
    // The same +5% change: a regression when steps are steady, noise when they scatter.
    let steady_before = [10.0e6, 10.01e6, 9.99e6, 10.0e6];
    let steady_after = [10.5e6, 10.51e6, 10.49e6, 10.5e6];
    let c = gate::compare_steps(&steady_before, &steady_after, 2.0);
    assert!(c.significant && (c.delta_pct - 5.0).abs() < 0.01, "{c:?}");
    let noisy_before = [8.0e6, 12.0e6, 9.0e6, 11.0e6];
    let noisy_after = [8.5e6, 12.5e6, 9.5e6, 11.5e6];
    let c = gate::compare_steps(&noisy_before, &noisy_after, 2.0);
    assert!(!c.significant && (c.delta_pct - 5.0).abs() < 0.01, "{c:?}");
    assert!(c.noise_pct > 5.0 && c.method.contains("Welch"));
    // One step each: the noise cannot be estimated, so the limit alone decides.
    let c = gate::compare_steps(&[10.0e6], &[10.5e6], 2.0);
    assert!(c.significant && c.noise_ns == 0.0 && c.method.contains("too few"));
}

#[test]
fn gate_rules_parse_or_say_why_not() {
    let g = Gate::parse(
        "step_time<=+3%, op:aten::addmm<=+10%,new_kernels<=0,\
         kernel:void gemm<half, 128>(int, float)<=+50us,step_wall<12ms,class:gemm<=-1%",
    )
    .unwrap();
    use gate::{Limit, Metric};
    let got: Vec<(Metric, bool, Limit)> = g
        .rules
        .iter()
        .map(|r| (r.metric.clone(), r.strict, r.limit))
        .collect();
    assert_eq!(
        got,
        [
            (Metric::StepTime, false, Limit::RelativePct(3.0)),
            (
                Metric::Op("aten::addmm".into()),
                false,
                Limit::RelativePct(10.0)
            ),
            (Metric::NewKernels, false, Limit::Count(0.0)),
            (
                Metric::Kernel("void gemm<half, 128>(int, float)".into()),
                false,
                Limit::DeltaNs(50_000.0)
            ),
            (Metric::StepWall, true, Limit::AbsoluteNs(12e6)),
            (
                Metric::Class("gemm".into()),
                false,
                Limit::RelativePct(-1.0)
            ),
        ]
    );
    assert!(g.needs_baseline());
    assert!(!Gate::parse("step_time<=12ms").unwrap().needs_baseline());
    for (bad, why) in [
        ("step_time=3%", "expected METRIC<=VALUE"),
        ("steptime<=+3%", "unknown metric"),
        ("step_time<=3", "give a unit"),
        ("step_time<=+3furlongs", "unknown unit"),
        ("new_kernels<=+1%", "expected a count"),
        ("class:gpu<=+1%", "unknown kernel class"),
        ("op:<=+1%", "needs a name"),
        ("", "no rules"),
    ] {
        match Gate::parse(bad) {
            Err(e @ Error::BadRule { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(why), "{bad}: {msg}");
                assert!(!msg.contains('\n'));
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    // The TOML form.
    let f = out("gate.toml");
    std::fs::write(
        &f,
        "rules = [\"step_time<=+3%\", \"new_kernels<=0\"]\nnoise_sigmas = 3.0\n",
    )
    .unwrap();
    let g = Gate::from_arg(f.to_str().unwrap()).unwrap();
    assert_eq!(g.rules.len(), 2);
    assert_eq!(g.noise_sigmas, 3.0);
    std::fs::write(&f, "rule = 1\n").unwrap();
    let e = Gate::from_arg(f.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("not a gate file"), "{e}");
}

#[test]
fn a_baseline_from_another_model_is_called_out() {
    let cfg = ReportConfig {
        run: recording(SWIN),
        output: out("swin_vs_vit.html"),
        baseline: Some(recording("recordings/vit_b16_infer_shapes.sqlite.gz")),
        ..Default::default()
    };
    let o = report::generate(&cfg).unwrap();
    assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
    assert!(o.warnings[0].contains("another model"), "{:?}", o.warnings);
    let html = std::fs::read_to_string(out("swin_vs_vit.html")).unwrap();
    assert!(html.contains("few ops match"));
}

/// The names in a folder.
fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn bad_input_is_one_line_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let newer = edited_copy(
        SWIN,
        "newer.sqlite",
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
    );
    for (run, baseline, what) in [
        (newer.clone(), None, "newer fuseprof"),
        (recording(SWIN), Some(newer.clone()), "newer fuseprof"),
        (
            recording(SWIN),
            Some(fuseprof_fixtures::path("README.md")),
            "not a fuseprof run",
        ),
        (dir.path().join("missing.sqlite"), None, "missing.sqlite"),
    ] {
        let e = report::generate(&ReportConfig {
            run,
            output: page.clone(),
            baseline,
            summary: Some(dir.path().join("s.md")),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains(what), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(
            files_in(dir.path()).is_empty(),
            "{:?}",
            files_in(dir.path())
        );
    }
    // An output that cannot be written: the summary's folder does not exist, so neither the
    // page nor the summary may appear.
    let e = report::generate(&ReportConfig {
        run: recording(SWIN),
        output: page.clone(),
        summary: Some(dir.path().join("no/such/folder/s.md")),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("s.md"), "{e}");
    assert!(
        files_in(dir.path()).is_empty(),
        "{:?}",
        files_in(dir.path())
    );
    // A rule that needs a baseline, without one.
    let e = report::generate(&ReportConfig {
        run: recording(SWIN),
        output: page.clone(),
        gate: Some(Gate::parse("step_time<=+3%").unwrap()),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("pass --baseline"), "{e}");
    assert!(files_in(dir.path()).is_empty());
}

// ---- History -------------------------------------------------------------------------------

use fuseprof_reports::history::{self, History, Pushed};

/// Copies of the Swin-T run that count as different runs (another start time each).
/// `n` runs that differ from each other; `tag` keeps the copies of tests that run at the same
/// time apart.
fn distinct_runs(tag: &str, n: usize) -> Vec<PathBuf> {
    (1..=n)
        .map(|i| {
            edited_copy(
                SWIN,
                &format!("swin_run{i}_{tag}.sqlite"),
                &format!(
                    "UPDATE run SET start_unix_ns = start_unix_ns + {i} * 3600000000000; \
                     UPDATE kernels SET end_ns = end_ns + {i} * 1000 \
                     WHERE id IN (SELECT id FROM kernels ORDER BY id LIMIT 50)"
                ),
            )
        })
        .collect()
}

/// Push, re-push, labels, listing and steps, then pushes from 6 threads at once: every run
/// stored once, none lost.
fn exercise_history(db: &str) {
    let swin = recording(SWIN);
    let vit = recording("recordings/vit_b16_infer_shapes.sqlite.gz");
    let h = History::open(db).unwrap();
    let main = history::parse_labels("branch=main,commit=abc").unwrap();
    let s = history::summarize(&swin, main.clone()).unwrap();
    assert_eq!(s.steps.len(), 3);
    assert_eq!(h.push(&s, 1).unwrap(), Pushed::Stored);
    assert_eq!(h.push(&s, 2).unwrap(), Pushed::AlreadyThere);
    let dev = history::parse_labels("branch=dev").unwrap();
    let v = history::summarize(&vit, dev.clone()).unwrap();
    assert_eq!(h.push(&v, 3).unwrap(), Pushed::Stored);
    let all = h.runs(&Default::default(), 50).unwrap();
    assert_eq!(all.len(), 2);
    let on_main = h
        .runs(&history::parse_labels("branch=main").unwrap(), 50)
        .unwrap();
    assert_eq!(on_main.len(), 1);
    assert_eq!(on_main[0].labels, main);
    assert_eq!(on_main[0].key, history::run_key(&swin).unwrap());
    assert!((on_main[0].step_gpu_median_ns / 1e6 - 9.71).abs() < 0.01);
    assert_eq!(h.steps(&s.key).unwrap().len(), 3);
    let text = history::render_text(&all);
    assert!(text.contains("branch=main,commit=abc"), "{text}");
    drop(h);

    let runs = distinct_runs(
        if db.starts_with("postgres") {
            "pg"
        } else {
            "lite"
        },
        4,
    );
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let runs = runs.clone();
            let db = db.to_string();
            std::thread::spawn(move || {
                let h = History::open(&db).unwrap();
                let mut stored = 0;
                for i in 0..runs.len() {
                    let r = &runs[(i + t) % runs.len()];
                    let labels = history::parse_labels(&format!("job={t}")).unwrap();
                    let s = history::summarize(r, labels).unwrap();
                    if h.push(&s, 10 + t as i64).unwrap() == Pushed::Stored {
                        stored += 1;
                    }
                }
                stored
            })
        })
        .collect();
    let stored: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(stored, 4, "each distinct run stored exactly once");
    let h = History::open(db).unwrap();
    let all = h.runs(&Default::default(), 50).unwrap();
    assert_eq!(all.len(), 6);
    for r in &all {
        assert_eq!(h.steps(&r.key).unwrap().len(), 3, "{}", r.file);
    }
}

#[test]
fn history_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    exercise_history(dir.path().join("history.sqlite").to_str().unwrap());
}

#[test]
fn an_unreachable_history_database_is_one_line() {
    for db in [
        "postgres://nobody@127.0.0.1:1/none",
        "/no/such/folder/history.sqlite",
    ] {
        let e = match History::open(db) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{db} opened"),
        };
        assert!(e.starts_with("history database"), "{e}");
        assert!(e.contains("cannot connect"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let e = history::parse_labels("branch").unwrap_err().to_string();
    assert!(e.contains("NAME=VALUE"), "{e}");
}

/// A PostgreSQL server of our own: initdb in a temporary folder, a free port on 127.0.0.1,
/// stopped when dropped. As root (which initdb refuses) it runs as `nobody`.
struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

/// Where initdb and pg_ctl are: on PATH, else Debian's /usr/lib/postgresql/VERSION/bin.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p).find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
    });
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| Some(e.ok()?.path().join("bin")))
            .filter(|d| d.join("initdb").is_file())
            .collect();
        found.sort();
        found.pop()
    })
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Postgres {
    fn run(&self, tool: &str, args: &str) -> std::process::Output {
        let cmd = format!("'{}' {args}", self.bin.join(tool).display());
        let mut c = if is_root() {
            let mut c = std::process::Command::new("su");
            c.args(["nobody", "-s", "/bin/sh", "-c", &cmd]);
            c
        } else {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", &cmd]);
            c
        };
        c.output().unwrap()
    }

    /// Starts one, or says why it cannot; in CI (`CI=true`) a missing PostgreSQL fails the
    /// test instead (`.ci/setup` installs it).
    fn start() -> Option<Postgres> {
        let Some(bin) = postgres_bin() else {
            let why = "PostgreSQL (initdb, pg_ctl) is not installed; `bash .ci/setup` installs it";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipping the PostgreSQL tests: {why}");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Postgres { dir, bin, port };
        let d = pg.dir.path().display().to_string();
        let o = pg.run(
            "initdb",
            &format!("-D '{d}/data' -U postgres --auth=trust -E UTF8 --no-sync"),
        );
        assert!(
            o.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = pg.run(
            "pg_ctl",
            &format!(
                "start -w -t 60 -D '{d}/data' -l '{d}/log' -o \"-p {port} -k '{d}' -c listen_addresses=127.0.0.1 -c fsync=off\""
            ),
        );
        assert!(
            o.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(pg.dir.path().join("log")).unwrap_or_default()
        );
        Some(pg)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let d = self.dir.path().display().to_string();
        self.run("pg_ctl", &format!("stop -w -D '{d}/data' -m fast"));
    }
}

#[test]
fn history_on_postgresql() {
    let Some(pg) = Postgres::start() else { return };
    exercise_history(&pg.url());
    // The same database opened again: the migrations are not applied twice.
    let h = History::open(&pg.url()).unwrap();
    assert_eq!(h.runs(&Default::default(), 3).unwrap().len(), 3);
}

#[test]
fn a_password_never_reaches_a_message() {
    let e = match History::open("postgres://ci:s3cret@127.0.0.1:1/perf") {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened"),
    };
    assert!(
        !e.contains("s3cret") && e.contains("postgres://ci:***@127.0.0.1:1/perf"),
        "{e}"
    );
}

// ---- In a browser --------------------------------------------------------------------------

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "headless_shell",
    ] {
        if let Some(d) = std::env::split_paths(&path).find(|d| d.join(name).is_file()) {
            return Some(d.join(name));
        }
    }
    None
}

/// Runs headless Chromium on `page` with `extra` arguments; returns (stdout, stderr).
fn run_chromium(bin: &Path, page: &Path, extra: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let o = std::process::Command::new("timeout")
        .arg("120")
        .arg(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The page Chromium checks: the Swin-T run with one GEMM kernel made slower, against the
/// recording, with the bench results measured on the H100, a failing gate and a history.
fn swin_page_for_browser() -> PathBuf {
    let run = slower_swin();
    let bench: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fuseprof_fixtures::path("bench/swin_t_infer_modules.json")).unwrap(),
    )
    .unwrap();
    let results: Vec<fuseprof_store::BenchResult> = bench["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| serde_json::from_value(r["measured"].clone()).unwrap())
        .collect();
    let benched = tmpdir().join("swin_slower_benched.sqlite");
    std::fs::copy(&run, &benched).unwrap();
    fuseprof_store::record_bench_results(&benched, &results).unwrap();
    let page = out("browser.html");
    let o = report::generate(&ReportConfig {
        run: benched,
        output: page.clone(),
        baseline: Some(recording(SWIN)),
        gate: Some(Gate::parse("step_time<=+3%,op:aten::addmm<=+10%,new_kernels<=0").unwrap()),
        ..Default::default()
    })
    .unwrap();
    assert!(!o.gate.unwrap().passed());
    page
}

#[test]
fn the_page_in_headless_chromium() {
    let Some(bin) = chromium() else {
        let why = "Chromium is not installed; `bash .ci/setup` installs it";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipping the Chromium test: {why}");
        return;
    };
    let page = swin_page_for_browser();
    let html = std::fs::read_to_string(&page).unwrap();
    // A copy with a probe: it records script errors, clicks a table header (the sorter runs),
    // and writes every chart's rendered size into the DOM that --dump-dom prints.
    let probe_head = "<script>window.__errors = [];\
        window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });\
        </script>";
    let probe_tail = "<script>\
        var th = document.querySelector('table.sortable th.n'); if (th) { th.click(); th.click(); }\
        var sizes = Array.prototype.map.call(document.querySelectorAll('svg'), function (s) {\
          var r = s.getBoundingClientRect(); return Math.round(r.width) + 'x' + Math.round(r.height); });\
        var sections = Array.prototype.map.call(document.querySelectorAll('section'), function (s) { return s.id; });\
        var out = document.createElement('pre'); out.id = 'probe';\
        out.textContent = JSON.stringify({errors: window.__errors, sizes: sizes, sections: sections});\
        document.body.appendChild(out);</script>";
    let probed = html
        .replacen("<head>", &format!("<head>{probe_head}"), 1)
        .replacen("</body>", &format!("{probe_tail}</body>"), 1);
    let probe_page = out("browser_probe.html");
    std::fs::write(&probe_page, probed).unwrap();
    let (dom, log) = run_chromium(
        &bin,
        &probe_page,
        &["--dump-dom", "--window-size=1280,2200"],
    );
    let start = dom.find("<pre id=\"probe\">").expect("the probe ran") + 16;
    let end = start + dom[start..].find("</pre>").unwrap();
    let probe: serde_json::Value = serde_json::from_str(
        &dom[start..end]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
    .unwrap();
    assert_eq!(probe["errors"], serde_json::json!([]), "script errors");
    let console_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && (l.contains("ERROR") || l.contains("Uncaught")))
        .collect();
    assert!(console_errors.is_empty(), "{console_errors:?}");
    let sizes = probe["sizes"].as_array().unwrap();
    assert!(sizes.len() >= 6, "{sizes:?}");
    for s in sizes {
        let (w, h) = s.as_str().unwrap().split_once('x').unwrap();
        let (w, h): (u32, u32) = (w.parse().unwrap(), h.parse().unwrap());
        assert!(w > 300 && h > 50, "a chart drawn at {w}x{h}");
    }
    let sections: Vec<&str> = probe["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(
        sections,
        [
            "gate", "run", "steps", "gpu-time", "timeline", "hotspots", "floor", "roofline",
            "advice", "diff"
        ]
    );
    // The screenshot, kept as an artifact of the test run.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-swin-t.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        &bin,
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,2200",
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 50_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}

/// The outputs fuzz target's corpus and every input that once crashed it
/// (fuzz/corpus/outputs, fuzz/regressions/outputs), run as the target runs them: `info`, the
/// Chrome export, the analysis's text, the report with the run as its own baseline under a
/// gate (page, Markdown, JUnit) and the advice; each a result or an error, never a panic.
#[test]
fn outputs_fuzz_corpus() {
    use fuseprof_reports::chrome;
    let mut reports = 0;
    for f in fuseprof_fixtures::fuzz_inputs("outputs") {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run.sqlite");
        std::fs::copy(&f, &run).unwrap();
        if let Ok(mut store) = fuseprof_store::Store::open(&run) {
            let _ = store.info();
            let _ = chrome::export(&mut store, &dir.path().join("trace.json"), true);
        }
        let cfg = fuseprof_analyzer::AnalyzeConfig::default();
        if let Ok(a) = fuseprof_analyzer::analyze_file(&run, &cfg) {
            let _ = fuseprof_analyzer::render_text(&a, &cfg);
        }
        let gate = Gate::from_arg("step_time<=+3%,op:aten::addmm<=+10%,new_kernels<=0").unwrap();
        let written = report::generate(&ReportConfig {
            run: run.clone(),
            output: dir.path().join("report.html"),
            baseline: Some(run.clone()),
            gate: Some(gate),
            summary: Some(dir.path().join("summary.md")),
            junit: Some(dir.path().join("gate.xml")),
            history: None,
        });
        reports += usize::from(written.is_ok());
        let advice_cfg = fuseprof_fusion_advisor::AdviseConfig::default();
        if let Ok(advice) = fuseprof_fusion_advisor::advise_file(&run, &advice_cfg) {
            let _ = fuseprof_fusion_advisor::render_text(&advice, 10);
        }
    }
    assert!(reports > 0, "no outputs corpus that makes a report");
}

/// A run's hardware counters become counter tracks ("C" events) on their GPU's process:
/// DRAM bytes as GB/s per sample (0 across a gap), percentages as they are; the JSON parses.
#[test]
fn export_writes_counter_tracks() {
    use fuseprof_reports::chrome;
    use fuseprof_store::*;
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.sqlite");
    let mut w = Writer::create(&run, CreateOptions::default()).unwrap();
    let name = w.intern("copy_kernel");
    w.kernel(Kernel {
        start_ns: 1_000,
        end_ns: 3_000,
        device_id: 0,
        stream_id: 7,
        pid: Some(1),
        correlation_id: Some(1),
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
    w.finish(RunInfo {
        source_format: "cupti".into(),
        ..Default::default()
    })
    .unwrap();
    let metric = |id: i64, quantity: &str, kind, unit: &str| CounterMetric {
        id,
        device_id: 0,
        name: quantity.into(),
        quantity: quantity.into(),
        kind,
        unit: unit.into(),
        method: "pm_sampling".into(),
        interval_ns: Some(1000),
    };
    let sample = |metric_id, start_ns, value| CounterSample {
        metric_id,
        start_ns,
        end_ns: start_ns + 1000,
        value,
    };
    record_counters(
        &run,
        &[
            metric(1, "dram_read_bytes", CounterKind::Sum, "byte"),
            metric(2, "l2_hit_pct", CounterKind::Average, "percent"),
        ],
        &[
            sample(1, 1_000, 4000.0),
            sample(1, 3_000, 2000.0),
            sample(2, 1_000, 75.0),
        ],
    )
    .unwrap();
    let out = dir.path().join("trace.json");
    chrome::export(&mut Store::open(&run).unwrap(), &out, false).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let counters: Vec<(String, f64, f64)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            assert_eq!(e["pid"], chrome::GPU_PID_BASE);
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_f64().unwrap(),
                e["args"]["value"].as_f64().unwrap(),
            )
        })
        .collect();
    let gbs = "dram_read_bytes (GB/s)".to_string();
    assert_eq!(
        counters,
        vec![
            (gbs.clone(), 0.0, 4.0),
            (gbs.clone(), 1.0, 0.0),
            (gbs.clone(), 2.0, 2.0),
            (gbs, 3.0, 0.0),
            ("l2_hit_pct (percent)".into(), 0.0, 75.0),
        ]
    );
}

/// The advice track of an export: each setting's worst step as a slice on a row of its own,
/// in the export's microseconds from the run's first record, which are the setting's
/// `start_ms` and `end_ms`; an export without marks has no such track.
#[test]
fn an_export_marks_where_each_setting_points() {
    use fuseprof_reports::chrome;
    use fuseprof_store::Store;
    let run = recording("recordings/swin_t_train_step_shapes.sqlite.gz");
    let advice = fuseprof_fusion_advisor::advise_file(&run, &Default::default()).unwrap();
    let marks = chrome::advice_marks(&advice.settings);
    assert_eq!(marks.len(), advice.settings.len());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.json");
    chrome::export_marked(&mut Store::open(&run).unwrap(), &out, false, &marks).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let on_track: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["pid"] == chrome::ADVICE_PID)
        .collect();
    assert!(on_track
        .iter()
        .any(|e| e["name"] == "process_name" && e["args"]["name"] == chrome::ADVICE_TRACK));
    for s in &advice.settings {
        let w = s.worst_step.as_ref().unwrap();
        let row = on_track
            .iter()
            .find(|e| e["name"] == "thread_name" && e["args"]["name"] == s.id.as_str())
            .unwrap_or_else(|| panic!("no row for {}", s.id));
        let slice = on_track
            .iter()
            .find(|e| e["ph"] == "X" && e["tid"] == row["tid"])
            .unwrap();
        assert_eq!(slice["name"], format!("{}: step {}", s.id, w.step));
        let ts = slice["ts"].as_f64().unwrap();
        let dur = slice["dur"].as_f64().unwrap();
        assert!((ts - w.start_ms * 1e3).abs() < 1e-3, "{ts} {w:?}");
        assert!((ts + dur - w.end_ms * 1e3).abs() < 1e-3, "{dur} {w:?}");
        assert_eq!(slice["args"]["kernels"], serde_json::json!(s.kernels));
    }
    let plain = dir.path().join("plain.json");
    chrome::export(&mut Store::open(&run).unwrap(), &plain, false).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&plain).unwrap()).unwrap();
    assert!(doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["pid"] != chrome::ADVICE_PID));
}

/// A copy of a recording with hardware counters as `collect --metrics memory` records them:
/// device-wide samples every 20 us across the run, DRAM read bytes at `bytes_per_s` over each
/// sample and the tensor pipe at 40%, attributed to the kernels that ran in each sample.
fn with_counters(rel: &str, name: &str, bytes_per_s: f64) -> PathBuf {
    use fuseprof_store::{record_counters, CounterKind, CounterMetric, CounterSample};
    let out = tmpdir().join(name);
    std::fs::copy(recording(rel), &out).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (device, first, last): (i64, i64, i64) = rt.block_on(async {
        use sqlx::ConnectOptions;
        let mut c = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&out)
            .read_only(true)
            .connect()
            .await
            .unwrap();
        sqlx::query_as("SELECT MIN(device_id), MIN(start_ns), MAX(end_ns) FROM kernels")
            .fetch_one(&mut c)
            .await
            .unwrap()
    });
    const INTERVAL_NS: i64 = 20_000;
    let metric = |id: i64, quantity: &str, kind| CounterMetric {
        id,
        device_id: device,
        name: quantity.into(),
        quantity: quantity.into(),
        kind,
        unit: "byte".into(),
        method: "pm_sampling".into(),
        interval_ns: Some(INTERVAL_NS),
    };
    let mut samples = Vec::new();
    let mut t = first;
    while t < last {
        for (metric_id, value) in [(1, bytes_per_s * INTERVAL_NS as f64 * 1e-9), (2, 40.0)] {
            samples.push(CounterSample {
                metric_id,
                start_ns: t,
                end_ns: t + INTERVAL_NS,
                value,
            });
        }
        t += INTERVAL_NS;
    }
    record_counters(
        &out,
        &[
            metric(1, "dram_read_bytes", CounterKind::Sum),
            metric(2, "tensor_pipe_pct", CounterKind::Average),
        ],
        &samples,
    )
    .unwrap();
    out
}

/// The roofline's `<section>` of a page.
fn roofline_of(html: &str) -> &str {
    let start = html.find("<section id=\"roofline\">").unwrap();
    let end = start + html[start..].find("</section>").unwrap();
    &html[start..end]
}

/// A run with counters draws each measured op again at its FLOPs over the measured DRAM bytes,
/// apart from the estimated dots (its own legend entries, triangles), with the flagged values
/// marked and a table of estimated against measured bytes; the same run without counters has
/// the roofline it always had.
#[test]
fn the_roofline_draws_measured_points_apart_from_estimated_ones() {
    let rel = "recordings/vit_b16_infer_shapes.sqlite.gz";
    let counted = with_counters(rel, "vit_counters.sqlite", 1.5e12);
    let a = fuseprof_analyzer::analyze_file(&counted, &Default::default()).unwrap();
    let measured: Vec<_> = a
        .headroom
        .rows
        .iter()
        .filter_map(|r| r.measured.as_ref().map(|m| (r, m)))
        .collect();
    assert!(!measured.is_empty(), "no op of the run got counters");
    for (r, m) in &measured {
        assert!(m.kernels > 0 && m.gpu_ns <= r.gpu_ns, "{}", r.name);
        assert!(m.dram_bytes.unwrap() > 0.0, "{}", r.name);
        assert!(
            (m.tensor_pipe_pct.unwrap() - 40.0).abs() < 1e-6,
            "{}",
            r.name
        );
    }
    // Samples of 20 us hold many kernels at once, so some values are estimates.
    assert!(measured.iter().any(|(_, m)| m.estimated > 0));

    let page = out("vit_counters.html");
    report::generate(&ReportConfig {
        run: counted.clone(),
        output: page.clone(),
        ..Default::default()
    })
    .unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    check_page(&html, ALWAYS);
    let roof = roofline_of(&html);
    for label in [
        "measured (CUPTI PM sampling)",
        "measured, values shared or estimated",
        "estimated from shapes, memory-bound op",
        "Measured by hardware counters, against the estimate",
    ] {
        assert!(roof.contains(label), "no {label:?} in the roofline");
    }
    // One triangle per measured op (and one per drawn legend entry).
    let triangles = roof.matches("<polygon").count();
    assert!(triangles >= measured.len(), "{triangles} triangles");
    assert!(roof.contains("estimated</td>"), "flagged rows say so");
    // The proposals' confidence says what the counters made of their estimated bound.
    let advice = fuseprof_fusion_advisor::advise_file(&counted, &Default::default()).unwrap();
    let checked: Vec<_> = advice
        .proposals
        .iter()
        .filter_map(|p| p.counters.as_ref())
        .collect();
    assert!(!checked.is_empty(), "no proposal was checked by counters");
    for c in checked {
        assert!(
            html.contains(&format!("(counters {}: ", c.verdict)),
            "no counters verdict {:?} in the advice table",
            c.verdict
        );
    }

    // The recording without counters: no measured series, the legend as before.
    let plain = out("vit_plain.html");
    report::generate(&ReportConfig {
        run: recording(rel),
        output: plain.clone(),
        ..Default::default()
    })
    .unwrap();
    let html = std::fs::read_to_string(&plain).unwrap();
    let roof = roofline_of(&html);
    for label in ["CUPTI", "Triangles", "Measured by hardware counters"] {
        assert!(!roof.contains(label), "{label:?} in a run without counters");
    }
    assert!(!roof.contains("<polygon"));
    assert!(roof.contains("memory-bound op"));
    assert!(!roof.contains("estimated from shapes"));
}
