//! Judging a scenario: a replication's run, its `minus:` companions' runs, and the verdicts
//! of its expectations.

use super::memory_estimate::run_memory_estimate_bytes;
use super::{RequestCache, RunError, RunOutput, RunSpec, execute, replication_seeds};
use crate::report::verdict::evaluate::{ExpectationOutcome, RunFacts, evaluate};
use crate::scenario::Scenario;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A scenario resolved for judging: its own spec and its `minus:` companions, each loaded
/// once.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// The scenario (its expectations, name, file).
    pub scenario: Scenario,
    /// Each companion, keyed as its `minus:` names it.
    pub companions: BTreeMap<String, Scenario>,
    /// Shared by every run of this judgement (and of others given the same cache).
    pub request_cache: Option<Arc<RequestCache>>,
    /// Keep a timeline of replication 0's run (`--timeline`; companions never keep one).
    pub timeline: bool,
}

/// One replication of a judged scenario: its spec, its output and the verdicts.
#[derive(Clone, Debug)]
pub struct JudgedRun {
    /// What ran (its seed is the replication's).
    pub spec: RunSpec,
    /// The result and metrics.
    pub output: RunOutput,
    /// Every expectation's verdict, in the scenario's order.
    pub outcomes: Vec<ExpectationOutcome>,
}

impl Judgement {
    /// Loads the companions `scenario`'s expectations name.
    pub fn new(scenario: Scenario) -> Result<Judgement, RunError> {
        let mut companions = BTreeMap::new();
        for e in scenario.expectations() {
            if let Some(name) = e.companion().map(|c| &c.file)
                && !companions.contains_key(name)
            {
                let companion = Scenario::load(&scenario.companion_path(name))?;
                companions.insert(name.clone(), companion);
            }
        }
        Ok(Judgement {
            scenario,
            companions,
            request_cache: None,
            timeline: false,
        })
    }

    /// The estimated peak memory of one replication, in bytes: the scenario's run, and each
    /// companion's as if alone beside it (the scenario's output is held while they run).
    pub fn memory_estimate_bytes(&self) -> u64 {
        let of = |s: &Scenario| run_memory_estimate_bytes(&RunSpec::from_scenario(s, s.seed()));
        let companions = self.companions.values().map(of);
        companions.fold(of(&self.scenario), u64::saturating_add)
    }

    /// The same, keeping a timeline of replication 0's run when `timeline` says so.
    pub fn with_timeline(self, timeline: bool) -> Judgement {
        Judgement { timeline, ..self }
    }

    /// Runs replication `replication` of `replications` (seed `seed_override` instead of the
    /// scenario's for a single run), its companions with their own replication seeds, and
    /// evaluates the expectations.
    pub fn run(
        &self,
        replication: u32,
        replications: u32,
        seed_override: Option<u64>,
    ) -> Result<JudgedRun, RunError> {
        let seed_of = |scenario: &Scenario| match seed_override {
            Some(seed) => seed,
            None => replication_seeds(scenario.seed(), replications)[replication as usize],
        };
        let with_cache = |mut spec: RunSpec| {
            spec.request_cache = self.request_cache.clone();
            spec
        };
        let spec = RunSpec {
            timeline: self.timeline && replication == 0,
            ..with_cache(RunSpec::from_scenario(
                &self.scenario,
                seed_of(&self.scenario),
            ))
        };
        let output = execute(&spec)?;
        let mut companion_metrics = BTreeMap::new();
        for (name, companion) in &self.companions {
            let companion_spec = with_cache(RunSpec::from_scenario(companion, seed_of(companion)));
            companion_metrics.insert(name.clone(), execute(&companion_spec)?.metrics);
        }
        // Wall time is the caller's to measure (nothing below the CLI reads a clock).
        let facts = RunFacts {
            seed: spec.seed(),
            wall_time_s: 0.0,
        };
        let outcomes = evaluate(
            self.scenario.expectations(),
            &output.metrics,
            &companion_metrics,
            facts,
        );
        Ok(JudgedRun {
            spec,
            output,
            outcomes,
        })
    }
}
