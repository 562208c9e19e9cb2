//! Benchmark (not a test): analysis time and peak memory on a synthetic run of N kernels made by
//! repeating a real trace's steps, on one core, against Holistic Trace Analysis (HTA) doing its
//! kernel breakdown on the same run exported as Kineto JSON.
//!
//! ```text
//! cargo build --release -p fuseprof -p fuseprof-analyzer --example bench_analyze
//! target/release/examples/bench_analyze --kernels 10000000 --hta-kernels 100000,1000000 \
//!     --python /path/to/venv/bin/python --fuseprof target/release/fuseprof --dir /tmp/fuseprof-bench
//! ```
//!
//! Each measurement runs in a child process pinned with `taskset -c 0` under `/usr/bin/time -v`
//! (peak RSS); stores and exports are cached in `--dir`. Prints a Markdown table.
//!
//! The children can be run alone: `--analyze STORE` (open, analyze, text and JSON, with the
//! time of each part), `--scan-only STORE` (the analyzer's store scans, timed per table), and
//! `--analyze-sql STORE` and `--scan-only-sql STORE`: the same with the store's lean scans
//! stepping SQL instead of reading the tables' pages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fuseprof_store::{CreateOptions, RunInfo, Store, Writer};

struct Args {
    kernels: Vec<u64>,
    hta_kernels: Vec<u64>,
    source: String,
    dir: PathBuf,
    fuseprof: PathBuf,
    python: String,
    generate_only: bool,
}

fn parse_list(s: &str) -> Vec<u64> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().expect("a number"))
        .collect()
}

fn args() -> Args {
    let mut a = Args {
        kernels: vec![10_000_000],
        hta_kernels: vec![100_000, 1_000_000],
        source: "kineto/hta_timeline_analysis_sampled_rank-0.json.gz".into(),
        dir: std::env::temp_dir().join("fuseprof-bench"),
        fuseprof: PathBuf::from("target/release/fuseprof"),
        python: "python3".into(),
        generate_only: false,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let val = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--kernels" => a.kernels = parse_list(&val),
            "--hta-kernels" => a.hta_kernels = parse_list(&val),
            "--source" => a.source = val,
            "--dir" => a.dir = val.into(),
            "--fuseprof" => a.fuseprof = val.into(),
            "--python" => a.python = val,
            "--generate-only" => {
                a.generate_only = true;
                i -= 1;
            }
            "--scan-only" => {
                scan_child(Path::new(&val), true);
                std::process::exit(0);
            }
            "--scan-only-sql" => {
                scan_child(Path::new(&val), false);
                std::process::exit(0);
            }
            "--analyze" => {
                analyze_child(Path::new(&val), true);
                std::process::exit(0);
            }
            "--analyze-sql" => {
                analyze_child(Path::new(&val), false);
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// The measured part, run in a child: open, analyze, render text and JSON (what
/// `fuseprof analyze` does); with `pages` false, the store's lean scans step SQL instead of
/// reading the tables' pages.
fn analyze_child(path: &Path, pages: bool) {
    let t = Instant::now();
    let cfg = fuseprof_analyzer::AnalyzeConfig::default();
    let mut store = Store::open(path).expect("store");
    store.set_page_scans(pages);
    let a = fuseprof_analyzer::analyze(&mut store, &cfg).expect("analysis");
    let analyzed = t.elapsed().as_secs_f64();
    let text = fuseprof_analyzer::render_text(&a, &cfg);
    let rendered = t.elapsed().as_secs_f64();
    let json = serde_json::to_string(&a).expect("json");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "ANALYZE_SECONDS {secs:.3} (open+analyze {analyzed:.3}, text {:.3}, json {:.3}) \
         kernels {} gpu_ns {} text {} json {}",
        rendered - analyzed,
        secs - rendered,
        a.totals.kernels,
        a.totals.gpu_ns,
        text.len(),
        json.len()
    );
    eprintln!("{}", text.lines().take(40).collect::<Vec<_>>().join("\n"));
}

/// The store's part alone: every scan the analyzer makes, doing nothing with the rows; with
/// `pages` false, the lean scans step SQL instead of reading the tables' pages.
fn scan_child(path: &Path, pages: bool) {
    let t = Instant::now();
    let mut s = Store::open(path).expect("store");
    s.set_page_scans(pages);
    let strings = s.strings().expect("strings");
    let mut n = strings.len() as u64;
    let mut lap = Instant::now();
    let mut laps = Vec::new();
    let mut mark = |what: &str| {
        laps.push(format!("{what} {:.3}", lap.elapsed().as_secs_f64()));
        lap = Instant::now();
    };
    s.for_each_lean_range(|r| n += r.start_ns as u64 & 1)
        .unwrap();
    mark("ranges");
    s.for_each_lean_launch(|a| n += a.start_ns as u64 & 1)
        .unwrap();
    mark("api_calls");
    s.for_each_lean_kernel(|k| n += k.start_ns as u64 & 1)
        .unwrap();
    mark("kernels");
    s.for_each_lean_memop(|m| n += m.start_ns as u64 & 1)
        .unwrap();
    mark("memops");
    println!(
        "SCAN_SECONDS {:.3} ({}; {n})",
        t.elapsed().as_secs_f64(),
        laps.join(", ")
    );
}

/// Writes a run of `kernels` kernels by repeating `src` end to end in time, with correlation and
/// External ids shifted so that every copy links up as the original does.
fn synthesize(src: &Path, out: &Path, kernels: u64) {
    let mut s = Store::open(src).expect("source store");
    let strings = s.strings().expect("strings");
    let devices = s.devices().expect("devices");
    let threads = s.threads().expect("threads");
    let run = s.run().expect("run");
    let mut ks = Vec::new();
    s.for_each_kernel(|k| ks.push(k)).unwrap();
    let mut ms = Vec::new();
    s.for_each_memop(|m| ms.push(m)).unwrap();
    let mut api = Vec::new();
    s.for_each_api_call(|a| api.push(a)).unwrap();
    let mut rs = Vec::new();
    s.for_each_range(|r| rs.push(r)).unwrap();
    let first = ks
        .iter()
        .map(|k| k.start_ns)
        .chain(rs.iter().map(|r| r.start_ns))
        .chain(api.iter().map(|a| a.start_ns))
        .min()
        .unwrap();
    let last = ks
        .iter()
        .map(|k| k.end_ns)
        .chain(rs.iter().filter_map(|r| r.end_ns))
        .chain(api.iter().map(|a| a.end_ns))
        .max()
        .unwrap();
    let span = last - first + 1_000_000;
    let max_corr = ks
        .iter()
        .filter_map(|k| k.correlation_id)
        .chain(api.iter().filter_map(|a| a.correlation_id))
        .max()
        .unwrap_or(0)
        + 1;
    let max_ext = rs
        .iter()
        .filter_map(|r| r.external_id)
        .chain(ks.iter().filter_map(|k| k.external_id))
        .max()
        .unwrap_or(0)
        + 1;
    let copies = kernels.div_ceil(ks.len() as u64);
    let mut w = Writer::create(
        out,
        CreateOptions {
            overwrite: true,
            ..Default::default()
        },
    )
    .unwrap();
    let ids: Vec<fuseprof_store::StrId> = (1..=strings.len() as i64)
        .map(|i| w.intern(strings.get(fuseprof_store::StrId(i))))
        .collect();
    let map = |id: fuseprof_store::StrId| ids[(id.0 - 1) as usize];
    for d in devices {
        w.device(d);
    }
    for (pid, tid, name) in threads {
        w.thread(pid, tid, name.as_deref());
    }
    let mut written = 0u64;
    for c in 0..copies as i64 {
        let dt = c * span;
        let dc = c * max_corr;
        let de = c * max_ext;
        for r in &rs {
            let mut r = r.clone();
            r.start_ns += dt;
            r.end_ns = r.end_ns.map(|e| e + dt);
            r.name = map(r.name);
            r.domain = r.domain.map(map);
            r.category = r.category.map(map);
            r.input_dims = r.input_dims.map(map);
            r.input_types = r.input_types.map(map);
            r.external_id = r.external_id.map(|x| x + de);
            r.correlation_id = r.correlation_id.map(|x| x + dc);
            w.range(r).unwrap();
        }
        for a in &api {
            let mut a = a.clone();
            a.start_ns += dt;
            a.end_ns += dt;
            a.name = map(a.name);
            a.correlation_id = a.correlation_id.map(|x| x + dc);
            a.external_id = a.external_id.map(|x| x + de);
            w.api_call(a).unwrap();
        }
        for k in &ks {
            if written == kernels {
                break;
            }
            let mut k = k.clone();
            k.start_ns += dt;
            k.end_ns += dt;
            k.name = map(k.name);
            k.correlation_id = k.correlation_id.map(|x| x + dc);
            k.external_id = k.external_id.map(|x| x + de);
            w.kernel(k).unwrap();
            written += 1;
        }
        for m in &ms {
            let mut m = m.clone();
            m.start_ns += dt;
            m.end_ns += dt;
            m.correlation_id = m.correlation_id.map(|x| x + dc);
            m.external_id = m.external_id.map(|x| x + de);
            w.memop(m).unwrap();
        }
    }
    w.finish(RunInfo {
        source_format: run.source_format,
        source_path: Some(format!("synthetic: {copies} copies of {}", src.display())),
        tool: run.tool,
        ..Default::default()
    })
    .unwrap();
}

struct Measured {
    seconds: f64,
    peak_rss_mb: f64,
    ok: bool,
    note: String,
}

/// Runs `cmd` pinned to core 0 under /usr/bin/time -v; the time is the one the child prints
/// after `marker`, else the wall clock.
fn measure(cmd: &[&str], marker: &str) -> Measured {
    let mut c = Command::new("taskset");
    c.args(["-c", "0", "/usr/bin/time", "-v"]).args(cmd);
    let t = Instant::now();
    let out = c.output().expect("taskset and /usr/bin/time");
    let wall = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss_kb: f64 = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN);
    let seconds = stdout
        .lines()
        .find_map(|l| l.strip_prefix(marker))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(wall);
    let ok = out.status.success();
    let note = if ok {
        stdout
            .lines()
            .find(|l| l.starts_with(marker))
            .unwrap_or("")
            .to_string()
    } else {
        stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
    };
    Measured {
        seconds,
        peak_rss_mb: rss_kb / 1024.0,
        ok,
        note,
    }
}

const HTA_SCRIPT: &str = r#"
import sys, time
t = time.time()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
k, _ = a.get_gpu_kernel_breakdown(visualize=False)
print("HTA_SECONDS %.3f (import+parse+breakdown); kernel types %d" % (time.time() - t, len(k)))
"#;

fn main() {
    let a = args();
    std::fs::create_dir_all(&a.dir).unwrap();
    let src = a.dir.join("source.sqlite");
    if !src.exists() {
        fuseprof_collector::import::import(
            &fuseprof_fixtures::path(&a.source),
            &src,
            &fuseprof_collector::import::ImportOptions::default(),
        )
        .expect("import the source fixture");
    }
    let me = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    let mut sizes: Vec<u64> = a
        .kernels
        .iter()
        .chain(a.hta_kernels.iter())
        .copied()
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    for n in sizes {
        let store = a.dir.join(format!("synthetic-{n}.sqlite"));
        if !store.exists() {
            let t = Instant::now();
            synthesize(&src, &store, n);
            eprintln!(
                "wrote {} in {:.1} s",
                store.display(),
                t.elapsed().as_secs_f64()
            );
        }
        if a.generate_only {
            continue;
        }
        let counts = Store::open(&store).unwrap().info().unwrap().counts;
        let ours = measure(
            &[me.to_str().unwrap(), "--analyze", store.to_str().unwrap()],
            "ANALYZE_SECONDS ",
        );
        let scan = measure(
            &[me.to_str().unwrap(), "--scan-only", store.to_str().unwrap()],
            "SCAN_SECONDS ",
        );
        let hta = if a.hta_kernels.contains(&n) {
            let trace_dir = a.dir.join(format!("kineto-{n}"));
            let json = trace_dir.join("rank-0.json");
            if !json.exists() {
                std::fs::create_dir_all(&trace_dir).unwrap();
                let st = Command::new(&a.fuseprof)
                    .args([
                        "export",
                        store.to_str().unwrap(),
                        "-o",
                        json.to_str().unwrap(),
                    ])
                    .status()
                    .expect("run fuseprof export");
                assert!(st.success(), "fuseprof export failed");
            }
            let script = a.dir.join("hta_breakdown.py");
            std::fs::write(&script, HTA_SCRIPT).unwrap();
            let mb = std::fs::metadata(&json)
                .map(|m| m.len() as f64 / 1e6)
                .unwrap_or(0.0);
            Some((
                measure(
                    &[
                        &a.python,
                        script.to_str().unwrap(),
                        trace_dir.to_str().unwrap(),
                    ],
                    "HTA_SECONDS ",
                ),
                mb,
            ))
        } else {
            None
        };
        rows.push((n, counts, ours, scan, hta));
    }
    println!("| kernels | ranges | API calls | fuseprof analyze: s | of which store scans: s | peak RSS MB | HTA breakdown: s | HTA peak RSS MB | Kineto JSON MB | time ratio HTA/fuseprof |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, c, ours, scan, hta) in &rows {
        let ranges: i64 = c.ranges.iter().map(|r| r.1).sum();
        let api = c.runtime_calls + c.driver_calls;
        let (hs, hr, mb, ratio) = match hta {
            Some((h, mb)) if h.ok => (
                format!("{:.2}", h.seconds),
                format!("{:.0}", h.peak_rss_mb),
                format!("{mb:.0}"),
                format!("{:.1}x", h.seconds / ours.seconds),
            ),
            Some((h, mb)) => (
                format!("failed: {}", h.note),
                "-".into(),
                format!("{mb:.0}"),
                "-".into(),
            ),
            None => ("not run".into(), "-".into(), "-".into(), "-".into()),
        };
        let our_s = if ours.ok {
            format!("{:.2}", ours.seconds)
        } else {
            format!("failed: {}", ours.note)
        };
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.0} | {} | {} | {} | {} |",
            n, ranges, api, our_s, scan.seconds, ours.peak_rss_mb, hs, hr, mb, ratio
        );
    }
    for (_, _, ours, _, hta) in &rows {
        eprintln!("fuseprof: {}", ours.note);
        if let Some((h, _)) = hta {
            eprintln!("HTA: {}", h.note);
        }
    }
}
