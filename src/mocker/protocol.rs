//! The protocol every worker kind speaks: the request a rank receives, why it refuses one,
//! everything a pass delivers at its end (tokens, admissions, rejections, KV events), what a
//! decode rank answers a handoff, and the snapshots (a request, the rank's load) a caller may
//! read. Nothing here belongs to one kind of engine.

use super::config::EngineArgs;
use crate::scheduling::types::{KvEvent, RequestId, SeqHash};
use crate::time::SimDuration;
use std::fmt;
use std::sync::Arc;

/// A request as the worker receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MockRequest {
    /// The caller's id; must be unique among the rank's live requests.
    pub id: RequestId,
    /// Prompt length in tokens (at least 1).
    pub prompt_tokens: u64,
    /// Sequence hashes of the prompt's full engine blocks (`prompt_tokens / block_size` of
    /// them), as `scheduling::hashing::sequence_hashes` computes them.
    pub prompt_hashes: Arc<[SeqHash]>,
    /// Tokens to generate; 0 completes the request after its prefill without a token.
    pub max_output_tokens: u64,
    /// The first full block (prompt or generated) whose hash no other request of the run
    /// holds, so that only this request could ever look it and the blocks after it up
    /// (`u64::MAX`: none is known to be). Only cost depends on it, provided it is true: the
    /// rank neither indexes those blocks nor names them in its events until the request is
    /// preempted (and then only indexes them).
    pub unshared_from: u64,
}

/// Why a request was refused by [`Worker::add_request`](super::Worker::add_request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddRequestError {
    /// A live request already has this id.
    DuplicateId(RequestId),
    /// The prompt is empty.
    EmptyPrompt(RequestId),
    /// `prompt_hashes` does not have one hash per full block of the prompt.
    HashCountMismatch {
        /// The request.
        id: RequestId,
        /// Full blocks in its prompt.
        expected: u64,
        /// Hashes given.
        got: u64,
    },
}

impl fmt::Display for AddRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddRequestError::DuplicateId(id) => write!(f, "request {id} is already on this rank"),
            AddRequestError::EmptyPrompt(id) => write!(f, "request {id} has an empty prompt"),
            AddRequestError::HashCountMismatch { id, expected, got } => write!(
                f,
                "request {id}: {got} prompt block hashes given, its prompt has {expected} full blocks"
            ),
        }
    }
}

impl std::error::Error for AddRequestError {}

/// Why a rank refused a request for good. Each is certain when it is decided: the request
/// could never be served on this rank, whatever else happens.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The prompt is at least `max_model_len` tokens (1.6.1 rejects it too).
    PromptOverMaxModelLen,
    /// The prompt needs more blocks than the pool holds (1.6.1's terminal Reject).
    PromptOverPool,
    /// Prompt plus output would need more blocks than the pool holds, even running alone
    /// (1.6.1 serves it until it outgrows the pool, then aborts its replay).
    SequenceOverPool,
    /// Chunked prefill is off and the uncached prompt exceeds `max_num_batched_tokens`
    /// (1.6.1 aborts its replay).
    PromptOverTokenBudget,
    /// The stall safety net fired: a bug in the admission rules, never expected.
    Stalled,
}

impl RejectReason {
    /// The stable name written to `requests.csv`'s `reason` column.
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::PromptOverMaxModelLen => "prompt_exceeds_max_model_len",
            RejectReason::PromptOverPool => "prompt_exceeds_kv_pool",
            RejectReason::SequenceOverPool => "sequence_exceeds_kv_pool",
            RejectReason::PromptOverTokenBudget => "prompt_exceeds_token_budget",
            RejectReason::Stalled => "worker_stalled",
        }
    }
}

/// A request refused for good, delivered at the end of the pass that decided it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The refused request.
    pub id: RequestId,
    /// Why.
    pub reason: RejectReason,
}

/// One output token, delivered at the end of the pass that produced it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TokenOut {
    /// The request that produced it.
    pub id: RequestId,
    /// The request's first token ever (its time to first token).
    pub first: bool,
    /// The request's last token: it has left the worker.
    pub completed: bool,
    /// Tokens in the middle of the request's stream (neither first nor last) that the rank
    /// counted instead of listing them (see [`crate::mocker::Worker::count_middle_tokens`]),
    /// handed on with its last token; 0 for every other token, and whenever the rank lists
    /// every token.
    pub middle_unlisted: u32,
}

/// A request moved from waiting to running in a pass (at the pass start).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The admitted request.
    pub id: RequestId,
    /// Prompt-and-output tokens found in the prefix cache and not recomputed this time.
    pub reused_tokens: u64,
    /// The largest `reused_tokens` over all of this request's admissions so far: what 1.6.1
    /// reports as the request's `reused_input_tokens`.
    pub reported_reused_tokens: u64,
    /// True when the request had been preempted before.
    pub readmission: bool,
}

/// Everything one pass produced. Reused across passes: [`Worker::start_pass`](super::Worker::start_pass)
/// clears it first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassOutput {
    /// Tokens, in running order.
    pub tokens: Vec<TokenOut>,
    /// Requests that finished without producing any token (`max_output_tokens` 0).
    pub finished_empty: Vec<RequestId>,
    /// Requests refused for good, with why.
    pub rejected: Vec<Rejection>,
    /// Admissions at this pass's start, in admission order.
    pub admitted: Vec<Admitted>,
    /// Requests preempted during this pass (back in the waiting queue).
    pub preempted: Vec<RequestId>,
    /// A prefill rank's requests whose prompt this pass completed: held, in running order,
    /// for their decode worker.
    pub held: Vec<RequestId>,
    /// KV events of this pass, in the order they happened (empty when prefix caching is off).
    pub kv_events: Vec<KvEvent>,
    /// Uncached prompt tokens the pass's prefill computed (the polynomial's `T`).
    pub prefill_tokens: u64,
    /// Tokens the pass computed for all its requests (prompt, recomputed output, decode),
    /// net of preempted work. Can be positive in a 0 ns pass: 1.6.1 charges no time for
    /// recomputing generated tokens.
    pub scheduled_tokens: u64,
    /// Context tokens the pass's decode step was charged for (0 if no decode time).
    pub decode_kv_tokens: u64,
    /// What the pass did and what waited behind it, for a scaling policy; only when the
    /// rank was asked to ([`Worker::record_pass_metrics`](super::Worker::record_pass_metrics)).
    pub metrics: Option<Box<PassMetrics>>,
}

impl PassOutput {
    /// Empties every list, keeping capacity.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.finished_empty.clear();
        self.rejected.clear();
        self.admitted.clear();
        self.preempted.clear();
        self.held.clear();
        self.kv_events.clear();
        self.prefill_tokens = 0;
        self.scheduled_tokens = 0;
        self.decode_kv_tokens = 0;
        self.metrics = None;
    }
}

/// What one pass did and what waited behind it, as 1.6.1's forward-pass metrics count them:
/// taken when the pass is formed, read when it ends.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PassMetrics {
    /// How long the pass runs.
    pub duration: SimDuration,
    /// The requests that computed prompt tokens in the pass, by full prompt length.
    pub prefill: LengthStats,
    /// Tokens those requests computed in the pass.
    pub prefill_computed_tokens: u64,
    /// Prompt tokens those requests had computed or cached before the pass.
    pub prefill_prefix_tokens: u64,
    /// The requests the pass decoded (no prompt token computed, output still to come), by
    /// sequence length (prompt and output so far) when the pass was formed.
    pub decode: LengthStats,
    /// Those of them that get a token at the pass's end (a step that recomputes part of a
    /// preempted request's output gets none): the pass's decode steps.
    pub decode_forwards: u64,
    /// Requests waiting for their first admission, by prompt length.
    pub queued_prefill: LengthStats,
    /// Requests waiting to decode: preempted ones by sequence length, a decode rank's
    /// handoffs (reserved or landed) by prompt length.
    pub queued_decode: LengthStats,
}

/// How many lengths, their sum and the sum of their squares: a set's mean and variance,
/// exactly.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LengthStats {
    /// How many lengths.
    pub count: u64,
    /// Their sum, in tokens.
    pub sum: u64,
    /// The sum of their squares.
    pub sum_squares: u128,
}

impl LengthStats {
    /// Counts one more length.
    pub fn add(&mut self, tokens: u64) {
        self.count += 1;
        self.sum = self.sum.saturating_add(tokens);
        self.sum_squares = self
            .sum_squares
            .saturating_add(u128::from(tokens) * u128::from(tokens));
    }

    /// The population variance (0 for no length), from exact integer sums.
    pub fn variance(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let n = u128::from(self.count);
        let sum = u128::from(self.sum);
        let spread = self
            .sum_squares
            .checked_mul(n)
            .and_then(|scaled| scaled.checked_sub(sum.checked_mul(sum)?));
        let n = self.count as f64;
        match spread {
            Some(spread) => spread as f64 / n / n,
            // Beyond 128 bits (no real pass): the floating-point form.
            None => (self.sum_squares as f64 / n - (self.sum as f64 / n).powi(2)).max(0.0),
        }
    }
}

/// Where a live request is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RequestPhase {
    /// Queued, never admitted.
    Waiting,
    /// Queued again after a preemption (will recompute).
    Preempted,
    /// In the running batch.
    Running,
    /// Prefilled on a prefill rank, holding its KV blocks until its decode worker has them.
    Held,
    /// Holding blocks on a decode rank for a prompt whose KV is on its way.
    Reserved,
}

/// What a decode rank says to a handoff (see
/// [`Handoffs::reserve_handoff`](super::Handoffs::reserve_handoff)).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// Blocks are reserved.
    Reserved {
        /// The prompt's leading full blocks that were cached here (what a
        /// `destination_missing` transfer need not move).
        cached_blocks: u64,
    },
    /// Not now: too many requests run, or the blocks do not fit; ask again later.
    Wait,
    /// Never: the request could not be served on this rank whatever else runs.
    Never(RejectReason),
}

/// A read-only snapshot of one live request, for debugging and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestView {
    /// The request.
    pub id: RequestId,
    /// Which queue it is in.
    pub phase: RequestPhase,
    /// Prompt length.
    pub prompt_tokens: u64,
    /// Tokens it asked for.
    pub max_output_tokens: u64,
    /// Tokens produced so far (kept across preemptions).
    pub generated_tokens: u64,
    /// Tokens whose KV is computed (including reused prefix).
    pub computed_tokens: u64,
    /// KV blocks the request holds.
    pub held_blocks: u64,
    /// Times it was preempted.
    pub preemptions: u32,
}

/// What a rank holds, as a router or a checker may read it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Requests queued (including preempted ones).
    pub waiting: usize,
    /// Requests in the running batch.
    pub running: usize,
    /// KV blocks held by requests.
    pub active_blocks: u64,
    /// The most requests the running batch holds.
    pub max_running: u64,
    /// The most tokens one pass computes.
    pub max_batched_tokens: u64,
}

/// What a rank holds at most, as its kind reports it: what routers and reports size against
/// without naming any kind's own knobs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// The most requests the running batch holds.
    pub max_running: u64,
    /// The most tokens one pass computes (the budget busy fractions multiply).
    pub max_batched_tokens: u64,
    /// KV blocks the rank's cache holds.
    pub kv_blocks: u64,
}

/// How a rank is set up when it is built: the same for every rank of a run, whatever its
/// kind (a kind takes what applies to it).
#[derive(Copy, Clone, Debug)]
pub struct WorkerSetup<'a> {
    /// The engine arguments of the rank's pool.
    pub engine: &'a EngineArgs,
    /// Blocks the rank makes room for at once.
    pub reserved_blocks: u64,
    /// The caller skips quiet passes ([`super::QuietRuns`]) where the rank can: what only a
    /// quiet pass would publish must never be published.
    pub skips_quiet_passes: bool,
    /// The fleet's pools together outgrow the CPU caches: ranks warm what they probe.
    pub warm_probes: bool,
    /// The rank counts middle tokens from the start ([`super::Worker::count_middle_tokens`]).
    pub count_middle_tokens: bool,
    /// The rank reports each pass's metrics from the start ([`super::Worker::record_pass_metrics`]).
    pub pass_metrics: bool,
}
