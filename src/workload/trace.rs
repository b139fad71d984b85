//! Mooncake JSONL traces: one request per line, validated field by field with line numbers.

use super::{PromptSpec, RequestSpec};
use crate::bounds::{
    MAX_PROMPT_BLOCKS, MAX_REQUESTS, MAX_TOKENS, MAX_TRACE_LINE_BYTES, MAX_TRACE_TIMESTAMP_MS,
    MIN_SPEEDUP_RATIO, read_line_capped,
};
use crate::time::{MAX_INPUT_NS, NS_PER_MS, SimTime};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::io::BufRead;

/// Dynamo's default: public mooncake traces hash 512 tokens per hash id.
pub const DEFAULT_TRACE_BLOCK_SIZE: u64 = 512;

/// Checks an arrival speed-up ratio (`--arrival-speedup-ratio`, `workload.arrival_speedup_ratio`):
/// finite and at least [`MIN_SPEEDUP_RATIO`], the bound every speed-up has (Dynamo accepts any
/// finite positive ratio; a smaller one would stretch a trace past the time bound). The error
/// is the message to put after the flag or field.
pub fn check_speedup_ratio(ratio: f64) -> Result<f64, String> {
    match ratio.is_finite() && ratio >= MIN_SPEEDUP_RATIO {
        true => Ok(ratio),
        false => Err(format!(
            "must be a finite number >= {MIN_SPEEDUP_RATIO} (timestamps are divided by it), got {ratio}"
        )),
    }
}

/// A problem with one line of a trace (or with reading it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub source_name: String,
    pub line: usize,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.source_name, self.line)?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for TraceError {}

/// One row of a trace as read, before a replay puts it in time: its request (arrival from
/// its timestamp, 0 without one) and the fields that say whether and how it is a session's
/// turn (see [`super::session_trace`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRow {
    pub spec: RequestSpec,
    /// The row's `timestamp` (or `created_time`), if it has one.
    pub timestamp_ms: Option<f64>,
    /// The session the row is a turn of (`session_id`; `None`: a plain row).
    pub session_id: Option<String>,
    /// The think time before this turn (`delay` or `delay_ms`), if given.
    pub delay_ms: Option<f64>,
    /// The row's physical line (1-based, blank lines counted): a plain row's implicit
    /// session is `request_<line>`.
    pub line: usize,
}

impl TraceRow {
    /// Whether the row needs the session loader: it names a session or gives a delay.
    pub fn is_session_row(&self) -> bool {
        self.session_id.is_some() || self.delay_ms.is_some()
    }
}

/// Reads a mooncake trace line by line. Blank lines are skipped; rows are numbered from 0 in
/// file order. Arrival times are the timestamps minus `origin_ms` (Dynamo rebases a trace to
/// its earliest timestamp: see [`scan`]), divided by the arrival speed-up ratio.
pub struct TraceReader<R> {
    input: R,
    source_name: String,
    tokens_per_hash: u64,
    origin_ms: f64,
    speedup_ratio: f64,
    line_no: usize,
    next_row: u64,
    buf: String,
}

/// What a first pass over a trace learns: its size, its earliest timestamp, and whether the
/// rows are in time order (so that they can be streamed).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSummary {
    pub rows: u64,
    pub origin_ms: f64,
    pub sorted: bool,
    /// Some row is a session's turn: the trace is replayed through the session loader
    /// ([`super::session_trace::read_sessions`]), which checks its times itself.
    pub sessions: bool,
    /// The rows whose `hash_ids` describe more tokens than their `input_length`.
    pub surplus_hash_ids: SurplusHashIds,
}

/// Rows whose `hash_ids` describe more blocks than their `input_length` fills: accepted, as
/// Dynamo 1.6.1 accepts them (the prompt is the first `input_length` tokens; later ids are
/// never used), but worth a warning, since a trace made that way usually has a mistake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SurplusHashIds {
    /// How many rows.
    pub rows: u64,
    /// The first such row's line in the file (0 when there is none).
    pub first_line: usize,
}

impl SurplusHashIds {
    /// Counts the row at `line`, `input_tokens` long, with `ids` hash ids of `tokens_per_hash`
    /// tokens each, if its last id covers none of its tokens.
    fn add(&mut self, line: usize, input_tokens: u64, ids: u64, tokens_per_hash: u64) {
        if ids.saturating_sub(1).saturating_mul(tokens_per_hash) >= input_tokens {
            self.rows += 1;
            if self.first_line == 0 {
                self.first_line = line;
            }
        }
    }

    /// The warning about them, naming `source` (`None` when there are none).
    pub fn warning(&self, source: &str) -> Option<String> {
        let (rows, whose) = match self.rows {
            0 => return None,
            1 => (format!("1 row (line {}) has", self.first_line), "its"),
            n => (
                format!("{n} rows (the first at line {}) have", self.first_line),
                "their",
            ),
        };
        Some(format!(
            "warning: {source}: {rows} more hash_ids than {whose} input_length fills; the prompt \
             is the first input_length tokens and the ids past them are unused, as in Dynamo 1.6.1"
        ))
    }
}

/// Validates every row of a trace without keeping any, so that a bad trace is refused before
/// anything runs or is written.
pub fn scan<R: BufRead>(
    input: R,
    source_name: &str,
    tokens_per_hash: u64,
) -> Result<TraceSummary, TraceError> {
    scan_scaled(input, source_name, tokens_per_hash, 1.0)
}

/// [`scan`] for a replay whose timestamps are divided by `speedup_ratio` (positive and
/// finite; see [`check_speedup_ratio`]): the latest arrival must still fit the time bound
/// after the division.
pub fn scan_scaled<R: BufRead>(
    input: R,
    source_name: &str,
    tokens_per_hash: u64,
    speedup_ratio: f64,
) -> Result<TraceSummary, TraceError> {
    assert!(
        speedup_ratio.is_finite() && speedup_ratio > 0.0,
        "the speed-up ratio is validated before a scan"
    );
    let mut reader = TraceReader::new(input, source_name, tokens_per_hash);
    let mut tally = Tally::default();
    while let Some(row) = reader.next_row() {
        tally.add(&reader, &row?)?;
    }
    tally.finish(&reader, speedup_ratio)
}

/// What a pass over a trace learns row by row. [`scan_scaled`] and [`OnePass`] both keep one,
/// so that they refuse the same rows with the same words.
#[derive(Clone, Debug)]
struct Tally {
    rows: u64,
    blocks: u64,
    origin_ms: f64,
    last_ms: f64,
    sorted: bool,
    /// The latest timestamp and the first line that has it.
    latest_ms: f64,
    latest_line: usize,
    sessions: bool,
    surplus_hash_ids: SurplusHashIds,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            rows: 0,
            blocks: 0,
            origin_ms: f64::INFINITY,
            last_ms: f64::NEG_INFINITY,
            sorted: true,
            latest_ms: f64::NEG_INFINITY,
            latest_line: 0,
            sessions: false,
            surplus_hash_ids: SurplusHashIds::default(),
        }
    }
}

impl Tally {
    /// Counts the row `reader` just read; refuses a trace grown past a run's bounds.
    fn add<R: BufRead>(
        &mut self,
        reader: &TraceReader<R>,
        row: &TraceRow,
    ) -> Result<(), TraceError> {
        self.rows += 1;
        self.blocks += row.spec.prompt.block_count();
        reader.check_totals(self.rows, self.blocks)?;
        self.sessions |= row.is_session_row();
        let PromptSpec::HashIds { hash_ids, .. } = &row.spec.prompt;
        let (ids, input_tokens) = (hash_ids.len() as u64, row.spec.input_tokens);
        (self.surplus_hash_ids).add(row.line, input_tokens, ids, reader.tokens_per_hash);
        let timestamp_ms = row.timestamp_ms.unwrap_or(0.0);
        self.origin_ms = self.origin_ms.min(timestamp_ms);
        self.sorted &= timestamp_ms >= self.last_ms;
        self.last_ms = timestamp_ms;
        if timestamp_ms > self.latest_ms {
            (self.latest_ms, self.latest_line) = (timestamp_ms, reader.line_no);
        }
        Ok(())
    }

    /// Whether the latest arrival so far, divided by `speedup_ratio`, is past the time bound.
    fn past_time_bound(&self, speedup_ratio: f64) -> bool {
        self.rows > 0
            && (self.latest_ms - self.origin_ms) / speedup_ratio * NS_PER_MS as f64
                > MAX_INPUT_NS as f64
    }

    /// The summary of a trace read to its end, or why its arrivals do not fit the time bound
    /// (naming the line of its latest timestamp).
    fn finish<R: BufRead>(
        &self,
        reader: &TraceReader<R>,
        speedup_ratio: f64,
    ) -> Result<TraceSummary, TraceError> {
        let origin_ms = if self.rows == 0 { 0.0 } else { self.origin_ms };
        if !self.sessions && self.past_time_bound(speedup_ratio) {
            let scaled = match speedup_ratio == 1.0 {
                true => String::new(),
                false => format!(" once divided by the arrival speed-up ratio {speedup_ratio}"),
            };
            let latest_ms = self.latest_ms;
            let mut e = reader.error(
                Some("timestamp"),
                format!(
                    "{latest_ms} ms is more than {} ms (about 146 years) after the earliest row's {origin_ms} ms{scaled}",
                    MAX_INPUT_NS / NS_PER_MS
                ),
            );
            e.line = self.latest_line;
            return Err(e);
        }
        Ok(TraceSummary {
            rows: self.rows,
            origin_ms,
            sorted: self.sorted,
            sessions: self.sessions,
            surplus_hash_ids: self.surplus_hash_ids,
        })
    }
}

impl<R: BufRead> TraceReader<R> {
    pub fn new(input: R, source_name: &str, tokens_per_hash: u64) -> Self {
        assert!(tokens_per_hash > 0, "trace block size must be positive");
        TraceReader {
            input,
            source_name: source_name.to_string(),
            tokens_per_hash,
            origin_ms: 0.0,
            speedup_ratio: 1.0,
            line_no: 0,
            next_row: 0,
            buf: String::new(),
        }
    }

    /// Measures arrivals from `origin_ms` (the trace's earliest timestamp).
    pub fn with_origin_ms(mut self, origin_ms: f64) -> Self {
        self.origin_ms = origin_ms;
        self
    }

    /// Divides every arrival by `ratio` (Dynamo's `arrival_speedup_ratio`; 1: as recorded).
    /// As in Dynamo 1.6.1, the division is of the rebased time in f64 milliseconds; the
    /// quotient is then rounded to the nearest nanosecond.
    pub fn with_speedup_ratio(mut self, ratio: f64) -> Self {
        assert!(
            ratio.is_finite() && ratio > 0.0,
            "the speed-up ratio is validated before a trace is read"
        );
        self.speedup_ratio = ratio;
        self
    }

    /// The trace's name, as errors give it.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The physical line (1-based) of the row read last.
    pub fn line(&self) -> usize {
        self.line_no
    }

    pub(crate) fn error(&self, field: Option<&str>, message: impl Into<String>) -> TraceError {
        TraceError {
            source_name: self.source_name.clone(),
            line: self.line_no,
            field: field.map(str::to_string),
            message: message.into(),
        }
    }

    /// Refuses a trace with more rows or prompt blocks than a run may hold.
    fn check_totals(&self, rows: u64, blocks: u64) -> Result<(), TraceError> {
        if rows > MAX_REQUESTS {
            return Err(self.error(
                None,
                format!("the trace has more than {MAX_REQUESTS} rows, the most a run may have"),
            ));
        }
        if blocks > MAX_PROMPT_BLOCKS {
            return Err(self.error(
                Some("hash_ids"),
                format!("the trace has more than {MAX_PROMPT_BLOCKS} hash ids in all, the most a run may hold"),
            ));
        }
        Ok(())
    }

    /// A token count no larger than [`MAX_TOKENS`].
    fn check_tokens(&self, field: &str, tokens: u64) -> Result<u64, TraceError> {
        match tokens <= MAX_TOKENS {
            true => Ok(tokens),
            false => Err(self.error(
                Some(field),
                format!("{tokens} tokens is more than the {MAX_TOKENS} a request may have"),
            )),
        }
    }

    fn parse_line(&self, text: &str) -> Result<TraceRow, TraceError> {
        let MaybeRow(row) = serde_json::from_str(text)
            .map_err(|e| self.error(None, format!("not valid JSON: {e}")))?;
        let Some(mut obj) = row else {
            return Err(self.error(None, "expected a JSON object"));
        };
        let timestamp_ms = self.timestamp_ms(&obj)?;
        let session_id = self.opt_string(&mut obj.session_id, "session_id")?;
        let delay_ms = self.delay_ms(&obj)?;
        let hash_ids = self.hash_ids(&mut obj)?;
        let capacity = hash_ids.len() as u64 * self.tokens_per_hash;
        let input_tokens = match self.either_u64(
            (&obj.input_length, "input_length"),
            (&obj.input_tokens, "input_tokens"),
        )? {
            Some(n) => n,
            None => capacity,
        };
        let input_tokens = self.check_tokens("input_length", input_tokens)?;
        if input_tokens == 0 {
            return Err(self.error(Some("input_length"), "must be positive"));
        }
        if input_tokens > capacity {
            return Err(self.error(
                Some("input_length"),
                format!("{input_tokens} exceeds the {capacity} tokens its hash_ids describe"),
            ));
        }
        let Some(output) = self.either_u64(
            (&obj.output_length, "output_length"),
            (&obj.output_tokens, "output_tokens"),
        )?
        else {
            return Err(self.error(Some("output_length"), "missing"));
        };
        let output = self.check_tokens("output_length", output)?;
        let spec = RequestSpec {
            row: self.next_row,
            arrival: self.arrival(timestamp_ms.unwrap_or(0.0)),
            policy_class: self.opt_string(&mut obj.policy_class, "policy_class")?,
            input_tokens,
            output_tokens: output,
            priority: self.priority(&obj)?,
            strict_priority: self.strict_priority(&obj)?,
            prompt: PromptSpec::HashIds {
                hash_ids,
                tokens_per_hash: self.tokens_per_hash,
            },
            pinned_worker: None,
        };
        Ok(TraceRow {
            spec,
            timestamp_ms,
            session_id,
            delay_ms,
            line: self.line_no,
        })
    }

    /// When a row stamped `timestamp_ms` arrives: rebased to the origin, divided by the
    /// speed-up ratio, rounded to the ns.
    pub(crate) fn arrival(&self, timestamp_ms: f64) -> SimTime {
        let arrival_ms = (timestamp_ms - self.origin_ms).max(0.0) / self.speedup_ratio;
        let arrival_ns = (arrival_ms * NS_PER_MS as f64).round();
        SimTime::from_ns(arrival_ns as u64)
    }

    fn timestamp_ms(&self, obj: &RawRow) -> Result<Option<f64>, TraceError> {
        let (name, v) = match (&obj.timestamp, &obj.created_time) {
            (v, _) if v.is_present() => ("timestamp", v),
            (_, v) if v.is_present() => ("created_time", v),
            _ => return Ok(None),
        };
        match v.as_f64() {
            Some(ms) if ms.abs() <= MAX_TRACE_TIMESTAMP_MS => Ok(Some(ms)),
            Some(ms) => Err(self.error(
                Some(name),
                format!(
                    "{ms:?} ms is beyond the timestamps routersim reads, from -{MAX_TRACE_TIMESTAMP_MS:e} to {MAX_TRACE_TIMESTAMP_MS:e} ms (and the latest may be at most {} ms, about 146 years, after the earliest: the time bound)",
                    MAX_INPUT_NS / NS_PER_MS
                ),
            )),
            None => Err(self.error(Some(name), "must be a number of milliseconds")),
        }
    }

    /// A session turn's think time in ms (`delay` or its alias `delay_ms`), if given (null:
    /// not given). Dynamo 1.6.1 refuses a row with both, as a duplicate field.
    fn delay_ms(&self, obj: &RawRow) -> Result<Option<f64>, TraceError> {
        let present = |v: &Field| !matches!(v, Field::Absent | Field::Null);
        let (name, v) = match (present(&obj.delay), present(&obj.delay_ms)) {
            (true, true) => {
                return Err(self.error(
                    Some("delay_ms"),
                    "give `delay` or its alias `delay_ms`, not both",
                ));
            }
            (true, false) => ("delay", &obj.delay),
            (false, true) => ("delay_ms", &obj.delay_ms),
            (false, false) => return Ok(None),
        };
        match v.as_f64() {
            Some(ms) => Ok(Some(ms)),
            None => Err(self.error(Some(name), "must be a number of milliseconds")),
        }
    }

    /// A count under either of two names (`input_length` / `input_tokens`), if present.
    fn either_u64(
        &self,
        (a, a_name): (&Field, &str),
        (b, b_name): (&Field, &str),
    ) -> Result<Option<u64>, TraceError> {
        let (name, v) = match (a, b) {
            (v, _) if v.is_present() => (a_name, v),
            (_, v) if v.is_present() => (b_name, v),
            _ => return Ok(None),
        };
        match *v {
            Field::Unsigned(n) => Ok(Some(n)),
            // serde_json reads an integer past u64 as a float.
            Field::Float(x) if x >= MAX_TOKENS as f64 && x.fract() == 0.0 => Err(self.error(
                Some(name),
                format!("{x:?} tokens is more than the {MAX_TOKENS} a request may have"),
            )),
            _ => Err(self.error(Some(name), "must be a non-negative integer")),
        }
    }

    fn hash_ids(&self, obj: &mut RawRow) -> Result<Vec<u64>, TraceError> {
        let field = Some("hash_ids");
        match obj.hash_ids.take() {
            None => Err(self.error(field, "missing")),
            Some(Err(bad)) => Err(self.error(field, bad.message())),
            Some(Ok(ids)) => Ok(ids),
        }
    }

    fn opt_string(&self, v: &mut Field, name: &str) -> Result<Option<String>, TraceError> {
        match std::mem::take(v) {
            Field::Absent | Field::Null => Ok(None),
            Field::Text(s) => Ok(Some(s)),
            _ => Err(self.error(Some(name), "must be a string")),
        }
    }

    /// Dynamo 1.6.1 accepts only integer priorities.
    fn priority(&self, obj: &RawRow) -> Result<f64, TraceError> {
        match &obj.priority {
            Field::Absent | Field::Null => Ok(0.0),
            v => v
                .as_i64()
                .map(|p| p as f64)
                .ok_or_else(|| self.error(Some("priority"), "must be an integer")),
        }
    }

    fn strict_priority(&self, obj: &RawRow) -> Result<u32, TraceError> {
        match &obj.strict_priority {
            Field::Absent | Field::Null => Ok(0),
            v => v
                .as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| {
                    self.error(
                        Some("strict_priority"),
                        "must be an integer from 0 to 4294967295",
                    )
                }),
        }
    }
}

impl<R: BufRead> TraceReader<R> {
    /// The next row, with its timestamp and session fields.
    pub fn next_row(&mut self) -> Option<Result<TraceRow, TraceError>> {
        loop {
            self.buf.clear();
            self.line_no += 1;
            match read_line_capped(&mut self.input, &mut self.buf, MAX_TRACE_LINE_BYTES) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(self.error(None, format!("cannot read: {e}")))),
            }
            // A UTF-8 byte-order mark may open the file, as editors on Windows write it (a
            // scenario file may open with one too).
            let line = match self.line_no {
                1 => self.buf.strip_prefix('\u{feff}').unwrap_or(&self.buf),
                _ => &self.buf,
            };
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let parsed = self.parse_line(text);
            if parsed.is_ok() {
                self.next_row += 1;
            }
            return Some(parsed);
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<RequestSpec, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_row().map(|r| r.map(|row| row.spec))
    }
}

/// The order a [`OnePass`] hands rows on in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    /// Arrival order (an open loop), on the bet that the file is in time order.
    Time,
    /// File order, timestamps unused (a closed loop).
    File,
}

/// What a [`OnePass`] found out about its trace.
#[derive(Clone, Debug, PartialEq)]
pub enum PassVerdict {
    /// Read to its end: every row valid and handed on (in time order, for [`RowOrder::Time`]),
    /// with the rows whose hash ids outrun their input.
    Valid(SurplusHashIds),
    /// Invalid: the error [`scan_scaled`] gives for this trace (the rows before it were valid,
    /// so a scan stops at the same row, or at the end for the time bound, with the same words).
    Invalid(TraceError),
    /// Stopped short (a row out of time order, one past the time bound: whether that is the
    /// trace's error depends on rows not yet read; or a session's turn, which needs the whole
    /// file to place), or not read to the end by its consumer: only a [`scan_scaled`] can
    /// tell.
    Undecided,
}

/// A trace read once, validated as it streams: hands on rows while they are valid (and, for
/// [`RowOrder::Time`], in time order), and stops at the first that is not. [`OnePass::verdict`]
/// then says whether what it handed on was the whole valid trace.
///
/// For an open loop this bets that the file is in time order, as nearly every trace is: then
/// the first row's timestamp is the smallest, the origin a scan would find, and every arrival
/// is the one a scan-then-read gives, to the bit (the same [`TraceReader::arrival`] with the
/// same origin). A lost bet is [`PassVerdict::Undecided`]: the caller discards the run and
/// takes the two-pass road.
pub struct OnePass<R> {
    reader: TraceReader<R>,
    order: RowOrder,
    tally: Tally,
    verdict: Option<PassVerdict>,
}

impl<R: BufRead> OnePass<R> {
    /// Reads `reader`'s rows in `order`. Its origin is ignored: for [`RowOrder::Time`], the
    /// first row's timestamp is the origin.
    pub fn new(reader: TraceReader<R>, order: RowOrder) -> Self {
        OnePass {
            reader,
            order,
            tally: Tally::default(),
            verdict: None,
        }
    }

    /// What the pass found; [`PassVerdict::Undecided`] while the trace is not read to its end.
    pub fn verdict(&self) -> PassVerdict {
        self.verdict.clone().unwrap_or(PassVerdict::Undecided)
    }

    /// The next row to hand on, or the verdict that ends the pass.
    fn step(&mut self) -> Result<RequestSpec, PassVerdict> {
        let Some(row) = self.reader.next_row() else {
            // The whole trace is read: the tally gives a scan's own answer.
            return match self.tally.finish(&self.reader, self.reader.speedup_ratio) {
                Ok(summary) => Err(PassVerdict::Valid(summary.surplus_hash_ids)),
                Err(e) => Err(PassVerdict::Invalid(e)),
            };
        };
        let row = row.map_err(PassVerdict::Invalid)?;
        self.tally
            .add(&self.reader, &row)
            .map_err(PassVerdict::Invalid)?;
        if self.tally.sessions {
            return Err(PassVerdict::Undecided);
        }
        let (timestamp_ms, mut spec) = (row.timestamp_ms.unwrap_or(0.0), row.spec);
        if self.order == RowOrder::Time {
            if self.tally.rows == 1 {
                self.reader.origin_ms = timestamp_ms;
                spec.arrival = self.reader.arrival(timestamp_ms);
            }
            // Out of order: the bet is lost. Past the time bound: not for the simulator.
            if !self.tally.sorted || self.tally.past_time_bound(self.reader.speedup_ratio) {
                return Err(PassVerdict::Undecided);
            }
        }
        Ok(spec)
    }
}

impl<R: BufRead> Iterator for OnePass<R> {
    type Item = RequestSpec;

    fn next(&mut self) -> Option<RequestSpec> {
        if self.verdict.is_some() {
            return None;
        }
        match self.step() {
            Ok(spec) => Some(spec),
            Err(verdict) => {
                self.verdict = Some(verdict);
                None
            }
        }
    }
}

/// One trace line's fields, as the JSON gave them (read without building a JSON tree: every
/// row of a replay is parsed at least once, an unsorted trace's twice). Later duplicates of
/// a key win, as in a JSON object; unknown keys are skipped.
#[derive(Default)]
struct RawRow {
    timestamp: Field,
    created_time: Field,
    input_length: Field,
    input_tokens: Field,
    output_length: Field,
    output_tokens: Field,
    /// `None` when absent; `Some(Err(_))` when not a list of hash ids.
    hash_ids: Option<Result<Vec<u64>, BadIds>>,
    policy_class: Field,
    priority: Field,
    strict_priority: Field,
    session_id: Field,
    delay: Field,
    delay_ms: Field,
}

/// One scalar field of a trace row.
#[derive(Default)]
enum Field {
    #[default]
    Absent,
    Null,
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(String),
    /// A boolean, list or object.
    Other,
}

impl Field {
    fn is_present(&self) -> bool {
        !matches!(self, Field::Absent)
    }

    /// Any number (as `serde_json::Value::as_f64`).
    fn as_f64(&self) -> Option<f64> {
        match *self {
            Field::Unsigned(n) => Some(n as f64),
            Field::Signed(n) => Some(n as f64),
            Field::Float(x) => Some(x),
            _ => None,
        }
    }

    /// A non-negative integer.
    fn as_u64(&self) -> Option<u64> {
        match *self {
            Field::Unsigned(n) => Some(n),
            _ => None,
        }
    }

    /// An integer that fits an `i64`.
    fn as_i64(&self) -> Option<i64> {
        match *self {
            Field::Unsigned(n) => i64::try_from(n).ok(),
            Field::Signed(n) => Some(n),
            _ => None,
        }
    }
}

/// `Some(row)` for a JSON object, `None` for any other JSON value.
struct MaybeRow(Option<RawRow>);

impl<'de> Deserialize<'de> for MaybeRow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RowVisitor)
    }
}

struct RowVisitor;

impl<'de> Visitor<'de> for RowVisitor {
    type Value = MaybeRow;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeRow, A::Error> {
        let mut row = RawRow::default();
        // One key per iteration, as many as the line holds: bounded by its length.
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Timestamp => row.timestamp = map.next_value()?,
                Key::CreatedTime => row.created_time = map.next_value()?,
                Key::InputLength => row.input_length = map.next_value()?,
                Key::InputTokens => row.input_tokens = map.next_value()?,
                Key::OutputLength => row.output_length = map.next_value()?,
                Key::OutputTokens => row.output_tokens = map.next_value()?,
                Key::HashIds => row.hash_ids = Some(map.next_value::<HashIds>()?.0),
                Key::PolicyClass => row.policy_class = map.next_value()?,
                Key::Priority => row.priority = map.next_value()?,
                Key::StrictPriority => row.strict_priority = map.next_value()?,
                Key::SessionId => row.session_id = map.next_value()?,
                Key::Delay => row.delay = map.next_value()?,
                Key::DelayMs => row.delay_ms = map.next_value()?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(MaybeRow(Some(row)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeRow, A::Error> {
        // One element per iteration: bounded by the line's length.
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(MaybeRow(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<MaybeRow, E> {
        Ok(MaybeRow(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<MaybeRow, E> {
        Ok(MaybeRow(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<MaybeRow, E> {
        Ok(MaybeRow(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<MaybeRow, E> {
        Ok(MaybeRow(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<MaybeRow, E> {
        Ok(MaybeRow(None))
    }
    fn visit_unit<E>(self) -> Result<MaybeRow, E> {
        Ok(MaybeRow(None))
    }
}

/// The keys a trace row reads.
enum Key {
    Timestamp,
    CreatedTime,
    InputLength,
    InputTokens,
    OutputLength,
    OutputTokens,
    HashIds,
    PolicyClass,
    Priority,
    StrictPriority,
    SessionId,
    Delay,
    DelayMs,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, name: &str) -> Result<Key, E> {
                Ok(match name {
                    "timestamp" => Key::Timestamp,
                    "created_time" => Key::CreatedTime,
                    "input_length" => Key::InputLength,
                    "input_tokens" => Key::InputTokens,
                    "output_length" => Key::OutputLength,
                    "output_tokens" => Key::OutputTokens,
                    "hash_ids" => Key::HashIds,
                    "policy_class" => Key::PolicyClass,
                    "priority" => Key::Priority,
                    "strict_priority" => Key::StrictPriority,
                    "session_id" => Key::SessionId,
                    "delay" => Key::Delay,
                    "delay_ms" => Key::DelayMs,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl<'de> Visitor<'de> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Field, E> {
                Ok(Field::Null)
            }
            fn visit_u64<E>(self, n: u64) -> Result<Field, E> {
                Ok(Field::Unsigned(n))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Field, E> {
                Ok(Field::Signed(n))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Field, E> {
                Ok(Field::Float(x))
            }
            fn visit_str<E>(self, s: &str) -> Result<Field, E> {
                Ok(Field::Text(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Field, E> {
                Ok(Field::Text(s))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Field, E> {
                Ok(Field::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field, A::Error> {
                // One element per iteration: bounded by the line's length.
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Field, A::Error> {
                // One entry per iteration: bounded by the line's length.
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
        }
        d.deserialize_any(FieldVisitor)
    }
}

/// The largest hash id (ids are `u64`, as Dynamo's).
const MAX_HASH_ID: u64 = u64::MAX;

/// Why a `hash_ids` value is not a list of hash ids.
#[derive(Clone, Copy, Debug, PartialEq)]
enum BadIds {
    /// Not a list at all.
    NotAList,
    /// Element `index` is a whole number above [`MAX_HASH_ID`] (serde_json reads it as a float).
    TooLarge { index: usize, value: f64 },
    /// Element `index` is negative.
    Negative { index: usize },
    /// Element `index` is not an integer (a fraction, a string, ...).
    NotAnId { index: usize },
}

impl BadIds {
    fn message(self) -> String {
        let ids = format!("hash ids are whole numbers from 0 to {MAX_HASH_ID} (2^64 - 1)");
        match self {
            BadIds::NotAList => format!("must be a list of hash ids: {ids}"),
            BadIds::TooLarge { index, value } => format!(
                "hash_ids[{index}] = {value:?} is more than {MAX_HASH_ID} (2^64 - 1), the largest hash id"
            ),
            BadIds::Negative { index } => format!("hash_ids[{index}] is negative: {ids}"),
            BadIds::NotAnId { index } => format!("hash_ids[{index}] is not an integer: {ids}"),
        }
    }

    /// Why element `index`, which is not a hash id, is not one.
    fn element(index: usize, item: &Field) -> BadIds {
        match *item {
            Field::Float(value) if value >= MAX_HASH_ID as f64 && value.fract() == 0.0 => {
                BadIds::TooLarge { index, value }
            }
            Field::Signed(_) => BadIds::Negative { index },
            Field::Float(value) if value < 0.0 => BadIds::Negative { index },
            _ => BadIds::NotAnId { index },
        }
    }
}

/// `hash_ids`: the ids, or why the value is not a list of hash ids.
struct HashIds(Result<Vec<u64>, BadIds>);

impl<'de> Deserialize<'de> for HashIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IdsVisitor;
        impl<'de> Visitor<'de> for IdsVisitor {
            type Value = HashIds;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HashIds, A::Error> {
                // serde_json gives no length: start with room for a typical prompt's ids.
                let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(32).min(1024));
                let mut bad = None;
                // One element per iteration: bounded by the line's length.
                while let Some(item) = seq.next_element::<Field>()? {
                    match (item.as_u64(), bad) {
                        (_, Some(_)) => {}
                        (Some(id), None) => ids.push(id),
                        (None, None) => bad = Some(BadIds::element(ids.len(), &item)),
                    }
                }
                Ok(HashIds(bad.map_or(Ok(ids), Err)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HashIds, A::Error> {
                // One entry per iteration: bounded by the line's length.
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(HashIds(Err(BadIds::NotAList)))
            }
            fn visit_unit<E>(self) -> Result<HashIds, E> {
                Ok(HashIds(Err(BadIds::NotAList)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<HashIds, E> {
                Ok(HashIds(Err(BadIds::NotAList)))
            }
            fn visit_i64<E>(self, _: i64) -> Result<HashIds, E> {
                Ok(HashIds(Err(BadIds::NotAList)))
            }
            fn visit_u64<E>(self, _: u64) -> Result<HashIds, E> {
                Ok(HashIds(Err(BadIds::NotAList)))
            }
            fn visit_f64<E>(self, _: f64) -> Result<HashIds, E> {
                Ok(HashIds(Err(BadIds::NotAList)))
            }
            fn visit_str<E>(self, _: &str) -> Result<HashIds, E> {
                Ok(HashIds(Err(BadIds::NotAList)))
            }
        }
        d.deserialize_any(IdsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<RequestSpec, TraceError>> {
        TraceReader::new(text.as_bytes(), "t.jsonl", 512).collect()
    }

    fn first_error(text: &str) -> String {
        read(text)
            .into_iter()
            .find_map(Result::err)
            .expect("an error")
            .to_string()
    }

    #[test]
    fn a_row_is_surplus_when_its_last_hash_id_covers_none_of_its_input() {
        let mut surplus = SurplusHashIds::default();
        surplus.add(3, 513, 2, 512); // the second id holds token 513
        assert_eq!(surplus, SurplusHashIds::default());
        surplus.add(4, 512, 2, 512); // 512 tokens fill the first id
        surplus.add(9, 1, 3, 512);
        assert_eq!(
            surplus,
            SurplusHashIds {
                rows: 2,
                first_line: 4
            }
        );
        surplus.add(10, 0, u64::MAX, u64::MAX); // saturates, never overflows
        assert_eq!(surplus.rows, 3);
    }

    #[test]
    fn parses_rows_with_optional_fields() {
        let rows = read(concat!(
            r#"{"timestamp": 1.5, "input_length": 600, "output_length": 3, "hash_ids": [4, 5]}"#,
            "\n\n",
            r#"{"input_length": 10, "output_length": 1, "hash_ids": [1], "policy_class": "premium", "priority": -2, "strict_priority": 3}"#,
        ));
        let a = rows[0].as_ref().unwrap();
        assert_eq!(
            (a.row, a.arrival.as_ns(), a.input_tokens, a.output_tokens),
            (0, 1_500_000, 600, 3)
        );
        let b = rows[1].as_ref().unwrap();
        assert_eq!(
            (b.row, b.arrival, b.priority, b.strict_priority),
            (1, SimTime::ZERO, -2.0, 3)
        );
        assert_eq!(b.policy_class.as_deref(), Some("premium"));
    }

    #[test]
    fn the_prompt_must_fit_its_hash_ids_and_defaults_to_them() {
        let e = first_error(
            r#"{"timestamp": 0, "input_length": 5000, "output_length": 1, "hash_ids": [1, 2]}"#,
        );
        assert!(
            e.contains("`input_length`: 5000 exceeds the 1024 tokens"),
            "{e}"
        );
        let rows = read(r#"{"timestamp": 0, "output_length": 1, "hash_ids": [1, 2]}"#);
        assert_eq!(rows[0].as_ref().unwrap().input_tokens, 1024);
    }

    #[test]
    fn scan_finds_the_origin_and_arrivals_are_rebased_to_it() {
        let text = concat!(
            r#"{"timestamp": 1010, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
            "\n",
            r#"{"timestamp": 1000.5, "input_length": 5, "output_length": 0, "hash_ids": [1], "extra": true}"#,
        );
        let summary = scan(text.as_bytes(), "t", 512).unwrap();
        let expected = TraceSummary {
            rows: 2,
            origin_ms: 1000.5,
            sorted: false,
            sessions: false,
            surplus_hash_ids: SurplusHashIds::default(),
        };
        assert_eq!(summary, expected);
        let arrivals: Vec<u64> = TraceReader::new(text.as_bytes(), "t", 512)
            .with_origin_ms(summary.origin_ms)
            .map(|r| r.unwrap().arrival.as_ns())
            .collect();
        assert_eq!(arrivals, vec![9_500_000, 0]);
    }

    /// Dynamo 1.6.1 divides the rebased f64 milliseconds by the ratio; routersim rounds the
    /// quotient to the nearest ns. Dynamo's probe: tagged timestamps 2e-6 (the origin) and
    /// 30.000003 ms with ratio 3 arrive at 0 and 10.000000333... ms.
    #[test]
    fn a_speedup_divides_the_rebased_milliseconds_and_rounds_to_the_ns() {
        let text = concat!(
            r#"{"timestamp": 30.000003, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
            "\n",
            r#"{"timestamp": 0.000002, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
            "\n",
            r#"{"timestamp": 0.000003, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
            "\n",
            r#"{"timestamp": 1000, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
        );
        let arrivals = |ratio: f64| -> Vec<u64> {
            let origin_ms = scan_scaled(text.as_bytes(), "t", 512, ratio)
                .unwrap()
                .origin_ms;
            TraceReader::new(text.as_bytes(), "t", 512)
                .with_origin_ms(origin_ms)
                .with_speedup_ratio(ratio)
                .map(|r| r.unwrap().arrival.as_ns())
                .collect()
        };
        assert_eq!(arrivals(1.0), vec![30_000_001, 0, 1, 999_999_998]);
        // 10,000,000.33 ns; 0.33 ns rounds down to 0; 333,333,332.67 ns rounds up.
        assert_eq!(arrivals(3.0), vec![10_000_000, 0, 0, 333_333_333]);
        // Half a nanosecond rounds away from zero.
        assert_eq!(arrivals(2.0), vec![15_000_001, 0, 1, 499_999_999]);
        // A slow-down stretches: 0.5 doubles every gap.
        assert_eq!(arrivals(0.5), vec![60_000_002, 0, 2, 1_999_999_996]);
    }

    #[test]
    fn speedup_ratios_are_finite_and_at_least_the_speedup_bound() {
        for ok in [1.0, 2.5, 1e-3, 1e6] {
            assert_eq!(check_speedup_ratio(ok), Ok(ok));
        }
        for bad in [0.0, -1.0, 9e-4, f64::NAN, f64::INFINITY] {
            let e = check_speedup_ratio(bad).unwrap_err();
            assert!(e.contains("must be a finite number >= 0.001"), "{e}");
        }
    }

    #[test]
    fn a_slowdown_may_not_push_the_last_arrival_past_the_time_bound() {
        // 1.5e12 ms is within the bound (4.6e12 ms); a thousandfold slow-down is not.
        let text = concat!(
            r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
            "\n",
            r#"{"timestamp": 1.5e12, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
        );
        assert!(scan_scaled(text.as_bytes(), "t", 512, 1.0).is_ok());
        let e = scan_scaled(text.as_bytes(), "t", 512, 1e-3)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t:2: field `timestamp`: "), "{e}");
        assert!(
            e.contains("divided by the arrival speed-up ratio 0.001"),
            "{e}"
        );
    }

    #[test]
    fn rows_read_as_json_objects_do() {
        // A later duplicate key wins; unknown keys of any shape are skipped; escaped names
        // are still names.
        let rows = read(
            r#"{"output_length": 9, "hash_ids": [1], "output_length": 2, "extra": {"a": [1, {"b": null}]}, "t\u0069mestamp": 3}"#,
        );
        let row = rows[0].as_ref().unwrap();
        assert_eq!((row.output_tokens, row.arrival.as_ns()), (2, 3_000_000));
        // Present with null still counts as present.
        let cases = [
            (
                r#"{"session_id": null, "output_length": 1.5, "hash_ids": [1]}"#,
                "`output_length`",
            ),
            (
                r#"{"timestamp": null, "output_length": 1, "hash_ids": [1]}"#,
                "`timestamp`",
            ),
            (r#"{"output_length": 1, "hash_ids": [1, -2]}"#, "`hash_ids`"),
            (
                r#"{"output_length": 1, "hash_ids": {"a": 1}}"#,
                "`hash_ids`",
            ),
            (
                r#"{"output_length": 1.0, "hash_ids": [1]}"#,
                "`output_length`",
            ),
            (
                r#"{"output_length": 1, "hash_ids": [1], "policy_class": 5}"#,
                "`policy_class`",
            ),
            ("\"text\"", "expected a JSON object"),
            ("{\"a\": 1} x", "not valid JSON"),
        ];
        for (line, expected) in cases {
            let e = first_error(line);
            assert!(
                e.contains(expected),
                "{line}: {e} should contain {expected}"
            );
        }
    }

    const OK_ROW: &str =
        r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#;

    #[test]
    fn a_byte_order_mark_may_open_a_trace() {
        let rows = read(&format!("\u{feff}{OK_ROW}\n{OK_ROW}\n"));
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(Result::is_ok), "{rows:?}");
        assert!(scan(format!("\u{feff}{OK_ROW}").as_bytes(), "t", 512).is_ok());
        // Only the file's first bytes may be one: later it is a stray character.
        let e = first_error(&format!("{OK_ROW}\n\u{feff}{OK_ROW}\n"));
        assert!(e.starts_with("t.jsonl:2: not valid JSON"), "{e}");
    }

    #[test]
    fn hash_ids_above_the_largest_say_so_not_that_they_are_negative() {
        let row = |ids: &str| OK_ROW.replace("[1]", ids);
        let e = first_error(&row("[1, 18446744073709551616]"));
        assert!(
            e.contains("hash_ids[1] = 1.8446744073709552e19 is more than 18446744073709551615 (2^64 - 1), the largest hash id"),
            "{e}"
        );
        assert!(
            !e.contains("non-negative") && !e.contains("negative"),
            "{e}"
        );
        let e = first_error(&row("[1, 2, -3]"));
        assert!(
            e.contains(
                "hash_ids[2] is negative: hash ids are whole numbers from 0 to 18446744073709551615"
            ),
            "{e}"
        );
        let e = first_error(&row("[0.5]"));
        assert!(e.contains("hash_ids[0] is not an integer"), "{e}");
        let e = first_error(&row("7"));
        assert!(e.contains("`hash_ids`: must be a list of hash ids"), "{e}");
        let max = read(&row("[18446744073709551615]"));
        assert!(max[0].is_ok(), "2^64 - 1 is a hash id");
    }

    #[test]
    fn a_timestamp_beyond_the_readable_ones_names_the_bounds() {
        let e = first_error(&OK_ROW.replace("\"timestamp\": 0", "\"timestamp\": 1e300"));
        assert!(
            e.starts_with("t.jsonl:1: field `timestamp`: 1e300 ms is beyond the timestamps routersim reads, from -1e15 to 1e15 ms"),
            "{e}"
        );
        assert!(e.contains("4611686018427 ms"), "the time bound: {e}");
        let edge = OK_ROW.replace("\"timestamp\": 0", "\"timestamp\": -1e15");
        assert!(read(&edge)[0].is_ok());
    }

    #[test]
    fn a_length_above_every_integer_is_too_many_tokens() {
        let e = first_error(&OK_ROW.replace(
            "\"input_length\": 5",
            "\"input_length\": 18446744073709551616",
        ));
        assert!(
            e.contains("`input_length`: 1.8446744073709552e19 tokens is more than the 16777216 a request may have"),
            "{e}"
        );
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let cases = [
            ("not json", "not valid JSON"),
            (
                r#"{"input_length": 5, "hash_ids": [1]}"#,
                "`output_length`: missing",
            ),
            (
                r#"{"input_length": -5, "output_length": 1, "hash_ids": [1]}"#,
                "`input_length`: must be a non-negative integer",
            ),
            (
                r#"{"input_length": 5, "output_length": "x", "hash_ids": [1]}"#,
                "`output_length`: must be a non-negative integer",
            ),
            (
                r#"{"input_length": 5, "output_length": 1, "hash_ids": [1], "priority": 2.0}"#,
                "`priority`: must be an integer",
            ),
            (
                r#"{"input_length": 5, "output_length": 1, "hash_ids": [1], "session_id": 1}"#,
                "`session_id`: must be a string",
            ),
            (
                r#"{"input_length": 5, "output_length": 1, "hash_ids": [1], "delay": 1, "delay_ms": 2}"#,
                "`delay_ms`: give `delay` or its alias `delay_ms`, not both",
            ),
            (
                r#"{"input_length": 5, "output_length": 1, "hash_ids": [1], "delay": "x"}"#,
                "`delay`: must be a number of milliseconds",
            ),
            (
                r#"{"timestamp": "x", "input_length": 5, "output_length": 1, "hash_ids": [1]}"#,
                "`timestamp`: must be a number",
            ),
            (
                r#"{"input_length": 0, "output_length": 1, "hash_ids": [1]}"#,
                "`input_length`: must be positive",
            ),
            (
                r#"{"input_length": 5, "output_length": 1}"#,
                "`hash_ids`: missing",
            ),
            ("[1, 2]", "expected a JSON object"),
        ];
        let ok = r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#;
        for (line, expected) in cases {
            let e = first_error(&format!("{ok}\n\n{line}"));
            assert!(e.starts_with("t.jsonl:3: "), "{e}");
            assert!(e.contains(expected), "{e} should contain {expected}");
        }
    }
}
