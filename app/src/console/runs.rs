//! A team's runs (`GET /console/teams/{team}/runs`) and one run's journal
//! (`GET /console/teams/{team}/runs/{run}`).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::{BusError, DateTime, Record, RecordKind, RunId, Seq, Utc, Uuid};
use serde::Deserialize;

use super::Console;
use super::frame::{Chrome, PageQuery, Section, Signed, html};
use super::team::id;
use super::views::filters;
use super::views::{Names, Stamp, short};

/// Runs a runs page lists at once.
const RUNS_PAGE: usize = 50;

/// Records a run page lists at once.
const RECORDS_PAGE: usize = 200;

struct RunRow {
    id: Uuid,
    short: String,
    agent: String,
    admitted: Stamp,
    last_seq: u64,
    /// `sealed at`, outcome.
    sealed: Option<(Stamp, &'static str)>,
}

#[derive(Template)]
#[template(path = "console/runs.html")]
struct RunsPage {
    chrome: Chrome,
    team: Uuid,
    team_name: String,
    runs: Vec<RunRow>,
    /// `before` of the next page of older runs, when the page is full.
    older: Option<String>,
}

/// `?before=` (RFC 3339): runs admitted before it.
#[derive(Debug, Deserialize)]
pub(crate) struct RunsPaging {
    #[serde(default)]
    before: Option<DateTime<Utc>>,
}

/// `GET /console/teams/{team}/runs[?before=…]`: the newest runs first.
pub(crate) async fn list(
    State(c): State<Console>,
    s: Signed,
    Path(team): Path<String>,
    PageQuery(paging): PageQuery<RunsPaging>,
) -> Response {
    let shown = async {
        let team = c.bus.admin_team(s.scope(), id(&team)?).await?;
        let runs = c
            .bus
            .admin_runs(s.scope(), team.id, paging.before, RUNS_PAGE)
            .await?;
        let names = Names::of(&c.bus.admin_agents(s.scope(), team.id).await?);
        Ok::<_, BusError>((team, runs, names))
    };
    let (team, runs, names) = match shown.await {
        Ok(v) => v,
        Err(e) => return s.refuse(e),
    };
    let older = (runs.len() == RUNS_PAGE)
        .then(|| runs.last())
        .flatten()
        .map(|r| {
            r.admitted_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        });
    html(
        StatusCode::OK,
        &RunsPage {
            chrome: s.chrome(Section::Team),
            team: team.id,
            team_name: team.name,
            runs: runs
                .iter()
                .map(|r| RunRow {
                    id: r.id.0,
                    short: short(r.id.0),
                    agent: names.name(r.agent),
                    admitted: Stamp::of(r.admitted_at),
                    last_seq: r.last_seq.0,
                    sealed: r.sealed.map(|(at, o)| (Stamp::of(at), o.as_str())),
                })
                .collect(),
            older,
        },
    )
}

/// One journal record as the run page lists it.
struct RecordRow {
    seq: u64,
    at: Stamp,
    /// What kind of record, in words.
    what: &'static str,
    /// Its text (a note's, a seal's reason, the agent admitted): written by the agent or the
    /// bus, shown as text.
    text: String,
    /// The message it is about.
    message: Option<(String, String)>,
}

impl RecordRow {
    fn of(r: &Record, team: Uuid, names: &Names) -> RecordRow {
        let message =
            |m: &Uuid, label: String| Some((format!("/console/teams/{team}/messages/{m}"), label));
        let (what, text, message) = match &r.kind {
            RecordKind::RunAdmitted { agent, .. } => {
                ("Admitted", format!("for {}", names.name(*agent)), None)
            }
            RecordKind::RunResumed => ("Resumed", String::new(), None),
            RecordKind::MessageSent {
                message: m, seq, ..
            } => ("Sent", String::new(), message(m, format!("message #{seq}"))),
            RecordKind::MessageDelivered { message: m, .. } => (
                "Confirmed a delivery",
                String::new(),
                message(m, "the message".to_owned()),
            ),
            RecordKind::MessageAcknowledged { message: m, .. } => {
                ("Read", String::new(), message(m, "the message".to_owned()))
            }
            RecordKind::Note { text } => ("Note", text.clone(), None),
            RecordKind::RunSealed { outcome, reason } => {
                ("Sealed", format!("{outcome}: {reason}"), None)
            }
            RecordKind::LeaseGranted {
                pattern,
                mode,
                token,
                expires_at,
                ..
            } => (
                "Took a lease",
                format!(
                    "{} {pattern} (fencing token {token}), until {}",
                    match mode {
                        crewbus_domain::LeaseMode::Exclusive => "exclusive",
                        crewbus_domain::LeaseMode::Shared => "shared",
                    },
                    Stamp::of(*expires_at).text
                ),
                None,
            ),
            RecordKind::LeaseRenewed { expires_at, .. } => (
                "Renewed a lease",
                format!("until {}", Stamp::of(*expires_at).text),
                None,
            ),
            RecordKind::LeaseEnded { reason, .. } => ("A lease ended", reason.to_string(), None),
            _ => ("Record", String::new(), None),
        };
        RecordRow {
            seq: r.seq.0,
            at: Stamp::of(r.at),
            what,
            text,
            message,
        }
    }
}

#[derive(Template)]
#[template(path = "console/run.html")]
struct RunPage {
    chrome: Chrome,
    team: Uuid,
    team_name: String,
    run: Uuid,
    agent: String,
    admitted: Stamp,
    sealed: Option<(Stamp, &'static str)>,
    records: Vec<RecordRow>,
    /// `from_seq` of the next page of records, when the page is full.
    later: Option<u64>,
}

/// `?from_seq=N` (default 1).
#[derive(Debug, Deserialize)]
pub(crate) struct RecordsPaging {
    #[serde(default)]
    from_seq: Option<u64>,
}

/// `GET /console/teams/{team}/runs/{run}[?from_seq=N]`: the run's journal, in order.
pub(crate) async fn run(
    State(c): State<Console>,
    s: Signed,
    Path((team, run)): Path<(String, String)>,
    PageQuery(paging): PageQuery<RecordsPaging>,
) -> Response {
    let from = paging.from_seq.unwrap_or(1).max(1);
    let shown = async {
        let team = c.bus.admin_team(s.scope(), id(&team)?).await?;
        let (run, records) = c
            .bus
            .admin_run(
                s.scope(),
                team.id,
                RunId(id(&run)?),
                Seq(from),
                RECORDS_PAGE,
            )
            .await?;
        let names = Names::of(&c.bus.admin_agents(s.scope(), team.id).await?);
        Ok::<_, BusError>((team, run, records, names))
    };
    let (team, run, records, names) = match shown.await {
        Ok(v) => v,
        Err(e) => return s.refuse(e),
    };
    let later = (records.len() == RECORDS_PAGE)
        .then(|| records.last().map(|r| r.seq.0 + 1))
        .flatten();
    html(
        StatusCode::OK,
        &RunPage {
            chrome: s.chrome(Section::Team),
            team: team.id,
            team_name: team.name,
            run: run.id.0,
            agent: names.name(run.agent),
            admitted: Stamp::of(run.admitted_at),
            sealed: run.sealed.map(|(at, o)| (Stamp::of(at), o.as_str())),
            records: records
                .iter()
                .map(|r| RecordRow::of(r, team.id, &names))
                .collect(),
            later,
        },
    )
}
