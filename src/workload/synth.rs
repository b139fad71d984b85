//! Synthetic workloads: request groups with length distributions, arrival processes and
//! shared prefixes, turned into a deterministic list of [`RequestSpec`]s.
//!
//! Everything random comes from the run seed through [`crate::rng::child`], one stream per
//! group and purpose (`workload/<group>/input`, `.../output`, `.../arrival`), so adding a group
//! or a draw never changes another group's requests.
//!
//! Prompts are [`PromptSpec::HashIds`] with `tokens_per_hash` = the engine block size, so one
//! hash id is one KV block and a shared prefix is a whole number of blocks. Hash ids come from a
//! counter (starting at [`FIRST_HASH_ID`]) walked group by group in declaration order: every
//! block of every prompt is distinct except the first `prefix.tokens / tokens_per_hash` blocks
//! of requests in the same prefix group. Tokens are hash ids truncated to `u32`, so a workload
//! may use at most `u32::MAX - FIRST_HASH_ID` distinct blocks.

use crate::bounds::{MAX_PROMPT_BLOCKS, MAX_REQUESTS, MAX_TOKENS};
use crate::rng;
use crate::scheduling::types::WorkerWithDpRank;
use crate::time::{MAX_INPUT_NS, NS_PER_MS, NS_PER_SEC, SimDuration, SimTime};
use crate::workload::rate_shape::RateShape;
use crate::workload::session::SessionTurn;
use crate::workload::{PromptSpec, RequestSpec};
use rand::RngExt;
use rand_distr::{Distribution, Exp, Gamma, LogNormal, Normal};
use std::fmt;

mod sessions;
pub use sessions::{SESSION_TURNS, SessionShape, THINK_TIME_MS};

/// The first hash id handed out (small ids are left free for hand-written traces).
pub const FIRST_HASH_ID: u64 = 1_000;
/// Largest number of requests one group (and the whole workload) may ask for: keeps memory
/// bounded.
pub const MAX_GROUP_REQUESTS: u64 = MAX_REQUESTS;
/// Poisson arrivals must fit this many times their expected span (plus a margin, see
/// [`poisson_horizon_ns`]) inside the time bound, so that generating them cannot overflow.
const POISSON_SPAN_SAFETY: f64 = 2.0;
/// Default upper clamp of a drawn length, in tokens (drawn lengths are also at least 1).
pub const DEFAULT_MAX_TOKENS: u64 = 1 << 20;
/// Most arrivals one rate-and-time group may draw: twice the request bound. The expected
/// count is validated against [`MAX_REQUESTS`]; this cap only keeps a freak draw (or a gamma
/// with a huge cv, whose gaps round to 0 ns) from filling memory.
pub const MAX_TIMED_DRAWS: u64 = 2 * MAX_REQUESTS;
/// Largest coefficient of variation of gamma gaps: beyond it, the gamma's shape (1/cv^2) is so
/// small that almost every gap rounds to 0 ns and arrivals pile up in single instants.
pub const MAX_GAMMA_CV: f64 = 100.0;

/// A whole synthetic workload: groups, how burst groups are released, and the block size.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthWorkload {
    /// The groups, in declaration order.
    pub groups: Vec<RequestGroup>,
    /// The release of every group whose arrival is [`Arrival::Burst`].
    pub burst: Burst,
    /// Tokens per hash id: the engine block size, so prefixes align to KV blocks.
    pub tokens_per_hash: u64,
}

/// How the burst groups are released together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Burst {
    /// When the first burst request is released.
    pub at: SimTime,
    /// The creation order of burst requests across groups.
    pub order: BurstOrder,
    /// Release stagger in creation order: request `m` of the burst arrives at
    /// `at + m * spacing_ns` (tools/dynamo-replay tags simultaneous rows 1 ns apart).
    pub spacing_ns: u64,
}

impl Default for Burst {
    fn default() -> Self {
        Burst {
            at: SimTime::ZERO,
            order: BurstOrder::Sequential,
            spacing_ns: 0,
        }
    }
}

/// Creation order of a burst across its groups (groups in declaration order).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BurstOrder {
    /// All of the first group, then all of the second, ...
    Sequential,
    /// Step `i` appends request `i` of every group still having one, in group order.
    RoundRobin,
    /// Like `RoundRobin`, but odd steps go through the groups in reverse order. With two
    /// groups this is Dynamo's test: `(premium, regular)` for even `i`, `(regular, premium)`
    /// for odd `i`.
    Alternate,
}

/// One group of similar requests.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestGroup {
    /// Unique name: the label of the group's random streams.
    pub name: String,
    /// The class the requests ask for (`policy_class`), if any.
    pub class: Option<String>,
    /// How many requests (1 to MAX_GROUP_REQUESTS).
    pub count: u64,
    /// Prompt length.
    pub input_tokens: Lengths,
    /// Output length.
    pub output_tokens: Lengths,
    /// When the requests arrive.
    pub arrival: Arrival,
    /// Shared prompt prefixes; `None` = every prompt is distinct.
    pub prefix: Option<SharedPrefix>,
    /// Soft priority of every request of the group.
    pub priority: f64,
    /// Strict priority tier of every request of the group.
    pub strict_priority: u32,
    /// A worker rank every request of the group is pinned to.
    pub pinned_worker: Option<WorkerWithDpRank>,
    /// Draw sessions instead of independent requests: `count` (and the arrivals) are then
    /// the sessions', each a chain of turns.
    pub sessions: Option<SessionShape>,
}

/// A token length: a distribution, rounded to an integer and clamped to `[min, max]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Lengths {
    /// The distribution drawn from.
    pub dist: LengthDist,
    /// Lower clamp (at least 1).
    pub min: u64,
    /// Upper clamp.
    pub max: u64,
}

impl Lengths {
    /// Always `tokens`.
    pub fn fixed(tokens: u64) -> Self {
        Lengths {
            dist: LengthDist::Fixed(tokens),
            min: tokens,
            max: tokens,
        }
    }
}

/// The distribution of a length, in tokens.
#[derive(Clone, Debug, PartialEq)]
pub enum LengthDist {
    /// Always this many tokens.
    Fixed(u64),
    /// Uniform over the integers `[min, max]` of the enclosing [`Lengths`].
    Uniform,
    /// Normal(mean, std_dev).
    Normal {
        /// Mean length.
        mean: f64,
        /// Standard deviation.
        std_dev: f64,
    },
    /// Log-normal with this mean and standard deviation of the length itself.
    LogNormal {
        /// Mean length.
        mean: f64,
        /// Standard deviation of the length.
        std_dev: f64,
    },
    /// Exponential with this mean.
    Exponential {
        /// Mean length.
        mean: f64,
    },
}

/// When a group's requests arrive.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    /// Released with the workload's [`Burst`].
    Burst,
    /// A Poisson process: exponential gaps at `rate_per_s`; the first request arrives one gap
    /// after `start`.
    Poisson {
        /// Mean arrivals per second.
        rate_per_s: f64,
        /// When the process starts.
        start: SimTime,
    },
    /// Request `k` arrives at `start + k * every`.
    Interval {
        /// Gap between arrivals.
        every: SimDuration,
        /// The first arrival.
        start: SimTime,
    },
    /// Request `k` arrives at `times[k]` (exactly `count` times).
    At(Vec<SimTime>),
    /// Arrivals of `process` at `rate_per_s` from time 0, every arrival before `until`: the
    /// number of requests follows from the draws (the group's `count` is only the expected
    /// number, rounded down, used for bounds).
    Timed {
        /// How the gaps between arrivals are drawn.
        process: Process,
        /// Mean arrivals per second.
        rate_per_s: f64,
        /// Arrivals stop before this instant.
        until: SimTime,
        /// How the rate changes over time (`None`: it stays `rate_per_s`).
        shape: Option<RateShape>,
    },
}

/// The arrival process of a group sized by rate and time (`workload.arrival`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Process {
    /// Exponential gaps: a Poisson process; the first arrival one gap after 0.
    Poisson,
    /// Gamma-distributed gaps with mean `1 / rate` and coefficient of variation `cv`
    /// (cv > 1 is burstier than Poisson, cv = 1 is Poisson); the first arrival one gap after 0.
    Gamma {
        /// Standard deviation of a gap over its mean.
        cv: f64,
    },
    /// Evenly spaced: request `k` at `k / rate` exactly (rounded to the ns), the first at 0.
    Uniform,
}

/// Requests in one prefix group share their first `tokens` prompt tokens (rounded down to
/// whole blocks); request `k` of the group is in prefix group `k % groups`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedPrefix {
    /// Prefix length in tokens.
    pub tokens: u64,
    /// Number of distinct prefixes.
    pub groups: u64,
}

/// A generated request and the worker it is pinned to, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthRequest {
    /// The request.
    pub spec: RequestSpec,
    /// The rank it must run on, if pinned.
    pub pinned_worker: Option<WorkerWithDpRank>,
    /// A session's first turn: the session, with its later turns.
    pub session: Option<Box<SessionTurn>>,
}

impl From<SynthRequest> for crate::workload::Arrival {
    fn from(request: SynthRequest) -> Self {
        crate::workload::Arrival {
            spec: request.spec,
            hashes: None,
            session: request.session,
        }
    }
}

/// A workload value that cannot be generated. `group` is empty for workload-wide problems;
/// `field` is the group's (or the workload's) field name, e.g. `input_tokens.std_dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthError {
    /// The group's name (empty: the whole workload).
    pub group: String,
    /// The field, relative to the group.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SynthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group.is_empty() {
            true => write!(f, "workload.{}: {}", self.field, self.message),
            false => write!(
                f,
                "workload.groups.{}.{}: {}",
                self.group, self.field, self.message
            ),
        }
    }
}

impl std::error::Error for SynthError {}

fn group_error(group: &RequestGroup, field: &str, message: impl Into<String>) -> SynthError {
    SynthError {
        group: group.name.clone(),
        field: field.to_string(),
        message: message.into(),
    }
}

impl SynthWorkload {
    /// Checks every group: counts, length parameters, arrival parameters, unique names.
    pub fn validate(&self) -> Result<(), SynthError> {
        let workload_error = |field: &str, message: &str| SynthError {
            group: String::new(),
            field: field.to_string(),
            message: message.to_string(),
        };
        if self.groups.is_empty() {
            return Err(workload_error(
                "groups",
                "the workload has no request groups",
            ));
        }
        if self.tokens_per_hash == 0 {
            return Err(workload_error("tokens_per_hash", "must be positive"));
        }
        for (index, group) in self.groups.iter().enumerate() {
            if self.groups[..index].iter().any(|g| g.name == group.name) {
                return Err(group_error(
                    group,
                    "name",
                    "a group of this name already exists",
                ));
            }
            group.validate()?;
        }
        self.validate_totals()
    }

    /// The whole workload's request count and the burst's last release fit their bounds.
    fn validate_totals(&self) -> Result<(), SynthError> {
        let total: u64 = self.groups.iter().map(|g| g.count).sum();
        if total > MAX_REQUESTS {
            return Err(SynthError {
                group: String::new(),
                field: "groups".to_string(),
                message: format!("{total} requests in all: a run may have at most {MAX_REQUESTS}"),
            });
        }
        let burst_count: u64 = self
            .groups
            .iter()
            .filter(|g| g.arrival == Arrival::Burst)
            .map(|g| g.count)
            .sum();
        let last_offset = burst_count
            .saturating_sub(1)
            .checked_mul(self.burst.spacing_ns);
        match last_offset.and_then(|ns| self.burst.at.as_ns().checked_add(ns)) {
            Some(last) if last <= MAX_INPUT_NS => Ok(()),
            _ => Err(SynthError {
                group: String::new(),
                field: "burst.spacing_ns".to_string(),
                message: format!(
                    "the last of {burst_count} burst requests would arrive after {}",
                    latest_time()
                ),
            }),
        }
    }

    /// The workload's requests sorted by arrival (ties in creation order), `row` numbered
    /// from 0 in that order (a session's later turns take the rows after its first). Creation order: the burst in its [`BurstOrder`], then the timed
    /// groups in declaration order. Errors only if the workload needs more hash ids than a
    /// `u32` token can tell apart, or does not [`validate`](Self::validate).
    pub fn generate(&self, seed: u64) -> Result<Vec<SynthRequest>, SynthError> {
        self.validate()?;
        let mut ids = HashIdCounter::new();
        let per_group: Vec<Vec<SynthRequest>> = self
            .groups
            .iter()
            .map(|group| group.generate(seed, self.tokens_per_hash, &mut ids))
            .collect::<Result<_, _>>()?;
        let mut keyed: Vec<(SimTime, u64, SynthRequest)> = Vec::new();
        let mut creation = 0u64;
        for (group_index, k) in self.burst_sequence() {
            let mut request = per_group[group_index][k as usize].clone();
            request.spec.arrival = burst_arrival(&self.burst, creation);
            keyed.push((request.spec.arrival, creation, request));
            creation += 1;
        }
        for (group, requests) in self.groups.iter().zip(&per_group) {
            if group.arrival == Arrival::Burst {
                continue;
            }
            for request in requests {
                keyed.push((request.spec.arrival, creation, request.clone()));
                creation += 1;
            }
        }
        keyed.sort_by_key(|(arrival, creation, _)| (*arrival, *creation));
        let mut requests: Vec<SynthRequest> = keyed.into_iter().map(|(_, _, r)| r).collect();
        sessions::number_rows(&mut requests);
        Ok(requests)
    }

    /// (group index, index in group) of every burst request, in creation order.
    pub fn burst_sequence(&self) -> Vec<(usize, u64)> {
        let burst: Vec<(usize, u64)> = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.arrival == Arrival::Burst)
            .map(|(index, g)| (index, g.count))
            .collect();
        let mut out = Vec::new();
        if self.burst.order == BurstOrder::Sequential {
            for &(group, count) in &burst {
                out.extend((0..count).map(|k| (group, k)));
            }
            return out;
        }
        let steps = burst.iter().map(|&(_, count)| count).max().unwrap_or(0);
        for step in 0..steps {
            let reversed = self.burst.order == BurstOrder::Alternate && step % 2 == 1;
            let mut in_step: Vec<(usize, u64)> = burst
                .iter()
                .filter(|&&(_, count)| step < count)
                .map(|&(group, _)| (group, step))
                .collect();
            if reversed {
                in_step.reverse();
            }
            out.extend(in_step);
        }
        out
    }
}

/// Release time of burst request `creation` (validated to fit the time bound).
fn burst_arrival(burst: &Burst, creation: u64) -> SimTime {
    let offset_ns = creation
        .checked_mul(burst.spacing_ns)
        .expect("burst span validated");
    burst
        .at
        .checked_add(SimDuration::from_ns(offset_ns))
        .expect("burst span validated")
}

/// `must be positive` (a floor of 1), or `must be at least N`.
fn must_be_at_least(floor: u64) -> String {
    match floor {
        1 => "must be positive".to_string(),
        floor => format!("must be at least {floor}"),
    }
}

/// `the latest time routersim simulates (4611686018427 ms)`, for messages.
fn latest_time() -> String {
    format!(
        "the latest time routersim simulates ({} ms, about 146 years)",
        MAX_INPUT_NS / NS_PER_MS
    )
}

/// An upper estimate of the span of `count` Poisson arrivals at `rate_per_s`, in ns: the
/// expected span plus six standard deviations, times a safety factor.
fn poisson_horizon_ns(count: u64, rate_per_s: f64) -> f64 {
    let n = count as f64;
    (n + 6.0 * n.sqrt() + 6.0) / rate_per_s * NS_PER_SEC as f64 * POISSON_SPAN_SAFETY
}

/// Hands out distinct hash ids; refuses to go past what a `u32` token can tell apart, or
/// past [`MAX_PROMPT_BLOCKS`] blocks over all prompts (shared prefix blocks counted in every
/// prompt that holds them, since each prompt stores its own list).
struct HashIdCounter {
    next: u64,
    prompt_blocks: u64,
    /// Prompts counted so far: the workload's requests.
    prompts: u64,
}

impl HashIdCounter {
    fn new() -> Self {
        HashIdCounter {
            next: FIRST_HASH_ID,
            prompt_blocks: 0,
            prompts: 0,
        }
    }

    /// Counts a prompt of `blocks` blocks against [`MAX_PROMPT_BLOCKS`].
    fn count_prompt(&mut self, blocks: u64, group: &RequestGroup) -> Result<(), SynthError> {
        self.prompts += 1;
        self.prompt_blocks = self.prompt_blocks.saturating_add(blocks);
        match self.prompt_blocks <= MAX_PROMPT_BLOCKS {
            true => Ok(()),
            false => Err(group_error(
                group,
                "input_tokens",
                format!(
                    "the workload's prompts need more than {MAX_PROMPT_BLOCKS} KV blocks in all, the most a run may hold: fewer requests or shorter prompts"
                ),
            )),
        }
    }

    fn take(&mut self, n: u64, group: &RequestGroup) -> Result<Vec<u64>, SynthError> {
        let end = self.next.saturating_add(n);
        if end > u64::from(u32::MAX) {
            return Err(group_error(
                group,
                "count",
                "the workload needs more distinct KV blocks than 32-bit tokens can tell apart",
            ));
        }
        let ids = (self.next..end).collect();
        self.next = end;
        Ok(ids)
    }
}

impl RequestGroup {
    fn validate(&self) -> Result<(), SynthError> {
        // A rate-and-time group may expect fewer than one arrival; its count is an estimate.
        if self.count == 0 && !matches!(self.arrival, Arrival::Timed { .. }) {
            return Err(group_error(self, "count", "must be positive"));
        }
        if self.count > MAX_GROUP_REQUESTS {
            return Err(group_error(
                self,
                "count",
                format!("must be at most {MAX_GROUP_REQUESTS}"),
            ));
        }
        self.input_tokens.validate(self, "input_tokens")?;
        self.output_tokens.validate(self, "output_tokens")?;
        self.validate_arrival()?;
        if let Some(prefix) = &self.prefix {
            if prefix.tokens == 0 {
                return Err(group_error(self, "prefix.tokens", "must be positive"));
            }
            if prefix.groups == 0 {
                return Err(group_error(self, "prefix.groups", "must be positive"));
            }
        }
        if !self.priority.is_finite() {
            return Err(group_error(self, "priority", "must be a finite number"));
        }
        match &self.sessions {
            Some(shape) => shape.validate(self),
            None => Ok(()),
        }
    }

    fn validate_arrival(&self) -> Result<(), SynthError> {
        match &self.arrival {
            Arrival::Burst => Ok(()),
            Arrival::Poisson { rate_per_s, .. }
                if !(rate_per_s.is_finite() && *rate_per_s > 0.0) =>
            {
                Err(group_error(
                    self,
                    "arrival.poisson.rate_per_s",
                    "must be positive",
                ))
            }
            Arrival::Poisson { rate_per_s, start } => {
                let horizon_ns = poisson_horizon_ns(self.count, *rate_per_s);
                match start.as_ns() as f64 + horizon_ns <= MAX_INPUT_NS as f64 {
                    true => Ok(()),
                    false => Err(group_error(
                        self,
                        "arrival.poisson.rate_per_s",
                        format!(
                            "{} arrivals at {rate_per_s:?}/s from {start} would run past {}",
                            self.count,
                            latest_time()
                        ),
                    )),
                }
            }
            Arrival::Interval { every, .. } if every.as_ns() == 0 => Err(group_error(
                self,
                "arrival.interval.every_ms",
                "must be positive",
            )),
            Arrival::Interval { every, start } => {
                let span = every.as_ns().checked_mul(self.count - 1);
                match span.and_then(|ns| start.as_ns().checked_add(ns)) {
                    Some(last) if last <= MAX_INPUT_NS => Ok(()),
                    _ => Err(group_error(
                        self,
                        "arrival.interval.every_ms",
                        format!(
                            "the last of {} arrivals would be after {}",
                            self.count,
                            latest_time()
                        ),
                    )),
                }
            }
            Arrival::At(times) if times.len() as u64 != self.count => Err(group_error(
                self,
                "arrival.at_ms",
                format!(
                    "lists {} times but the group has count {}",
                    times.len(),
                    self.count
                ),
            )),
            Arrival::At(times) => match times.iter().position(|t| t.as_ns() > MAX_INPUT_NS) {
                None => Ok(()),
                Some(i) => Err(group_error(
                    self,
                    &format!("arrival.at_ms[{i}]"),
                    format!("is after {}", latest_time()),
                )),
            },
            Arrival::Timed {
                process,
                rate_per_s,
                until,
                ..
            } => validate_timed(*process, *rate_per_s, *until),
        }
    }

    /// The group's requests in group order (row 0, arrival as drawn; burst arrivals are
    /// set by the caller).
    fn generate(
        &self,
        seed: u64,
        tokens_per_hash: u64,
        ids: &mut HashIdCounter,
    ) -> Result<Vec<SynthRequest>, SynthError> {
        let mut input_rng = rng::child(seed, "workload", &format!("{}/input", self.name));
        let mut output_rng = rng::child(seed, "workload", &format!("{}/output", self.name));
        let arrivals = self.arrivals(seed)?;
        let input = self.input_tokens.sampler().expect("validated parameters");
        let output = self.output_tokens.sampler().expect("validated parameters");
        let prefix_blocks = self
            .prefix
            .as_ref()
            .map_or(0, |p| p.tokens / tokens_per_hash);
        let prefix_ids: Vec<Vec<u64>> = match &self.prefix {
            Some(p) if prefix_blocks > 0 => (0..p.groups)
                .map(|_| ids.take(prefix_blocks, self))
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        let mut later_turns = self
            .sessions
            .as_ref()
            .map(|shape| (shape, sessions::LaterTurnDraws::new(self, shape, seed)));
        let mut out = Vec::with_capacity(self.count as usize);
        for (k, arrival) in arrivals.into_iter().enumerate() {
            let input_tokens = self.input_tokens.draw(&input, &mut input_rng);
            let output_tokens = self.output_tokens.draw(&output, &mut output_rng);
            let blocks = input_tokens.div_ceil(tokens_per_hash);
            ids.count_prompt(blocks, self)?;
            let mut hash_ids: Vec<u64> = match prefix_ids.len() {
                0 => Vec::new(),
                n => prefix_ids[k % n]
                    .iter()
                    .copied()
                    .take(blocks as usize)
                    .collect(),
            };
            let fresh = blocks - hash_ids.len() as u64;
            hash_ids.extend(ids.take(fresh, self)?);
            let mut request = SynthRequest {
                spec: RequestSpec {
                    row: 0,
                    arrival,
                    policy_class: self.class.clone(),
                    input_tokens,
                    output_tokens,
                    priority: self.priority,
                    strict_priority: self.strict_priority,
                    prompt: PromptSpec::HashIds {
                        hash_ids,
                        tokens_per_hash,
                    },
                    pinned_worker: self.pinned_worker,
                },
                pinned_worker: self.pinned_worker,
                session: None,
            };
            if let Some((shape, draws)) = &mut later_turns {
                let draw_output = || self.output_tokens.draw(&output, &mut output_rng);
                let later = draws.later_turns(self, shape, &request, ids, draw_output)?;
                request.session = Some(sessions::unnumbered(later));
            }
            out.push(request);
        }
        Ok(out)
    }

    /// Arrival times of the group's requests in group order (`ZERO` for a burst group).
    /// Errors if a Poisson draw lands beyond the time bound (validation makes that all but
    /// impossible; time never saturates silently).
    fn arrivals(&self, seed: u64) -> Result<Vec<SimTime>, SynthError> {
        let count = self.count;
        Ok(match &self.arrival {
            Arrival::Burst => vec![SimTime::ZERO; count as usize],
            Arrival::Interval { every, start } => (0..count)
                .map(|k| {
                    let offset = every.as_ns().checked_mul(k).expect("span validated");
                    start
                        .checked_add(SimDuration::from_ns(offset))
                        .expect("span validated")
                })
                .collect(),
            Arrival::At(times) => times.clone(),
            Arrival::Poisson { rate_per_s, start } => {
                self.poisson_arrivals(seed, *rate_per_s, *start)?
            }
            Arrival::Timed {
                process,
                rate_per_s,
                until,
                shape,
            } => self.timed_arrivals(seed, (*process, *rate_per_s, shape.as_ref()), *until)?,
        })
    }

    /// Every arrival of `process` at `rate_per_s` (shaped by `shape`, when there is one)
    /// before `until`, from the group's own `arrival` stream (uniform spacing draws nothing).
    fn timed_arrivals(
        &self,
        seed: u64,
        (process, rate_per_s, shape): (Process, f64, Option<&RateShape>),
        until: SimTime,
    ) -> Result<Vec<SimTime>, SynthError> {
        let gaps = GapSampler::new(process, rate_per_s)
            .map_err(|message| workload_field_error("arrival", message))?;
        let mut arrival_rng = rng::child(seed, "workload", &format!("{}/arrival", self.name));
        let mut out = Vec::new();
        // The last arrival in load time (see `rate_shape`), whole ns as an arrival is kept:
        // without a shape, load time is real time.
        let mut load_ns = 0.0;
        for k in 0u64.. {
            load_ns = match &gaps {
                GapSampler::Uniform => uniform_arrival_ns(k, rate_per_s),
                drawn => load_ns + drawn.gap_ns(&mut arrival_rng),
            };
            let next_ns = shape.map_or(load_ns, |shape| shape.real_ns(load_ns));
            load_ns = load_ns.trunc();
            // `until` is at most 2^62 ns, so the comparison in f64 is exact enough and an
            // arrival kept is below the time bound.
            if next_ns >= until.as_ns() as f64 {
                break;
            }
            if k >= MAX_TIMED_DRAWS {
                return Err(workload_field_error(
                    "rate_per_s",
                    format!(
                        "group `{}` drew more than {MAX_TIMED_DRAWS} arrivals: lower the rate, the duration or the gamma cv",
                        self.name
                    ),
                ));
            }
            out.push(SimTime::from_ns(next_ns as u64));
        }
        Ok(out)
    }

    fn poisson_arrivals(
        &self,
        seed: u64,
        rate_per_s: f64,
        start: SimTime,
    ) -> Result<Vec<SimTime>, SynthError> {
        let mut arrival_rng = rng::child(seed, "workload", &format!("{}/arrival", self.name));
        let gaps = Exp::new(rate_per_s).expect("rate validated positive");
        let mut now = start;
        let mut out = Vec::with_capacity(self.count as usize);
        for _ in 0..self.count {
            let gap_s: f64 = gaps.sample(&mut arrival_rng);
            let gap_ns = (gap_s * NS_PER_SEC as f64).round();
            now = Some(gap_ns)
                .filter(|ns| *ns <= MAX_INPUT_NS as f64)
                .and_then(|ns| now.checked_add(SimDuration::from_ns(ns as u64)))
                .filter(|t| t.as_ns() <= MAX_INPUT_NS)
                .ok_or_else(|| {
                    group_error(
                        self,
                        "arrival.poisson.rate_per_s",
                        format!("arrivals would run past {}", latest_time()),
                    )
                })?;
            out.push(now);
        }
        Ok(out)
    }
}

/// Checks a rate-and-time process: a positive finite rate, a positive window within the time
/// bound, and a usable gamma. Errors name the workload's fields (`workload.rate_per_s`, ...).
fn validate_timed(process: Process, rate_per_s: f64, until: SimTime) -> Result<(), SynthError> {
    if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
        return Err(workload_field_error(
            "rate_per_s",
            format!("must be a positive number, got {rate_per_s:?}"),
        ));
    }
    if until == SimTime::ZERO || until.as_ns() > MAX_INPUT_NS {
        return Err(workload_field_error(
            "duration_s",
            format!("must be positive and at most {}", latest_time()),
        ));
    }
    GapSampler::new(process, rate_per_s)
        .map(|_| ())
        .map_err(|message| workload_field_error("arrival.gamma.cv", message))
}

fn workload_field_error(field: &str, message: impl Into<String>) -> SynthError {
    SynthError {
        group: String::new(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// Arrival `k` of evenly spaced arrivals at `rate_per_s`, in ns: computed from `k` rather
/// than summed, so spacing errors never accumulate.
fn uniform_arrival_ns(k: u64, rate_per_s: f64) -> f64 {
    (k as f64 * NS_PER_SEC as f64 / rate_per_s).round()
}

/// Draws the gaps of a rate-and-time process.
enum GapSampler {
    Exponential(Exp<f64>),
    Gamma(Gamma<f64>),
    Uniform,
}

impl GapSampler {
    /// The sampler of `process` at `rate_per_s` (validated positive and finite), or what is
    /// wrong with the gamma's cv.
    fn new(process: Process, rate_per_s: f64) -> Result<GapSampler, String> {
        Ok(match process {
            Process::Poisson => {
                GapSampler::Exponential(Exp::new(rate_per_s).map_err(|e| e.to_string())?)
            }
            Process::Uniform => GapSampler::Uniform,
            Process::Gamma { cv } if !(cv.is_finite() && cv > 0.0 && cv <= MAX_GAMMA_CV) => {
                return Err(format!(
                    "must be a positive number at most {MAX_GAMMA_CV}, got {cv:?}"
                ));
            }
            Process::Gamma { cv } => {
                // Shape 1/cv^2 and scale cv^2/rate: mean 1/rate, std dev cv/rate.
                let shape = 1.0 / (cv * cv);
                let scale_s = cv * cv / rate_per_s;
                GapSampler::Gamma(Gamma::new(shape, scale_s).map_err(|e| e.to_string())?)
            }
        })
    }

    /// One gap in ns (0 for uniform, which computes its arrivals directly).
    fn gap_ns(&self, rng: &mut rng::SimRng) -> f64 {
        let gap_s: f64 = match self {
            GapSampler::Exponential(d) => d.sample(rng),
            GapSampler::Gamma(d) => d.sample(rng),
            GapSampler::Uniform => 0.0,
        };
        (gap_s * NS_PER_SEC as f64).round()
    }
}

/// A length distribution ready to draw from (built once per group, after validation).
#[derive(Clone, Debug)]
enum Sampler {
    Fixed(u64),
    Uniform,
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
    Exponential(Exp<f64>),
}

/// What a length may be: its smallest value, its largest, and its unit (for messages).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LengthBounds {
    /// The smallest value a draw (and `min`) may have.
    pub floor: u64,
    /// The largest value a draw (and `max`, a mean, a `std_dev`) may have.
    pub ceiling: u64,
    /// What the value counts: `tokens`, `turns`, `ms`.
    pub unit: &'static str,
}

/// Prompt and output lengths: 1 to [`MAX_TOKENS`] tokens.
pub const TOKEN_LENGTHS: LengthBounds = LengthBounds {
    floor: 1,
    ceiling: MAX_TOKENS,
    unit: "tokens",
};

impl Lengths {
    fn validate(&self, group: &RequestGroup, field: &str) -> Result<(), SynthError> {
        self.validate_within(group, field, TOKEN_LENGTHS)
    }

    fn validate_within(
        &self,
        group: &RequestGroup,
        field: &str,
        bounds: LengthBounds,
    ) -> Result<(), SynthError> {
        self.check(bounds).map_err(|(sub, message)| {
            let path = match sub {
                "" => field.to_string(),
                sub => format!("{field}.{sub}"),
            };
            group_error(group, &path, message)
        })
    }

    /// Every parameter in range, and the sampler they make can be built: (sub-field, what is
    /// wrong) otherwise. Lengths draw as integers in `[min, max]`, `floor <= min <= max <=
    /// ceiling`; a mean is at least 1 and at most the ceiling and a `std_dev` at most the
    /// ceiling, which keeps every derived parameter (e.g. lognormal's sigma) finite.
    fn check(&self, bounds: LengthBounds) -> Result<(), (&'static str, String)> {
        let LengthBounds {
            floor,
            ceiling,
            unit,
        } = bounds;
        let bound = ceiling as f64;
        match self.dist {
            LengthDist::Fixed(value) if value < floor => {
                return Err(("", must_be_at_least(floor)));
            }
            LengthDist::Fixed(value) if value > ceiling => {
                return Err(("", format!("{value} is more than {ceiling} {unit}")));
            }
            LengthDist::Normal { mean, .. }
            | LengthDist::LogNormal { mean, .. }
            | LengthDist::Exponential { mean }
                if !(mean.is_finite() && (1.0..=bound).contains(&mean)) =>
            {
                return Err((
                    "mean",
                    format!("must be a number from 1 to {ceiling} {unit}, got {mean:?}"),
                ));
            }
            LengthDist::Normal { std_dev, .. } | LengthDist::LogNormal { std_dev, .. }
                if !(std_dev.is_finite() && (0.0..=bound).contains(&std_dev)) =>
            {
                return Err((
                    "std_dev",
                    format!("must be a number from 0 to {ceiling} {unit}, got {std_dev:?}"),
                ));
            }
            _ => {}
        }
        if self.min < floor {
            return Err(("min", must_be_at_least(floor)));
        }
        if self.max > ceiling {
            return Err(("max", format!("{} is more than {ceiling} {unit}", self.max)));
        }
        if self.min > self.max {
            return Err(("max", "must be >= min".into()));
        }
        self.sampler().map(|_| ())
    }

    /// The distribution to draw from, with its derived parameters checked finite.
    fn sampler(&self) -> Result<Sampler, (&'static str, String)> {
        let bad =
            |e: rand_distr::NormalError| ("std_dev", format!("gives no usable distribution: {e}"));
        Ok(match self.dist {
            LengthDist::Fixed(tokens) => Sampler::Fixed(tokens),
            LengthDist::Uniform => Sampler::Uniform,
            LengthDist::Normal { mean, std_dev } => {
                Sampler::Normal(Normal::new(mean, std_dev).map_err(bad)?)
            }
            LengthDist::LogNormal { mean, std_dev } => {
                // The parameters rand_distr derives: sigma^2 = ln(1 + cv^2), mu = ln(mean^2 /
                // (1 + cv^2)) / 2. They must be finite for the draws to be.
                let cv = std_dev / mean;
                let a = 1.0 + cv * cv;
                let (mu, sigma) = (0.5 * (mean * mean / a).ln(), a.ln().sqrt());
                if !(mu.is_finite() && sigma.is_finite()) {
                    return Err((
                        "std_dev",
                        "gives a lognormal with no finite parameters".into(),
                    ));
                }
                Sampler::LogNormal(LogNormal::from_mean_cv(mean, cv).map_err(bad)?)
            }
            LengthDist::Exponential { mean } => Sampler::Exponential(
                Exp::new(1.0 / mean)
                    .map_err(|e| ("mean", format!("gives no usable distribution: {e}")))?,
            ),
        })
    }

    /// One length: the distribution's draw rounded to the nearest integer, clamped.
    fn draw(&self, sampler: &Sampler, rng: &mut rng::SimRng) -> u64 {
        let raw: f64 = match sampler {
            Sampler::Fixed(tokens) => return *tokens,
            Sampler::Uniform => return rng.random_range(self.min..=self.max),
            Sampler::Normal(d) => d.sample(rng),
            Sampler::LogNormal(d) => d.sample(rng),
            Sampler::Exponential(d) => d.sample(rng),
        };
        // f64 -> u64 casts saturate, so clamping in f64 first keeps huge draws in range; NaN
        // (impossible with validated parameters) would cast to 0, so it takes the minimum.
        match raw.is_nan() {
            true => self.min,
            false => raw.round().clamp(self.min as f64, self.max as f64) as u64,
        }
    }
}

impl fmt::Display for Lengths {
    /// `512`, `uniform [1, 4096]`, `normal(mean 1300, sd 100) in [1100, 1600]`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let clamp = format!("in [{}, {}]", self.min, self.max);
        match self.dist {
            LengthDist::Fixed(tokens) => write!(f, "{tokens}"),
            LengthDist::Uniform => write!(f, "uniform [{}, {}]", self.min, self.max),
            LengthDist::Normal { mean, std_dev } => {
                write!(f, "normal(mean {mean}, sd {std_dev}) {clamp}")
            }
            LengthDist::LogNormal { mean, std_dev } => {
                write!(f, "lognormal(mean {mean}, sd {std_dev}) {clamp}")
            }
            LengthDist::Exponential { mean } => write!(f, "exponential(mean {mean}) {clamp}"),
        }
    }
}

impl fmt::Display for Arrival {
    /// `burst`, `poisson 40/s from 0.000000 ms`, `every 5.000000 ms from ...`, `3 listed times`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arrival::Burst => f.write_str("burst"),
            Arrival::Poisson { rate_per_s, start } => {
                write!(f, "poisson {rate_per_s}/s from {start}")
            }
            Arrival::Interval { every, start } => write!(
                f,
                "every {} ms from {start}",
                crate::time::format_ms(every.as_ns())
            ),
            Arrival::At(times) => write!(f, "{} listed times", times.len()),
            Arrival::Timed {
                process,
                rate_per_s,
                until,
                shape,
            } => {
                let name = match process {
                    Process::Poisson => "poisson".to_string(),
                    Process::Gamma { cv } => format!("gamma(cv {cv})"),
                    Process::Uniform => "uniform".to_string(),
                };
                let shaped = if shape.is_some() { " (shaped)" } else { "" };
                write!(f, "{name} {rate_per_s}/s{shaped} before {until}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, count: u64) -> RequestGroup {
        RequestGroup {
            name: name.to_string(),
            class: Some(name.to_string()),
            count,
            input_tokens: Lengths::fixed(512),
            output_tokens: Lengths::fixed(1),
            arrival: Arrival::Burst,
            prefix: None,
            priority: 0.0,
            strict_priority: 0,
            pinned_worker: None,
            sessions: None,
        }
    }

    fn workload(groups: Vec<RequestGroup>, order: BurstOrder) -> SynthWorkload {
        SynthWorkload {
            groups,
            burst: Burst {
                at: SimTime::ZERO,
                order,
                spacing_ns: 1,
            },
            tokens_per_hash: 64,
        }
    }

    fn classes(requests: &[SynthRequest]) -> Vec<String> {
        requests
            .iter()
            .map(|r| r.spec.policy_class.clone().unwrap())
            .collect()
    }

    #[test]
    fn alternate_reproduces_dynamos_creation_order() {
        let w = workload(
            vec![group("premium", 320), group("regular", 320)],
            BurstOrder::Alternate,
        );
        let requests = w.generate(0).unwrap();
        assert_eq!(requests.len(), 640);
        let mut expected = Vec::new();
        for i in 0..320 {
            let pair = if i % 2 == 0 {
                ["premium", "regular"]
            } else {
                ["regular", "premium"]
            };
            expected.extend(pair.map(String::from));
        }
        assert_eq!(classes(&requests), expected);
        for (row, r) in requests.iter().enumerate() {
            assert_eq!(r.spec.row, row as u64);
            assert_eq!(r.spec.arrival, SimTime::from_ns(row as u64), "1 ns stagger");
        }
    }

    #[test]
    fn counts_and_orders_per_group() {
        let w = workload(vec![group("a", 3), group("b", 1)], BurstOrder::RoundRobin);
        assert_eq!(classes(&w.generate(0).unwrap()), ["a", "b", "a", "a"]);
        let w = workload(vec![group("a", 2), group("b", 2)], BurstOrder::Sequential);
        assert_eq!(classes(&w.generate(0).unwrap()), ["a", "a", "b", "b"]);
    }

    #[test]
    fn prompts_are_distinct_and_prefixes_shared() {
        let mut shared = group("s", 6);
        shared.input_tokens = Lengths::fixed(300);
        shared.prefix = Some(SharedPrefix {
            tokens: 128,
            groups: 2,
        });
        let w = workload(vec![group("u", 2), shared], BurstOrder::Sequential);
        let requests = w.generate(0).unwrap();
        let ids = |r: &SynthRequest| match &r.spec.prompt {
            PromptSpec::HashIds {
                hash_ids,
                tokens_per_hash,
            } => {
                assert_eq!(*tokens_per_hash, 64);
                hash_ids.clone()
            }
        };
        assert_eq!(ids(&requests[0]).len(), 8);
        assert_ne!(ids(&requests[0])[0], ids(&requests[1])[0]);
        let s: Vec<Vec<u64>> = requests[2..].iter().map(ids).collect();
        assert_eq!(s[0].len(), 5);
        assert_eq!(s[0][..2], s[2][..2], "same prefix group");
        assert_eq!(s[1][..2], s[3][..2]);
        assert_ne!(s[0][..2], s[1][..2], "different prefix groups");
        assert_ne!(s[0][2], s[2][2], "suffixes are distinct");
        let mut all: Vec<u64> = s.iter().flat_map(|v| v[2..].to_vec()).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6 * 3);
    }

    #[test]
    fn poisson_mean_rate_is_close() {
        let mut g = group("p", 20_000);
        g.arrival = Arrival::Poisson {
            rate_per_s: 50.0,
            start: SimTime::ZERO,
        };
        let requests = workload(vec![g], BurstOrder::Sequential)
            .generate(3)
            .unwrap();
        let last = requests.last().unwrap().spec.arrival.as_secs_f64();
        let rate = 20_000.0 / last;
        assert!((rate - 50.0).abs() < 1.5, "rate {rate}");
        assert!(
            requests
                .windows(2)
                .all(|w| w[0].spec.arrival <= w[1].spec.arrival)
        );
    }

    #[test]
    fn drawn_lengths_are_clamped() {
        let mut g = group("n", 5_000);
        g.input_tokens = Lengths {
            dist: LengthDist::Normal {
                mean: 100.0,
                std_dev: 400.0,
            },
            min: 10,
            max: 300,
        };
        g.output_tokens = Lengths {
            dist: LengthDist::Exponential { mean: 50.0 },
            min: 1,
            max: 60,
        };
        let requests = workload(vec![g], BurstOrder::Sequential)
            .generate(1)
            .unwrap();
        let inputs: Vec<u64> = requests.iter().map(|r| r.spec.input_tokens).collect();
        assert!(inputs.iter().all(|&t| (10..=300).contains(&t)));
        assert!(
            inputs.contains(&10) && inputs.contains(&300),
            "both clamps bite"
        );
        assert!(
            requests
                .iter()
                .all(|r| (1..=60).contains(&r.spec.output_tokens))
        );
    }

    #[test]
    fn same_seed_same_requests_and_groups_draw_independently() {
        let mut a = group("a", 50);
        a.input_tokens = Lengths {
            dist: LengthDist::Uniform,
            min: 1,
            max: 4096,
        };
        a.arrival = Arrival::Poisson {
            rate_per_s: 10.0,
            start: SimTime::ZERO,
        };
        let lengths = |w: &SynthWorkload, seed| -> Vec<(u64, SimTime)> {
            w.generate(seed)
                .unwrap()
                .into_iter()
                .filter(|r| r.spec.policy_class.as_deref() == Some("a"))
                .map(|r| (r.spec.input_tokens, r.spec.arrival))
                .collect()
        };
        let alone = workload(vec![a.clone()], BurstOrder::Sequential);
        let mut b = a.clone();
        b.name = "b".into();
        b.class = Some("b".into());
        let with_b = workload(vec![b, a], BurstOrder::Sequential);
        assert_eq!(alone.generate(9).unwrap(), alone.generate(9).unwrap());
        assert_eq!(lengths(&alone, 9), lengths(&with_b, 9));
        assert_ne!(lengths(&alone, 9), lengths(&alone, 10));
    }

    #[test]
    fn every_length_distribution_that_validates_can_draw() {
        let dists = [
            LengthDist::LogNormal {
                mean: 1.0,
                std_dev: MAX_TOKENS as f64,
            },
            LengthDist::Normal {
                mean: MAX_TOKENS as f64,
                std_dev: MAX_TOKENS as f64,
            },
            LengthDist::Exponential { mean: 1.0 },
        ];
        for dist in dists {
            let mut g = group("d", 100);
            g.input_tokens = Lengths {
                dist,
                min: 1,
                max: MAX_TOKENS,
            };
            let w = workload(vec![g], BurstOrder::Sequential);
            w.validate().unwrap();
            assert!(
                w.generate(1)
                    .unwrap()
                    .iter()
                    .all(|r| r.spec.input_tokens >= 1)
            );
        }
    }

    #[test]
    fn a_lognormal_with_a_huge_std_dev_is_refused_at_validation() {
        let mut g = group("l", 4);
        g.input_tokens = Lengths {
            dist: LengthDist::LogNormal {
                mean: 512.0,
                std_dev: 1e200,
            },
            min: 1,
            max: 4096,
        };
        let err = workload(vec![g], BurstOrder::Sequential)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "input_tokens.std_dev");
    }

    #[test]
    fn arrivals_past_the_time_bound_are_refused() {
        let mut g = group("p", 4);
        g.arrival = Arrival::Poisson {
            rate_per_s: 1e-300,
            start: SimTime::ZERO,
        };
        let err = workload(vec![g.clone()], BurstOrder::Sequential)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "arrival.poisson.rate_per_s");
        g.arrival = Arrival::Interval {
            every: SimDuration::from_ns(MAX_INPUT_NS / 2),
            start: SimTime::from_ns(2),
        };
        let err = workload(vec![g], BurstOrder::Sequential)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "arrival.interval.every_ms");
    }

    /// A rate-and-time group of `process` at `rate_per_s` for `duration_s` seconds.
    fn timed(name: &str, process: Process, rate_per_s: f64, duration_s: u64) -> RequestGroup {
        let mut g = group(name, (rate_per_s * duration_s as f64) as u64);
        g.arrival = Arrival::Timed {
            process,
            rate_per_s,
            until: SimTime::from_ns(duration_s * NS_PER_SEC),
            shape: None,
        };
        g
    }

    fn arrival_times(w: &SynthWorkload, seed: u64) -> Vec<SimTime> {
        w.generate(seed)
            .unwrap()
            .iter()
            .map(|r| r.spec.arrival)
            .collect()
    }

    /// Gaps between consecutive arrivals, in seconds.
    fn gaps_s(times: &[SimTime]) -> Vec<f64> {
        times
            .windows(2)
            .map(|w| (w[1].as_ns() - w[0].as_ns()) as f64 / NS_PER_SEC as f64)
            .collect()
    }

    fn mean_and_cv(values: &[f64]) -> (f64, f64) {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn timed_poisson_arrivals_keep_their_rate_inside_the_window() {
        let w = workload(
            vec![timed("p", Process::Poisson, 40.0, 2_000)],
            BurstOrder::Sequential,
        );
        let times = arrival_times(&w, 5);
        // 80,000 expected, standard deviation ~283: 1% is over 2.8 sigma.
        let rate = times.len() as f64 / 2_000.0;
        assert!((rate - 40.0).abs() < 0.4, "rate {rate}");
        assert!(
            times[0] > SimTime::ZERO,
            "the first arrival is one gap after 0"
        );
        assert!(times.iter().all(|t| t.as_ns() < 2_000 * NS_PER_SEC));
        let (mean, cv) = mean_and_cv(&gaps_s(&times));
        assert!((mean - 0.025).abs() < 0.00025, "mean gap {mean}");
        assert!(
            (cv - 1.0).abs() < 0.02,
            "exponential gaps have cv 1, got {cv}"
        );
        assert_ne!(
            times.len(),
            arrival_times(&w, 6).len(),
            "the count follows the draws"
        );
    }

    #[test]
    fn timed_uniform_arrivals_are_evenly_spaced_from_zero() {
        let w = workload(
            vec![timed("u", Process::Uniform, 40.0, 180)],
            BurstOrder::Sequential,
        );
        let times = arrival_times(&w, 1);
        assert_eq!(times.len(), 7_200, "t < 180 s: 0, 25 ms, ..., 179.975 s");
        for (k, t) in times.iter().enumerate() {
            assert_eq!(t.as_ns(), k as u64 * 25_000_000);
        }
        assert_eq!(times, arrival_times(&w, 2), "uniform draws nothing");
        // A rate that does not divide a second: spacing from k, not summed, never drifts.
        let w = workload(
            vec![timed("u", Process::Uniform, 3.0, 1_000)],
            BurstOrder::Sequential,
        );
        let times = arrival_times(&w, 1);
        assert_eq!(times.len(), 3_000);
        assert_eq!(times[2_999].as_ns(), 999_666_666_667);
    }

    #[test]
    fn timed_gamma_arrivals_have_the_asked_cv_and_mean_gap() {
        for cv in [0.5, 2.0] {
            let w = workload(
                vec![timed("g", Process::Gamma { cv }, 20.0, 5_000)],
                BurstOrder::Sequential,
            );
            let times = arrival_times(&w, 3);
            let (mean, measured_cv) = mean_and_cv(&gaps_s(&times));
            assert!(
                (mean - 0.05).abs() < 0.05 * 0.05,
                "cv {cv}: mean gap {mean}"
            );
            assert!(
                (measured_cv - cv).abs() < 0.1 * cv,
                "cv {cv}: measured {measured_cv}"
            );
        }
    }

    #[test]
    fn timed_groups_draw_from_their_own_streams() {
        let a = timed("a", Process::Poisson, 10.0, 100);
        let b = timed("b", Process::Gamma { cv: 3.0 }, 10.0, 100);
        let of_a = |w: &SynthWorkload| -> Vec<(u64, SimTime)> {
            w.generate(4)
                .unwrap()
                .into_iter()
                .filter(|r| r.spec.policy_class.as_deref() == Some("a"))
                .map(|r| (r.spec.input_tokens, r.spec.arrival))
                .collect()
        };
        let alone = workload(vec![a.clone()], BurstOrder::Sequential);
        let with_b = workload(vec![b, a], BurstOrder::Sequential);
        assert_eq!(of_a(&alone), of_a(&with_b));
    }

    #[test]
    fn timed_parameters_are_validated_by_workload_field() {
        let field = |process, rate_per_s, until_ns| {
            let mut g = group("t", 1);
            g.arrival = Arrival::Timed {
                process,
                rate_per_s,
                until: SimTime::from_ns(until_ns),
                shape: None,
            };
            let e = workload(vec![g], BurstOrder::Sequential)
                .validate()
                .unwrap_err();
            (e.group.clone(), e.to_string())
        };
        let (owner, text) = field(Process::Poisson, 0.0, 1);
        assert_eq!(owner, "");
        assert!(text.starts_with("workload.rate_per_s: "), "{text}");
        let (_, text) = field(Process::Poisson, 1.0, 0);
        assert!(text.starts_with("workload.duration_s: "), "{text}");
        let (_, text) = field(Process::Gamma { cv: f64::NAN }, 1.0, 1);
        assert!(text.starts_with("workload.arrival.gamma.cv: "), "{text}");
        let (_, text) = field(Process::Gamma { cv: 0.0 }, 1.0, 1);
        assert!(text.starts_with("workload.arrival.gamma.cv: "), "{text}");
        // An expected count of 0 is fine: the draws may still bring arrivals.
        let mut g = group("t", 0);
        g.arrival = Arrival::Timed {
            process: Process::Poisson,
            rate_per_s: 0.5,
            until: SimTime::from_ns(NS_PER_SEC),
            shape: None,
        };
        workload(vec![g], BurstOrder::Sequential)
            .validate()
            .unwrap();
    }

    #[test]
    fn invalid_groups_name_their_field() {
        let mut g = group("g", 0);
        let err = workload(vec![g.clone()], BurstOrder::Sequential)
            .validate()
            .unwrap_err();
        assert_eq!((err.group.as_str(), err.field.as_str()), ("g", "count"));
        g.count = 2;
        g.arrival = Arrival::At(vec![SimTime::ZERO]);
        let err = workload(vec![g], BurstOrder::Sequential)
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "arrival.at_ms");
        let err = workload(vec![], BurstOrder::Sequential)
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "workload.groups: the workload has no request groups"
        );
    }
}
