//! Where a run's arrivals come from: the requests' own times (an open loop) or a closed
//! loop's free slots, and a session's later turns, each released a think time after the turn
//! before it ends.

use super::ClosedLoop;
use super::ledger::Ledger;
use crate::scheduling::types::RequestId;
use crate::time::SimTime;
use crate::workload::session::SessionTurn;
use crate::workload::{Arrival, PromptHashes, RequestSpec, UniformBlockHashes};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A new request's prompt block hashes for `block_size` (those the reader computed, if for
/// that size) and the first of its blocks no other request can hold: its generated blocks at
/// least, whose hashes are its own, or earlier where the reader knows.
pub(super) fn prompt_blocks(
    spec: &RequestSpec,
    hashed: Option<PromptHashes>,
    block_size: u64,
    uniform: &mut UniformBlockHashes,
) -> (Arc<[u64]>, u64) {
    let (hashes, known): (Arc<[u64]>, u64) = match hashed {
        Some(hashed) if hashed.block_size == block_size => (hashed.hashes, hashed.unshared_from),
        _ => (spec.block_hashes_with(block_size, uniform).into(), u64::MAX),
    };
    let prompt_blocks = hashes.len() as u64;
    (hashes, known.min(prompt_blocks))
}

/// The arrivals of a run, in the order the simulator takes them.
///
/// A closed loop's slot is a session's, held through all its turns and think times (a
/// request outside a session is a session of one). Turns ready at one instant go in order
/// of their sessions' first appearance, as in Dynamo 1.6.1.
pub(super) struct Feed<I: Iterator<Item = Arrival>> {
    /// First turns (and plain requests), in arrival order for an open loop.
    heads: std::iter::Peekable<I>,
    closed: Option<ClosedLoop>,
    /// Sessions holding a closed loop's slot.
    active: u64,
    /// The latest instant whose arrivals were taken: when a closed loop issues next.
    clock: SimTime,
    /// Requests whose end the feed must hear of, with the rest of their session (`None`:
    /// nothing follows, but the end frees a closed loop's slot).
    watched: rustc_hash::FxHashMap<RequestId, Option<SessionTurn>>,
    /// Later turns, by (arrival, session index, turn).
    ready: BTreeMap<(SimTime, u32, u32), Arrival>,
}

impl<I: Iterator<Item = Arrival>> Feed<I> {
    pub fn new(heads: I, closed: Option<ClosedLoop>) -> Self {
        Feed {
            heads: heads.peekable(),
            closed,
            active: 0,
            clock: SimTime::ZERO,
            watched: Default::default(),
            ready: BTreeMap::new(),
        }
    }

    /// When the next request arrives, given the ends `ledger` has seen.
    pub fn next_time(&mut self, ledger: &mut Ledger) -> Option<SimTime> {
        self.hear_ends(ledger);
        let head = match self.closed {
            None => self.heads.peek().map(|a| a.spec.arrival),
            Some(closed) => self.can_activate(closed, self.clock).then_some(self.clock),
        };
        let later = self.ready.keys().next().map(|&(at, _, _)| at);
        match (head, later) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next request arriving at `now`, if any (a closed loop's first turns with `now` as
    /// their arrival).
    pub fn next_at(&mut self, now: SimTime, ledger: &mut Ledger) -> Option<Arrival> {
        self.clock = now;
        self.hear_ends(ledger);
        let head_due = match self.closed {
            None => self.heads.peek().is_some_and(|a| a.spec.arrival <= now),
            Some(closed) => self.can_activate(closed, now),
        };
        let later_due = self.ready.keys().next().filter(|key| key.0 <= now);
        let take_later = match (head_due, later_due) {
            (_, None) => false,
            (false, Some(_)) => true,
            (true, Some(&(_, index, _))) => {
                let head_index = self.heads.peek().and_then(|a| a.session.as_ref());
                head_index.is_some_and(|s| index < s.index)
            }
        };
        if take_later {
            return self.ready.pop_first().map(|(_, arrival)| arrival);
        }
        if !head_due {
            return None;
        }
        let mut head = self.heads.next()?;
        if self.closed.is_some() {
            head.spec.arrival = now;
            self.active += 1;
        }
        Some(head)
    }

    /// Request `id` (at `arrival`'s place in its session, if any) entered the run: the feed
    /// hears of its end if a turn follows it or it holds a closed loop's slot.
    pub fn opened(&mut self, id: RequestId, session: Option<SessionTurn>, ledger: &mut Ledger) {
        let follows = session.as_ref().is_some_and(|s| !s.later.is_empty());
        if follows || self.closed.is_some() {
            ledger.watch(id);
            self.watched.insert(id, session);
        }
    }

    /// Whether a closed loop may start a session at `now`: a slot is free, issuing has not
    /// stopped, and a session is left.
    fn can_activate(&mut self, closed: ClosedLoop, now: SimTime) -> bool {
        self.active < u64::from(closed.concurrency)
            && closed.issue_until.is_none_or(|until| now < until)
            && self.heads.peek().is_some()
    }

    /// Acts on the ends of watched requests: a completed or rejected turn makes its
    /// session's next turn ready a think time later; a last turn, or one cancelled or
    /// aborted (which drops the rest of its session), frees its slot.
    fn hear_ends(&mut self, ledger: &mut Ledger) {
        for end in ledger.take_watched_ends() {
            let Some(session) = self.watched.remove(&end.id) else {
                continue; // never watched: nothing follows it
            };
            let next = session
                .filter(|_| end.goes_on)
                .and_then(SessionTurn::next_turn);
            match next {
                Some((turn, rest)) => {
                    let at = end.at.saturating_add(turn.delay);
                    let mut spec = turn.spec;
                    spec.arrival = at;
                    let key = (at, rest.index, rest.turn());
                    let arrival = Arrival {
                        spec,
                        hashes: None,
                        session: Some(Box::new(rest)),
                    };
                    self.ready.insert(key, arrival);
                }
                None => self.active = self.active.saturating_sub(1),
            }
        }
    }
}
