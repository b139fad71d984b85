//! Worker eligibility, the default cost formula and the (seeded) pick among candidates.
//!
//! Three steps, all side-effect free (the only state touched is the caller's RNG):
//! 1. [`eligible_ranks`]: which (worker, dp_rank) targets a request may go to (allow-list,
//!    fencing, required taints, pin validation), with Dynamo's error choice.
//! 2. [`select_worker`]: Dynamo's default cost per candidate from the projected loads
//!    ([`RankLoad`]) and the indexer's prefix overlaps, then argmin with seeded uniform
//!    tie-breaking (temperature 0) or a softmax draw (temperature > 0).
//! 3. [`best_cached_tokens`]: the cache estimate a queued request's snapshot is taken with.
//!
//! Only the device cache tier exists in our model: host, disk and shared-cache hits are zero,
//! but their terms are kept in the formula so a future tier model plugs in.

use super::load::RankLoad;
use super::router_config::RouterConfig;
use super::types::{WorkerId, WorkerWithDpRank};
use crate::rng::SimRng;
use rand::RngExt;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// `max_num_batched_tokens` assumed for a worker that does not report one (Dynamo's default),
/// the same default the policy's busy thresholds use.
pub use super::policy::DEFAULT_MAX_BATCHED_TOKENS;

// ---------------------------------------------------------------------------------------------
// Workers and constraints
// ---------------------------------------------------------------------------------------------

/// What the router knows about one worker (Dynamo's per-worker runtime config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// First data-parallel rank this worker serves.
    pub dp_start: u32,
    /// Number of data-parallel ranks: the worker serves `[dp_start, dp_start + dp_size)`.
    pub dp_size: u32,
    /// The engine's batch token budget, if reported (busy fractions multiply it).
    pub max_num_batched_tokens: Option<u64>,
    /// Labels a request can require or prefer.
    pub taints: BTreeSet<String>,
    /// A fenced worker is being drained: it takes no new requests, pinned or not.
    pub fenced: bool,
}

impl Default for WorkerConfig {
    /// One rank (0), no batch budget reported, no taints, not fenced.
    fn default() -> Self {
        WorkerConfig {
            dp_start: 0,
            dp_size: 1,
            max_num_batched_tokens: None,
            taints: BTreeSet::new(),
            fenced: false,
        }
    }
}

impl WorkerConfig {
    /// The ranks this worker serves, ascending.
    pub fn dp_ranks(&self) -> std::ops::Range<u32> {
        self.dp_start..self.dp_start.saturating_add(self.dp_size)
    }

    /// The batch token budget, or [`DEFAULT_MAX_BATCHED_TOKENS`] when unreported.
    pub fn max_batched_tokens(&self) -> u64 {
        self.max_num_batched_tokens
            .unwrap_or(DEFAULT_MAX_BATCHED_TOKENS)
    }

    fn has_all_taints(&self, required: &[String]) -> bool {
        required.iter().all(|taint| self.taints.contains(taint))
    }

    fn preferred_taint_weight(&self, preferred: &[(String, f64)]) -> f64 {
        preferred
            .iter()
            .filter(|(taint, _)| self.taints.contains(taint))
            .map(|(_, weight)| weight)
            .sum()
    }
}

/// The discovered workers (Dynamo's worker config map), ordered by worker id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerSet {
    workers: BTreeMap<WorkerId, WorkerConfig>,
    /// The ranks of the unfenced workers, in (worker_id, dp_rank) order: every rank a request
    /// without constraints may use, kept so that routing it does not walk the map (a fleet of
    /// 128 workers otherwise checks 128 configs per request).
    open_ranks: Vec<WorkerWithDpRank>,
}

impl WorkerSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a worker; returns the previous config.
    pub fn insert(&mut self, worker: WorkerId, config: WorkerConfig) -> Option<WorkerConfig> {
        let previous = self.workers.insert(worker, config);
        self.open_ranks = self.ranks_where(|config| !config.fenced).collect();
        previous
    }

    /// Removes a worker; returns its config.
    pub fn remove(&mut self, worker: WorkerId) -> Option<WorkerConfig> {
        let removed = self.workers.remove(&worker);
        self.open_ranks = self.ranks_where(|config| !config.fenced).collect();
        removed
    }

    /// The ranks of the unfenced workers, in (worker_id, dp_rank) order.
    pub fn open_ranks(&self) -> &[WorkerWithDpRank] {
        &self.open_ranks
    }

    /// The ranks of the workers whose config passes `keep`, in (worker_id, dp_rank) order.
    fn ranks_where<'a>(
        &'a self,
        keep: impl Fn(&WorkerConfig) -> bool + 'a,
    ) -> impl Iterator<Item = WorkerWithDpRank> + 'a {
        let kept = self.workers.iter().filter(move |(_, config)| keep(config));
        kept.flat_map(|(&worker, config)| {
            config
                .dp_ranks()
                .map(move |dp_rank| WorkerWithDpRank::new(worker, dp_rank))
        })
    }

    /// A worker's config.
    pub fn get(&self, worker: WorkerId) -> Option<&WorkerConfig> {
        self.workers.get(&worker)
    }

    /// Workers and configs in worker-id order.
    pub fn iter(&self) -> impl Iterator<Item = (WorkerId, &WorkerConfig)> {
        self.workers.iter().map(|(id, config)| (*id, config))
    }

    /// Every rank of every worker, in (worker_id, dp_rank) order.
    pub fn ranks(&self) -> impl Iterator<Item = WorkerWithDpRank> + '_ {
        self.ranks_where(|_| true)
    }

    /// The ranks after `rank`, in (worker_id, dp_rank) order.
    pub fn ranks_after(
        &self,
        rank: WorkerWithDpRank,
    ) -> impl Iterator<Item = WorkerWithDpRank> + '_ {
        let from = self.workers.range(rank.worker_id..);
        from.flat_map(|(&worker, config)| {
            config
                .dp_ranks()
                .map(move |dp_rank| WorkerWithDpRank::new(worker, dp_rank))
        })
        .skip_while(move |r| *r <= rank)
    }

    /// Number of workers (not ranks): queue limits scale by this.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Number of ranks over all workers.
    pub fn rank_count(&self) -> usize {
        self.workers.values().map(|c| c.dp_ranks().len()).sum()
    }

    /// Whether `rank` is one of a known worker's ranks.
    pub fn contains_rank(&self, rank: WorkerWithDpRank) -> bool {
        self.get(rank.worker_id)
            .is_some_and(|config| config.dp_ranks().contains(&rank.dp_rank))
    }
}

/// Per-request routing constraints. `Default` is unconstrained.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestConstraints {
    /// If set, only these workers may serve the request.
    pub allowed_workers: Option<BTreeSet<WorkerId>>,
    /// If set, the request must go to exactly this rank (no scoring).
    pub pinned: Option<WorkerWithDpRank>,
    /// The worker must carry every one of these taints.
    pub required_taints: Vec<String>,
    /// Matching taints lower the cost: it is multiplied by `exp(-tanh(sum of weights))`.
    pub preferred_taints: Vec<(String, f64)>,
}

impl RequestConstraints {
    fn allows_worker(&self, worker: WorkerId) -> bool {
        self.allowed_workers
            .as_ref()
            .is_none_or(|allowed| allowed.contains(&worker))
    }

    /// Allowed and carrying the required taints (fencing not considered).
    fn admits(&self, worker: WorkerId, config: &WorkerConfig) -> bool {
        self.allows_worker(worker) && config.has_all_taints(&self.required_taints)
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why no worker could be chosen (Dynamo's selection errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectError {
    /// No worker can take the request (none known, none allowed/matching, or a bad pin).
    NoEndpoints,
    /// The pinned rank's worker is not in the request's allow-list.
    PinnedWorkerNotAllowed(WorkerWithDpRank),
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::NoEndpoints => f.write_str("no worker endpoints available"),
            SelectError::PinnedWorkerNotAllowed(rank) => {
                write!(f, "pinned {rank} is not in the allowed worker set")
            }
        }
    }
}

impl std::error::Error for SelectError {}

// ---------------------------------------------------------------------------------------------
// Eligibility (docs/scheduling.md#eligibility)
// ---------------------------------------------------------------------------------------------

/// The ranks the request may be routed to, in (worker_id, dp_rank) order.
///
/// A pin is validated in the order allow-list, fencing, existence and rank range, required
/// taints, and yields exactly the pinned rank.
pub fn eligible_ranks(
    workers: &WorkerSet,
    constraints: &RequestConstraints,
) -> Result<Vec<WorkerWithDpRank>, SelectError> {
    if let Some(pin) = constraints.pinned {
        return validate_pin(workers, constraints, pin);
    }
    if constraints.allowed_workers.is_none() && constraints.required_taints.is_empty() {
        // Every unfenced worker admits it.
        return match workers.open_ranks() {
            [] => Err(SelectError::NoEndpoints),
            ranks => Ok(ranks.to_vec()),
        };
    }
    // One rank per worker is the common layout: one allocation instead of repeated growth.
    let mut ranks = Vec::with_capacity(workers.worker_count());
    for (worker, config) in workers.iter() {
        if config.fenced || !constraints.admits(worker, config) {
            continue;
        }
        ranks.extend(
            config
                .dp_ranks()
                .map(|dp_rank| WorkerWithDpRank::new(worker, dp_rank)),
        );
    }
    if ranks.is_empty() {
        Err(SelectError::NoEndpoints)
    } else {
        Ok(ranks)
    }
}

fn validate_pin(
    workers: &WorkerSet,
    constraints: &RequestConstraints,
    pin: WorkerWithDpRank,
) -> Result<Vec<WorkerWithDpRank>, SelectError> {
    if !constraints.allows_worker(pin.worker_id) {
        return Err(SelectError::PinnedWorkerNotAllowed(pin));
    }
    let config = workers.get(pin.worker_id);
    if config.is_some_and(|config| config.fenced) {
        return Err(SelectError::NoEndpoints);
    }
    let Some(config) = config.filter(|config| config.dp_ranks().contains(&pin.dp_rank)) else {
        return Err(SelectError::NoEndpoints);
    };
    if !config.has_all_taints(&constraints.required_taints) {
        return Err(SelectError::NoEndpoints);
    }
    Ok(vec![pin])
}

// ---------------------------------------------------------------------------------------------
// Cost and pick (docs/scheduling.md#cost-and-pick)
// ---------------------------------------------------------------------------------------------

/// Everything one selection reads. Slices are sorted by rank, as [`eligible_ranks`],
/// [`crate::scheduling::load::LoadTracker::project`] and
/// [`crate::scheduling::indexer::OverlapIndexer::overlap_blocks`] return them.
#[derive(Clone, Copy, Debug)]
pub struct SelectionInputs<'a> {
    /// The eligible ranks, sorted by (worker_id, dp_rank).
    pub candidates: &'a [WorkerWithDpRank],
    /// Projected loads; a candidate without a row is scored as an idle rank.
    pub loads: &'a [RankLoad],
    /// Device-tier prefix overlap in blocks; a missing rank has 0.
    pub overlaps: &'a [(WorkerWithDpRank, u32)],
    /// The request's input length in tokens.
    pub isl_tokens: u64,
    /// Tokens per KV block (> 0).
    pub block_size: u64,
    /// The worker configs, read for preferred taints.
    pub workers: &'a WorkerSet,
    /// The request's preferred taints and weights (empty = no multiplier).
    pub preferred_taints: &'a [(String, f64)],
}

/// The chosen rank and what the scheduler needs from the choice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Selection {
    /// Where the request goes.
    pub rank: WorkerWithDpRank,
    /// `min(overlap_blocks * block_size, isl)`: prompt tokens the rank already caches.
    pub cached_tokens: u64,
    /// Leading prompt blocks the rank holds (device tier).
    pub overlap_blocks: u32,
    /// `ceil(isl / block_size)`.
    pub required_blocks: u64,
    /// The rank's cost (lower is better).
    pub cost: f64,
}

/// One candidate's score, with the load row it was scored from.
#[derive(Clone, Copy, Debug)]
struct Scored<'a> {
    rank: WorkerWithDpRank,
    /// The rank's projected load; `None` is an idle rank.
    load: Option<&'a RankLoad>,
    overlap_blocks: u32,
    cost: f64,
}

/// Scores every candidate and picks one (see the module docs). Side-effect free except for
/// draws from `rng`: at temperature 0 only when costs tie, otherwise one draw when there is
/// more than one candidate. Errors with `NoEndpoints` when there is no candidate.
pub fn select_worker(
    cfg: &RouterConfig,
    inputs: &SelectionInputs<'_>,
    rng: &mut SimRng,
) -> Result<Selection, SelectError> {
    debug_assert!(inputs.candidates.is_sorted(), "candidates must be sorted");
    let scores = score_candidates(cfg, inputs);
    let chosen = if cfg.router_temperature > 0.0 {
        pick_softmax(&scores, cfg.router_temperature, rng)
    } else {
        pick_min_cost(&scores, rng)
    };
    let chosen = chosen.ok_or(SelectError::NoEndpoints)?;
    Ok(selection_of(&scores[chosen], inputs))
}

/// The selection for a pinned request: the pin itself, with its cost for logging. No draws.
pub fn pinned_selection(
    cfg: &RouterConfig,
    inputs: &SelectionInputs<'_>,
    pin: WorkerWithDpRank,
) -> Selection {
    let pinned_inputs = SelectionInputs {
        candidates: std::slice::from_ref(&pin),
        ..*inputs
    };
    let scores = score_candidates(cfg, &pinned_inputs);
    selection_of(&scores[0], inputs)
}

/// The cost of every candidate, in candidate order.
pub fn candidate_costs(
    cfg: &RouterConfig,
    inputs: &SelectionInputs<'_>,
) -> Vec<(WorkerWithDpRank, f64)> {
    score_candidates(cfg, inputs)
        .into_iter()
        .map(|scored| (scored.rank, scored.cost))
        .collect()
}

fn selection_of(scored: &Scored<'_>, inputs: &SelectionInputs<'_>) -> Selection {
    let block_size = inputs.block_size.max(1);
    let cached_tokens = u64::from(scored.overlap_blocks).saturating_mul(block_size);
    Selection {
        rank: scored.rank,
        cached_tokens: cached_tokens.min(inputs.isl_tokens),
        overlap_blocks: scored.overlap_blocks,
        required_blocks: inputs.isl_tokens.div_ceil(block_size),
        cost: scored.cost,
    }
}

/// Costs of the ranks for a request that overlaps no rank (no index overlap, no live prefix
/// in the load book) and is scored without preferred taints, as [`select_worker`] costs
/// them. A rank's cost then depends only on its load row and the request's length, so a
/// caller may keep it while neither changes and pick among kept costs with
/// [`pick_min_cost_of`], drawing what `select_worker` would.
#[derive(Clone, Copy, Debug)]
pub struct UnsharedCosts {
    terms: RequestTerms,
}

impl UnsharedCosts {
    /// None unless `select_worker` would pick the minimum cost (temperature 0) and the
    /// overlap credit does not decay (its decay reads every rank's prefill tokens).
    pub fn new(cfg: &RouterConfig, isl_tokens: u64, block_size: u64) -> Option<Self> {
        let decays = cfg.overlap_score_credit_decay > 0.0 && cfg.router_track_prefill_tokens;
        if cfg.router_temperature > 0.0 || decays {
            return None;
        }
        // Without decay the lowest prefill load is never read: 0 stands for it.
        let terms = RequestTerms::new(cfg, isl_tokens, block_size, 0);
        Some(UnsharedCosts { terms })
    }

    /// The cost of a rank whose row is `row`.
    pub fn cost(&self, cfg: &RouterConfig, row: &RankLoad) -> f64 {
        rank_cost(cfg, &self.terms, Some(row), 0)
    }

    /// The selection of `rank` at `cost`: it holds none of the prompt.
    pub fn selection(&self, rank: WorkerWithDpRank, cost: f64) -> Selection {
        Selection {
            rank,
            cached_tokens: 0,
            overlap_blocks: 0,
            required_blocks: self.terms.isl_tokens.div_ceil(self.terms.block_size),
            cost,
        }
    }
}

/// A row of a table sorted by rank.
trait RankRow {
    fn row_rank(&self) -> WorkerWithDpRank;
}

impl RankRow for RankLoad {
    fn row_rank(&self) -> WorkerWithDpRank {
        self.rank
    }
}

impl RankRow for (WorkerWithDpRank, u32) {
    fn row_rank(&self) -> WorkerWithDpRank {
        self.0
    }
}

/// Looks up rows of a rank-sorted table (one row per rank). Ranks asked in ascending order
/// cost one forward walk over the table in all; any other order falls back to a binary
/// search, so every order gives the same answers.
struct RankCursor<'a, T> {
    rows: &'a [T],
    /// Every row before `next` has a rank below all rows from `next` on (the table is sorted).
    next: usize,
}

impl<'a, T: RankRow> RankCursor<'a, T> {
    fn new(rows: &'a [T]) -> Self {
        RankCursor { rows, next: 0 }
    }

    fn find(&mut self, rank: WorkerWithDpRank) -> Option<&'a T> {
        let rows = self.rows;
        // Walking forward only finds ranks strictly after the last row passed; a rank equal
        // to or below it (asked again, or out of order) may sit behind the cursor.
        if self.next > 0 && rows[self.next - 1].row_rank() >= rank {
            return rows
                .binary_search_by(|row| row.row_rank().cmp(&rank))
                .ok()
                .map(|index| &rows[index]);
        }
        while let Some(row) = rows.get(self.next) {
            match row.row_rank().cmp(&rank) {
                Ordering::Less => self.next += 1,
                Ordering::Equal => {
                    self.next += 1;
                    return Some(row);
                }
                Ordering::Greater => return None,
            }
        }
        None
    }
}

fn overlap_of(overlaps: &[(WorkerWithDpRank, u32)], rank: WorkerWithDpRank) -> u32 {
    overlaps
        .binary_search_by(|(r, _)| r.cmp(&rank))
        .map_or(0, |index| overlaps[index].1)
}

/// The terms of the cost that depend only on the request and the config, computed once per
/// selection. Each holds exactly the value the per-rank formula used to recompute, so costs
/// are unchanged to the bit.
#[derive(Clone, Copy, Debug)]
struct RequestTerms {
    /// `block_size` clamped to at least 1.
    block_size: u64,
    block_size_f: f64,
    isl_tokens: u64,
    /// `ceil(isl / block_size)`, at least 1: the credit decay's denominator.
    request_blocks_f: f64,
    /// `floor(isl / block_size)`: the decode blocks of a rank without a load row.
    idle_decode_blocks_f: f64,
    overlap_score_credit: f64,
    shared_cache_multiplier: f64,
    prefill_load_scale: f64,
    /// The lowest active prefill tokens over the candidates (idle ranks count 0).
    min_active_prefill_tokens: u64,
}

impl RequestTerms {
    fn new(
        cfg: &RouterConfig,
        isl_tokens: u64,
        block_size: u64,
        min_active_prefill_tokens: u64,
    ) -> Self {
        let block_size = block_size.max(1);
        RequestTerms {
            block_size,
            block_size_f: block_size as f64,
            isl_tokens,
            request_blocks_f: isl_tokens.div_ceil(block_size).max(1) as f64,
            idle_decode_blocks_f: (isl_tokens / block_size) as f64,
            overlap_score_credit: cfg.effective_overlap_score_credit(),
            shared_cache_multiplier: cfg.effective_shared_cache_multiplier(),
            prefill_load_scale: cfg.effective_prefill_load_scale(),
            min_active_prefill_tokens,
        }
    }
}

fn score_candidates<'a>(cfg: &RouterConfig, inputs: &SelectionInputs<'a>) -> Vec<Scored<'a>> {
    debug_assert!(inputs.block_size > 0, "block_size must be positive");
    let mut overlaps = RankCursor::new(inputs.overlaps);
    let mut overlap_of = |rank| match inputs.overlaps.is_empty() {
        true => 0,
        false => overlaps.find(rank).map_or(0, |&(_, blocks)| blocks),
    };
    let mut scores: Vec<Scored<'a>> = match rows_of_candidates(inputs) {
        // The usual request: every rank a candidate, each with its row. Two loops rather than
        // one choosing the row's source per rank, which took 2.6% more instructions on the
        // 1M case's first 20,000 rows.
        Some(rows) => (inputs.candidates.iter().zip(rows))
            .map(|(&rank, row)| Scored {
                rank,
                load: Some(row),
                overlap_blocks: overlap_of(rank),
                cost: 0.0,
            })
            .collect(),
        None => {
            let mut loads = RankCursor::new(inputs.loads);
            (inputs.candidates.iter())
                .map(|&rank| Scored {
                    rank,
                    load: loads.find(rank),
                    overlap_blocks: overlap_of(rank),
                    cost: 0.0,
                })
                .collect()
        }
    };
    let min_active_prefill_tokens = (scores.iter())
        .map(|scored| scored.load.map_or(0, |l| l.active_prefill_tokens))
        .min()
        .unwrap_or(0);
    let terms = RequestTerms::new(
        cfg,
        inputs.isl_tokens,
        inputs.block_size,
        min_active_prefill_tokens,
    );
    for scored in &mut scores {
        scored.cost = rank_cost(cfg, &terms, scored.load, scored.overlap_blocks)
            * preferred_taint_multiplier(inputs, scored.rank);
    }
    scores
}

/// The load rows of the candidates, if the rows are exactly the candidates', in order: the
/// rows can then be read in step, without looking each rank up.
fn rows_of_candidates<'a>(inputs: &SelectionInputs<'a>) -> Option<&'a [RankLoad]> {
    let (rows, candidates) = (inputs.loads, inputs.candidates);
    let aligned = rows.len() == candidates.len()
        && rows
            .iter()
            .zip(candidates)
            .all(|(row, &rank)| row.rank == rank);
    aligned.then_some(rows)
}

/// Dynamo's default cost for one rank before the preferred-taint multiplier (device tier
/// only; other tiers contribute 0). `load` is the rank's row (`None`: idle rank).
fn rank_cost(
    cfg: &RouterConfig,
    terms: &RequestTerms,
    load: Option<&RankLoad>,
    device_blocks: u32,
) -> f64 {
    let isl = terms.isl_tokens;
    let active_prefill_tokens = load.map_or(0, |l| l.active_prefill_tokens);
    let cached_tokens = u64::from(device_blocks).saturating_mul(terms.block_size);

    let raw_prefill_blocks = if cfg.router_track_prefill_tokens {
        // active + uncached + cached: equals active + isl unless the overlap overshoots isl.
        let uncached = isl - cached_tokens.min(isl);
        let raw_tokens = active_prefill_tokens
            .saturating_add(uncached)
            .saturating_add(cached_tokens);
        raw_tokens as f64 / terms.block_size_f
    } else {
        0.0
    };
    let decay = credit_decay(
        cfg,
        active_prefill_tokens - terms.min_active_prefill_tokens.min(active_prefill_tokens),
        terms.block_size_f,
        terms.request_blocks_f,
    );
    let (host_blocks, disk_blocks, shared_blocks_beyond_device) = (0.0, 0.0, 0.0);
    let overlap_credit_blocks = terms.overlap_score_credit * decay * device_blocks as f64
        + cfg.host_cache_hit_weight * host_blocks
        + cfg.disk_cache_hit_weight * disk_blocks
        + terms.shared_cache_multiplier * shared_blocks_beyond_device;
    // A candidate the tracker has no row for is an idle rank: the whole query is new.
    let decode_blocks = load.map_or(terms.idle_decode_blocks_f, |l| {
        l.potential_decode_blocks() as f64
    });
    let active_requests = load.map_or(0, |l| l.active_requests) as f64;

    let prefill_cost =
        terms.prefill_load_scale * (raw_prefill_blocks - overlap_credit_blocks).max(0.0);
    prefill_cost + decode_blocks + cfg.decode_active_request_weight * active_requests
}

/// `1 / (1 + decay * (excess prefill blocks) / request blocks)`, or 1 when decay is off.
fn credit_decay(
    cfg: &RouterConfig,
    excess_prefill_tokens: u64,
    block_size_f: f64,
    request_blocks: f64,
) -> f64 {
    if cfg.overlap_score_credit_decay > 0.0 && cfg.router_track_prefill_tokens {
        let excess_blocks = excess_prefill_tokens as f64 / block_size_f;
        1.0 / (1.0 + cfg.overlap_score_credit_decay * excess_blocks / request_blocks)
    } else {
        1.0
    }
}

/// `exp(-tanh(sum of matching preferred weights))` in [1/e, e]; 1 without preferences.
fn preferred_taint_multiplier(inputs: &SelectionInputs<'_>, rank: WorkerWithDpRank) -> f64 {
    if inputs.preferred_taints.is_empty() {
        return 1.0;
    }
    let weight = inputs.workers.get(rank.worker_id).map_or(0.0, |config| {
        config.preferred_taint_weight(inputs.preferred_taints)
    });
    (-weight.tanh()).exp()
}

/// Index of a minimum-cost candidate; ties broken uniformly by reservoir sampling in order.
fn pick_min_cost(scores: &[Scored<'_>], rng: &mut SimRng) -> Option<usize> {
    pick_min_cost_of(scores.iter().map(|scored| scored.cost), rng)
}

/// Index of a minimum cost of `costs` as [`select_worker`] picks at temperature 0: ties
/// broken uniformly by reservoir sampling in order, with the same draws from `rng`.
pub fn pick_min_cost_of(costs: impl IntoIterator<Item = f64>, rng: &mut SimRng) -> Option<usize> {
    let mut costs = costs.into_iter();
    let mut best_cost = costs.next()?;
    let (mut best, mut tied) = (0, 1u64);
    // A tie keeps `best_cost`: the tied cost equals it (at most a zero of the other sign,
    // which compares the same).
    for (offset, cost) in costs.enumerate() {
        if cost < best_cost {
            (best, best_cost, tied) = (offset + 1, cost, 1);
        } else if cost == best_cost {
            tied += 1;
            if rng.random_range(0..tied) == 0 {
                best = offset + 1;
            }
        }
    }
    Some(best)
}

/// Index drawn with `p_i ∝ exp(-(c_i - c_min) / ((c_max - c_min) * temperature))`.
fn pick_softmax(scores: &[Scored<'_>], temperature: f64, rng: &mut SimRng) -> Option<usize> {
    match scores.len() {
        0 => return None,
        1 => return Some(0),
        _ => {}
    }
    let weights = softmax_weights(scores, temperature);
    let total: f64 = weights.iter().sum();
    let draw: f64 = rng.random::<f64>();
    let mut cumulative = 0.0;
    for (index, weight) in weights.iter().enumerate() {
        cumulative += weight / total;
        if cumulative >= draw {
            return Some(index);
        }
    }
    Some(scores.len() - 1)
}

/// Unnormalised softmax weights over min-max normalised costs (all 1 when costs are equal).
fn softmax_weights(scores: &[Scored<'_>], temperature: f64) -> Vec<f64> {
    // An infinite cost (only from absurd weights) is clamped so the range stays finite.
    let costs: Vec<f64> = scores.iter().map(|s| s.cost.min(f64::MAX)).collect();
    let min_cost = costs.iter().copied().fold(f64::INFINITY, f64::min);
    let max_cost = costs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = max_cost - min_cost;
    if range.is_nan() || range <= 0.0 || range.is_infinite() {
        return vec![1.0; costs.len()];
    }
    costs
        .iter()
        .map(|cost| (-((cost - min_cost) / range) / temperature).exp())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The queue snapshot's cache estimate (docs/scheduling.md#cached-tokens-and-the-queue-snapshot)
// ---------------------------------------------------------------------------------------------

/// The effective cached tokens a queued request is classified and costed with.
///
/// Pinned: the pinned rank's overlap (0 if it has none). Otherwise the best overlap over the
/// ranks of known workers the request is allowed on (allow-list and required taints; fencing
/// is ignored), 0 if none. Not clamped to the ISL: the queue
/// snapshot does that.
pub fn best_cached_tokens(
    workers: &WorkerSet,
    constraints: &RequestConstraints,
    overlaps: &[(WorkerWithDpRank, u32)],
    block_size: u64,
) -> u64 {
    let best_blocks = match constraints.pinned {
        Some(pin) => overlap_of(overlaps, pin),
        None => overlaps
            .iter()
            .filter(|(rank, _)| rank_admits(workers, constraints, *rank))
            .map(|(_, blocks)| *blocks)
            .max()
            .unwrap_or(0),
    };
    u64::from(best_blocks).saturating_mul(block_size)
}

fn rank_admits(
    workers: &WorkerSet,
    constraints: &RequestConstraints,
    rank: WorkerWithDpRank,
) -> bool {
    workers.get(rank.worker_id).is_some_and(|config| {
        config.dp_ranks().contains(&rank.dp_rank) && constraints.admits(rank.worker_id, config)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng;
    use proptest::prelude::*;

    fn rank(worker_id: u64, dp_rank: u32) -> WorkerWithDpRank {
        WorkerWithDpRank::new(worker_id, dp_rank)
    }

    fn worker(dp_start: u32, dp_size: u32, taints: &[&str]) -> WorkerConfig {
        WorkerConfig {
            dp_start,
            dp_size,
            taints: taints.iter().map(|t| t.to_string()).collect(),
            ..WorkerConfig::default()
        }
    }

    /// Workers 1 (ranks 0,1; "gpu"), 2 (rank 0; "gpu","fast"), 3 (ranks 2,3; no taints).
    fn three_workers() -> WorkerSet {
        let mut set = WorkerSet::new();
        set.insert(3, worker(2, 2, &[]));
        set.insert(1, worker(0, 2, &["gpu"]));
        set.insert(2, worker(0, 1, &["gpu", "fast"]));
        set
    }

    fn ids(workers: &[WorkerId]) -> BTreeSet<WorkerId> {
        workers.iter().copied().collect()
    }

    fn pinned(pin: WorkerWithDpRank) -> RequestConstraints {
        RequestConstraints {
            pinned: Some(pin),
            ..RequestConstraints::default()
        }
    }

    // --- worker set and eligibility -----------------------------------------------------------

    #[test]
    fn worker_set_iterates_ranks_in_order() {
        let set = three_workers();
        let ranks: Vec<_> = set.ranks().collect();
        assert_eq!(
            ranks,
            vec![rank(1, 0), rank(1, 1), rank(2, 0), rank(3, 2), rank(3, 3)]
        );
        assert_eq!(set.worker_count(), 3);
        assert_eq!(set.rank_count(), 5);
        assert!(set.contains_rank(rank(3, 3)) && !set.contains_rank(rank(3, 1)));
        assert_eq!(
            set.get(1).unwrap().max_batched_tokens(),
            DEFAULT_MAX_BATCHED_TOKENS
        );
    }

    #[test]
    fn unconstrained_request_may_use_every_rank() {
        let set = three_workers();
        let ranks = eligible_ranks(&set, &RequestConstraints::default()).unwrap();
        assert_eq!(ranks, set.ranks().collect::<Vec<_>>());
    }

    /// An unconstrained request's ranks are kept with the set: they follow every insert,
    /// fence, unfence and removal, as a walk over the workers would find them.
    #[test]
    fn an_unconstrained_request_follows_fencing_and_removal() {
        let mut set = three_workers();
        let walked = |set: &WorkerSet| -> Vec<WorkerWithDpRank> {
            let open = set.iter().filter(|(_, config)| !config.fenced);
            open.flat_map(|(w, config)| config.dp_ranks().map(move |d| rank(w, d)))
                .collect()
        };
        let fenced = WorkerConfig {
            fenced: true,
            ..worker(2, 2, &[])
        };
        let changes: [(u64, Option<WorkerConfig>); 5] = [
            (3, Some(fenced)),
            (4, Some(worker(0, 3, &["gpu"]))),
            (1, None),
            (3, Some(worker(2, 2, &[]))),
            (2, None),
        ];
        for (id, change) in changes {
            match change {
                Some(config) => set.insert(id, config),
                None => set.remove(id),
            };
            let eligible = eligible_ranks(&set, &RequestConstraints::default());
            assert_eq!(
                eligible.unwrap(),
                walked(&set),
                "after changing worker {id}"
            );
        }
        for id in [3, 4] {
            set.insert(
                id,
                WorkerConfig {
                    fenced: true,
                    ..WorkerConfig::default()
                },
            );
        }
        let unconstrained = RequestConstraints::default();
        assert_eq!(
            eligible_ranks(&set, &unconstrained),
            Err(SelectError::NoEndpoints)
        );
    }

    #[test]
    fn allow_list_taints_and_fencing_filter_workers() {
        let mut set = three_workers();
        let constraints = RequestConstraints {
            allowed_workers: Some(ids(&[1, 2])),
            required_taints: vec!["gpu".into()],
            ..RequestConstraints::default()
        };
        assert_eq!(
            eligible_ranks(&set, &constraints).unwrap(),
            vec![rank(1, 0), rank(1, 1), rank(2, 0)]
        );
        set.insert(
            1,
            WorkerConfig {
                fenced: true,
                ..worker(0, 2, &["gpu"])
            },
        );
        assert_eq!(
            eligible_ranks(&set, &constraints).unwrap(),
            vec![rank(2, 0)]
        );
        let fast_only = RequestConstraints {
            required_taints: vec!["fast".into(), "gpu".into()],
            ..RequestConstraints::default()
        };
        assert_eq!(eligible_ranks(&set, &fast_only).unwrap(), vec![rank(2, 0)]);
    }

    #[test]
    fn no_eligible_worker_is_no_endpoints() {
        let set = three_workers();
        let missing_taint = RequestConstraints {
            required_taints: vec!["tpu".into()],
            ..RequestConstraints::default()
        };
        assert_eq!(
            eligible_ranks(&set, &missing_taint),
            Err(SelectError::NoEndpoints)
        );
        assert_eq!(
            eligible_ranks(&WorkerSet::new(), &RequestConstraints::default()),
            Err(SelectError::NoEndpoints)
        );
    }

    #[test]
    fn valid_pin_yields_exactly_the_pin() {
        let set = three_workers();
        assert_eq!(
            eligible_ranks(&set, &pinned(rank(3, 3))),
            Ok(vec![rank(3, 3)])
        );
        assert_eq!(
            eligible_ranks(&set, &pinned(rank(1, 1))),
            Ok(vec![rank(1, 1)])
        );
    }

    #[test]
    fn pin_is_validated_allow_list_first() {
        let set = three_workers();
        // Not allowed and out of range: the allow-list wins.
        let constraints = RequestConstraints {
            allowed_workers: Some(ids(&[2])),
            ..pinned(rank(1, 9))
        };
        assert_eq!(
            eligible_ranks(&set, &constraints),
            Err(SelectError::PinnedWorkerNotAllowed(rank(1, 9)))
        );
    }

    #[test]
    fn pin_failures_are_no_endpoints() {
        let mut set = three_workers();
        // Unknown worker, rank out of range, missing taint, fenced worker: NoEndpoints.
        assert_eq!(
            eligible_ranks(&set, &pinned(rank(4, 0))),
            Err(SelectError::NoEndpoints)
        );
        assert_eq!(
            eligible_ranks(&set, &pinned(rank(3, 0))),
            Err(SelectError::NoEndpoints)
        );
        let needs_fast = RequestConstraints {
            required_taints: vec!["fast".into()],
            ..pinned(rank(1, 0))
        };
        assert_eq!(
            eligible_ranks(&set, &needs_fast),
            Err(SelectError::NoEndpoints)
        );
        set.insert(
            2,
            WorkerConfig {
                fenced: true,
                ..worker(0, 1, &[])
            },
        );
        assert_eq!(
            eligible_ranks(&set, &pinned(rank(2, 0))),
            Err(SelectError::NoEndpoints)
        );
    }

    #[test]
    fn errors_have_readable_messages() {
        let text = SelectError::PinnedWorkerNotAllowed(rank(4, 1)).to_string();
        assert!(text.contains("worker 4 rank 1"), "{text}");
        assert!(!SelectError::NoEndpoints.to_string().is_empty());
    }

    // --- cost ---------------------------------------------------------------------------------

    fn load(
        r: WorkerWithDpRank,
        prefill: u64,
        decode: u64,
        additional: u64,
        requests: u64,
    ) -> RankLoad {
        RankLoad {
            rank: r,
            active_prefill_tokens: prefill,
            active_decode_blocks: decode,
            additional_active_blocks: additional,
            active_requests: requests,
        }
    }

    fn inputs<'a>(
        workers: &'a WorkerSet,
        candidates: &'a [WorkerWithDpRank],
        loads: &'a [RankLoad],
        overlaps: &'a [(WorkerWithDpRank, u32)],
        isl_tokens: u64,
    ) -> SelectionInputs<'a> {
        SelectionInputs {
            candidates,
            loads,
            overlaps,
            isl_tokens,
            block_size: 64,
            workers,
            preferred_taints: &[],
        }
    }

    #[test]
    fn cost_follows_the_default_formula() {
        let set = three_workers();
        let (a, b) = (rank(1, 0), rank(2, 0));
        let candidates = [a, b];
        let loads = [load(a, 100, 10, 2, 3), load(b, 0, 0, 4, 0)];
        let overlaps = [(a, 2)];
        let cfg = RouterConfig::default();
        let costs = candidate_costs(&cfg, &inputs(&set, &candidates, &loads, &overlaps, 256));
        // a: prefill (100 + 256)/64 - 2 = 3.5625; decode 10 + 2 = 12.
        // b: prefill 256/64 = 4; decode 0 + 4.
        assert_eq!(costs, vec![(a, 15.5625), (b, 8.0)]);

        let weighted = RouterConfig {
            prefill_load_scale: 2.0,
            decode_active_request_weight: 0.5,
            overlap_score_credit: 0.5,
            ..RouterConfig::default()
        };
        let costs = candidate_costs(
            &weighted,
            &inputs(&set, &candidates, &loads, &overlaps, 256),
        );
        // a: 2 * (5.5625 - 1) + 12 + 0.5 * 3.
        assert_eq!(costs[0].1, 2.0 * 4.5625 + 12.0 + 1.5);
    }

    #[test]
    fn prefill_tracking_off_leaves_only_decode_terms() {
        let set = three_workers();
        let a = rank(1, 0);
        let loads = [load(a, 500, 7, 3, 1)];
        let cfg = RouterConfig {
            router_track_prefill_tokens: false,
            ..RouterConfig::default()
        };
        let costs = candidate_costs(&cfg, &inputs(&set, &[a], &loads, &[(a, 1)], 256));
        assert_eq!(costs[0].1, 10.0);
    }

    #[test]
    fn missing_load_row_is_an_idle_rank() {
        let set = three_workers();
        let a = rank(1, 0);
        let costs = candidate_costs(&RouterConfig::default(), &inputs(&set, &[a], &[], &[], 200));
        // prefill 200/64 = 3.125; decode: 3 full query blocks.
        assert_eq!(costs[0].1, 3.125 + 3.0);
    }

    #[test]
    fn credit_decay_shrinks_credit_on_busier_ranks() {
        let set = three_workers();
        let (a, b) = (rank(1, 0), rank(2, 0));
        let loads = [load(a, 0, 0, 0, 0), load(b, 256, 0, 0, 0)];
        let overlaps = [(a, 4), (b, 4)];
        let cfg = RouterConfig {
            overlap_score_credit_decay: 1.0,
            ..RouterConfig::default()
        };
        let costs = candidate_costs(&cfg, &inputs(&set, &[a, b], &loads, &overlaps, 256));
        // a: (256/64) - 4 = 0. b: excess 4 blocks over 4 request blocks: decay 1/2, credit 2.
        assert_eq!(costs, vec![(a, 0.0), (b, 8.0 - 2.0)]);
    }

    #[test]
    fn overlap_credit_never_makes_prefill_negative() {
        let set = three_workers();
        let a = rank(1, 0);
        let cfg = RouterConfig {
            overlap_score_credit: 10.0,
            ..RouterConfig::default()
        };
        let costs = candidate_costs(
            &cfg,
            &inputs(&set, &[a], &[load(a, 0, 1, 0, 0)], &[(a, 4)], 256),
        );
        assert_eq!(costs[0].1, 1.0);
    }

    #[test]
    fn preferred_taints_scale_cost_by_exp_minus_tanh() {
        let set = three_workers();
        let (a, c) = (rank(2, 0), rank(3, 2));
        let loads = [load(a, 0, 10, 0, 0), load(c, 0, 10, 0, 0)];
        let preferred = vec![("fast".to_string(), 1.0), ("gpu".to_string(), 0.5)];
        let candidates = [a, c];
        let mut input = inputs(&set, &candidates, &loads, &[], 0);
        input.preferred_taints = &preferred;
        let costs = candidate_costs(&RouterConfig::default(), &input);
        assert!((costs[0].1 - 10.0 * (-(1.5f64).tanh()).exp()).abs() < 1e-12);
        assert_eq!(costs[1].1, 10.0, "no matching taint: multiplier 1");
    }

    // --- picking ------------------------------------------------------------------------------

    #[test]
    fn temperature_zero_picks_the_cheapest_and_reports_cache() {
        let set = three_workers();
        let (a, b) = (rank(1, 0), rank(2, 0));
        let loads = [load(a, 0, 0, 1, 0), load(b, 0, 0, 4, 0)];
        let overlaps = [(a, 3)];
        let mut rng = rng::stream(1, "test");
        let pick = select_worker(
            &RouterConfig::default(),
            &inputs(&set, &[a, b], &loads, &overlaps, 250),
            &mut rng,
        )
        .unwrap();
        assert_eq!(pick.rank, a);
        assert_eq!(pick.overlap_blocks, 3);
        assert_eq!(pick.cached_tokens, 192);
        assert_eq!(pick.required_blocks, 4);
    }

    #[test]
    fn cached_tokens_are_clamped_to_the_isl() {
        let set = three_workers();
        let a = rank(1, 0);
        let mut rng = rng::stream(1, "test");
        let pick = select_worker(
            &RouterConfig::default(),
            &inputs(&set, &[a], &[], &[(a, 4)], 200),
            &mut rng,
        )
        .unwrap();
        assert_eq!(pick.cached_tokens, 200);
    }

    #[test]
    fn no_candidates_is_no_endpoints() {
        let set = three_workers();
        let mut rng = rng::stream(1, "test");
        for temperature in [0.0, 1.0] {
            let cfg = RouterConfig {
                router_temperature: temperature,
                ..RouterConfig::default()
            };
            assert_eq!(
                select_worker(&cfg, &inputs(&set, &[], &[], &[], 64), &mut rng),
                Err(SelectError::NoEndpoints)
            );
        }
    }

    #[test]
    fn pinned_selection_returns_the_pin_without_drawing() {
        let set = three_workers();
        let (a, b) = (rank(1, 0), rank(2, 0));
        let loads = [load(a, 0, 50, 4, 0), load(b, 0, 0, 4, 0)];
        let pick = pinned_selection(
            &RouterConfig::default(),
            &inputs(&set, &[a, b], &loads, &[(a, 1)], 256),
            a,
        );
        assert_eq!(pick.rank, a);
        assert_eq!(pick.cached_tokens, 64);
        assert_eq!(pick.cost, 4.0 - 1.0 + 54.0);
    }

    fn pick_with_seed(
        seed: u64,
        candidates: &[WorkerWithDpRank],
        loads: &[RankLoad],
        temperature: f64,
    ) -> WorkerWithDpRank {
        let set = three_workers();
        let cfg = RouterConfig {
            router_temperature: temperature,
            ..RouterConfig::default()
        };
        let mut rng = rng::stream(seed, "select");
        select_worker(&cfg, &inputs(&set, candidates, loads, &[], 128), &mut rng)
            .unwrap()
            .rank
    }

    #[test]
    fn ties_spread_over_tied_ranks_and_repeat_per_seed() {
        let ranks = [rank(1, 0), rank(1, 1), rank(2, 0), rank(3, 2)];
        // The last rank is more expensive and must never win.
        let loads = [
            load(ranks[0], 0, 0, 2, 0),
            load(ranks[1], 0, 0, 2, 0),
            load(ranks[2], 0, 0, 2, 0),
            load(ranks[3], 0, 9, 2, 0),
        ];
        let mut wins: BTreeMap<WorkerWithDpRank, u32> = BTreeMap::new();
        for seed in 0..600 {
            let first = pick_with_seed(seed, &ranks, &loads, 0.0);
            assert_eq!(
                first,
                pick_with_seed(seed, &ranks, &loads, 0.0),
                "same seed, same pick"
            );
            *wins.entry(first).or_default() += 1;
        }
        assert!(!wins.contains_key(&ranks[3]));
        for tied in &ranks[..3] {
            let count = wins.get(tied).copied().unwrap_or(0);
            assert!((150..=250).contains(&count), "{tied} won {count} of 600");
        }
    }

    #[test]
    fn softmax_with_equal_costs_is_uniform_and_stays_in_candidates() {
        let ranks = [rank(1, 0), rank(2, 0), rank(3, 3)];
        let loads: Vec<RankLoad> = ranks.iter().map(|&r| load(r, 0, 5, 0, 0)).collect();
        let mut wins: BTreeMap<WorkerWithDpRank, u32> = BTreeMap::new();
        for seed in 0..900 {
            let pick = pick_with_seed(seed, &ranks, &loads, 1.0);
            assert!(ranks.contains(&pick));
            *wins.entry(pick).or_default() += 1;
        }
        for r in &ranks {
            let count = wins.get(r).copied().unwrap_or(0);
            assert!((240..=360).contains(&count), "{r} won {count} of 900");
        }
    }

    #[test]
    fn softmax_favours_cheaper_ranks_in_proportion() {
        let (a, b) = (rank(1, 0), rank(2, 0));
        let loads = [load(a, 0, 0, 0, 0), load(b, 0, 10, 0, 0)];
        // Normalised costs 0 and 1 at T = 1: p(a) = 1 / (1 + e^-1) ≈ 0.731.
        let a_wins = (0..2000)
            .filter(|&seed| pick_with_seed(seed, &[a, b], &loads, 1.0) == a)
            .count();
        assert!((1380..=1540).contains(&a_wins), "a won {a_wins} of 2000");
    }

    proptest! {
        #[test]
        fn temperature_zero_always_returns_a_min_cost_candidate(
            rows in prop::collection::vec((0..2000u64, 0..50u64, 0..8u64, 0..5u64, 0..8u32), 1..8),
            isl_tokens in 1..600u64,
            seed in any::<u64>(),
        ) {
            let set = WorkerSet::new();
            let candidates: Vec<WorkerWithDpRank> = (0..rows.len() as u64).map(|w| rank(w, 0)).collect();
            let loads: Vec<RankLoad> = rows.iter().zip(&candidates)
                .map(|(&(p, d, x, r, _), &c)| load(c, p, d, x, r)).collect();
            let overlaps: Vec<(WorkerWithDpRank, u32)> = rows.iter().zip(&candidates)
                .filter(|(row, _)| row.4 > 0).map(|(row, &c)| (c, row.4)).collect();
            let input = inputs(&set, &candidates, &loads, &overlaps, isl_tokens);
            let cfg = RouterConfig::default();
            let mut rng = rng::stream(seed, "prop");
            let pick = select_worker(&cfg, &input, &mut rng).unwrap();
            let min_cost = candidate_costs(&cfg, &input).iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
            prop_assert!(candidates.contains(&pick.rank));
            prop_assert_eq!(pick.cost, min_cost);
        }
    }

    // --- fast scoring against the reference -----------------------------------------------

    /// The scoring as it was before the single-walk rewrite: a binary search per lookup and
    /// every request-level term recomputed per rank. The fast path must match it bit for bit.
    mod reference {
        use super::super::*;

        fn load_of(loads: &[RankLoad], rank: WorkerWithDpRank) -> Option<&RankLoad> {
            loads
                .binary_search_by(|load| load.rank.cmp(&rank))
                .ok()
                .map(|index| &loads[index])
        }

        /// (rank, overlap blocks, cost) per candidate, in candidate order.
        pub fn scores(
            cfg: &RouterConfig,
            inputs: &SelectionInputs<'_>,
        ) -> Vec<(WorkerWithDpRank, u32, f64)> {
            let min_active_prefill_tokens = inputs
                .candidates
                .iter()
                .map(|&rank| load_of(inputs.loads, rank).map_or(0, |l| l.active_prefill_tokens))
                .min()
                .unwrap_or(0);
            inputs
                .candidates
                .iter()
                .map(|&rank| {
                    (
                        rank,
                        overlap_of(inputs.overlaps, rank),
                        rank_cost(cfg, inputs, rank, min_active_prefill_tokens),
                    )
                })
                .collect()
        }

        fn rank_cost(
            cfg: &RouterConfig,
            inputs: &SelectionInputs<'_>,
            rank: WorkerWithDpRank,
            min_active_prefill_tokens: u64,
        ) -> f64 {
            let block_size = inputs.block_size.max(1);
            let block_size_f = block_size as f64;
            let isl = inputs.isl_tokens;
            let load = load_of(inputs.loads, rank);
            let active_prefill_tokens = load.map_or(0, |l| l.active_prefill_tokens);
            let device_blocks = overlap_of(inputs.overlaps, rank);
            let cached_tokens = u64::from(device_blocks).saturating_mul(block_size);

            let raw_prefill_blocks = if cfg.router_track_prefill_tokens {
                let uncached = isl - cached_tokens.min(isl);
                let raw_tokens = active_prefill_tokens
                    .saturating_add(uncached)
                    .saturating_add(cached_tokens);
                raw_tokens as f64 / block_size_f
            } else {
                0.0
            };
            let decay = credit_decay(
                cfg,
                active_prefill_tokens - min_active_prefill_tokens.min(active_prefill_tokens),
                block_size_f,
                isl.div_ceil(block_size).max(1) as f64,
            );
            let (host_blocks, disk_blocks, shared_blocks_beyond_device) = (0.0, 0.0, 0.0);
            let overlap_credit_blocks =
                cfg.effective_overlap_score_credit() * decay * device_blocks as f64
                    + cfg.host_cache_hit_weight * host_blocks
                    + cfg.disk_cache_hit_weight * disk_blocks
                    + cfg.effective_shared_cache_multiplier() * shared_blocks_beyond_device;
            let decode_blocks = load.map_or((isl / block_size) as f64, |l| {
                l.potential_decode_blocks() as f64
            });
            let active_requests = load.map_or(0, |l| l.active_requests) as f64;

            let prefill_cost = cfg.effective_prefill_load_scale()
                * (raw_prefill_blocks - overlap_credit_blocks).max(0.0);
            let cost =
                prefill_cost + decode_blocks + cfg.decode_active_request_weight * active_requests;
            cost * preferred_taint_multiplier(inputs, rank)
        }
    }

    #[test]
    fn cursor_finds_ranks_in_any_order_including_one_it_walked_past() {
        let rows = [(rank(1, 0), 10), (rank(1, 2), 12), (rank(3, 0), 30)];
        let mut cursor = RankCursor::new(&rows[..]);
        assert_eq!(cursor.find(rank(1, 2)), Some(&rows[1]));
        // Same rank again, right after the walk consumed it: must not be lost.
        assert_eq!(cursor.find(rank(1, 2)), Some(&rows[1]));
        // Out of order, behind the cursor.
        assert_eq!(cursor.find(rank(1, 0)), Some(&rows[0]));
        // A gap ahead of the cursor leaves the next row to be found.
        assert_eq!(cursor.find(rank(2, 0)), None);
        assert_eq!(cursor.find(rank(1, 1)), None);
        assert_eq!(cursor.find(rank(3, 0)), Some(&rows[2]));
        assert_eq!(cursor.find(rank(3, 0)), Some(&rows[2]));
        assert_eq!(cursor.find(rank(9, 0)), None);
        assert_eq!(cursor.find(rank(1, 0)), Some(&rows[0]));
        let mut empty = RankCursor::<(WorkerWithDpRank, u32)>::new(&[]);
        assert_eq!(empty.find(rank(1, 0)), None);
    }

    /// Six workers (ids 0, 2, ..., 10) of four dp ranks each; even workers carry "gpu".
    fn six_workers_four_ranks() -> (WorkerSet, Vec<WorkerWithDpRank>) {
        let mut set = WorkerSet::new();
        for w in 0..6u64 {
            let taints: &[&str] = if w % 2 == 0 { &["gpu"] } else { &[] };
            set.insert(w * 2, worker(0, 4, taints));
        }
        let universe = set.ranks().collect();
        (set, universe)
    }

    fn random_config() -> impl Strategy<Value = RouterConfig> {
        (
            any::<bool>(),
            prop_oneof![Just(0.0), 0.1..3.0f64],
            prop_oneof![Just(1.0), 0.0..4.0f64],
            prop_oneof![Just(1.0), 0.0..4.0f64],
            prop_oneof![Just(None), Just(Some(0.0)), (0.1..3.0f64).prop_map(Some)],
            0.0..2.0f64,
            prop_oneof![Just(0.0), 0.2..2.0f64],
        )
            .prop_map(
                |(track_prefill, decay, credit, scale, legacy_weight, request_weight, temp)| {
                    RouterConfig {
                        router_track_prefill_tokens: track_prefill,
                        overlap_score_credit_decay: decay,
                        overlap_score_credit: credit,
                        prefill_load_scale: scale,
                        overlap_score_weight: legacy_weight,
                        decode_active_request_weight: request_weight,
                        router_temperature: temp,
                        ..RouterConfig::default()
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn fast_scoring_equals_the_reference_bit_for_bit(
            cfg in random_config(),
            // Per universe rank: a load row (or idle), an overlap (or none).
            load_rows in prop::collection::vec(
                prop::option::of((0..5000u64, 0..80u64, 0..20u64, 0..6u64)), 24),
            overlap_rows in prop::collection::vec(prop::option::of(0..40u32), 24),
            picks in prop::collection::vec(0..24usize, 0..30),
            order in 0..4u8,
            isl_tokens in 0..3000u64,
            block_size in 1..130u64,
            prefer_gpu in prop::option::of(-2.0..2.0f64),
            seed in any::<u64>(),
        ) {
            let (set, universe) = six_workers_four_ranks();
            let loads: Vec<RankLoad> = universe.iter().zip(&load_rows)
                .filter_map(|(&r, row)| row.map(|(p, d, x, n)| load(r, p, d, x, n)))
                .collect();
            let overlaps: Vec<(WorkerWithDpRank, u32)> = universe.iter().zip(&overlap_rows)
                .filter_map(|(&r, row)| row.map(|blocks| (r, blocks)))
                .collect();
            let mut candidates: Vec<WorkerWithDpRank> = picks.iter().map(|&i| universe[i]).collect();
            match order {
                // What eligible_ranks gives: sorted, no duplicates.
                0 => { candidates.sort(); candidates.dedup(); }
                1 => { candidates.sort(); candidates.reverse(); }
                // An unconstrained request: the ranks of the load rows, each with its row.
                3 => candidates = loads.iter().map(|row| row.rank).collect(),
                // As drawn: shuffled, with repeats.
                _ => {}
            }
            let preferred: Vec<(String, f64)> =
                prefer_gpu.map(|w| ("gpu".to_string(), w)).into_iter().collect();
            let input = SelectionInputs {
                candidates: &candidates,
                loads: &loads,
                overlaps: &overlaps,
                isl_tokens,
                block_size,
                workers: &set,
                preferred_taints: &preferred,
            };
            let expected = reference::scores(&cfg, &input);
            let fast = candidate_costs(&cfg, &input);
            prop_assert_eq!(fast.len(), expected.len());
            for (got, want) in fast.iter().zip(&expected) {
                prop_assert_eq!(got.0, want.0);
                prop_assert_eq!(got.1.to_bits(), want.2.to_bits(), "{} cost {} vs {}", want.0, got.1, want.2);
            }
            if order == 0 || order == 3 {
                // The whole pick, against the shared pickers fed the reference scores.
                let reference_scores: Vec<Scored<'_>> = expected.iter()
                    .map(|&(rank, overlap_blocks, cost)| Scored { rank, load: None, overlap_blocks, cost })
                    .collect();
                let mut want_rng = rng::stream(seed, "prop");
                let want = if cfg.router_temperature > 0.0 {
                    pick_softmax(&reference_scores, cfg.router_temperature, &mut want_rng)
                } else {
                    pick_min_cost(&reference_scores, &mut want_rng)
                }
                .map(|index| selection_of(&reference_scores[index], &input));
                let mut got_rng = rng::stream(seed, "prop");
                prop_assert_eq!(select_worker(&cfg, &input, &mut got_rng).ok(), want);
                prop_assert_eq!(got_rng, want_rng, "same draws");
            }
            for &pin in universe.iter().step_by(5) {
                let want = &reference::scores(&cfg, &SelectionInputs { candidates: &[pin], ..input })[0];
                let got = pinned_selection(&cfg, &input, pin);
                prop_assert_eq!((got.rank, got.overlap_blocks), (want.0, want.1));
                prop_assert_eq!(got.cost.to_bits(), want.2.to_bits());
            }
        }
    }

    // --- cache estimate for the queue ---------------------------------------------------------

    #[test]
    fn best_cached_tokens_respects_pin_allow_list_and_taints() {
        let set = three_workers();
        let overlaps = [
            (rank(1, 1), 2),
            (rank(2, 0), 3),
            (rank(3, 2), 5),
            (rank(9, 0), 8),
        ];
        let any = RequestConstraints::default();
        assert_eq!(
            best_cached_tokens(&set, &any, &overlaps, 64),
            5 * 64,
            "unknown worker 9 ignored"
        );
        let gpu = RequestConstraints {
            required_taints: vec!["gpu".into()],
            ..Default::default()
        };
        assert_eq!(best_cached_tokens(&set, &gpu, &overlaps, 64), 3 * 64);
        let only_one = RequestConstraints {
            allowed_workers: Some(ids(&[1])),
            ..Default::default()
        };
        assert_eq!(best_cached_tokens(&set, &only_one, &overlaps, 64), 2 * 64);
        assert_eq!(
            best_cached_tokens(&set, &pinned(rank(1, 1)), &overlaps, 64),
            2 * 64
        );
        assert_eq!(
            best_cached_tokens(&set, &pinned(rank(1, 0)), &overlaps, 64),
            0
        );
        let nothing = RequestConstraints {
            required_taints: vec!["tpu".into()],
            ..Default::default()
        };
        assert_eq!(best_cached_tokens(&set, &nothing, &overlaps, 64), 0);
    }
}
