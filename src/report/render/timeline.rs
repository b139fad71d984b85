//! `timeline.json`: a run's timeline as a Chrome trace-event file (the JSON object form),
//! which ui.perfetto.dev and chrome://tracing open as it is. A pure exporter from the
//! recorded [`Timeline`] and the run's records to bytes; docs/timeline.md describes the
//! tracks.
//!
//! Timestamps are virtual time: integer nanoseconds printed as microseconds with three
//! decimals by integer arithmetic, so a rerun writes the same bytes. Events are written in
//! a fixed order (metadata, passes in the order they ended, worker lives by worker, fault
//! instants, counters in time order, requests by row), never from a hash map.

use crate::mocker::WorkerRole;
use crate::report::measure::metrics::resolved_class;
use crate::report::measure::pools::worker_in_role;
use crate::sim::timeline::{CounterSample, PassSlice, Timeline};
use crate::sim::{FaultMark, RequestRecord, SimResult, WorkerLife};
use crate::time::SimTime;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// The file's name in a run's output directory.
pub const TIMELINE_FILE: &str = "timeline.json";

/// Requests whose slices a timeline keeps unless `--timeline-max-requests` says otherwise.
pub const DEFAULT_MAX_REQUESTS: u64 = 20_000;

/// The process (track group) of the router's counters.
const ROUTER_PID: u64 = 1;

/// Bytes gathered before they go to the file.
const FLUSH_BYTES: usize = 64 << 10;

/// The writer of `timeline.json` for `result` (which must hold a timeline), keeping the
/// slices of its first `max_requests` requests by row; `meta` goes into `otherData.run` as
/// is. `None` when the run kept no timeline.
pub fn timeline_exporter<'a>(
    result: &'a SimResult,
    meta: &serde_json::Value,
    max_requests: u64,
) -> Option<impl Fn(&mut dyn Write) -> io::Result<()> + Send + Sync + 'a> {
    let prepared = Prepared::new(result, meta, max_requests)?;
    Some(move |out: &mut dyn Write| prepared.write(out))
}

/// The whole file in memory (for tests and small runs).
pub fn timeline_json(result: &SimResult, meta: &serde_json::Value, max_requests: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Some(prepared) = Prepared::new(result, meta, max_requests) {
        prepared.write(&mut bytes).expect("writing to memory");
    }
    bytes
}

/// What the file is written from, computed before the body is streamed (into the stage's
/// file, hashed on the way, or into memory).
struct Prepared<'a> {
    result: &'a SimResult,
    timeline: &'a Timeline,
    meta: serde_json::Value,
    /// Every request by row, each with its phases.
    requests: Vec<RequestPhases<'a>>,
    max_requests: u64,
    /// Requests in the system over time (track 0).
    in_system: Vec<CounterSample>,
    /// Requests queued at the router, per class (track: the class's track index).
    queued: Vec<CounterSample>,
}

/// One request and the phases that tile its life from arrival to its end.
struct RequestPhases<'a> {
    record: &'a RequestRecord,
    /// Its class's track index (the last one: requests of no class).
    class_track: usize,
    end: SimTime,
    /// (name, start, end), consecutive, none empty.
    phases: Vec<(&'static str, SimTime, SimTime)>,
}

impl<'a> Prepared<'a> {
    fn new(result: &'a SimResult, meta: &serde_json::Value, max_requests: u64) -> Option<Self> {
        let timeline = result.timeline.as_deref()?;
        let last_migration = last_migrations(timeline);
        let mut records: Vec<&RequestRecord> = result.records.iter().collect();
        records.sort_by_key(|r| r.row);
        let classes = result.class_names.len();
        let requests: Vec<RequestPhases> = records
            .into_iter()
            .map(|r| {
                let class_track = resolved_class(r, &result.class_names).unwrap_or(classes);
                let migrated_at = last_migration.get(&r.row).copied();
                request_phases(r, class_track, result.end_time, migrated_at)
            })
            .collect();
        let in_system = step_counter(requests.iter().flat_map(|p| {
            let ended = p.record.completion.map(|at| (at, 0, -1));
            [Some((p.record.arrival, 0, 1)), ended]
                .into_iter()
                .flatten()
        }));
        let queued = step_counter(requests.iter().flat_map(|p| {
            let queue = p.phases.iter().filter(|ph| ph.0 == "queued");
            let track = p.class_track;
            queue.flat_map(move |&(_, from, to)| [(from, track, 1), (to, track, -1)])
        }));
        Some(Prepared {
            result,
            timeline,
            meta: meta.clone(),
            requests,
            max_requests,
            in_system,
            queued,
        })
    }

    fn kept_requests(&self) -> usize {
        self.requests
            .len()
            .min(usize::try_from(self.max_requests).unwrap_or(usize::MAX))
    }

    /// Writes the whole file to `out`.
    fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut w = TraceWriter::new(out);
        w.raw(b"{\"displayTimeUnit\":\"ms\",\"otherData\":");
        let other = self.other_data();
        serde_json::to_writer(&mut w.buf, &other).map_err(io::Error::other)?;
        w.raw(b",\"traceEvents\":[");
        self.write_metadata(&mut w)?;
        for pass in &self.timeline.passes {
            self.write_pass(&mut w, pass)?;
        }
        self.write_worker_lives(&mut w)?;
        self.write_fault_instants(&mut w)?;
        self.write_router_counters(&mut w)?;
        self.write_prefill_counters(&mut w)?;
        for request in &self.requests[..self.kept_requests()] {
            self.write_request(&mut w, request)?;
        }
        w.raw(b"]}\n");
        w.finish()
    }

    /// `otherData`: the run's meta and what the file left out.
    fn other_data(&self) -> serde_json::Value {
        let kept = self.kept_requests();
        let passes: u64 = self
            .timeline
            .passes
            .iter()
            .map(|p| u64::from(p.passes))
            .sum();
        serde_json::json!({
            "generator": "routersim",
            "run": self.meta,
            "time": "virtual time; ts and dur in microseconds",
            "requests_total": self.requests.len(),
            "requests_kept": kept,
            "requests_omitted": self.requests.len() - kept,
            "max_requests": self.max_requests,
            "request_selection": "the first max_requests requests by row; every pass and counter is kept",
            "pass_slices": self.timeline.passes.len(),
            "passes": passes,
        })
    }

    // ---- track ids ------------------------------------------------------------------

    fn pool_pid(&self, pool: usize) -> u64 {
        2 + pool as u64
    }

    fn class_pid(&self, class_track: usize) -> u64 {
        2 + self.result.pools.len() as u64 + class_track as u64
    }

    /// The (pid, tid) of rank `rank`'s track.
    fn rank_track(&self, rank: usize) -> (u64, u64) {
        let pool = self.timeline.ranks[rank].pool;
        (self.pool_pid(pool), 1 + rank as u64)
    }

    fn rank_name(&self, rank: usize) -> String {
        let id = self.timeline.ranks[rank].id;
        let worker = worker_in_role(self.result, id.worker_id);
        format!("worker {worker} rank {}", id.dp_rank)
    }

    fn class_name(&self, class_track: usize) -> &str {
        self.result
            .class_names
            .get(class_track)
            .map_or("(no class)", String::as_str)
    }

    // ---- sections -------------------------------------------------------------------

    fn write_metadata(&self, w: &mut TraceWriter) -> io::Result<()> {
        w.process(ROUTER_PID, "router")?;
        for (index, pool) in self.result.pools.iter().enumerate() {
            let name = match pool.role {
                WorkerRole::Aggregated => format!("pool {}", pool.name),
                role => format!("{} pool {}", role.label(), pool.name),
            };
            w.process(self.pool_pid(index), &name)?;
        }
        for track in 0..=self.result.class_names.len() {
            let name = format!("requests {}", self.class_name(track));
            w.process(self.class_pid(track), &name)?;
        }
        for rank in 0..self.timeline.ranks.len() {
            let (pid, tid) = self.rank_track(rank);
            w.thread(pid, tid, &self.rank_name(rank))?;
        }
        for (worker, life) in self.changing_lives() {
            let (pid, tid) = self.life_track(worker, life.pool);
            let name = format!("worker {} life", worker_in_role(self.result, worker));
            w.thread(pid, tid, &name)?;
        }
        Ok(())
    }

    /// Every worker with its life, when the fleet changed during the run (a scaling policy,
    /// a worker added or drained); none when every worker served from start to end.
    fn changing_lives(&self) -> impl Iterator<Item = (u64, &WorkerLife)> + '_ {
        let lives = &self.result.worker_lives[..];
        let changed = lives.iter().any(|life| {
            let whole = life.asked == SimTime::ZERO && life.ready == Some(SimTime::ZERO);
            !whole || life.draining.is_some() || life.gone.is_some()
        });
        (0u64..).zip(if changed { lives } else { &[] })
    }

    /// The (pid, tid) of worker `worker`'s life track, in its pool after its rank tracks.
    fn life_track(&self, worker: u64, pool: usize) -> (u64, u64) {
        let after_ranks = 1 + self.timeline.ranks.len() as u64;
        (self.pool_pid(pool), after_ranks + worker)
    }

    /// Each worker's `starting`, `active` and `draining` spans on its life track (a span
    /// still open at the run's end stops there), when the fleet changed.
    fn write_worker_lives(&self, w: &mut TraceWriter) -> io::Result<()> {
        let end = self.result.end_time;
        for (worker, life) in self.changing_lives() {
            let (pid, tid) = self.life_track(worker, life.pool);
            let left = life.gone.unwrap_or(end).min(end);
            let active_until = life.draining.unwrap_or(left).min(left);
            let spans = [
                (
                    "starting",
                    Some(life.asked),
                    life.ready.unwrap_or(left).min(left),
                ),
                ("active", life.ready, active_until),
                ("draining", life.draining, left),
            ];
            for (name, from, until) in spans {
                let Some(from) = from.filter(|from| *from < until) else {
                    continue;
                };
                w.begin(b"X", pid, tid, name, from);
                w.raw(b",\"dur\":");
                w.us(until.as_ns() - from.as_ns());
                w.raw(b"}");
                w.end_event()?;
            }
        }
        Ok(())
    }

    fn write_pass(&self, w: &mut TraceWriter, pass: &PassSlice) -> io::Result<()> {
        let (pid, tid) = self.rank_track(pass.rank as usize);
        let name = match pass.prefill_tokens == 0 && pass.passes != 1 {
            true => "quiet passes",
            false => "pass",
        };
        w.begin(b"X", pid, tid, name, pass.start);
        w.raw(b",\"dur\":");
        w.us(pass.end.as_ns() - pass.start.as_ns());
        w.raw(b",\"args\":{\"passes\":");
        w.u64(u64::from(pass.passes));
        w.field_u64("batch_size", u64::from(pass.batch_size));
        w.field_u64("prefill_tokens", pass.prefill_tokens);
        w.field_u64("decode_tokens", pass.decode_tokens);
        w.field_u64("kv_blocks", pass.kv_blocks);
        if pass.lost {
            w.raw(b",\"lost\":true");
        }
        w.raw(b"}}");
        w.end_event()
    }

    /// Worker down, back, starting, joined, draining and left, on each of the worker's rank tracks; each request the
    /// router moved (or aborted) off a lost worker, on the worker's first rank.
    fn write_fault_instants(&self, w: &mut TraceWriter) -> io::Result<()> {
        let mut instants: Vec<(SimTime, u64, String)> = Vec::new();
        for mark in &self.result.fault_marks {
            match mark {
                FaultMark::WorkerDown {
                    worker,
                    from,
                    until,
                    ..
                } => {
                    instants.push((*from, *worker, "worker down".into()));
                    if let Some(until) = until {
                        instants.push((*until, *worker, "worker back".into()));
                    }
                }
                FaultMark::WorkerUp {
                    worker, asked, at, ..
                } => {
                    if asked < at {
                        instants.push((*asked, *worker, "worker starting".into()));
                    }
                    instants.push((*at, *worker, "worker joined".into()));
                }
                FaultMark::WorkerDrain {
                    worker,
                    from,
                    until,
                    ..
                } => {
                    instants.push((*from, *worker, "worker draining".into()));
                    if let Some(until) = until {
                        instants.push((*until, *worker, "worker left".into()));
                    }
                }
            }
        }
        instants.sort_by_key(|i| i.0); // stable: marks in the order they happened
        for (at, worker, name) in &instants {
            for rank in self.ranks_of(*worker) {
                let (pid, tid) = self.rank_track(rank);
                w.begin(b"i", pid, tid, name, *at);
                w.raw(b",\"s\":\"t\"}");
                w.end_event()?;
            }
        }
        for m in &self.timeline.migrations {
            let Some(rank) = self.ranks_of(m.worker).next() else {
                continue;
            };
            let (pid, tid) = self.rank_track(rank);
            let verb = if m.migrated { "migrate" } else { "abort" };
            let name = format!("{verb} request {}", m.row);
            w.begin(b"i", pid, tid, &name, m.at);
            w.raw(b",\"s\":\"t\",\"args\":{\"row\":");
            w.u64(m.row);
            w.raw(b"}}");
            w.end_event()?;
        }
        Ok(())
    }

    /// The indexes of worker `worker`'s ranks.
    fn ranks_of(&self, worker: u64) -> impl Iterator<Item = usize> + '_ {
        let ranks = self.timeline.ranks.iter().enumerate();
        ranks
            .filter(move |(_, r)| r.id.worker_id == worker)
            .map(|(i, _)| i)
    }

    fn write_router_counters(&self, w: &mut TraceWriter) -> io::Result<()> {
        for s in &self.in_system {
            w.counter(ROUTER_PID, "requests in system", s.at, "requests", s.value)?;
        }
        for s in &self.queued {
            let name = format!("queue depth {}", self.class_name(s.track as usize));
            w.counter(ROUTER_PID, &name, s.at, "requests", s.value)?;
        }
        for s in &self.timeline.deficits {
            let name = format!("DRR deficit {}", self.class_name(s.track as usize));
            w.counter(ROUTER_PID, &name, s.at, "deficit_tokens", s.value)?;
        }
        Ok(())
    }

    /// Each rank's active prefill tokens as the router books them, beside each class's
    /// busy threshold on that rank.
    fn write_prefill_counters(&self, w: &mut TraceWriter) -> io::Result<()> {
        let names: Vec<String> = (0..self.timeline.ranks.len())
            .map(|rank| format!("prefill tokens {}", self.rank_name(rank)))
            .collect();
        let threshold_keys: Vec<String> = (0..self.result.class_names.len())
            .map(|c| format!("busy_above_{}", self.class_name(c)))
            .collect();
        for s in &self.timeline.prefill_loads {
            let rank = s.track as usize;
            let (pid, _) = self.rank_track(rank);
            w.begin(b"C", pid, 0, &names[rank], s.at);
            w.raw(b",\"args\":{\"active_prefill_tokens\":");
            w.u64(s.value);
            let pool = self.timeline.ranks[rank].pool;
            let thresholds = self.timeline.busy_thresholds.get(pool);
            for &(class, tokens) in thresholds.into_iter().flatten() {
                w.raw(b",");
                w.string(&threshold_keys[class]);
                w.raw(b":");
                w.u64(tokens);
            }
            w.raw(b"}}");
            w.end_event()?;
        }
        Ok(())
    }

    /// A request's async slice, its phases nested in it, and why it did not complete.
    fn write_request(&self, w: &mut TraceWriter, p: &RequestPhases) -> io::Result<()> {
        let r = p.record;
        let pid = self.class_pid(p.class_track);
        let name = format!("request {}", r.row);
        w.async_event(b"b", pid, r.row, &name, r.arrival);
        w.raw(b",\"args\":{\"row\":");
        w.u64(r.row);
        if let Some(rank) = r.rank() {
            w.field_u64("worker", worker_in_role(self.result, rank.worker_id));
            w.field_u64("dp_rank", u64::from(rank.dp_rank));
        }
        w.field_u64("input_tokens", r.input_tokens.into());
        w.field_u64("output_tokens", r.output_tokens.into());
        w.field_u64("cached_tokens", r.reused_input_tokens.into());
        w.field_u64("migrations", u64::from(r.migrations()));
        w.raw(b",\"status\":");
        w.string(r.status.label());
        w.raw(b"}}");
        w.end_event()?;
        for &(phase, from, to) in &p.phases {
            w.async_event(b"b", pid, r.row, phase, from);
            w.raw(b"}");
            w.end_event()?;
            w.async_event(b"e", pid, r.row, phase, to);
            w.raw(b"}");
            w.end_event()?;
        }
        let reason = r.status.reason();
        if !reason.is_empty() {
            let instant = format!("{}: {reason}", r.status.label());
            w.async_event(b"n", pid, r.row, &instant, p.end);
            w.raw(b",\"args\":{\"reason\":");
            w.string(reason);
            w.raw(b"}}");
            w.end_event()?;
        }
        w.async_event(b"e", pid, r.row, &name, p.end);
        w.raw(b"}");
        w.end_event()
    }
}

/// Each migrated request's (by row) last move off a lost worker.
fn last_migrations(timeline: &Timeline) -> BTreeMap<u64, SimTime> {
    let moved = timeline.migrations.iter().filter(|m| m.migrated);
    moved.map(|m| (m.row, m.at)).collect()
}

/// Request `r`'s phases: `moved` (its attempts before its last migration at
/// `migrated_at`), `queued` (at the router until dispatched), `prefill` (until its first
/// token; in disaggregated serving until its prompt is computed, then `kv_transfer` until it
/// reaches its decode worker) and `decode` (to its end). Each starts where the one before
/// ends and ends by the request's end (the run's end for one still pending), so they add
/// up to its end-to-end time; empty ones are left out.
fn request_phases(
    r: &RequestRecord,
    class_track: usize,
    run_end: SimTime,
    migrated_at: Option<SimTime>,
) -> RequestPhases<'_> {
    let end = r.completion.unwrap_or(run_end).max(r.arrival);
    let mut bounds: Vec<(&'static str, Option<SimTime>)> = Vec::with_capacity(5);
    if migrated_at.is_some() {
        bounds.push(("moved", migrated_at));
    }
    bounds.push(("queued", r.dispatched));
    match r.handoff() {
        Some(h) => {
            bounds.push(("prefill", h.prefill_end));
            bounds.push(("kv_transfer", h.transfer_end));
        }
        None => bounds.push(("prefill", r.first_token)),
    }
    bounds.push(("decode", Some(end)));
    let mut phases = Vec::with_capacity(bounds.len());
    let mut from = r.arrival;
    for (name, to) in bounds {
        // A phase that never ended lasts to the request's end.
        let to = to.unwrap_or(end).clamp(from, end);
        if to > from {
            phases.push((name, from, to));
        }
        from = to;
        if from == end {
            break;
        }
    }
    RequestPhases {
        record: r,
        class_track,
        end,
        phases,
    }
}

/// A step counter per track from its changes `(at, track, +1 | -1)`: the value of each
/// track at the end of each instant it changed in (starting from 0), in time order.
fn step_counter(changes: impl Iterator<Item = (SimTime, usize, i64)>) -> Vec<CounterSample> {
    let mut changes: Vec<(SimTime, usize, i64)> = changes.collect();
    changes.sort_unstable();
    let mut values: BTreeMap<usize, i64> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut k = 0;
    while k < changes.len() {
        let (at, track, _) = changes[k];
        let mut delta = 0;
        while k < changes.len() && changes[k].0 == at && changes[k].1 == track {
            delta += changes[k].2;
            k += 1;
        }
        let value = values.entry(track).or_insert(0);
        *value += delta;
        debug_assert!(*value >= 0, "a counter of requests went below zero");
        if delta != 0 || at == SimTime::ZERO {
            samples.push(CounterSample {
                at,
                track: track as u32,
                value: (*value).max(0) as u64,
            });
        }
    }
    samples
}

/// Trace events into a buffer, flushed to `out` in large pieces.
struct TraceWriter<'w> {
    out: &'w mut dyn Write,
    buf: Vec<u8>,
    events: u64,
}

impl<'w> TraceWriter<'w> {
    fn new(out: &'w mut dyn Write) -> Self {
        TraceWriter {
            out,
            buf: Vec::with_capacity(FLUSH_BYTES + 1024),
            events: 0,
        }
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn u64(&mut self, n: u64) {
        push_u64(&mut self.buf, n);
    }

    /// Nanoseconds as microseconds with three decimals.
    fn us(&mut self, ns: u64) {
        push_us(&mut self.buf, ns);
    }

    fn string(&mut self, s: &str) {
        push_json_str(&mut self.buf, s);
    }

    fn field_u64(&mut self, key: &str, n: u64) {
        self.raw(b",\"");
        self.raw(key.as_bytes());
        self.raw(b"\":");
        self.u64(n);
    }

    /// Opens an event (`{"ph":...,"pid":...,"tid":...,"name":...,"ts":...`), the comma
    /// before it if it is not the first; the caller closes it.
    fn begin(&mut self, ph: &[u8], pid: u64, tid: u64, name: &str, at: SimTime) {
        if self.events > 0 {
            self.raw(b",\n");
        }
        self.events += 1;
        self.raw(b"{\"ph\":\"");
        self.raw(ph);
        self.raw(b"\",\"pid\":");
        self.u64(pid);
        self.raw(b",\"tid\":");
        self.u64(tid);
        self.raw(b",\"name\":");
        self.string(name);
        self.raw(b",\"ts\":");
        self.us(at.as_ns());
    }

    /// Opens a request's async event (category `request`, id its row).
    fn async_event(&mut self, ph: &[u8], pid: u64, row: u64, name: &str, at: SimTime) {
        self.begin(ph, pid, 0, name, at);
        self.raw(b",\"cat\":\"request\",\"id\":");
        self.u64(row);
    }

    fn counter(
        &mut self,
        pid: u64,
        name: &str,
        at: SimTime,
        key: &str,
        value: u64,
    ) -> io::Result<()> {
        self.begin(b"C", pid, 0, name, at);
        self.raw(b",\"args\":{");
        self.string(key);
        self.raw(b":");
        self.u64(value);
        self.raw(b"}}");
        self.end_event()
    }

    fn process(&mut self, pid: u64, name: &str) -> io::Result<()> {
        self.metadata(pid, 0, "process_name", name)?;
        self.begin(b"M", pid, 0, "process_sort_index", SimTime::ZERO);
        self.raw(b",\"args\":{\"sort_index\":");
        self.u64(pid);
        self.raw(b"}}");
        self.end_event()
    }

    fn thread(&mut self, pid: u64, tid: u64, name: &str) -> io::Result<()> {
        self.metadata(pid, tid, "thread_name", name)?;
        self.begin(b"M", pid, tid, "thread_sort_index", SimTime::ZERO);
        self.raw(b",\"args\":{\"sort_index\":");
        self.u64(tid);
        self.raw(b"}}");
        self.end_event()
    }

    fn metadata(&mut self, pid: u64, tid: u64, kind: &str, name: &str) -> io::Result<()> {
        self.begin(b"M", pid, tid, kind, SimTime::ZERO);
        self.raw(b",\"args\":{\"name\":");
        self.string(name);
        self.raw(b"}}");
        self.end_event()
    }

    /// An event is complete: flush if the buffer is full.
    fn end_event(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_BYTES {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// Appends `n` in decimal.
fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// Appends `ns` nanoseconds as microseconds with exactly three decimals (`1234567` ns:
/// `1234.567`), by integer arithmetic.
fn push_us(buf: &mut Vec<u8>, ns: u64) {
    push_u64(buf, ns / 1000);
    let frac = ns % 1000;
    buf.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Appends `s` as a JSON string.
fn push_json_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b'"');
    for c in s.chars() {
        match c {
            '"' => buf.extend_from_slice(b"\\\""),
            '\\' => buf.extend_from_slice(b"\\\\"),
            c if (c as u32) < 0x20 => {
                buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
            }
            c => {
                let mut utf8 = [0u8; 4];
                buf.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
    }
    buf.push(b'"');
}

#[cfg(test)]
mod tests;
