//! The allocator every binary of the crate uses, when its freed pages go back to the kernel,
//! and the size past which block tables stop fitting in the processor's caches.

use std::ffi::c_long;
use std::sync::{Mutex, PoisonError};

/// mimalloc: thread-local free lists, no lock when one thread frees what another allocated
/// (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod ffi {
    use std::ffi::{c_int, c_long};

    // mimalloc's own entry points, linked in with the allocator above.
    unsafe extern "C" {
        /// With `force`, returns every free page of the calling thread's heap and of the
        /// shared arenas to the kernel.
        pub fn mi_collect(force: bool);
        pub fn mi_option_get(option: c_int) -> c_long;
        pub fn mi_option_set(option: c_int, value: c_long);
    }

    /// `mi_option_purge_delay`: how long (ms) freed pages are kept before they go back to
    /// the kernel. An option's number is part of mimalloc's ABI (a retired option keeps its
    /// number as `deprecated_*`); it is 15 in both versions the crate vendors.
    pub const PURGE_DELAY: c_int = 15;
}

/// Blocks that the KV tables of a whole run (the router's index, or every rank's pool
/// together) can hold and still mostly stay in the processor's caches (at 12 to 30 bytes a
/// block, 3 to 8 MiB). Past it nearly every probe of those tables misses the caches, and the
/// tables warm a batch's probes first, so that its misses overlap instead of stalling one
/// by one (see docs/performance.md). Below it the warming is just more work.
pub const CACHE_RESIDENT_BLOCKS: usize = 1 << 18;

/// Holders of [`PromptRelease`], and the purge delay to restore when the last one ends.
static HOLDERS: Mutex<(usize, c_long)> = Mutex::new((0, 0));

/// While one of these lives, freed pages go back to the kernel as they are freed.
///
/// mimalloc keeps freed pages for a second before it returns them, so that freeing and
/// allocating again costs no page faults: right while a run simulates, wrong once it has
/// ended. A million-request replay then frees its pools and indexes (about 140 MiB) and builds
/// its metrics from large temporary lists; kept, the freed pages of each stayed resident
/// beside the next, and the metrics peaked 90 MiB above the simulation's own peak. Returning
/// them promptly everywhere took the simulation 1.13x its time on that case, so it is done
/// only from the simulation's end to the metrics'.
#[must_use = "freed pages go back promptly only while this lives"]
pub struct PromptRelease {
    _private: (),
}

impl PromptRelease {
    /// Returns the pages freed so far, and every page freed from now on until this drops.
    pub fn start() -> PromptRelease {
        // First, under the delay that kept them: a delay of 0 purges at each free, and a
        // collection under it leaves the pages freed before it where they are.
        // SAFETY: frees only pages no allocation holds.
        unsafe { ffi::mi_collect(true) };
        let mut holders = HOLDERS.lock().unwrap_or_else(PoisonError::into_inner);
        if holders.0 == 0 {
            // SAFETY: mimalloc's option calls only read and write its option table.
            holders.1 = unsafe { ffi::mi_option_get(ffi::PURGE_DELAY) };
            unsafe { ffi::mi_option_set(ffi::PURGE_DELAY, 0) };
        }
        holders.0 += 1;
        PromptRelease { _private: () }
    }
}

impl Drop for PromptRelease {
    fn drop(&mut self) {
        let mut holders = HOLDERS.lock().unwrap_or_else(PoisonError::into_inner);
        holders.0 -= 1;
        if holders.0 == 0 {
            // SAFETY: as in `start`.
            unsafe { ffi::mi_option_set(ffi::PURGE_DELAY, holders.1) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The purge delay now, and how many [`PromptRelease`]s live.
    fn purge_delay_and_holders() -> (c_long, usize) {
        let holders = HOLDERS.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: as in `PromptRelease::start`.
        (unsafe { ffi::mi_option_get(ffi::PURGE_DELAY) }, holders.0)
    }

    #[test]
    fn prompt_release_holds_the_purge_delay_at_zero_until_its_last_holder_ends() {
        let (before, others) = purge_delay_and_holders();
        if others == 0 {
            // mimalloc's default: the number names the purge delay, not another option.
            assert_eq!(
                before,
                1000,
                "option {} is not the purge delay",
                ffi::PURGE_DELAY
            );
        }
        let first = PromptRelease::start();
        let second = PromptRelease::start();
        assert_eq!(purge_delay_and_holders().0, 0);
        drop(first);
        assert_eq!(purge_delay_and_holders().0, 0, "restored while still held");
        drop(second);
        let (after, holders) = purge_delay_and_holders();
        if holders == 0 {
            assert_eq!(after, before, "not restored by the last holder");
        }
    }
}
