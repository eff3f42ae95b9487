//! An array written once, held in memory up to a budget and, past it, in a memory-mapped temporary
//! file.
//!
//! explain holds every GPU call of its scope (48 bytes each: 3.7 GiB for the 81 million calls of a
//! 100-million-event trace). Past [`calls_memory_budget`] the calls live in an unlinked file under
//! the temporary directory (`TMPDIR`), mapped into the process once written: the passes read them
//! in time order, so the kernel reads ahead and drops pages when memory is short, and the process's
//! own (anonymous) memory no longer grows with the trace. With memory to spare the pages stay
//! cached and the passes run as on the heap.
//!
//! [`SpillVecBuilder`] appends with `pwrite` in chunks of 4 MiB, so a full disk is an error of a
//! write (a store into a mapped page the disk has no room for would kill the process with SIGBUS);
//! [`SpillVecBuilder::finish`] maps the file and gives the [`SpillVec`], read and changed in place
//! as a slice. Any error of the file (a full disk, no temporary directory) moves the items back to
//! the heap with a warning: nothing is lost.
//!
//! The price, at 100M events on a 2-core VM with memory to spare: loading the calls takes 1.3-1.4x
//! as long (the kernel writes the file's pages back to disk as they pile up), explain as a whole
//! 1.1-1.5x.

use std::fs::File;
use std::io::ErrorKind;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;

use memmap2::MmapMut;

/// The environment variable that sets [`calls_memory_budget`], MiB.
pub const CALLS_MEMORY_ENV: &str = "CAUSEWAY_CALLS_MEMORY_MIB";

/// The default of [`calls_memory_budget`]: 1 GiB, about 22 million calls (a trace of 27 million
/// events).
const DEFAULT_CALLS_MEMORY_MIB: usize = 1024;

/// Bytes of calls an analysis holds in memory before they go to a mapped file:
/// `CAUSEWAY_CALLS_MEMORY_MIB` (0: every scope's calls in a file), else 1 GiB.
pub fn calls_memory_budget() -> usize {
    std::env::var(CALLS_MEMORY_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(DEFAULT_CALLS_MEMORY_MIB)
        .saturating_mul(1 << 20)
}

/// Bytes appended to the file at a time.
const CHUNK_BYTES: usize = 4 << 20;

/// Appends items: on the heap up to `budget` bytes, to a temporary file beyond.
pub struct SpillVecBuilder<T: Copy> {
    building: Building<T>,
    budget: usize,
}

enum Building<T: Copy> {
    Heap(Vec<T>),
    /// `written` items in the file, then `chunk`.
    File {
        file: File,
        written: usize,
        chunk: Vec<T>,
    },
}

impl<T: Copy> SpillVecBuilder<T> {
    /// Room for `n` items: to a file from the start when `n` of them exceed `budget` bytes, else on
    /// the heap (address space only: pages are touched as items arrive).
    pub fn with_capacity(n: usize, budget: usize) -> SpillVecBuilder<T> {
        assert!(std::mem::size_of::<T>() > 0, "no file for zero-sized items");
        let mut b = SpillVecBuilder { building: Building::Heap(Vec::new()), budget };
        if n.saturating_mul(std::mem::size_of::<T>()) > budget {
            b.spill();
        }
        if let Building::Heap(h) = &mut b.building {
            h.reserve_exact(n);
        }
        b
    }

    pub fn len(&self) -> usize {
        match &self.building {
            Building::Heap(h) => h.len(),
            Building::File { written, chunk, .. } => written + chunk.len(),
        }
    }

    pub fn push(&mut self, v: T) {
        match &mut self.building {
            Building::Heap(h) => {
                if (h.len() + 1).saturating_mul(std::mem::size_of::<T>()) > self.budget {
                    self.spill();
                    return self.push(v);
                }
                h.push(v);
            }
            Building::File { file, written, chunk } => {
                chunk.push(v);
                if chunk.len() == chunk.capacity() {
                    match write_at(file, chunk, *written) {
                        Ok(()) => {
                            *written += chunk.len();
                            chunk.clear();
                        }
                        Err(e) => self.unspill(e),
                    }
                }
            }
        }
    }

    /// The items, in a mapped file when they went to one.
    pub fn finish(mut self) -> SpillVec<T> {
        let (file, written, chunk) = match std::mem::replace(&mut self.building, Building::Heap(Vec::new())) {
            Building::Heap(h) => return SpillVec::Heap(h),
            Building::File { file, written, chunk } => (file, written, chunk),
        };
        let len = written + chunk.len();
        if len == 0 {
            return SpillVec::Heap(Vec::new());
        }
        let mapped = write_at(&file, &chunk, written).and_then(|()| {
            // SAFETY: the file is unlinked (`tempfile::tempfile`) and this process's own: nothing
            // else changes it under the mapping.
            unsafe { memmap2::MmapOptions::new().len(len * std::mem::size_of::<T>()).map_mut(&file) }
        });
        match mapped {
            Ok(map) => SpillVec::Mapped(Mapped { map, len, _items: PhantomData }),
            Err(e) => {
                self.building = Building::File { file, written, chunk };
                self.unspill(e);
                match self.building {
                    Building::Heap(h) => SpillVec::Heap(h),
                    Building::File { .. } => unreachable!("unspill moves the items to the heap"),
                }
            }
        }
    }

    /// From the heap to a file (or, when no file can be had, on the heap with no budget).
    fn spill(&mut self) {
        let Building::Heap(h) = &mut self.building else { return };
        let chunk_items = (CHUNK_BYTES / std::mem::size_of::<T>()).max(1);
        let file = tempfile::tempfile().and_then(|f| write_at(&f, h, 0).map(|()| f));
        match file {
            Ok(file) => {
                self.building = Building::File { file, written: h.len(), chunk: Vec::with_capacity(chunk_items) }
            }
            Err(e) => {
                tracing::warn!("holding {} items in memory: no temporary file for them ({e})", h.len());
                self.budget = usize::MAX;
            }
        }
    }

    /// Back to the heap after the file failed with `e`: the items written are read back.
    fn unspill(&mut self, e: std::io::Error) {
        let Building::File { file, written, chunk } = &mut self.building else { return };
        tracing::warn!("moving {} items back to memory: their temporary file failed ({e})", *written + chunk.len());
        let mut h: Vec<T> = Vec::with_capacity((*written + chunk.len()) * 2);
        if let Err(e) = read_into(file, &mut h, *written) {
            // the file took the items and cannot give them back: no way on without them
            panic!("reading {written} items back from their temporary file: {e}");
        }
        h.extend_from_slice(chunk);
        self.building = Building::Heap(h);
        self.budget = usize::MAX;
    }
}

impl<T: Copy> Default for SpillVecBuilder<T> {
    fn default() -> Self {
        SpillVecBuilder::with_capacity(0, calls_memory_budget())
    }
}

/// Writes `items` at item offset `at` of `file`. The bytes go to the kernel by pointer (`pwrite`):
/// an item's padding is never read as a Rust value.
fn write_at<T: Copy>(file: &File, items: &[T], at: usize) -> std::io::Result<()> {
    let (ptr, offset) = (items.as_ptr().cast::<u8>(), at * std::mem::size_of::<T>());
    move_bytes(
        std::mem::size_of_val(items),
        (ErrorKind::WriteZero, "the temporary file took no bytes"),
        |done, left| {
            // SAFETY: `ptr + done .. ptr + done + left` lies inside `items`.
            unsafe { libc::pwrite(file.as_raw_fd(), ptr.add(done).cast(), left, (offset + done) as libc::off_t) }
        },
    )
}

/// Reads the first `n` items of `file` onto the end of `into` (empty, with room for `n`).
fn read_into<T: Copy>(file: &File, into: &mut Vec<T>, n: usize) -> std::io::Result<()> {
    assert!(into.is_empty() && into.capacity() >= n);
    let ptr = into.as_mut_ptr().cast::<u8>();
    move_bytes(
        n * std::mem::size_of::<T>(),
        (ErrorKind::UnexpectedEof, "the temporary file is short"),
        |done, left| {
            // SAFETY: `ptr + done .. ptr + done + left` lies inside `into`'s allocation.
            unsafe { libc::pread(file.as_raw_fd(), ptr.add(done).cast(), left, done as libc::off_t) }
        },
    )?;
    // SAFETY: the `n` items were written by `write_at` from values of `T` and read back whole.
    unsafe { into.set_len(n) };
    Ok(())
}

/// Moves `total` bytes with `io(done, left)` (a `pread` or `pwrite` of the `left` bytes after the
/// first `done`), again after a partial move or an interruption; a move of no bytes is the error
/// `none`.
fn move_bytes(
    total: usize,
    none: (ErrorKind, &str),
    mut io: impl FnMut(usize, usize) -> libc::ssize_t,
) -> std::io::Result<()> {
    let mut done = 0;
    while done < total {
        match io(done, total - done) {
            n if n > 0 => done += n as usize,
            0 => return Err(std::io::Error::new(none.0, none.1)),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Items on the heap or in a mapped temporary file, as a slice.
pub enum SpillVec<T: Copy> {
    Heap(Vec<T>),
    Mapped(Mapped<T>),
}

impl<T: Copy> SpillVec<T> {
    /// Whether the items are in a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self, SpillVec::Mapped(_))
    }
}

impl<T: Copy> Default for SpillVec<T> {
    fn default() -> Self {
        SpillVec::Heap(Vec::new())
    }
}

impl<T: Copy> Deref for SpillVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            SpillVec::Heap(h) => h,
            SpillVec::Mapped(m) => m,
        }
    }
}

impl<T: Copy> DerefMut for SpillVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            SpillVec::Heap(h) => h,
            SpillVec::Mapped(m) => m,
        }
    }
}

impl<T: Copy> std::fmt::Debug for SpillVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillVec").field("len", &self.len()).field("mapped", &self.is_mapped()).finish()
    }
}

impl<T: Copy> std::fmt::Debug for SpillVecBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let to_file = matches!(self.building, Building::File { .. });
        f.debug_struct("SpillVecBuilder").field("len", &self.len()).field("to_file", &to_file).finish()
    }
}

/// `len` items of `T` mapped from an unlinked temporary file that holds exactly them.
pub struct Mapped<T> {
    map: MmapMut,
    len: usize,
    _items: PhantomData<T>,
}

impl<T> Deref for Mapped<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` items written from values of `T`, aligned (a mapping
        // starts on a page); the file is this process's own.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T> DerefMut for Mapped<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the slice the only view.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().cast::<T>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Item = (u64, u32);
    const ITEM: usize = std::mem::size_of::<Item>();

    #[test]
    fn a_budget_keeps_small_arrays_in_memory_and_maps_large_ones() {
        let fill = |cap: usize, budget: usize, n: usize| {
            let mut b: SpillVecBuilder<Item> = SpillVecBuilder::with_capacity(cap, budget);
            (0..n as u64).for_each(|i| b.push((i, 0)));
            b.finish().is_mapped()
        };
        assert!(!fill(10, 10 * ITEM, 10));
        assert!(fill(11, 10 * ITEM, 1), "more than the budget announced: to a file from the start");
        assert!(fill(0, 10 * ITEM, 11), "more than the budget pushed: spilled on the way");
        assert!(!fill(11, 10 * ITEM, 0), "nothing pushed: nothing mapped");
    }

    #[test]
    fn pushes_past_the_budget_and_many_chunks_keep_every_item_in_order() {
        let n = 3 * CHUNK_BYTES / ITEM + 17;
        let want: Vec<Item> = (0..n as u64).map(|i| (i * 7919 % 5003, i as u32)).collect();
        // spilled while growing (from an empty heap array), to a file from the start, never mapped
        for (cap, budget, mapped) in [(0, 100 * ITEM, true), (3, 0, true), (0, usize::MAX, false)] {
            let mut b = SpillVecBuilder::with_capacity(cap, budget);
            for &w in &want {
                b.push(w);
            }
            assert_eq!(b.len(), n);
            let mut v = b.finish();
            assert_eq!(v.is_mapped(), mapped, "capacity {cap}, budget {budget}");
            assert!(*v == *want, "mapped: {mapped}");
            v.sort_unstable();
            let mut sorted = want.clone();
            sorted.sort_unstable();
            assert!(*v == *sorted, "sorted in place, mapped: {mapped}");
        }
    }

    #[test]
    fn a_failing_file_gives_its_items_back_to_the_heap() {
        let mut b: SpillVecBuilder<Item> = SpillVecBuilder::with_capacity(0, 0);
        for i in 0..1000u64 {
            b.push((i, 1));
        }
        b.unspill(std::io::Error::other("planted"));
        for i in 1000..1500u64 {
            b.push((i, 1));
        }
        let v = b.finish();
        assert!(!v.is_mapped());
        assert!(v.iter().enumerate().all(|(i, &(x, y))| x == i as u64 && y == 1) && v.len() == 1500);
    }
}
