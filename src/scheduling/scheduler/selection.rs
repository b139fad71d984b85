//! Choosing a rank for an admitted request: eligibility, the cost-based pick, and the ranks'
//! costs kept between requests that overlap no rank.
//!
//! A request whose prompt no rank holds (nothing in the index, no live prefix in the load
//! book) and that carries no constraint is costed on every rank from the rank's load row and
//! the request's length alone. Consecutive such requests of one length (a large fleet serving
//! traffic with no shared prefixes) see the same costs on every rank whose load did not change
//! in between, which is all but the few ranks that booked, finished or prefilled a request.
//! [`KeptCosts`] keeps those costs and recomputes only the ranks whose change mark in the load
//! book moved, so such a request reads a few ranks' state instead of every rank's.

use super::{Scheduler, SchedulerError, SchedulingRequest};
use crate::scheduling::hashing::unshared_identities;
use crate::scheduling::load::LoadTracker;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::select::{
    Selection, SelectionInputs, UnsharedCosts, eligible_ranks, pick_min_cost_of, pinned_selection,
    select_worker,
};
use crate::scheduling::types::{SeqHash, WorkerWithDpRank};
use crate::time::SimTime;
use std::borrow::Cow;

/// The ranks' costs for requests that overlap no rank, each kept while its rank's change mark
/// in the load book stands.
#[derive(Debug, Default)]
pub(super) struct KeptCosts {
    /// The ranks costed, in order: the open ranks, which are then exactly the load book's.
    ranks: Vec<WorkerWithDpRank>,
    /// The load book's layout when `ranks` were checked against it (None: not checked since
    /// the worker set changed).
    layout: Option<u64>,
    /// Whether `ranks` are the load book's, in order, as checked: costs are kept only then.
    aligned: bool,
    /// The request length (tokens, tracked blocks) the costs are for.
    request: (u64, u64),
    /// Per rank, the load book's change mark its cost was computed at (0: not computed).
    marks: Vec<u64>,
    costs: Vec<f64>,
    /// Costs computed so far.
    computed: u64,
}

impl KeptCosts {
    /// Forgets every cost: the worker set (and so the open ranks) changed.
    pub(super) fn forget_workers(&mut self) {
        *self = KeptCosts::default();
    }

    /// Makes the kept costs those of `open` ranks in `load` for a request of `isl_tokens`
    /// tokens and `query_blocks` tracked blocks; false if the open ranks are not the load
    /// book's, in order (then nothing is kept). The open ranks may differ from the last
    /// call's only after [`Self::forget_workers`].
    fn prepare(
        &mut self,
        open: &[WorkerWithDpRank],
        load: &LoadTracker,
        isl_tokens: u64,
        query_blocks: u64,
    ) -> bool {
        #[cfg(test)]
        assert!(
            self.layout.is_none() || self.ranks == open,
            "the worker set changed unannounced"
        );
        if self.layout != Some(load.layout()) {
            self.aligned =
                load.change_marks().len() == open.len() && load.ranks().as_slice() == open;
            self.ranks = open.to_vec();
            self.layout = Some(load.layout());
            self.forget();
        }
        if self.request != (isl_tokens, query_blocks) {
            self.request = (isl_tokens, query_blocks);
            self.forget();
        }
        self.aligned
    }

    fn forget(&mut self) {
        self.marks.clear();
        self.marks.resize(self.ranks.len(), 0);
        self.costs.resize(self.ranks.len(), 0.0);
    }

    /// Brings every rank's cost up to date with `load` (see [`Self::prepare`], which makes
    /// the kept ranks the load book's, so the lists below are equally long).
    fn refresh(&mut self, costs: &UnsharedCosts, router: &RouterConfig, load: &LoadTracker) {
        let query_blocks = self.request.1;
        let marks = load.change_marks();
        #[cfg(test)]
        assert_eq!(
            marks.len(),
            self.marks.len(),
            "kept costs of another layout"
        );
        let kept = self.marks.iter_mut().zip(self.costs.iter_mut());
        let mut computed = 0;
        // One rank per iteration: bounded by the rank count.
        for (index, (&mark, (kept_mark, cost))) in marks.iter().zip(kept).enumerate() {
            if *kept_mark != mark {
                *kept_mark = mark;
                *cost = costs.cost(router, &load.unrooted_row(index, query_blocks));
                computed += 1;
            }
        }
        self.computed += computed;
    }
}

impl Scheduler {
    /// The cached blocks per rank the index holds for the request's prompt.
    pub(super) fn overlaps(&self, request: &SchedulingRequest) -> Vec<(WorkerWithDpRank, u32)> {
        self.indexer.overlap_blocks(&request.block_hashes)
    }

    /// Eligibility then the cost-based pick; pins skip scoring. `overlaps`: the cached blocks
    /// per rank to select with (a released request's, from its arrival), or None to measure
    /// them now.
    pub(super) fn select(
        &mut self,
        now: SimTime,
        request: &SchedulingRequest,
        tracked_hashes: &[SeqHash],
        overlaps: Option<Vec<(WorkerWithDpRank, u32)>>,
    ) -> Result<Selection, SchedulerError> {
        let overlaps = overlaps.unwrap_or_else(|| self.overlaps(request));
        #[cfg(test)]
        let rng_before = self.rng.clone();
        if let Some(selection) = self.select_unshared(request, tracked_hashes, &overlaps) {
            #[cfg(test)]
            self.check_unshared(
                now,
                request,
                tracked_hashes,
                &overlaps,
                rng_before,
                selection,
            );
            return Ok(selection);
        }
        self.select_scored(now, request, tracked_hashes, &overlaps)
    }

    /// The pick by every rank's cost afresh.
    fn select_scored(
        &mut self,
        now: SimTime,
        request: &SchedulingRequest,
        tracked_hashes: &[SeqHash],
        overlaps: &[(WorkerWithDpRank, u32)],
    ) -> Result<Selection, SchedulerError> {
        let candidates = eligible_ranks(&self.workers, &request.constraints)?;
        let loads = self.load.project(now, tracked_hashes);
        let inputs = SelectionInputs {
            candidates: &candidates,
            loads: &loads,
            overlaps,
            isl_tokens: request.isl_tokens,
            block_size: self.config.block_size_tokens,
            workers: &self.workers,
            preferred_taints: &request.constraints.preferred_taints,
        };
        match request.constraints.pinned {
            Some(pin) => Ok(pinned_selection(&self.config.router, &inputs, pin)),
            None => Ok(select_worker(&self.config.router, &inputs, &mut self.rng)?),
        }
    }

    /// The pick among the kept costs, for an unconstrained request that overlaps no rank (see
    /// the module docs); None for any other request, or when costs cannot be kept.
    fn select_unshared(
        &mut self,
        request: &SchedulingRequest,
        tracked_hashes: &[SeqHash],
        overlaps: &[(WorkerWithDpRank, u32)],
    ) -> Option<Selection> {
        let constraints = &request.constraints;
        let unconstrained = constraints.pinned.is_none()
            && constraints.allowed_workers.is_none()
            && constraints.required_taints.is_empty()
            && constraints.preferred_taints.is_empty();
        if !unconstrained || !overlaps.is_empty() || self.load.is_rooted(tracked_hashes) {
            return None;
        }
        let router = &self.config.router;
        let block_size = self.config.block_size_tokens;
        let costs = UnsharedCosts::new(router, request.isl_tokens, block_size)?;
        let open = self.workers.open_ranks();
        let query_blocks = tracked_hashes.len() as u64;
        if open.is_empty()
            || !self
                .kept
                .prepare(open, &self.load, request.isl_tokens, query_blocks)
        {
            return None;
        }
        self.kept.refresh(&costs, router, &self.load);
        let index = pick_min_cost_of(self.kept.costs.iter().copied(), &mut self.rng)?;
        Some(costs.selection(self.kept.ranks[index], self.kept.costs[index]))
    }

    /// Test builds: the kept costs pick what scoring every rank afresh picks, with the same
    /// draws.
    #[cfg(test)]
    fn check_unshared(
        &mut self,
        now: SimTime,
        request: &SchedulingRequest,
        tracked_hashes: &[SeqHash],
        overlaps: &[(WorkerWithDpRank, u32)],
        rng_before: crate::rng::SimRng,
        selection: Selection,
    ) {
        let rng_after = std::mem::replace(&mut self.rng, rng_before);
        let scored = self.select_scored(now, request, tracked_hashes, overlaps);
        assert_eq!(
            scored.ok(),
            Some(selection),
            "kept costs pick as fresh ones"
        );
        assert!(rng_after == self.rng, "kept costs draw as fresh ones");
    }

    /// The block identities booked for a request: its real hashes when the router assumes KV
    /// reuse, otherwise identities unique to the request; none when block tracking is off.
    pub(super) fn tracked_hashes<'r>(&self, request: &'r SchedulingRequest) -> Cow<'r, [SeqHash]> {
        let router = &self.config.router;
        if !router.router_track_active_blocks {
            return Cow::Borrowed(&[]);
        }
        if router.router_assume_kv_reuse {
            return Cow::Borrowed(&request.block_hashes);
        }
        Cow::Owned(unshared_identities(request.id, request.block_hashes.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{decisions, dispatched, request, scheduler, t, workers};
    use super::*;
    use crate::scheduling::scheduler::{Outcome, SchedulerConfig};
    use crate::scheduling::select::{WorkerConfig, WorkerSet};
    use crate::scheduling::types::RequestId;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, VecDeque};

    fn ranks_costed(s: &Scheduler) -> u64 {
        s.kept.computed
    }

    /// Requests of one length that overlap no rank cost only the ranks whose load changed
    /// since the last such request; another length costs every rank afresh.
    #[test]
    fn unshared_requests_recost_only_the_ranks_whose_load_changed() {
        let mut s = scheduler(None, 8);
        s.handle_arrival(t(0), request(0, "regular", 512));
        assert_eq!(ranks_costed(&s), 8, "the first request costs every rank");
        s.handle_arrival(t(1), request(1, "regular", 512));
        assert_eq!(
            ranks_costed(&s),
            9,
            "then only the rank request 0 was booked on"
        );
        s.handle_first_token(t(2), RequestId(0));
        s.handle_arrival(t(3), request(2, "regular", 512));
        assert_eq!(
            ranks_costed(&s),
            11,
            "request 1's rank and request 0's prefilled one"
        );
        s.handle_arrival(t(4), request(3, "regular", 1024));
        assert_eq!(ranks_costed(&s), 19, "another length costs every rank");
        let booked: BTreeSet<u64> = dispatched(&decisions(&mut s)).iter().map(|d| d.0).collect();
        assert_eq!(booked, (0..4).collect(), "every request was dispatched");
    }

    /// A request that shares a prefix, is constrained or is picked by softmax is costed
    /// afresh: its costs depend on more than the ranks' rows and its length.
    #[test]
    fn only_unconstrained_unshared_minimum_cost_picks_keep_costs() {
        let mut s = scheduler(None, 4);
        s.handle_arrival(t(0), request(0, "regular", 512));
        let mut same_prompt = request(1, "regular", 512);
        same_prompt.block_hashes = request(0, "regular", 512).block_hashes;
        s.handle_arrival(t(1), same_prompt);
        let mut preferring = request(2, "regular", 512);
        preferring.constraints.preferred_taints = vec![("gpu".to_string(), 1.0)];
        s.handle_arrival(t(2), preferring);
        assert_eq!(ranks_costed(&s), 4, "only the first request kept costs");

        let router = RouterConfig {
            router_temperature: 0.5,
            ..RouterConfig::default()
        };
        let config = SchedulerConfig::new(router, None, None, 64, 7);
        let mut softmax = Scheduler::new(config, workers(4), SimTime::ZERO);
        softmax.handle_arrival(t(0), request(0, "regular", 512));
        assert_eq!(ranks_costed(&softmax), 0);
        assert_eq!(dispatched(&decisions(&mut softmax)).len(), 1);
    }

    /// What a random step does to the scheduler.
    #[derive(Clone, Debug)]
    enum Step {
        /// A request of `blocks` blocks arrives; `shared` reuses request `id - 1`'s prompt.
        Arrive { blocks: u64, shared: bool },
        /// The oldest request still active gets its first token.
        FirstToken,
        /// The oldest request still active finishes.
        Finish,
        /// Worker `worker` joins (open or fenced), or leaves.
        Change { worker: u64, state: WorkerState },
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum WorkerState {
        Open,
        Fenced,
        Gone,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (1..4u64, prop::bool::weighted(0.2))
                .prop_map(|(blocks, shared)| Step::Arrive { blocks, shared }),
            2 => Just(Step::FirstToken),
            2 => Just(Step::Finish),
            1 => (0..5u64, prop_oneof![
                Just(WorkerState::Open), Just(WorkerState::Fenced), Just(WorkerState::Gone)
            ]).prop_map(|(worker, state)| Step::Change { worker, state }),
        ]
    }

    proptest! {
        /// Over random traffic (shared and unshared prompts, prefills ending, requests
        /// finishing, workers joining, fenced and leaving), every pick among kept costs is the pick
        /// and the draws of costing every rank afresh: test builds check each one as it is
        /// made (`check_unshared`).
        #[test]
        fn kept_costs_pick_as_fresh_costs_over_random_traffic(
            steps in prop::collection::vec(step(), 1..60), seed in 0u64..1000
        ) {
            let config = SchedulerConfig::new(RouterConfig::default(), None, None, 64, seed);
            let mut s = Scheduler::new(config, workers(4), SimTime::ZERO);
            let mut fleet = [WorkerState::Open; 5];
            fleet[4] = WorkerState::Gone;
            let mut active = VecDeque::new();
            let mut first_token = VecDeque::new();
            for (at, step) in steps.into_iter().enumerate() {
                let now = t(at as u64);
                match step {
                    Step::Arrive { blocks, shared } => {
                        let id = at as u64;
                        let mut r = request(id, "regular", blocks * 64);
                        if shared && id > 0 {
                            r = request(id - 1, "regular", blocks * 64);
                            r.id = RequestId(id);
                        }
                        s.handle_arrival(now, r);
                    }
                    Step::FirstToken => {
                        if let Some(id) = first_token.pop_front() {
                            s.handle_first_token(now, id);
                        }
                    }
                    Step::Finish => {
                        if let Some(id) = active.pop_front() {
                            s.handle_finished(now, id, Outcome::Completed);
                        }
                    }
                    Step::Change { worker, state } => {
                        fleet[worker as usize] = state;
                        let mut set = WorkerSet::new();
                        for (id, &state) in (0u64..).zip(&fleet) {
                            let fenced = state == WorkerState::Fenced;
                            if state != WorkerState::Gone {
                                set.insert(id, WorkerConfig { fenced, ..WorkerConfig::default() });
                            }
                        }
                        s.handle_workers(now, set);
                    }
                }
                for (id, _) in dispatched(&decisions(&mut s)) {
                    active.push_back(RequestId(id));
                    first_token.push_back(RequestId(id));
                }
            }
            prop_assert!(s.check_invariants().is_ok());
        }
    }
}
