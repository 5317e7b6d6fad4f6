//! Storage (`GET /console/storage`): what each team keeps per body backend, against its quota,
//! as `<meter>` bars: the broker's stream limits where the team has streams (JetStream), else
//! the default body quota ([`Quotas::DEFAULT_BODIES`], what the memory store enforces by
//! default; SQLite and Postgres keep bodies in their database and enforce none: the disk is the
//! limit, and the page says so).

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use crewbus_domain::{Quotas, StorageUse, StreamKind, Uuid};

use super::Console;
use super::frame::{Chrome, Section, Signed, html};
use super::views::filters;
use super::views::{bytes, count};
use crate::usecases::oversight::TeamStorage;

/// The limit of a store that enforces none (SQLite, Postgres): the bars are drawn against the
/// default body quota, and the page says why.
const UNENFORCED: &str = "none enforced (default shown)";

/// One bar: a use against its limit.
struct Bar {
    value: u64,
    max: u64,
    /// 80 % of `max`: a browser colours the bar beyond it.
    high: u64,
    text: String,
}

impl Bar {
    fn of(value: u64, max: u64, text: String) -> Bar {
        let max = max.max(1);
        Bar {
            value: value.min(max),
            max,
            high: max / 10 * 8,
            text,
        }
    }
}

struct UseRow {
    /// `memory`, `sqlite`, `postgres`, `jetstream`, or `inbox stream`.
    what: String,
    /// Where the limit comes from.
    limit: &'static str,
    pending: Option<u64>,
    bodies: Bar,
    bytes: Bar,
}

struct TeamUse {
    id: Uuid,
    name: String,
    rows: Vec<UseRow>,
    /// Whether a row's store enforces no quota.
    unenforced: bool,
}

impl TeamUse {
    fn of(t: &TeamStorage) -> TeamUse {
        let stream = |kind| t.streams.iter().find(|s| s.kind == kind);
        // A team that keeps nothing yet shows its default backend, empty.
        let nothing = [StorageUse {
            backend: t.team.body_backend.clone(),
            messages: 0,
            bytes: 0,
            pending: 0,
        }];
        let uses = if t.uses.is_empty() {
            &nothing[..]
        } else {
            &t.uses[..]
        };
        let mut rows: Vec<UseRow> = uses
            .iter()
            .map(|u| {
                let (limits, limit) = match stream(StreamKind::Bodies) {
                    Some(s) if u.backend == "jetstream" => (s.limits, "stream limits"),
                    _ if u.backend == "memory" => (Quotas::DEFAULT_BODIES, "default quota"),
                    _ => (Quotas::DEFAULT_BODIES, UNENFORCED),
                };
                UseRow {
                    what: u.backend.clone(),
                    limit,
                    pending: Some(u.pending),
                    bodies: Bar::of(
                        u.messages,
                        limits.max_messages,
                        format!(
                            "{} of {} bodies",
                            count(u.messages),
                            count(limits.max_messages)
                        ),
                    ),
                    bytes: Bar::of(
                        u.bytes,
                        limits.max_bytes,
                        format!("{} of {}", bytes(u.bytes), bytes(limits.max_bytes)),
                    ),
                }
            })
            .collect();
        if let Some(s) = stream(StreamKind::Inbox) {
            rows.push(UseRow {
                what: "inbox stream".to_owned(),
                limit: "stream limits",
                pending: None,
                bodies: Bar::of(
                    s.messages,
                    s.limits.max_messages,
                    format!(
                        "{} of {} references",
                        count(s.messages),
                        count(s.limits.max_messages)
                    ),
                ),
                bytes: Bar::of(
                    s.bytes,
                    s.limits.max_bytes,
                    format!("{} of {}", bytes(s.bytes), bytes(s.limits.max_bytes)),
                ),
            });
        }
        TeamUse {
            id: t.team.id,
            name: t.team.name.clone(),
            unenforced: rows.iter().any(|r| r.limit == UNENFORCED),
            rows,
        }
    }
}

#[derive(Template)]
#[template(path = "console/storage.html")]
struct StoragePage {
    chrome: Chrome,
    teams: Vec<TeamUse>,
}

/// `GET /console/storage`.
pub(crate) async fn page(State(c): State<Console>, s: Signed) -> Response {
    match c.bus.admin_storage(s.scope()).await {
        Ok(teams) => html(
            StatusCode::OK,
            &StoragePage {
                chrome: s.chrome(Section::Storage),
                teams: teams.iter().map(TeamUse::of).collect(),
            },
        ),
        Err(e) => s.refuse(e),
    }
}
