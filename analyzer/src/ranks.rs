//! Distributed runs, per rank and across ranks: step time per rank and the slowest rank of
//! each step, time in collectives split into waiting (skew) and transfer, and how much of the
//! communication overlaps computation.
//!
//! A rank's records are those on its GPUs (`devices.rank`), its steps those of its own
//! threads (`processes.rank`), found as for the whole run ([`crate::steps`]) and matched across
//! ranks by position. A collective is a `communication` kernel; the k-th collective of one
//! kind on a rank is matched to its partner on the reference (lowest) rank by the end times
//! ([`fuseprof_store::match_collectives`]: the kernels of one collective end together on
//! every rank). Within a matched group the shortest duration is the transfer (the last rank
//! to arrive waits for no one) and the rest of each rank's duration is waiting. Overlap is the
//! share of a rank's communication kernel time during which a compute kernel (any other
//! class) runs on the same GPU, i.e. on another stream.

use std::collections::HashMap;

use fuseprof_store::{Collective, RankInfo, Store};
use serde::{Deserialize, Serialize};

use crate::attribution::{Item, KIND_KERNEL};
use crate::ops::{Names, Tree};
use crate::{pct, spread, steps, Class, Result, Spread};

/// The `ranks` section of the analysis (present for distributed runs only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankAnalysis {
    /// The rank the collectives were matched against (the lowest).
    pub reference_rank: i64,
    pub ranks: Vec<RankRow>,
    /// Steps by position, each with every rank's time.
    pub steps: Vec<CrossStep>,
    /// Collective kinds (kernel names) over all ranks, by total time.
    pub collectives: Vec<CollectiveRow>,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankRow {
    pub rank: i64,
    /// Where the rank number came from (`trace`, `file_name`, `order`, `device`).
    pub rank_source: String,
    pub source_path: Option<String>,
    /// How its times were put on the run's clock (`wall_clock`, `collectives`, `same_clock`,
    /// `reference`, `unaligned`), what was added to them, and how far apart the ends of
    /// its matched collectives still are (median).
    pub clock: String,
    pub clock_offset_ns: i64,
    pub clock_correction_ns: i64,
    pub residual_ns: Option<i64>,
    /// Of its collectives, how many were matched to the reference rank's when the clocks
    /// were aligned (None for the reference itself).
    pub matched_collectives: Option<i64>,
    pub pids: Vec<i64>,
    pub devices: Vec<i64>,
    /// GPU time of its kernels, split into computation (every class but communication) and
    /// communication.
    pub kernel_ns: i64,
    pub compute_ns: i64,
    pub comm_ns: i64,
    pub comm_kernels: u64,
    /// Communication time of collectives matched across ranks, split into waiting for the
    /// last rank (skew) and transfer; `comm_unmatched_ns` is the rest (no partner found).
    pub comm_wait_ns: i64,
    pub comm_transfer_ns: i64,
    pub comm_unmatched_ns: i64,
    /// Communication time during which a compute kernel ran on the same GPU, and its share.
    pub overlap_ns: i64,
    pub overlap_pct: f64,
    /// Its steps and their wall-time spread.
    pub steps: usize,
    pub step_wall: Option<Spread>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CrossStep {
    pub index: usize,
    /// Per rank, in the order of `ranks`; None where that rank has no such step.
    pub wall_ns: Vec<Option<i64>>,
    pub comm_wait_ns: Vec<Option<i64>>,
    /// The rank with the longest wall time, and how much longer it took than the shortest.
    pub slowest_rank: i64,
    pub spread_ns: i64,
    /// The rank that waited least in collectives: the one the others waited for.
    pub straggler_rank: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRow {
    pub name: String,
    /// Kernels over all ranks, and the groups they formed across ranks.
    pub kernels: u64,
    pub groups: u64,
    pub total_ns: i64,
    pub wait_ns: i64,
    pub transfer_ns: i64,
    pub unmatched_ns: i64,
}

/// Sum of the lengths of `[s, e)` ∩ `union`, where `union` is sorted and disjoint.
fn covered(union: &[(i64, i64)], s: i64, e: i64) -> i64 {
    let mut at = union.partition_point(|&(_, ue)| ue <= s);
    let mut n = 0;
    while at < union.len() && union[at].0 < e {
        n += union[at].1.min(e) - union[at].0.max(s);
        at += 1;
    }
    n
}

/// Merges intervals into a sorted, disjoint union.
fn union_of(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The cross-rank analysis of a run whose store names its ranks; `None` for other runs.
pub(crate) fn analyze_ranks(
    store: &mut Store,
    tree: &Tree,
    names: &Names,
    items: &[Item],
    devices: &[i64],
) -> Result<Option<RankAnalysis>> {
    let infos: Vec<RankInfo> = store.ranks()?;
    if infos.len() < 2 {
        return Ok(None);
    }
    let process_rank: HashMap<i64, i64> = store.process_ranks()?.into_iter().collect();
    let device_rank: HashMap<i64, i64> = store
        .device_ranks()?
        .into_iter()
        .map(|(id, rank, _)| (id, rank))
        .collect();
    let index_of: HashMap<i64, usize> =
        infos.iter().enumerate().map(|(i, r)| (r.rank, i)).collect();
    let n = infos.len();
    let mut notes = Vec::new();

    // Records by rank, through the GPU they ran on.
    let item_rank: Vec<Option<usize>> = devices
        .iter()
        .map(|d| device_rank.get(d).and_then(|r| index_of.get(r)).copied())
        .collect();
    // Sized first: grown one push at a time, each rank's copy of the records would be copied
    // again at each doubling.
    let mut counts = vec![0usize; n];
    for it in items {
        if let Some(r) = item_rank[it.device as usize] {
            counts[r] += 1;
        }
    }
    let mut per_rank: Vec<Vec<Item>> = counts.iter().map(|&c| Vec::with_capacity(c)).collect();
    let mut no_rank = 0u64;
    for it in items {
        match item_rank[it.device as usize] {
            Some(r) => per_rank[r].push(*it),
            None => no_rank += 1,
        }
    }
    if no_rank > 0 {
        notes.push(format!(
            "{no_rank} GPU records ran on GPUs of no rank and are left out of the per-rank figures"
        ));
    }
    let thread_rank: Vec<Option<usize>> = tree
        .threads
        .iter()
        .map(|(pid, _)| process_rank.get(pid).and_then(|r| index_of.get(r)).copied())
        .collect();

    // Steps per rank.
    let found: Vec<steps::Found> = (0..n)
        .map(|r| {
            steps::find_in(tree, names, &per_rank[r], &|t| {
                thread_rank.get(t as usize).copied().flatten() == Some(r)
            })
        })
        .collect();

    // Collectives per rank, sorted by end; and their matches on the reference rank.
    let mut keys: HashMap<u32, u32> = HashMap::new();
    let colls: Vec<Vec<(Collective, usize)>> = per_rank
        .iter()
        .map(|items| {
            let mut v: Vec<(Collective, usize)> = items
                .iter()
                .enumerate()
                .filter(|(_, it)| it.kind() == KIND_KERNEL && it.class == Class::Communication)
                .map(|(i, it)| {
                    let next = keys.len() as u32;
                    let key = *keys.entry(it.name).or_insert(next);
                    (
                        Collective {
                            key,
                            start_ns: it.start_ns,
                            end_ns: it.start_ns + it.dur_ns,
                        },
                        i,
                    )
                })
                .collect();
            v.sort_unstable_by_key(|(c, _)| (c.end_ns, c.start_ns));
            v
        })
        .collect();
    let reference: Vec<Collective> = colls[0].iter().map(|(c, _)| *c).collect();
    // group (reference collective index) -> members (rank, index into colls[rank])
    let mut groups: Vec<Vec<(usize, usize)>> = (0..reference.len()).map(|i| vec![(0, i)]).collect();
    for (r, rc) in colls.iter().enumerate().skip(1) {
        let other: Vec<Collective> = rc.iter().map(|(c, _)| *c).collect();
        for (j, m) in fuseprof_store::match_collectives(&reference, &other, 0)
            .into_iter()
            .enumerate()
        {
            if let Some(i) = m {
                groups[i].push((r, j));
            }
        }
    }
    // Waiting per collective (None: unmatched).
    let mut wait: Vec<Vec<Option<i64>>> = colls.iter().map(|c| vec![None; c.len()]).collect();
    let dur = |c: &Collective| c.end_ns - c.start_ns;
    let mut by_kind: HashMap<u32, CollectiveRow> = HashMap::new();
    let mut name_of_key: HashMap<u32, u32> = HashMap::new();
    for (&name, &key) in &keys {
        name_of_key.insert(key, name);
    }
    for g in &groups {
        if g.len() < 2 {
            continue;
        }
        let transfer = g
            .iter()
            .map(|&(r, j)| dur(&colls[r][j].0))
            .min()
            .unwrap_or(0);
        for &(r, j) in g {
            wait[r][j] = Some(dur(&colls[r][j].0) - transfer);
        }
        let key = colls[g[0].0][g[0].1].0.key;
        by_kind
            .entry(key)
            .or_insert_with(|| empty_row(names, name_of_key[&key]))
            .groups += 1;
    }

    let mut rows = Vec::with_capacity(n);
    for (r, info) in infos.iter().enumerate() {
        let items = &per_rank[r];
        let mut row = RankRow {
            rank: info.rank,
            rank_source: info.rank_source.clone(),
            source_path: info.source_path.clone(),
            clock: info.clock.clone(),
            clock_offset_ns: info.clock_offset_ns,
            clock_correction_ns: info.clock_correction_ns,
            residual_ns: info.residual_ns,
            matched_collectives: (r > 0).then_some(info.matched_collectives),
            pids: {
                let mut p: Vec<i64> = process_rank
                    .iter()
                    .filter(|&(_, &rk)| rk == info.rank)
                    .map(|(&pid, _)| pid)
                    .collect();
                p.sort_unstable();
                p
            },
            devices: {
                let mut d: Vec<i64> = device_rank
                    .iter()
                    .filter(|&(_, &rk)| rk == info.rank)
                    .map(|(&id, _)| id)
                    .collect();
                d.sort_unstable();
                d
            },
            kernel_ns: 0,
            compute_ns: 0,
            comm_ns: 0,
            comm_kernels: 0,
            comm_wait_ns: 0,
            comm_transfer_ns: 0,
            comm_unmatched_ns: 0,
            overlap_ns: 0,
            overlap_pct: 0.0,
            steps: found[r].windows.len(),
            step_wall: spread(
                &found[r]
                    .windows
                    .iter()
                    .map(|w| w.end_ns - w.start_ns)
                    .collect::<Vec<_>>(),
            ),
        };
        // Compute kernels' time per GPU (by the records' device index).
        let mut compute: Vec<Vec<(i64, i64)>> = vec![Vec::new(); devices.len()];
        for it in items.iter().filter(|it| it.kind() == KIND_KERNEL) {
            row.kernel_ns += it.dur_ns;
            if it.class == Class::Communication {
                row.comm_ns += it.dur_ns;
                row.comm_kernels += 1;
            } else {
                row.compute_ns += it.dur_ns;
                compute[usize::from(it.device)].push((it.start_ns, it.start_ns + it.dur_ns));
            }
        }
        let compute: Vec<Vec<(i64, i64)>> = compute.into_iter().map(union_of).collect();
        for (j, (c, i)) in colls[r].iter().enumerate() {
            let d = dur(c);
            let kind = by_kind
                .entry(c.key)
                .or_insert_with(|| empty_row(names, name_of_key[&c.key]));
            kind.kernels += 1;
            kind.total_ns += d;
            match wait[r][j] {
                Some(w) => {
                    row.comm_wait_ns += w;
                    row.comm_transfer_ns += d - w;
                    kind.wait_ns += w;
                    kind.transfer_ns += d - w;
                }
                None => {
                    row.comm_unmatched_ns += d;
                    kind.unmatched_ns += d;
                }
            }
            row.overlap_ns += covered(
                &compute[usize::from(items[*i].device)],
                c.start_ns,
                c.end_ns,
            );
        }
        row.overlap_pct = pct(row.overlap_ns, row.comm_ns);
        rows.push(row);
    }

    // Steps across ranks, by position.
    let most = found.iter().map(|f| f.windows.len()).max().unwrap_or(0);
    if found.iter().any(|f| f.windows.len() != most) {
        notes.push(format!(
            "the ranks have different numbers of steps ({}): steps are matched by position",
            found
                .iter()
                .zip(&infos)
                .map(|(f, i)| format!("rank {} {}", i.rank, f.windows.len()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // Each rank's collectives by launch time, with the running sum of their waits: a step's
    // waiting is then the difference of two sums, found by bisection, rather than a pass over
    // every collective of the run for each step. (The sums wrap, and their difference is
    // exact wherever the step's own sum fits.)
    let waits_by_launch: Vec<(Vec<i64>, Vec<i64>)> = (0..n)
        .map(|r| {
            let mut v: Vec<(i64, i64)> = colls[r]
                .iter()
                .enumerate()
                .map(|(j, (_, i))| (per_rank[r][*i].launch_ns, wait[r][j].unwrap_or(0)))
                .collect();
            v.sort_unstable_by_key(|&(t, _)| t);
            let mut sums = Vec::with_capacity(v.len() + 1);
            sums.push(0i64);
            for &(_, w) in &v {
                sums.push(sums[sums.len() - 1].wrapping_add(w));
            }
            (v.into_iter().map(|(t, _)| t).collect(), sums)
        })
        .collect();
    let mut steps_out = Vec::with_capacity(most);
    for k in 0..most {
        let wall: Vec<Option<i64>> = found
            .iter()
            .map(|f| f.windows.get(k).map(|w| w.end_ns - w.start_ns))
            .collect();
        let comm_wait: Vec<Option<i64>> = (0..n)
            .map(|r| {
                let w = found[r].windows.get(k)?;
                let (launches, sums) = &waits_by_launch[r];
                let lo = launches.partition_point(|&t| t < w.start_ns);
                let hi = launches.partition_point(|&t| t < w.end_ns).max(lo);
                Some(sums[hi].wrapping_sub(sums[lo]))
            })
            .collect();
        let (slowest, max) = wall
            .iter()
            .enumerate()
            .filter_map(|(r, w)| w.map(|w| (r, w)))
            .max_by_key(|&(r, w)| (w, std::cmp::Reverse(r)))
            .unwrap_or((0, 0));
        let min = wall.iter().flatten().min().copied().unwrap_or(0);
        let straggler = comm_wait
            .iter()
            .enumerate()
            .filter_map(|(r, w)| w.map(|w| (w, r)))
            .min()
            .filter(|_| comm_wait.iter().flatten().any(|&w| w > 0))
            .map(|(_, r)| infos[r].rank);
        steps_out.push(CrossStep {
            index: k,
            wall_ns: wall,
            comm_wait_ns: comm_wait,
            slowest_rank: infos[slowest].rank,
            spread_ns: max - min,
            straggler_rank: straggler,
        });
    }
    for r in &rows {
        if r.clock == "unaligned" {
            notes.push(format!(
                "rank {} is on its own clock (not aligned): its waiting and transfer split and \
                 step skew against other ranks mean nothing",
                r.rank
            ));
        }
    }
    let mut collectives: Vec<CollectiveRow> = by_kind.into_values().collect();
    collectives.sort_by(|a, b| (b.total_ns, &a.name).cmp(&(a.total_ns, &b.name)));
    Ok(Some(RankAnalysis {
        reference_rank: infos[0].rank,
        ranks: rows,
        steps: steps_out,
        collectives,
        notes,
    }))
}

fn empty_row(names: &Names, name: u32) -> CollectiveRow {
    CollectiveRow {
        name: names.get(name).to_string(),
        kernels: 0,
        groups: 0,
        total_ns: 0,
        wait_ns: 0,
        transfer_ns: 0,
        unmatched_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_only_the_covered_part() {
        let u = union_of(vec![(10, 20), (15, 30), (40, 50)]);
        assert_eq!(u, vec![(10, 30), (40, 50)]);
        assert_eq!(covered(&u, 0, 100), 30);
        assert_eq!(covered(&u, 25, 45), 10);
        assert_eq!(covered(&u, 30, 40), 0);
    }
}
