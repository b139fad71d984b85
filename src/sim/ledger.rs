//! The ledger of a run: every request's record, what a request in flight needs to be (re)sent,
//! and the one way a request ends ([`Ledger::finish`]), which owns conservation: each request
//! ends once, and the ends counted are the records that ended.

use super::{HandoffRecord, RequestRecord, SessionTag, Status};
use crate::mocker::{Admitted, WorkerRole};
use crate::scheduling::scheduler::DispatchPath;
use crate::scheduling::types::{RequestId, WorkerWithDpRank};
use crate::time::SimTime;
use crate::workload::RequestSpec;
use std::hash::BuildHasher;
use std::sync::Arc;

/// What a request in flight needs to be (re)sent: its prompt as the worker sees it and what
/// the router needs to route it again after a migration.
pub(super) struct InFlight {
    pub hashes: Arc<[u64]>,
    /// The first block only this request holds ([`crate::mocker::MockRequest`]).
    pub unshared_from: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub policy_class: Option<String>,
    pub priority: f64,
    pub strict_priority: u32,
    pub pinned: Option<WorkerWithDpRank>,
    /// Its end is logged for the feed (see [`Ledger::watch`]).
    pub watched: bool,
}

/// A watched request's end: when, and whether its session goes on (it completed or was
/// rejected; a cancelled or aborted turn ends its session).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct WatchedEnd {
    pub id: RequestId,
    pub at: SimTime,
    pub goes_on: bool,
}

/// Where a token message falls in its request's stream: the edges are what the router hears
/// (a first token releases the prefill load, the last one frees the booking).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum TokenEdge {
    /// The request's first token; more follow.
    First,
    /// A token between the first and the last: the router hears nothing of it.
    Middle,
    /// The end of the stream: it completed (with a last token, or none for an empty output).
    Last,
    /// A first token that also ends the stream.
    FirstAndLast,
}

impl TokenEdge {
    /// The edge of a message that is (or not) the `first` token and (or not) `completed`.
    pub fn of(first: bool, completed: bool) -> TokenEdge {
        match (first, completed) {
            (true, false) => TokenEdge::First,
            (false, false) => TokenEdge::Middle,
            (false, true) => TokenEdge::Last,
            (true, true) => TokenEdge::FirstAndLast,
        }
    }

    /// The message carries the request's first token.
    pub fn is_first(self) -> bool {
        matches!(self, TokenEdge::First | TokenEdge::FirstAndLast)
    }

    /// The message ends the request's stream.
    pub fn is_last(self) -> bool {
        matches!(self, TokenEdge::Last | TokenEdge::FirstAndLast)
    }
}

/// The records of a run's requests, in arrival order (a request's id is its index).
pub(super) struct Ledger {
    records: Vec<RequestRecord>,
    /// Requests in flight, by id: what the worker needs once it is dispatched.
    in_flight: rustc_hash::FxHashMap<RequestId, InFlight>,
    /// Requests that ended so far.
    ended: u64,
    /// Ends of watched requests not yet taken by the feed.
    watched_ends: Vec<WatchedEnd>,
    /// Requests completed since a scaling policy's last tick (`None`: no policy asks).
    completed_since: Option<Vec<RequestId>>,
    /// The latest instant a request was first admitted, got its first token or ended: the makespan
    /// so far.
    last_change: SimTime,
    /// Bumped each time `last_change` is raised: pass times recorded under an older epoch
    /// lie within the makespan.
    change_epoch: u64,
    /// Every class name a request named so far, each shared by the records naming it: a
    /// million records would otherwise hold a million copies of a handful of names. Hashed,
    /// as a trace may name a class per row (a scan made 100k such rows take 12 s).
    class_names: hashbrown::HashTable<Arc<String>>,
}

impl Ledger {
    /// An empty ledger with room for `records` requests.
    pub fn with_capacity(records: usize) -> Ledger {
        Ledger {
            records: Vec::with_capacity(records),
            in_flight: Default::default(),
            ended: 0,
            watched_ends: Vec::new(),
            completed_since: None,
            last_change: SimTime::ZERO,
            change_epoch: 0,
            class_names: hashbrown::HashTable::new(),
        }
    }

    /// From now on, keeps the requests that complete for [`Self::take_completed`].
    pub fn keep_completed(&mut self) {
        self.completed_since = Some(Vec::new());
    }

    /// The requests completed since the last call (none unless [`Self::keep_completed`]).
    pub fn take_completed(&mut self) -> Vec<RequestId> {
        self.completed_since
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Requests opened and not ended.
    pub fn open_count(&self) -> u64 {
        self.records.len() as u64 - self.ended
    }

    /// The shared copy of class name `name`.
    fn shared_class_name(&mut self, name: &str) -> Arc<String> {
        let hash_of = |name: &str| rustc_hash::FxBuildHasher.hash_one(name);
        self.class_names
            .entry(
                hash_of(name),
                |known| known.as_str() == name,
                |known| hash_of(known),
            )
            .or_insert_with(|| Arc::new(name.to_string()))
            .get()
            .clone()
    }

    /// Records request `spec` arriving at `now` with prompt block hashes `hashes`, of which
    /// those from `unshared_from` on no other request holds; returns its id.
    pub fn open(
        &mut self,
        now: SimTime,
        spec: RequestSpec,
        hashes: Arc<[u64]>,
        unshared_from: u64,
    ) -> RequestId {
        let id = RequestId(self.records.len() as u64);
        let policy_class = spec
            .policy_class
            .as_deref()
            .map(|name| self.shared_class_name(name));
        self.records.push(RequestRecord {
            row: spec.row,
            policy_class,
            class_index: None,
            arrival: now,
            dispatched: None,
            admit: None,
            first_token: None,
            completion: None,
            rank: None,
            path: None,
            input_tokens: record_tokens(spec.input_tokens),
            output_tokens: record_tokens(spec.output_tokens),
            reused_input_tokens: 0,
            tokens_received: 0,
            status: Status::Pending,
            rare: None,
        });
        let in_flight = InFlight {
            hashes,
            unshared_from,
            prompt_tokens: spec.input_tokens,
            output_tokens: spec.output_tokens,
            policy_class: spec.policy_class,
            priority: spec.priority,
            strict_priority: spec.strict_priority,
            pinned: spec.pinned_worker,
            watched: false,
        };
        self.in_flight.insert(id, in_flight);
        id
    }

    /// Logs request `id`'s end for [`Ledger::take_watched_ends`] (the feed releases a
    /// session's next turn, or a closed loop's next session, when it hears of it).
    pub fn watch(&mut self, id: RequestId) {
        if let Some(f) = self.in_flight.get_mut(&id) {
            f.watched = true;
        }
    }

    /// The ends of watched requests since the last call, in the order they happened.
    pub fn take_watched_ends(&mut self) -> Vec<WatchedEnd> {
        std::mem::take(&mut self.watched_ends)
    }

    /// Request `id` is a turn of the session `tag` says.
    pub fn set_session(&mut self, id: RequestId, tag: Option<SessionTag>) {
        let record = &mut self.records[id.0 as usize];
        match (tag, &mut record.rare) {
            (Some(tag), _) => record.rare_mut().session = Some(tag),
            (None, Some(rare)) => rare.session = None,
            (None, None) => {}
        }
    }

    pub fn record(&self, id: RequestId) -> &RequestRecord {
        &self.records[id.0 as usize]
    }

    pub fn into_records(self) -> Vec<RequestRecord> {
        self.records
    }

    /// What request `id` needs to be sent, while it is in flight.
    pub fn in_flight(&self, id: RequestId) -> Option<&InFlight> {
        self.in_flight.get(&id)
    }

    /// Whether request `id` has not ended.
    pub fn is_pending(&self, id: RequestId) -> bool {
        self.record(id).status == Status::Pending
    }

    /// Times request `id` was moved off a lost worker: the attempt its messages belong to.
    pub fn attempt(&self, id: RequestId) -> u32 {
        self.record(id).migrations()
    }

    /// See `change_epoch`.
    pub fn change_epoch(&self) -> u64 {
        self.change_epoch
    }

    /// The router sent request `id` to `rank` at `now`, the way `path` says.
    pub fn dispatched(
        &mut self,
        now: SimTime,
        id: RequestId,
        rank: WorkerWithDpRank,
        path: DispatchPath,
        class_index: Option<usize>,
    ) {
        let record = &mut self.records[id.0 as usize];
        record.dispatched = Some(now);
        record.set_rank(Some(rank));
        record.path = Some(path);
        if class_index.is_some() {
            record.class_index = RequestRecord::class_slot(class_index);
        }
    }

    /// The class the router put request `id` in (`None`: it could not tell).
    pub fn set_class(&mut self, id: RequestId, class_index: Option<usize>) {
        self.records[id.0 as usize].class_index = RequestRecord::class_slot(class_index);
    }

    /// A worker of `role` admitted request `id` in a pass starting at `now`, as `admitted`
    /// reports it. A decode worker's admission is the handoff's; the others' are the
    /// request's own (its reuse is the largest over them, as 1.6.1 reports it). Only a
    /// request's first admission is a change the makespan sees: a readmission after a
    /// preemption, or a decode worker's admission, is not.
    pub fn admitted(&mut self, now: SimTime, id: RequestId, role: WorkerRole, admitted: &Admitted) {
        let record = &mut self.records[id.0 as usize];
        match (role, record.rare.as_mut().and_then(|r| r.handoff.as_mut())) {
            (WorkerRole::Decode, Some(handoff)) => {
                handoff.decode_admit.get_or_insert(now);
                handoff.decode_reused_input_tokens = admitted.reused_tokens;
            }
            _ => {
                let first = record.admit.is_none();
                record.admit.get_or_insert(now);
                record.reused_input_tokens = record_tokens(admitted.reported_reused_tokens);
                if first {
                    self.note_change(now);
                }
            }
        }
    }

    /// The prefill router sent request `id` to the rank its record holds: the rank becomes
    /// the handoff's source, and the record's rank waits for the decode router's choice.
    pub fn prefill_routed(&mut self, id: RequestId) {
        let record = &mut self.records[id.0 as usize];
        if let Some(prefill_rank) = record.rank.take().map(RankSlot::get) {
            record.rare_mut().handoff = Some(HandoffRecord {
                prefill_rank,
                prefill_end: None,
                transfer_start: None,
                transfer_end: None,
                prefill_release: None,
                decode_admit: None,
                decode_reused_input_tokens: 0,
            });
        }
    }

    /// The handoff record of request `id` (Err-free: only a routed request hands off).
    fn handoff_mut(&mut self, id: RequestId) -> Option<&mut HandoffRecord> {
        let rare = self.records[id.0 as usize].rare.as_mut()?;
        rare.handoff.as_mut()
    }

    /// Request `id`'s prompt was computed and held at `now`.
    pub fn prefill_held(&mut self, now: SimTime, id: RequestId) {
        if let Some(h) = self.handoff_mut(id) {
            h.prefill_end = Some(now);
        }
    }

    /// The decode router chose `rank` for request `id`.
    pub fn decode_routed(&mut self, id: RequestId, rank: WorkerWithDpRank) {
        self.records[id.0 as usize].set_rank(Some(rank));
    }

    /// Request `id`'s decode worker reserved room for it at `now`: its transfer started.
    pub fn transfer_started(&mut self, now: SimTime, id: RequestId) {
        if let Some(h) = self.handoff_mut(id) {
            h.transfer_start = Some(now);
        }
    }

    /// Request `id`'s transfer landed at `now`: it waits on its decode worker.
    pub fn transfer_ended(&mut self, now: SimTime, id: RequestId) {
        if let Some(h) = self.handoff_mut(id) {
            h.transfer_end = Some(now);
        }
    }

    /// Request `id`'s prefill worker released its blocks at `now`.
    pub fn source_released(&mut self, now: SimTime, id: RequestId) {
        if let Some(h) = self.handoff_mut(id) {
            h.prefill_release = Some(now);
        }
    }

    /// Request `id` got `tokens` tokens in the middle of its stream (the router hears
    /// nothing of them).
    pub fn credit(&mut self, id: RequestId, tokens: u64) {
        let record = &mut self.records[id.0 as usize];
        record.tokens_received = record_tokens(u64::from(record.tokens_received) + tokens);
    }

    /// A token message of attempt `attempt` (or the end of the stream), at `edge` of its
    /// stream, reaches the client at `now`. False: dropped, as it belongs to an earlier
    /// attempt (before a migration) or to a request that already ended (cancelled). The last
    /// message ends the request.
    pub fn receive(&mut self, now: SimTime, id: RequestId, attempt: u32, edge: TokenEdge) -> bool {
        let record = &self.records[id.0 as usize];
        if record.status != Status::Pending || record.migrations() != attempt {
            return false;
        }
        let (first, completed) = (edge.is_first(), edge.is_last());
        let resumed = record.migrations() > 0 && record.first_token.is_some();
        if (first && !resumed) || completed {
            self.note_change(now);
        }
        let output_tokens = self.in_flight.get(&id).map_or(0, |f| f.output_tokens);
        let record = &mut self.records[id.0 as usize];
        if first {
            record.first_token.get_or_insert(now);
        }
        if first || !completed || output_tokens > 0 {
            record.tokens_received += 1;
        }
        if completed {
            self.finish(now, id, Status::Completed)
                .expect("a pending request ends once");
        }
        true
    }

    /// Request `id` ends at `now` with `status`: the one way a request ends. Err (a bug) if
    /// it had ended already.
    pub fn finish(&mut self, now: SimTime, id: RequestId, status: Status) -> Result<(), String> {
        let record = &mut self.records[id.0 as usize];
        if record.status != Status::Pending {
            return Err(format!(
                "request {id} ended twice ({:?}, then {status:?})",
                record.status
            ));
        }
        let goes_on = matches!(status, Status::Completed | Status::Rejected(_));
        if let (Status::Completed, Some(completed)) = (&status, &mut self.completed_since) {
            completed.push(id);
        }
        record.completion = Some(now);
        record.status = status;
        self.ended += 1;
        if self.in_flight.remove(&id).is_some_and(|f| f.watched) {
            self.watched_ends.push(WatchedEnd {
                id,
                at: now,
                goes_on,
            });
        }
        self.note_change(now);
        Ok(())
    }

    /// Request `id` moves off a lost worker with the tokens its client received so far,
    /// which join its prompt (its new block hashes from `hashes_for`, given the old ones and
    /// the new prompt length).
    pub fn migrate(&mut self, id: RequestId, hashes_for: impl FnOnce(&[u64], u64) -> Arc<[u64]>) {
        let record = &mut self.records[id.0 as usize];
        let generated = u64::from(record.tokens_received);
        let (input, output) = (
            u64::from(record.input_tokens),
            u64::from(record.output_tokens),
        );
        record.rare_mut().migrations += 1;
        if let Some(f) = self.in_flight.get_mut(&id) {
            f.prompt_tokens = input + generated;
            f.output_tokens = output.saturating_sub(generated);
            f.hashes = hashes_for(&f.hashes, f.prompt_tokens);
            f.unshared_from = u64::MAX;
        }
    }

    /// A request was first admitted, got its first token or ended at `now`: the makespan is at
    /// least `now`.
    pub fn note_change(&mut self, now: SimTime) {
        if now > self.last_change {
            self.last_change = now;
            self.change_epoch += 1;
        }
    }

    /// The makespan: the last moment a request changed state (a trailing no-op tick does not
    /// count).
    pub fn makespan(&self) -> SimTime {
        self.records
            .iter()
            .filter_map(|r| r.completion.or(r.first_token).or(r.admit))
            .max()
            .unwrap_or(SimTime::ZERO)
    }

    /// Conservation, checked after every event in checked runs: every ended request has
    /// left the flight table and the router (`held_by_router` says what the router holds
    /// of a request), and every end was counted once.
    pub fn check(
        &self,
        held_by_router: impl Fn(RequestId) -> Option<String>,
    ) -> Result<(), String> {
        let mut ended = 0;
        for (index, r) in self.records.iter().enumerate() {
            if r.status == Status::Pending {
                continue;
            }
            ended += 1;
            let id = RequestId(index as u64);
            if let Some(state) = held_by_router(id) {
                return Err(format!(
                    "request {id} ended {:?} but the router holds it: {state}",
                    r.status
                ));
            }
            if self.in_flight.contains_key(&id) {
                return Err(format!("request {id} ended but is still in flight"));
            }
        }
        if ended != self.ended {
            return Err(format!(
                "{ended} requests ended but {} ends were counted",
                self.ended
            ));
        }
        Ok(())
    }

    /// At the end of a drained run: Err unless every request ended.
    pub fn check_all_ended(&self) -> Result<(), String> {
        let mut unfinished = self.records.iter().filter(|r| r.status == Status::Pending);
        match unfinished.next() {
            None => Ok(()),
            Some(first) => Err(format!(
                "{} requests neither completed, rejected, cancelled nor aborted; the first: {first:?}",
                1 + unfinished.count()
            )),
        }
    }
}

/// The parts of a record that most requests lack: a session's turn, a disaggregated handoff,
/// a migration. A run of a million requests keeps a million records; boxed together, these
/// cost each record one word.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RareParts {
    pub session: Option<SessionTag>,
    pub handoff: Option<HandoffRecord>,
    /// Times the request was moved off a lost worker (at most the migration limit).
    pub migrations: u32,
}

/// A worker rank as a record holds it: the worker id and its DP rank in one word, so that
/// an optional rank costs 8 bytes rather than 24. Worker ids are the fleet's, counted from 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RankSlot(std::num::NonZeroU64);

impl RankSlot {
    pub fn new(rank: WorkerWithDpRank) -> RankSlot {
        let worker = u32::try_from(rank.worker_id)
            .ok()
            .filter(|&w| w < u32::MAX)
            .expect("worker ids are counted from 0 by the fleet");
        let word = (u64::from(worker) + 1) << 32 | u64::from(rank.dp_rank);
        RankSlot(std::num::NonZeroU64::new(word).expect("the worker part is at least 1"))
    }

    pub fn get(self) -> WorkerWithDpRank {
        let word = self.0.get();
        WorkerWithDpRank::new((word >> 32) - 1, word as u32)
    }
}

/// A token count as a record holds it: 4 bytes, as every count is at most
/// [`crate::bounds::MAX_TOKENS`] (a prompt, an output, or a part of one).
fn record_tokens(tokens: u64) -> u32 {
    u32::try_from(tokens).expect("token counts are bounded by MAX_TOKENS")
}

impl RequestRecord {
    /// The class the router put it in (an index into the run's classes), if any. A record
    /// holds it in 4 bytes (`class_index`): a run of a million requests keeps a million.
    pub fn class(&self) -> Option<usize> {
        self.class_index.map(|c| c.get() as usize - 1)
    }

    /// Its session, when it is a session's turn.
    pub fn session(&self) -> Option<&SessionTag> {
        self.rare.as_ref()?.session.as_ref()
    }

    /// Its handoff from prefill to decode worker, in a disaggregated run (`rank` is then its
    /// decode worker, `admit` its prefill admission and `path` the prefill router's).
    pub fn handoff(&self) -> Option<&HandoffRecord> {
        self.rare.as_ref()?.handoff.as_ref()
    }

    /// Times it was moved off a lost worker (at most the migration limit).
    pub fn migrations(&self) -> u32 {
        self.rare.as_ref().map_or(0, |rare| rare.migrations)
    }

    /// Its rare parts, boxed on first use.
    pub fn rare_mut(&mut self) -> &mut RareParts {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The worker rank it was sent to (its decode worker's, when disaggregated), if any.
    pub fn rank(&self) -> Option<WorkerWithDpRank> {
        self.rank.map(RankSlot::get)
    }

    /// Sends it to `rank` (or to none) in the record.
    pub fn set_rank(&mut self, rank: Option<WorkerWithDpRank>) {
        self.rank = rank.map(RankSlot::new);
    }

    /// A class index as a record holds it.
    pub fn class_slot(class: Option<usize>) -> Option<std::num::NonZeroU32> {
        class.map(|c| {
            u32::try_from(c + 1)
                .ok()
                .and_then(std::num::NonZeroU32::new)
                .expect("a run has fewer than 2^32 - 1 classes")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Ledger, RankSlot, RequestRecord, TokenEdge};
    use crate::mocker::{Admitted, WorkerRole};
    use crate::scheduling::types::WorkerWithDpRank;
    use crate::time::SimTime;
    use crate::workload::{PromptSpec, RequestSpec};

    /// A run of a million requests holds a million records until its files are written: what
    /// is rare (a handoff, a session, a migration count) shares one box, a status is 2 bytes
    /// (a router's rejection keeps its kind), an absent instant or class costs no tag, token
    /// counts and the class index are 4 bytes, a rank one word, and the named class a thin
    /// pointer to its one shared copy.
    #[test]
    fn a_request_record_stays_compact() {
        let bytes = std::mem::size_of::<RequestRecord>();
        assert!(bytes <= 96, "a record takes {bytes} bytes");
    }

    /// A one-block request of `class`.
    fn spec_of_class(class: &str) -> RequestSpec {
        RequestSpec {
            row: 0,
            arrival: SimTime::ZERO,
            policy_class: Some(class.to_string()),
            input_tokens: 64,
            output_tokens: 1,
            priority: 0.0,
            strict_priority: 0,
            prompt: PromptSpec::HashIds {
                hash_ids: vec![1],
                tokens_per_hash: 64,
            },
            pinned_worker: None,
        }
    }

    /// Only a request's first admission is a change the makespan sees: a readmission after a
    /// preemption moves neither the makespan nor the change epoch the pools' busy time is
    /// clipped by (a run a limit stopped right after one counted busy time past its makespan,
    /// more of it pass by pass than skipping quiet passes).
    #[test]
    fn a_readmission_is_no_change_past_the_makespan() {
        let mut ledger = Ledger::with_capacity(1);
        let spec = spec_of_class("premium");
        let id = ledger.open(SimTime::ZERO, spec, Vec::new().into(), u64::MAX);
        let first = Admitted {
            id,
            reused_tokens: 0,
            reported_reused_tokens: 0,
            readmission: false,
        };
        let before = ledger.change_epoch();
        ledger.admitted(SimTime::from_ns(10), id, WorkerRole::Aggregated, &first);
        let epoch = ledger.change_epoch();
        assert!(epoch > before, "a first admission is a change");
        let again = Admitted {
            readmission: true,
            ..first
        };
        ledger.admitted(SimTime::from_ns(20), id, WorkerRole::Aggregated, &again);
        assert_eq!(ledger.change_epoch(), epoch);
        assert_eq!(ledger.makespan(), SimTime::from_ns(10));
    }

    #[test]
    fn a_rank_in_one_word_is_the_rank_it_was_given() {
        let ranks = [
            (0, 0),
            (0, 1),
            (7, 0),
            (3, u32::MAX),
            (u64::from(u32::MAX) - 1, 5),
        ];
        for (worker, dp_rank) in ranks {
            let rank = WorkerWithDpRank::new(worker, dp_rank);
            assert_eq!(RankSlot::new(rank).get(), rank);
        }
        let mut ledger = Ledger::with_capacity(1);
        let id = ledger.open(
            SimTime::ZERO,
            spec_of_class("premium"),
            Vec::new().into(),
            u64::MAX,
        );
        let mut record = ledger.record(id).clone();
        record.set_rank(Some(WorkerWithDpRank::new(2, 1)));
        assert_eq!(record.rank(), Some(WorkerWithDpRank::new(2, 1)));
        record.set_rank(None);
        assert_eq!(record.rank(), None);
    }

    #[test]
    fn a_trace_naming_a_class_per_row_keeps_one_copy_of_each_name() {
        let mut ledger = Ledger::with_capacity(0);
        let names: Vec<String> = (0..5_000).map(|i| format!("user{i}")).collect();
        let mut open = |name: &str| {
            let id = ledger.open(
                SimTime::ZERO,
                spec_of_class(name),
                Vec::new().into(),
                u64::MAX,
            );
            ledger.record(id).policy_class.clone().unwrap()
        };
        let first: Vec<_> = names.iter().map(|n| open(n)).collect();
        for (name, shared) in names.iter().zip(&first).rev() {
            let again = open(name);
            assert_eq!(again.as_str(), name);
            assert!(
                std::sync::Arc::ptr_eq(&again, shared),
                "{name} copied twice"
            );
        }
        assert_eq!(ledger.class_names.len(), names.len());
    }

    #[test]
    fn records_naming_one_class_share_one_copy_of_its_name() {
        let mut ledger = Ledger::with_capacity(3);
        let ids = ["premium", "regular", "premium"].map(|class| {
            ledger.open(
                SimTime::ZERO,
                spec_of_class(class),
                Vec::new().into(),
                u64::MAX,
            )
        });
        let name = |i: usize| ledger.record(ids[i]).policy_class.clone().unwrap();
        assert_eq!(name(0).as_str(), "premium");
        assert_eq!(name(1).as_str(), "regular");
        assert!(std::sync::Arc::ptr_eq(&name(0), &name(2)));
    }

    #[test]
    fn a_token_edge_is_the_first_the_last_both_or_neither() {
        for (first, last) in [(false, false), (true, false), (false, true), (true, true)] {
            let edge = TokenEdge::of(first, last);
            assert_eq!((edge.is_first(), edge.is_last()), (first, last), "{edge:?}");
        }
        assert_eq!(TokenEdge::of(false, false), TokenEdge::Middle);
        assert_eq!(TokenEdge::of(true, true), TokenEdge::FirstAndLast);
    }
}
