//! Per-class admission policy hook: Bypass / Ready / Defer on arrival, and status updates.
//!
//! A policy sees each arriving request of its class and may let it through untouched
//! (`Bypass`), send it down the normal path with an optional exact placement (`Ready`), or hold
//! it (`Defer`) until it says `MakeReady`. Deferred requests count toward queue limits but not
//! toward a class's backlog. The policy then hears whether the request was dispatched (only
//! once the caller reports it sent to its worker) and, exactly once, how it ended.

use super::class_queue::Placement;
use super::types::RequestId;
use crate::time::SimTime;

/// What a policy decides for an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionDecision {
    /// Opt out: the request is scheduled as if the class had no policy.
    Bypass,
    /// Proceed now; `Some(placement)` overrides where the request may run.
    Ready(Option<Placement>),
    /// Hold the request until the policy releases it with `MakeReady`.
    Defer,
}

/// A lifecycle update for a request the policy admitted (not for bypassed ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionStatus {
    /// The booked request was sent to its worker (the caller reported it; a booking rolled
    /// back before that is never reported dispatched).
    Dispatched,
    /// The stream ended normally.
    Completed,
    /// Cancelled, failed, or rejected before it ran.
    Aborted,
}

/// What the scheduler tells a policy about an arriving request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArrivalInfo {
    pub id: RequestId,
    pub isl_tokens: u64,
    pub priority: f64,
    pub strict_priority: u32,
}

/// A per-class admission policy. Implementations must be deterministic, and `Send` so that a
/// scheduler can move to another thread (a driver running in wall-clock time).
pub trait AdmissionPolicy: Send + std::fmt::Debug {
    /// Decides what happens to an arriving request of this policy's class.
    fn on_arrival(&mut self, now: SimTime, request: &ArrivalInfo) -> AdmissionDecision;

    /// Hears how an admitted request fares.
    fn on_status(&mut self, now: SimTime, id: RequestId, status: AdmissionStatus);

    /// Deferred requests the policy wants released now (drained after every input).
    fn poll_make_ready(&mut self) -> Option<RequestId> {
        None
    }
}

/// A small concurrency cap, used in tests: at most `limit` of its requests in flight at once;
/// the rest are deferred and released one by one as earlier ones end.
#[cfg(test)]
#[derive(Debug)]
pub struct ConcurrencyCap {
    limit: usize,
    in_flight: usize,
    deferred: std::collections::VecDeque<RequestId>,
    release: std::collections::VecDeque<RequestId>,
}

#[cfg(test)]
impl ConcurrencyCap {
    pub fn new(limit: usize) -> Self {
        ConcurrencyCap {
            limit,
            in_flight: 0,
            deferred: Default::default(),
            release: Default::default(),
        }
    }
}

#[cfg(test)]
impl AdmissionPolicy for ConcurrencyCap {
    fn on_arrival(&mut self, _: SimTime, request: &ArrivalInfo) -> AdmissionDecision {
        if self.in_flight < self.limit {
            self.in_flight += 1;
            AdmissionDecision::Ready(None)
        } else {
            self.deferred.push_back(request.id);
            AdmissionDecision::Defer
        }
    }

    fn on_status(&mut self, _: SimTime, id: RequestId, status: AdmissionStatus) {
        if status == AdmissionStatus::Dispatched {
            return;
        }
        // A request that ends while still deferred never held a slot: it only leaves the line.
        if let Some(at) = self.deferred.iter().position(|&d| d == id) {
            self.deferred.remove(at);
            return;
        }
        match self.deferred.pop_front() {
            // The slot passes straight to the next deferred request.
            Some(next) => self.release.push_back(next),
            None => self.in_flight = self.in_flight.saturating_sub(1),
        }
    }

    fn poll_make_ready(&mut self) -> Option<RequestId> {
        self.release.pop_front()
    }
}
