//! routersim: a deterministic discrete-event simulator of Dynamo's KV-router scheduling.
//!
//! Layers (a module uses only the layers below it; tests/it/tidy.rs checks this):
//! L0 `time`, `rng`, `bounds`, `yaml`; L1 `scheduling` | `engine`; L2 `mocker`, `workload`;
//! L3 `sim`; L4 `scenario` | `report`; L5 `pipeline` (the one run pipeline); L6 `sweep`,
//! `plan`; L7 `cli`. L0 and L1 take text, not paths: only `bounds`' capped reader opens files there.

pub mod bounds;
pub mod cli;
pub mod engine;
pub mod mocker;
pub mod pipeline;
pub mod plan;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod scheduling;
pub mod sim;
pub mod sweep;
pub mod time;
pub mod workload;
pub mod yaml;

/// Every binary of the crate (the CLI, tests, benches) allocates through mimalloc: thread-local
/// free lists, no lock when one thread frees what another allocated (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the pages freed so far back to the kernel now. mimalloc keeps freed pages for about
/// a second before it returns them, so that freeing and allocating again costs no page
/// faults; right during a run, wrong at its end, where a large run frees its pools and
/// indexes and then builds its metrics: a million-request replay freed about 140 MiB there,
/// and its metrics landed on fresh pages beside them, 90 MiB above the run's own peak.
pub fn release_freed_memory() {
    unsafe extern "C" {
        /// mimalloc's collection (linked in with the allocator above): with `force`, it
        /// returns every free page of the calling thread's heap and of the shared arenas.
        fn mi_collect(force: bool);
    }
    // SAFETY: mimalloc's own entry point, on the allocator it serves; it frees only pages no
    // allocation holds.
    unsafe { mi_collect(true) }
}
