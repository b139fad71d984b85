//! Dynamo 1.6.1's planner, native: its load-based scaling (`optimization_target` throughput,
//! latency or load) as a [`ScalingPolicy`], deciding from the snapshots a run shows it exactly
//! as Dynamo's planner decides in 1.6.1's replay ([`config`] reads its keys, [`budget`] keeps
//! its GPU budget). docs/autoscaling.md says what it does; `tools/dynamo-planner` runs
//! Dynamo's own, for `sla` and as the reference.

pub mod budget;
pub mod config;
#[cfg(test)]
mod proptests;

use crate::mocker::WorkerRole;
use crate::sim::WorkerPool;
use crate::sim::scaling::{PassSnapshot, ScalingDecision, ScalingPolicy, ScalingSnapshot};
use budget::{Budget, Pair};
use config::{Mode, PlannerConfig, Target};
use std::collections::BTreeMap;

/// What the planner knows of a role's workers (1.6.1's engine capabilities).
#[derive(Copy, Clone, Debug, PartialEq)]
struct RoleEngine {
    /// GPUs a worker runs on.
    gpus: i64,
    /// KV tokens a worker holds (all its ranks').
    max_kv_tokens: u64,
    /// Its longest sequence, if it has one.
    context_length: Option<u64>,
}

impl RoleEngine {
    fn of(pool: &WorkerPool) -> RoleEngine {
        let common = &pool.engine.common;
        let gpus = i64::try_from(common.gpus_per_worker()).unwrap_or(i64::MAX);
        RoleEngine {
            gpus,
            max_kv_tokens: common.capacity.num_gpu_blocks
                * common.block_size
                * u64::from(common.dp_size),
            context_length: common.capacity.max_model_len,
        }
    }
}

/// One role's view at a tick: its counts, the target the planner last set, and the latest
/// pass of each of its active ranks.
#[derive(Debug, Default)]
struct RoleState {
    /// The target last set and not reached yet.
    pending: Option<u64>,
    /// The latest pass of each active rank, by (worker, rank): scheduled decode KV, queued
    /// decode KV, queued prefill tokens.
    passes: BTreeMap<(u64, u32), (u64, u64, u64)>,
}

/// A role's counts at a tick.
#[derive(Copy, Clone, Debug)]
struct Counts {
    ready: i64,
    current: i64,
    /// Scaling toward a target it has not reached, or workers still starting: no load
    /// decision and no floor.
    blocked: bool,
}

impl RoleState {
    /// Reads the role's counts and passes from a snapshot.
    fn observe(
        &mut self,
        active: &[u64],
        ready: u64,
        current: u64,
        passes: &[PassSnapshot],
    ) -> Counts {
        for pass in passes {
            let signals = (
                pass.sum_decode_kv_tokens,
                pass.sum_queued_decode_kv_tokens,
                pass.sum_queued_prefill_tokens,
            );
            self.passes.insert((pass.worker_id, pass.dp_rank), signals);
        }
        self.passes.retain(|(worker, _), _| active.contains(worker));
        let expected = self.pending.unwrap_or(current);
        let in_progress = self.pending.is_some_and(|t| t != current);
        Counts {
            ready: ready as i64,
            current: current as i64,
            blocked: in_progress || expected != ready,
        }
    }

    /// Whether the passes cover `ready` workers evenly (every worker the same ranks).
    fn reconciles(&self, ready: i64) -> bool {
        let mut ranks: BTreeMap<u64, usize> = BTreeMap::new();
        for (worker, _) in self.passes.keys() {
            *ranks.entry(*worker).or_default() += 1;
        }
        let per_worker = ranks.values().next().copied().unwrap_or(0);
        ranks.len() as i64 == ready
            && ranks.values().all(|&n| n == per_worker)
            && self.passes.len() as i64 == ready * per_worker as i64
    }
}

/// Dynamo 1.6.1's planner, easy mode, as a scaling policy.
#[derive(Debug)]
pub struct NativePlanner {
    config: PlannerConfig,
    mode: Mode,
    prefill_engine: Option<RoleEngine>,
    decode_engine: RoleEngine,
    prefill: RoleState,
    decode: RoleState,
    /// The last tick's time, in s (ticks accumulate by adding the interval, as 1.6.1's do).
    last_tick_s: f64,
    /// When load scaling last ran, in s.
    last_load_s: f64,
}

impl NativePlanner {
    /// The planner of `config` over a fleet of `pools`; Err if they do not go together.
    pub fn new(config: PlannerConfig, pools: &[WorkerPool]) -> Result<NativePlanner, String> {
        let first = |role: WorkerRole| pools.iter().find(|p| p.engine.common.role == role);
        let disaggregated = first(WorkerRole::Prefill).is_some();
        let mode = config.mode.unwrap_or(match disaggregated {
            true => Mode::Disagg,
            false => Mode::Agg,
        });
        let (prefill_engine, decode_engine) = match (mode, disaggregated) {
            (Mode::Agg, false) => {
                let pool = first(WorkerRole::Aggregated).ok_or("the run has no workers")?;
                (None, RoleEngine::of(pool))
            }
            (Mode::Disagg, true) => {
                let prefill = first(WorkerRole::Prefill).ok_or("the run has no prefill workers")?;
                let decode = first(WorkerRole::Decode).ok_or("the run has no decode workers")?;
                (Some(RoleEngine::of(prefill)), RoleEngine::of(decode))
            }
            (Mode::Agg, true) => return Err("mode agg, but the run is disaggregated".into()),
            (Mode::Disagg, false) => return Err("mode disagg, but the run is aggregated".into()),
        };
        if let (
            Mode::Disagg,
            Target::Load {
                prefill_tokens: None,
                ..
            },
        ) = (mode, config.target)
        {
            return Err(
                "optimization_target='load' requires prefill_scale_up_queue_tokens and \
                        prefill_scale_down_queue_tokens for prefill scaling"
                    .into(),
            );
        }
        // Dynamo's planner scales such a fleet to no worker at all (and its replay then
        // aborts at the next arrival): refused before the run.
        let floor_gpus = config
            .min_decode
            .saturating_mul(decode_engine.gpus)
            .saturating_add(
                prefill_engine.map_or(0, |e| config.min_prefill.saturating_mul(e.gpus)),
            );
        if config.max_gpu_budget >= 0 && config.max_gpu_budget < floor_gpus {
            return Err(format!(
                "max_gpu_budget {} is below the {floor_gpus} GPUs of the fewest workers allowed                  (min_endpoint): Dynamo's planner would scale every worker away",
                config.max_gpu_budget
            ));
        }
        Ok(NativePlanner {
            config,
            mode,
            prefill_engine,
            decode_engine,
            prefill: RoleState::default(),
            decode: RoleState::default(),
            last_tick_s: 0.0,
            last_load_s: 0.0,
        })
    }

    fn budget(&self) -> Budget {
        Budget {
            min_gpus: self.config.min_gpu_budget,
            max_gpus: self.config.max_gpu_budget,
        }
    }

    fn pair(&self) -> Pair {
        Pair {
            budget: self.budget(),
            prefill_gpus: self.prefill_engine.map_or(1, |e| e.gpus),
            decode_gpus: self.decode_engine.gpus,
            min_prefill: self.config.min_prefill,
            min_decode: self.config.min_decode,
        }
    }
}

/// When a role's signal calls for one more worker, or one fewer.
#[derive(Copy, Clone, Debug, PartialEq)]
struct Thresholds {
    up: f64,
    /// `>=` rather than `>`.
    up_inclusive: bool,
    down: f64,
    /// `<=` rather than `<`.
    down_inclusive: bool,
}

impl Thresholds {
    /// KV use (a fraction of the worker's KV tokens), by target.
    fn kv(target: Target) -> Thresholds {
        let strict = |up, down| Thresholds {
            up,
            up_inclusive: false,
            down,
            down_inclusive: false,
        };
        match target {
            Target::Throughput => strict(1.0, 0.6),
            Target::Latency => strict(0.4, 0.1),
            Target::Load {
                kv_up_percent,
                kv_down_percent,
                ..
            } => Thresholds {
                up: kv_up_percent / 100.0,
                up_inclusive: true,
                down: kv_down_percent / 100.0,
                down_inclusive: true,
            },
        }
    }

    /// Queued prefill (tokens under `load`, else a fraction of the context length), by target.
    fn prefill(target: Target) -> Thresholds {
        let of = |up, down, down_inclusive| Thresholds {
            up,
            up_inclusive: true,
            down,
            down_inclusive,
        };
        match target {
            Target::Throughput => of(1.0, 0.1, false),
            Target::Latency => of(0.1, 0.0, true),
            Target::Load { prefill_tokens, .. } => {
                let (up, down) = prefill_tokens.unwrap_or((u64::MAX, 0));
                of(up as f64, down as f64, true)
            }
        }
    }

    /// One role's decision from its ranks' `values` over `n` workers: one more if any is over,
    /// one fewer (not below `floor`) if every one is under and the rest would not be over,
    /// else none.
    fn step(self, values: &[f64], n: i64, floor: i64) -> Option<i64> {
        let over = |v: f64| {
            if self.up_inclusive {
                v >= self.up
            } else {
                v > self.up
            }
        };
        let under = |v: f64| {
            if self.down_inclusive {
                v <= self.down
            } else {
                v < self.down
            }
        };
        if values.iter().any(|&v| over(v)) {
            return Some(n + 1);
        }
        if n > 1 && values.iter().all(|&v| under(v)) {
            let desired = (n - 1).max(floor);
            let peak = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if 0 < desired && desired < n && peak * n as f64 / desired as f64 >= self.up {
                return Some(n);
            }
            return Some(desired);
        }
        None
    }
}

impl ScalingPolicy for NativePlanner {
    fn initial_tick_ms(&mut self) -> Result<Option<f64>, String> {
        Ok(Some(self.config.tick_s * 1000.0))
    }

    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> Result<ScalingDecision, String> {
        // The planner keeps its own clock: each tick one interval after the last.
        let at_s = self.last_tick_s + self.config.tick_s;
        self.last_tick_s = at_s;
        let load_due = at_s - self.last_load_s >= self.config.load_interval_s;
        if load_due {
            self.last_load_s = at_s;
        }
        let (targets, reason) = match self.mode {
            Mode::Agg => self.tick_agg(snapshot, load_due),
            Mode::Disagg => self.tick_disagg(snapshot, load_due),
        };
        Ok(ScalingDecision {
            target_prefill: targets.map(|t| t.0),
            target_decode: targets.map(|t| t.1),
            next_tick_ms: Some((at_s + self.config.tick_s) * 1000.0),
            reason,
        })
    }
}

/// A tick's answer: the targets (prefill, decode) if they change, and why.
type Answer = (Option<(u64, u64)>, Option<String>);

impl NativePlanner {
    fn tick_agg(&mut self, s: &ScalingSnapshot, load_due: bool) -> Answer {
        let d = self.decode.observe(
            &s.active_decode_ids,
            s.active_decode_count,
            s.non_draining_decode_count,
            &s.decode_fpm_snapshots,
        );
        let proposal = if load_due { self.propose_agg(d) } else { None };
        let (min_d, gpus, budget) = (
            self.config.min_decode,
            self.decode_engine.gpus,
            self.budget(),
        );
        let mut num_d = proposal.unwrap_or(d.ready);
        let tolerance = if budget.both_bounds() { gpus } else { 0 };
        let reconcile =
            !d.blocked && !budget.no_bounds() && !budget.holds(d.ready * gpus, tolerance);
        if !d.blocked && d.ready < min_d {
            num_d = num_d.max(min_d);
        }
        let scale_to = match num_d == d.ready && !reconcile {
            true => None,
            false => Some(budget.clamp_single(num_d.max(min_d), gpus, min_d)),
        };
        let scale_to = scale_to.filter(|&n| n != d.ready);
        if self.decode.pending == Some(d.current as u64) {
            self.decode.pending = None;
        }
        let Some(target) = scale_to.filter(|&n| n != d.current) else {
            return (None, None);
        };
        let target = target.max(0) as u64;
        self.decode.pending = Some(target);
        let reason = direction(d.current as u64, target);
        let targets = (s.non_draining_prefill_count, target);
        (Some(targets), Some(reason.to_string()))
    }

    /// Aggregated load scaling's proposal: one worker more or fewer by the ranks' KV use,
    /// within the budget; none while workers start or the passes do not cover the workers.
    fn propose_agg(&self, d: Counts) -> Option<i64> {
        let passes = &self.decode.passes;
        let max_kv = self.decode_engine.max_kv_tokens;
        if passes.is_empty()
            || d.blocked
            || !self.decode.reconciles(d.ready)
            || max_kv == 0
            || d.ready == 0
        {
            return None;
        }
        let use_of = |&(kv, queued_kv, queued_prefill): &(u64, u64, u64)| {
            (kv + queued_kv + queued_prefill) as f64 / max_kv as f64
        };
        let values: Vec<f64> = passes.values().map(use_of).collect();
        let min_d = self.config.min_decode;
        let desired = Thresholds::kv(self.config.target).step(&values, d.ready, min_d)?;
        let gpus = self.decode_engine.gpus;
        Some(
            self.budget()
                .guard_single(d.ready, desired.max(min_d), gpus, min_d),
        )
    }

    fn tick_disagg(&mut self, s: &ScalingSnapshot, load_due: bool) -> Answer {
        let p = self.prefill.observe(
            &s.active_prefill_ids,
            s.active_prefill_count,
            s.non_draining_prefill_count,
            &s.prefill_fpm_snapshots,
        );
        let d = self.decode.observe(
            &s.active_decode_ids,
            s.active_decode_count,
            s.non_draining_decode_count,
            &s.decode_fpm_snapshots,
        );
        let proposal = if load_due {
            self.propose_disagg(p, d)
        } else {
            None
        };
        let scale_to = self.project_disagg(p, d, proposal);
        for (role, counts) in [(&mut self.prefill, p), (&mut self.decode, d)] {
            if role.pending == Some(counts.current as u64) {
                role.pending = None;
            }
        }
        let Some((sp, sd)) = scale_to else {
            return (None, None);
        };
        let (cp, cd) = (p.current.max(0) as u64, d.current.max(0) as u64);
        let tp = sp.map_or(cp, |n| n.max(0) as u64);
        let td = sd.map_or(cd, |n| n.max(0) as u64);
        if tp == cp && td == cd {
            return (None, None);
        }
        let mut moves = Vec::new();
        if sp.is_some() && tp != cp {
            self.prefill.pending = Some(tp);
            moves.push(direction(cp, tp));
        }
        if sd.is_some() && td != cd {
            self.decode.pending = Some(td);
            moves.push(direction(cd, td));
        }
        moves.dedup();
        let reason = match moves.as_slice() {
            [one] => one.to_string(),
            _ => "rebalance".to_string(),
        };
        (Some((tp, td)), Some(reason))
    }

    /// The counts a disaggregated tick moves to (each `None`: as it is), from the load
    /// proposal or the ready counts: the roles' floors, then the budget.
    fn project_disagg(
        &self,
        p: Counts,
        d: Counts,
        proposal: Option<(i64, i64)>,
    ) -> Option<(Option<i64>, Option<i64>)> {
        let (min_p, min_d, pair) = (self.config.min_prefill, self.config.min_decode, self.pair());
        let (mut num_p, mut num_d) = proposal.unwrap_or((p.ready, d.ready));
        let blocked = p.blocked || d.blocked;
        let budget = pair.budget;
        let reconcile = !blocked
            && !budget.no_bounds()
            && !budget.holds(pair.total(p.ready, d.ready), pair.tolerance());
        let floored = (!blocked && p.ready < min_p, !blocked && d.ready < min_d);
        if floored.0 {
            num_p = num_p.max(min_p);
        }
        if floored.1 {
            num_d = num_d.max(min_d);
        }
        if num_p == p.ready && num_d == d.ready && !reconcile {
            return None;
        }
        let (np, nd) = pair.proportional_clamp(num_p.max(min_p), num_d.max(min_d));
        // A floor that moved one role leaves the other as it is, unless it was proposed.
        let keep = |n: i64, ready: i64, floored_self: bool| {
            let dropped =
                (floored.0 || floored.1) && n == ready && proposal.is_none() && !floored_self;
            (!dropped).then_some(n)
        };
        let (sp, sd) = (keep(np, p.ready, floored.0), keep(nd, d.ready, floored.1));
        let unchanged = sp.is_none_or(|n| n == p.ready) && sd.is_none_or(|n| n == d.ready);
        (!unchanged).then_some((sp, sd))
    }

    /// Disaggregated load scaling's proposal: each role's step (prefill by its queued
    /// tokens, decode by its KV use), both within the budget.
    fn propose_disagg(&self, p: Counts, d: Counts) -> Option<(i64, i64)> {
        let (prefill, decode) = (&self.prefill, &self.decode);
        let (p_empty, d_empty) = (prefill.passes.is_empty(), decode.passes.is_empty());
        if p_empty && d_empty || p.blocked || d.blocked {
            return None;
        }
        if !p_empty && !prefill.reconciles(p.ready) || !d_empty && !decode.reconciles(d.ready) {
            return None;
        }
        let (min_p, min_d) = (self.config.min_prefill, self.config.min_decode);
        let target = self.config.target;
        let p_desired = match (p_empty, p.ready, self.prefill_engine) {
            (false, 1.., Some(engine)) => {
                // Queued tokens under `load`, else a fraction of the context length (no
                // decision without one).
                let per_token = match target {
                    Target::Load { .. } => Some(1.0),
                    _ => (engine.context_length.filter(|&c| c > 0)).map(|c| 1.0 / c as f64),
                };
                per_token.and_then(|per_token| {
                    let value = |&(_, _, queued): &(u64, u64, u64)| match target {
                        Target::Load { .. } => queued as f64,
                        _ => queued as f64 * per_token,
                    };
                    let values: Vec<f64> = prefill.passes.values().map(value).collect();
                    Thresholds::prefill(target).step(&values, p.ready, min_p)
                })
            }
            _ => None,
        };
        let max_kv = self.decode_engine.max_kv_tokens;
        let d_desired = match (d_empty, d.ready, max_kv) {
            (false, 1.., 1..) => {
                let use_of =
                    |&(kv, queued_kv, _): &(u64, u64, u64)| (kv + queued_kv) as f64 / max_kv as f64;
                let values: Vec<f64> = decode.passes.values().map(use_of).collect();
                Thresholds::kv(target).step(&values, d.ready, min_d)
            }
            _ => None,
        };
        let fp = p_desired.unwrap_or(p.ready).max(min_p);
        let fd = d_desired.unwrap_or(d.ready).max(min_d);
        let pair = self.pair();
        let (fp, fd) = match p.ready < min_p || d.ready < min_d {
            true => pair.proportional_clamp(fp.max(min_p), fd.max(min_d)),
            false => pair.guard((p.ready, d.ready), (fp, fd)),
        };
        (fp != p.ready || fd != d.ready).then_some((fp, fd))
    }
}

/// 1.6.1's word for a change from `from` workers to `to`.
fn direction(from: u64, to: u64) -> &'static str {
    if to > from { "scale_up" } else { "scale_down" }
}

#[cfg(test)]
mod tests {
    use super::Thresholds;
    use super::config::Target;

    const LOAD: Target = Target::Load {
        kv_up_percent: 10.0,
        kv_down_percent: 2.0,
        prefill_tokens: None,
    };

    #[test]
    fn one_rank_over_adds_a_worker_and_all_under_remove_one() {
        let kv = Thresholds::kv(LOAD);
        assert_eq!(kv.step(&[0.05, 0.10], 2, 1), Some(3), "inclusive up");
        assert_eq!(kv.step(&[0.02, 0.01], 2, 1), Some(1), "inclusive down");
        assert_eq!(kv.step(&[0.05, 0.01], 2, 1), None);
        assert_eq!(kv.step(&[0.01], 1, 1), None, "never below one by load");
    }

    #[test]
    fn a_worker_is_kept_when_the_rest_would_be_over_the_up_threshold() {
        let throughput = Thresholds::kv(Target::Throughput);
        // Every rank under 60 %, but one worker would carry 0.55 × 2 / 1 = 1.1 >= 1.0.
        assert_eq!(throughput.step(&[0.55, 0.55], 2, 1), Some(2));
        // 0.55 × 3 / 2 = 0.825: the rest can carry it.
        assert_eq!(throughput.step(&[0.55, 0.5, 0.5], 3, 1), Some(2));
        assert_eq!(throughput.step(&[1.0, 0.5], 2, 1), None, "strict up");
        // A floor of 2 keeps 2 of 3 workers.
        assert_eq!(
            Thresholds::kv(LOAD).step(&[0.02, 0.02, 0.02], 3, 2),
            Some(2)
        );
    }
}
