//! Synthetic sessions: a group's draws as conversations, each turn's prompt the previous
//! turn's prompt plus its output plus new tokens (docs/sessions.md).
//!
//! A session's first turn is drawn as the group's request would be (arrival, lengths, prefix);
//! its later turns come from the group's own streams `workload/<group>/turns`, `.../think`
//! and `.../new_input` (outputs from `.../output`, after the first turn's), so a session group
//! never changes another group's draws.

use super::{
    HashIdCounter, LengthBounds, Lengths, RequestGroup, Sampler, SynthError, SynthRequest,
    group_error,
};
use crate::bounds::{MAX_REQUESTS, MAX_SESSION_TURNS, MAX_TOKENS};
use crate::rng;
use crate::time::{NS_PER_MS, SimDuration, SimTime};
use crate::workload::PromptSpec;
use crate::workload::session::{LaterTurn, SessionTag, SessionTurn};
use std::collections::VecDeque;
use std::sync::Arc;

/// How a group's sessions go: how many turns, the think time between them, and what each
/// later turn adds to the conversation.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionShape {
    /// Turns per session.
    pub turns: Lengths,
    /// From a turn's end to the next turn's arrival, in whole ms.
    pub think_time_ms: Lengths,
    /// Tokens a later turn adds after the previous turn's prompt and output.
    pub new_input_tokens: Lengths,
}

/// Turns per session: 1 to [`MAX_SESSION_TURNS`].
pub const SESSION_TURNS: LengthBounds = LengthBounds {
    floor: 1,
    ceiling: MAX_SESSION_TURNS,
    unit: "turns",
};

/// Think times: 0 (the next turn the instant the last one ends) to [`MAX_TOKENS`] ms (about
/// 4.7 hours).
pub const THINK_TIME_MS: LengthBounds = LengthBounds {
    floor: 0,
    ceiling: MAX_TOKENS,
    unit: "ms",
};

impl SessionShape {
    pub(super) fn validate(&self, group: &RequestGroup) -> Result<(), SynthError> {
        self.turns
            .validate_within(group, "sessions.turns", SESSION_TURNS)?;
        self.think_time_ms
            .validate_within(group, "sessions.think_time_ms", THINK_TIME_MS)?;
        self.new_input_tokens
            .validate(group, "sessions.new_input_tokens")
    }
}

/// The draws of one group's later turns.
pub(super) struct LaterTurnDraws {
    turns: (Sampler, rng::SimRng),
    think: (Sampler, rng::SimRng),
    new_input: (Sampler, rng::SimRng),
}

impl LaterTurnDraws {
    pub(super) fn new(group: &RequestGroup, shape: &SessionShape, seed: u64) -> Self {
        let stream = |purpose: &str, lengths: &Lengths| {
            let sampler = lengths.sampler().expect("validated parameters");
            let label = format!("{}/{purpose}", group.name);
            (sampler, rng::child(seed, "workload", &label))
        };
        LaterTurnDraws {
            turns: stream("turns", &shape.turns),
            think: stream("think", &shape.think_time_ms),
            new_input: stream("new_input", &shape.new_input_tokens),
        }
    }

    /// The later turns of the session whose first turn is `first`: each turn's prompt
    /// repeats the previous prompt's blocks (hash ids) and appends fresh ones for the
    /// previous output and the new tokens, so a worker that cached the conversation reuses
    /// it. Outputs are drawn by `draw_output`.
    pub(super) fn later_turns(
        &mut self,
        group: &RequestGroup,
        shape: &SessionShape,
        first: &SynthRequest,
        ids: &mut HashIdCounter,
        mut draw_output: impl FnMut() -> u64,
    ) -> Result<VecDeque<LaterTurn>, SynthError> {
        let turns = shape.turns.draw(&self.turns.0, &mut self.turns.1);
        let mut later = VecDeque::with_capacity(turns.saturating_sub(1) as usize);
        let mut previous = first.spec.clone();
        for _ in 1..turns {
            let think_ms = shape.think_time_ms.draw(&self.think.0, &mut self.think.1);
            let new_tokens = shape
                .new_input_tokens
                .draw(&self.new_input.0, &mut self.new_input.1);
            let spec = next_prompt(group, &previous, new_tokens, draw_output(), ids)?;
            later.push_back(LaterTurn {
                spec: spec.clone(),
                delay: SimDuration::from_ns(think_ms * NS_PER_MS),
                named: true,
            });
            previous = spec;
        }
        Ok(later)
    }
}

/// The turn after `previous`: its prompt is `previous`'s prompt, output and `new_tokens`
/// more; it arrives when the feed releases it (its `arrival` is set then).
fn next_prompt(
    group: &RequestGroup,
    previous: &crate::workload::RequestSpec,
    new_tokens: u64,
    output_tokens: u64,
    ids: &mut HashIdCounter,
) -> Result<crate::workload::RequestSpec, SynthError> {
    let input_tokens = previous.input_tokens + previous.output_tokens + new_tokens;
    if input_tokens > MAX_TOKENS {
        return Err(group_error(
            group,
            "sessions.turns",
            format!(
                "a session's prompt grows to {input_tokens} tokens, more than {MAX_TOKENS}: fewer turns, or shorter outputs and new inputs"
            ),
        ));
    }
    let PromptSpec::HashIds {
        hash_ids,
        tokens_per_hash,
    } = &previous.prompt;
    let blocks = input_tokens.div_ceil(*tokens_per_hash);
    ids.count_prompt(blocks, group)?;
    // Checked turn by turn, so a freak draw of turns never fills memory first.
    if ids.prompts > MAX_REQUESTS {
        return Err(group_error(
            group,
            "sessions.turns",
            format!(
                "the workload's sessions have more than {MAX_REQUESTS} turns in all, the most requests a run may have"
            ),
        ));
    }
    let mut hash_ids = hash_ids.clone();
    hash_ids.extend(ids.take(blocks - hash_ids.len() as u64, group)?);
    Ok(crate::workload::RequestSpec {
        arrival: SimTime::ZERO,
        input_tokens,
        output_tokens,
        prompt: PromptSpec::HashIds {
            hash_ids,
            tokens_per_hash: *tokens_per_hash,
        },
        ..previous.clone()
    })
}

/// Numbers the requests of a sorted workload: a session takes one row per turn, its turns
/// consecutive, and becomes session `index` (`session_<index>`) in start order.
pub(super) fn number_rows(requests: &mut [SynthRequest]) {
    let mut row = 0u64;
    let mut index = 0u32;
    for request in requests.iter_mut() {
        request.spec.row = row;
        row += 1;
        let Some(session) = request.session.as_mut() else {
            continue;
        };
        for turn in session.later.iter_mut() {
            turn.spec.row = row;
            row += 1;
        }
        session.index = index;
        session.tag = Some(SessionTag {
            index,
            id: Arc::from(format!("session_{index}")),
            turn: 0,
            turns: session.later.len() as u32 + 1,
            chained: true,
            named: true,
        });
        index += 1;
    }
}

/// A first turn's session before [`number_rows`] places it.
pub(super) fn unnumbered(later: VecDeque<LaterTurn>) -> Box<SessionTurn> {
    Box::new(SessionTurn {
        index: 0,
        tag: None,
        later,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Arrival, Burst, BurstOrder, LengthDist, SharedPrefix, SynthWorkload};
    use super::*;

    fn chat(count: u64, turns: Lengths) -> RequestGroup {
        RequestGroup {
            name: "chat".to_string(),
            class: None,
            count,
            input_tokens: Lengths::fixed(300),
            output_tokens: Lengths {
                dist: LengthDist::Uniform,
                min: 1,
                max: 90,
            },
            arrival: Arrival::Interval {
                every: SimDuration::from_ms(10),
                start: SimTime::ZERO,
            },
            prefix: None,
            priority: 0.0,
            strict_priority: 0,
            pinned_worker: None,
            sessions: Some(SessionShape {
                turns,
                think_time_ms: Lengths {
                    dist: LengthDist::Uniform,
                    min: 0,
                    max: 500,
                },
                new_input_tokens: Lengths::fixed(50),
            }),
        }
    }

    fn plain(name: &str) -> RequestGroup {
        RequestGroup {
            name: name.to_string(),
            sessions: None,
            arrival: Arrival::Burst,
            ..chat(4, Lengths::fixed(1))
        }
    }

    fn workload(groups: Vec<RequestGroup>) -> SynthWorkload {
        SynthWorkload {
            groups,
            burst: Burst {
                at: SimTime::from_ns(5_000_000),
                order: BurstOrder::Sequential,
                spacing_ns: 1,
            },
            tokens_per_hash: 64,
        }
    }

    fn ids(spec: &crate::workload::RequestSpec) -> &[u64] {
        let PromptSpec::HashIds { hash_ids, .. } = &spec.prompt;
        hash_ids
    }

    #[test]
    fn each_later_prompt_is_the_previous_prompt_and_output_and_new_tokens() {
        let requests = workload(vec![chat(5, Lengths::fixed(4))])
            .generate(7)
            .unwrap();
        assert_eq!(requests.len(), 5, "one request per session: its first turn");
        for first in &requests {
            let later = &first.session.as_ref().unwrap().later;
            assert_eq!(later.len(), 3);
            let mut previous = &first.spec;
            for turn in later {
                let spec = &turn.spec;
                let grown = previous.input_tokens + previous.output_tokens + 50;
                assert_eq!(spec.input_tokens, grown);
                assert_eq!(ids(spec).len() as u64, grown.div_ceil(64));
                assert_eq!(ids(spec)[..ids(previous).len()], *ids(previous));
                assert!(turn.delay <= SimDuration::from_ms(500));
                previous = spec;
            }
        }
        let all: Vec<u64> = requests
            .iter()
            .flat_map(|r| ids(&r.spec).to_vec())
            .collect();
        let distinct: std::collections::BTreeSet<u64> = all.iter().copied().collect();
        assert_eq!(
            all.len(),
            distinct.len(),
            "sessions share nothing without a prefix"
        );
    }

    #[test]
    fn sessions_take_consecutive_rows_and_are_named_in_start_order() {
        let turns = Lengths {
            dist: LengthDist::Uniform,
            min: 1,
            max: 6,
        };
        let requests = workload(vec![chat(6, turns), plain("batch")])
            .generate(3)
            .unwrap();
        let mut row = 0;
        let mut index = 0;
        for request in &requests {
            assert_eq!(request.spec.row, row);
            row += 1;
            let Some(session) = &request.session else {
                assert_eq!(request.spec.policy_class, None);
                continue;
            };
            let tag = session.tag.as_ref().unwrap();
            assert_eq!(&*tag.id, format!("session_{index}"));
            assert_eq!((tag.index, session.index, tag.turn), (index, index, 0));
            assert_eq!(tag.turns as usize, session.later.len() + 1);
            assert!(tag.chained && tag.named);
            for turn in &session.later {
                assert_eq!(turn.spec.row, row);
                row += 1;
            }
            index += 1;
        }
        assert_eq!(index, 6);
        let starts: Vec<SimTime> = requests.iter().map(|r| r.spec.arrival).collect();
        assert!(starts.is_sorted(), "{starts:?}");
    }

    #[test]
    fn a_session_group_leaves_other_groups_draws_alone() {
        let alone = workload(vec![plain("batch")]).generate(11).unwrap();
        let mixed = workload(vec![chat(3, Lengths::fixed(5)), plain("batch")])
            .generate(11)
            .unwrap();
        let lengths = |requests: &[SynthRequest]| -> Vec<(u64, u64)> {
            requests
                .iter()
                .filter(|r| r.session.is_none())
                .map(|r| (r.spec.input_tokens, r.spec.output_tokens))
                .collect()
        };
        assert_eq!(lengths(&alone), lengths(&mixed));
        let again = workload(vec![chat(3, Lengths::fixed(5)), plain("batch")])
            .generate(11)
            .unwrap();
        assert_eq!(mixed, again, "seeded");
    }

    #[test]
    fn a_shared_prefix_starts_every_turn_of_its_sessions() {
        let mut group = chat(4, Lengths::fixed(3));
        group.prefix = Some(SharedPrefix {
            tokens: 128,
            groups: 2,
        });
        let requests = workload(vec![group]).generate(1).unwrap();
        for (k, first) in requests.iter().enumerate() {
            let prefix = &ids(&requests[k % 2].spec)[..2];
            assert_eq!(&ids(&first.spec)[..2], prefix);
            for turn in &first.session.as_ref().unwrap().later {
                assert_eq!(&ids(&turn.spec)[..2], prefix);
            }
        }
        assert_ne!(ids(&requests[0].spec)[..2], ids(&requests[1].spec)[..2]);
    }

    #[test]
    fn bad_session_shapes_name_their_field() {
        let cases = [
            (Lengths::fixed(0), "sessions.turns", "must be positive"),
            (
                Lengths::fixed(10_001),
                "sessions.turns",
                "10001 is more than 10000 turns",
            ),
        ];
        for (turns, field, message) in cases {
            let error = workload(vec![chat(2, turns)]).generate(0).unwrap_err();
            assert_eq!(
                (error.field.as_str(), error.message.as_str()),
                (field, message)
            );
        }
        let mut group = chat(2, Lengths::fixed(2));
        let shape = group.sessions.as_mut().unwrap();
        shape.new_input_tokens = Lengths::fixed(0);
        let error = workload(vec![group]).generate(0).unwrap_err();
        assert_eq!(error.field, "sessions.new_input_tokens");
        let mut group = chat(2, Lengths::fixed(2));
        group.sessions.as_mut().unwrap().think_time_ms = Lengths::fixed(MAX_TOKENS + 1);
        let error = workload(vec![group]).generate(0).unwrap_err();
        assert_eq!(error.field, "sessions.think_time_ms");
    }

    #[test]
    fn sessions_past_the_request_bound_stop_with_an_error_not_a_huge_draw() {
        // 101 sessions of 10,000 one-block turns: more turns than a run's 1,000,000 requests.
        let mut group = chat(101, Lengths::fixed(MAX_SESSION_TURNS));
        group.input_tokens = Lengths::fixed(1);
        group.output_tokens = Lengths::fixed(1);
        group.sessions.as_mut().unwrap().new_input_tokens = Lengths::fixed(1);
        let mut workload = workload(vec![group]);
        workload.tokens_per_hash = 1 << 16;
        let error = workload.generate(0).unwrap_err();
        assert_eq!(error.field, "sessions.turns");
        assert!(error.message.contains("more than 1000000 turns"), "{error}");
    }

    #[test]
    fn a_prompt_past_the_token_bound_is_an_error() {
        let mut group = chat(1, Lengths::fixed(40));
        group.input_tokens = Lengths::fixed(MAX_TOKENS / 2);
        group.sessions.as_mut().unwrap().new_input_tokens = Lengths::fixed(MAX_TOKENS / 8);
        let error = workload(vec![group]).generate(0).unwrap_err();
        assert!(
            error.message.contains("a session's prompt grows to"),
            "{error}"
        );
    }
}
