//! Sorting records into exactly the order `slice::sort_unstable_by_key` gives, faster on the
//! nearly sorted input a store gives (records of one step arrive mostly in time order, and the
//! steps one after another).
//!
//! Where no two elements have equal keys there is only one sorted order, and any sort finds it:
//! [`sort_like_unstable`] merges the ascending runs the input already has, galloping over the
//! parts of neighbouring runs that do not overlap. Where keys repeat, the order among equal
//! elements is `sort_unstable_by_key`'s own (and the analysis's results depend on it), so the
//! input order is restored and that sort runs after all.

/// Runs shorter than this on average are not worth merging: the input is not nearly sorted.
const MIN_MEAN_RUN: usize = 16;

/// How [`sort_like_unstable`] sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// By merging the input's runs.
    Merged,
    /// By merging, then (keys repeat) restoring the input order and `sort_unstable_by_key`.
    MergedThenUnstable,
    /// With `sort_unstable_by_key` (the input is not nearly sorted).
    Unstable,
}

/// Sorts `v` by `key` into the order that `v.sort_unstable_by_key(key)` gives. `seq` is each
/// element's position in the input (any increasing numbering of it), used to restore that
/// order when equal keys make it matter.
pub(crate) fn sort_like_unstable<T: Copy, K: Ord>(
    v: &mut [T],
    key: impl Fn(&T) -> K,
    seq: impl Fn(&T) -> u32,
) -> Path {
    sort_runs(v, key, seq, false)
}

/// [`sort_like_unstable`] of `v`, which holds the input `permuted` (when true) rather than in
/// its order.
fn sort_runs<T: Copy, K: Ord>(
    v: &mut [T],
    key: impl Fn(&T) -> K,
    seq: impl Fn(&T) -> u32,
    permuted: bool,
) -> Path {
    // Ends of the ascending runs.
    let mut ends: Vec<usize> = Vec::new();
    for i in 1..v.len() {
        if key(&v[i]) < key(&v[i - 1]) {
            ends.push(i);
            if ends.len() > v.len() / MIN_MEAN_RUN {
                if permuted {
                    v.sort_unstable_by_key(&seq);
                }
                v.sort_unstable_by_key(key);
                return Path::Unstable;
            }
        }
    }
    ends.push(v.len());
    let mut buf: Vec<T> = Vec::new();
    while ends.len() > 1 {
        // Merge neighbouring runs pairwise: [0, e0) with [e0, e1), [e1, e2) with [e2, e3)...
        let mut next = Vec::with_capacity(ends.len().div_ceil(2));
        let mut start = 0;
        for pair in ends.chunks(2) {
            match *pair {
                [mid, end] => {
                    merge(&mut v[start..end], mid - start, &key, &mut buf);
                    next.push(end);
                    start = end;
                }
                [end] => {
                    next.push(end);
                    start = end;
                }
                _ => unreachable!("chunks of two"),
            }
        }
        ends = next;
    }
    if v.windows(2).any(|w| key(&w[0]) == key(&w[1])) {
        v.sort_unstable_by_key(&seq);
        v.sort_unstable_by_key(key);
        return Path::MergedThenUnstable;
    }
    Path::Merged
}

/// Streams beyond this many are not worth partitioning into: [`sort_like_unstable_streams`]
/// sorts as [`sort_like_unstable`] does.
const MAX_STREAMS: usize = 64;

/// [`sort_like_unstable`] for input that interleaves a few sorted (or nearly sorted) streams:
/// the calls of several processes, each handing out correlation ids in its own order, or the
/// records of several GPUs. Each element's `stream` (below `streams`) is read twice, the
/// elements gathered stream by stream (keeping their order), and the streams' runs merged.
/// Interleaved, the streams break each other's runs at every switch, and the input reads as
/// unsorted.
pub(crate) fn sort_like_unstable_streams<T: Copy, K: Ord>(
    v: &mut Vec<T>,
    key: impl Fn(&T) -> K,
    seq: impl Fn(&T) -> u32,
    stream: impl Fn(&T) -> usize,
    streams: usize,
) -> Path {
    if !(2..=MAX_STREAMS).contains(&streams) {
        return sort_like_unstable(v, key, seq);
    }
    let Some(&first) = v.first() else {
        return Path::Merged;
    };
    let stream = |x: &T| stream(x).min(streams - 1);
    let mut at = [0usize; MAX_STREAMS + 1];
    for x in v.iter() {
        at[stream(x) + 1] += 1;
    }
    for s in 1..=streams {
        at[s] += at[s - 1];
    }
    let mut gathered = vec![first; v.len()];
    for x in v.iter() {
        let s = stream(x);
        gathered[at[s]] = *x;
        at[s] += 1;
    }
    *v = gathered;
    sort_runs(v, key, seq, true)
}

/// Merges the sorted runs `v[..mid]` and `v[mid..]` (order among equal keys unspecified).
fn merge<T: Copy, K: Ord>(v: &mut [T], mid: usize, key: &impl Fn(&T) -> K, buf: &mut Vec<T>) {
    if mid == 0 || mid == v.len() || key(&v[mid - 1]) <= key(&v[mid]) {
        return;
    }
    // Elements of the left run below the right run's first, and of the right run above the
    // left run's last, are in place already.
    let first_right = key(&v[mid]);
    let lo = v[..mid].partition_point(|x| key(x) <= first_right);
    let last_left = key(&v[mid - 1]);
    let hi = mid + v[mid..].partition_point(|x| key(x) < last_left);
    let v = &mut v[lo..hi];
    let mid = mid - lo;
    buf.clear();
    if mid <= v.len() - mid {
        // Left part to the buffer, merged forwards.
        buf.extend_from_slice(&v[..mid]);
        let (mut i, mut j, mut out) = (0, mid, 0);
        while i < buf.len() && j < v.len() {
            if key(&v[j]) < key(&buf[i]) {
                v[out] = v[j];
                j += 1;
            } else {
                v[out] = buf[i];
                i += 1;
            }
            out += 1;
        }
        v[out..out + buf.len() - i].copy_from_slice(&buf[i..]);
    } else {
        // Right part to the buffer, merged backwards.
        buf.extend_from_slice(&v[mid..]);
        let (mut i, mut j, mut out) = (mid, buf.len(), v.len());
        while i > 0 && j > 0 {
            out -= 1;
            if key(&buf[j - 1]) < key(&v[i - 1]) {
                v[out] = v[i - 1];
                i -= 1;
            } else {
                v[out] = buf[j - 1];
                j -= 1;
            }
        }
        v[..j].copy_from_slice(&buf[..j]);
    }
}

#[cfg(test)]
mod tests {
    use super::{sort_like_unstable, sort_like_unstable_streams, Path};

    /// An element whose key may repeat, and whose payload tells equal-key elements apart.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct E {
        key: (u16, i64),
        payload: u32,
        seq: u32,
    }

    fn elements(keys: &[(u16, i64)]) -> Vec<E> {
        keys.iter()
            .enumerate()
            .map(|(i, &key)| E {
                key,
                payload: (i as u32).wrapping_mul(2_654_435_761),
                seq: i as u32,
            })
            .collect()
    }

    fn check(keys: &[(u16, i64)]) -> Path {
        let mut want = elements(keys);
        want.sort_unstable_by_key(|e| e.key);
        let mut got = elements(keys);
        let path = sort_like_unstable(&mut got, |e| e.key, |e| e.seq);
        assert_eq!(got, want, "keys {keys:?}");
        path
    }

    /// As `check`, through the streams given by `stream` (of `streams`).
    fn check_streams(keys: &[(u16, i64)], stream: impl Fn(&E) -> usize, streams: usize) -> Path {
        let mut want = elements(keys);
        want.sort_unstable_by_key(|e| e.key);
        let mut got = elements(keys);
        let path = sort_like_unstable_streams(&mut got, |e| e.key, |e| e.seq, stream, streams);
        assert_eq!(got, want, "keys {keys:?}");
        path
    }

    #[test]
    fn gives_sort_unstable_order_through_streams() {
        use Path::*;
        let by_payload: fn(&E) -> usize = |e| (e.payload % 3) as usize;
        let by_key: fn(&E) -> usize = |e| e.key.0 as usize;
        assert_eq!(check_streams(&[], by_key, 2), Merged);
        assert_eq!(check_streams(&[(1, 1), (0, 2)], by_key, 2), Merged);
        let mut next = rng(0x2545_f491_4f6c_dd1d);
        for n in [100usize, 1_000, 20_000] {
            // Two processes' calls by correlation id, their ids overlapping, taking turns in
            // bursts: unsorted as a whole, sorted within each stream.
            let mut ids = [0i64; 2];
            let turns: Vec<(u16, i64)> = (0..n)
                .map(|_| {
                    let p = next(2) as usize;
                    ids[p] += 1 + next(3) as i64;
                    (p as u16, ids[p])
                })
                .collect();
            let swapped: Vec<(u16, i64)> = turns
                .iter()
                .map(|&(p, id)| (0, id * 2 + i64::from(p)))
                .collect();
            let by_parity: fn(&E) -> usize = |e| (e.key.1 & 1) as usize;
            assert_eq!(check(&swapped), Unstable);
            assert_eq!(check_streams(&swapped, by_parity, 2), Merged);
            // Two GPUs' records, the device the key's first part.
            assert_eq!(check_streams(&turns, by_key, 2), Merged);
            // Ties across the streams (both processes' ids overlap): the order among equal
            // keys is still sort_unstable's.
            let ties: Vec<(u16, i64)> = turns.iter().map(|&(_, id)| (0, id)).collect();
            let process = |e: &E| turns[e.seq as usize].0 as usize;
            assert_eq!(check_streams(&ties, process, 2), MergedThenUnstable);
            // Streams that do not sort the input, with ties: sort_unstable from the input's
            // own order.
            let random: Vec<(u16, i64)> = (0..n).map(|_| (0, next(50) as i64)).collect();
            assert_eq!(check_streams(&random, by_payload, 3), Unstable);
            // Streams numbered past the count given share the last.
            assert_eq!(check_streams(&random, |e| e.payload as usize, 2), Unstable);
            // Too many streams: as without them.
            assert_eq!(check_streams(&swapped, by_parity, 65), Unstable);
        }
    }

    /// A deterministic pseudo-random sequence.
    fn rng(mut x: u64) -> impl FnMut(u64) -> u64 {
        move |n| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        }
    }

    #[test]
    fn gives_sort_unstable_order_on_every_shape_of_input() {
        use Path::*;
        assert_eq!(check(&[]), Merged);
        assert_eq!(check(&[(0, 1)]), Merged);
        // Too short for runs to pay.
        assert_eq!(check(&[(0, 2), (0, 1)]), Unstable);
        let mut next = rng(0x9e37_79b9_7f4a_7c15);
        for n in [100usize, 1_000, 20_000] {
            let sorted: Vec<(u16, i64)> = (0..n as i64).map(|i| (0, i * 10)).collect();
            assert_eq!(check(&sorted), Merged);
            let reversed: Vec<(u16, i64)> = sorted.iter().rev().copied().collect();
            assert_eq!(check(&reversed), Unstable);
            let random: Vec<(u16, i64)> = (0..n).map(|_| (0, next(1 << 40) as i64)).collect();
            assert_eq!(check(&random), Unstable);
            let few_keys: Vec<(u16, i64)> =
                (0..n).map(|_| (next(2) as u16, next(8) as i64)).collect();
            assert_eq!(check(&few_keys), Unstable);
            // Nearly sorted in blocks (the records of one step, a few out of place), blocks in
            // order, the last sixth on a second device: the input the merge is for.
            let blocks: Vec<(u16, i64)> = (0..n as i64)
                .map(|i| {
                    let late = if next(40) == 0 { 15 } else { 0 };
                    let device = (i >= n as i64 * 5 / 6) as u16;
                    (device, (i / 50) * 1_000 + (i % 50) * 10 + late)
                })
                .collect();
            assert_eq!(check(&blocks), Merged);
            // The same with some keys repeated.
            let mut ties = blocks.clone();
            for i in (1..n).step_by(97) {
                ties[i] = ties[i - 1];
            }
            assert_eq!(check(&ties), MergedThenUnstable);
            // Two interleaved sorted sequences per block (two threads' calls).
            let interleaved: Vec<(u16, i64)> = (0..n as i64)
                .map(|i| {
                    let (block, j) = (i / 100, i % 100);
                    let t = if j < 50 { j * 2 } else { (j - 50) * 2 + 1 };
                    (0, block * 1_000 + t)
                })
                .collect();
            assert_eq!(check(&interleaved), Merged);
            // A long sorted run with a short one appended that belongs all over it (memcpys
            // read after every kernel), and the other way round.
            let mut appended = sorted.clone();
            appended.extend((0..n as i64 / 10).map(|i| (0, i * 98 + 5)));
            assert_eq!(check(&appended), Merged);
            let mut prepended: Vec<(u16, i64)> =
                (0..n as i64 / 10).map(|i| (0, i * 98 + 5)).collect();
            prepended.extend(&sorted);
            assert_eq!(check(&prepended), Merged);
        }
    }
}
