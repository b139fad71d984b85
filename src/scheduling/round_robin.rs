//! Round-robin selection (the `round-robin` router mode), as 1.6.1's replay walks it: each
//! request goes to the known worker after the last one chosen, by position in worker-id
//! order, and to that worker's next rank, each worker keeping its own rank turn; no costs, no
//! queueing.

use super::select::WorkerSet;
use super::types::{WorkerId, WorkerWithDpRank};
use std::collections::BTreeMap;

/// The round-robin selector's state: the position of the next worker, and each worker's next
/// rank (counted from its first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundRobin {
    next_worker: usize,
    next_rank: BTreeMap<WorkerId, u32>,
}

impl RoundRobin {
    /// The next rank among `workers`' ranks, or `None` when `workers` has no worker. A worker
    /// that left forgets its rank turn.
    pub fn select(&mut self, workers: &WorkerSet) -> Option<WorkerWithDpRank> {
        let count = workers.worker_count();
        if count == 0 {
            return None;
        }
        // A walk over the workers, as the pick below is: round robin costs O(workers).
        self.next_rank.retain(|&id, _| workers.get(id).is_some());
        let position = self.next_worker % count;
        let (worker, config) = workers.iter().nth(position)?;
        let turn = self.next_rank.get(&worker).copied().unwrap_or(0);
        let rank = turn % config.dp_size.max(1);
        self.next_worker = position + 1;
        self.next_rank.insert(worker, rank + 1);
        Some(WorkerWithDpRank::new(worker, config.dp_start + rank))
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
    fn round_robin_takes_the_workers_in_turn_and_each_workers_ranks_in_turn() {
        let workers = set(&[(0, 2), (3, 2)]);
        let mut rr = RoundRobin::default();
        let picks: Vec<_> = (0..5).map(|_| rr.select(&workers).unwrap()).collect();
        let rank = WorkerWithDpRank::new;
        let expected = vec![rank(0, 0), rank(3, 0), rank(0, 1), rank(3, 1), rank(0, 0)];
        assert_eq!(picks, expected);
    }

    #[test]
    fn round_robin_goes_on_by_position_when_workers_change() {
        let mut rr = RoundRobin::default();
        let rank = WorkerWithDpRank::new;
        let three = set(&[(0, 1), (1, 1), (2, 1)]);
        assert_eq!(rr.select(&three), Some(rank(0, 0)));
        assert_eq!(rr.select(&three), Some(rank(1, 0)));
        // Workers 1 and 2 left: position 2 wraps to the only worker.
        assert_eq!(rr.select(&set(&[(0, 1)])), Some(rank(0, 0)));
        // Position 1 of two workers is the one that joined.
        assert_eq!(rr.select(&set(&[(0, 1), (5, 1)])), Some(rank(5, 0)));
        assert_eq!(rr.select(&set(&[])), None);
        assert_eq!(rr.select(&set(&[(0, 1), (5, 1)])), Some(rank(0, 0)));
    }

    #[test]
    fn a_worker_that_left_and_came_back_starts_at_its_first_rank() {
        let mut rr = RoundRobin::default();
        let rank = WorkerWithDpRank::new;
        let both = set(&[(0, 2), (1, 2)]);
        assert_eq!(rr.select(&both), Some(rank(0, 0)));
        assert_eq!(rr.select(&set(&[(1, 2)])), Some(rank(1, 0)));
        assert_eq!(rr.select(&both), Some(rank(1, 1)));
        // Worker 0's turn had reached its rank 1 before it left.
        assert_eq!(rr.select(&both), Some(rank(0, 0)));
    }
}
