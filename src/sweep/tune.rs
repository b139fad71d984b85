//! `tune`: the quanta that give target shares. A fluid DRR model (share_i = q_i / sum q over
//! the classes with requests, exact for equal costs under sustained backlog) gives the
//! starting point; the simulator confirms it, and a bounded search corrects the model's aim
//! by the simulator's error until the shares are within tolerance.
//!
//! Preferring small quanta: when every active class's quantum is varied the shares depend only
//! on their ratio, and the solution is scaled so that the largest quantum equals the smallest
//! request cost (a smaller one shortens no burst, which is at least one request).

use super::run::{load_point, run_once, thread_pool};
use super::{SweepError, TuneArgs};
use crate::report::metrics::RunMetrics;
use crate::scenario::Scenario;
use rayon::prelude::*;
use std::fmt::Write as _;

/// Confirming simulator runs at most (the fluid start plus corrections).
pub const MAX_CONFIRM_ROUNDS: usize = 8;
/// Multipliers of one varied quantum whose shares show the sensitivity around the solution.
pub const NEIGHBOUR_FACTORS: [f64; 4] = [0.5, 0.75, 1.25, 2.0];

/// Which share `tune` aims at.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ShareKind {
    /// The class's share of the first N completions.
    FirstN,
    /// The class's share of the token service dispatched while classes were backlogged.
    Tokens,
}

impl ShareKind {
    /// Class `class`'s share of this kind in `metrics`.
    pub fn of(self, metrics: &RunMetrics, class: usize) -> Option<f64> {
        match self {
            ShareKind::FirstN => metrics.prefix_share(class, metrics.prefix_n),
            ShareKind::Tokens => metrics.backlogged_shares(class).map(|(share, _)| share),
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

/// The shares measured with one set of quanta.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// The varied quanta, one per varied path.
    pub quanta: Vec<u64>,
    /// The achieved share of each target (NaN when not measurable).
    pub achieved: Vec<f64>,
    /// The largest |achieved - target|.
    pub error: f64,
}

/// The result of `tune`.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneOutcome {
    /// The varied paths.
    pub paths: Vec<String>,
    /// The targets.
    pub targets: Vec<TuneTarget>,
    /// Which share was aimed at.
    pub share_kind: ShareKind,
    /// The fluid model's starting quanta.
    pub fluid_start: Vec<u64>,
    /// Every confirming run, in order.
    pub trials: Vec<Trial>,
    /// The chosen trial's quanta (the smallest within tolerance, else the closest).
    pub quanta: Vec<u64>,
    /// The chosen trial's achieved shares.
    pub achieved: Vec<f64>,
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
    /// Which varied path moved.
    pub path: String,
    /// Its value.
    pub quantum: u64,
    /// The achieved share of each target.
    pub achieved: Vec<f64>,
}

impl TuneOutcome {
    /// The report `routersim tune` prints.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let verdict = if self.met { "within" } else { "NOT within" };
        let _ = writeln!(
            out,
            "tune ({:?} share), {verdict} tolerance {}:",
            self.share_kind, self.tolerance
        );
        for (path, q) in self.paths.iter().zip(&self.quanta) {
            let _ = writeln!(out, "  {path}={q}");
        }
        for (t, a) in self.targets.iter().zip(&self.achieved) {
            let _ = writeln!(
                out,
                "  {}: target {:.4}, achieved {:.4}",
                t.class, t.share, a
            );
        }
        let _ = writeln!(out, "fluid start: {}", join(&self.fluid_start));
        for (i, trial) in self.trials.iter().enumerate() {
            let _ = writeln!(
                out,
                "  run {}: quanta {} -> shares {} (error {:.4})",
                i + 1,
                join(&trial.quanta),
                shares(&trial.achieved),
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
                "  {}={} -> shares {}",
                n.path,
                n.quantum,
                shares(&n.achieved)
            );
        }
        out
    }
}

fn join(values: &[u64]) -> String {
    values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(":")
}

fn shares(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.4}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `CLASS=SHARE` against the scenario's classes.
pub fn parse_target(text: &str, class_names: &[String]) -> Result<TuneTarget, SweepError> {
    let bad = |why: &str| SweepError::Input(format!("--target {text}: {why}"));
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
pub fn quantum_class(path: &str, class_names: &[String]) -> Result<usize, SweepError> {
    path.strip_prefix("router.policy_classes.")
        .and_then(|rest| rest.strip_suffix(".quantum"))
        .and_then(|class| class_names.iter().position(|c| c == class))
        .ok_or_else(|| {
            SweepError::Input(format!(
                "--vary {path}: tune varies class quanta only (router.policy_classes.<class>.quantum with a class of {})",
                class_names.join(", ")
            ))
        })
}

/// What the search works with.
struct Problem<'a> {
    args: &'a TuneArgs,
    paths: Vec<String>,
    varied: Vec<usize>,
    targets: Vec<TuneTarget>,
    /// The scenario's quanta, by class (only active classes count in the fluid model).
    quanta: Vec<f64>,
    active: Vec<bool>,
    /// The smallest request cost (input tokens), the floor of the largest quantum.
    unit: f64,
}

/// Finds quanta for the targets of `args` (see the module docs).
pub fn tune(args: &TuneArgs) -> Result<TuneOutcome, SweepError> {
    let problem = Problem::new(args)?;
    let neighbours = problem.varied.len() * NEIGHBOUR_FACTORS.len();
    let pool = thread_pool(args.jobs, neighbours)?;
    let mut aims: Vec<f64> = problem.targets.iter().map(|t| t.share).collect();
    let fluid_start = problem.fluid_solve(&aims);
    let mut trials: Vec<Trial> = Vec::new();
    let mut next = fluid_start.clone();
    for _ in 0..MAX_CONFIRM_ROUNDS {
        if trials.iter().any(|t| t.quanta == next) {
            break;
        }
        let trial = problem.trial(&next)?;
        let met = trial.error <= args.tolerance;
        for ((aim, target), achieved) in aims.iter_mut().zip(&problem.targets).zip(&trial.achieved)
        {
            if achieved.is_finite() {
                *aim = (*aim + target.share - achieved).clamp(1e-3, 1.0 - 1e-3);
            }
        }
        trials.push(trial);
        if met {
            break;
        }
        next = problem.fluid_solve(&aims);
    }
    let best = choose(&trials, args.tolerance).clone();
    let neighbours = pool.install(|| problem.neighbours(&best.quanta))?;
    Ok(TuneOutcome {
        paths: problem.paths.clone(),
        targets: problem.targets.clone(),
        share_kind: args.share,
        fluid_start,
        quanta: best.quanta.clone(),
        achieved: best.achieved.clone(),
        error: best.error,
        tolerance: args.tolerance,
        met: best.error <= args.tolerance,
        trials,
        neighbours,
    })
}

/// The smallest quanta (by sum) within tolerance, else the trial with the least error.
fn choose(trials: &[Trial], tolerance: f64) -> &Trial {
    let sum = |t: &Trial| t.quanta.iter().sum::<u64>();
    trials
        .iter()
        .filter(|t| t.error <= tolerance)
        .min_by_key(|t| sum(t))
        .or_else(|| trials.iter().min_by(|a, b| a.error.total_cmp(&b.error)))
        .expect("tune runs at least one trial")
}

impl<'a> Problem<'a> {
    fn new(args: &'a TuneArgs) -> Result<Problem<'a>, SweepError> {
        if !(args.tolerance > 0.0 && args.tolerance < 1.0) {
            return Err(SweepError::Input("--tolerance must be in (0, 1)".into()));
        }
        let base = Scenario::load(&args.scenario)?;
        let names = base.class_names().to_vec();
        let targets = args
            .targets
            .iter()
            .map(|t| parse_target(t, &names))
            .collect::<Result<Vec<_>, _>>()?;
        if targets.iter().map(|t| t.share).sum::<f64>() > 1.0 + 1e-9 {
            return Err(SweepError::Input(
                "the target shares add up to more than 1".into(),
            ));
        }
        let paths: Vec<String> = match args.vary.is_empty() {
            true => names
                .iter()
                .map(|n| format!("router.policy_classes.{n}.quantum"))
                .collect(),
            false => args.vary.clone(),
        };
        let varied = paths
            .iter()
            .map(|p| quantum_class(p, &names))
            .collect::<Result<Vec<_>, _>>()?;
        let seed = base.seed();
        let metrics = run_once(&base, seed, 0, args.prefix_n)?;
        let quanta = metrics
            .classes
            .iter()
            .map(|c| c.quantum_tokens as f64)
            .collect();
        let active = metrics.classes.iter().map(|c| c.requests > 0).collect();
        let unit = base
            .requests(seed)?
            .iter()
            .map(|r| r.input_tokens.max(1))
            .min()
            .unwrap_or(1) as f64;
        Ok(Problem {
            args,
            paths,
            varied,
            targets,
            quanta,
            active,
            unit,
        })
    }

    /// The fluid model's quanta for the varied paths that give `aims` (per target).
    fn fluid_solve(&self, aims: &[f64]) -> Vec<u64> {
        let aim_pairs: Vec<(usize, f64)> = self
            .targets
            .iter()
            .map(|t| t.class_index)
            .zip(aims.iter().copied())
            .collect();
        let mut quanta = self.quanta.clone();
        solve_fluid(&mut quanta, &self.active, &self.varied, &aim_pairs);
        let scale_free = (0..quanta.len()).all(|c| !self.active[c] || self.varied.contains(&c));
        if scale_free {
            let largest = self.varied.iter().map(|&c| quanta[c]).fold(0.0, f64::max);
            let factor = self.unit / largest;
            for &c in &self.varied {
                quanta[c] *= factor;
            }
        }
        self.varied
            .iter()
            .map(|&c| quanta[c].round().max(1.0) as u64)
            .collect()
    }

    /// Runs the scenario with the varied quanta `values` and measures the targets.
    fn measure(&self, values: &[u64]) -> Result<Vec<f64>, SweepError> {
        let overrides: Vec<(String, String)> = self
            .paths
            .iter()
            .cloned()
            .zip(values.iter().map(|v| v.to_string()))
            .collect();
        let scenario = load_point(&self.args.scenario, &overrides)?;
        let metrics = run_once(&scenario, scenario.seed(), 0, self.args.prefix_n)?;
        Ok(self
            .targets
            .iter()
            .map(|t| {
                self.args
                    .share
                    .of(&metrics, t.class_index)
                    .unwrap_or(f64::NAN)
            })
            .collect())
    }

    fn trial(&self, quanta: &[u64]) -> Result<Trial, SweepError> {
        let achieved = self.measure(quanta)?;
        let error = self
            .targets
            .iter()
            .zip(&achieved)
            .map(|(t, a)| {
                if a.is_finite() {
                    (a - t.share).abs()
                } else {
                    f64::INFINITY
                }
            })
            .fold(0.0, f64::max);
        Ok(Trial {
            quanta: quanta.to_vec(),
            achieved,
            error,
        })
    }

    /// The shares with each varied quantum moved by [`NEIGHBOUR_FACTORS`], in parallel.
    fn neighbours(&self, solution: &[u64]) -> Result<Vec<Neighbour>, SweepError> {
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
                Ok(Neighbour {
                    path: self.paths[i].clone(),
                    quantum: q,
                    achieved: self.measure(&values)?,
                })
            })
            .collect()
    }
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
    fn targets_parse_against_the_classes() {
        let t = parse_target("regular=0.25", &names()).unwrap();
        assert_eq!((t.class_index, t.share), (1, 0.25));
        for bad in ["regular", "gold=0.5", "premium=x", "premium=1", "premium=0"] {
            let e = parse_target(bad, &names()).unwrap_err();
            assert_eq!(e.exit_code(), 2);
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
            achieved: vec![0.8],
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
    }
}
