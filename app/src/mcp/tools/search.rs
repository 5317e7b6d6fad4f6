//! The search tool: `search_messages`.

use crewbus_domain::Uuid;
use serde::Deserialize;
use utoipa::ToSchema;

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
