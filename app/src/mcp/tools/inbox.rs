//! The inbox tools: `fetch_inbox`, `confirm_deliveries`, `acknowledge_message`,
//! `get_receipts`, `inbox_status`.

use crewbus_domain::{RunId, Uuid};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::edge::views::ReceiptView;
use crate::mcp::views::default_max_bytes;

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

fn default_fetch_limit() -> usize {
    10
}

/// A message's receipts (`GET /v1/messages/{id}/receipts`, as an object).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReceiptsView {
    /// One per recipient.
    pub receipts: Vec<ReceiptView>,
}
