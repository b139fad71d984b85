//! How `check --seeds N` names the seeds its worst values came from. Replication 0 runs the
//! scenario's own seed; the others run seeds drawn from it (the ones `sweep --seeds N` runs),
//! 20-digit numbers nobody typed. A line names the replication; one note says where those
//! seeds come from and gives the number only where it is needed, to rerun one alone.

use crate::pipeline::replication_seeds;
use std::collections::BTreeMap;

/// The replications of a `check --seeds N` and their seeds.
pub struct Replications {
    base: u64,
    seeds: Vec<u64>,
}

impl Replications {
    /// The `replications` replications of a scenario whose seed is `base`.
    pub fn new(base: u64, replications: u32) -> Replications {
        Replications {
            base,
            seeds: replication_seeds(base, replications),
        }
    }

    /// `seed` as a line names it: `replication 3`, or the seed itself when no replication
    /// ran it.
    pub fn name(&self, seed: u64) -> String {
        match self.seeds.iter().position(|&s| s == seed) {
            Some(0) => format!("replication 0, seed {seed}"),
            Some(r) => format!("replication {r}"),
            None => format!("seed {seed}"),
        }
    }

    /// The note under the lines that named `cited` seeds: where the seeds of replications
    /// 1.. come from, and the seed of each one named, for `run --seed`. `None` when no line
    /// named a derived seed.
    pub fn note(&self, cited: impl IntoIterator<Item = u64>) -> Option<String> {
        let derived: BTreeMap<usize, u64> = cited
            .into_iter()
            .filter_map(|seed| Some((self.seeds.iter().position(|&s| s == seed)?, seed)))
            .filter(|&(r, _)| r > 0)
            .collect();
        if derived.is_empty() {
            return None;
        }
        let listed: Vec<String> = derived
            .iter()
            .map(|(r, seed)| format!("replication {r} = {seed}"))
            .collect();
        Some(format!(
            "replications 1..{} run seeds drawn from the scenario's seed {} (as `sweep --seeds {}`); \
             `run --seed S` reruns one: {}",
            self.seeds.len() - 1,
            self.base,
            self.seeds.len(),
            listed.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_seed_is_named_by_its_replication_and_given_once_in_a_note() {
        let r = Replications::new(0, 4);
        let derived = replication_seeds(0, 4)[2];
        assert!(derived > 1_000_000, "derived seeds are long numbers");
        assert_eq!(r.name(derived), "replication 2");
        assert_eq!(r.name(0), "replication 0, seed 0");
        assert_eq!(r.note([0, 0]), None, "only the scenario's own seed");
        let note = r.note([derived, 0, derived]).unwrap();
        assert_eq!(
            note,
            format!(
                "replications 1..3 run seeds drawn from the scenario's seed 0 (as `sweep --seeds 4`); \
                 `run --seed S` reruns one: replication 2 = {derived}"
            )
        );
    }
}
