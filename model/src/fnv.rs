//! FNV-1a 64, the one hash Causeway computes itself: the `stack_hash` of a user stack, the key of a
//! launch configuration, and the fingerprint of the kernel BTF a build's BPF objects were compiled
//! against (computed by `probes/build.rs`, which includes this file as is, and compared at load time).
//! Stored keys depend on it: changing it changes every `stack_hash` and `launch_config` written.
//!
//! Self-contained on purpose (no `crate::` paths): a build script includes it with `#[path]`.

/// An FNV-1a 64 state; [`Fnv1a64::write`] as many byte slices as the value has parts.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// The empty state (the offset basis).
    pub const fn new() -> Self {
        Fnv1a64(Self::OFFSET_BASIS)
    }

    /// Hash `bytes` after what was written before.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash of everything written so far.
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a 64 of one byte slice.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv1a64::new();
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        // from the FNV reference test suite (draft-eastlake-fnv): "" and "a", "foobar"
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn writing_in_parts_is_writing_the_whole() {
        let mut h = Fnv1a64::new();
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.finish(), fnv1a64(b"foobar"));
    }
}
