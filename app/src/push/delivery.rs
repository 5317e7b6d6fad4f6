//! `DeliveryWorker`: pushes every run's journal to its registrations (PUSH.md §6).
//!
//! One turn of one registration: read at most a page of records from its cursor
//! (`Journal::read`), and for each, in journal order, project it to an event, sign it (Standard
//! Webhooks) and POST it. Only a 2xx to the original POST acknowledges. The cursor is saved
//! (`PushStore::advance` to the last acknowledged seq + 1) only after the POSTs it covers were
//! answered, so a crash repeats events (same `webhook-id`) rather than losing them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    AttemptOutcome, Backoff, DEFAULT_ATTEMPTS_KEPT, FeedEvent, FeedKind, MAX_PAGE, PushAttempt,
    PushRegistration, PushRequest, PushResponse, RunId, Secret, Seq, StoreError, TenantId,
    TransportError, after, redact_url,
};
use crewbus_ports::{Clock, Journal, PushStore, PushTransport, SystemClock};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use super::outbox::Outbox;
use super::payload::{CloudEvents, Projection};
use super::signing::{Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, webhook_id};
use crate::logging::RepeatedWarning;

/// How the delivery worker paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Registrations served at once (count, ≥ 1). One slow destination holds one slot.
    pub concurrency: usize,
    /// Records read per registration per turn (count, 1 to `MAX_PAGE`).
    pub page: usize,
    /// How long a claimed registration is reserved for this worker. Must exceed the time a turn
    /// can take (`page` × transport timeout in the worst case), else another worker may serve the
    /// same row too (duplicates, never loss).
    pub lease: Duration,
    /// How long a registration with no new records rests before it is looked at again.
    pub idle: Duration,
    /// Retry schedule after a failed POST; `max_attempts` failures in a row park the row.
    pub backoff: Backoff,
    /// Attempts each registration's log keeps (count, 1 to 1000; `push.attempts_kept`): every
    /// POST is recorded with `PushStore::record_attempt`, and older entries are dropped.
    pub attempts_kept: usize,
}

impl Default for DeliverySettings {
    /// 16 at once, pages of 100 records, 5 minute leases, 1 s idle rest, the default backoff
    /// (500 ms doubling to 60 s, 12 attempts), the last 20 attempts kept per registration.
    fn default() -> Self {
        DeliverySettings {
            concurrency: 16,
            page: 100,
            lease: Duration::from_secs(300),
            idle: Duration::from_secs(1),
            backoff: Backoff::default(),
            attempts_kept: DEFAULT_ATTEMPTS_KEPT,
        }
    }
}

/// What one sweep ([`DeliveryWorker::run_once`]) did, in counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    /// Registrations claimed from `due`.
    pub claimed: usize,
    /// Events acknowledged by a 2xx.
    pub delivered: usize,
    /// Registrations whose cursor advanced and which stay registered.
    pub advanced: usize,
    /// Registrations with no new records, rested for `idle`.
    pub deferred: usize,
    /// Registrations that failed and will retry after a backoff.
    pub retried: usize,
    /// Registrations parked (410, configuration error, attempts used up).
    pub parked: usize,
    /// Registrations deleted after their terminal record was acknowledged.
    pub deleted: usize,
    /// Registrations left as they were because the store, journal or key ring failed (their
    /// claim runs out and they are served again).
    pub failed: usize,
}

/// How one registration's turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Advanced,
    Deferred,
    Retried,
    Parked,
    Deleted,
    Failed,
}

impl Sweep {
    fn add(&mut self, turn: Turn, delivered: usize) {
        self.delivered += delivered;
        match turn {
            Turn::Advanced => self.advanced += 1,
            Turn::Deferred => self.deferred += 1,
            Turn::Retried => self.retried += 1,
            Turn::Parked => self.parked += 1,
            Turn::Deleted => self.deleted += 1,
            Turn::Failed => self.failed += 1,
        }
    }
}

/// Why a turn stopped before the end of its page.
enum Failure {
    /// Park at once (410 Gone, a request that cannot be sent). `attempted`: a POST was answered
    /// (410), so it counts as a failed attempt like any other.
    Park { error: String, attempted: bool },
    /// Retry after a backoff (honouring the receiver's `Retry-After`, within the cap).
    Retry {
        error: String,
        retry_after: Option<Duration>,
    },
}

impl Failure {
    /// What the answer to the POST of `seq` means: the status of an acknowledgement, or the
    /// failure that ends the turn (410 Gone and a request that cannot be sent park, any other
    /// answer or transport error retries).
    fn of(answer: Result<PushResponse, TransportError>, seq: Seq) -> Result<u16, Failure> {
        match answer {
            Ok(response) if response.acknowledged() => Ok(response.status),
            Ok(response) if response.status == 410 => Err(Failure::Park {
                error: format!("the receiver answered 410 Gone to seq {seq}"),
                attempted: true,
            }),
            Ok(response) => Err(Failure::Retry {
                error: format!("the receiver answered {} to seq {seq}", response.status),
                retry_after: response.retry_after,
            }),
            Err(TransportError::Invalid(reason)) => Err(Failure::Park {
                error: format!("the request for seq {seq} cannot be sent: {reason}"),
                attempted: false,
            }),
            Err(error) => Err(Failure::Retry {
                error: format!("{error} (seq {seq})"),
                retry_after: None,
            }),
        }
    }
}

/// Serves due push registrations: reads their records, signs and POSTs them, and moves cursors.
///
/// Built from the (sealed) [`Outbox`], so it reads registrations through the same store the
/// outbox writes and gets credentials back opened. The time of a sweep (claims, signatures) is
/// the caller's (`run_once(at, …)`), or the injected clock's in [`DeliveryWorker::run`]. A retry
/// is counted from when the failure was **answered**, not from when the POST started (a receiver
/// that took 1.5 s to answer `Retry-After: 2` is retried 2 s after its answer): that instant is
/// read from the worker's clock ([`DeliveryWorker::with_clock`], the system clock by default;
/// `run` uses its own clock) once the transport returns, never earlier than the sweep's time.
/// Several workers may run on one store: `due` claims rows and `advance` never moves a cursor
/// back, so the worst case is a repeated event, never a lost one. Cheap to clone.
#[derive(Clone)]
pub struct DeliveryWorker {
    store: Arc<dyn PushStore>,
    journal: Arc<dyn Journal>,
    transport: Arc<dyn PushTransport>,
    projection: Arc<dyn Projection>,
    signers: Arc<HashMap<String, Signer>>,
    settings: DeliverySettings,
    /// Read after a failed POST returns: the retry delay counts from there.
    clock: Arc<dyn Clock>,
    /// Where the worker says that it parked a registration (the console feed); none by default.
    events: Option<EventSink>,
}

/// Where the delivery worker hands the console feed events it makes (a registration parked):
/// called after the change was committed, never waited on. The composition root sets it to the
/// bus's feed.
pub type EventSink = Arc<dyn Fn(FeedEvent) + Send + Sync>;

impl fmt::Debug for DeliveryWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryWorker")
            .field("tenant", self.store.tenant())
            .field("destinations", &self.signers.len())
            .field("settings", &self.settings)
            .field("events", &self.events.is_some())
            .finish_non_exhaustive()
    }
}

/// A stable per-row seed for the backoff jitter: the first 8 bytes of sha256(run ‖ id).
fn seed_of(registration: &PushRegistration) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(registration.config.run.0.as_bytes());
    hasher.update(registration.config.id.as_bytes());
    let digest = hasher.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
}

/// How long the worker keeps looking every `push.poll_ms` after it last claimed a due
/// registration (30 s): a registration rests `push.idle_ms` between turns and retries on its
/// schedule, and new records arrive while its run is active.
const HOT_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// How often an idle worker (nothing claimed for [`HOT_FOR`]) looks for due registrations
/// (5 s): a run's first record after a quiet spell reaches its destinations within this.
const IDLE_POLL: std::time::Duration = std::time::Duration::from_secs(5);

impl DeliveryWorker {
    /// A worker for `outbox`'s registrations, reading records from `journal` and POSTing them
    /// through `transport`, with [`DeliverySettings::default`] and the [`CloudEvents`] projection.
    ///
    /// # Panics
    /// If `journal` serves another tenant than the outbox's store.
    pub fn new(
        outbox: &Outbox,
        journal: Arc<dyn Journal>,
        transport: Arc<dyn PushTransport>,
    ) -> Self {
        assert!(
            journal.tenant() == outbox.tenant(),
            "DeliveryWorker: the journal serves tenant {} but the outbox serves {}",
            journal.tenant(),
            outbox.tenant()
        );
        let signers = outbox
            .destinations()
            .iter()
            .map(|d| {
                let signer = Signer::new(&d.signing_keys).expect("checked by Outbox::new");
                (d.registration_id(), signer)
            })
            .collect();
        DeliveryWorker {
            store: Arc::clone(outbox.store()),
            journal,
            transport,
            projection: Arc::new(CloudEvents),
            signers: Arc::new(signers),
            settings: DeliverySettings::default(),
            clock: Arc::new(SystemClock),
            events: None,
        }
    }

    /// The same worker with other settings.
    ///
    /// # Panics
    /// If `concurrency` is 0, or `page` or `attempts_kept` is not within 1 to `MAX_PAGE`.
    pub fn with_settings(self, settings: DeliverySettings) -> Self {
        assert!(settings.concurrency >= 1, "concurrency must be at least 1");
        assert!(
            (1..=MAX_PAGE).contains(&settings.page),
            "page must be within 1 to {MAX_PAGE}"
        );
        assert!(
            (1..=MAX_PAGE).contains(&settings.attempts_kept),
            "attempts_kept must be within 1 to {MAX_PAGE}"
        );
        DeliveryWorker { settings, ..self }
    }

    /// The same worker saying on `events` when it parks a registration
    /// ([`FeedKind::RegistrationParked`] for the run's team).
    pub fn with_events(self, events: EventSink) -> Self {
        DeliveryWorker {
            events: Some(events),
            ..self
        }
    }

    /// The same worker reading the time of a receiver's answer from `clock` (default: the system
    /// clock). [`DeliveryWorker::run`] uses the clock it is given instead.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        DeliveryWorker { clock, ..self }
    }

    /// The same worker with another projection (what a record becomes on the wire).
    pub fn with_projection(self, projection: Arc<dyn Projection>) -> Self {
        DeliveryWorker { projection, ..self }
    }

    /// The settings in force.
    pub fn settings(&self) -> &DeliverySettings {
        &self.settings
    }

    fn tenant(&self) -> &TenantId {
        self.store.tenant()
    }

    /// One sweep at time `at`: claims up to `limit` due registrations (until `at + lease`) and
    /// serves them, at most `concurrency` at once (each turn a tokio task, so call it inside a
    /// tokio runtime), each strictly in journal order, then returns what happened. A registration's own failures (receiver, journal, store) are handled per
    /// row and counted in the [`Sweep`]. Errors: only the claim itself (`PushStore::due`).
    pub async fn run_once(&self, at: DateTime<Utc>, limit: usize) -> Result<Sweep, StoreError> {
        let due = self
            .store
            .due(at, limit, after(at, self.settings.lease))
            .await?;
        let mut sweep = Sweep {
            claimed: due.len(),
            ..Sweep::default()
        };
        // Each turn is its own task (so turns use every core), spawned lazily: at most
        // `concurrency` exist at once.
        let turns: Vec<_> = futures_util::stream::iter(due)
            .map(|registration| {
                let worker = self.clone();
                tokio::spawn(async move { worker.serve(registration, at).await })
            })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        for turn in turns {
            match turn {
                Ok((turn, delivered)) => sweep.add(turn, delivered),
                Err(error) => {
                    tracing::error!(%error, "push: a delivery turn panicked or was cancelled");
                    sweep.add(Turn::Failed, 0);
                }
            }
        }
        Ok(sweep)
    }

    /// Serves until `shutdown` completes: keeps up to `concurrency` registrations in flight,
    /// claiming more as soon as a slot frees (so a hanging destination holds one slot, not the
    /// sweep), and otherwise looks for due rows every `poll` — while it claimed any within
    /// [`HOT_FOR`] (and from its start), else every [`IDLE_POLL`], so an idle server with no
    /// destination, or none due, sleeps. Time comes from `clock`. On shutdown
    /// the turns in flight are dropped: their cursors were not saved, so those events are sent
    /// again later (duplicates, never loss).
    pub async fn run(
        &self,
        clock: Arc<dyn Clock>,
        poll: Duration,
        shutdown: impl Future<Output = ()> + Send,
    ) {
        // One clock for the claims and the answers of this worker's turns.
        let this = self.clone().with_clock(Arc::clone(&clock));
        let mut shutdown = std::pin::pin!(shutdown);
        let mut in_flight = JoinSet::new();
        // The registrations whose turn is running, by task: `Outbox::open` on a resume replaces
        // a registration and makes it due at once, even while its turn runs; a second turn of the
        // same registration would send the same events concurrently and out of order. The turn in
        // flight ends first; a claim taken meanwhile (ours, so nobody else serves the row) is
        // handed back when it ends — the row is made due at once (`defer` to now: cursor and
        // attempts untouched), so the claim never strands it until the lease runs out.
        let mut serving: HashMap<tokio::task::Id, (RunId, String)> = HashMap::new();
        let mut claimed_meanwhile: HashSet<(RunId, String)> = HashSet::new();
        // A store that fails fails every poll: one line per period, with a count.
        let mut claims_failed = RepeatedWarning::default();
        let mut last_busy = std::time::Instant::now();
        loop {
            let free = self.settings.concurrency.saturating_sub(in_flight.len());
            if free > 0 {
                let at = clock.now();
                match self
                    .store
                    .due(at, free, after(at, self.settings.lease))
                    .await
                {
                    Ok(due) => {
                        if !due.is_empty() {
                            last_busy = std::time::Instant::now();
                        }
                        for registration in due {
                            let key = (registration.config.run, registration.config.id.clone());
                            if serving.values().any(|k| *k == key) {
                                tracing::debug!(run = %key.0, id = %key.1, "push: already in flight here; served again when that turn ends");
                                claimed_meanwhile.insert(key);
                                continue;
                            }
                            let worker = this.clone();
                            let task = in_flight
                                .spawn(async move { worker.serve(registration, at).await });
                            serving.insert(task.id(), key);
                        }
                    }
                    Err(error) => {
                        if let Some(repeated) = claims_failed.note(std::time::Instant::now()) {
                            tracing::warn!(tenant = %self.tenant(), %error, repeated, "push: claiming due registrations failed");
                        }
                    }
                }
            }
            let next_look = if !in_flight.is_empty() || last_busy.elapsed() < HOT_FOR {
                poll
            } else {
                IDLE_POLL.max(poll)
            };
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                    let id = match done {
                        Ok((id, _)) => id,
                        Err(error) => {
                            tracing::error!(%error, "push: a delivery turn panicked");
                            error.id()
                        }
                    };
                    if let Some(key) = serving.remove(&id)
                        && claimed_meanwhile.remove(&key)
                        && let Err(error) = self.store.defer(key.0, &key.1, clock.now()).await
                    {
                        tracing::warn!(run = %key.0, id = %key.1, %error, "push: handing back a claim failed; the row is served after its claim");
                    }
                }
                () = tokio::time::sleep(next_look) => {}
            }
        }
        in_flight.shutdown().await;
    }

    /// One turn of one registration. Returns how it ended and how many events were acknowledged.
    async fn serve(&self, registration: PushRegistration, at: DateTime<Utc>) -> (Turn, usize) {
        let run = registration.config.run;
        let id = registration.config.id.clone();
        let mut delivered = 0;
        match self.turn(&registration, at, &mut delivered).await {
            Ok(turn) => (turn, delivered),
            Err(error) => {
                tracing::warn!(%run, %id, %error, "push: a store failed; the registration is served again after its claim");
                (Turn::Failed, delivered)
            }
        }
    }

    async fn turn(
        &self,
        registration: &PushRegistration,
        at: DateTime<Utc>,
        delivered: &mut usize,
    ) -> Result<Turn, StoreError> {
        let config = &registration.config;
        let (run, id) = (config.run, config.id.as_str());
        let Some(signer) = self.signers.get(id) else {
            let error = "no configured destination has this registration id";
            self.store.park(run, id, error).await?;
            tracing::warn!(%run, %id, error, "push: registration parked");
            self.announce_parked(run).await;
            return Ok(Turn::Parked);
        };
        let records = match self
            .journal
            .read(run, registration.next_seq, self.settings.page)
            .await
        {
            Ok(records) => records,
            Err(StoreError::NotFound { .. }) => {
                let error = "the run is not in the journal";
                self.store.park(run, id, error).await?;
                tracing::warn!(%run, %id, error, "push: registration parked");
                return Ok(Turn::Parked);
            }
            Err(error) => return Err(error),
        };
        if records.is_empty() {
            self.store
                .defer(run, id, after(at, self.settings.idle))
                .await?;
            return Ok(Turn::Deferred);
        }

        let authorization = config
            .authentication
            .as_ref()
            .map(|a| Secret::new(format!("{} {}", a.scheme, a.credentials.expose())));
        let timestamp = at.timestamp();
        let mut acked: Option<Seq> = None;
        let mut terminal = false;
        let mut failure = None;
        // When the failure was answered (or the transport gave up): the retry counts from there.
        let mut failed_at = at;
        for record in records {
            if record.seq < registration.next_seq {
                continue;
            }
            if let Some(event) = self.projection.project(self.tenant(), &record) {
                let message_id = webhook_id(run, id, record.seq);
                let mut headers = vec![
                    ("content-type".to_owned(), event.content_type.to_owned()),
                    (WEBHOOK_ID.to_owned(), message_id.clone()),
                    (WEBHOOK_TIMESTAMP.to_owned(), timestamp.to_string()),
                ];
                if !signer.is_empty() {
                    let signature = signer.sign(&message_id, timestamp, &event.body);
                    headers.push((WEBHOOK_SIGNATURE.to_owned(), signature));
                }
                let request = PushRequest {
                    url: config.url.clone(),
                    headers,
                    authorization: authorization.clone(),
                    body: event.body,
                };
                let seq = record.seq;
                let started_at = self.clock.now().max(at);
                let started = std::time::Instant::now();
                let answer = self.transport.deliver(request).await;
                self.record_attempt(run, id, started_at, started, seq, &answer)
                    .await;
                match Failure::of(answer, seq) {
                    Ok(status) => {
                        tracing::debug!(%run, %id, %seq, status, url = %redact_url(&config.url), "push: event acknowledged");
                        *delivered += 1;
                    }
                    Err(stop) => {
                        failed_at = self.clock.now().max(at);
                        failure = Some(stop);
                        break;
                    }
                }
            }
            acked = Some(record.seq);
            if record.kind.is_terminal() {
                terminal = true;
                break;
            }
        }

        if terminal {
            self.store.delete(run, id).await?;
            tracing::debug!(%run, %id, "push: terminal record acknowledged; registration deleted");
            return Ok(Turn::Deleted);
        }
        let progressed = acked.is_some();
        if let Some(last) = acked {
            self.store.advance(run, id, last.next(), at).await?;
        }
        let turn = match failure {
            None => Turn::Advanced,
            Some(Failure::Park { error, attempted }) => {
                // An answered POST is counted (keeping the claim), so `push parked` shows it.
                self.park(registration, &error, attempted, at).await?
            }
            Some(Failure::Retry { error, retry_after }) => {
                let attempts = if progressed {
                    1
                } else {
                    registration.attempts.saturating_add(1)
                };
                let backoff = &self.settings.backoff;
                if backoff.exhausted(attempts) {
                    let error = format!("{error}; gave up after {attempts} attempts");
                    // Record the last failed attempt first (keeping the claim: the row's
                    // `next_attempt_at` is already `at + lease`), so the parked row's `attempts`
                    // — what `push parked` shows — is the count in its error. A crash between the
                    // two leaves an exhausted row that parks on its next failure.
                    self.park(registration, &error, true, at).await?
                } else {
                    let delay =
                        backoff.delay_with_hint(attempts, seed_of(registration), retry_after);
                    self.store
                        .retry(run, id, after(failed_at, delay), &error)
                        .await?;
                    tracing::debug!(%run, %id, url = %redact_url(&config.url), %error, attempts, delay_ms = delay.as_millis() as u64, "push: delivery failed; will retry");
                    Turn::Retried
                }
            }
        };
        Ok(turn)
    }

    /// Parks `registration` with `error`; `attempted` first records the failed attempt with
    /// [`PushStore::retry`], keeping the claim (`next_attempt_at = at + lease`).
    async fn park(
        &self,
        registration: &PushRegistration,
        error: &str,
        attempted: bool,
        at: DateTime<Utc>,
    ) -> Result<Turn, StoreError> {
        let config = &registration.config;
        let (run, id) = (config.run, config.id.as_str());
        if attempted {
            self.store
                .retry(run, id, after(at, self.settings.lease), error)
                .await?;
        }
        self.store.park(run, id, error).await?;
        tracing::warn!(%run, %id, url = %redact_url(&config.url), %error, "push: registration parked");
        self.announce_parked(run).await;
        Ok(Turn::Parked)
    }

    /// Appends the POST of `seq` (started at `started_at`, the worker's clock; timed from
    /// `started`) and its `answer` to the registration's attempts log, keeping
    /// `attempts_kept`. The error text is the transport's own (bus-written: never a credential,
    /// never the URL). A log that cannot be written is logged and delivery goes on: the log
    /// is for people, the cursor is what counts.
    async fn record_attempt(
        &self,
        run: RunId,
        id: &str,
        started_at: DateTime<Utc>,
        started: std::time::Instant,
        seq: Seq,
        answer: &Result<PushResponse, TransportError>,
    ) {
        let attempt = PushAttempt {
            at: started_at,
            seq,
            outcome: match answer {
                Ok(response) => AttemptOutcome::Status {
                    status: response.status,
                },
                Err(error) => AttemptOutcome::Error {
                    error: error.to_string(),
                },
            },
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        if let Err(error) = self
            .store
            .record_attempt(run, id, &attempt, self.settings.attempts_kept)
            .await
        {
            tracing::warn!(%run, %id, %error, "push: the attempt could not be written to the attempts log; delivery goes on");
        }
    }

    /// Says on the console feed that a registration of `run` was parked, for the run's team (a
    /// run the journal cannot name has no team to tell: nothing is said).
    async fn announce_parked(&self, run: RunId) {
        let Some(events) = &self.events else {
            return;
        };
        match self.journal.run(run).await {
            Ok(r) => events(FeedEvent::new(r.team, FeedKind::RegistrationParked).run(run.0)),
            Err(error) => {
                tracing::debug!(%run, %error, "push: a parked registration's run has no team to tell");
            }
        }
    }
}
