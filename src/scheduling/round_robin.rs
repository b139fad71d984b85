//! Round-robin selection (the `round-robin` router mode): each request goes to the next rank
//! of a known worker after the last one chosen, in (worker_id, dp_rank) order, wrapping
//! around; no costs, no queueing.

use super::select::WorkerSet;
use super::types::WorkerWithDpRank;

/// The round-robin selector's one piece of state: the rank it chose last.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundRobin {
    last: Option<WorkerWithDpRank>,
}

impl RoundRobin {
    /// The rank after the last one chosen among `workers`' ranks (the first when none is
    /// after it, or none was chosen yet), or `None` when `workers` has no rank.
    pub fn select(&mut self, workers: &WorkerSet) -> Option<WorkerWithDpRank> {
        let after = self.last.and_then(|last| workers.ranks_after(last).next());
        let next = after.or_else(|| workers.ranks().next())?;
        self.last = Some(next);
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::select::WorkerConfig;

    fn set(workers: &[(u64, u32)]) -> WorkerSet {
        let mut set = WorkerSet::new();
        for &(id, dp_size) in workers {
            let config = WorkerConfig {
                dp_size,
                ..WorkerConfig::default()
            };
            set.insert(id, config);
        }
        set
    }

    #[test]
    fn round_robin_walks_every_rank_in_order_and_wraps() {
        let workers = set(&[(0, 1), (3, 2)]);
        let mut rr = RoundRobin::default();
        let picks: Vec<_> = (0..4).map(|_| rr.select(&workers).unwrap()).collect();
        let rank = WorkerWithDpRank::new;
        assert_eq!(picks, vec![rank(0, 0), rank(3, 0), rank(3, 1), rank(0, 0)]);
    }

    #[test]
    fn round_robin_goes_on_after_its_last_pick_when_workers_change() {
        let mut rr = RoundRobin::default();
        let rank = WorkerWithDpRank::new;
        assert_eq!(rr.select(&set(&[(0, 1), (1, 1), (2, 1)])), Some(rank(0, 0)));
        assert_eq!(rr.select(&set(&[(0, 1), (1, 1), (2, 1)])), Some(rank(1, 0)));
        // Worker 1 (the last pick) and 2 left: the next after it wraps to worker 0.
        assert_eq!(rr.select(&set(&[(0, 1)])), Some(rank(0, 0)));
        // A worker that joined after the last pick is next.
        assert_eq!(rr.select(&set(&[(0, 1), (5, 1)])), Some(rank(5, 0)));
        assert_eq!(rr.select(&set(&[])), None);
        assert_eq!(rr.select(&set(&[(0, 1), (5, 1)])), Some(rank(0, 0)));
    }
}
