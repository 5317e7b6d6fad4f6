//! The tools' arguments and answers. Arguments carry the HTTP API's field names, with the path
//! ids as `conversation_id`, `message_id` and `run_id`, except where the README's table of
//! argument names says (waits and TTLs in seconds, `max_bytes` of `read_conversation`,
//! `list_leases`' `mine`, `search_messages`' `query` and `conversation_id`; a test in
//! `app/tests/it/mcp_http.rs` holds the table to the schemas); where a tool's arguments are exactly an
//! HTTP request body (`create_conversation`, `confirm_deliveries`) the HTTP type is used as is.
//! Answers are the HTTP views themselves, wrapped in an object for the three list operations
//! whose HTTP answer is an array.
//!
//! Every type derives utoipa's `ToSchema`, like the HTTP views, so a tool's input and output
//! schemas come from the same generator (and the same inliner, `mcp/schema.rs`) as the
//! OpenAPI document. The rules (ranges of `limit`, title, body size…) stay in the use cases;
//! the schemas state the same static ranges and patterns as the HTTP API's types (a field
//! shared with a request body carries its attributes), plus the tool's own (`wait_seconds`,
//! `max_bytes`).

use crewbus_domain::{RunId, Uuid};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::edge::views::{ConversationView, Outcome, ReceiptView, TeamAgentView};

/// The most a `fetch_inbox` may wait, seconds (the HTTP API's `bus.max_wait_ms` default).
pub const MAX_WAIT_SECONDS: u64 = 50;

/// Bytes of message bodies one `fetch_inbox` or `read_conversation` answer carries by default.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;

/// A tool without arguments.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArguments {}

/// One conversation, by id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConversationArguments {
    /// The conversation id (from `list_conversations` or `create_conversation`).
    pub conversation_id: Uuid,
}

/// `send_message`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArguments {
    /// The conversation to send to (the caller must be a member).
    pub conversation_id: Uuid,
    /// The caller's idempotency key (1 to 128 visible ASCII characters), new for every new
    /// message; it is the caller's own (another member may use the same one). Send the SAME
    /// `request_id` again when retrying after an error or a lost answer: the message is then
    /// stored once and the original is returned.
    #[schema(min_length = 1, max_length = 128, pattern = "^[!-~]+$")]
    pub request_id: String,
    /// The message text (UTF-8, at most the team's body limit, 1 MiB by default).
    pub body: String,
    /// The acting run, if any (its journal gets `MessageSent`).
    #[serde(default)]
    #[schema(value_type = Option<Uuid>)]
    pub run: Option<RunId>,
}

/// `read_conversation`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadConversationArguments {
    /// The conversation to read (the caller must be a member).
    pub conversation_id: Uuid,
    /// Return messages with `seq` greater than this. Default 0 (from the start).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub after_seq: u64,
    /// At most this many messages (1 to 1000). Default 100.
    #[serde(default = "default_history_limit")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: usize,
    /// At most this many bytes of message bodies in the answer (1 to 1048576). Default 65536.
    /// Messages beyond it are left for the next page (`next_after_seq`); a single body larger
    /// than it comes cut, with `truncated: true`: read it again with `max_bytes` at least its
    /// `message.body_len` (and `after_seq` just below its `seq`) to get it whole.
    #[serde(default = "default_max_bytes")]
    #[schema(minimum = 1, maximum = 1048576)]
    pub max_bytes: usize,
}

/// `fetch_inbox`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchArguments {
    /// At most this many deliveries (1 to the server's maximum, 100 by default). Default 10.
    #[serde(default = "default_fetch_limit")]
    #[schema(minimum = 1)]
    pub limit: usize,
    /// Wait up to this many seconds (0 to 50) for a message when none is waiting. Default 0
    /// (answer at once).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 50)]
    pub wait_seconds: u64,
    /// At most this many bytes of message bodies in the answer (1 to 1048576). Default 65536.
    /// Deliveries beyond it are not handed out now: the next `fetch_inbox` gets them. A single
    /// body larger than it comes cut, with `truncated: true`: read it whole with
    /// `read_conversation` and a larger `max_bytes`.
    #[serde(default = "default_max_bytes")]
    #[schema(minimum = 1, maximum = 1048576)]
    pub max_bytes: usize,
}

/// One message, by id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageArguments {
    /// The message id.
    pub message_id: Uuid,
}

/// `acknowledge_message`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcknowledgeArguments {
    /// The message id (of a message delivered to the caller and confirmed).
    pub message_id: Uuid,
    /// The acting run, if any (its journal gets `MessageAcknowledged`).
    #[serde(default)]
    #[schema(value_type = Option<Uuid>)]
    pub run: Option<RunId>,
}

/// One of the caller's runs, by id.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArguments {
    /// The run id (from `start_run`).
    pub run_id: Uuid,
}

/// `seal_run`'s arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SealArguments {
    /// The run id (from `start_run`).
    pub run_id: Uuid,
    /// How the run ended.
    pub outcome: Outcome,
    /// Why, in the agent's words (at most 16 KiB). Default empty.
    #[serde(default)]
    pub reason: String,
}

/// `read_run_records`' arguments.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordsArguments {
    /// The run id (from `start_run`).
    pub run_id: Uuid,
    /// The first record to return (records are numbered from 1). Default 1.
    #[serde(default = "first_seq")]
    #[schema(minimum = 1)]
    pub from_seq: u64,
    /// At most this many (1 to 1000). Default 100.
    #[serde(default = "default_history_limit")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: usize,
}

fn default_history_limit() -> usize {
    100
}

fn default_fetch_limit() -> usize {
    10
}

fn default_max_bytes() -> usize {
    DEFAULT_MAX_BYTES
}

fn first_seq() -> u64 {
    1
}

/// The agents of the caller's team (`GET /v1/agents`, as an object).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentsView {
    /// Every agent of the team by name, revoked ones included (with `revoked_at`), each with its
    /// status line, current run and last activity.
    pub agents: Vec<TeamAgentView>,
}

/// The caller's conversations (`GET /v1/conversations`, as an object).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationsView {
    /// Oldest first.
    pub conversations: Vec<ConversationView>,
}

/// A message's receipts (`GET /v1/messages/{id}/receipts`, as an object).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReceiptsView {
    /// One per recipient.
    pub receipts: Vec<ReceiptView>,
}

/// `body` cut to at most `max_bytes` bytes, at a character boundary; `None` when it fits.
pub(crate) fn cut(body: &str, max_bytes: usize) -> Option<String> {
    if body.len() <= max_bytes {
        return None;
    }
    let mut end = max_bytes;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    Some(body[..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(cut("hello", 5), None);
        assert_eq!(cut("hello", 3).as_deref(), Some("hel"));
        // "é" is two bytes: a cut in its middle keeps the byte before it.
        assert_eq!(cut("aé", 2).as_deref(), Some("a"));
        assert_eq!(cut("éé", 3).as_deref(), Some("é"));
    }
}

fn default_search_limit() -> u32 {
    crewbus_domain::DEFAULT_SEARCH_LIMIT
}

/// `search_messages`' arguments (`GET /v1/search`'s parameters).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArguments {
    /// The words to find (1 to 256 characters): every word must occur, in any order;
    /// `"two words"` in quotes must occur together; `-word` must not occur. Case and
    /// punctuation do not matter.
    #[schema(min_length = 1, max_length = 256)]
    pub query: String,
    /// Only this conversation (one you are a member of). Default: all of yours.
    #[serde(default)]
    pub conversation_id: Option<Uuid>,
    /// Hits per page, 1 to 100. Default 20.
    #[serde(default = "default_search_limit")]
    #[schema(minimum = 1, maximum = 100)]
    pub limit: u32,
    /// Hits to skip: the previous answer's `next_offset`, 0 to 999. Default 0.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 999)]
    pub offset: u32,
}

impl SearchArguments {
    /// The query these arguments ask.
    pub fn query(self) -> crewbus_domain::SearchQuery {
        crewbus_domain::SearchQuery {
            text: self.query,
            conversation: self.conversation_id,
            limit: self.limit,
            offset: self.offset,
        }
    }
}
