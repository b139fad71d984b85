//! One CSV row built field by field as the line a CSV writer would write, in a reused
//! buffer, so that result files with a row per request are written without an allocation
//! per field or a second pass over each field.

use crate::time::{SimTime, write_ms, write_u64};
use std::fmt::Write as _;

/// One row's line as the `csv` crate's default writer writes it (comma-separated; a field
/// quoted, its quotes doubled, only when it holds a comma, a quote or a line break; `\n` at
/// the end), and how many fields it has. Numbers never need quotes, so they are written
/// straight into the line; only text is looked at.
#[derive(Default)]
pub(crate) struct CsvRow {
    line: Vec<u8>,
    fields: usize,
    /// A `Display` field's text, before it is quoted into the line.
    scratch: String,
}

impl CsvRow {
    /// Starts a new row.
    pub(crate) fn clear(&mut self) {
        self.line.clear();
        self.fields = 0;
    }

    /// Starts the next field.
    fn next_field(&mut self) {
        if self.fields > 0 {
            self.line.push(b',');
        }
        self.fields += 1;
    }

    pub(crate) fn text(&mut self, s: &str) {
        self.next_field();
        if !s.bytes().any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n')) {
            self.line.extend_from_slice(s.as_bytes());
            return;
        }
        self.line.push(b'"');
        for (i, part) in s.split('"').enumerate() {
            if i > 0 {
                self.line.extend_from_slice(b"\"\"");
            }
            self.line.extend_from_slice(part.as_bytes());
        }
        self.line.push(b'"');
    }

    pub(crate) fn u64(&mut self, n: u64) {
        self.next_field();
        write_u64(&mut self.line, n);
    }

    /// A time as `format_ms` writes it.
    pub(crate) fn ms(&mut self, time: SimTime) {
        self.next_field();
        write_ms(&mut self.line, time.as_ns());
    }

    /// A time, or an empty field.
    pub(crate) fn opt_ms(&mut self, time: Option<SimTime>) {
        self.next_field();
        if let Some(time) = time {
            write_ms(&mut self.line, time.as_ns());
        }
    }

    /// Anything `Display`, as `to_string` writes it (and quoted as text is).
    pub(crate) fn display(&mut self, value: impl std::fmt::Display) {
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        write!(text, "{value}").expect("writing to a String");
        self.text(&text);
        self.scratch = text;
    }

    /// Appends the row's line to `out`. Every row of a file has as many fields as its header
    /// (`fields`), as the `csv` writer required: a row of another shape is a bug.
    pub(crate) fn write(&self, out: &mut Vec<u8>, fields: usize) {
        assert_eq!(
            self.fields, fields,
            "a CSV row of another shape than its header"
        );
        // A lone empty field is an empty line, which a reader skips: the `csv` writer quotes it.
        match self.line.is_empty() && fields == 1 {
            true => out.extend_from_slice(b"\"\""),
            false => out.extend_from_slice(&self.line),
        }
        out.push(b'\n');
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

    /// One field of a row: text, a count, or an instant (or none) in ns.
    #[derive(Clone, Debug)]
    enum Field {
        Text(String),
        Count(u64),
        Instant(Option<u64>),
    }

    /// The `csv` crate's default writer: the bytes a row must come out as.
    fn written_by_the_csv_crate(rows: &[Vec<Field>]) -> Vec<u8> {
        let mut w = csv::Writer::from_writer(Vec::new());
        for fields in rows {
            let texts = fields.iter().map(|field| match field {
                Field::Text(s) => s.clone(),
                Field::Count(n) => n.to_string(),
                Field::Instant(ns) => ns.map_or(String::new(), crate::time::format_ms),
            });
            w.write_record(texts).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn written_by_csv_row(rows: &[Vec<Field>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut row = CsvRow::default();
        for fields in rows {
            row.clear();
            for field in fields {
                match field {
                    Field::Text(s) => row.text(s),
                    Field::Count(n) => row.u64(*n),
                    Field::Instant(Some(ns)) => row.ms(SimTime::from_ns(*ns)),
                    Field::Instant(None) => row.opt_ms(None),
                }
            }
            row.write(&mut out, fields.len());
        }
        out
    }

    fn field() -> impl proptest::strategy::Strategy<Value = Field> {
        use proptest::prelude::*;
        prop_oneof![
            // Commas, quotes, both line breaks, spaces and more than ASCII.
            "[a-c ,\"\r\né]{0,6}".prop_map(Field::Text),
            any::<u64>().prop_map(Field::Count),
            proptest::option::of(0..u64::MAX - 1).prop_map(Field::Instant),
        ]
    }

    proptest::proptest! {
        /// A row is the line the `csv` crate would write: the same quoting, separators and
        /// line ends, whatever the fields hold.
        #[test]
        fn a_row_is_the_line_the_csv_crate_writes(
            shape in 1..6usize,
            cells in proptest::collection::vec(field(), 0..24),
        ) {
            let rows: Vec<Vec<Field>> = cells.chunks(shape).map(<[Field]>::to_vec)
                .filter(|row| row.len() == shape)
                .collect();
            proptest::prop_assert_eq!(written_by_csv_row(&rows), written_by_the_csv_crate(&rows));
        }
    }

    /// A row of one empty field is quoted, so that it is not an empty line a reader skips.
    #[test]
    fn a_lone_empty_field_is_quoted_as_the_csv_crate_does() {
        let rows = vec![vec![Field::Text(String::new())]];
        assert_eq!(written_by_csv_row(&rows), b"\"\"\n");
        assert_eq!(written_by_csv_row(&rows), written_by_the_csv_crate(&rows));
    }

    #[test]
    #[should_panic(expected = "another shape")]
    fn a_row_of_another_shape_than_its_header_is_a_bug() {
        let mut row = CsvRow::default();
        row.u64(1);
        row.write(&mut Vec::new(), 2);
    }
}
