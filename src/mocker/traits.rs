//! What a simulator asks of a worker rank, in the words of [`super::protocol`]: [`Worker`],
//! which every worker kind implements (requests go in, a pass starts and ends, and what the
//! pass delivers at its end: token edges, finished and refused requests, KV events), and the
//! optional capabilities a kind may have: [`Handoffs`], serving one side of a disaggregated
//! handoff, and [`QuietRuns`], skipping through passes nobody outside the rank can observe.

use super::protocol::{
    AddRequestError, MockRequest, PassOutput, RequestView, Reservation, WorkerLoad,
};
use super::step_memo::StepMemo;
use crate::scheduling::types::{RequestId, WorkerWithDpRank};
use crate::time::SimTime;

/// One worker rank, driven pass by pass in virtual time. Add requests with
/// [`Worker::add_request`]; when the rank is idle and has work, start a pass with
/// [`Worker::start_pass`], which returns when it ends; everything in the pass's
/// [`PassOutput`] is delivered at that end, then handed back with [`Worker::take_back`].
/// Requests that arrive while a pass runs join the next one.
pub trait Worker: Send + std::fmt::Debug {
    /// Which worker and rank this is (stamped on its KV events).
    fn rank(&self) -> WorkerWithDpRank;

    /// Queues a request (`now` is its arrival); it joins the next pass.
    fn add_request(&mut self, now: SimTime, request: MockRequest) -> Result<(), AddRequestError>;

    /// Takes request `id` off the rank at once, wherever it is, freeing what it holds
    /// (a client's cancellation); `None` if the rank does not hold it.
    fn remove_request(&mut self, id: RequestId) -> Option<RequestView>;

    /// True while the rank holds a request: the caller must run another pass.
    fn has_work(&self) -> bool;

    /// Forms and runs one pass starting at `now`, fills `out` (cleared first) and returns
    /// the pass end. `memo` is the table of step durations of the rank's engine
    /// configuration, which the ranks of one pool share (a kind that does not time steps by
    /// batch leaves it alone).
    fn start_pass(&mut self, now: SimTime, memo: &mut StepMemo, out: &mut PassOutput) -> SimTime;

    /// Empties a pass's output once it has been delivered, taking back what the rank reuses.
    fn take_back(&mut self, out: &mut PassOutput);

    /// Appends the ids of every request the rank holds: waiting, running, and in
    /// disaggregated serving held for a decode worker or reserved for a transfer.
    fn held_requests(&self, out: &mut Vec<RequestId>);

    /// Calls `f` with each running request's id, in running order.
    fn for_each_running(&self, f: &mut dyn FnMut(RequestId));

    /// From now on, a token in the middle of a request's stream (neither its first nor its
    /// last) is counted on the request instead of listed in its pass's output, and the count
    /// rides on the last token ([`crate::mocker::TokenOut::middle_unlisted`]). Only for a
    /// caller to whom such a token is a count and nothing else (it delivers every token at
    /// its pass's end, with no delay), and that never takes a request off the rank but by its
    /// last token. At the end of its run it collects what is left: the counts still on the
    /// rank ([`Worker::credit_unlisted_tokens`]) and those on the last tokens of a pass in
    /// flight, which were counted in passes before it. A rank that cannot count lists every
    /// token, which is always correct.
    fn count_middle_tokens(&mut self) {}

    /// From now on, each pass's output carries its [`PassMetrics`](super::protocol::PassMetrics) (for a scaling policy,
    /// which reads what every pass did). A kind that cannot tell leaves them out.
    fn record_pass_metrics(&mut self) {}

    /// At the end of a run: calls `credit` with each request still on the rank and the middle
    /// tokens counted for it whose pass has been delivered (handed back with
    /// [`Worker::take_back`]; a pass in flight was never received), and forgets the counts.
    fn credit_unlisted_tokens(&mut self, _credit: &mut dyn FnMut(RequestId, u64)) {}

    /// A snapshot of a held request, for diagnostics.
    fn request(&self, id: RequestId) -> Option<RequestView>;

    /// What the rank holds now.
    fn load(&self) -> WorkerLoad;

    /// Preemptions since the rank started.
    fn preemptions_total(&self) -> u64;

    /// The rank's own bookkeeping checks (Err: a bug in the worker model).
    fn check_invariants(&self) -> Result<(), String>;

    /// The rank's handoff capability (disaggregated serving), if it has one.
    fn handoffs(&mut self) -> Option<&mut dyn Handoffs> {
        None
    }

    /// The rank's quiet-run capability, if it has one.
    fn quiet_runs(&mut self) -> Option<&mut dyn QuietRuns> {
        None
    }
}

/// Serving one side of a disaggregated handoff: a prefill rank holds a request's blocks
/// once its prompt is computed, until its decode worker has them; a decode rank reserves
/// blocks for a prompt whose KV is on its way and runs the request once it lands.
pub trait Handoffs {
    /// A prefill rank lets go of held request `id` (its KV reached its decode worker, or the
    /// handoff was given up); false if it holds no such request.
    fn release_held(&mut self, id: RequestId) -> bool;

    /// A decode rank is asked, between passes, to reserve blocks for `request`'s handoff.
    fn reserve_handoff(&mut self, request: MockRequest) -> Result<Reservation, AddRequestError>;

    /// A reserved handoff's transfer landed on a decode rank: the request joins its next
    /// pass. False if the rank had reserved nothing for it.
    fn activate_handoff(&mut self, id: RequestId) -> bool;

    /// Whether handoffs wait for room on a decode rank: until they have it, only landed
    /// handoffs are admitted.
    fn set_handoffs_pending(&mut self, pending: bool);
}

/// Skipping quiet passes: a run of passes whose only effect is one more token for every
/// running request (no admission, completion, first token, preemption or published KV
/// event) is planned at once and applied at once, instead of pass by pass. Nothing outside
/// the rank sees such a pass but its tokens, so the result is the same.
pub trait QuietRuns {
    /// Plans the run of quiet passes that starts at `start`: pushes onto `ends` (cleared
    /// first) the end of each, at most `max_passes`, each starting where the previous one
    /// ends (decode durations from `memo`, as [`Worker::start_pass`] times them). Empty when
    /// the next pass is not quiet.
    fn plan_quiet_run(
        &mut self,
        start: SimTime,
        max_passes: usize,
        memo: &mut StepMemo,
        ends: &mut Vec<SimTime>,
    );

    /// Applies the first `passes` passes of the run last planned (nothing changed since but
    /// requests added to the waiting queue), the last of which ends at `last_end`: every
    /// running request gets `passes` tokens, as that many passes would give it.
    fn apply_quiet_run(&mut self, passes: u64, last_end: SimTime);
}
