//! `fuseprof`: measure GPU deep-learning models, find fusable operator chains, prove the gain.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;

use fuseprof_analyzer::{Analysis, AnalyzeConfig, GroupBy};
use fuseprof_collector::collect::{self, Capture, CollectConfig, PytorchMode};
use fuseprof_collector::import::{self, Format, ImportOptions};
use fuseprof_collector::progress::Progress;
use fuseprof_fusion_advisor::bench::{self, BenchConfig, Selection};
use fuseprof_fusion_advisor::model_bench::{self, Mode, ModelBenchConfig};
use fuseprof_fusion_advisor::AdviseConfig;
use fuseprof_store::Store;

/// A line for the user on stderr (summaries, warnings), left out under -q.
macro_rules! note {
    ($($arg:tt)*) => {
        if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($arg)*);
        }
    };
}

#[derive(Parser, Debug)]
#[command(
    name = "fuseprof",
    version,
    about = "Profile GPU models, find fusable operator chains, and measure the fix",
    after_help = "Examples:\n  \
      fuseprof collect -o run.sqlite -- python infer.py  # trace a program (CUPTI + NVTX)\n  \
      fuseprof import trace.json.gz -o run.sqlite     # PyTorch profiler trace\n  \
      fuseprof import report.sqlite -o run.sqlite     # nsys export --type sqlite\n  \
      fuseprof info run.sqlite\n  \
      fuseprof analyze run.sqlite --by shape          # hotspots, headroom, steps\n  \
      fuseprof diff before.sqlite after.sqlite\n  \
      fuseprof advise run.sqlite                      # fusable chains, bundled kernels, savings\n  \
      fuseprof bench run.sqlite --all                 # measure them on a GPU\n  \
      fuseprof export run.sqlite -o trace.json        # open in ui.perfetto.dev\n  \
      fuseprof report run.sqlite -o report.html --baseline base.sqlite --gate 'step_time<=+3%'\n  \
      fuseprof push run.sqlite --label branch=main    # run history (SQLite or PostgreSQL)"
)]
struct Cli {
    /// Print nothing but errors and the command's own output: no progress bars, no warnings.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Print more of what happens (-v: info, -vv: debug, the libraries' log lines included).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a program with the CUPTI + NVTX tracer injected and write what it did on the GPU
    /// into a run file. The program's exit code is passed through.
    #[command(after_help = "Examples:\n  \
        fuseprof collect -o run.sqlite -- python infer.py\n  \
        fuseprof collect --pytorch modules -o swin.sqlite -- python infer.py --batch 64\n  \
        fuseprof collect --capture nvtx:step -o run.sqlite -- ./my_cuda_app\n  \
        fuseprof collect --capture cudaProfilerApi -- torchrun --nproc_per_node 2 train.py\n  \
        fuseprof collect --metrics memory -o run.sqlite -- python infer.py\n\n\
        --metrics samples hardware counters with the trace (CUPTI PM sampling: device-wide,\n\
        every 20 us of GPU time by default; CUDA 12.6+, and counters the user may read). Each\n\
        sample is split between the kernels that ran in it by time; kernels that ran beside\n\
        others on another stream get a shared value, flagged. Sets: memory (DRAM read and\n\
        write bytes), or counter names ending in .sum separated by commas (the pipe and\n\
        occupancy percentages are not offered: sampling them crashed the traced process on an\n\
        H200). Where the GPU,\n\
        driver or another profiler refuses, one line says why and the trace is still written.\n\n\
        Child processes (DataLoader workers, torchrun ranks, scripts that start python) are\n\
        traced into the same run. The tracer library libfuseprof_tracer.so is looked for in\n\
        $FUSEPROF_TRACER, then next to the fuseprof executable, then in ../lib/fuseprof beside it.")]
    Collect {
        /// The run file to write.
        #[arg(short, long, default_value = "run.sqlite")]
        output: PathBuf,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
        /// What PyTorch should annotate with NVTX, without editing the script: none, ops,
        /// shapes (ops with input shapes) or modules (shapes plus nn.Module paths). `auto`
        /// means shapes when the command is python, none otherwise.
        #[arg(long, default_value = "auto", value_parser = parse_pytorch)]
        pytorch: PytorchMode,
        /// Record only inside cudaProfilerStart/Stop (`cudaProfilerApi`) or inside NVTX ranges
        /// with this name (`nvtx:NAME`); `all` records everything.
        #[arg(long, default_value = "all", value_parser = parse_capture)]
        capture: Capture,
        /// Also record the CUDA query calls (cudaGetDevice, ...) skipped by default.
        #[arg(long)]
        all_api: bool,
        /// Sample hardware counters with the trace: memory, compute, all, or metric names
        /// separated by commas (see below).
        #[arg(long, value_parser = parse_metrics)]
        metrics: Option<collect::Metrics>,
        /// The counters' sampling interval in microseconds of GPU time.
        #[arg(long, default_value_t = 20.0, requires = "metrics")]
        metrics_interval_us: f64,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Import a PyTorch-profiler JSON trace (.json or .json.gz) or an `nsys export --type
    /// sqlite` file into a new run file; several traces, one per rank of a distributed job
    /// (PyTorch-profiler traces, or nsys exports), merge into one run.
    #[command(after_help = "Examples:\n  \
        fuseprof import fixtures/kineto/hta_critical_path_alexnet_trace.json.gz -o alexnet.sqlite\n  \
        fuseprof import --format nsys profile.sqlite -o run.sqlite --force\n  \
        fuseprof import rank*.json.gz -o job.sqlite     # one run, each rank kept apart\n  \
        fuseprof import rank*.sqlite -o job.sqlite      # one nsys export per rank\n\n\
        Ranks: from each trace's distributedInfo.rank, else its file name (rank-3, rank3), else\n\
        its position. Clocks: Kineto's baseTimeNanoseconds (or Unix-epoch timestamps), or an\n\
        nsys export's session start, refined by matching the ends of NCCL kernels; ranks that\n\
        cannot be aligned are flagged. One nsys export of a torchrun job becomes one rank per\n\
        process (numbered by its GPU).")]
    Import {
        /// The trace(s) to read: one file, or one trace per rank.
        #[arg(required = true, num_args = 1..)]
        input: Vec<PathBuf>,
        /// The run file to write (must not exist unless --force).
        #[arg(short, long)]
        output: PathBuf,
        /// Read the input as this format instead of detecting it.
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write a run as Chrome-trace JSON for the Perfetto UI or chrome://tracing.
    #[command(
        after_help = "Examples:\n  fuseprof export run.sqlite -o trace.json\n  fuseprof export \
                      run.sqlite -o trace.json --advice   # and where each setting's advice points"
    )]
    Export {
        /// The run file to read.
        run: PathBuf,
        /// The JSON file to write.
        #[arg(short, long)]
        output: PathBuf,
        /// Replace the output file if it exists.
        #[arg(long)]
        force: bool,
        /// Also run `advise` and mark each setting's worst step on a track named "fuseprof
        /// advice" (costs an analysis of the run).
        #[arg(long)]
        advice: bool,
    },
    /// Break a run into operators and modules, attribute every kernel to the op that launched
    /// it, classify kernels, find the repeating step, and rank hotspots with their headroom.
    #[command(after_help = "Examples:\n  \
        fuseprof analyze run.sqlite\n  \
        fuseprof analyze run.sqlite --by shape --top 30\n  \
        fuseprof analyze run.sqlite --step 2\n  \
        fuseprof analyze run.sqlite --json > analysis.json   # fields: analyzer/JSON.md")]
    Analyze {
        /// The run file to read.
        run: PathBuf,
        /// The table to lead with: op, shape, module, kernel or class.
        #[arg(long, default_value = "op", value_parser = parse_group_by)]
        by: GroupBy,
        /// Rows per table in the text output (the JSON holds every row).
        #[arg(long, default_value_t = 15)]
        top: usize,
        /// Restrict every table to one step (numbered from 0, as in the steps table).
        #[arg(long)]
        step: Option<usize>,
        /// Print the whole analysis as JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Compare two runs (or two `analyze --json` documents): per op, shape and kernel, what
    /// was added, removed, got faster or slower, and the total change per step.
    #[command(after_help = "Example:\n  fuseprof diff before.sqlite after.sqlite --top 20")]
    Diff {
        /// The baseline: a run file or an analysis JSON document.
        before: PathBuf,
        /// The run to compare with it.
        after: PathBuf,
        /// Rows per table in the text output.
        #[arg(long, default_value_t = 15)]
        top: usize,
        /// Print the diff as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find the fusable operator chains in a run, propose the bundled kernel that replaces each
    /// one exactly, with the saving it should bring per step, and list what no bundled kernel
    /// covers.
    #[command(after_help = "Examples:\n  \
        fuseprof advise swin.sqlite\n  \
        fuseprof advise swin.sqlite --step 1 --min-saving-pct 1\n  \
        fuseprof advise swin.sqlite --json > advice.json   # fields: fusion-advisor/JSON.md\n\n\
        Needs op ranges with input shapes: `fuseprof collect --pytorch shapes` (or modules),\n\
        or a PyTorch-profiler trace recorded with record_shapes=True.")]
    Advise {
        /// The run file to read.
        run: PathBuf,
        /// Print the advice as JSON.
        #[arg(long)]
        json: bool,
        /// Restrict to one step (numbered from 0, as in `analyze`).
        #[arg(long)]
        step: Option<usize>,
        /// List proposals that save less than this share of the step (%) as not proposed.
        #[arg(long, default_value_t = 0.2)]
        min_saving_pct: f64,
        /// Rows of the not-proposed and no-bundled-kernel lists in the text output.
        #[arg(long, default_value_t = 12)]
        top: usize,
    },
    /// Measure advise's proposals on the recorded shapes and dtypes on a GPU (the eager chain,
    /// the bundled kernel and the chain under torch.compile, interleaved, with a numerics gate
    /// against a float32 reference; results are stored in the run), or, with `-- CMD`, run the
    /// unmodified program before and after the bundled kernels are swapped in and compare the
    /// step times, the ops and the numerics.
    #[command(after_help = "Examples:\n  \
        fuseprof bench swin.sqlite --all\n  \
        fuseprof bench swin.sqlite --proposal wattn-4096x3x49x32-shifted -o results.json\n  \
        fuseprof bench -- python3 bench/swin_infer.py               # the model before and after\n  \
        fuseprof bench --modes graphs,compile:max-autotune -- python3 bench/swin_infer.py\n\n\
        Needs python3 with PyTorch and a CUDA GPU (--python or $FUSEPROF_PYTHON), and\n\
        libfuseprof_kernels.so next to fuseprof or in $FUSEPROF_KERNELS_LIB\n\
        (cargo build --release -p fuseprof-kernels).")]
    Bench {
        /// The run file whose proposals to measure (not with `-- CMD`).
        #[arg(required_unless_present = "command")]
        run: Option<PathBuf>,
        /// Measure this proposal (an id from `fuseprof advise`); repeatable.
        #[arg(long, conflicts_with_all = ["all", "command"])]
        proposal: Vec<String>,
        /// Measure every proposal.
        #[arg(long, conflicts_with = "command")]
        all: bool,
        /// Also write the results as JSON.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Interleaved rounds: of (ours, eager, compiled) per proposal, or of (baseline,
        /// patched) runs of the command.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Skip timing the chains under torch.compile (proposals).
        #[arg(long)]
        no_compile: bool,
        /// The python3 that has torch (default: $FUSEPROF_PYTHON, else python3).
        #[arg(long)]
        python: Option<PathBuf>,
        /// With a command: how both sides run the model, one comparison per mode: eager,
        /// graphs (eager captured in CUDA graphs), compile:default, compile:reduce-overhead,
        /// compile:max-autotune.
        #[arg(long, requires = "command", value_delimiter = ',',
              default_value = model_bench::DEFAULT_MODES, value_parser = Mode::parse)]
        modes: Vec<Mode>,
        /// With a command: the patch layer's patterns to apply, comma-separated. Default: the
        /// advised ones (the baseline run once with op shapes, `advise` on it, `bench` on each
        /// proposal's shapes; a pattern whose chains ran faster, all within tolerance, is
        /// applied, with the settings advise found that the patch layer can switch). `default`
        /// names every exact replacement the patch layer knows; the settings autocast_bf16,
        /// tf32, fused_optimizer, cudnn_benchmark, channels_last, sdpa_cudnn and
        /// input_pipeline (a DataLoader's workers, prefetching, pinned memory) switch the
        /// program's own settings without editing it (numerics then checked against float32,
        /// wider, where the precision drops).
        #[arg(long, requires = "command", value_delimiter = ',')]
        apply: Vec<String>,
        /// With a command: settings both sides run with, comma-separated, so that the baseline
        /// is the one a user would pick: sdpa_cudnn (PyTorch's attention on cuDNN first), tf32,
        /// cudnn_benchmark, ... The patched side adds --apply to them.
        #[arg(long, requires = "command", value_delimiter = ',')]
        baseline: Vec<String>,
        /// With a command: keep the runs of both sides in this folder.
        #[arg(long, requires = "command")]
        keep: Option<PathBuf>,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
        /// The program to run before and after, after `--`: `fuseprof bench -- python3 infer.py`.
        #[arg(last = true, num_args = 1..)]
        command: Vec<OsString>,
    },
    /// Explore a run in the terminal: a timeline of every GPU stream and host thread, the
    /// hotspot tables, the operator tree, details of any kernel; two runs open the diff view.
    #[command(after_help = "Examples:\n  \
        fuseprof tui run.sqlite\n  \
        fuseprof tui before.sqlite after.sqlite   # diff tables, timelines aligned by step\n\n\
        Keys: ? in the explorer lists them; q quits.")]
    Tui {
        /// The run file to explore, or two (before and after) to compare.
        #[arg(required = true, num_args = 1..=2)]
        runs: Vec<PathBuf>,
    },
    /// Turn a run (and a baseline) into one self-contained HTML page, check a CI gate, and
    /// write a Markdown summary and JUnit XML. Exit code 1 when a gate rule fails.
    #[command(after_help = "Examples:\n  \
        fuseprof report run.sqlite -o report.html\n  \
        fuseprof report run.sqlite -o report.html --baseline base.sqlite \\\n      \
        --gate 'step_time<=+3%,op:aten::addmm<=+10%,new_kernels<=0' \\\n      \
        --summary summary.md --junit gate.xml\n  \
        fuseprof report run.sqlite -o report.html --history --label branch=main\n\n\
        Gate rules (comma-separated, or a TOML file with rules = [...] and noise_sigmas):\n  \
        step_time / step_wall <= +3% | +0.2ms | 12ms   GPU (wall) time per step; a change\n      \
        inside the steps' noise passes\n  \
        op:NAME, kernel:NAME, class:NAME <= +10% | +50us | 2ms\n  \
        new_kernels, removed_kernels, new_ops <= COUNT\n\
        Outputs are replaced if they exist; none is left half written.")]
    Report {
        /// The run file to report on.
        run: PathBuf,
        /// The HTML page to write.
        #[arg(short, long)]
        output: PathBuf,
        /// The run to compare with: a run file or an `analyze --json` document.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Gate rules, or a TOML file of them; a broken rule exits with code 1.
        #[arg(long)]
        gate: Option<String>,
        /// Also write a Markdown summary (for $GITHUB_STEP_SUMMARY or a PR comment).
        #[arg(long)]
        summary: Option<PathBuf>,
        /// Also write the gate's verdict as JUnit XML.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Add a trend chart of the runs in the history database.
        #[arg(long)]
        history: bool,
        /// The history database (with --history): a PostgreSQL URL or an SQLite file.
        #[arg(long, default_value = fuseprof_reports::history::DEFAULT_DB)]
        db: String,
        /// With --history: only runs with these labels (NAME=VALUE,...).
        #[arg(long)]
        label: Option<String>,
    },
    /// Store a run's summary (per-step times, per-op and per-class totals, device, versions,
    /// labels) in the history database. Pushing the same run again stores it once.
    #[command(after_help = "Examples:\n  \
        fuseprof push run.sqlite --label branch=main,commit=abc123\n  \
        fuseprof push run.sqlite --db postgres://ci@db.internal/perf --label branch=main")]
    Push {
        /// The run file to store.
        run: PathBuf,
        /// A PostgreSQL URL or an SQLite file (created if missing).
        #[arg(long, default_value = fuseprof_reports::history::DEFAULT_DB)]
        db: String,
        /// Labels for the run, NAME=VALUE separated by commas.
        #[arg(long)]
        label: Option<String>,
    },
    /// List the runs in the history database, oldest first, with the step time trend.
    #[command(after_help = "Examples:\n  \
        fuseprof history --label branch=main\n  \
        fuseprof history --db postgres://ci@db.internal/perf --limit 20 --json")]
    History {
        /// A PostgreSQL URL or an SQLite file.
        #[arg(long, default_value = fuseprof_reports::history::DEFAULT_DB)]
        db: String,
        /// Only runs with all of these labels (NAME=VALUE,...).
        #[arg(long)]
        label: Option<String>,
        /// The latest this many runs.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check a run as SQLite does (PRAGMA integrity_check), and rewrite one that an earlier
    /// fuseprof wrote with data on SQLite's lock-byte page (runs over 1 GiB) into a valid file
    /// holding every row. The file is replaced only once the rewritten copy passes the check.
    #[command(after_help = "Examples:\n  \
        fuseprof repair job.sqlite\n  \
        fuseprof repair job.sqlite -o job-fixed.sqlite")]
    Repair {
        /// The run file to check and repair.
        run: PathBuf,
        /// Write the repaired run here instead of replacing RUN.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Show what a run holds: source, devices, counts, time span.
    #[command(after_help = "Example:\n  fuseprof info run.sqlite --json")]
    Info {
        /// The run file to read.
        run: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the shell completion script for fuseprof's commands and options.
    #[command(after_help = "Examples:\n  \
        fuseprof completions bash > ~/.local/share/bash-completion/completions/fuseprof\n  \
        fuseprof completions zsh > ~/.zfunc/_fuseprof      # with fpath+=~/.zfunc\n  \
        fuseprof completions fish > ~/.config/fish/completions/fuseprof.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Derives what `fuseprof tui` reads at open (the timeline's whole-run summary, the whole-run
/// analysis) and keeps it in the run just written; a failure only costs the explorer time.
fn keep_summaries(run: &std::path::Path) {
    let t = std::time::Instant::now();
    match fuseprof_tui::summary::write(run) {
        Ok(w) => {
            note!(
                "kept the explorer's summaries in the run ({} KB, analysis: {}) in {:.2} s",
                (w.lanes_bytes + w.analysis_bytes.as_ref().map_or(0, |b| *b)) / 1024,
                match &w.analysis_bytes {
                    Ok(_) => "kept".to_string(),
                    Err(e) => format!("none, {e}"),
                },
                t.elapsed().as_secs_f64()
            );
        }
        // Nothing for a GPU timeline: the explorer refuses such runs anyway.
        Err(fuseprof_tui::Error::NoGpuWork { .. }) => {}
        Err(e) => note!("fuseprof: warning: no summaries kept for the explorer: {e}"),
    }
}

fn parse_group_by(s: &str) -> Result<GroupBy, String> {
    GroupBy::parse(s).ok_or_else(|| format!("{s:?}: expected op, shape, module, kernel or class"))
}

/// A run file, or a JSON document that `analyze --json` wrote.
fn load_analysis(path: &std::path::Path) -> Result<Analysis> {
    let mut head = [0u8; 1];
    let is_json = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .map(|n| n == 1 && head[0] == b'{')
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if is_json {
        let text = std::fs::read(path)?;
        return serde_json::from_slice(&text).with_context(|| {
            format!(
                "{}: not an analysis document from `fuseprof analyze --json`",
                path.display()
            )
        });
    }
    Ok(fuseprof_analyzer::analyze_file(
        path,
        &AnalyzeConfig::default(),
    )?)
}

fn parse_pytorch(s: &str) -> Result<PytorchMode, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_capture(s: &str) -> Result<Capture, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_metrics(s: &str) -> Result<collect::Metrics, String> {
    s.parse().map_err(|e| format!("{e}"))
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Kineto,
    Nsys,
}

/// The log filter for -q / -v: fuseprof's own warnings by default, the libraries' (sqlx, ...)
/// only from -v on. FUSEPROF_LOG, when set, overrides it.
fn log_filter(quiet: bool, verbose: u8) -> &'static str {
    match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn,sqlx=error",
        (false, 1) => "info",
        (false, _) => "debug",
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FUSEPROF_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(log_filter(cli.quiet, cli.verbose))
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fuseprof: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Completions { shell } => {
            use clap::CommandFactory;
            use std::io::Write;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "fuseprof", &mut script);
            match std::io::stdout().write_all(&script) {
                // A reader that stopped early (`| head`) wanted no more.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    return Err(e).context("cannot write the completion script");
                }
                _ => {}
            }
        }
        Command::Collect {
            output,
            force,
            pytorch,
            capture,
            all_api,
            metrics,
            metrics_interval_us,
            command,
        } => {
            if !(1.0..=1_000_000.0).contains(&metrics_interval_us) {
                anyhow::bail!(
                    "--metrics-interval-us {metrics_interval_us}: expected 1 to 1000000 \
                     microseconds"
                );
            }
            let cfg = CollectConfig {
                output,
                overwrite: force,
                pytorch,
                capture,
                command,
                tracer_path: None,
                all_api,
                python_path: Vec::new(),
                env: Vec::new(),
                progress: Some(Default::default()),
                metrics: metrics.map(|m| collect::Metrics {
                    interval_ns: Some((metrics_interval_us * 1000.0).round() as u64),
                    ..m
                }),
            };
            let progress = cfg.progress.clone().unwrap_or_default();
            let outcome =
                with_progress(&progress, || collect::run(&cfg)).context("cannot collect")?;
            for w in &outcome.warnings {
                note!("fuseprof: warning: {w}");
            }
            let c = &outcome.counts;
            note!(
                "fuseprof: wrote {}: {} kernels, {} memcpy, {} memset, {} API calls, {} ranges \
                 from {} process(es); dropped records: {} CUPTI, {} NVTX",
                outcome.output.display(),
                c.kernels,
                c.memcpys,
                c.memsets,
                c.api_calls,
                c.ranges,
                outcome.processes,
                outcome.cupti_dropped,
                outcome.nvtx_dropped
            );
            if let Some(r) = &outcome.counters {
                note!(
                    "fuseprof: counters: {} metric(s), {} samples; {} kernel values ({} shared \
                     with concurrent work, {} estimated from samples longer than the kernel); \
                     {} kernel(s) no sample covered",
                    r.metrics,
                    r.samples,
                    r.kernel_values,
                    r.shared,
                    r.estimated,
                    r.uncovered_kernels
                );
            }
            if let Ok(ranks) = Store::open(&outcome.output).and_then(|mut s| s.ranks()) {
                print_ranks(&ranks);
            }
            if outcome.output.is_file() {
                keep_summaries(&outcome.output);
            }
            return Ok(ExitCode::from(outcome.exit_code.clamp(0, 255) as u8));
        }
        Command::Import {
            input,
            output,
            format,
            force,
        } => {
            if !fuseprof_store::keep_freed_memory() {
                tracing::debug!("the C allocator keeps its own settings");
            }
            let options = ImportOptions {
                progress: Some(Default::default()),
                jobs: None,
                overwrite: force,
                format: format.map(|f| match f {
                    FormatArg::Kineto => Format::Kineto,
                    FormatArg::Nsys => Format::Nsys,
                }),
            };
            let started = std::time::Instant::now();
            let progress = options.progress.clone().unwrap_or_default();
            if input.len() > 1 {
                let report = with_progress(&progress, || {
                    import::ranks::import_ranks(&input, &output, &options)
                })
                .with_context(|| format!("cannot merge the ranks into {}", output.display()))?;
                let secs = started.elapsed().as_secs_f64();
                let kernels: u64 = report.imports.iter().map(|r| r.counts.kernels).sum();
                let events: u64 = report.imports.iter().map(|r| r.counts.events()).sum();
                note!(
                    "imported {} ranks: {} kernels, {} events in {:.2} s -> {}",
                    report.ranks.len(),
                    kernels,
                    events,
                    secs,
                    output.display()
                );
                print_ranks(&report.ranks);
                for n in &report.notes {
                    note!("  note: {n}");
                }
                keep_summaries(&output);
                return Ok(ExitCode::SUCCESS);
            }
            let input = &input[0];
            let report = with_progress(&progress, || import::import(input, &output, &options))
                .with_context(|| format!("cannot import {}", input.display()))?;
            let secs = started.elapsed().as_secs_f64();
            let c = &report.counts;
            note!(
                "imported {} ({:?}): {} kernels, {} memcpy, {} memset, {} API calls, {} ranges, \
                 {} flows from {} source events in {:.2} s -> {}",
                input.display(),
                report.format,
                c.kernels,
                c.memcpys,
                c.memsets,
                c.api_calls,
                c.ranges,
                c.flows,
                report.source_events,
                secs,
                output.display()
            );
            for (why, n) in &report.skipped {
                note!("  not stored: {n} {why}");
            }
            if report.format == Format::Nsys {
                print_ranks(&Store::open(&output)?.ranks()?);
            }
            keep_summaries(&output);
        }
        Command::Export {
            run,
            output,
            force,
            advice,
        } => {
            let marks = if advice {
                match fuseprof_fusion_advisor::advise_file(&run, &Default::default()) {
                    Ok(a) => fuseprof_reports::chrome::advice_marks(&a.settings),
                    Err(e) => {
                        note!("no advice to mark: {e}");
                        Vec::new()
                    }
                }
            } else {
                Vec::new()
            };
            let mut store = Store::open(&run)?;
            let s = fuseprof_reports::chrome::export_marked(&mut store, &output, force, &marks)
                .with_context(|| format!("cannot export {}", run.display()))?;
            note!(
                "wrote {} events ({} launch flows) to {}",
                s.events,
                s.flows,
                output.display()
            );
        }
        Command::Analyze {
            run,
            by,
            top,
            step,
            json,
        } => {
            let cfg = AnalyzeConfig { by, top, step };
            let analysis = fuseprof_analyzer::analyze_file(&run, &cfg)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&analysis)?);
            } else {
                print!("{}", fuseprof_analyzer::render_text(&analysis, &cfg));
            }
        }
        Command::Diff {
            before,
            after,
            top,
            json,
        } => {
            let d = fuseprof_analyzer::diff(&load_analysis(&before)?, &load_analysis(&after)?);
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print!("{}", fuseprof_analyzer::render_diff_text(&d, top));
            }
        }
        Command::Advise {
            run,
            json,
            step,
            min_saving_pct,
            top,
        } => {
            let cfg = AdviseConfig {
                step,
                min_saving_pct,
                ..AdviseConfig::default()
            };
            let advice = fuseprof_fusion_advisor::advise_file(&run, &cfg)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&advice)?);
            } else {
                print!("{}", fuseprof_fusion_advisor::render_text(&advice, top));
            }
        }
        Command::Bench {
            run,
            proposal,
            all,
            output,
            rounds,
            no_compile,
            python,
            modes,
            apply,
            baseline,
            keep,
            json,
            command,
        } => {
            if !command.is_empty() {
                if let Some(bad) = baseline
                    .iter()
                    .find(|b| !model_bench::SETTING_SWITCHES.contains(&b.as_str()))
                {
                    anyhow::bail!(
                        "--baseline {bad}: expected settings among {}",
                        model_bench::SETTING_SWITCHES.join(", ")
                    );
                }
                let cfg = ModelBenchConfig {
                    command,
                    rounds,
                    modes,
                    both: baseline,
                    apply: (!apply.is_empty()).then_some(apply),
                    keep,
                    kernels_lib: None,
                };
                let report = model_bench::run(&cfg)?;
                if let Some(path) = &output {
                    std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
                        .with_context(|| format!("cannot write {}", path.display()))?;
                }
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", model_bench::render(&report, 10));
                }
                if !report.numerics_passed {
                    return Ok(ExitCode::from(2));
                }
                return Ok(ExitCode::SUCCESS);
            }
            let Some(run) = run else {
                anyhow::bail!("name a run file, or a command after `--`");
            };
            if proposal.is_empty() && !all {
                anyhow::bail!("name the proposals to measure (--proposal ID) or pass --all");
            }
            let cfg = BenchConfig {
                selection: if all {
                    Selection::All
                } else {
                    Selection::Ids(proposal)
                },
                python,
                kernels_lib: None,
                rounds,
                compile: !no_compile,
                output,
                advise: AdviseConfig::default(),
            };
            let report = bench::bench(&run, &cfg)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", bench::render_report(&report));
            }
            if report.rows.iter().any(|r| r.measured.status != "passed") {
                return Ok(ExitCode::from(2));
            }
        }
        Command::Tui { runs } => {
            let mut cfg = fuseprof_tui::TuiConfig::new(runs);
            cfg.keep_summaries = true;
            fuseprof_tui::run(cfg)?
        }
        Command::Report {
            run,
            output,
            baseline,
            gate,
            summary,
            junit,
            history,
            db,
            label,
        } => {
            use fuseprof_reports::{gate::Gate, history as hist, report};
            let gate = gate.as_deref().map(Gate::from_arg).transpose()?;
            if let Some(g) = &gate {
                if g.needs_baseline() && baseline.is_none() {
                    anyhow::bail!("--gate: the rules compare against a baseline; pass --baseline");
                }
            }
            let history = if history {
                let labels = hist::parse_labels(label.as_deref().unwrap_or(""))?;
                let key = hist::run_key(&run)?;
                let runs = hist::History::open(&db)?.runs(&labels, 100)?;
                // This run is drawn last on its own; leave out its own earlier push.
                Some(runs.into_iter().filter(|r| r.key != key).collect())
            } else {
                None
            };
            let cfg = report::ReportConfig {
                run,
                output,
                baseline,
                gate,
                summary,
                junit,
                history,
            };
            let outcome = report::generate(&cfg)?;
            for w in &outcome.warnings {
                note!("fuseprof: warning: {w}");
            }
            for p in &outcome.written {
                note!("wrote {}", p.display());
            }
            if let Some(g) = &outcome.gate {
                for f in g.failed() {
                    eprintln!("fuseprof: gate rule failed: {}: {}", f.rule, f.measured);
                }
                if !g.passed() {
                    return Ok(ExitCode::FAILURE);
                }
                note!("gate: all {} rules hold", g.outcomes.len());
            }
        }
        Command::Push { run, db, label } => {
            use fuseprof_reports::history as hist;
            let labels = hist::parse_labels(label.as_deref().unwrap_or(""))?;
            let summary = hist::summarize(&run, labels)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or(0);
            match hist::History::open(&db)?.push(&summary, now)? {
                hist::Pushed::Stored => note!("stored run {} ({})", summary.key, run.display()),
                hist::Pushed::AlreadyThere => note!(
                    "run {} ({}) is already in the history; nothing changed",
                    summary.key,
                    run.display()
                ),
            }
        }
        Command::History {
            db,
            label,
            limit,
            json,
        } => {
            use fuseprof_reports::history as hist;
            let labels = hist::parse_labels(label.as_deref().unwrap_or(""))?;
            let runs = hist::History::open(&db)?.runs(&labels, limit)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&runs)?);
            } else {
                print!("{}", hist::render_text(&runs));
            }
        }
        Command::Repair { run, output } => {
            let progress = Progress::default();
            progress.phase("checking", 0);
            let r = with_progress(&progress, || {
                fuseprof_store::repair(&run, output.as_deref())
            })?;
            match r.moved {
                Some((from, to)) => println!(
                    "{}: moved page {from} (SQLite's lock-byte page) to page {to}; \
                     PRAGMA integrity_check: ok",
                    r.path.display()
                ),
                None => println!(
                    "{}: nothing to repair; PRAGMA integrity_check: ok",
                    r.path.display()
                ),
            }
        }
        Command::Info { run, json } => {
            let mut store = Store::open(&run)?;
            let info = store.info()?;
            let ranks = store.ranks()?;
            let counters = store.counter_summaries()?;
            if json {
                let mut v = serde_json::to_value(&info)?;
                if !ranks.is_empty() {
                    v["ranks"] = serde_json::to_value(&ranks)?;
                }
                if !counters.is_empty() {
                    v["counters"] = serde_json::to_value(&counters)?;
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", render_info(&info));
                for r in &ranks {
                    println!(
                        "rank {}:     clock {} (offset {} ns), from {} ({})",
                        r.rank,
                        r.clock,
                        r.clock_offset_ns,
                        r.source_path.as_deref().unwrap_or("?"),
                        r.rank_source.replace('_', " ")
                    );
                }
                print!("{}", render_counters(&counters));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per hardware counter the run holds (`--metrics`).
fn render_counters(counters: &[fuseprof_store::CounterSummary]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for c in counters {
        let m = &c.metric;
        let every = m
            .interval_ns
            .map(|ns| format!(" every {} us", ns as f64 / 1000.0))
            .unwrap_or_default();
        let total = match c.total {
            Some(t) if m.unit == "byte" => format!(", {:.3} GB in all", t / 1e9),
            Some(t) => format!(", {t:.4e} in all"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "counter:    {} on GPU {} ({}, {}{every}): {} samples over {:.3} ms{total}; {} \
             kernels ({} shared, {} estimated)",
            m.quantity,
            m.device_id,
            m.name,
            m.method.replace('_', " "),
            c.samples,
            c.sampled_ns as f64 / 1e6,
            c.kernels,
            c.shared,
            c.estimated
        );
    }
    s
}

fn render_info(i: &fuseprof_store::Info) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let r = &i.run;
    let _ = writeln!(s, "run:        {}", i.path);
    let _ = writeln!(
        s,
        "source:     {}{}",
        r.source_format,
        r.source_path
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default()
    );
    if let Some(t) = &r.tool {
        let _ = writeln!(
            s,
            "tool:       {t}{}",
            r.tool_version
                .as_deref()
                .map(|v| format!(", {v}"))
                .unwrap_or_default()
        );
    }
    if let Some(c) = &r.command {
        let _ = writeln!(s, "command:    {c}");
    }
    if let Some(h) = &r.host {
        let _ = writeln!(s, "host:       {h}");
    }
    if let (Some(a), Some(b)) = (i.first_ns, i.last_ns) {
        let _ = writeln!(s, "time span:  {:.3} ms", (b - a) as f64 / 1e6);
    }
    let c = &i.counts;
    let _ = writeln!(
        s,
        "kernels:    {} ({:.3} ms of GPU time)",
        c.kernels,
        i.kernel_time_ns as f64 / 1e6
    );
    let _ = writeln!(s, "memcpy:     {}", c.memcpys);
    // Host<->device copies by host memory: pageable ones are staged and block the host.
    for h in &i.host_copies {
        let _ = writeln!(
            s,
            "  {} {:<8} {} copies, {:.3} ms, {:.1} MB{}",
            h.direction,
            h.host_memory.map_or("unknown", |m| m.as_str()),
            h.count,
            h.time_ns as f64 / 1e6,
            h.bytes as f64 / 1e6,
            if h.time_ns > 0 && h.bytes > 0 {
                format!(", {:.2} GB/s", h.bytes as f64 / h.time_ns as f64)
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(s, "memset:     {}", c.memsets);
    let _ = writeln!(
        s,
        "API calls:  {} runtime, {} driver",
        c.runtime_calls, c.driver_calls
    );
    let ranges: i64 = c.ranges.iter().map(|(_, n)| n).sum();
    let _ = writeln!(s, "ranges:     {ranges}");
    for (k, n) in &c.ranges {
        let _ = writeln!(s, "  {k:<20} {n}");
    }
    let _ = writeln!(s, "flows:      {}", c.flows);
    let _ = writeln!(
        s,
        "processes:  {}, threads: {}, GPU streams: {}",
        c.processes, c.threads, c.streams
    );
    for d in &i.devices {
        let _ = write!(
            s,
            "device {}:   {}",
            d.id,
            d.name.as_deref().unwrap_or("(unnamed)")
        );
        if let Some(n) = d.sm_count {
            let _ = write!(s, ", {n} SMs");
        }
        if let Some(m) = d.memory_bytes {
            let _ = write!(s, ", {:.1} GiB", m as f64 / (1u64 << 30) as f64);
        }
        if let (Some(bw), Some(src)) = (d.mem_bandwidth_bytes_per_s, &d.peak_source) {
            let _ = write!(s, ", {:.2} TB/s ({src})", bw / 1e12);
        }
        let _ = writeln!(s);
    }
    s
}

/// Set by -q: no progress bars, no notes.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `work` while a bar on stderr shows `progress` (phase, bytes, events and their rate),
/// drawn only on a terminal, without -q, and once the work has taken a second.
/// One line per rank of a distributed run: where its number and clock came from.
fn print_ranks(ranks: &[fuseprof_store::RankInfo]) {
    for r in ranks {
        let paired = |r: &fuseprof_store::RankInfo| {
            format!(
                "{}/{} collectives paired, their ends a median {:.1} us apart",
                r.matched_collectives,
                r.collectives,
                r.residual_ns.unwrap_or(0) as f64 / 1e3
            )
        };
        let aligned = match r.clock.as_str() {
            "same_clock" if r.residual_ns.is_some() => format!("same_clock ({})", paired(r)),
            "wall_clock" | "collectives" if r.residual_ns.is_some() => format!(
                "{}, shifted {:+.3} ms by its collectives ({})",
                r.clock,
                r.clock_correction_ns as f64 / 1e6,
                paired(r)
            ),
            "unaligned" => "UNALIGNED (left on its own clock)".to_string(),
            other => other.to_string(),
        };
        note!(
            "  rank {} ({}): clock {}{}",
            r.rank,
            r.rank_source.replace('_', " "),
            aligned,
            r.source_path
                .as_deref()
                .map(|p| format!(", {p}"))
                .unwrap_or_default()
        );
    }
}

fn with_progress<T>(progress: &Progress, work: impl FnOnce() -> T) -> T {
    use std::io::IsTerminal;
    if QUIET.load(std::sync::atomic::Ordering::Relaxed) || !std::io::stderr().is_terminal() {
        return work();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| draw_progress(progress, &done));
        let out = work();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    })
}

fn draw_progress(progress: &Progress, done: &std::sync::atomic::AtomicBool) {
    use indicatif::{ProgressBar, ProgressStyle};
    use std::sync::atomic::Ordering;
    // Nothing is drawn before the work's first phase starts (`collect` runs the program
    // first, whose output owns the terminal), nor for work done within a second of it.
    let tick = std::time::Duration::from_millis(100);
    let mut started = None;
    loop {
        if done.load(Ordering::Relaxed) {
            return;
        }
        if !progress.snapshot().phase.is_empty() {
            let t = *started.get_or_insert_with(std::time::Instant::now);
            if t.elapsed() >= std::time::Duration::from_secs(1) {
                break;
            }
        }
        std::thread::sleep(tick);
    }
    let sized =
        ProgressStyle::with_template("{prefix:>9} [{bar:20}] {percent:>3}% of {total_bytes} {msg}")
            .expect("a valid template")
            .progress_chars("=> ");
    let unsized_ = ProgressStyle::with_template("{prefix:>9} {spinner} {elapsed} {msg}")
        .expect("a valid template");
    let bar = ProgressBar::new(0).with_style(unsized_.clone());
    let mut phase = "";
    let (mut last_events, mut last_t) = (0u64, std::time::Instant::now());
    let mut rate = 0.0;
    while !done.load(Ordering::Relaxed) {
        let s = progress.snapshot();
        if s.phase != phase {
            phase = s.phase;
            bar.set_prefix(phase);
            bar.set_style(if s.bytes_total > 0 {
                sized.clone()
            } else {
                unsized_.clone()
            });
            bar.set_length(s.bytes_total);
        }
        bar.set_position(s.bytes_done);
        let dt = last_t.elapsed().as_secs_f64();
        if dt >= 0.5 {
            rate = (s.events - last_events) as f64 / dt;
            (last_events, last_t) = (s.events, std::time::Instant::now());
        }
        if s.events > 0 {
            let mut msg = format!("{:.2} M events", s.events as f64 / 1e6);
            if rate > 0.0 {
                msg += &format!(", {:.2} M/s", rate / 1e6);
            }
            bar.set_message(msg);
        }
        bar.tick();
        std::thread::sleep(tick);
    }
    bar.finish_and_clear();
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
