//! The operator console at `/console` on the serve listener: server-rendered pages over the
//! oversight and operator use cases, for the people who run the agents.
//!
//! One more driving adapter: every handler parses its request, calls the use cases of
//! `usecases/oversight.rs` and `usecases/operators.rs` (the ones the admin API and the CLI
//! call, with the signed-in operator's scope) and renders a template. Nothing here reads a port.
//!
//! # Templates: askama
//! Pages are askama templates, files under `app/templates/console/`, compiled into the binary:
//! - **checked at compile time**: a template naming a field or a method that does not exist
//!   does not build, so a page cannot fail at run time over a typo, and rendering is plain
//!   Rust code (no interpreter, no template files to ship beside the binary);
//! - **escapes by default**: every `{{ value }}` of an `.html` template is HTML-escaped (`<`,
//!   `>`, `&`, `"`, `'`), so whatever an agent wrote — a body, a name, a title, a note — is
//!   text, never markup; nothing in the console is marked `|safe`;
//! - **bidirectional spoofing inert**: every string an agent (or anyone but the console) wrote
//!   is printed through the `inert` filter (`views::filters`: Unicode's explicit
//!   bidirectional controls shown as `[U+XXXX]`, so `report \u{202E}gnp.exe` cannot read as
//!   "report exe.png") inside an isolating element (`<bdi>`, or `dir="auto"` on a body's
//!   block), so right-to-left text cannot reorder the page's own words around it;
//! - **templates as files**, in the Jinja syntax designers know, with inheritance (every page
//!   extends `base.html`); a page's live part is a template of its own (`messages.html`,
//!   `team_live.html`, `teams.html`) that the page places as it rendered it (a
//!   `views::Rendered`, which only a template can make and askama does not escape again) and
//!   the live stream renders alone, so a live update is exactly what a reload shows.
//!
//! The smallest feature set: `derive` and `std` (no `config`: the default `templates`
//! directory; no `urlencode`: links carry ids only).
//!
//! maud (markup as Rust macros) escapes and checks as well but keeps pages out of files;
//! minijinja reads templates at run time and finds their mistakes there.
//!
//! # Script: a small own `console.js`, no framework
//! The pages' only script (`static/console/console.js`, ~150 lines) draws the overview's charts
//! with uPlot (vendored from npm, pinned, with its licence and checksums: see
//! `static/console/vendor/uplot/VENDORED.md`) and runs the live parts with a bare `EventSource`:
//! each `swap` event's HTML replaces the elements of the same ids. htmx would bring two more
//! vendored files for the same few lines.
//!
//! # Safe by default
//! - Sign-in with a one-time code (`crewbus serve` prints it) or an operator token; the session
//!   is a server-side record ([`crate::bus::Bus::console_session`]) behind the cookie
//!   `crewbus_session` (`HttpOnly; SameSite=Strict; Path=/console`, `Secure` with
//!   `console.secure_cookies`) holding its random secret. Not signed in → `303` to the sign-in
//!   page.
//! - Every POST carries a CSRF token in the hidden field `_csrf`, refused `403` without a valid
//!   one: for a session hex(SHA-256(`"csrf:"` + session secret)), derived and never stored; for
//!   the sign-in form the same derivation of a pre-session secret in its own cookie (double
//!   submit).
//! - Failed sign-ins are counted per client address: the sixth within a minute is `429` with
//!   `Retry-After` (`throttle.rs`).
//! - Responses carry a Content-Security-Policy without inline script or style
//!   (`security::CSP`), `X-Content-Type-Options: nosniff`, `Referrer-Policy: same-origin`
//!   (no `Referer` leaves the console; `no-referrer` would make browsers send form POSTs with
//!   `Origin: null`, refused by the `Origin` check), `X-Frame-Options: DENY`; pages are
//!   `Cache-Control: no-store`, static assets immutable.
//! - `Host` and `Origin` are checked for every route by the listener ([`crate::edge::allow`]).
//!
//! # Live parts
//! Pages that change while watched (the overview, a team, a conversation) open one
//! Server-Sent Events stream (`GET /console/events`, `events.rs`) fed by the bus's console feed
//! ([`crate::bus::Bus::watch_feed`]), never by polling: on a relevant feed event the stream
//! renders the changed part again (at most once per 500 ms per viewer on a conversation page, once a second on the others) and sends it; the page's
//! own script (`static/console/console.js`) swaps it in. Every page is complete HTML without
//! JavaScript, and every form works as a plain POST answered with `303`.

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get, post};
use crewbus_domain::TokenHash;
use tokio::sync::broadcast;

use crate::usecases::bus::Bus;

mod assets;
mod conversation;
mod events;
mod failure;
mod frame;
mod overview;
mod push;
mod runs;
mod security;
mod shared;
mod sign_in;
mod storage;
mod team;
mod throttle;
mod views;

/// Where the console is served.
pub const PATH: &str = "/console";

/// What every console handler sees.
#[derive(Clone)]
pub(crate) struct Console {
    /// The use cases.
    pub(crate) bus: Bus,
    /// Failed sign-ins per client address.
    pub(crate) throttle: Arc<throttle::SignInThrottle>,
    /// Sessions ended on this server (sign-out): their live streams end at once.
    pub(crate) ended: broadcast::Sender<TokenHash>,
    /// Conversation parts rendered once for all their live viewers.
    pub(crate) renders: Arc<shared::SharedRenders>,
}

impl Console {
    fn new(bus: Bus) -> Self {
        let (ended, _) = broadcast::channel(64);
        Console {
            bus,
            throttle: Arc::new(throttle::SignInThrottle::default()),
            ended,
            renders: Arc::default(),
        }
    }
}

/// The console's routes (under [`PATH`]) with their security headers, for any outer state: the
/// server merges them into the HTTP router ([`crate::http::router`]) beside the API and `/mcp`
/// when `console.enabled`, so the listener's `Host`/`Origin` check, body limit and body deadline
/// apply to them too.
pub fn router<S: Clone + Send + Sync + 'static>(bus: Bus) -> Router<S> {
    Router::new()
        .route("/console", get(overview::page))
        .route(
            "/console/",
            get(|| async { security::see_other(PATH, &[]) }),
        )
        .route("/console/sign-in", get(sign_in::form).post(sign_in::submit))
        .route("/console/sign-out", post(sign_in::sign_out))
        .route("/console/events", get(events::stream))
        .route("/console/teams/{team}", get(team::page))
        .route("/console/teams/{team}/agents", post(team::add_agent))
        .route(
            "/console/teams/{team}/agents/{agent}/revoke",
            post(team::revoke_agent),
        )
        .route(
            "/console/teams/{team}/conversations/{conversation}",
            get(conversation::page),
        )
        .route(
            "/console/teams/{team}/conversations/{conversation}/messages",
            post(conversation::post),
        )
        .route(
            "/console/teams/{team}/messages/{message}",
            get(conversation::message),
        )
        .route("/console/teams/{team}/runs", get(runs::list))
        .route("/console/teams/{team}/runs/{run}", get(runs::run))
        .route("/console/push", get(push::page))
        .route("/console/push/unpark", post(push::unpark))
        .route("/console/storage", get(storage::page))
        .route("/console/static/{file}", get(assets::serve))
        // Anything else under /console is the console's own 404 page, not the API's JSON.
        .route("/console/{*rest}", any(failure::not_found))
        .layer(axum::middleware::map_response(security::headers))
        .with_state(Console::new(bus))
}
