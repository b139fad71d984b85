//! Generic discrete-event engine: events ordered by (time, insertion sequence), bounded runs.
//!
//! The engine knows nothing of what the events mean. Equal times run in the order they were
//! scheduled (FIFO on an insertion counter), so a run is a pure function of its inputs.
//!
//! Every run is bounded ([`Limits`]): by an event budget, by a virtual-time horizon, and by a
//! cap on events at one virtual instant, so that a model that stops advancing time stops with
//! [`StopReason::NoProgress`] instead of spinning.

use crate::time::SimTime;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Why a run stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// No events remain.
    Drained,
    /// The next event lies after the limits' horizon ([`Limits::max_time`]).
    TimeLimit,
    /// The event budget is spent.
    EventLimit,
    /// Virtual time stood still at `at` for `events` events in a row
    /// ([`Limits::max_events_per_instant`]).
    NoProgress {
        /// The instant the run was stuck at.
        at: SimTime,
        /// Events processed at that instant.
        events: u64,
    },
}

impl StopReason {
    /// True when a limit cut the run short (anything but [`StopReason::Drained`]).
    pub fn is_limit(&self) -> bool {
        *self != StopReason::Drained
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Drained => f.write_str("all events processed"),
            StopReason::TimeLimit => f.write_str("simulated-time limit reached"),
            StopReason::EventLimit => f.write_str("event limit reached"),
            StopReason::NoProgress { at, events } => write!(
                f,
                "no progress: virtual time stood still at {at} for {events} events"
            ),
        }
    }
}

/// 30 days of virtual time, in ns: the default horizon.
pub const DEFAULT_MAX_TIME_NS: u64 = 30 * 24 * 3600 * 1_000_000_000;
/// The default event budget: a few minutes of wall time at the simulator's usual speed.
pub const DEFAULT_MAX_EVENTS: u64 = 1_000_000_000;
/// The default cap on consecutive events at one virtual instant.
pub const DEFAULT_MAX_EVENTS_PER_INSTANT: u64 = 10_000_000;

/// Bounds on one run, so that no model bug can loop forever. The defaults are finite.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Events processed before the run stops with [`StopReason::EventLimit`].
    pub max_events: u64,
    /// No event after this instant runs ([`StopReason::TimeLimit`]).
    pub max_time: SimTime,
    /// Consecutive events at one instant before the run stops with
    /// [`StopReason::NoProgress`].
    pub max_events_per_instant: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events: DEFAULT_MAX_EVENTS,
            max_time: SimTime::from_ns(DEFAULT_MAX_TIME_NS),
            max_events_per_instant: DEFAULT_MAX_EVENTS_PER_INSTANT,
        }
    }
}

struct Scheduled<E> {
    at: SimTime,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The pending events and the clock. Models receive `&mut EventQueue` to schedule more.
pub struct EventQueue<E> {
    now: SimTime,
    next_seq: u64,
    heap: BinaryHeap<Scheduled<E>>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            now: SimTime::ZERO,
            next_seq: 0,
            heap: BinaryHeap::new(),
        }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the event being processed (or of the last one).
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedules `event` at `at`. Scheduling in the past is a model bug.
    pub fn schedule(&mut self, at: SimTime, event: E) {
        assert!(
            at >= self.now,
            "event scheduled in the past: {at} < {}",
            self.now
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Scheduled { at, seq, event });
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The time of the next event, if any.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|s| s.at)
    }

    fn pop(&mut self) -> Option<(SimTime, E)> {
        let s = self.heap.pop()?;
        self.now = s.at;
        Some((s.at, s.event))
    }
}

/// A model driven by the engine.
pub trait Model {
    type Event;
    /// Handles one event at `now`; may schedule further events on `queue`.
    fn handle(&mut self, now: SimTime, event: Self::Event, queue: &mut EventQueue<Self::Event>);
}

/// The run loop: owns the queue, counts events, enforces limits.
pub struct Engine<E> {
    queue: EventQueue<E>,
    limits: Limits,
    events_processed: u64,
    /// Events processed in a row at the current instant.
    events_this_instant: u64,
}

impl<E> Engine<E> {
    pub fn new(limits: Limits) -> Self {
        Engine {
            queue: EventQueue::new(),
            limits,
            events_processed: 0,
            events_this_instant: 0,
        }
    }

    pub fn queue(&mut self) -> &mut EventQueue<E> {
        &mut self.queue
    }

    pub fn now(&self) -> SimTime {
        self.queue.now()
    }

    pub fn events_processed(&self) -> u64 {
        self.events_processed
    }

    /// Processes the next event if it lies within the limits; otherwise says why not.
    pub fn step<M: Model<Event = E>>(&mut self, model: &mut M) -> Result<(), StopReason> {
        let next = self.queue.peek_time().ok_or(StopReason::Drained)?;
        if next > self.limits.max_time {
            return Err(StopReason::TimeLimit);
        }
        if self.events_processed >= self.limits.max_events {
            return Err(StopReason::EventLimit);
        }
        if next > self.queue.now() {
            self.events_this_instant = 0;
        }
        if self.events_this_instant >= self.limits.max_events_per_instant {
            return Err(StopReason::NoProgress {
                at: next,
                events: self.events_this_instant,
            });
        }
        let (now, event) = self.queue.pop().expect("peeked event exists");
        self.events_processed += 1;
        self.events_this_instant += 1;
        model.handle(now, event, &mut self.queue);
        Ok(())
    }

    /// Steps until no events remain or a limit is reached (the simulator steps itself,
    /// between its own phases of an instant).
    #[cfg(test)]
    fn run<M: Model<Event = E>>(&mut self, model: &mut M) -> StopReason {
        loop {
            if let Err(reason) = self.step(model) {
                return reason;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the order of events; event `n > 0` schedules `n - 1` at +10 ns.
    struct Recorder(Vec<(u64, u32)>);

    impl Model for Recorder {
        type Event = u32;
        fn handle(&mut self, now: SimTime, event: u32, queue: &mut EventQueue<u32>) {
            self.0.push((now.as_ns(), event));
            if event > 0 && event < 100 {
                queue.schedule(SimTime::from_ns(now.as_ns() + 10), event - 1);
            }
        }
    }

    #[test]
    fn equal_times_run_in_insertion_order() {
        let mut engine = Engine::new(Limits::default());
        for e in [105, 101, 103] {
            engine.queue().schedule(SimTime::from_ns(5), e);
        }
        engine.queue().schedule(SimTime::from_ns(1), 107);
        let mut m = Recorder(vec![]);
        assert_eq!(engine.run(&mut m), StopReason::Drained);
        assert_eq!(m.0, vec![(1, 107), (5, 105), (5, 101), (5, 103)]);
    }

    #[test]
    fn events_scheduled_by_the_model_interleave_by_time() {
        let mut engine = Engine::new(Limits::default());
        engine.queue().schedule(SimTime::ZERO, 2);
        engine.queue().schedule(SimTime::from_ns(15), 200);
        let mut m = Recorder(vec![]);
        engine.run(&mut m);
        assert_eq!(m.0, vec![(0, 2), (10, 1), (15, 200), (20, 0)]);
    }

    #[test]
    fn limits_stop_the_run_with_a_reason() {
        let mut engine = Engine::new(Limits {
            max_events: 2,
            ..Limits::default()
        });
        engine.queue().schedule(SimTime::ZERO, 50);
        let mut m = Recorder(vec![]);
        assert_eq!(engine.run(&mut m), StopReason::EventLimit);
        assert_eq!(engine.events_processed(), 2);

        let mut engine = Engine::new(Limits {
            max_time: SimTime::from_ns(25),
            ..Limits::default()
        });
        engine.queue().schedule(SimTime::ZERO, 50);
        let mut m = Recorder(vec![]);
        assert_eq!(engine.run(&mut m), StopReason::TimeLimit);
        assert_eq!(m.0.last(), Some(&(20, 48)));
        assert_eq!(
            engine.run(&mut m),
            StopReason::TimeLimit,
            "and stays stopped"
        );
    }

    /// Event `n` schedules `n + 1` at the same instant, forever.
    struct Spinner;

    impl Model for Spinner {
        type Event = u64;
        fn handle(&mut self, now: SimTime, event: u64, queue: &mut EventQueue<u64>) {
            queue.schedule(now, event + 1);
        }
    }

    #[test]
    fn a_model_stuck_at_one_instant_stops_with_no_progress() {
        let mut engine = Engine::new(Limits {
            max_events_per_instant: 1000,
            ..Limits::default()
        });
        engine.queue().schedule(SimTime::from_ns(7), 0);
        let reason = engine.run(&mut Spinner);
        let expected = StopReason::NoProgress {
            at: SimTime::from_ns(7),
            events: 1000,
        };
        assert_eq!(reason, expected);
        assert_eq!(engine.events_processed(), 1000);
        assert!(reason.to_string().contains("1000 events"));
    }

    #[test]
    fn events_spread_over_time_never_count_as_no_progress() {
        // 50 instants of 3 events each, with a per-instant cap of 3: never stuck.
        let mut engine = Engine::new(Limits {
            max_events_per_instant: 3,
            ..Limits::default()
        });
        for t in 0..50 {
            for e in 0..3 {
                engine.queue().schedule(SimTime::from_ns(t * 10), 200 + e);
            }
        }
        let mut m = Recorder(vec![]);
        assert_eq!(engine.run(&mut m), StopReason::Drained);
        assert_eq!(m.0.len(), 150);
    }

    #[test]
    fn default_limits_are_finite() {
        let limits = Limits::default();
        assert!(limits.max_events < u64::MAX && limits.max_time < SimTime::MAX);
        assert_eq!(limits.max_time.as_ns(), 2_592_000_000_000_000);
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_in_the_past_is_a_bug() {
        let mut engine = Engine::new(Limits::default());
        engine.queue().schedule(SimTime::from_ns(10), 0);
        let mut m = Recorder(vec![]);
        engine.run(&mut m);
        engine.queue().schedule(SimTime::from_ns(5), 0);
    }
}
