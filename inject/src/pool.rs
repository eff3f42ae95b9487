//! The activity buffers handed to CUPTI: at most [`SLOTS`] of [`BUFFER_SIZE`] bytes (8 MiB), each
//! allocated the first time it is needed and reused after. Taking and giving back are lock-free (a
//! compare-and-swap per slot), because CUPTI asks for buffers on the application's threads, in the
//! middle of a kernel launch: a thread never waits here. An empty pool gives NULL, and CUPTI drops
//! the records that had no room (counted by `cuptiActivityGetNumDroppedRecords`).

use std::alloc::{alloc, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

/// One buffer's size: 128 KiB.
pub const BUFFER_SIZE: usize = 128 * 1024;
/// How many buffers at most.
pub const SLOTS: usize = 64;
/// CUPTI's buffer alignment (`ACTIVITY_RECORD_ALIGNMENT`).
const ALIGN: usize = 8;
const LAYOUT: Layout = match Layout::from_size_align(BUFFER_SIZE, ALIGN) {
    Ok(l) => l,
    Err(_) => panic!("a valid layout"),
};

const EMPTY: u8 = 0; // never allocated
const FREE: u8 = 1; // allocated, in the pool
const LENT: u8 = 2; // with CUPTI (or being allocated)

/// The pool.
pub struct Pool {
    state: [AtomicU8; SLOTS],
    ptr: [AtomicPtr<u8>; SLOTS],
    /// How many requests found the pool empty (or memory short).
    pub refused: AtomicU64,
}

impl Pool {
    /// An empty pool (nothing allocated).
    pub const fn new() -> Pool {
        Pool {
            state: [const { AtomicU8::new(EMPTY) }; SLOTS],
            ptr: [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS],
            refused: AtomicU64::new(0),
        }
    }

    /// A buffer of [`BUFFER_SIZE`] bytes, or NULL (counted in `refused`) when all are lent.
    pub fn take(&self) -> *mut u8 {
        // a free one first, so the pool grows only when all allocated ones are lent
        for want in [FREE, EMPTY] {
            for i in 0..SLOTS {
                if self.state[i].compare_exchange(want, LENT, Ordering::Acquire, Ordering::Relaxed).is_err() {
                    continue;
                }
                if want == FREE {
                    return self.ptr[i].load(Ordering::Acquire);
                }
                // SAFETY: LAYOUT has a non-zero size.
                let p = unsafe { alloc(LAYOUT) };
                if p.is_null() {
                    self.state[i].store(EMPTY, Ordering::Release);
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    return p;
                }
                self.ptr[i].store(p, Ordering::Release);
                return p;
            }
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        std::ptr::null_mut()
    }

    /// Whether `p` is one of the pool's buffers (CUPTI may hand us another client's buffer after
    /// we register again: its records are that client's, never read nor freed here).
    pub fn owns(&self, p: *mut u8) -> bool {
        !p.is_null() && (0..SLOTS).any(|i| self.ptr[i].load(Ordering::Acquire) == p)
    }

    /// Gives `p` back; false when it is not one of the pool's lent buffers (then nothing changes).
    pub fn give_back(&self, p: *mut u8) -> bool {
        if p.is_null() {
            return false;
        }
        for i in 0..SLOTS {
            if self.ptr[i].load(Ordering::Acquire) == p {
                return self.state[i].compare_exchange(LENT, FREE, Ordering::Release, Ordering::Relaxed).is_ok();
            }
        }
        false
    }

    /// How many buffers are allocated (lent or free).
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.state.iter().filter(|s| s.load(Ordering::Relaxed) != EMPTY).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_lends_at_most_64_buffers_and_reuses_them() {
        let pool = Pool::new();
        let taken: Vec<*mut u8> = (0..SLOTS).map(|_| pool.take()).collect();
        assert!(taken.iter().all(|p| !p.is_null() && (*p as usize) % ALIGN == 0));
        assert_eq!(pool.allocated(), SLOTS);
        assert!(pool.take().is_null());
        assert_eq!(pool.refused.load(Ordering::Relaxed), 1);
        assert!(pool.give_back(taken[5]));
        assert!(!pool.give_back(taken[5]), "given back twice");
        assert!(!pool.give_back(8 as *mut u8), "not the pool's");
        assert!(pool.owns(taken[0]) && !pool.owns(8 as *mut u8) && !pool.owns(std::ptr::null_mut()));
        assert_eq!(pool.take(), taken[5]);
        assert_eq!(pool.allocated(), SLOTS);
    }

    #[test]
    fn threads_take_and_give_back_without_losing_a_buffer() {
        let pool = std::sync::Arc::new(Pool::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let p = pool.take();
                        if !p.is_null() {
                            assert!(pool.give_back(p));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(pool.allocated() <= 4);
        let all: Vec<*mut u8> = (0..SLOTS).map(|_| pool.take()).collect();
        assert!(all.iter().all(|p| !p.is_null()));
    }
}
