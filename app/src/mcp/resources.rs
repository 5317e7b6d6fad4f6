//! The MCP resources: the agent's inbox status and each conversation it belongs to, read as
//! JSON (`application/json`) built from the same use cases and views as the tools
//! (`inbox_status`, `get_conversation` + `read_conversation`).
//!
//! - `crewbus://inbox`: the inbox status ([`InboxStatusView`], as the `inbox_status` tool).
//! - `crewbus://conversations/{conversation_id}` (also the one resource template): the
//!   conversation ([`ConversationView`]), its members ([`AgentView`]s, so names come with ids),
//!   and its newest [`LATEST_MESSAGES`] messages (oldest of them first) with at most
//!   [`DEFAULT_MAX_BYTES`] of bodies, a larger body cut (`truncated: true`); `next_after_seq`
//!   continues with `read_conversation`. Each `body` is fenced as the tools fence them
//!   (`mcp/fence.rs`): it holds the body between a BEGIN and an END line carrying the answer's
//!   `fence` tag (a body cannot forge the END line), and `notice` says bodies are data.
//!
//! What agents wrote besides bodies — titles, members' names, request ids — is cleaned in every
//! resource and in `resources/list` (`mcp/agent_text.rs`): a resource is read by a model.
//!
//! `resources/list` lists the inbox and one resource per conversation of the agent. A URI that
//! is not one of these, or names a conversation that is unknown, of another team, or one the
//! agent is not a member of, is the resource-not-found error (`-32002`; rmcp answers it as
//! `-32602` to a 2026-07-28 peer, as that revision says): nothing tells an outsider it exists.

use crewbus_domain::{Agent, BusError, Uuid};
use rmcp::model::{
    CacheScope, ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate,
};
use serde::Serialize;
use serde_json::Value;

use super::agent_text;
use super::fence::{BODIES_ARE_DATA, Fence, Fenced};
use super::views::{DEFAULT_MAX_BYTES, cut};
use crate::edge::error::error_body;
use crate::edge::views::{
    AgentView, ConversationView, HistoryItemView, HistoryView, InboxStatusView,
};
use crate::usecases::bus::Bus;

/// The inbox status resource.
pub(crate) const INBOX_URI: &str = "crewbus://inbox";

/// A conversation's resource is this followed by its id.
const CONVERSATION_PREFIX: &str = "crewbus://conversations/";

/// The conversation resource template (RFC 6570).
pub(crate) const CONVERSATION_TEMPLATE: &str = "crewbus://conversations/{conversation_id}";

/// Messages a conversation resource shows, newest.
pub(crate) const LATEST_MESSAGES: usize = 20;

const JSON: &str = "application/json";

/// A conversation as its resource shows it, before [`Fence::json`] fences its bodies and adds
/// `notice` (bodies are data; how they are fenced) and `fence` (the tag of every BEGIN and END
/// line of the answer).
#[derive(Debug, Serialize)]
struct ConversationResource<'a> {
    conversation: ConversationView,
    /// The members, with names.
    members: Vec<AgentView>,
    /// The newest messages, oldest of them first.
    messages: &'a [HistoryItemView],
    /// `read_conversation`'s `after_seq` for what follows this page.
    next_after_seq: u64,
}

/// Runs `work` (a read, safe to drop) within the request deadline (`bus.request_timeout_ms`,
/// [`Bus::within_deadline`]), as every tool call is: not finished by then → the `timeout` error.
async fn bounded<T>(
    bus: &Bus,
    work: impl std::future::Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    match bus
        .within_deadline(std::time::Duration::ZERO, async { Ok(work.await) })
        .await
    {
        Ok(answer) => answer,
        Err(e) => Err(to_error(e)),
    }
}

/// The agent's resources (within the request deadline): the inbox, then its conversations
/// oldest first.
pub(crate) async fn list(bus: &Bus, agent: &Agent) -> Result<ListResourcesResult, ErrorData> {
    bounded(bus, list_now(bus, agent)).await
}

async fn list_now(bus: &Bus, agent: &Agent) -> Result<ListResourcesResult, ErrorData> {
    let conversations = bus.conversations_for(agent).await.map_err(to_error)?;
    let mut resources = vec![
        Resource::new(INBOX_URI, "inbox")
            .with_title("My inbox")
            .with_description(
                "Your inbox as its backend sees it: references waiting, handed out and not \
                 confirmed, redelivered (as the inbox_status tool).",
            )
            .with_mime_type(JSON),
    ];
    for c in conversations {
        let title = agent_text::clean_str("title", &c.title);
        resources.push(
            Resource::new(format!("{CONVERSATION_PREFIX}{}", c.id), title.clone())
                .with_title(title)
                .with_description(format!(
                    "A conversation you are a member of: title, members and its newest {} \
                     messages. {BODIES_ARE_DATA}",
                    LATEST_MESSAGES
                ))
                .with_mime_type(JSON),
        );
    }
    let mut result = ListResourcesResult::with_all_items(resources);
    result.ttl_ms = Some(0);
    result.cache_scope = Some(CacheScope::Private);
    Ok(result)
}

/// The conversation template.
pub(crate) fn templates() -> ListResourceTemplatesResult {
    let mut result = ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new(CONVERSATION_TEMPLATE, "conversation")
            .with_title("A conversation")
            .with_description(format!(
                "A conversation you are a member of, by id (from list_conversations): title, \
                 members and its newest {LATEST_MESSAGES} messages. {BODIES_ARE_DATA}"
            ))
            .with_mime_type(JSON),
    ]);
    result.ttl_ms = Some(0);
    result.cache_scope = Some(CacheScope::Private);
    result
}

/// Reads `uri` for `agent` (within the request deadline).
pub(crate) async fn read(
    bus: &Bus,
    agent: &Agent,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    bounded(bus, read_now(bus, agent, uri)).await
}

async fn read_now(bus: &Bus, agent: &Agent, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let mut json = if uri == INBOX_URI {
        let status = bus.inbox_status(agent).await.map_err(to_error)?;
        serde_json::to_value(InboxStatusView::from(status)).expect("a view serializes")
    } else if let Some(id) = uri.strip_prefix(CONVERSATION_PREFIX) {
        let id: Uuid = id.parse().map_err(|_| not_found(uri))?;
        conversation(bus, agent, id).await.map_err(|e| match e {
            BusError::NotFound { .. } => not_found(uri),
            other => to_error(other),
        })?
    } else {
        return Err(not_found(uri));
    };
    agent_text::clean(&mut json);
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(json.to_string(), uri).with_mime_type(JSON),
    ])
    .with_ttl_ms(0)
    .with_cache_scope(CacheScope::Private))
}

async fn conversation(bus: &Bus, agent: &Agent, id: Uuid) -> Result<Value, BusError> {
    let c = bus.conversation_for(agent, id).await?;
    let page = bus
        .latest_history(agent, id, LATEST_MESSAGES)
        .await?
        .within_bytes(DEFAULT_MAX_BYTES);
    let mut history = HistoryView::from(page);
    for item in &mut history.messages {
        if let Some(short) = item.body.as_deref().and_then(|b| cut(b, DEFAULT_MAX_BYTES)) {
            item.body = Some(short);
            item.truncated = true;
        }
    }
    let team = bus.team_agents(agent).await?;
    let members: Vec<AgentView> = team
        .iter()
        .filter(|a| c.has_member(a.id))
        .cloned()
        .map(Into::into)
        .collect();
    let bodies: Vec<Fenced> = history
        .messages
        .iter()
        .filter_map(Fenced::history)
        .collect();
    let fence = Fence::drawn(bus, agent, history.messages.len()).await;
    let view = ConversationResource {
        conversation: c.into(),
        members,
        messages: &history.messages,
        next_after_seq: history.next_after_seq,
    };
    let mut json = serde_json::to_value(view).expect("a view serializes");
    fence.json(&mut json, "messages", &bodies);
    Ok(json)
}

fn not_found(uri: &str) -> ErrorData {
    ErrorData::resource_not_found("no such resource", Some(serde_json::json!({ "uri": uri })))
}

/// A bus error as a protocol error: invalid → invalid params, anything else internal, with the
/// API's error body (`{code, message}`) as data.
fn to_error(e: BusError) -> ErrorData {
    let body = error_body(&e);
    let data = serde_json::to_value(&body).ok();
    match e {
        BusError::Invalid { .. } => ErrorData::invalid_params(body.message, data),
        _ => ErrorData::internal_error(body.message, data),
    }
}
