//! Exact nearest-rank percentiles of values that a repeatable walk produces, per key, without
//! holding the values: each walk narrows a value range known to hold the rank asked for, from a
//! histogram of every value to a histogram of the range, until the range holds one value or few
//! enough to collect and select among.
//!
//! Why: a thread's gaps between GPU calls are about as many as its calls, and holding every gap's
//! size to rank them was 31 MiB of explain's peak at 8 million calls (4 bytes each). The walk over
//! the calls is cheap beside that: the ranks here cost two or three walks, each a pass over the
//! calls in thread order, and a few kilobytes per key.
//!
//! The answers are those of [`crate::stats::nearest_ranks_unsorted`] over all of a key's values
//! (sorted ascending, the value at 1-based rank `ceil(p * n)`); values must be non-negative.

use std::collections::BTreeMap;

use causeway_store::summary::nearest_rank_index;

use crate::few_keys::FewKeys;

/// Values exact below this; above it, buckets of 1/64 of their magnitude.
const EXACT_BELOW: u64 = 128;
/// Mantissa bits of a bucket above [`EXACT_BELOW`].
const MANTISSA_BITS: u32 = 6;
/// Buckets of the first walk's histogram: the exact ones, then 64 per power of two from 2^7 to 2^63.
const LOG_BUCKETS: usize = EXACT_BELOW as usize + (64 - 7) * (1 << MANTISSA_BITS);
/// Bins of a later walk's histogram of one range.
const RANGE_BINS: u64 = 4096;
/// A range holding at most this many values has them collected and selected among.
const COLLECT_MAX: u64 = 1 << 16;

/// The exact nearest-rank values `per_mille` (in the order asked) of each key's values, as `walk`
/// produces them: `walk` is called once per narrowing, and must hand over the same values (any
/// order) each time. A key with no values is absent.
pub fn nearest_ranks_by_key<K: Ord + Copy>(
    per_mille: &[u32],
    mut walk: impl FnMut(&mut dyn FnMut(K, i64)),
) -> BTreeMap<K, Vec<i64>> {
    // the first walk: every key's count and a histogram of its values on a log scale
    let mut histograms: FewKeys<K, (u64, Vec<u32>)> = FewKeys::default();
    walk(&mut |key, v| {
        let (n, h) = histograms.entry(key, || (0, vec![0; LOG_BUCKETS]));
        *n += 1;
        h[log_bucket(value(v))] += 1;
    });
    let mut searches: Vec<Search<K>> = Vec::new();
    let mut walks = 1;
    for (key, (n, h)) in histograms.into_sorted() {
        for (slot, &p) in per_mille.iter().enumerate() {
            let k = nearest_rank_index(n, p) - 1;
            let (bucket, below) = find_rank(h.iter().map(|&c| u64::from(c)), k);
            let (lo, hi) = log_bucket_range(bucket);
            let count = u64::from(h[bucket]);
            searches.push(Search { key, slot, lo, hi, k: k - below, count, found: None });
        }
    }
    // narrow each range until its value is known; one walk serves every search still open
    while searches.iter().any(|s| s.found.is_none()) {
        for s in searches.iter_mut().filter(|s| s.found.is_none() && s.lo == s.hi) {
            s.found = Some(s.lo);
        }
        let open: Vec<usize> = (0..searches.len()).filter(|&i| searches[i].found.is_none()).collect();
        if open.is_empty() {
            break;
        }
        let mut looks: Vec<Look> = open.iter().map(|&i| Look::of(&searches[i])).collect();
        let mut of_key: FewKeys<K, Vec<usize>> = FewKeys::default();
        for (j, &i) in open.iter().enumerate() {
            of_key.entry(searches[i].key, Vec::new).push(j);
        }
        let of_key = of_key.into_sorted();
        let mut at: FewKeys<K, Option<usize>> = FewKeys::default();
        walks += 1;
        walk(&mut |key, v| {
            let Some(entry) = at.entry(key, || of_key.binary_search_by(|e| e.0.cmp(&key)).ok()) else { return };
            let v = value(v);
            for &j in &of_key[*entry].1 {
                let (s, look) = (&searches[open[j]], &mut looks[j]);
                if (s.lo..=s.hi).contains(&v) {
                    look.add(s, v);
                }
            }
        });
        for (j, look) in looks.into_iter().enumerate() {
            searches[open[j]].narrow(look);
        }
    }
    tracing::debug!(walks, "ranks: walks");
    let mut out: BTreeMap<K, Vec<i64>> = BTreeMap::new();
    for s in searches {
        let found = s.found.expect("every search ends with its value");
        out.entry(s.key).or_insert_with(|| vec![0; per_mille.len()])[s.slot] = found as i64;
    }
    out
}

/// One rank sought among one key's values: it lies in `lo..=hi`, at 0-based rank `k` among the
/// `count` values there.
struct Search<K> {
    key: K,
    slot: usize,
    lo: u64,
    hi: u64,
    k: u64,
    count: u64,
    found: Option<u64>,
}

/// What one walk gathers for a search: the values of its range, or a histogram of it.
enum Look {
    Collect(Vec<u64>),
    Bins { width: u64, counts: Vec<u64> },
}

impl Look {
    fn of<K>(s: &Search<K>) -> Look {
        if s.count <= COLLECT_MAX {
            Look::Collect(Vec::with_capacity(s.count as usize))
        } else {
            let width = (s.hi - s.lo) / RANGE_BINS + 1;
            Look::Bins { width, counts: vec![0; RANGE_BINS as usize] }
        }
    }

    fn add<K>(&mut self, s: &Search<K>, v: u64) {
        match self {
            Look::Collect(values) => values.push(v),
            Look::Bins { width, counts } => counts[((v - s.lo) / *width) as usize] += 1,
        }
    }
}

impl<K> Search<K> {
    fn narrow(&mut self, look: Look) {
        match look {
            Look::Collect(mut values) => {
                assert_eq!(values.len() as u64, self.count, "the walk handed over other values than before");
                self.found = Some(*values.select_nth_unstable(self.k as usize).1);
            }
            Look::Bins { width, counts } => {
                let (bin, below) = find_rank(counts.iter().copied(), self.k);
                self.lo += bin as u64 * width;
                self.hi = self.hi.min(self.lo + (width - 1));
                self.k -= below;
                self.count = counts[bin];
            }
        }
    }
}

/// The bin holding 0-based rank `k` of the counts' values, and how many values lie below it.
fn find_rank(counts: impl Iterator<Item = u64>, k: u64) -> (usize, u64) {
    let mut below = 0u64;
    for (i, c) in counts.enumerate() {
        if k < below + c {
            return (i, below);
        }
        below += c;
    }
    panic!("rank {k} beyond the {below} values counted");
}

fn value(v: i64) -> u64 {
    u64::try_from(v).expect("ranked values are never negative")
}

/// The log-scale bucket of `v`: exact below [`EXACT_BELOW`], then 64 buckets per power of two.
fn log_bucket(v: u64) -> usize {
    if v < EXACT_BELOW {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // 7..=63
    let m = (v >> (e - MANTISSA_BITS)) & ((1 << MANTISSA_BITS) - 1);
    EXACT_BELOW as usize + ((e - 7) as usize) * (1 << MANTISSA_BITS) + m as usize
}

/// The values (inclusive) of a [`log_bucket`].
fn log_bucket_range(b: usize) -> (u64, u64) {
    if b < EXACT_BELOW as usize {
        return (b as u64, b as u64);
    }
    let i = b - EXACT_BELOW as usize;
    let (e, m) = ((i >> MANTISSA_BITS) as u32 + 7, (i & ((1 << MANTISSA_BITS) - 1)) as u64);
    let width = 1u64 << (e - MANTISSA_BITS);
    let lo = (1u64 << e) + m * width;
    (lo, lo + (width - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::nearest_ranks_unsorted;

    #[test]
    fn log_buckets_are_ordered_and_hold_what_they_say() {
        let mut last = 0usize;
        for v in (0..100_000u64).chain([1 << 20, (1 << 32) - 1, 1 << 32, u64::MAX >> 1, u64::MAX]) {
            let b = log_bucket(v);
            assert!(b >= last, "monotone at {v}");
            last = b;
            let (lo, hi) = log_bucket_range(b);
            assert!(lo <= v && v <= hi, "{v} in bucket {b} = {lo}..={hi}");
            assert!(b < LOG_BUCKETS);
        }
    }

    fn check(values_by_key: &[(u32, Vec<i64>)], per_mille: &[u32]) {
        let walks = std::cell::Cell::new(0);
        let got = nearest_ranks_by_key(per_mille, |emit| {
            walks.set(walks.get() + 1);
            for (k, vs) in values_by_key {
                vs.iter().for_each(|&v| emit(*k, v));
            }
        });
        for (k, vs) in values_by_key {
            let want = nearest_ranks_unsorted(&mut vs.clone(), per_mille);
            assert_eq!(got.get(k).cloned(), want, "key {k}");
        }
        assert!(walks.get() <= 4, "{} walks", walks.get());
    }

    #[test]
    fn ranks_match_a_selection_over_all_the_values() {
        let mut next = crate::test_rng::xorshift(0x5DEE_CE66_D1CE_4E5B);
        let spread: Vec<i64> = (0..50_000).map(|_| next(5_000_000_000)).collect();
        // a loop's rhythm: most gaps within a few ns of 40 us, a few long ones
        let tight: Vec<i64> =
            (0..300_000).map(|i| if i % 1000 == 0 { 3_000_000_000 } else { 40_000 + (i % 7) }).collect();
        let equal = vec![12_345i64; 200_000];
        let small: Vec<i64> = (0..1000).map(|i| i % 90).collect();
        let one = vec![7i64];
        let keys = [(1, spread), (2, tight), (3, equal), (4, small), (5, one)];
        check(&keys, &[500, 750]);
        check(&keys, &[0, 1, 999, 1000, 500]);
    }

    #[test]
    fn a_key_without_values_is_absent() {
        let got = nearest_ranks_by_key::<u32>(&[500], |emit| emit(3, 9));
        assert_eq!(got.into_iter().collect::<Vec<_>>(), vec![(3, vec![9])]);
    }
}
