//! The overview (`GET /console`): per team of the operator's scope, messages sent and delivered
//! per minute over the last hour (a uPlot chart drawn by `console.js` from the table of the same
//! numbers, which is what reads with JavaScript off), deliveries pending and the oldest one's
//! age, parked push registrations. Live: the teams part is rendered again on the team's feed
//! events.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::{OperatorScope, Uuid};

use super::Console;
use super::events::Live;
use super::failure::Failed;
use super::frame::{Chrome, Section, Signed, html};
use super::views::filters;
use super::views::{Rendered, oldest};
use crate::usecases::bus::Bus;
use crate::usecases::oversight::TeamOverview;

/// One minute of a team's chart.
pub(crate) struct BucketRow {
    /// Its start, Unix seconds (what the chart plots).
    pub(crate) t: i64,
    /// Its start as `HH:MM` (UTC).
    pub(crate) minute: String,
    pub(crate) sent: u64,
    pub(crate) delivered: u64,
}

/// One team's section of the overview.
pub(crate) struct TeamCard {
    pub(crate) id: Uuid,
    pub(crate) name: String,
    pub(crate) pending: u64,
    pub(crate) oldest: String,
    pub(crate) parked: usize,
    pub(crate) agents: usize,
    pub(crate) active_agents: usize,
    pub(crate) sent: u64,
    pub(crate) delivered: u64,
    pub(crate) rows: Vec<BucketRow>,
}

impl TeamCard {
    fn of(o: &TeamOverview, now: crewbus_domain::DateTime<crewbus_domain::Utc>) -> TeamCard {
        TeamCard {
            id: o.team.id,
            name: o.team.name.clone(),
            pending: o.pending,
            oldest: oldest(now, o.oldest_pending_at),
            parked: o.parked,
            agents: o.agents,
            active_agents: o.active_agents,
            sent: o.series.iter().map(|b| b.sent).sum(),
            delivered: o.series.iter().map(|b| b.delivered).sum(),
            rows: o
                .series
                .iter()
                .map(|b| BucketRow {
                    t: b.start.timestamp(),
                    minute: b.start.format("%H:%M").to_string(),
                    sent: b.sent,
                    delivered: b.delivered,
                })
                .collect(),
        }
    }
}

/// The live part: every team's section.
#[derive(Template)]
#[template(path = "console/teams.html")]
pub(crate) struct TeamsPart {
    pub(crate) teams: Vec<TeamCard>,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage {
    chrome: Chrome,
    teams: Rendered,
}

/// The teams part as it stands now.
pub(crate) async fn teams_part(bus: &Bus, scope: &OperatorScope) -> Result<Rendered, Failed> {
    let now = bus.now();
    let teams = bus
        .admin_overview(scope)
        .await?
        .iter()
        .map(|o| TeamCard::of(o, now))
        .collect();
    Ok(Rendered::of(&TeamsPart { teams })?)
}

/// `GET /console`.
pub(crate) async fn page(State(c): State<Console>, s: Signed) -> Response {
    let teams = match teams_part(&c.bus, s.scope()).await {
        Ok(t) => t,
        Err(e) => return s.refuse(e),
    };
    let mut chrome = s.chrome(Section::Overview);
    chrome.live = Some(Live::Overview.url(&teams));
    chrome.charts = true;
    html(StatusCode::OK, &OverviewPage { chrome, teams })
}
