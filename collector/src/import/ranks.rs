//! Distributed jobs: the ranks of one job merged into one run.
//!
//! `fuseprof import rank*.json.gz -o run.sqlite` imports each rank's PyTorch-profiler trace on
//! its own, then merges them ([`fuseprof_store::merge_ranks`]); so does `fuseprof import
//! rank*.sqlite`, for one nsys export per rank (`nsys profile -o rank%q{RANK}` under a
//! launcher). Each file's rank comes from the trace (`distributedInfo.rank`), else from its
//! name (`rank-3`, `rank3`, `rank_3`), else from its position among the inputs; two files of
//! one rank, of jobs with different world sizes, of both formats, or an export that holds
//! several ranks itself, are refused.
//!
//! Clocks: a rank whose trace carries `baseTimeNanoseconds` is put on the Unix wall clock
//! (base + ts); one whose timestamps are already Unix-epoch microseconds (older PyTorch) is
//! on it as it is; an export's times count from its session's start, whose wall-clock time
//! it records (`TARGET_INFO_SESSION_START_TIME`). The collectives then refine that: the reference rank (the lowest on the
//! wall clock, else the lowest) keeps its times, and every other rank is shifted so that its
//! NCCL kernels end with their partners there ([`fuseprof_store::align_collectives`], within
//! 2 s of the wall clock). A rank with neither a wall clock nor collectives that match is left
//! on its own clock and flagged `unaligned`. One nsys export (or one `collect`) of a whole
//! job holds every rank on one host clock: [`label_ranks`] numbers its processes by the GPU
//! each drives.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use fuseprof_store::{
    align_collectives, Collective, CreateOptions, MergePart, MergeReport, RankInfo, RunInfo, Store,
};
use serde::Serialize;

use super::{detect, import_to, Format, ImportError, ImportOptions, ImportReport, Result};

/// Timestamps at or above this (2001-09-09 in Unix nanoseconds) are taken as wall-clock time.
const EPOCH_FLOOR_NS: i64 = 1_000_000_000_000_000_000;
/// How far the collectives may move a rank that is already on the wall clock: Kineto's
/// `baseTimeNanoseconds` is whole seconds on some versions, and hosts' clocks drift apart.
const WALL_CLOCK_WINDOW_NS: i64 = 2_000_000_000;

/// What a multi-rank import did.
#[derive(Clone, Debug, Serialize)]
pub struct RanksReport {
    /// Per rank, by rank.
    pub ranks: Vec<RankInfo>,
    /// Each input's own import, in rank order.
    pub imports: Vec<ImportReport>,
    pub merge: MergeReport,
    /// Ranks the user should know about (unaligned clocks, unmatched collectives).
    pub notes: Vec<String>,
}

/// Whether a kernel name is a collective's (NCCL, RCCL): the analyzer's `communication` class.
pub fn is_collective(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("nccl") || lower.contains("rccl")
}

/// The rank number in a file name: `rank-3`, `rank3`, `rank_3`, `RANK.3` (the last one).
pub fn rank_from_file_name(path: &Path) -> Option<i64> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let mut found = None;
    let mut rest = name.as_str();
    while let Some(at) = rest.find("rank") {
        let after = &rest[at + 4..];
        let digits = after.trim_start_matches(['-', '_', '.']);
        let n: String = digits.chars().take_while(char::is_ascii_digit).collect();
        if !n.is_empty() {
            found = n.parse().ok();
        }
        rest = after;
    }
    found
}

/// Removes the per-rank runs when the merge is over or failed.
struct Parts(Vec<PathBuf>);

impl Drop for Parts {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn part_path(output: &Path, what: &str) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    let parent = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    parent.join(format!(
        ".{name}.{what}.fuseprof-part-{}",
        std::process::id()
    ))
}

/// Fails early, naming `output`, when the folder the run goes to cannot be written.
fn check_writable(output: &Path, part: &Path) -> Result<()> {
    std::fs::File::create(part).map_err(|error| {
        ImportError::Store(fuseprof_store::Error::Io {
            path: output.into(),
            error,
        })
    })?;
    let _ = std::fs::remove_file(part);
    Ok(())
}

/// One imported rank, before merging.
struct Loaded {
    /// Whether the input is an nsys export (else Kineto).
    nsys: bool,
    input: PathBuf,
    part: PathBuf,
    report: ImportReport,
    run: RunInfo,
    trace_rank: Option<i64>,
    world_size: Option<i64>,
    backend: Option<String>,
    base_ns: Option<i64>,
    first_ns: Option<i64>,
    last_ns: Option<i64>,
    /// Keyed by index into `collective_names` until [`import_ranks`] numbers the names across
    /// the ranks.
    collectives: Vec<Collective>,
    collective_names: Vec<String>,
}

fn load(input: &Path, part: &Path, report: ImportReport, nsys: bool) -> Result<Loaded> {
    let mut store = Store::open(part)?;
    let held = store.ranks()?.len();
    if held > 1 {
        return Err(ImportError::format(
            input,
            format!(
                "holds a whole job ({held} ranks, one process per GPU): import it on its own, \
                 or give one export per rank"
            ),
        ));
    }
    let meta = store.meta()?;
    let get = |k: &str| {
        meta.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let int =
        |k: &str| -> Result<Option<i64>> {
            match get(k) {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| {
                    ImportError::format(input, format!("{k} is {v:?}, not an integer"))
                }),
            }
        };
    let (first_ns, last_ns) = (report.counts.first_ns, report.counts.last_ns);
    let strings = store.strings()?;
    let mut collectives = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut key_of: std::collections::HashMap<i64, Option<u32>> = Default::default();
    store.for_each_lean_kernel(|k| {
        let key = *key_of.entry(k.name.0).or_insert_with(|| {
            let name = strings.get(k.name);
            is_collective(name).then(|| {
                let i = names.iter().position(|n| n == name).unwrap_or_else(|| {
                    names.push(name.to_string());
                    names.len() - 1
                });
                i as u32
            })
        });
        if let Some(key) = key {
            collectives.push(Collective {
                key,
                start_ns: k.start_ns,
                end_ns: k.end_ns,
            });
        }
    })?;
    collectives.sort_unstable_by_key(|c| (c.end_ns, c.start_ns));
    let run = store.run()?;
    // An export's times count from its session's start, at the run's start on the wall clock.
    let base_ns = match int("base_time_ns")? {
        None if nsys => run.start_unix_ns,
        b => b,
    };
    Ok(Loaded {
        nsys,
        input: input.into(),
        part: part.into(),
        report,
        run,
        trace_rank: int("distributed_rank")?,
        world_size: int("distributed_world_size")?,
        backend: get("distributed_backend"),
        base_ns,
        first_ns,
        last_ns,
        collectives,
        collective_names: names,
    })
}

/// How many inputs to import at once: `jobs`, else the cores this process may use (its CPU
/// affinity and cgroup quota included), never more than there are inputs.
fn workers(jobs: Option<usize>, inputs: usize) -> usize {
    jobs.unwrap_or_else(fuseprof_store::usable_cores)
        .clamp(1, inputs.max(1))
}

/// Imports each input into its part and reads back what the merge needs, `workers` inputs at
/// a time, each on a thread of its own with its own writer (so a file is inflated and parsed
/// while another's pages are written). Inputs are taken in order and none is started after
/// one failed, so the error is the one the first bad input gives, as one after the other.
/// Memory: each worker holds one source in memory, so `workers` sources at most.
fn import_parts(
    inputs: &[PathBuf],
    parts: &[PathBuf],
    format: Format,
    options: &ImportOptions,
) -> Result<Vec<Loaded>> {
    let one = |i: usize, progress| {
        let opts = ImportOptions {
            overwrite: true,
            format: Some(format),
            progress,
            jobs: None,
        };
        // A rank's run is read once, in row order, by the merge: no indexes.
        let unindexed = CreateOptions {
            unindexed: true,
            ..Default::default()
        };
        let report = import_to(&inputs[i], &parts[i], &opts, unindexed)?;
        load(&inputs[i], &parts[i], report, format == Format::Nsys)
    };
    let n = workers(options.jobs, inputs.len());
    if n == 1 {
        // One after the other on this thread, each file's progress shown as it goes.
        return (0..inputs.len())
            .map(|i| one(i, options.progress.clone()))
            .collect();
    }
    // Several at once: the counters say how many bytes of the inputs are imported, file by file.
    let sizes: Vec<u64> = inputs
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect();
    let progress = options.progress.as_deref();
    if let Some(p) = progress {
        p.phase("importing ranks", sizes.iter().sum());
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<Mutex<Option<Result<Loaded>>>> =
        inputs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..n {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= inputs.len() {
                        break;
                    }
                    let r = one(i, None);
                    match &r {
                        Ok(l) => {
                            if let Some(p) = progress {
                                p.add_bytes_done(sizes[i]);
                                p.add_events(l.report.source_events);
                            }
                        }
                        Err(_) => failed.store(true, Ordering::Relaxed),
                    }
                    *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
            });
        }
    });
    // Inputs after the first failure may not have been started: stop at the first error.
    results
        .into_iter()
        .map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
        .map_while(|r| r)
        .collect::<Result<Vec<_>>>()
}

/// Imports the traces of the ranks of one job (`inputs`, PyTorch-profiler JSON or nsys
/// exports, one rank each) into one run at `output`. On any error no file is left at
/// `output`.
pub fn import_ranks(
    inputs: &[PathBuf],
    output: &Path,
    options: &ImportOptions,
) -> Result<RanksReport> {
    if !options.overwrite && output.exists() {
        return Err(fuseprof_store::Error::OutputExists {
            path: output.into(),
        }
        .into());
    }
    let mut format = None;
    for input in inputs {
        let f = match options.format {
            Some(f) => f,
            None => detect(input)?,
        };
        match format {
            None => format = Some(f),
            Some(first) if first != f => {
                return Err(ImportError::format(
                    input,
                    format!(
                        "{} where {} is {}: the ranks of one job come in one format",
                        f.describe(),
                        inputs[0].display(),
                        first.describe()
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let format = format.unwrap_or(Format::Kineto);
    check_writable(output, &part_path(output, "check"))?;
    let parts = Parts(
        (0..inputs.len())
            .map(|i| part_path(output, &format!("input{i}")))
            .collect(),
    );
    let mut loaded = import_parts(inputs, &parts.0, format, options)?;
    if loaded.len() < inputs.len() {
        // Only when a worker panicked (a failure ends the list with its error).
        return Err(ImportError::format(
            &inputs[loaded.len()],
            "its import stopped unexpectedly",
        ));
    }
    // The collectives' keys: one number per kernel name across the ranks, in input order.
    let mut keys: Vec<String> = Vec::new();
    for l in &mut loaded {
        let global: Vec<u32> = l
            .collective_names
            .iter()
            .map(|name| {
                keys.iter().position(|n| n == name).unwrap_or_else(|| {
                    keys.push(name.clone());
                    keys.len() - 1
                }) as u32
            })
            .collect();
        for c in &mut l.collectives {
            c.key = global[c.key as usize];
        }
    }

    // Rank numbers: the trace's, else the file name's, else the position.
    let mut ranks: Vec<(i64, &'static str)> = Vec::new();
    for (i, l) in loaded.iter().enumerate() {
        ranks.push(match (l.trace_rank, rank_from_file_name(&l.input)) {
            (Some(r), _) => (r, "trace"),
            (None, Some(r)) => (r, "file_name"),
            (None, None) => (i as i64, "order"),
        });
    }
    for (i, l) in loaded.iter().enumerate() {
        if let Some(j) = (0..i).find(|&j| ranks[j].0 == ranks[i].0) {
            return Err(ImportError::format(
                &l.input,
                format!(
                    "rank {} (from its {}) is also the rank of {}: each rank once, please",
                    ranks[i].0,
                    ranks[i].1.replace('_', " "),
                    loaded[j].input.display()
                ),
            ));
        }
    }
    let first = &loaded[0];
    for l in &loaded[1..] {
        let differs = |a: &Option<i64>, b: &Option<i64>| a.is_some() && b.is_some() && a != b;
        if differs(&l.world_size, &first.world_size)
            || (l.backend.is_some() && first.backend.is_some() && l.backend != first.backend)
        {
            return Err(ImportError::format(
                &l.input,
                format!(
                    "a rank of another job: world size {} ({}) where {} has {} ({})",
                    l.world_size.map_or("?".into(), |w| w.to_string()),
                    l.backend.as_deref().unwrap_or("?"),
                    first.input.display(),
                    first.world_size.map_or("?".into(), |w| w.to_string()),
                    first.backend.as_deref().unwrap_or("?"),
                ),
            ));
        }
    }
    for (i, l) in loaded.iter().enumerate() {
        if let Some(w) = l.world_size {
            if ranks[i].0 < 0 || ranks[i].0 >= w {
                return Err(ImportError::format(
                    &l.input,
                    format!("rank {} is outside the job's world size {w}", ranks[i].0),
                ));
            }
        }
    }

    // Clocks: the wall clock where the trace has one, then the collectives.
    let wall: Vec<Option<i64>> = loaded
        .iter()
        .map(|l| match (l.base_ns, l.first_ns) {
            (Some(b), _) => Some(b),
            (None, Some(f)) if f >= EPOCH_FLOOR_NS => Some(0),
            _ => None,
        })
        .collect();
    let mut order: Vec<usize> = (0..loaded.len()).collect();
    order.sort_by_key(|&i| ranks[i].0);
    let reference = *order
        .iter()
        .find(|&&i| wall[i].is_some())
        .unwrap_or(&order[0]);
    let shifted = |i: usize, by: i64| -> Vec<Collective> {
        loaded[i]
            .collectives
            .iter()
            .map(|c| Collective {
                key: c.key,
                start_ns: c.start_ns.saturating_add(by),
                end_ns: c.end_ns.saturating_add(by),
            })
            .collect()
    };
    let ref_base = wall[reference].unwrap_or(0);
    let ref_colls = shifted(reference, ref_base);
    let mut notes = Vec::new();
    let mut infos = Vec::new();
    for &i in &order {
        let l = &loaded[i];
        let (rank, rank_source) = ranks[i];
        let mut info = RankInfo {
            rank,
            source_path: Some(l.input.display().to_string()),
            rank_source: rank_source.into(),
            world_size: l.world_size,
            backend: l.backend.clone(),
            collectives: l.collectives.len() as i64,
            ..Default::default()
        };
        if i == reference {
            info.clock = if wall[i].is_some() {
                "wall_clock"
            } else {
                "reference"
            }
            .into();
            info.clock_offset_ns = ref_base;
            info.matched_collectives = l.collectives.len() as i64;
        } else {
            let base = wall[i].unwrap_or(0);
            let window =
                (wall[i].is_some() && wall[reference].is_some()).then_some(WALL_CLOCK_WINDOW_NS);
            let found = align_collectives(&ref_colls, &shifted(i, base), window);
            match (found, wall[i]) {
                (Some(a), _) => {
                    info.clock = if window.is_some() {
                        "wall_clock"
                    } else {
                        "collectives"
                    }
                    .into();
                    info.clock_offset_ns = base.saturating_add(a.shift_ns);
                    info.clock_correction_ns = a.shift_ns;
                    info.matched_collectives = a.matched as i64;
                    info.residual_ns = Some(a.residual_ns);
                }
                (None, Some(b)) => {
                    info.clock = "wall_clock".into();
                    info.clock_offset_ns = b;
                    notes.push(format!(
                        "rank {rank}: its collectives do not match rank {}'s; its times are on \
                         its host's wall clock only",
                        ranks[reference].0
                    ));
                }
                (None, None) => {
                    info.clock = "unaligned".into();
                    notes.push(format!(
                        "rank {rank} ({}): no wall-clock base and no collectives that match \
                         rank {}'s: left on its own clock, so cross-rank times involving it \
                         mean nothing",
                        l.input.display(),
                        ranks[reference].0
                    ));
                }
            }
        }
        // Ranks of one job overlap in time; a wall-clock rank that does not is another job's.
        if i != reference && info.clock == "wall_clock" {
            let span = |j: usize, off: i64| {
                loaded[j]
                    .first_ns
                    .zip(loaded[j].last_ns)
                    .map(|(a, b)| (a.saturating_add(off), b.saturating_add(off)))
            };
            if let (Some((a0, a1)), Some((b0, b1))) =
                (span(reference, ref_base), span(i, info.clock_offset_ns))
            {
                if b1 < a0 || b0 > a1 {
                    return Err(ImportError::format(
                        &l.input,
                        format!(
                            "does not overlap {} in time (by {:.1} s): ranks of different \
                             jobs or runs?",
                            loaded[reference].input.display(),
                            (i128::from(b0) - i128::from(a1)).max(i128::from(a0) - i128::from(b1))
                                as f64
                                / 1e9
                        ),
                    ));
                }
            }
        }
        infos.push(info);
    }

    let first_run = &loaded[reference].run;
    let run = RunInfo {
        source_format: if loaded[reference].nsys {
            "nsys"
        } else {
            "kineto"
        }
        .into(),
        source_path: Some(
            order
                .iter()
                .map(|&i| loaded[i].input.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        start_unix_ns: infos
            .iter()
            .zip(&order)
            .filter(|(info, _)| info.clock != "unaligned" && info.clock != "reference")
            .filter_map(|(info, &i)| loaded[i].first_ns.map(|f| f + info.clock_offset_ns))
            .min(),
        ..first_run.clone()
    };
    let merge_parts: Vec<MergePart> = order
        .iter()
        .zip(&infos)
        .map(|(&i, info)| MergePart {
            path: loaded[i].part.clone(),
            info: info.clone(),
        })
        .collect();
    if let Some(p) = &options.progress {
        p.phase("merging ranks", 0);
    }
    let merge = fuseprof_store::merge_ranks(
        &merge_parts,
        output,
        CreateOptions {
            overwrite: options.overwrite,
            ..Default::default()
        },
        &run,
    )?;
    let mut imports = Vec::new();
    for &i in &order {
        imports.push(loaded[i].report.clone());
    }
    drop(parts);
    Ok(RanksReport {
        ranks: infos,
        imports,
        merge,
        notes,
    })
}

/// The ranks of one run that holds a whole job (one nsys export, or one `collect`, of a
/// torchrun job): when at least two processes launched kernels, each on one GPU of its own,
/// each such process is a rank, numbered by its GPU (torchrun's local rank drives GPU
/// `LOCAL_RANK`). `None` for anything else (one process, or a process on several GPUs).
pub fn ranks_by_device(store: &mut Store) -> Result<Option<RankLabels>> {
    let mut per_pid: PidDevices = Default::default();
    store.for_each_lean_kernel(|k| {
        if let Some(pid) = k.pid {
            per_pid.entry(pid).or_default().insert(k.device_id);
        }
    })?;
    Ok(labels_by_device(&per_pid))
}

/// The GPUs each launching process used.
type PidDevices = std::collections::BTreeMap<i64, std::collections::BTreeSet<i64>>;

/// [`ranks_by_device`]'s labels from the GPUs each process used.
fn labels_by_device(per_pid: &PidDevices) -> Option<RankLabels> {
    if per_pid.len() < 2 || per_pid.values().any(|d| d.len() != 1) {
        return None;
    }
    let mut by_device: Vec<(i64, i64)> = per_pid
        .iter()
        .map(|(&pid, d)| (*d.iter().next().unwrap_or(&0), pid))
        .collect();
    by_device.sort_unstable();
    if by_device.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let process_rank = by_device
        .iter()
        .enumerate()
        .map(|(r, &(_, pid))| (pid, r as i64))
        .collect();
    let device_rank = by_device
        .iter()
        .enumerate()
        .map(|(r, &(dev, _))| (dev, r as i64))
        .collect();
    Some(RankLabels {
        process_rank,
        device_rank,
    })
}

/// Which rank each process and GPU of a run belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankLabels {
    /// `(pid, rank)`.
    pub process_rank: Vec<(i64, i64)>,
    /// `(device id, rank)`.
    pub device_rank: Vec<(i64, i64)>,
}

/// The ranks of the complete run at `path` when it holds a whole job ([`ranks_by_device`]):
/// one host's capture, so every rank is on the same clock; the collectives' ends only say how
/// well they agree.
fn device_ranks_of(path: &Path, source_path: &str) -> Result<Option<(Vec<RankInfo>, RankLabels)>> {
    let mut store = Store::open(path)?;
    let strings = store.strings()?;
    // One scan for both the processes' GPUs and the collectives (kept only when there are
    // ranks); whether a name is a collective is decided once per name.
    let mut per_pid: PidDevices = Default::default();
    let mut per_device: std::collections::BTreeMap<i64, Vec<Collective>> = Default::default();
    let mut collective: rustc_hash::FxHashMap<i64, bool> = Default::default();
    store.for_each_lean_kernel(|k| {
        if let Some(pid) = k.pid {
            per_pid.entry(pid).or_default().insert(k.device_id);
        }
        let is = *collective
            .entry(k.name.0)
            .or_insert_with(|| is_collective(strings.get(k.name)));
        if is {
            per_device.entry(k.device_id).or_default().push(Collective {
                key: k.name.0 as u32,
                start_ns: k.start_ns,
                end_ns: k.end_ns,
            });
        }
    })?;
    let Some(labels) = labels_by_device(&per_pid) else {
        return Ok(None);
    };
    let none = Vec::new();
    let reference = per_device.get(&labels.device_rank[0].0).unwrap_or(&none);
    let infos = labels
        .device_rank
        .iter()
        .map(|&(dev, rank)| {
            let own = per_device.get(&dev).unwrap_or(&none);
            let mut info = RankInfo {
                rank,
                source_path: Some(source_path.into()),
                rank_source: "device".into(),
                world_size: Some(labels.device_rank.len() as i64),
                clock: "same_clock".into(),
                collectives: own.len() as i64,
                matched_collectives: own.len() as i64,
                ..Default::default()
            };
            if rank > 0 {
                let m = fuseprof_store::match_collectives(reference, own, 0);
                let mut diffs: Vec<i64> = m
                    .iter()
                    .zip(own)
                    .filter_map(|(m, c)| m.map(|i| (reference[i].end_ns - c.end_ns).abs()))
                    .collect();
                diffs.sort_unstable();
                info.matched_collectives = diffs.len() as i64;
                info.residual_ns = diffs.get(diffs.len() / 2).copied();
            }
            info
        })
        .collect();
    Ok(Some((infos, labels)))
}

/// Publishes the complete run at `part` at `output`, with its ranks labelled when it holds a
/// whole job ([`ranks_by_device`]). Returns the ranks (empty for a run of one process).
pub fn label_ranks(
    part: &Path,
    output: &Path,
    options: CreateOptions,
    source_path: &str,
) -> Result<Vec<RankInfo>> {
    let (infos, labels) = device_ranks_of(part, source_path)?.unwrap_or_default();
    fuseprof_store::publish_with_ranks(
        part,
        output,
        options,
        &infos,
        &labels.process_rank,
        &labels.device_rank,
    )?;
    Ok(infos)
}

/// [`label_ranks`] on a complete run nobody reads yet, left where it is (`collect` labels its
/// staging file before it publishes it).
pub fn label_ranks_in_place(path: &Path, source_path: &str) -> Result<Vec<RankInfo>> {
    let Some((infos, labels)) = device_ranks_of(path, source_path)? else {
        return Ok(Vec::new());
    };
    fuseprof_store::write_ranks(path, &infos, &labels.process_rank, &labels.device_rank)?;
    Ok(infos)
}

/// [`import`] for one nsys export, labelling its ranks ([`label_ranks`]).
pub(crate) fn import_nsys_labelled(
    input: &Path,
    output: &Path,
    create: CreateOptions,
    progress: Option<&crate::progress::Progress>,
) -> Result<(ImportReport, Vec<RankInfo>)> {
    if !create.overwrite && output.exists() {
        return Err(fuseprof_store::Error::OutputExists {
            path: output.into(),
        }
        .into());
    }
    let part = part_path(output, "nsys");
    check_writable(output, &part)?;
    let guard = Parts(vec![part.clone()]);
    let report = super::nsys::import(
        input,
        &part,
        CreateOptions {
            overwrite: true,
            ..create
        },
        progress,
    )?;
    let ranks = label_ranks(&part, output, create, &input.display().to_string())?;
    drop(guard);
    Ok((report, ranks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_numbers_come_from_file_names() {
        let r = |s: &str| rank_from_file_name(Path::new(s));
        assert_eq!(r("hta_trace_filter_sampled_rank-1.json.gz"), Some(1));
        assert_eq!(r("/x/rank3.json"), Some(3));
        assert_eq!(r("trainer_RANK_12.pt.trace.json.gz"), Some(12));
        assert_eq!(r("ranked/trace.json"), None);
        assert_eq!(r("trace.json"), None);
    }

    #[test]
    fn nccl_and_rccl_kernels_are_collectives() {
        assert!(is_collective(
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
        ));
        assert!(is_collective("ncclKernel_AllReduce_RING_LL_Sum_float"));
        assert!(is_collective("rcclGenericKernel"));
        assert!(!is_collective("ampere_sgemm_128x64_tn"));
    }
}
