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

/// Rows formatted as one piece. A file of more rows than this formats its chunks on the
/// thread pool (both cores of a small machine), a bounded window of them at a time.
const ROWS_PER_CHUNK: usize = 8192;

/// Chunks formatted at once: about 8 × 8192 rows of about 150 bytes, 10 MB, whatever the run.
const CHUNKS_PER_WINDOW: usize = 8;

/// Room reserved per row: a `requests.csv` row is about 140 bytes. Reserved memory that is
/// never written costs nothing, so the guess errs high.
const ROW_BYTES_GUESS: usize = 160;

/// Writes the rows of `items` to `out` in order. `format(first, chunk, buf)` appends the CSV
/// rows of `chunk`, whose first item is `items[first]`, to `buf`; being deterministic, the
/// bytes are the same however the items are chunked. Up to [`ROWS_PER_CHUNK`] items are
/// formatted on this thread alone; more in parallel, window by window, so memory stays
/// bounded by a window's text.
pub(crate) fn write_chunked<T: Sync>(
    out: &mut dyn std::io::Write,
    items: &[T],
    format: impl Fn(usize, &[T], &mut Vec<u8>) -> csv::Result<()> + Sync,
) -> csv::Result<()> {
    use rayon::prelude::*;
    if items.len() <= ROWS_PER_CHUNK {
        // Room for the whole text at once, rather than copies of it at every doubling.
        let mut buf = Vec::with_capacity(items.len() * ROW_BYTES_GUESS);
        format(0, items, &mut buf)?;
        out.write_all(&buf)?;
        return Ok(());
    }
    let window_rows = ROWS_PER_CHUNK * CHUNKS_PER_WINDOW;
    // One window per iteration: bounded by the item count.
    for (w, window) in items.chunks(window_rows).enumerate() {
        let texts = window
            .par_chunks(ROWS_PER_CHUNK)
            .enumerate()
            .map(|(c, chunk)| {
                let mut buf = Vec::with_capacity(chunk.len() * ROW_BYTES_GUESS);
                format(w * window_rows + c * ROWS_PER_CHUNK, chunk, &mut buf).map(|()| buf)
            })
            .collect::<csv::Result<Vec<Vec<u8>>>>()?;
        for text in texts {
            out.write_all(&text)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn chunked_rows_are_the_bytes_of_one_writer_at_every_size() {
        let window = ROWS_PER_CHUNK * CHUNKS_PER_WINDOW;
        for n in [0, 1, ROWS_PER_CHUNK, ROWS_PER_CHUNK + 1, window, window + 3] {
            let items: Vec<u64> = (0..n as u64).map(|i| i * 7).collect();
            let format = |first: usize, chunk: &[u64], buf: &mut Vec<u8>| -> csv::Result<()> {
                for (i, x) in chunk.iter().enumerate() {
                    writeln!(buf, "{},{x}", first + i)?;
                }
                Ok(())
            };
            let mut whole = Vec::new();
            format(0, &items, &mut whole).unwrap();
            let mut chunked = Vec::new();
            write_chunked(&mut chunked, &items, format).unwrap();
            assert!(chunked == whole, "{n} rows chunked differ from one pass");
        }
    }
}
