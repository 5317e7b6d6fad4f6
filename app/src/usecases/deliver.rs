//! Delivery: fetch an agent's inbox (with top-up from the ledger), confirm deliveries by id
//! (receipt committed, THEN inbox ack), and inbox status.
//!
//! The ledger is the authority. References from the team's inbox are the fast path; each one
//! becomes a hand-out with a delivery id (the inbox and ack subject stay server-side with it).
//! Stored messages whose receipt is not delivered and that have no live hand-out are topped up
//! from the ledger — references lost to inbox overflow, expiry, a deleted consumer or max
//! deliver. A reference whose receipt is already committed (a crash between commit and ack) is
//! recognised and acknowledged, never handed to the agent again.
//!
//! # Cost of a fetch
//! The ledger is asked a bounded number of times per fetch, whatever the number of references:
//! the team, one batch read of the candidates' messages per source
//! ([`crewbus_ports::Ledger::messages`]), one `hand_out` per source (inbox, top-up); bodies are read concurrently (at most
//! [`BODY_READS`] at a time), and a body backend found down is not asked again in that fetch.
//!
//! # Top-up bound
//! While the inbox answers, the top-up query (`undelivered`) runs for an agent at most once per
//! [`topup_interval`] (half of `topup_after`; one per agent per server process), and at once
//! whenever the inbox failed, and again on the next fetch when the last one came back full (a
//! backlog), or when a candidate's body could not be read. A stored message whose reference
//! was lost and whose body can be read is therefore handed out by the agent's first fetch at or
//! after `stored_at + topup_after + topup_after / 2` (3 s with the default
//! `topup_after_ms = 2000`); one whose body cannot be read now is looked for again on the next
//! fetch, never lost. Two concurrent fetches of one agent may both run the top-up (harmless:
//! the hand-outs hold each message once). The per-agent instants live as long as the process
//! (one entry per agent that fetched).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{
    Agent, BusError, BusResult, ConfirmOutcome, DeliveryId, FeedEvent, FeedKind, HandOut,
    HandOutOutcome, HandOutRequest, HandOutSource, InboxAck, InboxStatus, Message, Publication,
    ReferencePayload, RunId, Uuid,
};
use crewbus_ports::{Inbox, MessagingBackend};
use futures_util::future::join_all;
use futures_util::stream::{self, StreamExt};

use crate::metrics::Metrics;
use crate::usecases::body_room::{HeldBodies, json_len};
use crate::usecases::bus::{Bus, before};

/// At most this many body reads of one fetch are in flight at once.
pub const BODY_READS: usize = 16;

/// How often a fetch with a healthy inbox runs the ledger top-up for one agent: half of
/// `topup_after` (see the module docs for the bound this gives).
pub fn topup_interval(topup_after: std::time::Duration) -> std::time::Duration {
    topup_after / 2
}

/// Body backends looked up during one request, by name (a failed lookup or a backend found
/// down is kept as its error).
pub(crate) type BodyBackends = HashMap<(Uuid, String), BusResult<Arc<dyn MessagingBackend>>>;

/// One message handed to an agent.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The hand-out (delivery id, seq, redelivered, held until).
    pub hand_out: HandOut,
    /// The message as recorded.
    pub message: Message,
    /// Its body.
    pub body: String,
}

/// The body budget of an HTTP fetch that names no `max_bytes`: 4 MiB (4 194 304 bytes), or the
/// server's `bus.max_fetch_bytes` when that is lower
/// ([`BusSettings::fetch_bytes_default`](crate::usecases::bus::BusSettings::fetch_bytes_default)).
pub const DEFAULT_FETCH_BYTES: usize = 4 * 1024 * 1024;

/// The least a fetch waits for room for its bodies (`bus.max_body_bytes_in_flight`) when it finds
/// none: a fetch that may not wait for a delivery, or only shorter, still waits this long for
/// room before it answers what fits (possibly nothing).
pub const ROOM_WAIT_MIN: Duration = Duration::from_secs(1);

/// A fetch's deliveries with the room their bodies hold in this process
/// (`bus.max_body_bytes_in_flight`, see [`crate::usecases::body_room`]). Keep it until the
/// answer has been written out (or is dropped): dropping `held` gives the room back.
#[derive(Debug)]
pub struct Fetched {
    /// The deliveries, in hand-out order.
    pub deliveries: Vec<Delivery>,
    /// The room reserved for their bodies (each at its size as JSON in the answer, bytes).
    pub held: HeldBodies,
}

impl Fetched {
    /// No deliveries, no room.
    pub fn empty() -> Self {
        Fetched {
            deliveries: Vec::new(),
            held: HeldBodies::default(),
        }
    }
}

/// What is left of a fetch's body budget (see [`Bus::fetch_within`]).
#[derive(Debug, Clone, Copy)]
struct BodyBudget {
    /// Bytes of bodies still allowed.
    left: u64,
    /// Whether a delivery with a body was kept already (the first one always is).
    kept_one: bool,
}

impl BodyBudget {
    fn new(max_body_bytes: usize) -> Self {
        BodyBudget {
            left: u64::try_from(max_body_bytes).unwrap_or(u64::MAX),
            kept_one: false,
        }
    }

    /// Takes `costs` (bodies' lengths in bytes, in hand-out order; 0 for a request with no body
    /// to read) from the budget until the first that does not fit what is left, and returns how
    /// many it took. The first cost above zero always fits. No budget takes everything.
    fn take(budget: &mut Option<BodyBudget>, costs: &[u64]) -> usize {
        let Some(budget) = budget else {
            return costs.len();
        };
        for (i, &cost) in costs.iter().enumerate() {
            if cost == 0 {
                continue;
            }
            if budget.kept_one && cost > budget.left {
                return i;
            }
            budget.left = budget.left.saturating_sub(cost);
            budget.kept_one = true;
        }
        costs.len()
    }
}

/// What one fetch has read so far, and its bounds.
struct Reading {
    /// Body backends looked up (or found down) during the fetch.
    backends: BodyBackends,
    /// Messages whose body was read, by id.
    readable: HashMap<Uuid, (Message, String)>,
    /// The answer's budget (`max_bytes`), when it has one.
    budget: Option<BodyBudget>,
    /// The room reserved for the bodies read.
    held: HeldBodies,
    /// Until when the fetch may wait for room.
    room_until: tokio::time::Instant,
    /// Messages left out for lack of budget or room, in order (the agent's next fetch tries
    /// them first).
    left: Vec<Uuid>,
    /// Bodies' sizes as JSON ([`json_len`]) known to this fetch, by message: what their room is
    /// reserved at (instead of the recorded length), and remembered with those left.
    sizes: HashMap<Uuid, u64>,
}

/// The agent's inbox as the team's inbox backend reports it.
#[derive(Debug, Clone)]
pub struct InboxReport {
    /// The inbox's backend name.
    pub inbox: String,
    /// The consumer's state.
    pub status: InboxStatus,
}

impl Bus {
    /// Hands out up to `limit` messages to `agent`: messages its previous fetch through this
    /// process left for lack of room first, then references from the inbox, then a top-up from
    /// the ledger. Never returns one message twice; a message handed out and not confirmed
    /// comes back (marked `redelivered`) only after the hand-out grace.
    ///
    /// The bodies are read within the room for bodies of this process
    /// (`bus.max_body_bytes_in_flight`): when there is none, this waits for it up to
    /// [`ROOM_WAIT_MIN`], then answers what fits (possibly nothing; the rest comes with the next
    /// fetch). The room is given back when this returns.
    ///
    /// An inbox that fails (down, not provisioned) is logged and the ledger tops up everything.
    /// A message whose body cannot be read right now is left out (its hand-out lapses and it
    /// comes back). Errors: `limit` 0 or above the maximum → `Invalid`; the ledger failing.
    pub async fn fetch(&self, agent: &Agent, limit: usize) -> BusResult<Vec<Delivery>> {
        let room_until = tokio::time::Instant::now() + ROOM_WAIT_MIN;
        Ok(self
            .fetch_with(agent, limit, false, None, room_until)
            .await?
            .deliveries)
    }

    /// [`Bus::fetch`] handing out at most `max_body_bytes` of bodies (UTF-8 bytes, summed over
    /// the deliveries, as the ledger records each body's length): deliveries are taken in order
    /// until the first whose body would take the sum above the budget; it and those after it
    /// are **not** handed out (the agent's next fetch through this process tries them first;
    /// elsewhere their references come back and the ledger top-up finds them), so they are left
    /// for a later fetch. The first delivery is always handed out, even when its body alone is
    /// larger (the caller decides how to show it).
    ///
    /// Errors: `max_body_bytes` 0 or above `bus.max_fetch_bytes` → `Invalid`; as [`Bus::fetch`].
    pub async fn fetch_within(
        &self,
        agent: &Agent,
        limit: usize,
        max_body_bytes: usize,
    ) -> BusResult<Vec<Delivery>> {
        let room_until = tokio::time::Instant::now() + ROOM_WAIT_MIN;
        Ok(self
            .fetch_with(agent, limit, false, Some(max_body_bytes), room_until)
            .await?
            .deliveries)
    }

    /// [`Bus::fetch`], with the ledger top-up run whatever its interval says when
    /// `force_topup` (a waiting fetch woken by the safety sweep: the ledger found something),
    /// at most `max_body_bytes` of bodies when given ([`Bus::fetch_within`]), waiting for room
    /// for bodies until `room_until` at most; the deliveries come with the room they hold.
    pub(crate) async fn fetch_with(
        &self,
        agent: &Agent,
        limit: usize,
        force_topup: bool,
        max_body_bytes: Option<usize>,
        room_until: tokio::time::Instant,
    ) -> BusResult<Fetched> {
        if limit == 0 || limit > self.settings.max_fetch {
            return Err(BusError::invalid(format!(
                "limit must be between 1 and {}",
                self.settings.max_fetch
            )));
        }
        if let Some(b) = max_body_bytes
            && (b == 0 || b > self.settings.max_fetch_bytes)
        {
            return Err(BusError::invalid(format!(
                "max_bytes must be between 1 and {}",
                self.settings.max_fetch_bytes
            )));
        }
        let mut reading = Reading {
            backends: BodyBackends::new(),
            readable: HashMap::new(),
            budget: max_body_bytes.map(BodyBudget::new),
            held: HeldBodies::default(),
            room_until,
            left: Vec::new(),
            sizes: HashMap::new(),
        };
        let team = self.ports.ledger.team(agent.team).await?;
        let now = self.now();
        let ledger = &self.ports.ledger;

        // 1. What the agent's previous fetch left for lack of room (the ledger decides again
        // whether each can be handed out), then references from the inbox (no ack).
        let mut requests: Vec<HandOutRequest> = self
            .take_deferred(agent.id, limit)
            .into_iter()
            .map(|(message, size)| {
                if size > 0 {
                    reading.sizes.insert(message, size);
                }
                HandOutRequest {
                    message,
                    source: HandOutSource::Ledger,
                }
            })
            .collect();
        let references = limit - requests.len();
        // Nothing asked of the inbox is nothing failed: no forced top-up.
        let mut inbox_ok = references == 0;
        let mut inbox: Option<Arc<dyn Inbox>> = None;
        let mut to_ack: Vec<InboxAck> = Vec::new();
        if references > 0 {
            match self.ports.backends.inbox(team.id, &team.inbox).await {
                Ok(i) => {
                    let started = std::time::Instant::now();
                    let fetched = i.fetch_references(&agent.recipient_key, references).await;
                    self.metrics.inbox_latency.observe(started.elapsed());
                    match fetched {
                        Ok(refs) => {
                            inbox_ok = true;
                            for r in refs {
                                let ack = InboxAck {
                                    inbox: team.inbox.clone(),
                                    ack_subject: r.ack_subject,
                                };
                                match ReferencePayload::from_json(&r.payload) {
                                    Ok(p) => requests.push(HandOutRequest {
                                        message: p.message,
                                        source: HandOutSource::Inbox {
                                            event_id: r.event_id,
                                            ack,
                                            deliveries: r.deliveries,
                                        },
                                    }),
                                    Err(_) => {
                                        tracing::warn!(event = %r.event_id, "inbox reference is not a bus reference; acknowledging it away");
                                        to_ack.push(ack);
                                    }
                                }
                            }
                        }
                        Err(error) => {
                            Metrics::inc(&self.metrics.inbox_fetch_failures);
                            tracing::warn!(agent = %agent.id, code = error.code(), error = ?error, "inbox fetch failed; topping up from the ledger");
                        }
                    }
                    inbox = Some(i);
                }
                Err(error) => {
                    Metrics::inc(&self.metrics.inbox_fetch_failures);
                    tracing::warn!(team = %team.id, code = error.code(), error = ?error, "inbox unavailable; topping up from the ledger");
                }
            }
        }

        // Bodies are read BEFORE a hand-out is recorded: a body that cannot be read now is not
        // handed out (its reference comes back), so a transient failure never holds a message
        // for a whole grace period. What does not fit the budget or the room is not read.
        let mut issued: Vec<HandOut> = Vec::new();
        let requests = self
            .readable_within(team.id, requests, &mut reading)
            .await?;
        let outcomes = self.hand_out(team.id, agent.id, &requests, now).await?;
        for (request, outcome) in requests.into_iter().zip(outcomes) {
            match outcome {
                HandOutOutcome::Issued(h) => issued.push(h),
                // Receipt already committed (crash between commit and ack) or not ours:
                // recognised, acknowledged, never shown again.
                HandOutOutcome::AlreadyDelivered { .. } | HandOutOutcome::Unknown { .. } => {
                    if let HandOutSource::Inbox { ack, .. } = request.source {
                        to_ack.push(ack);
                    }
                }
                // Handed out and within its grace: the inbox redelivers it later.
                _ => {}
            }
        }

        // 2. Top-up from the ledger (the authority): at most once per interval while the inbox
        // answers, always when it failed; never once something was left for lack of room.
        if issued.len() < limit
            && reading.left.is_empty()
            && (!inbox_ok || force_topup || self.topup_due(agent.id, now))
        {
            let stored_before = if inbox_ok {
                before(now, self.settings.topup_after)
            } else {
                now
            };
            let wanted = limit - issued.len();
            let ids = ledger
                .undelivered(team.id, agent.id, stored_before, now, wanted)
                .await?;
            // The top-up counts as done only when it found everything it could hand out now: a
            // full page (a backlog), a body that could not be read or one left for lack of room
            // makes the next fetch look again; so does a failing ledger (the `?`s below return
            // before this is recorded).
            let complete_page = ids.len() < wanted;
            let candidates = ids.len();
            let requests: Vec<HandOutRequest> = ids
                .into_iter()
                .map(|message| HandOutRequest {
                    message,
                    source: HandOutSource::Ledger,
                })
                .collect();
            let requests = self
                .readable_within(team.id, requests, &mut reading)
                .await?;
            let all_readable = requests.len() == candidates;
            let outcomes = self.hand_out(team.id, agent.id, &requests, now).await?;
            issued.extend(outcomes.into_iter().filter_map(|o| match o {
                HandOutOutcome::Issued(h) => Some(h),
                _ => None,
            }));
            if complete_page && all_readable {
                self.topped_up_at(agent.id, now);
            }
        }
        let left = std::mem::take(&mut reading.left);
        self.defer(agent.id, left, &reading.sizes);

        // 3. Acks of recognised redeliveries: their receipts are committed already.
        if let Some(inbox) = &inbox {
            let acks = join_all(to_ack.iter().map(|a| inbox.ack_reference(&a.ack_subject))).await;
            for r in acks {
                if let Err(error) = r {
                    Metrics::inc(&self.metrics.inbox_ack_failures);
                    tracing::info!(
                        code = error.code(),
                        "ack of a recognised redelivery failed; it will come back and be recognised again"
                    );
                }
            }
        }

        // 4. The deliveries, with the bodies read above (moved out: each message is issued
        // once).
        let mut deliveries = Vec::with_capacity(issued.len());
        let mut handed_out = Vec::with_capacity(issued.len());
        for hand_out in issued {
            let Some((message, body)) = reading.readable.remove(&hand_out.message) else {
                continue;
            };
            Metrics::inc(&self.metrics.deliveries_handed_out);
            if !hand_out.redelivered
                && let Ok(d) = (hand_out.issued_at - message.sent_at).to_std()
            {
                self.metrics.delivery_latency.observe(d);
            }
            handed_out.push(
                FeedEvent::new(team.id, FeedKind::HandedOut)
                    .conversation(message.conversation)
                    .message(message.id)
                    .agent(agent.id),
            );
            deliveries.push(Delivery {
                hand_out,
                message,
                body,
            });
        }
        self.emit(handed_out);
        Ok(Fetched {
            deliveries,
            held: reading.held,
        })
    }

    /// Takes (removes) up to `limit` of the messages `agent`'s last fetch through this process
    /// left for lack of room, in order, each with its body's size as JSON when known (0 when
    /// not); the rest stay for the fetch after.
    fn take_deferred(&self, agent: Uuid, limit: usize) -> Vec<(Uuid, u64)> {
        let Ok(mut deferred) = self.deferred.lock() else {
            return Vec::new();
        };
        let Some(ids) = deferred.get_mut(&agent) else {
            return Vec::new();
        };
        if ids.len() <= limit {
            return deferred.remove(&agent).unwrap_or_default();
        }
        ids.drain(..limit).collect()
    }

    /// Remembers `left` (messages a fetch of `agent` left for lack of room) after what is
    /// remembered already, each once, at most `max_fetch` of them, with its body's size as JSON
    /// from `sizes` when the fetch knew it.
    fn defer(&self, agent: Uuid, left: Vec<Uuid>, sizes: &HashMap<Uuid, u64>) {
        if left.is_empty() {
            return;
        }
        if let Ok(mut deferred) = self.deferred.lock() {
            let ids = deferred.entry(agent).or_default();
            for id in left {
                if ids.len() < self.settings.max_fetch && !ids.iter().any(|(m, _)| *m == id) {
                    ids.push((id, sizes.get(&id).copied().unwrap_or(0)));
                }
            }
        }
    }

    /// Whether `agent`'s top-up is due at `now` with a healthy inbox: never ran, or last ran at
    /// least [`topup_interval`] ago (or the clock went back).
    fn topup_due(&self, agent: Uuid, now: chrono::DateTime<chrono::Utc>) -> bool {
        let Ok(last) = self.topped_up.lock() else {
            return true;
        };
        match last.get(&agent) {
            None => true,
            Some(at) => {
                *at > now
                    || (now - *at)
                        .to_std()
                        .is_ok_and(|d| d >= topup_interval(self.settings.topup_after))
            }
        }
    }

    /// Remembers that `agent`'s top-up ran to the end at `now`.
    fn topped_up_at(&self, agent: Uuid, now: chrono::DateTime<chrono::Utc>) {
        if let Ok(mut last) = self.topped_up.lock() {
            last.insert(agent, now);
        }
    }

    /// Records the hand-outs of `requests` to `agent` with the configured grace (no ledger
    /// call for none). Errors: the ledger failing.
    async fn hand_out(
        &self,
        team: Uuid,
        agent: Uuid,
        requests: &[HandOutRequest],
        now: chrono::DateTime<chrono::Utc>,
    ) -> BusResult<Vec<HandOutOutcome>> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        self.ports
            .ledger
            .hand_out(team, agent, requests, self.settings.handout_grace, now)
            .await
    }

    /// Keeps the longest prefix of `requests` (in hand-out order) whose bodies fit the answer's
    /// budget and the room for bodies ([`crate::usecases::body_room::BodyRoom::reserve`], which
    /// may wait until `reading.room_until`), reads those bodies into `reading.readable`, and
    /// returns the kept requests whose body was read now, plus those the ledger will answer
    /// `Unknown` for (unknown or not stored: their references are then acknowledged away).
    /// The stored messages left out are appended to `reading.left`. The candidates' messages
    /// are read in one ledger call and their bodies concurrently (at most [`BODY_READS`] at a
    /// time); a backend found down is remembered in `reading.backends` and not asked again.
    /// Errors: the ledger failing.
    async fn readable_within(
        &self,
        team: Uuid,
        requests: Vec<HandOutRequest>,
        reading: &mut Reading,
    ) -> BusResult<Vec<HandOutRequest>> {
        let mut seen = HashSet::with_capacity(requests.len());
        let wanted: Vec<Uuid> = requests
            .iter()
            .map(|r| r.message)
            .filter(|id| !reading.readable.contains_key(id) && seen.insert(*id))
            .collect();
        let mut known: HashMap<Uuid, Message> = HashMap::with_capacity(wanted.len());
        for chunk in wanted.chunks(crewbus_domain::MAX_PAGE) {
            for m in self.ports.ledger.messages(team, chunk).await? {
                known.insert(m.id, m);
            }
        }
        // The stored ones with a locator have a body to read: each costs its recorded length
        // once against the budget (a repeat of a message in the batch is held by its first
        // hand-out), and its size as JSON when known, else its recorded length, against the
        // room.
        let to_read = |m: &Message| m.publication == Publication::Stored && m.locator.is_some();
        let mut costed = HashSet::with_capacity(known.len());
        let lens: Vec<u64> = requests
            .iter()
            .map(|r| match known.get(&r.message) {
                Some(m) if to_read(m) && costed.insert(m.id) => m.body_len,
                _ => 0,
            })
            .collect();
        let mut requests = requests;
        // A second round only when the first body's top-up did not fit and the fetch then held
        // nothing: it reserves the bodies' sizes as JSON at once (see body_room's module docs).
        for round in 0..2 {
            let costs: Vec<u64> = requests
                .iter()
                .zip(&lens)
                .map(|(r, &len)| match reading.sizes.get(&r.message) {
                    Some(&size) if len > 0 => size.max(len),
                    _ => len,
                })
                .collect();
            let mut trial = reading.budget;
            let fits = BodyBudget::take(&mut trial, &lens);
            let held_before = reading.held.bytes();
            let mut kept = self
                .bodies
                .reserve(
                    &mut reading.held,
                    &costs[..fits],
                    reading.room_until,
                    &self.shutdown,
                    &self.metrics,
                )
                .await;
            // Only the kept ones' bodies are read.
            let kept_ids: HashSet<Uuid> = requests[..kept].iter().map(|r| r.message).collect();
            let reads: Vec<&Message> = known
                .values()
                .filter(|m| to_read(m) && kept_ids.contains(&m.id))
                .collect();
            let bodies: Vec<(Uuid, Option<String>)> = self
                .read_bodies(&reads, &mut reading.backends)
                .await
                .into_iter()
                .zip(&reads)
                .map(|(result, m)| (m.id, Self::body_or_log(m, result)))
                .collect();
            let mut read: HashMap<Uuid, String> = bodies
                .into_iter()
                .filter_map(|(id, body)| body.map(|b| (id, b)))
                .collect();
            // Each body read is topped up to its size as JSON, in hand-out order, without
            // waiting; the first that does not fit and those after it are left, their room
            // given back.
            let mut topped = kept;
            for (i, r) in requests[..kept].iter().enumerate() {
                if costs[i] == 0 {
                    continue;
                }
                let Some(body) = read.get(&r.message) else {
                    continue;
                };
                let size = json_len(body);
                reading.sizes.insert(r.message, size);
                if !self.bodies.top_up(&mut reading.held, costs[i], size) {
                    topped = i;
                    break;
                }
            }
            if topped < kept {
                for i in topped..kept {
                    read.remove(&requests[i].message);
                    self.bodies.release(&mut reading.held, costs[i]);
                }
                // The topped-up ones hold their size as JSON now, the others nothing.
                kept = topped;
                Metrics::inc(&self.metrics.fetch_bytes_shortened);
                if round == 0 && held_before == 0 && reading.held.bytes() == 0 {
                    // Its first body did not fit as JSON and it holds nothing: it reserves again
                    // at the sizes it knows now, waiting for them if need be, and reads again.
                    continue;
                }
            }
            BodyBudget::take(&mut reading.budget, &lens[..kept]);
            let left = requests.split_off(kept);
            reading.left.extend(
                left.iter()
                    .zip(&lens[kept..])
                    .filter(|(_, cost)| **cost > 0)
                    .map(|(r, _)| r.message),
            );
            for (id, body) in read {
                // Only a body read now moves its message to `readable`; an unreadable one stays
                // known (and is left out below).
                if let Some(message) = known.remove(&id) {
                    reading.readable.insert(id, (message, body));
                }
            }
            break;
        }
        Ok(requests
            .into_iter()
            .filter(|r| {
                reading.readable.contains_key(&r.message)
                    || known.get(&r.message).is_none_or(|m| !to_read(m))
            })
            .collect())
    }

    /// A body read's result as an option: `None` (logged) when it cannot be read now; the
    /// hand-out is then not recorded and the message comes back.
    fn body_or_log(message: &Message, read: BusResult<Option<String>>) -> Option<String> {
        match read {
            Ok(Some(body)) => Some(body),
            Ok(None) => {
                tracing::warn!(message_id = %message.id, "body not found at its locator");
                None
            }
            Err(error) => {
                tracing::warn!(message_id = %message.id, code = error.code(), error = ?error, "body fetch failed");
                None
            }
        }
    }

    /// Reads the bodies of `messages`, concurrently (at most [`BODY_READS`] at a time), one
    /// result per message in order: `Ok(None)` when the message has no locator or the backend
    /// does not hold the body. Backends are looked up once per team and name into `backends`
    /// (a backend serves one team: the index worker reads several teams' bodies at once); a backend
    /// that failed with a retryable error is remembered there as down for the rest of
    /// `backends`' life (one page or one fetch), and reads not yet started get that error, so a
    /// broker outage costs one timeout, not one per message.
    pub(crate) async fn read_bodies(
        &self,
        messages: &[&Message],
        backends: &mut BodyBackends,
    ) -> Vec<BusResult<Option<String>>> {
        for m in messages {
            let key = (m.team, m.backend.clone());
            if m.locator.is_some() && !backends.contains_key(&key) {
                let b = self.ports.backends.body_backend(m.team, &m.backend).await;
                backends.insert(key, b);
            }
        }
        let found_down: std::sync::Mutex<HashMap<(Uuid, String), BusError>> = Default::default();
        let shared: &BodyBackends = backends;
        // Indices, not references, as stream items: a closure over `&&Message` items is not
        // general enough for the `Send` futures axum needs.
        let results: Vec<BusResult<Option<String>>> = stream::iter(0..messages.len())
            .map(|i| {
                let (m, found_down) = (messages[i], &found_down);
                async move {
                    let Some(locator) = m.locator.as_ref() else {
                        return Ok(None);
                    };
                    let key = (m.team, m.backend.clone());
                    let down = found_down.lock().ok().and_then(|d| d.get(&key).cloned());
                    let result = match (down, shared.get(&key)) {
                        (Some(e), _) => Err(e),
                        (None, Some(Err(e))) => Err(e.clone()),
                        (None, Some(Ok(b))) => b.fetch(locator, m.id).await,
                        (None, None) => Err(BusError::unavailable("body backend")),
                    };
                    if let Err(e) = &result
                        && e.is_retryable()
                        && let Ok(mut d) = found_down.lock()
                    {
                        d.entry(key).or_insert_with(|| e.clone());
                    }
                    result
                }
            })
            .buffered(BODY_READS)
            .collect()
            .await;
        for (key, e) in found_down.into_inner().unwrap_or_default() {
            backends.insert(key, Err(e));
        }
        results
    }

    /// Confirms deliveries by id: the ledger commits the receipts first (one transaction), THEN
    /// the inbox references are acknowledged with the ack subjects kept server-side. When the
    /// commit fails nothing is acknowledged (the references come back and are recognised). An
    /// ack that fails after the commit is logged and counted; the redelivery it causes is
    /// recognised by the receipt.
    ///
    /// Returns one outcome per id, in order. Errors: an empty list or more than `MAX_PAGE` ids →
    /// `Invalid`; the ledger failing; run rules (`NotFound`, `Forbidden`, `Conflict`).
    pub async fn confirm(
        &self,
        agent: &Agent,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
    ) -> BusResult<Vec<ConfirmOutcome>> {
        if deliveries.is_empty() || deliveries.len() > crewbus_domain::MAX_PAGE {
            return Err(BusError::invalid(format!(
                "confirm between 1 and {} deliveries",
                crewbus_domain::MAX_PAGE
            )));
        }
        let outcomes = self
            .ports
            .ledger
            .confirm(agent.team, agent.id, deliveries, run, self.now())
            .await?;
        let mut acks: Vec<&InboxAck> = Vec::new();
        let mut confirmed = Vec::new();
        for o in &outcomes {
            match o {
                ConfirmOutcome::Confirmed { ack, message } => {
                    Metrics::inc(&self.metrics.deliveries_confirmed);
                    acks.extend(ack.as_ref());
                    confirmed.push(
                        FeedEvent::new(agent.team, FeedKind::Confirmed)
                            .message(*message)
                            .agent(agent.id),
                    );
                }
                ConfirmOutcome::AlreadyConfirmed { ack, .. } => acks.extend(ack.as_ref()),
                _ => {}
            }
        }
        self.emit(confirmed);
        self.ack_all(agent.team, &acks).await;
        Ok(outcomes)
    }

    async fn ack_all(&self, team: Uuid, acks: &[&InboxAck]) {
        let mut inboxes: HashMap<&str, Option<Arc<dyn Inbox>>> = HashMap::new();
        for a in acks {
            if !inboxes.contains_key(a.inbox.as_str()) {
                let inbox = self.ports.backends.inbox(team, &a.inbox).await.ok();
                inboxes.insert(a.inbox.as_str(), inbox);
            }
        }
        let results = join_all(acks.iter().map(|a| {
            let inbox = inboxes.get(a.inbox.as_str()).cloned().flatten();
            async move {
                match inbox {
                    Some(i) => i.ack_reference(&a.ack_subject).await,
                    None => Err(BusError::unavailable("inbox")),
                }
            }
        }))
        .await;
        for r in results {
            if let Err(error) = r {
                Metrics::inc(&self.metrics.inbox_ack_failures);
                tracing::info!(code = error.code(), error = ?error, "inbox ack failed after the receipt was committed; the redelivery will be recognised");
            }
        }
    }

    /// The agent's inbox status. Errors: the inbox backend failing (never reported as empty).
    pub async fn inbox_status(&self, agent: &Agent) -> BusResult<InboxReport> {
        let team = self.ports.ledger.team(agent.team).await?;
        let inbox = self.ports.backends.inbox(team.id, &team.inbox).await?;
        let status = inbox.inbox_status(&agent.recipient_key).await?;
        Ok(InboxReport {
            inbox: team.inbox,
            status,
        })
    }
}
