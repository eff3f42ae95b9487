//! A map for the handful of distinct keys among millions of rows (threads, ops): a sorted list
//! that remembers the entry looked up last. Rows come in runs of one key, so most lookups cost one
//! comparison and the rest a binary search over a few entries, cheaper than hashing every row.

/// Keys in ascending order, each with its value.
pub struct FewKeys<K, V> {
    entries: Vec<(K, V)>,
    last: usize,
}

impl<K: Ord + Copy, V> Default for FewKeys<K, V> {
    fn default() -> Self {
        FewKeys { entries: Vec::new(), last: usize::MAX }
    }
}

impl<K: Ord + Copy, V> FewKeys<K, V> {
    /// The value of `key`, made by `make` the first time the key is seen.
    pub fn entry(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if self.entries.get(self.last).is_none_or(|e| e.0 != key) {
            self.last = match self.entries.binary_search_by(|e| e.0.cmp(&key)) {
                Ok(i) => i,
                Err(i) => {
                    self.entries.insert(i, (key, make()));
                    i
                }
            };
        }
        &mut self.entries[self.last].1
    }

    /// The entries, ascending by key.
    pub fn into_sorted(self) -> Vec<(K, V)> {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_sorted_with_every_value_of_their_key() {
        let mut m: FewKeys<u32, Vec<usize>> = FewKeys::default();
        let keys = [5, 5, 3, 9, 3, 3, 5, 1, 9];
        for (i, &k) in keys.iter().enumerate() {
            m.entry(k, Vec::new).push(i);
        }
        assert_eq!(m.into_sorted(), vec![(1, vec![7]), (3, vec![2, 4, 5]), (5, vec![0, 1, 6]), (9, vec![3, 8])]);
    }

    #[test]
    fn make_runs_once_per_key() {
        let mut m: FewKeys<u8, usize> = FewKeys::default();
        let mut made = 0;
        for (i, k) in [2u8, 2, 7, 2, 7].into_iter().enumerate() {
            m.entry(k, || {
                made += 1;
                i
            });
        }
        assert_eq!((made, m.into_sorted()), (2, vec![(2, 0), (7, 2)]));
    }
}
