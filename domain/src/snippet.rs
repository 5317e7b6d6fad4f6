//! Snippets: the part of a body around the first match, as plain text segments, the matched
//! words marked — never markup, so any interface renders them as text.

use serde::{Deserialize, Serialize};

use crate::search_text::{SearchTerms, tokens};

/// A snippet's length, in characters of the body (ellipses not counted).
pub const SNIPPET_CHARS: usize = 200;

/// How many characters before the first match a snippet starts, at most.
const LEAD_CHARS: usize = 40;

/// One piece of a snippet: text as it stands in the body, and whether it is a matched word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnippetSegment {
    /// The text, exactly as in the body (an ellipsis `…` where the snippet was cut).
    pub text: String,
    /// Whether this is a word of the query that matched.
    pub matched: bool,
}

/// The snippet of `body` for `terms`: about [`SNIPPET_CHARS`] characters starting a little
/// before the first occurrence of an included word (or at the start when none occurs: a match
/// by the title alone), cut at word boundaries where it can, `…` where text was left out.
/// Segments alternate between unmatched and matched text; none is empty. Concatenated, they are
/// the body's text from the snippet's start to its end (plus the ellipses).
pub fn snippet(body: &str, terms: &SearchTerms) -> Vec<SnippetSegment> {
    let wanted = terms.included_words();
    let toks = tokens(body);
    let hit = |w: &str| wanted.contains(&w);
    let first = toks.iter().find(|t| hit(&t.word)).map(|t| t.start);
    // Start: LEAD_CHARS before the first match, moved forward to the start of a word.
    let start = match first {
        None => 0,
        Some(at) => {
            let lead = body[..at]
                .char_indices()
                .rev()
                .nth(LEAD_CHARS.saturating_sub(1))
                .map_or(0, |(i, _)| i);
            toks.iter()
                .map(|t| t.start)
                .find(|s| *s >= lead && *s <= at)
                .unwrap_or(at)
        }
    };
    // End: SNIPPET_CHARS after the start, moved back to the end of a word when one ends in it.
    let hard_end = body[start..]
        .char_indices()
        .nth(SNIPPET_CHARS)
        .map_or(body.len(), |(i, _)| start + i);
    let end = if hard_end == body.len() {
        hard_end
    } else {
        toks.iter()
            .map(|t| t.end)
            .filter(|e| *e > start && *e <= hard_end)
            .max()
            .unwrap_or(hard_end)
    };
    let mut out: Vec<SnippetSegment> = Vec::new();
    let mut push = |text: &str, matched: bool| {
        if text.is_empty() {
            return;
        }
        match out.last_mut() {
            Some(last) if last.matched == matched => last.text.push_str(text),
            _ => out.push(SnippetSegment {
                text: text.to_owned(),
                matched,
            }),
        }
    };
    if start > 0 {
        push("…", false);
    }
    let mut at = start;
    for t in toks
        .iter()
        .filter(|t| t.start >= start && t.end <= end && hit(&t.word))
    {
        push(&body[at..t.start], false);
        push(&body[t.start..t.end], true);
        at = t.end;
    }
    push(&body[at..end], false);
    if end < body.len() {
        push("…", false);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn terms(s: &str) -> SearchTerms {
        SearchTerms::parse(s).unwrap()
    }

    fn seg(text: &str, matched: bool) -> SnippetSegment {
        SnippetSegment {
            text: text.to_owned(),
            matched,
        }
    }

    #[test]
    fn matched_words_are_marked_in_place() {
        assert_eq!(
            snippet("The Kiwi is ripe; kiwis are not kiwi.", &terms("kiwi")),
            [
                seg("The ", false),
                seg("Kiwi", true),
                seg(" is ripe; kiwis are not ", false),
                seg("kiwi", true),
                seg(".", false)
            ]
        );
    }

    #[test]
    fn a_long_body_is_cut_around_the_first_match_with_ellipses() {
        let body = format!("{} needle {}", "word ".repeat(100), "tail ".repeat(100));
        let s = snippet(&body, &terms("needle"));
        assert_eq!(s.len(), 3);
        assert!(
            s[0].text.starts_with("…word") && !s[0].matched,
            "cut at a word's start"
        );
        assert_eq!(s[1], seg("needle", true));
        assert!(
            s[2].text.ends_with("tail…") && !s[2].matched,
            "cut at a word's end"
        );
        let shown: usize = s.iter().map(|x| x.text.chars().count()).sum();
        assert!(shown <= SNIPPET_CHARS + 2, "{shown}");
    }

    #[test]
    fn a_title_only_match_shows_the_start_of_the_body_unmarked() {
        assert_eq!(
            snippet("nothing here", &terms("kiwi")),
            [seg("nothing here", false)]
        );
        assert!(snippet("", &terms("kiwi")).is_empty());
    }

    proptest! {
        #[test]
        fn segments_are_body_text_and_never_empty(body in "\\PC{0,400}", word in "[a-z]{1,3}") {
            let s = snippet(&body, &terms(&word));
            let mut joined = String::new();
            for (i, x) in s.iter().enumerate() {
                prop_assert!(!x.text.is_empty());
                if i > 0 { prop_assert_ne!(s[i - 1].matched, x.matched); }
                if x.matched { prop_assert_eq!(x.text.to_lowercase(), word.clone()); }
                joined.push_str(&x.text);
            }
            let j = joined.as_str();
            let front = [j, j.strip_prefix('…').unwrap_or(j)];
            prop_assert!(front.iter().any(|f| body.contains(f) || body.contains(f.strip_suffix('…').unwrap_or(f))));
        }
    }
}
