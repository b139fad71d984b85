//! Synthetic requests drawn once per (workload, seed) and shared by the runs that need them.

use super::RunError;
use crate::workload::Arrival;
use crate::workload::synth::SynthWorkload;
use std::sync::{Arc, Mutex};

/// Synthetic requests drawn once per (workload, seed): runs whose workload is equal (a search
/// over `workers.count`, say) reuse the draw instead of generating the prompts again.
#[derive(Debug, Default)]
pub struct RequestCache {
    entries: Mutex<Vec<CachedDraw>>,
}

/// One draw: the workload it came from, the seed, the requests.
type CachedDraw = (Arc<SynthWorkload>, u64, Arc<Vec<Arrival>>);

impl RequestCache {
    /// Draws kept at most; the oldest goes first (a search's probes move on).
    pub const MAX_DRAWS: usize = 16;

    /// The requests of `(workload, seed)`: cached, or drawn by `draw` and kept.
    pub(super) fn draw(
        &self,
        workload: &Arc<SynthWorkload>,
        seed: u64,
        draw: impl FnOnce() -> Result<Vec<Arrival>, RunError>,
    ) -> Result<Arc<Vec<Arrival>>, RunError> {
        if let Some(hit) = self.find(workload, seed) {
            return Ok(hit);
        }
        // Drawn outside the lock, so the seeds of one probe draw in parallel.
        let drawn = Arc::new(draw()?);
        let mut entries = self.lock();
        if entries.len() >= Self::MAX_DRAWS {
            entries.remove(0);
        }
        entries.push((workload.clone(), seed, drawn.clone()));
        Ok(drawn)
    }

    fn find(&self, workload: &Arc<SynthWorkload>, seed: u64) -> Option<Arc<Vec<Arrival>>> {
        self.lock()
            .iter()
            .find(|(w, s, _)| *s == seed && **w == **workload)
            .map(|(_, _, requests)| requests.clone())
    }

    /// How many draws are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no draw is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CachedDraw>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
