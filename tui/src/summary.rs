//! What the explorer derives from a whole run, kept in the run (the store's summary tables,
//! `fuseprof_store::write_summary`) so that the next open reads it instead of deriving it:
//!
//! - `tui-lanes`: the timeline's whole-run summary ([`Summary`]: every lane's finest bins and
//!   long records; the coarser levels are rebuilt on reading) and which string ids name a
//!   kernel or a range; with it the first frame is exact at once;
//! - `tui-analysis`: the whole-run analysis and operator tree the hotspot, tree and step views
//!   show; with it they need neither the analysis's time nor its memory.
//!
//! `fuseprof import` and `collect` call [`write`] once a run is written; the explorer keeps
//! what it derived itself for a run that lacks them. A summary carries the run's row id ranges
//! and this build's format version: a stale one is ignored and derived again.

use std::path::Path;

use fuseprof_analyzer::{Analysis, AnalyzeConfig, OpNode, OpNodeKind, OpTree, Rules};
use fuseprof_store::{Store, StrId};
use serde::{Deserialize, Serialize};

use crate::data::{self, Meta, PassPart};
use crate::model::*;
use crate::{Error, Result};

/// The summary names in the store.
pub const LANES: &str = "tui-lanes";
pub const ANALYSIS: &str = "tui-analysis";

/// Format versions: a summary written by another one is not read. Bump them when what is
/// kept changes meaning: the lane bins or their keys (`LANES_VERSION`), the analyzer's numbers
/// or the tree (`analysis_version` also follows the analyzer's JSON version).
pub const LANES_VERSION: &str = concat!("fuseprof-tui lanes 2, ", env!("CARGO_PKG_VERSION"));
pub fn analysis_version() -> String {
    format!(
        "fuseprof-tui analysis 2, {}, analysis JSON {}",
        env!("CARGO_PKG_VERSION"),
        fuseprof_analyzer::JSON_VERSION
    )
}

const MAGIC: &[u8; 4] = b"FPL2";

/// What [`write`] kept.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    pub lanes_bytes: usize,
    /// Why no analysis was kept (a run with nothing to analyse).
    pub analysis_bytes: std::result::Result<usize, String>,
}

/// Derives the timeline summary and the whole-run analysis of the run at `path` and keeps
/// both in it. Runs without GPU work (which the explorer does not open) get nothing.
///
/// Where the process may use more than one core, the two read the run independently, each
/// through its own handle, the timeline summary on a second thread while this one analyses; on
/// one core the timeline summary is built from the rows the analysis reads, so that each table
/// is read once.
pub fn write(path: &Path) -> Result<Written> {
    write_with(path, fuseprof_store::usable_cores())
}

/// [`write`] with `cores` cores to use.
fn write_with(path: &Path, cores: usize) -> Result<Written> {
    let (lanes, analysis) = if cores > 1 {
        std::thread::scope(|s| {
            let lanes = s.spawn(|| derive_lanes(path));
            let analysis = derive_analysis(path);
            let lanes = lanes
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (lanes, analysis)
        })
    } else {
        let (lanes, analysis) = derive_both(path)?;
        (Ok(lanes), Ok(analysis))
    };
    let lanes = lanes?;
    fuseprof_store::write_summary(path, LANES, LANES_VERSION, &lanes)?;
    let analysis_bytes = match analysis? {
        Ok(bytes) => {
            fuseprof_store::write_summary(path, ANALYSIS, &analysis_version(), &bytes)?;
            Ok(bytes.len())
        }
        Err(why) => Err(why),
    };
    Ok(Written {
        lanes_bytes: lanes.len(),
        analysis_bytes,
    })
}

/// An encoded analysis, or why there is none to keep.
type EncodedAnalysis = std::result::Result<Vec<u8>, String>;

/// The timeline summary and the analysis of the run at `path`, as [`derive_lanes`] and
/// [`derive_analysis`] give them, from one read of each table: the summary is built from the
/// rows the analysis reads. Where the analysis fails, the summary reads the run itself.
fn derive_both(path: &Path) -> Result<(Vec<u8>, EncodedAnalysis)> {
    let clock = std::time::Instant::now();
    let (mut store, meta) = data::open(path)?;
    let names = NameInfo::load(&mut store)?;
    let summary = Summary::new(meta.first_ns, meta.last_ns);
    let mut lanes = data::Summarizer::new(&names, &meta, &summary);
    let analysis = fuseprof_analyzer::analyze_with_op_tree_observed(
        &mut store,
        &AnalyzeConfig::default(),
        &Rules::builtin(),
        Some(&mut lanes),
    );
    tracing::debug!(
        "analysis and timeline summary derived in {:.3} s",
        clock.elapsed().as_secs_f64()
    );
    let lanes = if analysis.is_ok() {
        let mut enc = LaneEncoder::new(&summary);
        enc.part(&meta, &lanes.gpu_part());
        enc.part(&meta, &lanes.ranges_part());
        enc.part(&meta, &lanes.api_part());
        enc.finish()
    } else {
        derive_lanes(path)?
    };
    Ok((lanes, encoded(analysis)))
}

/// The timeline summary of the run at `path`, encoded.
fn derive_lanes(path: &Path) -> Result<Vec<u8>> {
    let clock = std::time::Instant::now();
    let (mut store, meta) = data::open(path)?;
    let names = NameInfo::load(&mut store)?;
    let summary = Summary::new(meta.first_ns, meta.last_ns);
    let mut enc = LaneEncoder::new(&summary);
    data::summarize(&mut store, &names, &meta, &summary, |p| enc.part(&meta, &p))?;
    tracing::debug!(
        "timeline summary derived in {:.3} s",
        clock.elapsed().as_secs_f64()
    );
    Ok(enc.finish())
}

/// The whole-run analysis and operator tree of the run at `path`, encoded; `Err(why)` inside
/// when there is none to keep (a run without GPU work, which [`derive_lanes`] refuses).
fn derive_analysis(path: &Path) -> Result<EncodedAnalysis> {
    let clock = std::time::Instant::now();
    let mut store = Store::open(path)?;
    let analysis = fuseprof_analyzer::analyze_with_op_tree(
        &mut store,
        &AnalyzeConfig::default(),
        &Rules::builtin(),
    );
    tracing::debug!("analysis derived in {:.3} s", clock.elapsed().as_secs_f64());
    Ok(encoded(analysis))
}

/// An analysis encoded to keep, or why there is none.
fn encoded(analysis: fuseprof_analyzer::Result<(Analysis, OpTree)>) -> EncodedAnalysis {
    match analysis {
        Ok((a, t)) => {
            encode_analysis(&a, &t).ok_or_else(|| "the analysis does not serialise".into())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The run's kept timeline summary as the parts the summary pass would publish (kernels,
/// ranges, API calls); None when it has none for this build or the run as it is now.
pub fn read_lanes(
    store: &mut Store,
    meta: &Meta,
    summary: &Summary,
    names: usize,
) -> Option<Vec<PassPart>> {
    let data = match store.summary(LANES, LANES_VERSION) {
        Ok(d) => d?,
        Err(e) => {
            tracing::debug!("no timeline summary: {e}");
            return None;
        }
    };
    let parts = decode_lanes(&data, meta, summary, names);
    if parts.is_none() {
        tracing::debug!("the run's timeline summary does not fit the run: derived again");
    }
    parts
}

/// The run's kept whole-run analysis and operator tree, if any (for this build and the run as
/// it is now).
pub fn read_analysis(store: &mut Store) -> Option<(Analysis, OpTree)> {
    let data = store.summary(ANALYSIS, &analysis_version()).ok()??;
    let (mut a, tree) = decode_analysis(&data)?;
    // The file's name now, as the analyzer gives it (the run may have been renamed since).
    let path = store.path();
    a.run.file = path.file_name().map_or_else(
        || path.display().to_string(),
        |f| f.to_string_lossy().into(),
    );
    Some((a, tree))
}

/// Writes under way from [`keep`]: the explorer waits for them before it exits, because a
/// write cut short leaves a hot journal that read-only opens of the run refuse.
/// (writes under way, whether the explorer is exiting).
static KEEPING: (std::sync::Mutex<(usize, bool)>, std::sync::Condvar) =
    (std::sync::Mutex::new((0, false)), std::sync::Condvar::new());

/// Keeps a summary in the run (the explorer's own, for a run that lacks it); the caller logs
/// a failure (a read-only run keeps none, and is summarised again next time).
pub fn keep(path: &Path, name: &str, version: &str, data: &[u8]) -> Result<()> {
    struct InFlight;
    impl Drop for InFlight {
        fn drop(&mut self) {
            let mut k = KEEPING.0.lock().unwrap_or_else(|e| e.into_inner());
            k.0 -= 1;
            KEEPING.1.notify_all();
        }
    }
    {
        let mut k = KEEPING.0.lock().unwrap_or_else(|e| e.into_inner());
        if k.1 {
            // Exiting: not started now, so not cut short.
            return Ok(());
        }
        k.0 += 1;
    }
    let _in_flight = InFlight;
    fuseprof_store::write_summary(path, name, version, data).map_err(Error::from)
}

/// Before the process exits: no [`keep`] starts from now on, and this waits (at most `max`)
/// until those under way are done.
pub fn wait_for_keeps(max: std::time::Duration) {
    let mut k = KEEPING.0.lock().unwrap_or_else(|e| e.into_inner());
    k.1 = true;
    let _ = KEEPING.1.wait_timeout_while(k, max, |k| k.0 > 0);
}

// ---- the analysis ----------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
struct AnalysisDoc {
    analysis: Analysis,
    tree: Vec<NodeDoc>,
}

#[derive(Serialize, Deserialize)]
struct NodeDoc {
    kind: u8,
    name: String,
    self_ns: i64,
    total_ns: i64,
    records: u64,
    instances: u64,
    class: Option<u32>,
    parent: Option<usize>,
    children: Vec<usize>,
}

const KINDS: [OpNodeKind; 5] = [
    OpNodeKind::Root,
    OpNodeKind::Module,
    OpNodeKind::Op,
    OpNodeKind::Kernel,
    OpNodeKind::Outside,
];

/// The analysis as JSON (floats round-trip exactly), None where it holds a non-finite float.
pub fn encode_analysis(a: &Analysis, tree: &OpTree) -> Option<Vec<u8>> {
    let doc = AnalysisDoc {
        analysis: a.clone(),
        tree: tree
            .nodes
            .iter()
            .map(|n| NodeDoc {
                kind: KINDS.iter().position(|k| *k == n.kind).unwrap_or(0) as u8,
                name: n.name.clone(),
                self_ns: n.self_ns,
                total_ns: n.total_ns,
                records: n.records,
                instances: n.instances,
                class: n.class.map(class_index),
                parent: n.parent,
                children: n.children.clone(),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&doc).ok()?;
    // serde_json writes NaN as null, which does not read back as a float: check once.
    decode_analysis(&bytes).filter(|(b, t)| b == a && t == tree)?;
    Some(bytes)
}

pub fn decode_analysis(data: &[u8]) -> Option<(Analysis, OpTree)> {
    let doc: AnalysisDoc = serde_json::from_slice(data).ok()?;
    let nodes = doc
        .tree
        .into_iter()
        .map(|n| {
            Some(OpNode {
                kind: *KINDS.get(n.kind as usize)?,
                name: n.name,
                self_ns: n.self_ns,
                total_ns: n.total_ns,
                records: n.records,
                instances: n.instances,
                class: n.class.map(class_of_index),
                parent: n.parent,
                children: n.children,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let len = nodes.len();
    let ok = nodes
        .iter()
        .all(|n| n.parent.is_none_or(|p| p < len) && n.children.iter().all(|&c| c < len));
    ok.then_some((doc.analysis, OpTree { nodes }))
}

// ---- the timeline summary --------------------------------------------------------------

/// Encodes the summary pass's parts as they come: a header (the bins' origin and width),
/// then per part its table, its name flags and its lanes (finest bins that hold anything, as
/// runs of equal bins; long records), in LEB128 varints.
pub struct LaneEncoder {
    out: Vec<u8>,
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn put_i(out: &mut Vec<u8>, v: i64) {
    put(out, ((v << 1) ^ (v >> 63)) as u64);
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u(&mut self) -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *self.data.get(self.at)?;
            self.at += 1;
            if shift > 63 {
                return None;
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
            shift += 7;
        }
    }
    fn i(&mut self) -> Option<i64> {
        let u = self.u()?;
        Some((u >> 1) as i64 ^ -((u & 1) as i64))
    }
    fn n(&mut self, max: usize) -> Option<usize> {
        let v = usize::try_from(self.u()?).ok()?;
        (v <= max).then_some(v)
    }
    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u()?).ok()
    }
}

const TABLES: [&str; 3] = ["kernels", "ranges", "api_calls"];

fn lane_tag(l: LaneKind) -> (u64, u64) {
    match l {
        LaneKind::Gpu => (0, 0),
        LaneKind::GpuRanges => (1, 0),
        LaneKind::Module(d) => (2, d as u64),
        LaneKind::Range(d) => (3, d as u64),
        LaneKind::Other => (4, 0),
        LaneKind::Api => (5, 0),
    }
}

fn lane_of_tag(tag: u64, d: u64) -> Option<LaneKind> {
    let d = u16::try_from(d).ok()?;
    Some(match tag {
        0 => LaneKind::Gpu,
        1 => LaneKind::GpuRanges,
        2 => LaneKind::Module(d),
        3 => LaneKind::Range(d),
        4 => LaneKind::Other,
        5 => LaneKind::Api,
        _ => return None,
    })
}

impl LaneEncoder {
    pub fn new(s: &Summary) -> Self {
        let mut out = MAGIC.to_vec();
        put_i(&mut out, s.t0_ns);
        put_i(&mut out, s.bin_ns);
        put(&mut out, SUMMARY_BINS as u64);
        put_i(&mut out, LONG_BINS);
        LaneEncoder { out }
    }

    pub fn part(&mut self, meta: &Meta, p: &PassPart) {
        let out = &mut self.out;
        put(
            out,
            TABLES.iter().position(|t| *t == p.table).unwrap_or(0) as u64,
        );
        put(out, p.names.len() as u64);
        let mut bits = vec![0u8; p.names.len().div_ceil(8)];
        for (i, _) in p.names.iter().enumerate().filter(|(_, &b)| b) {
            bits[i / 8] |= 1 << (i % 8);
        }
        out.extend_from_slice(&bits);
        let mut lanes: Vec<(&LaneId, &LaneBins)> = p.lanes.iter().collect();
        lanes.sort_by_key(|(id, _)| **id);
        put(out, lanes.len() as u64);
        for ((track, lane), bins) in lanes {
            match meta.tracks[*track].key {
                TrackKey::Stream { device, stream } => {
                    put(out, 0);
                    put_i(out, device);
                    put_i(out, stream);
                }
                TrackKey::Thread { pid, tid } => {
                    put(out, 1);
                    put_i(out, pid);
                    put_i(out, tid);
                }
            }
            let (tag, d) = lane_tag(*lane);
            put(out, tag);
            put(out, d);
            let l0 = &bins.levels[0];
            // Runs of equal bins that hold anything (a long record fills many bins alike):
            // (gap since the last run's end, length, busy, count, key).
            let bin = |i: usize| (l0.busy[i], l0.count[i], l0.key[i]);
            let mut runs: Vec<(usize, usize)> = Vec::new();
            for i in 0..l0.busy.len() {
                if bin(i) == (0, 0, 0) {
                    continue;
                }
                match runs.last_mut() {
                    Some((start, len)) if *start + *len == i && bin(*start) == bin(i) => *len += 1,
                    _ => runs.push((i, 1)),
                }
            }
            put(out, runs.len() as u64);
            let mut end = 0usize;
            for (start, len) in runs {
                put(out, (start - end) as u64);
                put(out, len as u64);
                end = start + len;
                let (busy, count, key) = bin(start);
                put(out, busy);
                put(out, count as u64);
                put(out, key as u64);
            }
            put(out, bins.long.len() as u64);
            for s in &bins.long {
                put_i(out, s.start_ns);
                put_i(out, s.dur_ns());
                put(out, s.key as u64);
                put_i(out, s.name.0);
                // The summary pass keeps long records by (start, name).
                debug_assert_eq!(s.item, ItemRef::At(s.start_ns, s.name));
            }
        }
    }

    pub fn finish(self) -> Vec<u8> {
        self.out
    }
}

/// The parts of an encoded summary, for this run's tracks; None when it does not fit the
/// run (other bins, a track it does not have, a string table of another size) or is cut.
pub fn decode_lanes(
    data: &[u8],
    meta: &Meta,
    summary: &Summary,
    names: usize,
) -> Option<Vec<PassPart>> {
    if data.get(..4)? != MAGIC {
        return None;
    }
    let mut r = Reader { data, at: 4 };
    if r.i()? != summary.t0_ns
        || r.i()? != summary.bin_ns
        || r.u()? != SUMMARY_BINS as u64
        || r.i()? != LONG_BINS
    {
        return None;
    }
    let index = meta.track_index();
    let mut parts = Vec::new();
    while r.at < data.len() {
        let table = *TABLES.get(r.n(2)?)?;
        let n = r.n(names)?;
        if n != 0 && n != names {
            return None;
        }
        let bytes = data.get(r.at..r.at + n.div_ceil(8))?;
        r.at += n.div_ceil(8);
        let flags: Vec<bool> = (0..n).map(|i| bytes[i / 8] & (1 << (i % 8)) != 0).collect();
        let lanes_n = r.n(data.len())?;
        let mut lanes = std::collections::HashMap::with_capacity(lanes_n);
        for _ in 0..lanes_n {
            let key = match r.u()? {
                0 => TrackKey::Stream {
                    device: r.i()?,
                    stream: r.i()?,
                },
                1 => TrackKey::Thread {
                    pid: r.i()?,
                    tid: r.i()?,
                },
                _ => return None,
            };
            let track = *index.get(&key)?;
            let (tag, d) = (r.u()?, r.u()?);
            let lane = lane_of_tag(tag, d)?;
            let mut l0 = Level {
                busy: vec![0; SUMMARY_BINS],
                count: vec![0; SUMMARY_BINS],
                key: vec![0; SUMMARY_BINS],
            };
            let runs = r.n(SUMMARY_BINS)?;
            let mut end = 0usize;
            for _ in 0..runs {
                let start = end + r.n(SUMMARY_BINS)?;
                end = start + r.n(SUMMARY_BINS)?;
                if end > SUMMARY_BINS {
                    return None;
                }
                let (busy, count, key) = (r.u()?, r.u32()?, r.u32()?);
                l0.busy[start..end].fill(busy);
                l0.count[start..end].fill(count);
                l0.key[start..end].fill(key);
            }
            let long_n = r.n(data.len())?;
            let mut long = Vec::with_capacity(long_n);
            for _ in 0..long_n {
                let start_ns = r.i()?;
                let end_ns = start_ns.checked_add(r.i()?)?;
                let key = r.u32()?;
                let name = StrId(r.i()?);
                long.push(Span {
                    start_ns,
                    end_ns,
                    key,
                    name,
                    item: ItemRef::At(start_ns, name),
                });
            }
            lanes.insert((track, lane), LaneBins::from_finest(l0, long));
        }
        parts.push(PassPart {
            table,
            lanes,
            names: flags,
        });
    }
    (parts.len() == TABLES.len() && parts.iter().zip(TABLES).all(|(p, t)| p.table == t))
        .then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn swin() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("swin.sqlite");
        let gz = fuseprof_fixtures::path("recordings/swin_t_infer_modules.sqlite.gz");
        let mut r = flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap());
        std::io::copy(&mut r, &mut std::fs::File::create(&out).unwrap()).unwrap();
        (dir, out)
    }

    /// A run of the HTA Kineto trace (ranges with no stored depth, nested as they come).
    fn kineto() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("hta.sqlite");
        let input = fuseprof_fixtures::path("kineto/hta_timeline_analysis_sampled_rank-0.json.gz");
        fuseprof_collector::import::import(
            &input,
            &out,
            &fuseprof_collector::import::ImportOptions::default(),
        )
        .unwrap();
        (dir, out)
    }

    /// The summaries [`write_with`] keeps in a fresh copy of a run, on `cores` cores.
    fn kept(run: fn() -> (tempfile::TempDir, std::path::PathBuf), cores: usize) -> [Vec<u8>; 2] {
        let (dir, path) = run();
        write_with(&path, cores).unwrap();
        let mut store = Store::open(&path).unwrap();
        let lanes = store.summary(LANES, LANES_VERSION).unwrap().unwrap();
        let analysis = store
            .summary(ANALYSIS, &analysis_version())
            .unwrap()
            .unwrap();
        drop(store);
        drop(dir);
        [lanes, analysis]
    }

    /// One core (the timeline summary built from the rows the analysis reads) and two (each
    /// reading the run) keep the same summaries, byte for byte, for a run of fuseprof's own
    /// and for a Kineto trace's.
    #[test]
    fn one_core_and_two_keep_the_same_summaries() {
        for run in [swin, kineto] {
            let (one, two) = (kept(run, 1), kept(run, 2));
            assert!(one[0] == two[0], "lane summaries differ");
            assert!(one[1] == two[1], "analyses differ");
        }
    }

    /// What the pass derives reads back the same from the run: every lane's bins at every
    /// level, its long records, the name flags; and the analysis with its tree.
    #[test]
    fn kept_summaries_read_back_as_derived() {
        let (_dir, path) = swin();
        let (mut store, meta) = data::open(&path).unwrap();
        let names = NameInfo::load(&mut store).unwrap();
        let summary = Summary::new(meta.first_ns, meta.last_ns);
        let mut derived = Vec::new();
        data::summarize(&mut store, &names, &meta, &summary, |p| derived.push(p)).unwrap();
        assert!(read_lanes(&mut store, &meta, &summary, names.class.len()).is_none());
        assert!(read_analysis(&mut store).is_none());
        drop(store);

        let w = write(&path).unwrap();
        assert!(w.lanes_bytes > 0 && w.analysis_bytes.is_ok(), "{w:?}");
        let (mut store, meta) = data::open(&path).unwrap();
        let kept = read_lanes(&mut store, &meta, &summary, names.class.len()).unwrap();
        assert_eq!(kept.len(), derived.len());
        for (k, d) in kept.iter().zip(&derived) {
            assert_eq!(k.table, d.table);
            assert_eq!(k.names, d.names, "{}", d.table);
            let sorted = |m: &HashMap<LaneId, LaneBins>| {
                let mut v: Vec<(LaneId, LaneBins)> =
                    m.iter().map(|(k, v)| (*k, v.clone())).collect();
                v.sort_by_key(|(k, _)| *k);
                v
            };
            assert!(!d.lanes.is_empty());
            assert_eq!(sorted(&k.lanes), sorted(&d.lanes), "{}", d.table);
        }
        let (a, t) = read_analysis(&mut store).unwrap();
        let (a0, t0) = fuseprof_analyzer::analyze_with_op_tree(
            &mut store,
            &AnalyzeConfig::default(),
            &Rules::builtin(),
        )
        .unwrap();
        assert_eq!((a, t), (a0, t0));

        // Other bins (another run's bounds) or a cut blob: not used.
        let other = Summary::new(meta.first_ns, meta.last_ns + 1_000_000_000);
        assert!(read_lanes(&mut store, &meta, &other, names.class.len()).is_none());
        let data = store.summary(LANES, LANES_VERSION).unwrap().unwrap();
        assert!(
            decode_lanes(&data[..data.len() - 3], &meta, &summary, names.class.len()).is_none()
        );
        assert!(decode_lanes(&data, &meta, &summary, names.class.len() + 1).is_none());
    }

    fn screens(path: &Path, loading: crate::Loading, keep: bool) -> Vec<String> {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let mut cfg = crate::TuiConfig::new(vec![path.to_path_buf()]);
        cfg.loading = loading;
        cfg.keep_summaries = keep;
        let mut app = crate::App::new(cfg).unwrap();
        let t = std::time::Instant::now();
        while app.busy() || app.runs[0].ready_analysis(None).is_none() {
            assert!(t.elapsed().as_secs() < 60, "never settled");
            app.poll();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut out = Vec::new();
        for k in ['1', '+', '+', '0', '2', 's', '3', 'j', 'l'] {
            app.on_key(KeyEvent::new(KeyCode::Char(k), KeyModifiers::NONE));
            let mut term =
                ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 40)).unwrap();
            term.draw(|f| crate::draw(f, &mut app)).unwrap();
            out.push(format!("{:?}", term.backend().buffer()));
        }
        out
    }

    /// The explorer on a run with kept summaries draws what it draws on the run without
    /// them; `fuseprof tui` (background loading, keeping on) keeps them for the next open.
    #[test]
    fn kept_summaries_draw_the_same_screens() {
        let (_dir, path) = swin();
        let derived = screens(&path, crate::Loading::Blocking, false);
        // Kept, then renamed (the title and the analysis name the file as it is now).
        let kept_dir = tempfile::tempdir().unwrap();
        let kept_path = kept_dir.path().join(path.file_name().unwrap());
        let before_rename = kept_dir.path().join("imported.sqlite");
        std::fs::copy(&path, &before_rename).unwrap();
        write(&before_rename).unwrap();
        std::fs::rename(&before_rename, &kept_path).unwrap();
        let kept = screens(&kept_path, crate::Loading::Blocking, false);
        for (i, (k, d)) in kept.iter().zip(&derived).enumerate() {
            assert!(k == d, "screen {i} differs:\n{k}\n---\n{d}");
        }
        assert_eq!(kept.len(), derived.len());

        // Nothing kept when not asked to keep, nor by blocking loading.
        screens(&path, crate::Loading::Background, false);
        screens(&path, crate::Loading::Blocking, true);
        let (mut store, _) = data::open(&path).unwrap();
        assert!(store.summary(LANES, LANES_VERSION).unwrap().is_none());
        drop(store);
        // Background loading with keeping on keeps both (the writes may lag the pass).
        screens(&path, crate::Loading::Background, true);
        let t = std::time::Instant::now();
        loop {
            let (mut store, meta) = data::open(&path).unwrap();
            let summary = Summary::new(meta.first_ns, meta.last_ns);
            let names = NameInfo::load(&mut store).unwrap().class.len();
            if read_lanes(&mut store, &meta, &summary, names).is_some()
                && read_analysis(&mut store).is_some()
            {
                break;
            }
            assert!(t.elapsed().as_secs() < 60, "the summaries were never kept");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let app = {
            let mut cfg = crate::TuiConfig::new(vec![path.clone()]);
            cfg.loading = crate::Loading::Background;
            crate::App::new(cfg).unwrap()
        };
        assert!(app.runs[0].summary_kept && app.runs[0].ready_analysis(None).is_some());
        assert!(screens(&path, crate::Loading::Blocking, false) == derived);
    }
}
