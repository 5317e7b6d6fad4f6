//! The words of full-text search, defined once for every ledger: how text becomes tokens, what a
//! query says, and what an indexed message holds.
//!
//! Every ledger indexes and matches the tokens made here (Postgres builds its `tsvector` and
//! `tsquery` from them, SQLite hands FTS5 the tokens joined by spaces, memory compares them), so
//! a query finds the same messages on each. A user's text never reaches a store's query parser.

use std::collections::BTreeMap;

use crate::{BusError, BusResult};

/// The longest token that is indexed and may be searched for, in bytes of its lowercase form
/// (longer runs — a hash of 200 hex digits, a base64 blob — are not indexed; a query naming one
/// is `Invalid`).
pub const MAX_TOKEN_BYTES: usize = 128;

/// How much of a body is indexed: its first 32,000 bytes (cut at a character boundary). The
/// rest is neither matched nor shown in snippets.
pub const MAX_INDEXED_BODY_BYTES: usize = 32_000;

/// At most this many words in one query, phrases' words and excluded words included: as many
/// as a text of [`crate::MAX_SEARCH_TEXT_CHARS`] can hold (one-letter words between spaces), so
/// a query of a valid length never has too many.
pub const MAX_QUERY_WORDS: usize = 128;

/// One token of a text: a maximal run of alphanumeric characters (`char::is_alphanumeric`),
/// lowercased (`str::to_lowercase`), with where it stands in the original text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The lowercase form, what is indexed and compared.
    pub word: String,
    /// Byte offset of its first character in the text.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
}

/// The tokens of `text`, in order. Runs whose lowercase form is longer than
/// [`MAX_TOKEN_BYTES`] are left out (they take no position either). Everything that is not
/// alphanumeric separates tokens: `deliver.rs` is `deliver`, `rs`; `e-mail` is `e`, `mail`.
pub fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (c.is_alphanumeric() && i < text.len(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let word = text[s..i].to_lowercase();
                if word.len() <= MAX_TOKEN_BYTES {
                    out.push(Token {
                        word,
                        start: s,
                        end: i,
                    });
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// The words of `text` ([`tokens`]), lowercase, in order.
pub fn words(text: &str) -> Vec<String> {
    tokens(text).into_iter().map(|t| t.word).collect()
}

/// The part of a body that is indexed and kept for snippets: the first
/// [`MAX_INDEXED_BODY_BYTES`] bytes, cut back to a character boundary, with every U+0000
/// replaced by a space (some stores refuse it in text; it is no word either).
pub fn indexed_body(body: &str) -> String {
    let mut cut = body.len().min(MAX_INDEXED_BODY_BYTES);
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    body[..cut].replace('\0', " ")
}

/// A phrase of a query: one or more words that must stand next to each other, in order, in the
/// title or in the body (never across the two).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Phrase(pub Vec<String>);

impl Phrase {
    /// How many times the phrase occurs in `words` (overlapping occurrences counted).
    pub fn count_in(&self, words: &[String]) -> usize {
        let n = self.0.len();
        if n == 0 || words.len() < n {
            return 0;
        }
        words.windows(n).filter(|w| *w == self.0.as_slice()).count()
    }
}

/// What a query asks, parsed from the user's text ([`SearchTerms::parse`]): every `include`
/// phrase must occur in a message (its title or body), no `exclude` phrase may.
///
/// The syntax is the common part of web search engines' (and of Postgres'
/// `websearch_to_tsquery`): words separated by spaces are all required; `"a quoted phrase"`
/// requires those words next to each other; a `-` right before a word or a quote excludes it.
/// There is no `OR` (the word `or` is a word like any other) and no prefix matching. A chunk
/// that holds punctuation (`deliver.rs`, `e-mail`) is the phrase of its words. Case does not
/// matter; characters that are not letters or digits only separate words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchTerms {
    /// Phrases that must all occur, in the order first written, without duplicates.
    pub include: Vec<Phrase>,
    /// Phrases none of which may occur, in the order first written, without duplicates.
    pub exclude: Vec<Phrase>,
}

impl SearchTerms {
    /// Parses `text` (see [`SearchTerms`] for the syntax).
    ///
    /// An excluded phrase holding a word longer than [`MAX_TOKEN_BYTES`] bytes is dropped: such
    /// a word is never indexed, so it excludes nothing.
    ///
    /// Errors ([`BusError::Invalid`]): no word to look for (empty, only punctuation, or only
    /// exclusions); more than [`MAX_QUERY_WORDS`] words; an included word longer than
    /// [`MAX_TOKEN_BYTES`] bytes (it is never indexed, so it could never match).
    pub fn parse(text: &str) -> BusResult<SearchTerms> {
        let mut include: Vec<Phrase> = Vec::new();
        let mut exclude: Vec<Phrase> = Vec::new();
        let mut total = 0usize;
        let mut rest = text;
        loop {
            rest = rest.trim_start();
            if rest.is_empty() {
                break;
            }
            let (negated, body) = match rest.strip_prefix('-') {
                Some(after) if after.starts_with(|c: char| !c.is_whitespace()) => (true, after),
                _ => (false, rest),
            };
            let (chunk, next) = if let Some(quoted) = body.strip_prefix('"') {
                match quoted.find('"') {
                    Some(end) => (&quoted[..end], &quoted[end + 1..]),
                    None => (quoted, ""),
                }
            } else {
                let end = body
                    .find(|c: char| c.is_whitespace() || c == '"')
                    .unwrap_or(body.len());
                (&body[..end], &body[end..])
            };
            rest = next;
            if chunk
                .split(|c: char| !c.is_alphanumeric())
                .any(|run| !run.is_empty() && run.to_lowercase().len() > MAX_TOKEN_BYTES)
            {
                if negated {
                    continue;
                }
                return Err(BusError::invalid(format!(
                    "a search word is longer than {MAX_TOKEN_BYTES} bytes"
                )));
            }
            let phrase = Phrase(words(chunk));
            if phrase.0.is_empty() {
                continue;
            }
            total += phrase.0.len();
            let list = if negated { &mut exclude } else { &mut include };
            if !list.contains(&phrase) {
                list.push(phrase);
            }
        }
        if total > MAX_QUERY_WORDS {
            return Err(BusError::invalid(format!(
                "a search holds at most {MAX_QUERY_WORDS} words"
            )));
        }
        if include.is_empty() {
            return Err(BusError::invalid(
                "a search needs at least one word to find (not only exclusions)",
            ));
        }
        Ok(SearchTerms { include, exclude })
    }

    /// Every word of the included phrases, each once (what a snippet marks).
    pub fn included_words(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for w in self.include.iter().flat_map(|p| p.0.iter()) {
            if !out.contains(&w.as_str()) {
                out.push(w);
            }
        }
        out
    }
}

/// The weight of an occurrence in a conversation's title against one in the body (1.0): a
/// title match counts, at half a body match (a title is shared by every message of its
/// conversation).
pub const TITLE_WEIGHT: f64 = 0.5;

/// One message as the search index holds it: its conversation's title and its indexed body
/// ([`indexed_body`]) as words.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SearchDocument {
    /// The title's words, in order.
    pub title: Vec<String>,
    /// The indexed body's words, in order (empty when the body is gone or was not read).
    pub body: Vec<String>,
}

impl SearchDocument {
    /// The document of a message in a conversation titled `title`, with `body` (`None`: the
    /// body is gone; the message is found by its title only). Only [`indexed_body`] of the body
    /// is indexed.
    pub fn new(title: &str, body: Option<&str>) -> SearchDocument {
        SearchDocument {
            title: words(title),
            body: body.map(|b| words(&indexed_body(b))).unwrap_or_default(),
        }
    }

    /// Whether the document matches `terms`: every included phrase occurs in the title or the
    /// body, no excluded one does.
    pub fn matches(&self, terms: &SearchTerms) -> bool {
        let occurs = |p: &Phrase| p.count_in(&self.title) + p.count_in(&self.body) > 0;
        terms.include.iter().all(occurs) && !terms.exclude.iter().any(occurs)
    }

    /// The memory ledger's rank of a matching document: for each included phrase, its
    /// occurrences in the body plus [`TITLE_WEIGHT`] times its occurrences in the title. Higher
    /// is better; it orders like Postgres' `ts_rank_cd` and SQLite's `bm25` for single phrases
    /// in documents of equal length (the conformance corpus), not in general.
    pub fn score(&self, terms: &SearchTerms) -> f64 {
        terms
            .include
            .iter()
            .map(|p| p.count_in(&self.body) as f64 + TITLE_WEIGHT * p.count_in(&self.title) as f64)
            .sum()
    }

    /// Each distinct word with its 1-based positions and whether each is in the title: title
    /// words at 1..=n, body words from n + 2 (a gap, so no phrase spans the two). What a store
    /// that keeps positions (Postgres' `tsvector`) is given.
    pub fn positions(&self) -> BTreeMap<&str, Vec<(usize, bool)>> {
        let mut out: BTreeMap<&str, Vec<(usize, bool)>> = BTreeMap::new();
        for (i, w) in self.title.iter().enumerate() {
            out.entry(w).or_default().push((i + 1, true));
        }
        let offset = self.title.len() + 2;
        for (i, w) in self.body.iter().enumerate() {
            out.entry(w).or_default().push((offset + i, false));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn phrase(words: &[&str]) -> Phrase {
        Phrase(words.iter().map(|w| (*w).to_owned()).collect())
    }

    #[test]
    fn tokens_are_lowercase_alphanumeric_runs_with_their_offsets() {
        let t = tokens("Fix deliver.rs — ÉTÉ 42x!");
        let w: Vec<&str> = t.iter().map(|t| t.word.as_str()).collect();
        assert_eq!(w, ["fix", "deliver", "rs", "été", "42x"]);
        assert_eq!((t[1].start, t[1].end), (4, 11));
        assert_eq!(&"Fix deliver.rs — ÉTÉ 42x!"[t[3].start..t[3].end], "ÉTÉ");
        assert!(tokens("").is_empty() && tokens(" ,.- ").is_empty());
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(words(&format!("x {long} y")), ["x", "y"]);
    }

    #[test]
    fn the_indexed_body_is_cut_at_a_character_boundary_without_nul() {
        assert_eq!(indexed_body("a\0b"), "a b");
        let body = "é".repeat(MAX_INDEXED_BODY_BYTES);
        let cut = indexed_body(&body);
        assert!(cut.len() <= MAX_INDEXED_BODY_BYTES && cut.len() >= MAX_INDEXED_BODY_BYTES - 1);
    }

    #[test]
    fn a_query_is_required_words_phrases_and_exclusions() {
        let t = SearchTerms::parse(r#"Deploy "rolled back" -staging -"dry run" deploy"#).unwrap();
        assert_eq!(
            t.include,
            [phrase(&["deploy"]), phrase(&["rolled", "back"])]
        );
        assert_eq!(t.exclude, [phrase(&["staging"]), phrase(&["dry", "run"])]);
        let t = SearchTerms::parse("deliver.rs or - x \"unterminated quote").unwrap();
        assert_eq!(
            t.include,
            [
                phrase(&["deliver", "rs"]),
                phrase(&["or"]),
                phrase(&["x"]),
                phrase(&["unterminated", "quote"])
            ]
        );
        assert!(t.exclude.is_empty());
        assert_eq!(
            t.included_words(),
            ["deliver", "rs", "or", "x", "unterminated", "quote"]
        );
    }

    #[test]
    fn queries_without_a_word_to_find_or_too_big_are_invalid() {
        for text in ["", "   ", "!!! ...", "-only -\"excluded words\"", "\"\""] {
            assert!(
                matches!(SearchTerms::parse(text), Err(BusError::Invalid { .. })),
                "{text:?}"
            );
        }
        let many = vec!["w"; MAX_QUERY_WORDS + 1].join(" ");
        assert!(matches!(
            SearchTerms::parse(&many),
            Err(BusError::Invalid { .. })
        ));
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert!(matches!(
            SearchTerms::parse(&long),
            Err(BusError::Invalid { .. })
        ));
        assert!(SearchTerms::parse(&vec!["w"; MAX_QUERY_WORDS].join(" ")).is_ok());
        // An excluded word too long to be indexed excludes nothing: it is dropped.
        let t = SearchTerms::parse(&format!("kiwi -{long}")).unwrap();
        assert_eq!(t.included_words(), ["kiwi"]);
        assert!(t.exclude.is_empty());
    }

    #[test]
    fn documents_match_phrases_within_title_or_body_and_score_occurrences() {
        let d = SearchDocument::new("Kiwi notes", Some("kiwi kiwi plum, pear tart"));
        let q = |s: &str| SearchTerms::parse(s).unwrap();
        assert!(d.matches(&q("kiwi plum")));
        assert!(d.matches(&q("notes tart")));
        assert!(d.matches(&q("\"pear tart\"")));
        assert!(
            !d.matches(&q("\"notes kiwi\"")),
            "no phrase across title and body"
        );
        assert!(!d.matches(&q("kiwi -pear")));
        assert!(!d.matches(&q("fig")));
        assert_eq!(d.score(&q("kiwi")), 2.0 + TITLE_WEIGHT);
        let gone = SearchDocument::new("Kiwi notes", None);
        assert!(gone.matches(&q("kiwi")) && !gone.matches(&q("plum")));
        let p = d.positions();
        assert_eq!(p["kiwi"], [(1, true), (4, false), (5, false)]);
        assert_eq!(p["tart"], [(8, false)]);
    }

    proptest! {
        #[test]
        fn tokens_point_at_their_text_and_never_hold_separators(text in "\\PC{0,60}") {
            for t in tokens(&text) {
                prop_assert_eq!(text[t.start..t.end].to_lowercase(), t.word.clone());
                prop_assert!(text[t.start..t.end].chars().all(char::is_alphanumeric));
                prop_assert!(!t.word.is_empty());
            }
        }

        #[test]
        fn parsing_never_panics_and_a_parsed_query_has_words(text in "\\PC{0,80}") {
            if let Ok(t) = SearchTerms::parse(&text) {
                prop_assert!(!t.include.is_empty());
                prop_assert!(t.include.iter().chain(&t.exclude).all(|p| !p.0.is_empty()));
            }
        }

        #[test]
        fn a_document_matches_each_of_its_own_words(body in "[a-z ]{1,40}") {
            let d = SearchDocument::new("t", Some(&body));
            for w in &d.body {
                let terms = SearchTerms::parse(w).unwrap();
                prop_assert!(d.matches(&terms));
                prop_assert!(d.score(&terms) >= 1.0);
            }
        }
    }
}
