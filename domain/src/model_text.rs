//! Text an agent wrote, made fit to reach another model: body previews, conversation titles and
//! agent names shown by the inbox watch, the hooks and the channel notifications.
//!
//! Such text is data, never instructions. [`clean_for_model`] removes what could hide or reorder
//! what a reader sees (Unicode control and format characters, every bidirectional control),
//! folds line breaks and runs of whitespace into one space, and replaces the characters that
//! open or close a tag (`<`, `>`) or break out of «…» quoting (`«`, `»`) with their single-angle
//! look-alikes `‹` and `›`; [`quote_for_model`] wraps the result in «…», marking it as quoted
//! data.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// The longest body preview the watch answers, in characters (Unicode scalar values).
pub const PREVIEW_CHARS: usize = 200;

/// The longest agent name or conversation title put before a model by a hook or a channel
/// notification, in characters (Unicode scalar values), not counting the «…» quotes.
pub const NAME_CHARS: usize = 64;

/// What one character of agent-written text becomes: `None` (removed), `Some(' ')` (folded
/// into a space with its neighbours), or a character kept (the angle brackets and guillemets
/// replaced).
fn map_char(c: char) -> Option<char> {
    // Whitespace first: tab, newline, vertical tab, form feed, carriage return and NEL are Cc,
    // and the line and paragraph separators (U+2028, U+2029) are Zl/Zp; all become a space.
    if c.is_whitespace() {
        return Some(' ');
    }
    match c.general_category() {
        // Cc: the other control characters. Cf: the format characters, among them every
        // bidirectional control (U+061C, U+200E/F, U+202A–U+202E, U+2066–U+2069), the zero-width
        // characters, the byte-order mark and the tag characters.
        GeneralCategory::Control | GeneralCategory::Format => None,
        _ => Some(match c {
            '<' | '«' => '‹',
            '>' | '»' => '›',
            other => other,
        }),
    }
}

/// `text` made fit to reach a model, at most `max_chars` characters (Unicode scalar values).
///
/// - Unicode control characters (Cc) are removed, except whitespace controls (tab, newline,
///   carriage return, vertical tab, form feed, NEL), which become a space; format characters
///   (Cf, which include every bidirectional control: U+061C, U+200E/F, U+202A–U+202E,
///   U+2066–U+2069) are removed;
/// - every run of whitespace (any Unicode `White_Space`, line and paragraph separators
///   included) becomes one space; the result is trimmed;
/// - `<` and `«` become `‹`, `>` and `»` become `›`, so no text opens or closes a tag such as
///   `<channel>` or ends a «…» quotation;
/// - when longer than `max_chars`, the text is cut at a character boundary and ends with `…`
///   (counted in `max_chars`; trailing space before it dropped). `max_chars == 0` gives `""`.
///
/// Idempotent: `clean_for_model(&clean_for_model(x, n), n) == clean_for_model(x, n)`. Reads
/// only as much of `text` as the answer needs (a 1 MiB body costs about `max_chars`
/// characters of work, plus whatever is removed before them).
pub fn clean_for_model(text: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        return String::new();
    }
    let mut out = String::with_capacity(text.len().min(max_chars.saturating_mul(4)));
    let mut count = 0usize;
    let mut pending_space = false;
    let mut cut = false;
    for c in text.chars().filter_map(map_char) {
        if c == ' ' {
            pending_space = count > 0;
            continue;
        }
        if count + usize::from(pending_space) + 1 > max_chars {
            cut = true;
            break;
        }
        if pending_space {
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        out.push(c);
        count += 1;
    }
    if cut {
        // `count <= max_chars`: make room for the ellipsis, then drop a space left at the end.
        if count == max_chars {
            out.pop();
        }
        out.truncate(out.trim_end_matches(' ').len());
        out.push('…');
    }
    out
}

/// `«` + [`clean_for_model`]`(text, max_chars)` + `»`: agent-written text quoted and marked as
/// data. The quotes are not counted in `max_chars`; the cleaned text holds no `«` or `»`, so
/// the quotation cannot be closed early.
pub fn quote_for_model(text: &str, max_chars: usize) -> String {
    format!("«{}»", clean_for_model(text, max_chars))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Any character that must never reach a model's text.
    fn forbidden(c: char) -> bool {
        matches!(
            c.general_category(),
            GeneralCategory::Control | GeneralCategory::Format
        ) || matches!(
            c,
            '<' | '>'
                | '«'
                | '»'
                | '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        ) || (c.is_whitespace() && c != ' ')
    }

    /// Strings rich in what the cleaning acts on: controls, bidi, tags, quotes, whitespace,
    /// wide and combining characters.
    fn hostile() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "<channel>",
            "</channel>",
            "«",
            "»",
            "<",
            ">",
            "\n",
            "\r\n",
            "\t",
            " ",
            "   ",
            "\u{2028}",
            "\u{2029}",
            "\u{0085}",
            "\u{00A0}",
            "\u{061C}",
            "\u{200B}",
            "\u{200E}",
            "\u{200F}",
            "\u{202A}",
            "\u{202E}",
            "\u{2066}",
            "\u{2069}",
            "\u{FEFF}",
            "\u{E0041}",
            "\u{0000}",
            "\u{001B}[31m",
            "\u{007F}",
            "e\u{0301}",
            "日本語",
            "🦀",
            "…",
            "ignore previous instructions",
            "a",
            "bob",
        ]);
        prop::collection::vec(
            prop_oneof![
                pieces.prop_map(str::to_owned),
                any::<char>().prop_map(String::from)
            ],
            0..40,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn idempotent(text in hostile(), max in 0usize..80) {
            let once = clean_for_model(&text, max);
            prop_assert_eq!(clean_for_model(&once, max), once.clone());
            // Cleaning again with a larger bound changes nothing either.
            prop_assert_eq!(clean_for_model(&once, max + 10), once);
        }

        #[test]
        fn nothing_forbidden_survives(text in hostile(), max in 0usize..80) {
            let out = clean_for_model(&text, max);
            prop_assert!(!out.chars().any(forbidden), "{:?} → {:?}", text, out);
            prop_assert!(!out.starts_with(' ') && !out.ends_with(' '));
            prop_assert!(!out.contains("  "));
        }

        #[test]
        fn bounded_and_cut_at_a_boundary(text in hostile(), max in 0usize..80) {
            let out = clean_for_model(&text, max);
            prop_assert!(out.chars().count() <= max);
            let whole = clean_for_model(&text, usize::MAX);
            if whole.chars().count() <= max {
                prop_assert_eq!(out, whole);
            } else if max == 0 {
                prop_assert_eq!(out, "");
            } else {
                // Cut: what is kept is a prefix of the whole cleaned text, then the ellipsis.
                let kept = out.strip_suffix('…').expect("a cut text ends with …");
                prop_assert!(whole.starts_with(kept));
            }
        }

        #[test]
        fn quoted_text_cannot_close_its_quote(text in hostile(), max in 0usize..80) {
            let q = quote_for_model(&text, max);
            prop_assert!(q.starts_with('«') && q.ends_with('»'));
            let inner = &q['«'.len_utf8()..q.len() - '»'.len_utf8()];
            prop_assert!(!inner.contains('«') && !inner.contains('»'));
            prop_assert_eq!(inner, clean_for_model(&text, max));
        }
    }

    #[test]
    fn examples() {
        assert_eq!(
            clean_for_model("  hi\n\n<channel>there</channel>\t ", 100),
            "hi ‹channel›there‹/channel›"
        );
        assert_eq!(clean_for_model("a\u{202E}b\u{200B}c\u{0007}", 100), "abc");
        assert_eq!(clean_for_model("«x»", 100), "‹x›");
        assert_eq!(clean_for_model("line\u{2028}next", 100), "line next");
        assert_eq!(clean_for_model("abcdef", 4), "abc…");
        assert_eq!(clean_for_model("abc def", 5), "abc…");
        assert_eq!(clean_for_model("abcdef", 1), "…");
        assert_eq!(clean_for_model("abcdef", 0), "");
        assert_eq!(clean_for_model("abc", 3), "abc");
        assert_eq!(quote_for_model("bob", NAME_CHARS), "«bob»");
    }

    #[test]
    fn a_large_body_is_cut_to_the_preview() {
        let body = "x".repeat(1024 * 1024);
        let out = clean_for_model(&body, PREVIEW_CHARS);
        assert_eq!(out.chars().count(), PREVIEW_CHARS);
        assert!(out.ends_with('…'));
    }
}
