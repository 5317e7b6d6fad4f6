//! Push (`GET /console/push`): the registrations of each team's newest runs with their attempts
//! logs, and the parked ones with their reason and an un-park button. URLs are shown redacted
//! (no userinfo, no query) and authorizations by their scheme only, never a credential.

use std::collections::HashMap;

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::{AttemptOutcome, BusError, RunId, Uuid, redact_url};

use super::Console;
use super::frame::{Chrome, Fields, Section, Signed, html};
use super::security::see_other;
use super::team::id;
use super::views::filters;
use super::views::{Stamp, short};
use crate::usecases::oversight::RegistrationView;

/// The newest runs of each team whose registrations the page lists.
const RUNS_SHOWN: usize = 20;

struct AttemptRow {
    at: Stamp,
    seq: u64,
    outcome: String,
    ok: bool,
    duration_ms: u64,
}

struct RegistrationRow {
    team: Uuid,
    team_name: String,
    run: Uuid,
    run_short: String,
    id: String,
    url: String,
    scheme: Option<String>,
    next_seq: u64,
    failures: u32,
    next_attempt: Stamp,
    last_error: Option<String>,
    parked: bool,
    attempts: Vec<AttemptRow>,
}

impl RegistrationRow {
    fn of(v: &RegistrationView, team_names: &HashMap<Uuid, String>) -> RegistrationRow {
        let r = &v.registration;
        RegistrationRow {
            team: v.team,
            team_name: team_names
                .get(&v.team)
                .cloned()
                .unwrap_or_else(|| v.team.to_string()),
            run: r.config.run.0,
            run_short: short(r.config.run.0),
            id: r.config.id.clone(),
            url: redact_url(&r.config.url),
            scheme: r.config.authentication.as_ref().map(|a| a.scheme.clone()),
            next_seq: r.next_seq.0,
            failures: r.attempts,
            next_attempt: Stamp::of(r.next_attempt_at),
            last_error: r.last_error.clone(),
            parked: r.parked,
            attempts: v
                .attempts
                .iter()
                .map(|a| AttemptRow {
                    at: Stamp::of(a.at),
                    seq: a.seq.0,
                    outcome: match &a.outcome {
                        AttemptOutcome::Status { status } => format!("HTTP {status}"),
                        AttemptOutcome::Error { error } => error.clone(),
                    },
                    ok: a.outcome.acknowledged(),
                    duration_ms: a.duration_ms,
                })
                .collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "console/push.html")]
struct PushPage {
    chrome: Chrome,
    csrf: String,
    registrations: Vec<RegistrationRow>,
    parked: Vec<RegistrationRow>,
}

/// `GET /console/push`.
pub(crate) async fn page(State(c): State<Console>, s: Signed) -> Response {
    let shown = async {
        let teams = c.bus.admin_teams(s.scope()).await?;
        let names: HashMap<Uuid, String> = teams.iter().map(|t| (t.id, t.name.clone())).collect();
        let mut registrations = Vec::new();
        for team in &teams {
            for run in c.bus.admin_push(s.scope(), team.id, RUNS_SHOWN).await? {
                registrations.extend(
                    run.registrations
                        .iter()
                        .map(|r| RegistrationRow::of(r, &names)),
                );
            }
        }
        let parked = c
            .bus
            .admin_parked(s.scope())
            .await?
            .iter()
            .map(|r| RegistrationRow::of(r, &names))
            .collect();
        Ok::<_, BusError>((registrations, parked))
    };
    match shown.await {
        Ok((registrations, parked)) => html(
            StatusCode::OK,
            &PushPage {
                chrome: s.chrome(Section::Push),
                csrf: s.csrf(),
                registrations,
                parked,
            },
        ),
        Err(e) => s.refuse(e),
    }
}

/// `POST /console/push/unpark` (`_csrf`, `run`, `id`): the parked registration is due again,
/// from its cursor; `303` back to the push page. No parked registration with that id (or one of
/// a team outside the scope) → `404`.
pub(crate) async fn unpark(State(c): State<Console>, s: Signed, fields: Fields) -> Response {
    if let Some(refused) = s.csrf_refusal(&fields) {
        return refused;
    }
    let done = async {
        let run = RunId(id(fields.text("run").unwrap_or(""))?);
        let registration = fields.text("id").unwrap_or("");
        if !c.bus.admin_unpark(s.scope(), run, registration).await? {
            return Err(BusError::not_found(format!(
                "parked registration {registration}"
            )));
        }
        tracing::info!(operator = %s.operator().name, %run, registration, "console: registration un-parked");
        Ok(())
    };
    match done.await {
        Ok(()) => see_other("/console/push", &[]),
        Err(e) => s.refuse(e),
    }
}
