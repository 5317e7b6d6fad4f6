//! What the tools share: their limits, the arguments of a tool without any, the defaults of
//! fields several tools take, and cutting a body to `max_bytes`. Each tool's own arguments and
//! answer sit beside it in `mcp/tools/`. Arguments carry the HTTP API's field names, with the
//! path ids as `conversation_id`, `message_id` and `run_id`, except where the README's table of
//! argument names says (waits and TTLs in seconds, `max_bytes` of `read_conversation`,
//! `list_leases`' `mine`, `search_messages`' `query` and `conversation_id`; a test in
//! `app/tests/it/mcp_http.rs` holds the table to the schemas); where a tool's arguments are
//! exactly an HTTP request body (`create_conversation`, `confirm_deliveries`) the HTTP type is
//! used as is. Answers are the HTTP views themselves, wrapped in an object for the three list
//! operations whose HTTP answer is an array.
//!
//! Every type derives utoipa's `ToSchema`, like the HTTP views, so a tool's input and output
//! schemas come from the same generator (and the same inliner, `mcp/schema.rs`) as the
//! OpenAPI document. The rules (ranges of `limit`, title, body size…) stay in the use cases;
//! the schemas state the same static ranges and patterns as the HTTP API's types (a field
//! shared with a request body carries its attributes), plus the tool's own (`wait_seconds`,
//! `max_bytes`).

/// The most a `fetch_inbox` may wait, seconds (the HTTP API's `bus.max_wait_ms` default).
pub const MAX_WAIT_SECONDS: u64 = 50;

/// Bytes of message bodies one `fetch_inbox` or `read_conversation` answer carries by default.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;

pub use crate::edge::operation::NoArguments;

pub(crate) fn default_history_limit() -> usize {
    100
}

pub(crate) fn default_max_bytes() -> usize {
    DEFAULT_MAX_BYTES
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
