//! `tune`: the quanta that give target shares. A fluid DRR model (share_i = q_i / sum q over
//! the classes with requests, exact for equal costs under sustained backlog) gives the
//! starting point; the simulator confirms it, and a bounded search corrects the model's aim
//! by the simulator's error until the shares are within tolerance.
//!
//! Each trial runs the scenario's replication seeds (those `sweep --seeds N` runs, in
//! parallel) with the quanta set in the typed run spec, and aims the mean share over the
//! seeds at the target; the spread (min and max over seeds) is reported with it.
//!
//! Preferring small quanta: when every active class's quantum is varied the shares depend only
//! on their ratio, and the solution is scaled so that the largest quantum equals the smallest
//! request cost (a smaller one shortens no burst, which is at least one request).

use super::run::thread_pool;
use crate::bounds::MAX_SWEEP_RUNS;
use crate::pipeline::memory_estimate::run_memory_estimate_bytes;
use crate::pipeline::{self, RunError, RunSpec};
use crate::report::measure::metrics::{RunMetrics, quanta_sum};
use crate::report::verdict::queries::Queries;
use crate::scenario::Scenario;
use rayon::prelude::*;
use std::fmt::Write as _;

/// Confirming simulator runs at most (the fluid start plus corrections).
pub const MAX_CONFIRM_ROUNDS: usize = 8;
/// Multipliers of one varied quantum whose shares show the sensitivity around the solution.
pub const NEIGHBOUR_FACTORS: [f64; 4] = [0.5, 0.75, 1.25, 2.0];

/// Which share `tune` aims at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ShareKind {
    /// The class's share of the first N completions.
    FirstN,
    /// The class's share of the token service dispatched while classes were backlogged.
    Tokens,
}

impl ShareKind {
    /// Class `class`'s share of this kind in `metrics`; `None` unless classes were backlogged
    /// together (otherwise every class got what it asked for, whatever its quantum).
    pub fn of(self, metrics: &RunMetrics, class: usize) -> Option<f64> {
        if !metrics.classes_backlogged_together() {
            return None;
        }
        match self {
            ShareKind::FirstN => metrics.prefix_share(class, metrics.prefix_n),
            ShareKind::Tokens => metrics.backlogged_shares(class).map(|(share, _)| share),
        }
    }

    /// The share as `tune --share` spells it: `first-n` or `tokens`.
    pub fn spelling(self) -> &'static str {
        match self {
            ShareKind::FirstN => "first-n",
            ShareKind::Tokens => "tokens",
        }
    }

    /// The share in words, e.g. `share of the first 320 completions` (`prefix_n` = N).
    pub fn words(self, prefix_n: u64) -> String {
        match self {
            ShareKind::FirstN => format!("share of the first {prefix_n} completions"),
            ShareKind::Tokens => "share of the token service while backlogged".to_string(),
        }
    }
}

/// One `--target CLASS=SHARE`.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneTarget {
    /// The class name.
    pub class: String,
    /// Its index in the scenario's classes.
    pub class_index: usize,
    /// The wanted share, in (0, 1).
    pub share: f64,
}

/// What `tune` solves: the typed form of `routersim tune`'s arguments.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// The scenario, with any overrides already applied.
    pub scenario: Scenario,
    /// The shares to hit.
    pub targets: Vec<TuneTarget>,
    /// The classes whose quanta vary (the others keep the scenario's).
    pub vary: Vec<usize>,
    /// Largest accepted |mean achieved - target| share.
    pub tolerance: f64,
    /// Which share to hit.
    pub share: ShareKind,
    /// N for [`ShareKind::FirstN`] (default: each run's own choice).
    pub prefix_n: Option<u64>,
    /// Replication seeds per trial (at least 1).
    pub seeds: u32,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
}

/// A share measured over seeds: its mean and range.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Spread {
    /// The mean over seeds (what is aimed at the target).
    pub mean: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (in seed order, so the mean rounds the same way every time).
    fn of(values: &[f64]) -> Spread {
        Spread {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// `0.7969`, or `0.7969 (0.7906-0.8031)` when the seeds differ.
    fn text(&self) -> String {
        match self.min == self.max {
            true => format!("{:.4}", self.mean),
            false => format!("{:.4} ({:.4}-{:.4})", self.mean, self.min, self.max),
        }
    }
}

/// The shares measured with one set of quanta.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// The varied quanta, one per varied class.
    pub quanta: Vec<u64>,
    /// The achieved share of each target over the seeds.
    pub achieved: Vec<Spread>,
    /// The largest |mean achieved - target|.
    pub error: f64,
}

/// The result of `tune`.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneOutcome {
    /// The varied classes' names.
    pub varied: Vec<String>,
    /// The targets.
    pub targets: Vec<TuneTarget>,
    /// Which share was aimed at.
    pub share_kind: ShareKind,
    /// The seeds every trial ran.
    pub seeds: Vec<u64>,
    /// The fluid model's starting quanta.
    pub fluid_start: Vec<u64>,
    /// Every confirming trial, in order.
    pub trials: Vec<Trial>,
    /// The chosen trial's quanta (the smallest within tolerance, else the closest).
    pub quanta: Vec<u64>,
    /// The chosen trial's achieved shares.
    pub achieved: Vec<Spread>,
    /// The chosen trial's error.
    pub error: f64,
    /// The tolerance asked for.
    pub tolerance: f64,
    /// Whether the error is within the tolerance.
    pub met: bool,
    /// Shares at neighbouring values of each varied quantum (the others at the solution).
    pub neighbours: Vec<Neighbour>,
}

/// The shares with one varied quantum moved away from the solution.
#[derive(Clone, Debug, PartialEq)]
pub struct Neighbour {
    /// Which varied class's quantum moved.
    pub class: String,
    /// Its value at the solution.
    pub from: u64,
    /// Its value here.
    pub quantum: u64,
    /// The achieved share of each target (`None` where some seed could not measure it).
    pub achieved: Vec<Option<Spread>>,
}

impl TuneOutcome {
    /// The report `routersim tune` prints.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let verdict = if self.met { "within" } else { "NOT within" };
        let seeds = match self.seeds.len() {
            1 => String::new(),
            n => format!(", mean over {n} seeds with their min-max"),
        };
        let _ = writeln!(
            out,
            "tune (--share {}{seeds}), {verdict} tolerance {}:",
            self.share_kind.spelling(),
            self.tolerance
        );
        for (class, q) in self.varied.iter().zip(&self.quanta) {
            let _ = writeln!(out, "  router.policy_classes.{class}.quantum={q}");
        }
        for (t, a) in self.targets.iter().zip(&self.achieved) {
            let _ = write!(
                out,
                "  {}: target {:.4}, achieved {:.4}",
                t.class, t.share, a.mean
            );
            if self.seeds.len() > 1 {
                let _ = write!(out, " (seeds: min {:.4}, max {:.4})", a.min, a.max);
            }
            out.push('\n');
        }
        let _ = writeln!(out, "fluid start: {}", join(&self.fluid_start));
        for (i, trial) in self.trials.iter().enumerate() {
            let _ = writeln!(
                out,
                "  run {}: quanta {} -> {} (error {:.4})",
                i + 1,
                join(&trial.quanta),
                self.shares(trial.achieved.iter().map(Some)),
                trial.error
            );
        }
        let _ = writeln!(
            out,
            "sensitivity (one quantum moved, the others at the solution):"
        );
        for n in &self.neighbours {
            let _ = writeln!(
                out,
                "  {} quantum {} -> {}: {}",
                n.class,
                n.from,
                n.quantum,
                self.shares(n.achieved.iter().map(Option::as_ref))
            );
        }
        for note in self.flat_notes() {
            let _ = writeln!(out, "  note: {note}");
        }
        out
    }

    /// A note for each varied class whose quantum, raised past the solution, moves no share:
    /// a reader otherwise takes the flat rows for a broken tuner.
    fn flat_notes(&self) -> Vec<String> {
        let at_solution: Vec<Option<f64>> = self.achieved.iter().map(|a| Some(a.mean)).collect();
        let flat = |class: &str| {
            let raised =
                (self.neighbours.iter()).filter(|n| n.class == class && n.quantum > n.from);
            let mut raised = raised.peekable();
            raised.peek().is_some()
                && raised.all(|n| {
                    let means = n.achieved.iter().map(|a| a.as_ref().map(|a| a.mean));
                    means.eq(at_solution.iter().copied())
                })
        };
        (self.varied.iter().zip(&self.quanta))
            .filter(|(class, _)| flat(class))
            .map(|(class, q)| {
                format!(
                    "raising {class}'s quantum past {q} moves no share: a quantum above one \
                     request's cost buys no extra share while the workers free one slot at a \
                     time (docs/sweeps.md, \"Tune\")"
                )
            })
            .collect()
    }

    /// `premium 0.7969, regular 0.2031`: each target's class and share.
    fn shares<'a>(&self, achieved: impl Iterator<Item = Option<&'a Spread>>) -> String {
        self.targets
            .iter()
            .zip(achieved)
            .map(|(t, a)| match a {
                Some(a) => format!("{} {}", t.class, a.text()),
                None => format!("{} not measurable", t.class),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn join(values: &[u64]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `CLASS=SHARE` against the scenario's classes.
pub fn parse_target(text: &str, class_names: &[String]) -> Result<TuneTarget, RunError> {
    let bad = |why: &str| RunError::Input(format!("--target {text}: {why}"));
    let (class, share) = text
        .split_once('=')
        .ok_or_else(|| bad("expected CLASS=SHARE"))?;
    let class = class.trim();
    let class_index = class_names.iter().position(|c| c == class).ok_or_else(|| {
        bad(&format!(
            "no class {class:?} (classes: {})",
            class_names.join(", ")
        ))
    })?;
    let share: f64 = share
        .trim()
        .parse()
        .map_err(|_| bad("SHARE is not a number"))?;
    if !(share > 0.0 && share < 1.0) {
        return Err(bad("SHARE must be in (0, 1)"));
    }
    Ok(TuneTarget {
        class: class.to_string(),
        class_index,
        share,
    })
}

/// The class whose quantum `path` is (`router.policy_classes.<class>.quantum`).
pub fn quantum_class(path: &str, class_names: &[String]) -> Result<usize, RunError> {
    path.strip_prefix("router.policy_classes.")
        .and_then(|rest| rest.strip_suffix(".quantum"))
        .and_then(|class| class_names.iter().position(|c| c == class))
        .ok_or_else(|| {
            RunError::Input(format!(
                "--vary {path}: tune varies class quanta only (router.policy_classes.<class>.quantum with a class of {})",
                class_names.join(", ")
            ))
        })
}

/// What the search works with.
struct Problem<'a> {
    options: &'a TuneOptions,
    /// The scenario's run; trials change its quanta and seed only.
    spec: RunSpec,
    seeds: Vec<u64>,
    /// The scenario's quanta, by class (only active classes count in the fluid model).
    quanta: Vec<f64>,
    active: Vec<bool>,
    /// The smallest request cost (input tokens), the floor of the largest quantum.
    unit: f64,
}

/// One seed's shares of the targets, and the first-N it measured them over.
struct SeedShares {
    seed: u64,
    metrics_prefix_n: u64,
    shares: Vec<Option<f64>>,
}

/// Finds quanta for the targets of `options` (see the module docs). A share that no run
/// can measure (classes never backlogged together) is an input error.
pub fn tune(options: &TuneOptions) -> Result<TuneOutcome, RunError> {
    let problem = Problem::new(options)?;
    let moves = options.vary.len() * NEIGHBOUR_FACTORS.len();
    let runs = moves.max(1) * problem.seeds.len();
    let estimate_bytes = run_memory_estimate_bytes(&problem.spec);
    let pool = thread_pool(options.jobs, &vec![estimate_bytes; runs], true)?;
    pool.install(|| problem.solve())
}

/// The smallest quanta (by sum) within tolerance, else the trial with the least error.
fn choose(trials: &[Trial], tolerance: f64) -> &Trial {
    let sum = |t: &Trial| quanta_sum(t.quanta.iter().copied());
    trials
        .iter()
        .filter(|t| t.error <= tolerance)
        .min_by_key(|t| sum(t))
        .or_else(|| trials.iter().min_by(|a, b| a.error.total_cmp(&b.error)))
        .expect("tune runs at least one trial")
}

impl<'a> Problem<'a> {
    fn new(options: &'a TuneOptions) -> Result<Problem<'a>, RunError> {
        check_options(options)?;
        let scenario = &options.scenario;
        let mut spec = RunSpec::from_scenario(scenario, scenario.seed());
        spec.prefix_n = options.prefix_n;
        let base = pipeline::execute(&spec)?;
        let metrics = &base.metrics;
        let unit = base
            .result
            .records
            .iter()
            .map(|r| r.input_tokens.max(1))
            .min();
        Ok(Problem {
            options,
            seeds: pipeline::replication_seeds(scenario.seed(), options.seeds),
            quanta: metrics
                .classes
                .iter()
                .map(|c| c.quantum_tokens as f64)
                .collect(),
            active: metrics.classes.iter().map(|c| c.requests > 0).collect(),
            unit: unit.unwrap_or(1) as f64,
            spec,
        })
    }

    /// The confirming trials, the chosen one and its neighbours.
    fn solve(&self) -> Result<TuneOutcome, RunError> {
        let tolerance = self.options.tolerance;
        let targets = &self.options.targets;
        let mut aims: Vec<f64> = targets.iter().map(|t| t.share).collect();
        let fluid_start = self.fluid_solve(&aims);
        let mut trials: Vec<Trial> = Vec::new();
        let mut next = fluid_start.clone();
        for _ in 0..MAX_CONFIRM_ROUNDS {
            if trials.iter().any(|t| t.quanta == next) {
                break;
            }
            let trial = self.trial(&next)?;
            for ((aim, target), achieved) in aims.iter_mut().zip(targets).zip(&trial.achieved) {
                *aim = (*aim + target.share - achieved.mean).clamp(1e-3, 1.0 - 1e-3);
            }
            let met = trial.error <= tolerance;
            trials.push(trial);
            if met {
                break;
            }
            next = self.fluid_solve(&aims);
        }
        let best = choose(&trials, tolerance).clone();
        let neighbours = self.neighbours(&best.quanta)?;
        let names = self.spec.class_names();
        Ok(TuneOutcome {
            varied: self
                .options
                .vary
                .iter()
                .map(|&c| names[c].clone())
                .collect(),
            targets: targets.clone(),
            share_kind: self.options.share,
            seeds: self.seeds.clone(),
            fluid_start,
            quanta: best.quanta.clone(),
            achieved: best.achieved.clone(),
            error: best.error,
            tolerance,
            met: best.error <= tolerance,
            trials,
            neighbours,
        })
    }

    /// The fluid model's quanta for the varied classes that give `aims` (per target).
    fn fluid_solve(&self, aims: &[f64]) -> Vec<u64> {
        let varied = &self.options.vary;
        let aim_pairs: Vec<(usize, f64)> = self
            .options
            .targets
            .iter()
            .map(|t| t.class_index)
            .zip(aims.iter().copied())
            .collect();
        let mut quanta = self.quanta.clone();
        solve_fluid(&mut quanta, &self.active, varied, &aim_pairs);
        let scale_free = (0..quanta.len()).all(|c| !self.active[c] || varied.contains(&c));
        if scale_free {
            let largest = varied.iter().map(|&c| quanta[c]).fold(0.0, f64::max);
            let factor = self.unit / largest;
            for &c in varied {
                quanta[c] *= factor;
            }
        }
        varied
            .iter()
            .map(|&c| quanta[c].round().max(1.0) as u64)
            .collect()
    }

    /// Runs every seed with the varied quanta `values` and measures the targets, in seed
    /// order whatever the threads.
    fn measure(&self, values: &[u64]) -> Result<Vec<SeedShares>, RunError> {
        let mut spec = self.spec.clone();
        for (&class, &quantum) in self.options.vary.iter().zip(values) {
            spec.set_quantum(class, quantum);
        }
        self.seeds
            .par_iter()
            .map(|&seed| {
                let metrics = pipeline::execute(&spec.with_seed(seed))?.metrics;
                let shares = self.options.targets.iter();
                Ok(SeedShares {
                    seed,
                    metrics_prefix_n: metrics.prefix_n,
                    shares: shares
                        .map(|t| self.options.share.of(&metrics, t.class_index))
                        .collect(),
                })
            })
            .collect()
    }

    /// Target `target`'s spread over `seeds`, `None` if some seed could not measure it.
    fn spread(seeds: &[SeedShares], target: usize) -> Option<Spread> {
        let values: Option<Vec<f64>> = seeds.iter().map(|s| s.shares[target]).collect();
        values.map(|v| Spread::of(&v))
    }

    fn trial(&self, quanta: &[u64]) -> Result<Trial, RunError> {
        let seeds = self.measure(quanta)?;
        let mut achieved = Vec::new();
        for (i, target) in self.options.targets.iter().enumerate() {
            let spread = Self::spread(&seeds, i)
                .ok_or_else(|| self.unmeasurable(target, quanta, &seeds, i))?;
            achieved.push(spread);
        }
        let error = self
            .options
            .targets
            .iter()
            .zip(&achieved)
            .map(|(t, a)| (a.mean - t.share).abs())
            .fold(0.0, f64::max);
        Ok(Trial {
            quanta: quanta.to_vec(),
            achieved,
            error,
        })
    }

    /// The input error of a target share that a trial's run could not measure.
    fn unmeasurable(
        &self,
        target: &TuneTarget,
        quanta: &[u64],
        seeds: &[SeedShares],
        index: usize,
    ) -> RunError {
        let failed = seeds
            .iter()
            .find(|s| s.shares[index].is_none())
            .expect("a seed without the share");
        let share = self.options.share.words(failed.metrics_prefix_n);
        RunError::Input(format!(
            "{}'s {share} cannot be measured (quanta {}, seed {}): the classes are never \
             backlogged together in this scenario, so every class gets what it asks for \
             whatever its quantum; tune needs a workload whose classes wait for the workers \
             at the same time",
            target.class,
            join(quanta),
            failed.seed
        ))
    }

    /// The shares with each varied quantum moved by [`NEIGHBOUR_FACTORS`], in parallel.
    fn neighbours(&self, solution: &[u64]) -> Result<Vec<Neighbour>, RunError> {
        let names = self.spec.class_names();
        let moves: Vec<(usize, u64)> = (0..solution.len())
            .flat_map(|i| {
                NEIGHBOUR_FACTORS
                    .iter()
                    .map(move |f| (i, ((solution[i] as f64) * f).round().max(1.0) as u64))
            })
            .filter(|&(i, q)| q != solution[i])
            .collect();
        moves
            .par_iter()
            .map(|&(i, q)| {
                let mut values = solution.to_vec();
                values[i] = q;
                let seeds = self.measure(&values)?;
                Ok(Neighbour {
                    class: names[self.options.vary[i]].clone(),
                    from: solution[i],
                    quantum: q,
                    achieved: (0..self.options.targets.len())
                        .map(|t| Self::spread(&seeds, t))
                        .collect(),
                })
            })
            .collect()
    }
}

/// Refuses options `tune` cannot work with, before any run.
fn check_options(options: &TuneOptions) -> Result<(), RunError> {
    if !(options.tolerance > 0.0 && options.tolerance < 1.0) {
        return Err(RunError::Input("--tolerance must be in (0, 1)".into()));
    }
    if options.seeds == 0 {
        return Err(RunError::Input("--seeds must be at least 1".into()));
    }
    // The most runs a tune makes: the confirming trials and the neighbours, each per seed,
    // held to a sweep's bound.
    let trials = MAX_CONFIRM_ROUNDS + options.vary.len() * NEIGHBOUR_FACTORS.len();
    let runs = (trials as u64).saturating_mul(u64::from(options.seeds));
    if runs > MAX_SWEEP_RUNS {
        return Err(RunError::Input(format!(
            "--seeds {}: up to {trials} trials x {} seeds = {runs} runs, more than the {MAX_SWEEP_RUNS} a tune may make",
            options.seeds, options.seeds
        )));
    }
    if options.targets.iter().map(|t| t.share).sum::<f64>() > 1.0 + 1e-9 {
        return Err(RunError::Input(
            "the target shares add up to more than 1".into(),
        ));
    }
    let classes = options.scenario.class_names().len();
    if options.vary.is_empty() || options.vary.iter().any(|&c| c >= classes) {
        return Err(RunError::Input(format!(
            "tune varies the quanta of 1 to {classes} of the scenario's classes"
        )));
    }
    Ok(())
}

/// The fluid shares: each active class's quantum over the active classes' sum.
pub fn fluid_shares(quanta: &[f64], active: &[bool]) -> Vec<f64> {
    let total: f64 = quanta
        .iter()
        .zip(active)
        .filter(|(_, a)| **a)
        .map(|(q, _)| q)
        .sum();
    quanta
        .iter()
        .zip(active)
        .map(|(q, &a)| if a && total > 0.0 { q / total } else { 0.0 })
        .collect()
}

/// Moves the `varied` quanta (coordinate descent in log scale, step halving, bounded) to
/// minimise the squared distance of the fluid shares from the `(class, aim)` pairs.
pub fn solve_fluid(quanta: &mut [f64], active: &[bool], varied: &[usize], aims: &[(usize, f64)]) {
    let loss = |q: &[f64]| {
        let shares = fluid_shares(q, active);
        aims.iter()
            .map(|&(c, aim)| (shares[c] - aim).powi(2))
            .sum::<f64>()
    };
    let mut step = 1.0f64;
    let mut best = loss(quanta);
    for _ in 0..2_000 {
        if step < 1e-6 || best < 1e-14 {
            break;
        }
        let mut improved = false;
        for &c in varied {
            for factor in [step.exp2(), (-step).exp2()] {
                let old = quanta[c];
                quanta[c] = old * factor;
                let l = loss(quanta);
                if l < best {
                    best = l;
                    improved = true;
                } else {
                    quanta[c] = old;
                }
            }
        }
        if !improved {
            step /= 2.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["premium".into(), "regular".into()]
    }

    #[test]
    fn the_report_names_the_share_as_the_user_spells_it() {
        let spread = Spread {
            mean: 0.8,
            min: 0.8,
            max: 0.8,
        };
        let outcome = |share_kind| TuneOutcome {
            varied: vec!["regular".into()],
            targets: vec![parse_target("premium=0.8", &names()).unwrap()],
            share_kind,
            seeds: vec![0],
            fluid_start: vec![128],
            trials: Vec::new(),
            quanta: vec![128],
            achieved: vec![spread],
            error: 0.0,
            tolerance: 0.02,
            met: true,
            neighbours: Vec::new(),
        };
        let text = outcome(ShareKind::FirstN).describe();
        assert!(
            text.starts_with("tune (--share first-n), within tolerance 0.02:\n"),
            "{text}"
        );
        let text = outcome(ShareKind::Tokens).describe();
        assert!(text.starts_with("tune (--share tokens), within"), "{text}");
        assert!(
            !text.contains("Tokens") && !text.contains("FirstN"),
            "{text}"
        );
    }

    #[test]
    fn targets_parse_against_the_classes() {
        let t = parse_target("regular=0.25", &names()).unwrap();
        assert_eq!((t.class_index, t.share), (1, 0.25));
        for bad in ["regular", "gold=0.5", "premium=x", "premium=1", "premium=0"] {
            let e = parse_target(bad, &names()).unwrap_err();
            assert!(matches!(e, RunError::Input(_)), "{e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn only_class_quanta_can_be_varied() {
        assert_eq!(
            quantum_class("router.policy_classes.regular.quantum", &names()).unwrap(),
            1
        );
        let e = quantum_class("workers.count", &names()).unwrap_err();
        assert!(e.to_string().contains("workers.count"));
        assert!(quantum_class("router.policy_classes.gold.quantum", &names()).is_err());
    }

    #[test]
    fn fluid_shares_count_only_active_classes() {
        let s = fluid_shares(&[512.0, 128.0, 999.0], &[true, true, false]);
        assert_eq!(s, vec![0.8, 0.2, 0.0]);
    }

    #[test]
    fn the_fluid_solve_reaches_the_ratio() {
        // Only regular varies: 512 / (512 + q) = 0.8 gives q = 128.
        let mut q = vec![512.0, 512.0];
        solve_fluid(&mut q, &[true, true], &[1], &[(0, 0.8)]);
        assert!((q[1] - 128.0).abs() < 0.01, "{q:?}");
        // Both vary: any 4:1 ratio.
        let mut q = vec![100.0, 100.0];
        solve_fluid(&mut q, &[true, true], &[0, 1], &[(0, 0.8)]);
        assert!((q[0] / q[1] - 4.0).abs() < 0.001, "{q:?}");
    }

    #[test]
    fn the_smallest_quanta_within_tolerance_win() {
        let trial = |quanta: Vec<u64>, error: f64| Trial {
            quanta,
            achieved: vec![Spread::of(&[0.8])],
            error,
        };
        let trials = vec![
            trial(vec![1024, 256], 0.01),
            trial(vec![512, 128], 0.015),
            trial(vec![64, 16], 0.5),
        ];
        assert_eq!(choose(&trials, 0.02).quanta, vec![512, 128]);
        assert_eq!(
            choose(&trials, 0.001).quanta,
            vec![1024, 256],
            "else the closest"
        );
        // Two quanta of 2^63 add up to 2^64: a u64 sum wraps to 0 and would win.
        let huge = vec![trial(vec![1 << 63, 1 << 63], 0.01), trial(vec![3, 1], 0.01)];
        assert_eq!(choose(&huge, 0.02).quanta, vec![3, 1]);
    }
}
