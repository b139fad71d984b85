//! Characters that act on a display rather than being read (terminal controls, bidi
//! overrides, zero-width characters), and text with them escaped: what routersim prints and
//! which names may become paths; and counts of things in words.

use std::borrow::Cow;

/// Whether `c` would act on the terminal or on the text's direction rather than be read: a
/// control character other than newline and tab, or an invisible formatting character (bidi
/// embeddings, overrides and isolates, zero-width spaces and joiners, the byte-order mark).
pub fn acts_on_display(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{00AD}'
                | '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// `text` with every character that [`acts_on_display`] written as its escape (`\u{1b}`).
pub fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_display) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match acts_on_display(c) {
            true => out.extend(c.escape_unicode()),
            false => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `n` and `noun`, the noun plural unless `n` is 1: `1 expectation`, `3 expectations`.
pub fn count_of(n: usize, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        _ => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thing_is_counted_in_the_singular() {
        assert_eq!(count_of(1, "expectation"), "1 expectation");
        assert_eq!(count_of(0, "expectation"), "0 expectations");
        assert_eq!(count_of(9, "expectation"), "9 expectations");
    }

    #[test]
    fn control_and_bidi_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(shown("gold\tp99\n"), "gold\tp99\n");
        assert_eq!(shown("née → ✓"), "née → ✓");
        assert_eq!(
            shown("a\u{1b}]0;pwned\u{7}b\u{0}c"),
            "a\\u{1b}]0;pwned\\u{7}b\\u{0}c"
        );
        assert_eq!(shown("gold\u{202E}dlog"), "gold\\u{202e}dlog");
        assert_eq!(shown("zero\u{200B}width"), "zero\\u{200b}width");
    }
}
