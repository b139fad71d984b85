//! Multi-turn sessions: what a request knows of its session, and the turns still to come.
//!
//! A session is a chain of requests: turn k arrives when turn k−1 ends plus a think time
//! (`delay`), never before. A session changes only *when* its turns arrive; each turn is
//! routed, queued and cached as any request is (docs/sessions.md).

use super::RequestSpec;
use crate::time::SimDuration;
use std::collections::VecDeque;
use std::sync::Arc;

/// What a request's record says of its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionTag {
    /// The session's number in its run, in first-appearance order (a trace's file order, a
    /// workload's draw order): it breaks ties between turns ready at one instant.
    pub index: u32,
    /// The session's name (requests.csv's `session_id`).
    pub id: Arc<str>,
    /// This turn's place in its session, from 0.
    pub turn: u32,
    /// How many turns the session has in all (fewer run if one is cancelled or aborted).
    pub turns: u32,
    /// Whether the run replays it as a session. Dynamo 1.6.1 replays a trace in which every
    /// session has one turn as plain requests, and leaves their turn index out
    /// (requests.csv's `turn_index` is then empty).
    pub chained: bool,
    /// Whether this turn's own row names its session: a plain trace row that a later row
    /// joins (by naming its implicit `request_<line>`) is a turn whose record names none, as
    /// in Dynamo 1.6.1's output.
    pub named: bool,
}

/// A turn on its way into a run, with the turns of its session still to come.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionTurn {
    /// The session's number in its run (as [`SessionTag::index`]): a plain trace row in a
    /// session trace is a session of one turn, and has one too.
    pub index: u32,
    /// What the turn's record says of its session (`None`: a plain row, whose record names
    /// no session).
    pub tag: Option<SessionTag>,
    /// The next turns, in order, each with the think time after the one before it ends.
    pub later: VecDeque<LaterTurn>,
}

/// A later turn: its request, and how long after the previous turn ends it arrives.
#[derive(Clone, Debug, PartialEq)]
pub struct LaterTurn {
    pub spec: RequestSpec,
    pub delay: SimDuration,
    /// Whether the turn's row names its session (see [`SessionTag::named`]).
    pub named: bool,
}

impl SessionTurn {
    /// The turn's place in its session, from 0.
    pub fn turn(&self) -> u32 {
        self.tag.as_ref().map_or(0, |t| t.turn)
    }

    /// The session's next turn once this one has ended, with the rest of the session behind
    /// it; `None` when this was the last.
    pub fn next_turn(mut self) -> Option<(LaterTurn, SessionTurn)> {
        let next = self.later.pop_front()?;
        if let Some(tag) = &mut self.tag {
            tag.turn += 1;
            tag.named = next.named;
        }
        Some((next, self))
    }
}
