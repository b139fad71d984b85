//! Token delivery: a formed pass's tokens on their way from the worker to the router and the
//! ledger, received at the pass's end or after the transport's delay.

use super::ledger::TokenEdge;
use super::{Event, SimConfig, System};
use crate::engine::EventQueue;
use crate::mocker::PassOutput;
use crate::scheduling::scheduler::Outcome;
use crate::scheduling::types::RequestId;
use crate::time::{SimDuration, SimTime};

/// Whether a run of `config` receives each token at the end of the pass that made it, with
/// no event of its own: a token in the middle of a stream is then only a count.
pub(super) fn delivers_tokens_directly(config: &SimConfig) -> bool {
    config.delays.worker_to_router == SimDuration::ZERO
        && config.delays.jitter == SimDuration::ZERO
        && !config.check_every_event
}

impl System {
    /// Sends a formed pass's tokens (and the ends of requests finished without one) on to
    /// the router, received at once when nothing delays them.
    pub(super) fn deliver_tokens(
        &mut self,
        now: SimTime,
        output: &PassOutput,
        queue: &mut EventQueue<Event>,
    ) {
        let finished_empty = output
            .finished_empty
            .iter()
            .map(|&id| (id, TokenEdge::Last, 0));
        let tokens = output
            .tokens
            .iter()
            .map(|t| (t.id, TokenEdge::of(t.first, t.completed), t.middle_unlisted));
        let direct = delivers_tokens_directly(&self.config);
        for (id, edge, middle_unlisted) in tokens.chain(finished_empty) {
            if middle_unlisted > 0 {
                // Counted by the worker (only when delivery is direct): received with this one.
                self.ledger.credit(id, u64::from(middle_unlisted));
            }
            if direct && edge == TokenEdge::Middle {
                // A token in the middle of a stream only counts: the router hears nothing.
                self.ledger.credit(id, 1);
                continue;
            }
            let delay = self
                .config
                .delays
                .worker_to_router
                .saturating_add(self.jitter());
            let earliest = self
                .last_delivery
                .get(&id)
                .copied()
                .unwrap_or(SimTime::ZERO);
            let at = now.saturating_add(delay).max(earliest);
            let attempt = self.ledger.attempt(id);
            if at == now {
                self.receive_tokens(now, id, attempt, edge);
                self.drain_router(now, queue);
            } else {
                if edge.is_last() {
                    self.last_delivery.remove(&id);
                } else {
                    self.last_delivery.insert(id, at);
                }
                queue.schedule(
                    at,
                    Event::Tokens {
                        request: id,
                        attempt,
                        edge,
                    },
                );
            }
        }
    }

    /// A token (or the end of a stream) reaches the router and the client.
    /// Tokens of an earlier attempt (before a migration) or of a request that already ended
    /// (cancelled) are dropped.
    pub(super) fn receive_tokens(
        &mut self,
        now: SimTime,
        id: RequestId,
        attempt: u32,
        edge: TokenEdge,
    ) {
        if !self.ledger.receive(now, id, attempt, edge) {
            return;
        }
        let router = self.routers.for_tokens();
        // A request whose first token is its last ends without its prefill's end being
        // heard on its own: 1.6.1 frees the whole booking and drains once.
        if edge.is_first() && !edge.is_last() {
            router.first_token(now, id);
        }
        if edge.is_last() {
            self.last_delivery.remove(&id);
            router.finished(now, id, Outcome::Completed);
        }
        if self.timeline.is_some() {
            self.touch_rank(self.ledger.record(id).rank());
        }
    }
}
