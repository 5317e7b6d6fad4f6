//! The pages' live stream: `GET /console/events?view=…`, Server-Sent Events fed by the bus's
//! console feed ([`Bus::watch_feed`]), never by polling the ledger.
//!
//! A page names its live part (`view=overview`; `view=team&team=…`;
//! `view=conversation&team=…&conversation=…[&after_seq=N]`) and the fingerprint of the part as
//! it rendered it (`v=`). The stream subscribes to the feed, renders the part once (anything
//! that changed between the page and the subscription is sent at once; the same part is not),
//! then waits. On a feed event that concerns the part (its team, its conversation or one of the
//! messages it shows), or `Lagged` (events may have been missed), it renders the part again —
//! at most once per [`Live::interval`] per viewer, however many events came meanwhile — and
//! sends it as one `swap` event whose data is the part's HTML (root element with its `id`),
//! unless it rendered exactly what the page has. `console.js` swaps it in.
//!
//! The stream ends, with an `end` event, when its session is signed out on this server (at
//! once), when the session is found over — asked (without using it: `Bus::console_session_is_live`)
//! before every update, so a revocation or a sign-out on any server shows nothing more, and once
//! the session would have idled out —, when the part is no longer the operator's to see, or when
//! the server shuts down. A request without a session is
//! answered `204` (an `EventSource` then stops reconnecting). SSE comments keep the connection
//! alive every [`KEEP_ALIVE`].

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use crewbus_domain::{BusError, FeedEvent, FeedKind, FeedUpdate, OperatorScope, TokenHash, Uuid};
use futures_util::stream;
use serde::Deserialize;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::Instant;

use super::Console;
use super::conversation::Window;
use super::failure::Failed;
use super::frame::{PageQuery, Signed};
use super::overview::teams_part;
use super::team::{id, live_part};
use super::views::Rendered;

/// A conversation page is rendered again at most this often per viewer (500 ms: twice a second
/// is as fast as a person reads a busy conversation, and each update of a busy page costs the
/// bus — `benches/benches/console_viewers.rs` measured 250 ms and 500 ms).
pub(crate) const CONVERSATION_INTERVAL: Duration = Duration::from_millis(500);

/// The overview and a team page, whose reads cover a whole team, at most this often (1 s).
pub(crate) const TEAM_INTERVAL: Duration = Duration::from_secs(1);

/// An SSE comment is sent this often on a quiet stream.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A page's live part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Live {
    /// The overview's teams.
    Overview,
    /// A team page's agents and conversations.
    Team(Uuid),
    /// A conversation page's `ol#messages`.
    Conversation {
        team: Uuid,
        conversation: Uuid,
        window: Window,
    },
}

impl Live {
    /// The stream a page showing `part` opens.
    pub(crate) fn url(&self, part: &Rendered) -> String {
        let v = part.fingerprint();
        match self {
            Live::Overview => format!("/console/events?view=overview&v={v}"),
            Live::Team(team) => format!("/console/events?view=team&team={team}&v={v}"),
            Live::Conversation {
                team,
                conversation,
                window,
            } => {
                let after = window
                    .after_seq()
                    .map_or_else(String::new, |n| format!("&after_seq={n}"));
                format!(
                    "/console/events?view=conversation&team={team}&conversation={conversation}{after}&v={v}"
                )
            }
        }
    }

    /// At most one render per this.
    pub(crate) fn interval(&self) -> Duration {
        match self {
            Live::Conversation { .. } => CONVERSATION_INTERVAL,
            Live::Overview | Live::Team(_) => TEAM_INTERVAL,
        }
    }

    /// Whether `e` may change what this part shows (`shown`: the messages it shows).
    pub(crate) fn concerns(
        &self,
        e: &FeedEvent,
        scope: &OperatorScope,
        shown: &HashSet<Uuid>,
    ) -> bool {
        if e.kind == FeedKind::Other {
            return false;
        }
        match self {
            // Sends, stored bodies (pending counts them), confirmations, agents, parking; not
            // hand-outs, reads or runs, which change no figure of the overview.
            Live::Overview => {
                scope.covers(e.team)
                    && matches!(
                        e.kind,
                        FeedKind::MessageSent
                            | FeedKind::MessageStored
                            | FeedKind::Confirmed
                            | FeedKind::AgentAdded
                            | FeedKind::AgentRevoked
                            | FeedKind::RegistrationParked
                    )
            }
            // Agents' pending deliveries, status lines and current runs, conversations' sizes,
            // the agents themselves, the live leases.
            Live::Team(team) => {
                e.team == *team
                    && matches!(
                        e.kind,
                        FeedKind::MessageSent
                            | FeedKind::MessageStored
                            | FeedKind::Confirmed
                            | FeedKind::AgentAdded
                            | FeedKind::AgentRevoked
                            | FeedKind::RunChanged
                            | FeedKind::StatusChanged
                            | FeedKind::LeaseChanged
                    )
            }
            Live::Conversation {
                team, conversation, ..
            } => {
                let about_messages = matches!(
                    e.kind,
                    FeedKind::MessageSent
                        | FeedKind::MessageStored
                        | FeedKind::HandedOut
                        | FeedKind::Confirmed
                        | FeedKind::Acknowledged
                );
                e.team == *team
                    && about_messages
                    && match (e.conversation, e.message) {
                        (Some(c), _) => c == *conversation,
                        // Confirmations and reads name their message, not its conversation.
                        (None, Some(m)) => shown.contains(&m),
                        // Coalesced across messages of several conversations.
                        (None, None) => true,
                    }
            }
        }
    }
}

/// `GET /console/events` parameters.
#[derive(Debug, Deserialize)]
pub(crate) struct Watch {
    view: String,
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    conversation: Option<String>,
    #[serde(default)]
    after_seq: Option<u64>,
    /// The fingerprint of the part the page shows.
    #[serde(default)]
    v: Option<String>,
}

impl Watch {
    fn live(&self) -> Result<Live, BusError> {
        let team = || id(self.team.as_deref().unwrap_or(""));
        match self.view.as_str() {
            "overview" => Ok(Live::Overview),
            "team" => Ok(Live::Team(team()?)),
            "conversation" => Ok(Live::Conversation {
                team: team()?,
                conversation: id(self.conversation.as_deref().unwrap_or(""))?,
                window: self.after_seq.map_or(Window::Latest, Window::After),
            }),
            other => Err(BusError::not_found(format!("view `{other}`"))),
        }
    }
}

/// One viewer's stream.
struct Viewer {
    console: Console,
    live: Live,
    scope: OperatorScope,
    csrf: String,
    secret: String,
    hash: TokenHash,
    feed: Receiver<FeedUpdate>,
    ended: Receiver<TokenHash>,
    /// The messages the part shows (conversation pages).
    shown: HashSet<Uuid>,
    /// The fingerprint of what the page shows now.
    showing: Option<String>,
    /// A part rendered before the stream started, still to send.
    first: Option<Arc<LivePart>>,
    last_render: Instant,
    /// When the session was last looked up (and so kept alive).
    session_checked: Instant,
    done: bool,
}

/// What woke a waiting viewer.
enum Wake {
    /// Something the part shows may have changed.
    Changed,
    /// The session may be over: look.
    Check,
    /// The stream ends.
    End,
}

impl Viewer {
    /// Renders the part as of `fresh_after` or later: a conversation's through the console's
    /// shared renders (one read for every viewer of the same window), the others of its own.
    async fn render(&mut self, fresh_after: Instant) -> Result<Arc<LivePart>, Failed> {
        let bus = &self.console.bus;
        self.last_render = Instant::now();
        let own = |part| Arc::new(LivePart::new(part, HashSet::new()));
        match self.live {
            Live::Overview => teams_part(bus, &self.scope).await.map(own),
            Live::Team(team) => live_part(bus, &self.scope, team, &self.csrf).await.map(own),
            Live::Conversation {
                team,
                conversation,
                window,
            } => {
                let part = self
                    .console
                    .renders
                    .conversation(bus, &self.scope, team, conversation, window, fresh_after)
                    .await?;
                self.shown.clone_from(&part.shown);
                Ok(part)
            }
        }
    }

    /// Whether the session is still live, asked without using it (an open page does not keep
    /// an unused session alive); a lookup that fails counts as not live: the stream ends and
    /// the page, reloaded, asks again.
    async fn session_alive(&mut self) -> bool {
        self.session_checked = Instant::now();
        match self.console.bus.console_session_is_live(&self.secret).await {
            Ok(live) => live,
            Err(e) => {
                tracing::debug!(code = e.code(), error = ?e, "console stream: session lookup failed");
                false
            }
        }
    }

    /// Waits for what the stream must act on next.
    async fn wake(&mut self) -> Wake {
        let idle = self.console.bus.settings().console.session_idle;
        let expiry = self.session_checked + idle + Duration::from_secs(1);
        loop {
            tokio::select! {
                () = self.console.bus.shutdown.wait() => return Wake::End,
                ended = self.ended.recv() => match ended {
                    Ok(hash) if hash == self.hash => return Wake::End,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => return Wake::Check,
                    Err(RecvError::Closed) => return Wake::End,
                },
                update = self.feed.recv() => match update {
                    Ok(FeedUpdate::Events(events)) => {
                        if events.iter().any(|e| self.live.concerns(e, &self.scope, &self.shown)) {
                            return Wake::Changed;
                        }
                    }
                    Ok(FeedUpdate::Lagged) | Err(RecvError::Lagged(_)) => return Wake::Changed,
                    Err(RecvError::Closed) => return Wake::End,
                },
                () = tokio::time::sleep_until(expiry) => return Wake::Check,
            }
        }
    }

    /// Waits until the part may be rendered again; `false` when the stream must end meanwhile.
    async fn coalesce(&mut self) -> bool {
        let at = self.last_render + self.live.interval();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(at) => break,
                () = self.console.bus.shutdown.wait() => return false,
                ended = self.ended.recv() => match ended {
                    Ok(hash) if hash == self.hash => return false,
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return false,
                },
            }
        }
        // What came meanwhile is covered by the render that follows.
        loop {
            match self.feed.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Closed) => return false,
            }
        }
    }

    /// The next event of the stream; `None` once it ended.
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        if let Some(first) = self.first.take() {
            return Some(first.event.clone());
        }
        loop {
            match self.wake().await {
                Wake::End => return self.end(),
                Wake::Check => {
                    if !self.session_alive().await {
                        return self.end();
                    }
                    continue;
                }
                Wake::Changed => {}
            }
            if !self.coalesce().await {
                return self.end();
            }
            // Every event taken from the feed so far was committed before it reached the feed:
            // a render begun from now on shows it (a shared one too).
            let covered = Instant::now();
            // Before every update: a revocation or a sign-out on any server ends the stream
            // before it shows anything more.
            if !self.session_alive().await {
                return self.end();
            }
            match self.render(covered).await {
                Ok(part) => {
                    if self.showing.as_deref() != Some(part.fingerprint.as_str()) {
                        self.showing = Some(part.fingerprint.clone());
                        return Some(part.event.clone());
                    }
                }
                // The part is gone, or no longer the operator's to see.
                Err(Failed::Bus(BusError::NotFound { .. } | BusError::Unauthenticated)) => {
                    return self.end();
                }
                Err(e) => {
                    tracing::debug!(error = ?e, "console stream: render failed; waiting for the next change");
                }
            }
        }
    }

    fn end(&mut self) -> Option<Event> {
        self.done = true;
        Some(Event::default().event("end").data("ended"))
    }
}

/// A rendered live part as a stream sends it: its fingerprint, the `swap` event carrying it
/// (encoded once, however many viewers it goes to) and the messages it shows.
pub(crate) struct LivePart {
    pub(crate) fingerprint: String,
    pub(crate) event: Event,
    pub(crate) shown: HashSet<Uuid>,
}

impl LivePart {
    pub(crate) fn new(part: Rendered, shown: HashSet<Uuid>) -> Self {
        LivePart {
            fingerprint: part.fingerprint(),
            event: Event::default()
                .event("swap")
                .data(sse_lines(part.as_str())),
            shown,
        }
    }
}

/// `html` with every line break as `\n`: an SSE `data` field ends at a CR, an LF or a CRLF, and
/// the client joins the lines with LF, so a CRLF would arrive as two line breaks. An HTML parser
/// reads CRLF and CR as LF too, so the part swapped in reads exactly as the page reloaded.
fn sse_lines(html: &str) -> std::borrow::Cow<'_, str> {
    if html.contains('\r') {
        std::borrow::Cow::Owned(html.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        std::borrow::Cow::Borrowed(html)
    }
}

/// `GET /console/events?view=…&v=…`: the live stream of a page's part (see the module docs).
/// The part is rendered before the stream opens, so a team outside the scope is `404`.
pub(crate) async fn stream(
    State(c): State<Console>,
    signed: Result<Signed, Response>,
    PageQuery(watch): PageQuery<Watch>,
) -> Response {
    let Ok(s) = signed else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let live = match watch.live() {
        Ok(live) => live,
        Err(e) => return s.refuse(e),
    };
    // Subscribed before the first render: nothing committed after it is missed.
    let feed = c.bus.watch_feed().await;
    let ended = c.ended.subscribe();
    let mut viewer = Viewer {
        console: c.clone(),
        live,
        scope: s.scope().clone(),
        csrf: s.csrf(),
        secret: s.secret().to_owned(),
        hash: s.hash(),
        feed,
        ended,
        shown: HashSet::new(),
        showing: watch.v.clone(),
        first: None,
        last_render: Instant::now(),
        session_checked: Instant::now(),
        done: false,
    };
    match viewer.render(Instant::now()).await {
        Ok(part) => {
            if viewer.showing.as_deref() != Some(part.fingerprint.as_str()) {
                viewer.showing = Some(part.fingerprint.clone());
                viewer.first = Some(part);
            }
        }
        Err(e) => return s.refuse(e),
    }
    let events = stream::unfold(viewer, |mut viewer| async move {
        let event = viewer.next().await?;
        Some((Ok::<_, Infallible>(event), viewer))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_break_travels_as_one() {
        assert_eq!(super::sse_lines("a\r\nb\rc\nd"), "a\nb\nc\nd");
        assert!(matches!(
            super::sse_lines("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    use super::*;

    #[test]
    fn a_conversation_part_hears_its_conversation_and_the_messages_it_shows() {
        let (team, conv, other) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let shown_message = Uuid::new_v4();
        let shown: HashSet<Uuid> = [shown_message].into();
        let live = Live::Conversation {
            team,
            conversation: conv,
            window: Window::Latest,
        };
        let scope = OperatorScope::Everything;
        let sent = FeedEvent::new(team, FeedKind::MessageSent).conversation(conv);
        assert!(live.concerns(&sent, &scope, &shown));
        let elsewhere = FeedEvent::new(team, FeedKind::MessageSent).conversation(other);
        assert!(!live.concerns(&elsewhere, &scope, &shown));
        let confirmed = FeedEvent::new(team, FeedKind::Confirmed).message(shown_message);
        assert!(live.concerns(&confirmed, &scope, &shown));
        let not_shown = FeedEvent::new(team, FeedKind::Confirmed).message(Uuid::new_v4());
        assert!(!live.concerns(&not_shown, &scope, &shown));
        let other_team = FeedEvent::new(Uuid::new_v4(), FeedKind::MessageSent).conversation(conv);
        assert!(!live.concerns(&other_team, &scope, &shown));
        let revoked = FeedEvent::new(team, FeedKind::AgentRevoked);
        assert!(!live.concerns(&revoked, &scope, &shown));
        assert!(Live::Team(team).concerns(&revoked, &scope, &shown));
        let unknown = FeedEvent::new(team, FeedKind::Other);
        assert!(!Live::Overview.concerns(&unknown, &scope, &shown));
        let scoped = OperatorScope::teams([other]).unwrap();
        assert!(!Live::Overview.concerns(&sent, &scoped, &shown));
        assert!(Live::Overview.concerns(&sent, &scope, &shown));
        let handed_out = FeedEvent::new(team, FeedKind::HandedOut).conversation(conv);
        assert!(live.concerns(&handed_out, &scope, &shown));
        assert!(!Live::Team(team).concerns(&handed_out, &scope, &shown));
        assert!(!Live::Overview.concerns(&handed_out, &scope, &shown));
    }
}
