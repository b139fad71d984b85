//! One CSV row built field by field in a reused buffer, so that result files with a row per
//! request are written without an allocation per field.

use crate::time::{SimTime, write_ms, write_u64};
use std::fmt::Write as _;

/// The fields of one row: their text back to back, and where each ends.
#[derive(Default)]
pub(crate) struct CsvRow {
    text: String,
    ends: Vec<usize>,
}

impl CsvRow {
    /// Starts a new row.
    pub(crate) fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }

    fn end(&mut self) {
        self.ends.push(self.text.len());
    }

    pub(crate) fn text(&mut self, s: &str) {
        self.text.push_str(s);
        self.end();
    }

    pub(crate) fn u64(&mut self, n: u64) {
        write_u64(&mut self.text, n);
        self.end();
    }

    /// A time as `format_ms` writes it.
    pub(crate) fn ms(&mut self, time: SimTime) {
        write_ms(&mut self.text, time.as_ns());
        self.end();
    }

    /// A time, or an empty field.
    pub(crate) fn opt_ms(&mut self, time: Option<SimTime>) {
        if let Some(time) = time {
            write_ms(&mut self.text, time.as_ns());
        }
        self.end();
    }

    /// Anything `Display`, as `to_string` writes it.
    pub(crate) fn display(&mut self, value: impl std::fmt::Display) {
        write!(self.text, "{value}").expect("writing to a String");
        self.end();
    }

    /// Writes the row as one CSV record (to a file's writer, when a file streams).
    pub(crate) fn write<W: std::io::Write>(&self, w: &mut csv::Writer<W>) -> csv::Result<()> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        let fields = starts.zip(&self.ends).map(|(a, &b)| &self.text[a..b]);
        w.write_record(fields)
    }
}
