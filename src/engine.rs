//! Generic discrete-event engine: events ordered by (time, insertion sequence), bounded runs.
//!
//! The engine knows nothing of what the events mean. Equal times run in the order they were
//! scheduled (FIFO on an insertion counter), so a run is a pure function of its inputs.

use crate::time::SimTime;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Why a run stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// No events remain.
    Drained,
    /// The next event lies after the time bound given to `run_until` / the limits.
    TimeLimit,
    /// The event budget is spent.
    EventLimit,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Drained => "all events processed",
            StopReason::TimeLimit => "simulated-time limit reached",
            StopReason::EventLimit => "event limit reached",
        })
    }
}

/// Bounds on one run, so that no model bug can loop forever.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_events: u64,
    pub max_time: SimTime,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events: u64::MAX,
            max_time: SimTime::MAX,
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
}

impl<E> Engine<E> {
    pub fn new(limits: Limits) -> Self {
        Engine {
            queue: EventQueue::new(),
            limits,
            events_processed: 0,
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
        self.step_until(model, self.limits.max_time)
    }

    fn step_until<M: Model<Event = E>>(
        &mut self,
        model: &mut M,
        until: SimTime,
    ) -> Result<(), StopReason> {
        let next = self.queue.peek_time().ok_or(StopReason::Drained)?;
        if next > until.min(self.limits.max_time) {
            return Err(StopReason::TimeLimit);
        }
        if self.events_processed >= self.limits.max_events {
            return Err(StopReason::EventLimit);
        }
        let (now, event) = self.queue.pop().expect("peeked event exists");
        self.events_processed += 1;
        model.handle(now, event, &mut self.queue);
        Ok(())
    }

    /// Runs every event at or before `until` (and within the limits).
    pub fn run_until<M: Model<Event = E>>(&mut self, model: &mut M, until: SimTime) -> StopReason {
        loop {
            if let Err(reason) = self.step_until(model, until) {
                return reason;
            }
        }
    }

    /// Runs until no events remain or a limit is reached.
    pub fn run<M: Model<Event = E>>(&mut self, model: &mut M) -> StopReason {
        self.run_until(model, SimTime::MAX)
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
            max_time: SimTime::MAX,
        });
        engine.queue().schedule(SimTime::ZERO, 50);
        let mut m = Recorder(vec![]);
        assert_eq!(engine.run(&mut m), StopReason::EventLimit);
        assert_eq!(engine.events_processed(), 2);

        let mut engine = Engine::new(Limits {
            max_events: u64::MAX,
            max_time: SimTime::from_ns(25),
        });
        engine.queue().schedule(SimTime::ZERO, 50);
        let mut m = Recorder(vec![]);
        assert_eq!(engine.run(&mut m), StopReason::TimeLimit);
        assert_eq!(m.0.last(), Some(&(20, 48)));
        assert_eq!(
            engine.run_until(&mut m, SimTime::from_ns(10)),
            StopReason::TimeLimit
        );
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
