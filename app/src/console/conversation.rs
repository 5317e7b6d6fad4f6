//! A conversation (`GET /console/teams/{team}/conversations/{conversation}`): its messages, each
//! with every recipient's receipt state, updated live as messages arrive and recipients fetch
//! and confirm; the operator posts into it as the team's human member. And one message
//! (`GET /console/teams/{team}/messages/{message}`) with its whole body.

use std::collections::HashSet;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::{BusError, OperatorScope, Uuid};
use serde::Deserialize;

use super::Console;
use super::events::Live;
use super::failure::{self, Failed};
use super::frame::{Chrome, Fields, PageQuery, Section, Signed, html};
use super::security::see_other;
use super::team::id;
use super::views::filters;
use super::views::{MessageView, Names, Rendered};
use crate::usecases::bus::Bus;

/// Messages a conversation page shows at once.
pub(crate) const PAGE: usize = 50;

/// Which messages a conversation page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Window {
    /// The newest [`PAGE`].
    Latest,
    /// Up to [`PAGE`] after this seq.
    After(u64),
}

impl Window {
    pub(crate) fn after_seq(self) -> Option<u64> {
        match self {
            Window::Latest => None,
            Window::After(n) => Some(n),
        }
    }
}

/// The live part: the conversation's size and members (`p#summary`) and its messages
/// (`ol#messages`).
#[derive(Template)]
#[template(path = "console/messages.html")]
pub(crate) struct MessagesPart {
    pub(crate) team: Uuid,
    pub(crate) conversation: Uuid,
    /// `after_seq` of the page of earlier messages, when there are some.
    pub(crate) earlier: Option<u64>,
    /// Whether this is a page of older messages (with a way back to the newest).
    pub(crate) paged: bool,
    pub(crate) count: u64,
    pub(crate) members: String,
    pub(crate) messages: Vec<MessageView>,
}

/// What the live part shows now, and which messages those are (a feed event about another
/// message of the team does not concern the page). `names` is refreshed when a member, a
/// sender or a recipient is not in it yet.
pub(crate) async fn messages_part(
    bus: &Bus,
    scope: &OperatorScope,
    team: Uuid,
    conversation: Uuid,
    window: Window,
    names: &mut Names,
) -> Result<(Rendered, HashSet<Uuid>), Failed> {
    let summary = bus.admin_conversation(scope, team, conversation).await?;
    // `seq` is gap-free from 1: the newest PAGE follow `messages − PAGE`.
    let after = match window {
        Window::Latest => summary.messages.saturating_sub(PAGE as u64),
        Window::After(n) => n,
    };
    let page = bus
        .admin_messages(scope, team, conversation, after, PAGE)
        .await?;
    let members: Vec<Uuid> = summary
        .conversation
        .members
        .iter()
        .map(|m| m.agent)
        .collect();
    if !names.knows_all(&page.messages) || !members.iter().all(|m| names.knows(*m)) {
        *names = Names::of(&bus.admin_agents(scope, team).await?);
    }
    let messages: Vec<MessageView> = page
        .messages
        .iter()
        .map(|m| MessageView::of(m, names, true))
        .collect();
    let shown = messages.iter().map(|m| m.id).collect();
    let part = MessagesPart {
        team,
        conversation,
        earlier: (after > 0).then(|| after.saturating_sub(PAGE as u64)),
        paged: window != Window::Latest,
        count: summary.messages,
        members: members
            .iter()
            .map(|m| names.name(*m))
            .collect::<Vec<_>>()
            .join(", "),
        messages,
    };
    Ok((Rendered::of(&part)?, shown))
}

/// `?after_seq=N`: the page of messages after `N` instead of the newest.
#[derive(Debug, Deserialize)]
pub(crate) struct Paging {
    #[serde(default)]
    after_seq: Option<u64>,
}

#[derive(Template)]
#[template(path = "console/conversation.html")]
struct ConversationPage {
    chrome: Chrome,
    team: Uuid,
    team_name: String,
    conversation: Uuid,
    title: String,
    /// The live part: summary, paging and messages.
    live: Rendered,
    csrf: String,
    /// A new request id per rendered form: submitting it twice sends one message.
    request_id: String,
}

/// `GET /console/teams/{team}/conversations/{conversation}[?after_seq=N]`.
pub(crate) async fn page(
    State(c): State<Console>,
    s: Signed,
    Path((team, conversation)): Path<(String, String)>,
    PageQuery(paging): PageQuery<Paging>,
) -> Response {
    let window = paging.after_seq.map_or(Window::Latest, Window::After);
    let shown = async {
        let team = c.bus.admin_team(s.scope(), id(&team)?).await?;
        let summary = c
            .bus
            .admin_conversation(s.scope(), team.id, id(&conversation)?)
            .await?;
        let mut names = Names::of(&c.bus.admin_agents(s.scope(), team.id).await?);
        let (live, _) = messages_part(
            &c.bus,
            s.scope(),
            team.id,
            summary.conversation.id,
            window,
            &mut names,
        )
        .await?;
        Ok::<_, Failed>((team, summary, live))
    };
    let (team, summary, live) = match shown.await {
        Ok(v) => v,
        Err(e) => return s.refuse(e),
    };
    let mut chrome = s.chrome(Section::Team);
    chrome.live = Some(
        Live::Conversation {
            team: team.id,
            conversation: summary.conversation.id,
            window,
        }
        .url(&live),
    );
    html(
        StatusCode::OK,
        &ConversationPage {
            chrome,
            team: team.id,
            team_name: team.name,
            conversation: summary.conversation.id,
            title: summary.conversation.title.clone(),
            live,
            csrf: s.csrf(),
            request_id: Uuid::new_v4().to_string(),
        },
    )
}

/// `POST /console/teams/{team}/conversations/{conversation}/messages` (`_csrf`, `request_id`,
/// `body`): posts as the operator's human member of the team, `303` back to the conversation.
/// The same `request_id` twice (a double submit) sends one message.
pub(crate) async fn post(
    State(c): State<Console>,
    s: Signed,
    Path((team, conversation)): Path<(String, String)>,
    fields: Fields,
) -> Response {
    if let Some(refused) = s.csrf_refusal(&fields) {
        return refused;
    }
    // Browsers send a textarea's line breaks as CRLF.
    let body = fields.get("body").unwrap_or("").replace("\r\n", "\n");
    if body.trim().is_empty() {
        return failure::page(
            StatusCode::BAD_REQUEST,
            "Nothing to send",
            "The message was empty: nothing was sent.".to_owned(),
            Some(s.frame(Section::Team)),
        );
    }
    let request_id = fields
        .text("request_id")
        .map_or_else(|| Uuid::new_v4().to_string(), str::to_owned);
    let posted = async {
        let (team, conversation) = (id(&team)?, id(&conversation)?);
        let sent = c
            .bus
            .admin_post(s.operator(), team, conversation, request_id, body)
            .await?;
        Ok::<_, BusError>((team, conversation, sent))
    };
    match posted.await {
        Ok((team, conversation, sent)) => {
            tracing::info!(operator = %s.operator().name, %team, message_id = %sent.message.id, created = sent.created, "console: operator posted");
            see_other(
                &format!("/console/teams/{team}/conversations/{conversation}"),
                &[],
            )
        }
        Err(e) => s.refuse(e),
    }
}

#[derive(Template)]
#[template(path = "console/message.html")]
struct MessagePage {
    chrome: Chrome,
    team: Uuid,
    team_name: String,
    title: String,
    m: MessageView,
}

/// `GET /console/teams/{team}/messages/{message}`: the whole body and every receipt.
pub(crate) async fn message(
    State(c): State<Console>,
    s: Signed,
    Path((team, message)): Path<(String, String)>,
) -> Response {
    let shown = async {
        let team = c.bus.admin_team(s.scope(), id(&team)?).await?;
        let m = c
            .bus
            .admin_message(s.scope(), team.id, id(&message)?)
            .await?;
        let summary = c
            .bus
            .admin_conversation(s.scope(), team.id, m.entry.message.conversation)
            .await?;
        let names = Names::of(&c.bus.admin_agents(s.scope(), team.id).await?);
        Ok::<_, BusError>((team, summary, MessageView::of(&m, &names, false)))
    };
    match shown.await {
        Ok((team, summary, m)) => html(
            StatusCode::OK,
            &MessagePage {
                chrome: s.chrome(Section::Team),
                team: team.id,
                team_name: team.name,
                title: summary.conversation.title,
                m,
            },
        ),
        Err(e) => s.refuse(e),
    }
}
