//! Which prompt tokens of a trace no other row holds: a quick count over the whole file before
//! a replay, so that blocks nobody else can ever look up stay out of the hash indexes.
//!
//! A mooncake row's prompt is its hash ids, each a run of one token (`id as u32`). A block
//! whose tokens include a token no other row has cannot be in any other request's prompt,
//! and neither can any block after it (a sequence hash commits to its whole prefix). The
//! count only has to be safe one way: a token it calls unshared must be; calling a shared
//! one unshared would change a run, calling an unshared one shared only costs time. So a
//! line it cannot read for certain (an escape, a second `"hash_ids"`, anything but plain
//! whole numbers in the array) makes it give up on the whole trace, and tokens are counted
//! in a table where two tokens may share a counter (both then count as shared).

use memchr::memmem;
use std::io::BufRead;

/// The key a line's ids follow, quotes included: in valid JSON without escapes these bytes
/// can only be a key.
const KEY: &[u8] = b"\"hash_ids\"";

/// Counters in the table at least and at most (as a power of two). A trace of `n` bytes
/// holds at most `n / 2` ids ("1," each), so a table of that many counters rarely pairs two
/// tokens; the cap keeps it at 2 × 16 MiB, of which only the pages its tokens land on are
/// ever touched (dense ids, as in Mooncake's traces, touch the first few).
const MIN_COUNTERS_LOG2: u32 = 12;
const MAX_COUNTERS_LOG2: u32 = 27;

/// How often each token occurs in a trace's prompts: never, once, or more (see the module).
pub struct TokenCounts {
    /// Bit `i`: a token filed under `i` occurs.
    seen: Vec<u64>,
    /// Bit `i`: tokens filed under `i` occur twice or more.
    repeated: Vec<u64>,
    mask: u64,
}

impl TokenCounts {
    /// Counts the hash ids of every line of the first `bytes` bytes of `trace`. None when
    /// some line cannot be read for certain.
    pub fn scan(trace: impl BufRead, bytes: u64) -> Option<TokenCounts> {
        let mut counts = TokenCounts::sized_for(bytes);
        let key = memmem::Finder::new(KEY);
        let mut line = Vec::new();
        let mut trace = trace.take(bytes);
        // One line per iteration, each at least a byte of at most `bytes`: bounded.
        loop {
            line.clear();
            match trace.read_until(b'\n', &mut line) {
                Ok(0) => return Some(counts),
                Ok(_) => counts.count_line(&line, &key)?,
                Err(_) => return None,
            }
        }
    }

    fn sized_for(bytes: u64) -> TokenCounts {
        let log2 = (bytes / 2)
            .max(1)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(MIN_COUNTERS_LOG2, MAX_COUNTERS_LOG2);
        let words = 1usize << (log2 - 6);
        TokenCounts {
            seen: vec![0; words],
            repeated: vec![0; words],
            mask: (1u64 << log2) - 1,
        }
    }

    /// Counts one line's ids; None if the line is not one it can read for certain. A line
    /// without the key names no ids (a blank line, or an invalid row the run refuses).
    fn count_line(&mut self, line: &[u8], key: &memmem::Finder) -> Option<()> {
        if memchr::memchr(b'\\', line).is_some() {
            return None;
        }
        let mut found = key.find_iter(line);
        let Some(at) = found.next() else {
            return Some(());
        };
        if found.next().is_some() {
            return None;
        }
        let after_key = skip_space(&line[at + KEY.len()..]).strip_prefix(b":")?;
        let ids = skip_space(after_key).strip_prefix(b"[")?;
        self.count_ids(ids)
    }

    /// Counts the ids of an array's text after its `[`: whole numbers separated by commas,
    /// spaces anywhere between them, up to the `]`. None on anything else.
    fn count_ids(&mut self, text: &[u8]) -> Option<()> {
        let mut value: u64 = 0;
        // In a number, or past one and before its comma.
        let mut number = false;
        // Past a number and the space after it: only a comma or the bracket may follow.
        let mut spaced = false;
        let mut after_comma = false;
        // One byte per iteration: bounded by the line.
        for &byte in text {
            match byte {
                b'0'..=b'9' if !spaced => {
                    value = value.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
                    number = true;
                }
                b',' if number => {
                    self.count(token_of(value));
                    (value, number, spaced, after_comma) = (0, false, false, true);
                }
                b']' if number || !after_comma => {
                    if number {
                        self.count(token_of(value));
                    }
                    return Some(());
                }
                b' ' | b'\t' | b'\r' | b'\n' => spaced = number,
                _ => return None,
            }
        }
        None
    }

    fn count(&mut self, token: u32) {
        let (word, bit) = self.place(token);
        if self.seen[word] & bit != 0 {
            self.repeated[word] |= bit;
        }
        self.seen[word] |= bit;
    }

    fn place(&self, token: u32) -> (usize, u64) {
        let filed = u64::from(token) & self.mask;
        ((filed >> 6) as usize, 1 << (filed & 63))
    }

    /// Whether `token` occurs in one row of the trace only (or in none: a row the scan did
    /// not see cannot be in the run).
    pub fn is_unshared(&self, token: u32) -> bool {
        let (word, bit) = self.place(token);
        self.repeated[word] & bit == 0
    }

    /// The first prompt token, as an offset, from which a row with `hash_ids` (each
    /// `tokens_per_hash` tokens) holds a token no other row has; None if it has none.
    pub fn unshared_from_token(&self, hash_ids: &[u64], tokens_per_hash: u64) -> Option<u64> {
        let first = hash_ids
            .iter()
            .position(|&id| self.is_unshared(token_of(id)))?;
        Some((first as u64).saturating_mul(tokens_per_hash))
    }
}

/// The token a hash id's blocks are made of (as a prompt is built from its ids).
fn token_of(id: u64) -> u32 {
    id as u32
}

fn skip_space(text: &[u8]) -> &[u8] {
    match text
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
    {
        Some(at) => &text[at..],
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(text: &str) -> Option<TokenCounts> {
        TokenCounts::scan(text.as_bytes(), text.len() as u64)
    }

    #[test]
    fn a_token_in_one_row_is_unshared_and_one_in_two_rows_is_not() {
        let c = counts(
            "{\"timestamp\": 0, \"hash_ids\": [1, 2, 3]}\n{\"timestamp\": 1, \"hash_ids\":[1,2,4]}\n",
        )
        .unwrap();
        assert!(!c.is_unshared(1) && !c.is_unshared(2));
        assert!(c.is_unshared(3) && c.is_unshared(4));
        assert_eq!(c.unshared_from_token(&[1, 2, 3], 512), Some(1024));
        assert_eq!(c.unshared_from_token(&[1, 2], 512), None);
    }

    #[test]
    fn an_id_twice_in_one_row_is_shared() {
        // Its second run of tokens is another block's: counted as another row's would be.
        let c = counts("{\"hash_ids\": [7, 8, 7]}\n").unwrap();
        assert!(!c.is_unshared(7));
        assert!(c.is_unshared(8));
    }

    #[test]
    fn ids_are_counted_by_the_token_they_make() {
        // 2^32 + 5 makes token 5, as id 5 does.
        let c = counts("{\"hash_ids\": [5]}\n{\"hash_ids\": [4294967301]}\n").unwrap();
        assert!(!c.is_unshared(5));
    }

    #[test]
    fn a_line_it_cannot_read_for_certain_gives_up_on_the_trace() {
        for line in [
            "{\"hash\\u005fids\": [1]}",
            "{\"hash_ids\": [1], \"x\": {\"hash_ids\": [2]}}",
            "{\"hash_ids\": [1.0]}",
            "{\"hash_ids\": [-1]}",
            "{\"hash_ids\": 3}",
            "{\"hash_ids\": [1 2]}",
            "{\"hash_ids\": [99999999999999999999]}",
        ] {
            let text = format!("{{\"hash_ids\": [9]}}\n{line}\n");
            assert!(counts(&text).is_none(), "{line}");
        }
    }

    #[test]
    fn lines_without_ids_count_nothing() {
        let c = counts("\n{\"timestamp\": 1}\n{\"hash_ids\": []}\n{\"hash_ids\": [3]}").unwrap();
        assert!(c.is_unshared(3));
    }

    #[test]
    fn tokens_filed_together_count_as_shared() {
        // The smallest table files token t and t + 4096 under one counter.
        let c = counts("{\"hash_ids\": [1]}\n{\"hash_ids\": [4097]}\n").unwrap();
        assert!(!c.is_unshared(1) && !c.is_unshared(4097));
    }
}
