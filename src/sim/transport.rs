//! The transport between the router and the workers: each message's delay (the configured
//! one plus a jitter draw), and per request the landing of its latest message to the router,
//! so that jitter never reorders one request's tokens.

use super::SimConfig;
use crate::rng::{self, SimRng};
use crate::scheduling::types::RequestId;
use crate::time::{SimDuration, SimTime};
use rand::RngExt;

/// Whether a run of `config` receives each token at the end of the pass that made it, with
/// no event of its own: a token in the middle of a stream is then only a count.
pub(super) fn delivers_tokens_directly(config: &SimConfig) -> bool {
    config.delays.worker_to_router == SimDuration::ZERO
        && config.delays.jitter == SimDuration::ZERO
        && !config.check_every_event
}

/// The transport's state: the jitter stream and each request's latest landing.
pub(super) struct Transport {
    /// The most a message's jitter adds.
    jitter_max: SimDuration,
    /// Draws the transport jitter.
    rng: SimRng,
    /// When each request's latest worker-to-router message lands (only while a later one
    /// may follow it).
    last_landing: rustc_hash::FxHashMap<RequestId, SimTime>,
}

impl Transport {
    /// The transport of a run of `config`.
    pub fn new(config: &SimConfig) -> Transport {
        Transport {
            jitter_max: config.delays.jitter,
            rng: rng::stream(config.seed, "sim/transport"),
            last_landing: Default::default(),
        }
    }

    /// One message's extra delay (zero, drawing nothing, when jitter is off).
    pub fn jitter(&mut self) -> SimDuration {
        let max_ns = self.jitter_max.as_ns();
        if max_ns == 0 {
            return SimDuration::ZERO;
        }
        SimDuration::from_ns(self.rng.random_range(0..=max_ns))
    }

    /// When a message about request `id` sent at `now` with `delay` lands at the router:
    /// never before the request's message before it.
    pub fn landing(&self, now: SimTime, id: RequestId, delay: SimDuration) -> SimTime {
        let earliest = self.last_landing.get(&id).copied();
        now.saturating_add(delay)
            .max(earliest.unwrap_or(SimTime::ZERO))
    }

    /// A message about request `id` is on its way, landing at `at`; `last`: no other follows.
    pub fn sent(&mut self, id: RequestId, at: SimTime, last: bool) {
        match last {
            true => self.forget(id),
            false => {
                self.last_landing.insert(id, at);
            }
        }
    }

    /// Request `id` ended or starts over: no message of it is waited for.
    pub fn forget(&mut self, id: RequestId) {
        self.last_landing.remove(&id);
    }
}
