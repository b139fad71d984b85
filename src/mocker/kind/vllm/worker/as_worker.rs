//! The mock rank as the simulator sees it: [`Worker`] and its [`Handoffs`] capability for
//! [`MockWorker`], each method the rank's own.

use super::MockWorker;
use crate::mocker::protocol::{
    AddRequestError, MockRequest, PassOutput, RequestPhase, RequestView, Reservation, WorkerLoad,
};
use crate::mocker::step_memo::StepMemo;
use crate::mocker::traits::{Handoffs, QuietRuns, Worker};
use crate::scheduling::types::{RequestId, WorkerWithDpRank};
use crate::time::SimTime;
impl Worker for MockWorker {
    fn rank(&self) -> WorkerWithDpRank {
        self.rank
    }

    fn add_request(&mut self, now: SimTime, request: MockRequest) -> Result<(), AddRequestError> {
        MockWorker::add_request(self, now, request)
    }

    fn remove_request(&mut self, id: RequestId) -> Option<RequestView> {
        MockWorker::remove_request(self, id)
    }

    fn has_work(&self) -> bool {
        MockWorker::has_work(self)
    }

    fn start_pass(&mut self, now: SimTime, memo: &mut StepMemo, out: &mut PassOutput) -> SimTime {
        self.execute_pass_with(now, memo, out)
    }

    fn take_back(&mut self, out: &mut PassOutput) {
        MockWorker::take_back(self, out);
    }

    fn held_requests(&self, out: &mut Vec<RequestId>) {
        let landed = self.landed.iter().map(|&s| self.req(s).id);
        out.extend(self.waiting_ids().chain(landed).chain(self.running_ids()));
        // Held prompts and reserved handoffs are in no queue.
        if self.held > 0 {
            let mut unqueued: Vec<RequestId> = self
                .slot_of
                .iter()
                .filter(|&(_, &slot)| {
                    let phase = self.req(slot).phase;
                    matches!(phase, RequestPhase::Held | RequestPhase::Reserved)
                })
                .map(|(&id, _)| id)
                .collect();
            unqueued.sort_unstable();
            out.extend(unqueued);
        }
    }

    fn for_each_running(&self, f: &mut dyn FnMut(RequestId)) {
        self.running_ids().for_each(f);
    }

    fn count_middle_tokens(&mut self) {
        MockWorker::count_middle_tokens(self);
    }

    fn record_pass_metrics(&mut self) {
        MockWorker::record_pass_metrics(self);
    }

    fn credit_unlisted_tokens(&mut self, credit: &mut dyn FnMut(RequestId, u64)) {
        MockWorker::credit_unlisted_tokens(self, credit);
    }

    fn request(&self, id: RequestId) -> Option<RequestView> {
        MockWorker::request(self, id)
    }

    fn load(&self) -> WorkerLoad {
        WorkerLoad {
            waiting: self.waiting_len(),
            running: self.running_len(),
            active_blocks: self.active_blocks(),
            max_running: self.common.capacity.max_num_seqs,
            max_batched_tokens: self.common.capacity.max_num_batched_tokens,
        }
    }

    fn preemptions_total(&self) -> u64 {
        self.preemptions_total
    }

    fn check_invariants(&self) -> Result<(), String> {
        MockWorker::check_invariants(self)
    }

    fn handoffs(&mut self) -> Option<&mut dyn Handoffs> {
        Some(self)
    }

    fn quiet_runs(&mut self) -> Option<&mut dyn QuietRuns> {
        Some(self)
    }
}

impl Handoffs for MockWorker {
    fn release_held(&mut self, id: RequestId) -> bool {
        MockWorker::release_held(self, id)
    }

    fn reserve_handoff(&mut self, request: MockRequest) -> Result<Reservation, AddRequestError> {
        MockWorker::reserve_handoff(self, request)
    }

    fn activate_handoff(&mut self, id: RequestId) -> bool {
        MockWorker::activate_handoff(self, id)
    }

    fn set_handoffs_pending(&mut self, pending: bool) {
        MockWorker::set_handoffs_pending(self, pending)
    }
}
