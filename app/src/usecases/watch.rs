//! The inbox watch: what is waiting for an agent and what of it is news, without handing
//! anything out — what a host's hook or a channel asks before it wakes a model.
//!
//! # How a watch works
//! 1. The cursor the caller passes back (`after`) is decoded ([`Bus::watch_cursor`]): it must be
//!    the caller's ([`WatchCursor`]); none means nothing was reported yet. A wait above
//!    `bus.max_wait_ms` is shortened to it: a watch holds nothing, so a long ask costs nothing,
//!    and a client cannot know the server's setting.
//! 2. With a wait, the watcher subscribes to its `(team, agent)` in this process's wait room
//!    **before** its first read — the waiting fetch's room, so the same wake-ups reach it (the
//!    reference worker's, across servers through the `Wakeups` port, a revocation's, a
//!    listener's restart) — registering the newest `stored_at` its cursor reported, so the
//!    safety sweep wakes it only for a message stored after that (not at every sweep for an old
//!    message it reported and nobody fetches).
//! 3. It reads the ledger ([`Ledger::inbox_news`](crewbus_ports::Ledger::inbox_news)): news →
//!    answered at once. Else it waits, holding no connection, until a wake-up, the lapse of the
//!    earliest hand-out holding a message it was not told of (that message may be news then),
//!    the deadline or the bus's shutdown, and reads again (a failed read is logged and the wait
//!    goes on; a revoked agent ends it with `Unauthenticated`). At the deadline or shutdown it
//!    answers what it has: no news.
//! 4. The answer's previews (unless the caller wants none: a hook prints no body text) are the
//!    news' bodies read from their backends (through the room for bodies, like a fetch's),
//!    cleaned for a model ([`clean_for_model`]) and cut to [`PREVIEW_CHARS`]; titles and names
//!    are cleaned too. The cursor records the news.
//!
//! It never reads the inbox (a JetStream fetch without an ack would make the later hand-out
//! `redelivered`) and writes no delivery state: no hand-out, receipt, reference, inbox or
//! journal change. It counts as activity like any authenticated call (at authentication).

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, AgentKind, BusError, BusResult, InboxNews, MAX_WATCH_NEWS, NAME_CHARS, NewsItem,
    PREVIEW_CHARS, Reported, WakeupTarget, WatchCursor, clean_for_model,
};
use tokio::time::Instant;
use uuid::Uuid;

use crate::metrics::Metrics;
use crate::usecases::body_room::HeldBodies;
use crate::usecases::bus::Bus;
use crate::usecases::deliver::{BodyBackends, ROOM_WAIT_MIN};

/// What a watch answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// How many messages wait for the caller now (stored, not delivered, not held by a live
    /// hand-out), reported before or not.
    pub pending: u64,
    /// The news: pending messages the cursor did not record as reported, at most
    /// [`MAX_WATCH_NEWS`], oldest stored first (then conversation, seq).
    pub news: Vec<WatchNews>,
    /// The cursor to pass back: everything reported so far (the given cursor's and `news`).
    pub cursor: String,
}

/// One piece of news. Every text in it is agent-written and cleaned ([`clean_for_model`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchNews {
    /// The message.
    pub message: Uuid,
    /// Its conversation.
    pub conversation: Uuid,
    /// The conversation's title, cleaned, at most [`PREVIEW_CHARS`] characters.
    pub conversation_title: String,
    /// The sender.
    pub sender: Uuid,
    /// The sender's name, cleaned, at most [`NAME_CHARS`] characters.
    pub sender_name: String,
    /// The sender's kind when it sent.
    pub sender_kind: AgentKind,
    /// The message's seq in its conversation.
    pub seq: u64,
    /// When it was sent.
    pub sent_at: DateTime<Utc>,
    /// The start of its body, cleaned, at most [`PREVIEW_CHARS`] characters (empty when the
    /// caller asked for no previews, the body cannot be read now, or it was removed by
    /// retention).
    pub preview: String,
}

impl Bus {
    /// The cursor `after` encodes for `agent` (step 1 of a watch): none is a cursor that
    /// recorded nothing (everything pending is news).
    ///
    /// Errors: `after` not a cursor of this agent (malformed, another agent's or another
    /// team's) → `Invalid`.
    pub fn watch_cursor(&self, agent: &Agent, after: Option<&str>) -> BusResult<WatchCursor> {
        match after {
            Some(text) => WatchCursor::decode(text, agent.team, agent.id),
            None => Ok(WatchCursor::new(agent.team, agent.id)),
        }
    }

    /// Watches `agent`'s inbox (see the module docs): answers at once when there is news for
    /// `cursor` (from [`Bus::watch_cursor`] for this agent), else waits up to `wait` for some
    /// and answers with none. A `wait` above `bus.max_wait_ms` waits `bus.max_wait_ms`. Without
    /// `previews` no body is read and every `preview` is empty.
    ///
    /// Errors: the agent revoked → `Unauthenticated`; the first ledger read failing → its
    /// error; not answered within `bus.request_timeout_ms` plus the wait (at least
    /// [`ROOM_WAIT_MIN`]) → `Timeout` ([`Bus::within_deadline`]).
    pub async fn watch(
        &self,
        agent: &Agent,
        cursor: WatchCursor,
        wait: Duration,
        previews: bool,
    ) -> BusResult<Watched> {
        let wait = wait.min(self.settings.max_wait);
        self.within_deadline(
            wait.max(ROOM_WAIT_MIN),
            self.watch_unbounded(agent, cursor, wait, previews),
        )
        .await
    }

    async fn watch_unbounded(
        &self,
        agent: &Agent,
        cursor: WatchCursor,
        wait: Duration,
        previews: bool,
    ) -> BusResult<Watched> {
        let started = Instant::now();
        let deadline = started + wait;
        let room_until = started + wait.max(ROOM_WAIT_MIN);
        let reported = cursor.reported();
        // Subscribed before the first read, so a wake-up between it and the wait is kept.
        let waiter = (!wait.is_zero()).then(|| {
            self.room
                .subscribe_after(WakeupTarget::new(agent.team, agent.id), cursor.newest())
        });
        let mut found = self.read_news(agent, &reported).await?;
        if let Some(waiter) = waiter {
            // Counted in `Bus::waiting_watches` while it waits.
            let _parked = found.news.is_empty().then(|| self.room.park_watch());
            while found.news.is_empty() {
                let lapse = found.next_lapse.map(|at| {
                    Instant::now() + (at - self.now()).to_std().unwrap_or(Duration::ZERO)
                });
                tokio::select! {
                    _ = waiter.woken() => {}
                    () = sleep_until_some(lapse) => {}
                    () = tokio::time::sleep_until(deadline) => break,
                    () = self.shutdown.wait() => break,
                }
                match self.read_news(agent, &reported).await {
                    Ok(now) => found = now,
                    Err(BusError::Unauthenticated | BusError::NotFound { .. }) => {
                        return Err(BusError::Unauthenticated);
                    }
                    Err(error) => {
                        Metrics::inc(&self.metrics.watch_errors);
                        tracing::warn!(agent = %agent.id, code = error.code(), error = ?error, "inbox watch: read failed; still waiting");
                    }
                }
            }
        }
        Ok(self.watch_answer(cursor, found, previews, room_until).await)
    }

    /// One ledger read of the watch, counted in `crewbus_watch_reads_total`.
    async fn read_news(&self, agent: &Agent, reported: &Reported) -> BusResult<InboxNews> {
        Metrics::inc(&self.metrics.watch_reads);
        self.ports
            .ledger
            .inbox_news(agent.team, agent.id, reported, self.now(), MAX_WATCH_NEWS)
            .await
    }

    /// The answer for `found`: the cursor records its news; with `previews`, each one's
    /// preview read (else every preview is empty).
    async fn watch_answer(
        &self,
        mut cursor: WatchCursor,
        found: InboxNews,
        previews: bool,
        room_until: Instant,
    ) -> Watched {
        let told: Vec<(Uuid, DateTime<Utc>)> = found
            .news
            .iter()
            .filter_map(|n| Some((n.message.id, n.message.stored_at?)))
            .collect();
        cursor.record(&told, found.oldest_held);
        let previews = if previews {
            self.previews(&found.news, room_until).await
        } else {
            vec![String::new(); found.news.len()]
        };
        let news = found
            .news
            .into_iter()
            .zip(previews)
            .map(|(n, preview)| WatchNews {
                message: n.message.id,
                conversation: n.message.conversation,
                conversation_title: clean_for_model(&n.conversation_title, PREVIEW_CHARS),
                sender: n.message.sender,
                sender_name: clean_for_model(&n.sender_name, NAME_CHARS),
                sender_kind: n.message.sender_kind,
                seq: n.message.seq,
                sent_at: n.message.sent_at,
                preview,
            })
            .collect();
        Watched {
            pending: found.pending,
            news,
            cursor: cursor.encode(),
        }
    }

    /// The cleaned previews of `news`, in order. Bodies are read concurrently, as many at a
    /// time as the room for bodies (`bus.max_body_bytes_in_flight`) holds at their recorded
    /// lengths, waited for until `room_until`; each is dropped once cleaned. A body that cannot
    /// be read (its backend down, no room in time, removed by retention) has an empty preview
    /// (logged).
    async fn previews(&self, news: &[NewsItem], room_until: Instant) -> Vec<String> {
        let mut previews = Vec::with_capacity(news.len());
        let mut backends = BodyBackends::new();
        let mut rest = news;
        while !rest.is_empty() {
            let costs: Vec<u64> = rest.iter().map(|n| n.message.body_len).collect();
            let mut held = HeldBodies::default();
            let kept = self
                .bodies
                .reserve(&mut held, &costs, room_until, &self.shutdown, &self.metrics)
                .await;
            if kept == 0 {
                tracing::warn!(
                    left = rest.len(),
                    "inbox watch: no room for bodies in time; previews left empty"
                );
                previews.extend(rest.iter().map(|_| String::new()));
                break;
            }
            let batch: Vec<&crewbus_domain::Message> =
                rest[..kept].iter().map(|n| &n.message).collect();
            for (m, read) in batch
                .iter()
                .zip(self.read_bodies(&batch, &mut backends).await)
            {
                previews.push(match read {
                    Ok(Some(body)) => clean_for_model(&body, PREVIEW_CHARS),
                    Ok(None) => String::new(),
                    Err(error) => {
                        tracing::warn!(message_id = %m.id, code = error.code(), error = ?error, "inbox watch: body not read; preview left empty");
                        String::new()
                    }
                });
            }
            drop(held);
            rest = &rest[kept..];
        }
        previews
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
