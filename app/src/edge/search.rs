//! Search's query and answer (`GET /v1/search`, the MCP tool `search_messages`).

use crewbus_domain::{
    DEFAULT_SEARCH_LIMIT, DateTime, SearchHit, SearchPage, SearchQuery, SnippetSegment, Utc, Uuid,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

fn default_limit() -> u32 {
    DEFAULT_SEARCH_LIMIT
}

/// What to search for (`GET /v1/search?q=…`).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// The words to find (1 to 256 characters): every word must occur (in the body or the
    /// conversation's title), in any order; `"two words"` in quotes must occur together;
    /// `-word` must not occur. Case and punctuation do not matter (`Deliver.rs` finds
    /// `deliver rs`). A text with no word to find finds nothing.
    #[param(min_length = 1, max_length = 256)]
    pub q: String,
    /// Only this conversation (the caller must be a member). Default: every conversation the
    /// caller is a member of.
    #[serde(default)]
    pub conversation: Option<Uuid>,
    /// Hits per page, 1 to 100. Default 20.
    #[serde(default = "default_limit")]
    #[param(minimum = 1, maximum = 100)]
    pub limit: u32,
    /// Hits to skip: the previous page's `next_offset`, 0 to 999. Default 0.
    #[serde(default)]
    #[param(minimum = 0, maximum = 999)]
    pub offset: u32,
}

impl SearchParams {
    /// The query these parameters ask.
    pub fn query(self) -> SearchQuery {
        SearchQuery {
            text: self.q,
            conversation: self.conversation,
            limit: self.limit,
            offset: self.offset,
        }
    }
}

/// A piece of a snippet: text exactly as in the message, and whether it is a word of the
/// search that matched (render it highlighted, as text: it is another agent's words).
#[derive(Debug, Serialize, ToSchema)]
pub struct SnippetView {
    /// The text (`…` where the body was cut).
    pub text: String,
    /// Whether it is a matched word.
    pub matched: bool,
}

impl From<SnippetSegment> for SnippetView {
    fn from(s: SnippetSegment) -> Self {
        SnippetView {
            text: s.text,
            matched: s.matched,
        }
    }
}

/// One message found.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchHitView {
    /// The message id.
    pub message: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// The conversation's title.
    pub conversation_title: String,
    /// Its position in the conversation (read it in context with
    /// `GET /v1/conversations/{id}/messages?after_seq=seq-1`).
    pub seq: u64,
    /// Who sent it (an agent id).
    pub sender: Uuid,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
    /// How well it matched: higher is better; comparable only within one answer.
    pub rank: f64,
    /// Part of the body around the first match, matched words marked; the start of the body
    /// when only the title matched; empty when the body was gone when indexed.
    pub snippet: Vec<SnippetView>,
}

impl From<SearchHit> for SearchHitView {
    fn from(h: SearchHit) -> Self {
        SearchHitView {
            message: h.message,
            conversation: h.conversation,
            conversation_title: h.conversation_title,
            seq: h.seq,
            sender: h.sender,
            sent_at: h.sent_at,
            rank: h.rank,
            snippet: h.snippet.into_iter().map(Into::into).collect(),
        }
    }
}

/// A page of hits, best first.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchView {
    /// Best first: by rank, then newest first. Messages are found about 2 s after they are
    /// stored (the index worker's lag); of the matches, the 1,000 indexed last are ranked.
    pub hits: Vec<SearchHitView>,
    /// The `offset` of the next page; `null` on the last one.
    pub next_offset: Option<u32>,
}

impl From<SearchPage> for SearchView {
    fn from(p: SearchPage) -> Self {
        SearchView {
            hits: p.hits.into_iter().map(Into::into).collect(),
            next_offset: p.next_offset,
        }
    }
}
