//! A small deterministic generator for the tests that draw many cases (xorshift64): the same
//! sequence on every run, no dependency.

/// `next(m)`: the next number in `0..m`, from `seed` (not 0).
pub fn xorshift(seed: u64) -> impl FnMut(u64) -> i64 {
    let mut x = seed;
    move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m) as i64
    }
}
