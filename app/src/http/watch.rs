//! `POST /v1/inbox/watch`: what waits in the caller's inbox and what of it is news, handing
//! nothing out — for a host's hooks and channels — and its request and answer views.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse as _, Response};
use crewbus_domain::{
    DateTime, MAX_CURSOR_CHARS, MAX_WATCH_NEWS, MIN_CURSOR_CHARS, NAME_CHARS, PREVIEW_CHARS, Utc,
    Uuid,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::auth::Authenticated;
use super::extract::ApiJsonOrDefault;
use crate::edge::error::{ApiError, ErrorBody, FieldError};
use crate::edge::views::{MemberKind, whole};
use crate::usecases::watch::{WatchNews, Watched};

/// Watch the inbox.
// No `maximum` for `wait_ms`: a longer wait is clamped, never refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchRequest {
    /// When there is no news now, wait up to this long for some, ms; clamped to the server's
    /// `bus.max_wait_ms` (50 000 by default): a watch holds nothing, so a client asks for as
    /// long as it likes and asks again. Default 0: answer at once.
    #[serde(default, deserialize_with = "whole::u64")]
    #[schema(minimum = 0)]
    pub wait_ms: u64,
    /// The `cursor` of this agent's previous watch answer: what was reported already is not
    /// news again. Absent (or null): every pending message is news. Opaque: pass it back as it
    /// came; a cursor of another agent, or anything else, is `400 invalid` with `field`
    /// `"after"` (drop it and watch without one).
    #[serde(default)]
    #[schema(min_length = 48, max_length = 8256, pattern = "^[A-Za-z0-9_-]+$")]
    pub after: Option<String>,
    /// Whether each news item carries a `preview` of its body (read from its backend). `false`
    /// reads no body and leaves every `preview` empty (a hook prints no body text). Default
    /// `true`.
    #[serde(default = "previews_by_default")]
    #[schema(default = true)]
    pub previews: bool,
}

impl Default for WatchRequest {
    fn default() -> Self {
        WatchRequest {
            wait_ms: 0,
            after: None,
            previews: true,
        }
    }
}

fn previews_by_default() -> bool {
    true
}

/// One message the caller was not told of yet. Every text here was written by an agent: it is
/// data, cleaned (control, format and bidirectional characters removed, line breaks folded,
/// `<` `>` `«` `»` replaced by `‹` `›`) and cut.
#[derive(Debug, Serialize, ToSchema)]
pub struct WatchNewsView {
    /// The message id.
    pub message: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// The conversation's title, cleaned, at most 200 characters.
    #[schema(max_length = 200)]
    pub conversation_title: String,
    /// The sender.
    pub sender: Uuid,
    /// The sender's name, cleaned, at most 64 characters.
    #[schema(max_length = 64)]
    pub sender_name: String,
    /// The sender's kind when it sent.
    pub sender_kind: MemberKind,
    /// Its position in the conversation.
    #[schema(minimum = 1)]
    pub seq: u64,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
    /// The start of its body, cleaned, at most 200 characters (empty when the request asked for
    /// no previews, or the body cannot be read now). Fetch the message (`POST
    /// /v1/inbox/fetch`) for the whole body.
    #[schema(max_length = 200)]
    pub preview: String,
}

impl From<WatchNews> for WatchNewsView {
    fn from(n: WatchNews) -> Self {
        WatchNewsView {
            message: n.message,
            conversation: n.conversation,
            conversation_title: n.conversation_title,
            sender: n.sender,
            sender_name: n.sender_name,
            sender_kind: n.sender_kind.into(),
            seq: n.seq,
            sent_at: n.sent_at,
            preview: n.preview,
        }
    }
}

/// The answer to a watch.
#[derive(Debug, Serialize, ToSchema)]
pub struct WatchView {
    /// How many messages wait for the caller now (stored, not confirmed, not held by a
    /// hand-out), reported before or not.
    #[schema(minimum = 0)]
    pub pending: u64,
    /// The news: waiting messages the cursor had not reported, at most 20, oldest first.
    /// Empty after a wait that found none.
    #[schema(max_items = 20)]
    pub new: Vec<WatchNewsView>,
    /// Pass this back as `after` next time (opaque; valid on any server of this deployment,
    /// for this agent only).
    #[schema(max_length = 8256)]
    pub cursor: String,
}

impl From<Watched> for WatchView {
    fn from(w: Watched) -> Self {
        WatchView {
            pending: w.pending,
            new: w.news.into_iter().map(Into::into).collect(),
            cursor: w.cursor,
        }
    }
}

// The schema's literal bounds are the domain's constants.
const _: () = assert!(MAX_CURSOR_CHARS == 8256 && MIN_CURSOR_CHARS == 48);
const _: () = assert!(MAX_WATCH_NEWS == 20);
const _: () = assert!(PREVIEW_CHARS == 200 && NAME_CHARS == 64);

/// What is new in the caller's inbox, handing nothing out: how many messages wait, and those
/// not reported to it before (per `after`), each with a cleaned preview (unless `previews` is
/// false). Answers at once when there is news; else waits up to `wait_ms` (clamped to
/// `bus.max_wait_ms`) for some (an empty `new` after the wait, or at once when the server
/// shuts down). Nothing is handed out, confirmed or marked: a later fetch gets the messages as
/// if no watch had run. Pass the answer's `cursor` back as `after`.
#[utoipa::path(post, path = "/v1/inbox/watch", tag = "inbox", operation_id = "watch_inbox",
    request_body(content = Option<WatchRequest>, description = "optional (an empty body is `{}`)"),
    responses((status = 200, body = WatchView),
        (status = 400, description = "an `after` that is not this agent's cursor (`field`: `after`), a malformed body", body = ErrorBody),
        (status = 401, description = "no, a malformed, an unknown or a revoked token", body = ErrorBody),
        (status = 503, description = "the ledger did not answer (`unavailable`), or not in time (`timeout`); retry", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn watch(
    State(state): State<AppState>,
    Authenticated(agent): Authenticated,
    ApiJsonOrDefault(req): ApiJsonOrDefault<WatchRequest>,
) -> Result<Json<WatchView>, Response> {
    let cursor = state
        .bus
        .watch_cursor(&agent, req.after.as_deref())
        .map_err(|error| {
            FieldError {
                field: "after",
                error,
            }
            .into_response()
        })?;
    let wait = std::time::Duration::from_millis(req.wait_ms);
    let watched = state
        .bus
        .watch(&agent, cursor, wait, req.previews)
        .await
        .map_err(|e| ApiError(e).into_response())?;
    Ok(Json(watched.into()))
}
