//! The conversation tools: `create_conversation`, `list_conversations`, `get_conversation`,
//! `send_message`, `read_conversation`.

use crewbus_domain::{RunId, Uuid};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::edge::views::ConversationView;
use crate::mcp::views::{default_history_limit, default_max_bytes};

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

/// The caller's conversations (`GET /v1/conversations`, as an object).
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationsView {
    /// Oldest first.
    pub conversations: Vec<ConversationView>,
}
