//! What an output file holds: its bytes, or a pure exporter that writes them straight into
//! the staged file, hashed on the way (for the markers' proofs), so that a large file is
//! never held whole in memory and is formatted only once; a mid-sized one may be formatted
//! on a second thread while the other files are written.

use super::proof::Proof;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::ops::RangeInclusive;
use std::panic::resume_unwind;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::thread::Scope;
use xxhash_rust::xxh3::Xxh3Default;

/// A writer of a file's bytes: deterministic, so a rerun writes the same bytes. Shareable
/// with another thread, which may run it while this one writes the other files.
type Exporter<'a> = dyn Fn(&mut dyn Write) -> io::Result<()> + Send + Sync + 'a;

/// Rows of a streamed body worth formatting ahead, on a thread of its own, while the other
/// files are written: from a few hundred (a thread costs about 30 µs to start and join; 256
/// rows of `requests.csv` take about 0.1 ms to format) up to as many as are cheap to hold
/// whole in memory (8192 rows of about 150 bytes, 1.2 MB; larger bodies stream to disk).
const AHEAD_ROWS: RangeInclusive<usize> = 256..=8192;

/// The contents of one output file.
pub enum FileBody<'a> {
    Bytes(Vec<u8>),
    /// Written row by row (requests.csv of a million requests is 150 MB), `rows` of them if
    /// known (0 if not).
    Streamed {
        export: Box<Exporter<'a>>,
        rows: usize,
    },
    /// Being formatted on a thread of the caller's ([`FileBody::start_ahead`]).
    Started(Formatting<'a>),
}

/// A body being formatted on another thread (its bytes are taken once, when it is written).
pub struct Formatting<'a>(Box<dyn Formatted + 'a>);

/// What [`Formatting`] holds: the bytes of a body formatted elsewhere, taken once.
pub(super) trait Formatted: Sync {
    fn take(&self) -> io::Result<Vec<u8>>;
}

/// Waits for the thread formatting a body and hands over its bytes (or re-raises its panic).
type Join<'a> = Box<dyn FnOnce() -> io::Result<Vec<u8>> + Send + 'a>;

/// A thread's join, until its bytes are taken.
impl Formatted for Mutex<Option<Join<'_>>> {
    fn take(&self) -> io::Result<Vec<u8>> {
        let join = self.lock().unwrap_or_else(PoisonError::into_inner).take();
        join.expect("a started body is written once")()
    }
}

impl From<Vec<u8>> for FileBody<'_> {
    fn from(bytes: Vec<u8>) -> Self {
        FileBody::Bytes(bytes)
    }
}

impl<'a> FileBody<'a> {
    /// A body written by `export` (deterministic: each run of it writes the same bytes).
    pub fn streamed<E: Into<io::Error>>(
        export: impl Fn(&mut dyn Write) -> Result<(), E> + Send + Sync + 'a,
    ) -> Self {
        Self::streamed_rows(0, export)
    }

    /// [`Self::streamed`] for a body of `rows` rows, which says whether formatting it on a
    /// second thread pays.
    pub fn streamed_rows<E: Into<io::Error>>(
        rows: usize,
        export: impl Fn(&mut dyn Write) -> Result<(), E> + Send + Sync + 'a,
    ) -> Self {
        FileBody::Streamed {
            export: Box::new(move |out| export(out).map_err(Into::into)),
            rows,
        }
    }

    /// Starts formatting the body now, on a thread of `scope`, if it is one worth formatting
    /// ahead ([`AHEAD_ROWS`]): the formatting then overlaps whatever the caller does before
    /// it writes the files (a replay's metrics, its other files), not only their writing.
    /// Any other body is kept as it is.
    pub fn start_ahead<'scope>(self, scope: &'scope Scope<'scope, '_>) -> FileBody<'scope>
    where
        'a: 'scope,
    {
        let FileBody::Streamed { export, rows } = self else {
            return self;
        };
        if !AHEAD_ROWS.contains(&rows) {
            return FileBody::Streamed { export, rows };
        }
        let thread = scope.spawn(move || {
            let mut bytes = Vec::new();
            export(&mut bytes).map(|()| bytes)
        });
        let join: Join<'scope> =
            Box::new(move || thread.join().unwrap_or_else(|panic| resume_unwind(panic)));
        FileBody::Started(Formatting(Box::new(Mutex::new(Some(join)))))
    }

    /// The whole contents in memory (for tests and small files).
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        self.contents().render()
    }

    pub(super) fn contents(&self) -> Contents<'_> {
        match self {
            FileBody::Bytes(bytes) => Contents::Bytes(bytes),
            FileBody::Streamed { export, rows } => match AHEAD_ROWS.contains(rows) {
                true => Contents::Ahead(export.as_ref()),
                false => Contents::Streamed(export.as_ref()),
            },
            FileBody::Started(formatting) => Contents::Started(formatting.0.as_ref()),
        }
    }
}

/// A file's contents as the stage writes them: borrowed bytes, or their exporter, to run
/// while the file is written or (`Ahead`) on a second thread beforehand.
#[derive(Copy, Clone)]
pub(super) enum Contents<'b> {
    Bytes(&'b [u8]),
    Streamed(&'b Exporter<'b>),
    Ahead(&'b Exporter<'b>),
    /// Being formatted on another thread already.
    Started(&'b (dyn Formatted + 'b)),
}

impl Contents<'_> {
    /// The whole contents in memory, formatted now.
    pub(super) fn render(self) -> io::Result<Vec<u8>> {
        match self {
            Contents::Bytes(bytes) => Ok(bytes.to_vec()),
            Contents::Streamed(export) | Contents::Ahead(export) => {
                let mut bytes = Vec::new();
                export(&mut bytes)?;
                Ok(bytes)
            }
            Contents::Started(formatted) => formatted.take(),
        }
    }

    /// Writes the contents to a new file at `path`; returns the proof of what it wrote.
    pub(super) fn write_file(self, path: &Path) -> io::Result<Proof> {
        match self {
            Contents::Bytes(bytes) => {
                fs::write(path, bytes)?;
                Ok(Proof::of(bytes))
            }
            Contents::Streamed(export) | Contents::Ahead(export) => {
                let file = BufWriter::with_capacity(64 << 10, fs::File::create(path)?);
                let mut out = HashingWriter::new(file);
                export(&mut out)?;
                out.inner.flush()?;
                Ok(out.proof())
            }
            Contents::Started(formatted) => Contents::Bytes(&formatted.take()?).write_file(path),
        }
    }
}

/// Passes bytes on to `inner`, hashing and counting them.
struct HashingWriter<W> {
    inner: W,
    hasher: Xxh3Default,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Xxh3Default::new(),
            bytes: 0,
        }
    }

    fn proof(&self) -> Proof {
        Proof::from_parts(self.bytes, self.hasher.digest128())
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
