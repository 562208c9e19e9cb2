//! The `fuseprof` binary as a user runs it: exit codes, one-line errors, and a round trip from
//! a real trace to Perfetto-ready JSON.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Output};

fn fuseprof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuseprof"))
        .args(args)
        .output()
        .expect("run fuseprof")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Checks what Perfetto's and Chrome's JSON importers need: the object form with a
/// traceEvents array, known phases with numeric times, durations that are not negative,
/// integer pid/tid, names for every process, and flow starts matched by finishes.
fn validate_chrome_trace(v: &serde_json::Value) -> (usize, usize) {
    let events = v["traceEvents"].as_array().expect("traceEvents array");
    let mut named = HashSet::new();
    let mut used = HashSet::new();
    let mut flows: HashMap<u64, (usize, usize)> = HashMap::new();
    let mut complete = 0;
    for e in events {
        let ph = e["ph"].as_str().expect("ph");
        let pid = e["pid"].as_i64().expect("integer pid");
        assert!(e["tid"].is_i64(), "integer tid: {e}");
        match ph {
            "M" => {
                assert!(e["args"]["name"].is_string(), "{e}");
                if e["name"] == "process_name" {
                    named.insert(pid);
                }
            }
            "X" => {
                assert!(
                    e["ts"].is_number() && e["dur"].as_f64().unwrap() >= 0.0,
                    "{e}"
                );
                assert!(e["name"].is_string(), "{e}");
                used.insert(pid);
                complete += 1;
            }
            "i" => assert!(e["ts"].is_number(), "{e}"),
            "s" | "f" => {
                let id = e["id"].as_u64().expect("flow id");
                let slot = flows.entry(id).or_default();
                if ph == "s" {
                    slot.0 += 1;
                } else {
                    assert_eq!(e["bp"], "e", "{e}");
                    slot.1 += 1;
                }
            }
            other => panic!("unexpected phase {other}"),
        }
    }
    for pid in &used {
        assert!(named.contains(pid), "process {pid} has no name");
    }
    assert!(
        flows.values().all(|&(s, f)| s == 1 && f == 1),
        "unpaired flows"
    );
    (complete, flows.len())
}

#[test]
fn import_info_export_round_trip_on_real_traces() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, kernels) in [
        ("kineto/hta_critical_path_alexnet_trace.json.gz", 79),
        ("nsys/nsysai_mfu_2gpu_before.sqlite", 4010),
    ] {
        let input = fuseprof_fixtures::path(fixture);
        let run = dir.path().join("run.sqlite");
        let json = dir.path().join("trace.json");
        let _ = std::fs::remove_file(&run);
        let _ = std::fs::remove_file(&json);
        let o = fuseprof(&["import", s(&input), "-o", s(&run)]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{kernels} kernels")),
            "{}",
            stderr(&o)
        );

        let o = fuseprof(&["info", s(&run), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let info: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(info["counts"]["kernels"], kernels);

        // A valid run has nothing to repair, and is left as it was.
        let before = std::fs::read(&run).unwrap();
        let o = fuseprof(&["repair", s(&run)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let said = String::from_utf8_lossy(&o.stdout);
        assert!(
            said.contains("nothing to repair; PRAGMA integrity_check: ok"),
            "{said}"
        );
        assert!(std::fs::read(&run).unwrap() == before);

        let o = fuseprof(&["export", s(&run), "-o", s(&json)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let (complete, flows) = validate_chrome_trace(&v);
        assert!(complete >= kernels as usize);
        assert!(flows > 0, "{fixture}: launch flows expected");
        let kernel_events = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "kernel")
            .count();
        assert_eq!(kernel_events, kernels as usize);
        // Exporting again over the file is refused; --force replaces it.
        let o = fuseprof(&["export", s(&run), "-o", s(&json)]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("already exists"));
        assert!(fuseprof(&["export", s(&run), "-o", s(&json), "--force"])
            .status
            .success());
    }
}

#[test]
fn bad_input_gets_one_line_and_a_failing_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1").unwrap();
    let out = dir.path().join("run.sqlite");
    for args in [
        vec!["import", s(&junk), "-o", s(&out)],
        vec!["import", "/no/such/file.json", "-o", s(&out)],
        vec!["info", s(&junk)],
        vec!["repair", s(&junk)],
        vec!["export", s(&junk), "-o", s(&out)],
        vec![
            "bench",
            "--apply",
            "window_attention,fast_mlp",
            "--",
            "true",
        ],
        vec!["bench", "--baseline", "sdpa_cudnn,fast_sdpa", "--", "true"],
    ] {
        let o = fuseprof(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert!(err.starts_with("fuseprof: "), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.matches("(os error").count() <= 1,
            "cause repeated: {err}"
        );
        assert!(!out.exists(), "{args:?} left {out:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn collect_passes_the_exit_code_through_and_leaves_a_valid_run() {
    let dir = tempfile::tempdir().unwrap();
    // A program without CUDA never loads the tracer, so any file stands in for it here.
    let tracer = dir.path().join("libfuseprof_tracer.so");
    std::fs::write(&tracer, b"unused").unwrap();
    let run = dir.path().join("run.sqlite");
    let o = Command::new(env!("CARGO_BIN_EXE_fuseprof"))
        .env("FUSEPROF_TRACER", &tracer)
        .args(["collect", "-o", s(&run), "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("0 kernels"), "{}", stderr(&o));
    let o = fuseprof(&["info", s(&run), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let info: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(info["run"]["source_format"], "cupti");
    // Run-level facts the schema has no column for travel in `meta`.
    let meta: Vec<(String, String)> = serde_json::from_value(info["meta"].clone()).unwrap();
    assert!(
        meta.contains(&("cupti_dropped_records".into(), "0".into())),
        "{meta:?}"
    );
    assert!(meta.contains(&("capture".into(), "all".into())), "{meta:?}");

    let o = Command::new(env!("CARGO_BIN_EXE_fuseprof"))
        .env("FUSEPROF_TRACER", &tracer)
        .args([
            "collect",
            "-o",
            s(&dir.path().join("b.sqlite")),
            "--",
            "no-such-program-xyz",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-program-xyz"), "{}", stderr(&o));
}

/// `fuseprof report`: exit code 0 when the gate holds, 1 when a rule fails (the failed rule on
/// stderr), 1 with one line and no files for bad input.
#[test]
fn report_gate_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("swin.sqlite");
    let mut gz = flate2::read::GzDecoder::new(
        std::fs::File::open(fuseprof_fixtures::path(
            "recordings/swin_t_infer_modules.sqlite.gz",
        ))
        .unwrap(),
    );
    std::io::copy(&mut gz, &mut std::fs::File::create(&run).unwrap()).unwrap();
    let page = dir.path().join("r.html");
    let md = dir.path().join("s.md");
    let o = fuseprof(&[
        "report",
        s(&run),
        "-o",
        s(&page),
        "--baseline",
        s(&run),
        "--gate",
        "step_time<=+3%,new_kernels<=0",
        "--summary",
        s(&md),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(page.exists() && md.exists());
    // 9.7 ms per step is over an absolute limit of 5 ms.
    let o = fuseprof(&[
        "report",
        s(&run),
        "-o",
        s(&page),
        "--gate",
        "step_time<=5ms",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("gate rule failed: step_time<=5ms: 9.710 ms per step"),
        "{}",
        stderr(&o)
    );
    // Bad input: a bad rule, a gate that needs a baseline, an unwritable output.
    let nowhere = dir.path().join("no/such/dir/r.html");
    for args in [
        vec!["report", s(&run), "-o", s(&page), "--gate", "step_time<=3"],
        vec![
            "report",
            s(&run),
            "-o",
            s(&page),
            "--gate",
            "new_kernels<=0",
        ],
        vec!["report", s(&run), "-o", s(&nowhere)],
    ] {
        let o = fuseprof(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.starts_with("fuseprof: "), "{e}");
    }
    assert!(!dir.path().join("no").exists());
}

#[test]
fn imports_are_quiet_when_piped_and_silent_with_q() {
    let dir = tempfile::tempdir().unwrap();
    for fixture in [
        "kineto/hta_timeline_analysis_sampled_rank-0.json.gz",
        "nsys/nsysai_mfu_2gpu_before.sqlite",
    ] {
        let input = fuseprof_fixtures::path(fixture);
        let run = dir.path().join("run.sqlite");
        // Piped: the one summary line (and what was not stored), no bar, no library log line.
        let o = fuseprof(&["import", s(&input), "-o", s(&run), "--force"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("imported "), "{err}");
        assert!(
            !err.contains('\x1b'),
            "a progress bar reached a pipe: {err:?}"
        );
        assert!(
            !err.contains("WARN") && !err.contains("slow statement"),
            "{err}"
        );
        // -q: nothing at all on success.
        let o = fuseprof(&["-q", "import", s(&input), "-o", s(&run), "--force"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stderr(&o), "");
        assert!(o.stdout.is_empty());
    }
    // -q still says what went wrong.
    let o = fuseprof(&["-q", "import", "/nonexistent/trace.json", "-o", "x.sqlite"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("No such file"), "{}", stderr(&o));
    // -q and -v contradict each other.
    assert!(!fuseprof(&["-q", "-v", "info", "x.sqlite"]).status.success());
}

#[test]
fn ranks_of_one_job_import_into_one_run_and_analyze_per_rank() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("job.sqlite");
    let ranks: Vec<String> = fuseprof_fixtures::KINETO_RANKS
        .iter()
        .map(|p| fuseprof_fixtures::path(p).display().to_string())
        .collect();
    let o = fuseprof(&["import", &ranks[1], &ranks[0], "-o", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("imported 2 ranks"), "{err}");
    assert!(err.contains("rank 0 (trace): clock wall_clock"), "{err}");
    assert!(
        err.contains("rank 1 (trace): clock wall_clock, shifted +0.000 ms by its collectives"),
        "{err}"
    );

    let o = fuseprof(&["analyze", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Ranks: 2"), "{text}");
    assert!(text.contains("Steps across ranks"), "{text}");
    let o = fuseprof(&["analyze", s(&out), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ranks"]["ranks"].as_array().unwrap().len(), 2);
    assert_eq!(v["ranks"]["steps"][0]["slowest_rank"], 1);

    // One rank's file cut short: one line naming it, exit 1, no output.
    let json = {
        use std::io::Read;
        let mut b = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&ranks[1]).unwrap())
            .read_to_end(&mut b)
            .unwrap();
        b
    };
    let cut = dir.path().join("rank-1.json");
    std::fs::write(&cut, &json[..json.len() / 2]).unwrap();
    let out2 = dir.path().join("cut.sqlite");
    let o = fuseprof(&["import", &ranks[0], s(&cut), "-o", s(&out2)]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("rank-1.json") && err.contains("ends early"),
        "{err}"
    );
    assert!(!out2.exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn version_and_completions_for_each_shell() {
    let o = fuseprof(&["--version"]);
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("fuseprof {}", env!("CARGO_PKG_VERSION"))
    );
    for (shell, marker) in [
        ("bash", "complete -F _fuseprof"),
        ("zsh", "#compdef fuseprof"),
        ("fish", "complete -c fuseprof"),
    ] {
        let o = fuseprof(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        // Every subcommand is completed.
        for sub in [
            "collect", "import", "analyze", "advise", "bench", "report", "tui",
        ] {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
    }
    let o = fuseprof(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("possible values"), "{}", stderr(&o));
}
