//! The serving mode as a part of the system: what happens to a request between the workers'
//! passes. Aggregated serving (one worker prefills and decodes) has nothing to do there;
//! disaggregated serving (`handoff.rs`) hands each prompt from its prefill worker to a decode
//! worker. The event loop calls these hooks; a mode acts through [`Effects`].

use super::effects::Effects;
use crate::scheduling::types::RequestId;
use crate::time::SimTime;

/// A serving mode: the event loop's hooks into what happens between passes. Every hook has
/// aggregated serving's answer (nothing happens) as its default.
pub(super) trait Serving: Send {
    /// Whether rank `rank` may plan a run of quiet passes now (a rank with handoffs to take
    /// steps at every pass end).
    fn allows_quiet_run(&self, _rank: usize) -> bool {
        true
    }

    /// Prefill rank `rank`'s pass ended at `now`, its prompts `held` computed.
    fn prefill_pass_ended(
        &mut self,
        _fx: &mut dyn Effects,
        _now: SimTime,
        _rank: usize,
        _held: &[RequestId],
    ) {
    }

    /// Decode rank `rank`'s pass ended at `now`, its tokens delivered.
    fn decode_pass_ended(&mut self, _fx: &mut dyn Effects, _now: SimTime, _rank: usize) {}

    /// Request `id`'s KV transfer landed at `now`.
    fn transfer_done(&mut self, _fx: &mut dyn Effects, _now: SimTime, _id: RequestId) {}

    /// Worker `worker` stopped at `now` holding `held`: the requests lost with it, in id
    /// order.
    fn lost_with(
        &mut self,
        _fx: &mut dyn Effects,
        _now: SimTime,
        _worker: u64,
        held: Vec<RequestId>,
    ) -> Vec<RequestId> {
        held
    }

    /// Calls `f` with each request waiting for a reservation on decode rank `rank`, in the
    /// order they will get one.
    fn for_each_waiting_handoff(&self, _rank: usize, _f: &mut dyn FnMut(RequestId)) {}

    /// The fleet has `ranks` ranks now (workers joined).
    fn fleet_grew(&mut self, _ranks: usize) {}

    /// Whether request `id` is between its decode worker taking it and its source letting go
    /// (the prefill router still holds it).
    fn is_releasing(&self, _id: RequestId) -> bool {
        false
    }

    /// At the end of a drained run: Err unless nothing is left in flight between passes.
    fn check_drained(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Aggregated serving: a worker runs a request from its prompt to its last token.
pub(super) struct Aggregated;

impl Serving for Aggregated {}
