//! A team (`GET /console/teams/{team}`): its agents with their status line, current run, last
//! activity, pending deliveries and the oldest one's age (revoke one; add one, its token shown
//! once), its live leases, its conversations, a link to its runs. Live: agents and conversations are rendered again on the
//! team's feed events.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::{AgentKind, BusError, OperatorScope, Uuid};

use super::Console;
use super::events::Live;
use super::failure::Failed;
use super::frame::{Chrome, Fields, Section, Signed, html};
use super::security::see_other;
use super::views::filters;
use super::views::{Names, Rendered, Stamp, age, oldest, short};
use crate::usecases::bus::Bus;

/// A path segment that must be an id; anything else is a page that does not exist.
pub(crate) fn id(segment: &str) -> Result<Uuid, BusError> {
    segment
        .parse()
        .map_err(|_| BusError::not_found(format!("`{segment}`")))
}

/// One row of `table#agents`.
pub(crate) struct AgentRow {
    pub(crate) id: Uuid,
    pub(crate) name: String,
    /// `active`, `revoked` or `human`.
    pub(crate) status: &'static str,
    /// The status line it set, and when (as text, never markup).
    pub(crate) line: Option<(String, Stamp)>,
    /// Its current run: id, and its first 8 hex digits.
    pub(crate) run: Option<(Uuid, String)>,
    pub(crate) last_active: Option<Stamp>,
    pub(crate) last_active_age: String,
    pub(crate) pending: u64,
    pub(crate) oldest: String,
}

/// One entry of `ul#conversations`.
pub(crate) struct ConversationRow {
    pub(crate) id: Uuid,
    pub(crate) title: String,
    pub(crate) members: String,
    pub(crate) messages: u64,
    pub(crate) last_sent: Option<Stamp>,
}

/// One row of `table#leases`: a live lease, as text.
pub(crate) struct LeaseRow {
    pub(crate) holder: String,
    pub(crate) pattern: String,
    pub(crate) mode: &'static str,
    pub(crate) token: u64,
    pub(crate) expires: Stamp,
    pub(crate) expires_in: String,
}

/// The live part of the team page.
#[derive(Template)]
#[template(path = "console/team_live.html")]
pub(crate) struct TeamLive {
    pub(crate) team: Uuid,
    pub(crate) csrf: String,
    pub(crate) agents: Vec<AgentRow>,
    pub(crate) conversations: Vec<ConversationRow>,
    pub(crate) leases: Vec<LeaseRow>,
}

/// The team's agents and conversations as they stand now (`csrf`: the revoke forms' token).
pub(crate) async fn live_part(
    bus: &Bus,
    scope: &OperatorScope,
    team: Uuid,
    csrf: &str,
) -> Result<Rendered, Failed> {
    let now = bus.now();
    let agents = bus.admin_agents(scope, team).await?;
    let names = Names::of(&agents);
    let conversations = bus.admin_conversations(scope, team).await?;
    let leases = bus
        .admin_leases(scope, team, &crewbus_domain::LeaseFilter::default())
        .await?;
    let part = TeamLive {
        leases: leases
            .iter()
            .map(|l| LeaseRow {
                holder: l.agent_name.clone(),
                pattern: l.claim.pattern.to_string(),
                mode: match l.claim.mode {
                    crewbus_domain::LeaseMode::Exclusive => "exclusive",
                    crewbus_domain::LeaseMode::Shared => "shared",
                },
                token: l.token.0,
                expires: Stamp::of(l.expires_at),
                expires_in: age(l.expires_at, now),
            })
            .collect(),
        team,
        csrf: csrf.to_owned(),
        agents: agents
            .iter()
            .map(|a| AgentRow {
                id: a.agent.id,
                name: a.agent.name.clone(),
                status: match (a.agent.kind, a.agent.revoked()) {
                    (AgentKind::Human, _) => "human",
                    (_, true) => "revoked",
                    (_, false) => "active",
                },
                line: a
                    .status
                    .as_ref()
                    .map(|l| (l.text.clone(), Stamp::of(l.set_at))),
                run: a.current_run.map(|r| (r, short(r))),
                last_active: a.last_active_at.map(Stamp::of),
                last_active_age: a
                    .last_active_at
                    .map_or_else(|| "never".to_owned(), |t| format!("{} ago", age(now, t))),
                pending: a.pending,
                oldest: oldest(now, a.oldest_pending_at),
            })
            .collect(),
        conversations: conversations
            .iter()
            .map(|c| ConversationRow {
                id: c.conversation.id,
                title: c.conversation.title.clone(),
                members: c
                    .conversation
                    .members
                    .iter()
                    .map(|m| names.name(m.agent))
                    .collect::<Vec<_>>()
                    .join(", "),
                messages: c.messages,
                last_sent: c.last_sent_at.map(Stamp::of),
            })
            .collect(),
    };
    Ok(Rendered::of(&part)?)
}

#[derive(Template)]
#[template(path = "console/team.html")]
struct TeamPage {
    chrome: Chrome,
    team: Uuid,
    name: String,
    csrf: String,
    live: Rendered,
}

/// `GET /console/teams/{team}`.
pub(crate) async fn page(
    State(c): State<Console>,
    s: Signed,
    Path(team): Path<String>,
) -> Response {
    let shown = async {
        let team = c.bus.admin_team(s.scope(), id(&team)?).await?;
        let live = live_part(&c.bus, s.scope(), team.id, &s.csrf()).await?;
        Ok::<_, Failed>((team, live))
    };
    let (team, live) = match shown.await {
        Ok(v) => v,
        Err(e) => return s.refuse(e),
    };
    let mut chrome = s.chrome(Section::Team);
    chrome.live = Some(Live::Team(team.id).url(&live));
    html(
        StatusCode::OK,
        &TeamPage {
            chrome,
            team: team.id,
            name: team.name,
            csrf: s.csrf(),
            live,
        },
    )
}

#[derive(Template)]
#[template(path = "console/agent_added.html")]
struct AgentAddedPage {
    chrome: Chrome,
    team: Uuid,
    team_name: String,
    agent: String,
    token: String,
}

/// `POST /console/teams/{team}/agents` (`_csrf`, `name`): adds an agent and shows its token,
/// once (`201`; the page is not stored by the browser: `no-store`).
pub(crate) async fn add_agent(
    State(c): State<Console>,
    s: Signed,
    Path(team): Path<String>,
    fields: Fields,
) -> Response {
    if let Some(refused) = s.csrf_refusal(&fields) {
        return refused;
    }
    let added = async {
        let team = c.bus.admin_team(s.scope(), id(&team)?).await?;
        let name = fields.text("name").unwrap_or("");
        let new = c.bus.admin_add_agent(s.scope(), team.id, name).await?;
        Ok::<_, BusError>((team, new))
    };
    match added.await {
        Ok((team, new)) => {
            tracing::info!(operator = %s.operator().name, team = %team.id, agent = %new.agent.id, "console: agent added");
            html(
                StatusCode::CREATED,
                &AgentAddedPage {
                    chrome: s.chrome(Section::Team),
                    team: team.id,
                    team_name: team.name,
                    agent: new.agent.name.clone(),
                    token: new.token.clone(),
                },
            )
        }
        Err(e) => s.refuse(e),
    }
}

/// `POST /console/teams/{team}/agents/{agent}/revoke` (`_csrf`): revokes the agent (its next
/// call is `401`), `303` back to the team page.
pub(crate) async fn revoke_agent(
    State(c): State<Console>,
    s: Signed,
    Path((team, agent)): Path<(String, String)>,
    fields: Fields,
) -> Response {
    if let Some(refused) = s.csrf_refusal(&fields) {
        return refused;
    }
    let revoked = async {
        let (team, agent) = (id(&team)?, id(&agent)?);
        c.bus.admin_revoke_agent(s.scope(), team, agent).await?;
        Ok::<_, BusError>(team)
    };
    match revoked.await {
        Ok(team) => {
            tracing::info!(operator = %s.operator().name, %team, agent = %agent, "console: agent revoked");
            see_other(&format!("/console/teams/{team}"), &[])
        }
        Err(e) => s.refuse(e),
    }
}
