//! Full-text search over the history an agent may read: what is asked, what comes back, and
//! what the index worker hands the ledger.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::search_text::SearchTerms;
use crate::snippet::SnippetSegment;
use crate::{BusError, BusResult, Message};

/// The longest search text, in characters.
pub const MAX_SEARCH_TEXT_CHARS: usize = 256;
/// Hits per page when the caller names no limit.
pub const DEFAULT_SEARCH_LIMIT: u32 = 20;
/// The most hits per page.
pub const MAX_SEARCH_LIMIT: u32 = 100;
/// How deep a search reaches: of the messages that match, the 1,000 indexed last are ranked,
/// and pages go through them (`offset + limit` is at most this). The index worker indexes
/// messages as they are stored, oldest first, so these are the newest matches (a message
/// indexed again keeps its place). It bounds a search's cost whatever the words: a word in
/// every other message ranks 1,000 of them, not half the store (each ledger walks its index
/// newest first and stops). A search wanting older messages should say more (another word, a
/// conversation).
pub const MAX_SEARCH_DEPTH: u32 = 1000;

/// A search, as an agent asks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// What to look for ([`SearchTerms`] gives the syntax): 1 to [`MAX_SEARCH_TEXT_CHARS`]
    /// characters holding at least one word to find.
    pub text: String,
    /// Only this conversation (the agent must be a member), or every conversation it is in.
    pub conversation: Option<Uuid>,
    /// Hits per page: 1 to [`MAX_SEARCH_LIMIT`].
    pub limit: u32,
    /// Hits to skip: the `next_offset` of the previous page, 0 for the first.
    pub offset: u32,
}

impl SearchQuery {
    /// A first page of [`DEFAULT_SEARCH_LIMIT`] hits for `text` over every conversation.
    pub fn new(text: impl Into<String>) -> SearchQuery {
        SearchQuery {
            text: text.into(),
            conversation: None,
            limit: DEFAULT_SEARCH_LIMIT,
            offset: 0,
        }
    }

    /// What a search answers before any ledger is asked (what the driving adapters accept is
    /// what their schemas say: a text of 1 to [`MAX_SEARCH_TEXT_CHARS`] characters, a limit of
    /// 1 to [`MAX_SEARCH_LIMIT`], an offset below [`MAX_SEARCH_DEPTH`]):
    /// - `Ok(None)`: the text holds no word that could be found (only spaces or punctuation,
    ///   only exclusions, or an included word too long to be indexed): the answer is an empty
    ///   page;
    /// - `Ok(Some(q))`: the query to run, its limit cut to the depth left after its offset (an
    ///   offset of 990 with a limit of 20 asks for the last 10).
    ///
    /// Errors ([`BusError::Invalid`]): an empty text, one over [`MAX_SEARCH_TEXT_CHARS`]
    /// characters, a limit of 0 or over [`MAX_SEARCH_LIMIT`], an offset of [`MAX_SEARCH_DEPTH`]
    /// or more.
    pub fn prepared(&self) -> BusResult<Option<SearchQuery>> {
        if self.text.is_empty() {
            return Err(BusError::invalid("search text is empty"));
        }
        if self.offset >= MAX_SEARCH_DEPTH {
            return Err(BusError::invalid(format!(
                "a search pages through its best {MAX_SEARCH_DEPTH} hits at most: offset must \
                 be below {MAX_SEARCH_DEPTH}"
            )));
        }
        let query = SearchQuery {
            limit: self.limit.min(MAX_SEARCH_DEPTH - self.offset),
            ..self.clone()
        };
        match query.terms() {
            Ok(_) => Ok(Some(query)),
            Err(e) if self.limit == 0 || self.limit > MAX_SEARCH_LIMIT => Err(e),
            Err(_) if self.text.chars().count() > MAX_SEARCH_TEXT_CHARS => Err(BusError::invalid(
                format!("search text is longer than {MAX_SEARCH_TEXT_CHARS} characters"),
            )),
            // What is left is the text's words: nothing in it can be found.
            Err(_) => Ok(None),
        }
    }

    /// Checks the query and parses its text. Errors ([`BusError::Invalid`]): text empty or
    /// only whitespace, longer than [`MAX_SEARCH_TEXT_CHARS`], or without a word to find
    /// ([`SearchTerms::parse`]); `limit` outside 1..=[`MAX_SEARCH_LIMIT`]; `offset + limit`
    /// above [`MAX_SEARCH_DEPTH`].
    pub fn terms(&self) -> BusResult<SearchTerms> {
        if self.text.trim().is_empty() {
            return Err(BusError::invalid("search text is empty"));
        }
        if self.text.chars().count() > MAX_SEARCH_TEXT_CHARS {
            return Err(BusError::invalid(format!(
                "search text is longer than {MAX_SEARCH_TEXT_CHARS} characters"
            )));
        }
        if self.limit == 0 || self.limit > MAX_SEARCH_LIMIT {
            return Err(BusError::invalid(format!(
                "search limit must be between 1 and {MAX_SEARCH_LIMIT}"
            )));
        }
        if u64::from(self.offset) + u64::from(self.limit) > u64::from(MAX_SEARCH_DEPTH) {
            return Err(BusError::invalid(format!(
                "a search pages through its best {MAX_SEARCH_DEPTH} hits at most"
            )));
        }
        SearchTerms::parse(&self.text)
    }
}

/// One message a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The message.
    pub message: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// The conversation's title.
    pub conversation_title: String,
    /// Its position in the conversation (read it in context with history after `seq − 1`).
    pub seq: u64,
    /// Who sent it.
    pub sender: Uuid,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
    /// How well it matched: higher is better; unit-free, comparable only within one answer
    /// (each ledger ranks its own way: Postgres `ts_rank_cd`, SQLite `bm25`, memory
    /// [`crate::SearchDocument::score`]).
    pub rank: f64,
    /// Part of the indexed body around the first match, matched words marked
    /// ([`crate::snippet`]); the start of the body when only the title matched; empty when the
    /// body was gone when indexed.
    pub snippet: Vec<SnippetSegment>,
}

/// A page of hits, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchPage {
    /// Best first: by rank (descending), then newest `sent_at`, then message id (ascending),
    /// among the [`MAX_SEARCH_DEPTH`] matches indexed last.
    pub hits: Vec<SearchHit>,
    /// The offset of the next page; `None` when this one is the last (or
    /// [`MAX_SEARCH_DEPTH`] is reached).
    pub next_offset: Option<u32>,
}

impl SearchPage {
    /// The page of `query` from `found`, the hits from `query.offset` on in order, holding at
    /// most `query.limit + 1` (one more than the page tells whether another follows).
    pub fn from_found(query: &SearchQuery, mut found: Vec<SearchHit>) -> SearchPage {
        let more = found.len() > query.limit as usize;
        found.truncate(query.limit as usize);
        let next = query.offset + query.limit;
        SearchPage {
            hits: found,
            next_offset: (more && next < MAX_SEARCH_DEPTH).then_some(next),
        }
    }
}

/// Where the index worker stands in the backlog of unindexed messages: after this message,
/// ordered by `(stored_at, message)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexPosition {
    /// The last listed message's `stored_at`.
    pub stored_at: DateTime<Utc>,
    /// The last listed message's id.
    pub message: Uuid,
}

impl IndexPosition {
    /// The position just after `message`; `None` for a message that is not stored.
    pub fn after(message: &Message) -> Option<IndexPosition> {
        message.stored_at.map(|stored_at| IndexPosition {
            stored_at,
            message: message.id,
        })
    }
}

/// What the index worker read for one message: its body, or `None` when it is gone or cannot be
/// read for good (the message is then indexed by its conversation's title only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The message.
    pub message: Uuid,
    /// Its body as its backend returned it (the ledger indexes [`crate::indexed_body`] of it).
    pub body: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(q: &SearchQuery) -> bool {
        matches!(q.terms(), Err(BusError::Invalid { .. }))
    }

    #[test]
    fn a_query_is_checked_before_it_is_parsed() {
        assert!(SearchQuery::new("kiwi").terms().is_ok());
        assert!(invalid(&SearchQuery::new("  \t")));
        assert!(invalid(&SearchQuery::new(
            "k".repeat(MAX_SEARCH_TEXT_CHARS + 1)
        )));
        let longest = format!("{} {} {}", "a".repeat(128), "é".repeat(64), "b".repeat(62));
        assert_eq!(longest.chars().count(), MAX_SEARCH_TEXT_CHARS);
        assert!(SearchQuery::new(longest).terms().is_ok());
        for limit in [0, MAX_SEARCH_LIMIT + 1] {
            assert!(invalid(&SearchQuery {
                limit,
                ..SearchQuery::new("kiwi")
            }));
        }
        let deep = SearchQuery {
            offset: MAX_SEARCH_DEPTH - 20,
            ..SearchQuery::new("kiwi")
        };
        assert!(deep.terms().is_ok());
        assert!(invalid(&SearchQuery {
            offset: deep.offset + 1,
            ..deep.clone()
        }));
        assert!(invalid(&SearchQuery {
            offset: u32::MAX,
            ..deep
        }));
    }

    #[test]
    fn a_prepared_query_finds_nothing_for_unfindable_text_and_is_cut_to_the_depth() {
        assert!(SearchQuery::new("kiwi").prepared().unwrap().is_some());
        for nothing in ["   ", "!!!", "-kiwi", "\"\"", &"0".repeat(200)] {
            assert_eq!(
                SearchQuery::new(nothing).prepared().unwrap(),
                None,
                "{nothing:?}"
            );
        }
        for bad in [
            SearchQuery::new(""),
            SearchQuery::new("k".repeat(MAX_SEARCH_TEXT_CHARS + 1)),
            SearchQuery::new(" ".repeat(MAX_SEARCH_TEXT_CHARS + 1)),
            SearchQuery {
                limit: 0,
                ..SearchQuery::new("!!!")
            },
            SearchQuery {
                limit: MAX_SEARCH_LIMIT + 1,
                ..SearchQuery::new("kiwi")
            },
            SearchQuery {
                offset: MAX_SEARCH_DEPTH,
                ..SearchQuery::new("kiwi")
            },
        ] {
            assert!(
                matches!(bad.prepared(), Err(BusError::Invalid { .. })),
                "{bad:?}"
            );
        }
        let deep = SearchQuery {
            offset: MAX_SEARCH_DEPTH - 10,
            limit: 20,
            ..SearchQuery::new("kiwi")
        };
        let cut = deep.prepared().unwrap().unwrap();
        assert_eq!((cut.offset, cut.limit), (MAX_SEARCH_DEPTH - 10, 10));
        assert!(cut.terms().is_ok());
    }

    fn hit(n: u8) -> SearchHit {
        SearchHit {
            message: Uuid::from_bytes([n; 16]),
            conversation: Uuid::nil(),
            conversation_title: "t".into(),
            seq: 1,
            sender: Uuid::nil(),
            sent_at: DateTime::<Utc>::UNIX_EPOCH,
            rank: 1.0,
            snippet: Vec::new(),
        }
    }

    #[test]
    fn a_page_says_whether_another_follows() {
        let q = SearchQuery {
            limit: 2,
            ..SearchQuery::new("kiwi")
        };
        let page = SearchPage::from_found(&q, vec![hit(1), hit(2), hit(3)]);
        assert_eq!((page.hits.len(), page.next_offset), (2, Some(2)));
        let page = SearchPage::from_found(&q, vec![hit(1), hit(2)]);
        assert_eq!(page.next_offset, None);
        let last = SearchQuery {
            offset: MAX_SEARCH_DEPTH - 2,
            ..q
        };
        assert_eq!(
            SearchPage::from_found(&last, vec![hit(1), hit(2), hit(3)]).next_offset,
            None
        );
    }
}
