//! The use-case facade: the ports the use cases need, their settings, metrics and the wake-ups
//! that keep workers responsive.
//!
//! Each use case lives in its own module (`send`, `relay`, `references`, `deliver`,
//! `acknowledge`, `history`, `retention`, `health`) as methods of [`Bus`]. `Bus` holds ports
//! only — never an adapter type.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crewbus_domain::{Backoff, BusError, BusResult, DateTime, Utc, Uuid};
use crewbus_ports::{
    Backends, Clock, Feed, Journal, Leases, Ledger, Operators, Oversight, PushStore, Search,
    SendAllowance, StreamAdmin, Wakeups,
};
use tokio::sync::Notify;

use crate::config::{AllowList, BusConfig, ConsoleConfig};
use crate::metrics::{Metrics, StoreWritesSource};
use crate::push::PushRuntime;
use crate::shutdown::Shutdown;
use crate::usecases::activity::ActivityTracker;
use crate::usecases::body_room::BodyRoom;
use crate::usecases::feed::FeedHub;
use crate::usecases::leases::LeaseRoom;
use crate::usecases::send_batch::{BatchBounds, SendBatcher};
use crate::usecases::token_cache::{TOKEN_CACHE_ENTRIES, TokenCache};
use crate::usecases::wait::WaitRoom;

/// The ports the use cases run on.
#[derive(Clone)]
pub struct Ports {
    /// The authority.
    pub ledger: Arc<dyn Ledger>,
    /// Body backends and inboxes by name, per team.
    pub backends: Arc<dyn Backends>,
    /// Runs and their journals (the ledger writes the bus's own records into it).
    pub journal: Arc<dyn Journal>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// The broker, when one is configured: health reports whether it answers.
    pub broker: Option<Arc<dyn StreamAdmin>>,
    /// Wake-ups of waiting fetches, across every server sharing the ledger (follows the
    /// ledger: in process for memory, `LISTEN/NOTIFY` for Postgres).
    pub wakeups: Arc<dyn Wakeups>,
    /// Operators, their sign-in codes and console sessions (the ledger's store).
    pub operators: Arc<dyn Operators>,
    /// The operator's reads of the ledger, agents' last activity, human members.
    pub oversight: Arc<dyn Oversight>,
    /// Leases on path patterns (the ledger's store).
    pub leases: Arc<dyn Leases>,
    /// Each agent's send bucket shared by every server on the ledger, when the ledger is shared
    /// (Postgres); `None` keeps the buckets in this process (exact for a store one server
    /// holds: SQLite, memory).
    pub send_allowance: Option<Arc<dyn SendAllowance>>,
    /// The full-text search index over the messages (the ledger's store), kept by the index
    /// worker (`usecases::search`).
    pub search: Arc<dyn Search>,
    /// The console event feed (follows the ledger, as the wake-ups do).
    pub feed: Arc<dyn Feed>,
    /// The push registrations and their attempts logs, as operators see them (the outbox's
    /// sealed store when there is an outbox: never ciphertext, and credentials are never
    /// rendered).
    pub push_store: Arc<dyn PushStore>,
}

/// Messages left per agent, each with its body's size as JSON when known (0 when not).
pub(crate) type Deferred = HashMap<Uuid, Vec<(Uuid, u64)>>;

/// Use-case settings, derived from [`BusConfig`]. Durations are `std::time::Duration`.
#[derive(Debug, Clone)]
pub struct BusSettings {
    /// Largest message body, bytes.
    pub max_body_bytes: u64,
    /// Slots leased and settled per relay transaction.
    pub relay_batch: usize,
    /// Most send requests per group commit (`Ledger::send_batch`), 1 to `MAX_PAGE`.
    pub send_batch_max: usize,
    /// Most body bytes per group commit (sum of the bodies' lengths), bytes.
    pub send_batch_max_bytes: u64,
    /// Relay lease length.
    pub relay_lease: Duration,
    /// Inbox events leased per reference-worker pass.
    pub reference_batch: usize,
    /// Reference-worker lease length (a lease that lapses only repeats a deduplicated publish).
    pub reference_lease: Duration,
    /// Relay retry schedule.
    pub backoff: Backoff,
    /// A hand-out not confirmed within this is handed out again.
    pub handout_grace: Duration,
    /// Top-up from the ledger hands out messages stored longer ago than this without a
    /// reference in the inbox (gives the reference worker time to publish first).
    pub topup_after: Duration,
    /// Largest number of deliveries one fetch returns.
    pub max_fetch: usize,
    /// Largest body budget (`max_bytes`) one fetch may ask for, bytes (`bus.max_fetch_bytes`).
    pub max_fetch_bytes: usize,
    /// The body budget of an HTTP fetch without `max_bytes`, bytes:
    /// [`DEFAULT_FETCH_BYTES`](crate::usecases::deliver::DEFAULT_FETCH_BYTES) (4 MiB), or
    /// `max_fetch_bytes` when that is lower.
    pub fetch_bytes_default: usize,
    /// Most bytes of bodies all fetches of this process hold at once
    /// (`bus.max_body_bytes_in_flight`; see [`crate::usecases::body_room`]).
    pub max_body_bytes_in_flight: u64,
    /// Longest a fetch may wait for a delivery (`bus.max_wait_ms`).
    pub max_wait: Duration,
    /// How long an idle worker waits before polling again (it is woken earlier by new work).
    pub idle_poll: Duration,
    /// Keep bodies this long; `None` keeps them forever.
    pub retention: Option<Duration>,
    /// How often the retention job runs.
    pub retention_interval: Duration,
    /// The body backend and inbox names this deployment serves (set by the composition root).
    pub backends: Vec<String>,
    /// Deadline for a request's whole body, from the end of its headers
    /// (`bus.request_body_timeout_ms`).
    pub request_body_timeout: Duration,
    /// A connection without a complete request head this long after it opened or after its
    /// previous answer is closed (`bus.header_read_timeout_ms`).
    pub header_read_timeout: Duration,
    /// Most HTTP connections open at once (`bus.max_http_connections`).
    pub max_http_connections: usize,
    /// After shutdown fires, how long the server waits for open connections and worker passes.
    pub shutdown_grace: Duration,
    /// Longest the health probe waits for the ledger (and, beside it, the broker).
    pub health_timeout: Duration,
    /// Longest a request's use case may take before it is answered `Timeout`
    /// (`bus.request_timeout_ms`; a fetch adds its wait, see [`Bus::within_deadline`]).
    pub request_timeout: Duration,
    /// How long a bearer-token lookup is reused (`bus.token_cache_ms`, at most 1 s); zero looks
    /// every request's token up in the ledger (see `token_cache`).
    pub token_cache: Duration,
    /// The listener's allowed `Host` and `Origin` values beyond loopback, for every route (set
    /// by the composition root from `[http]`, and the older `[mcp]`; none by default).
    pub allow: AllowList,
    /// The console's settings (`[console]`; set by the composition root).
    pub console: ConsoleSettings,
    /// How many attempts each push registration's log keeps (`push.attempts_kept`).
    pub attempts_kept: usize,
    /// Longest lease TTL (`bus.lease_max_ttl_ms`).
    pub lease_max_ttl: Duration,
    /// The TTL of an acquire that names none (`bus.lease_default_ttl_ms`).
    pub lease_default_ttl: Duration,
    /// The send rate limits (`[rate_limit]`; set by the composition root): `None` is no limit.
    pub rate_limits: Option<crate::config::RateLimits>,
}

/// The console's settings, from `[console]`.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// Whether `/console` is served.
    pub enabled: bool,
    /// A session unused this long ends (`console.session_idle_s`, default 12 h).
    pub session_idle: Duration,
    /// Whether the session cookie is marked `Secure` (behind TLS: `console.secure_cookies`).
    pub secure_cookies: bool,
}

impl ConsoleSettings {
    /// The settings of `c`.
    pub fn from_config(c: &ConsoleConfig) -> Self {
        ConsoleSettings {
            enabled: c.enabled,
            session_idle: Duration::from_secs(c.session_idle_s),
            secure_cookies: c.secure_cookies,
        }
    }
}

impl BusSettings {
    /// Settings from the configuration.
    pub fn from_config(c: &BusConfig) -> Self {
        BusSettings {
            max_body_bytes: c.max_body_bytes,
            relay_batch: c.relay_batch.min(crewbus_domain::MAX_PAGE),
            send_batch_max: c.send_batch_max.clamp(1, crewbus_domain::MAX_PAGE),
            send_batch_max_bytes: c.send_batch_max_bytes.max(1),
            relay_lease: Duration::from_millis(c.relay_lease_ms),
            reference_batch: c.reference_batch.min(crewbus_domain::MAX_PAGE),
            reference_lease: Duration::from_millis(c.relay_lease_ms),
            backoff: c.backoff(),
            handout_grace: Duration::from_millis(c.handout_grace_ms),
            topup_after: Duration::from_millis(c.topup_after_ms),
            max_fetch: c.max_fetch.min(crewbus_domain::MAX_PAGE),
            max_fetch_bytes: usize::try_from(c.max_fetch_bytes).unwrap_or(usize::MAX),
            fetch_bytes_default: usize::try_from(c.max_fetch_bytes)
                .unwrap_or(usize::MAX)
                .min(crate::usecases::deliver::DEFAULT_FETCH_BYTES),
            max_body_bytes_in_flight: c.max_body_bytes_in_flight,
            max_wait: Duration::from_millis(c.max_wait_ms),
            idle_poll: Duration::from_millis(c.idle_poll_ms),
            retention: (c.retention_days > 0)
                .then(|| Duration::from_secs(c.retention_days.saturating_mul(86_400))),
            retention_interval: Duration::from_secs(c.retention_interval_s.max(1)),
            backends: vec!["memory".to_owned()],
            request_body_timeout: Duration::from_millis(c.request_body_timeout_ms),
            header_read_timeout: Duration::from_millis(c.header_read_timeout_ms),
            max_http_connections: c.max_http_connections,
            shutdown_grace: Duration::from_millis(c.shutdown_grace_ms),
            health_timeout: Duration::from_millis(c.health_timeout_ms),
            request_timeout: Duration::from_millis(c.request_timeout_ms),
            token_cache: Duration::from_millis(
                c.token_cache_ms
                    .min(crate::usecases::token_cache::MAX_TOKEN_CACHE_MS),
            ),
            allow: AllowList::default(),
            console: ConsoleSettings::from_config(&ConsoleConfig::default()),
            attempts_kept: crewbus_domain::DEFAULT_ATTEMPTS_KEPT,
            lease_max_ttl: Duration::from_millis(c.lease_max_ttl_ms),
            lease_default_ttl: Duration::from_millis(c.lease_default_ttl_ms),
            rate_limits: None,
        }
    }
}

impl Default for BusSettings {
    fn default() -> Self {
        Self::from_config(&BusConfig::default())
    }
}

/// Wake-ups: `send` wakes the relay, a stored message wakes the reference worker and the search
/// index worker.
#[derive(Default)]
pub(crate) struct Wakers {
    pub(crate) relay: Notify,
    pub(crate) references: Notify,
    pub(crate) index: Notify,
}

/// The use cases over the ports. Cheap to clone (everything is shared).
#[derive(Clone)]
pub struct Bus {
    pub(crate) ports: Ports,
    pub(crate) settings: Arc<BusSettings>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) wakers: Arc<Wakers>,
    pub(crate) push: Option<PushRuntime>,
    /// When each agent's fetch last ran the ledger top-up to the end (bus clock), so a healthy
    /// inbox costs one top-up query per agent per interval, not one per fetch (see `deliver`).
    /// One entry per agent that fetched through this process.
    pub(crate) topped_up: Arc<Mutex<HashMap<Uuid, DateTime<Utc>>>>,
    /// Messages a fetch of each agent left for lack of room (its `max_bytes`, or the room for
    /// bodies): the agent's next fetch through this process tries them first (see `deliver`).
    /// At most `max_fetch` per agent; an agent's entry is taken by its next fetch. Each with the
    /// body's size as JSON when this process read it already (0 when not), what the next fetch
    /// reserves for it.
    pub(crate) deferred: Arc<Mutex<Deferred>>,
    /// The room for bodies held by this process's fetches (`bus.max_body_bytes_in_flight`).
    pub(crate) bodies: Arc<BodyRoom>,
    /// The fetches waiting in this process (see `wait`).
    pub(crate) room: Arc<WaitRoom>,
    /// The lease acquires waiting in this process (see `leases`).
    pub(crate) lease_room: Arc<LeaseRoom>,
    /// The bus's own shutdown: once fired, every waiting fetch answers an empty page at once.
    pub(crate) shutdown: Shutdown,
    /// The group-commit batcher of sends, spawned on the first send (on the runtime serving
    /// it); it ends when the last clone of the bus is dropped, after answering its queue.
    pub(crate) sends: Arc<OnceLock<SendBatcher>>,
    /// Recent bearer-token lookups (see `token_cache`): at most `settings.token_cache` old,
    /// dropped on a revocation or a wake-up of the agent.
    pub(crate) tokens: Arc<TokenCache>,
    /// Agents' calls not yet written as their last activity (see `activity`).
    pub(crate) activity: Arc<ActivityTracker>,
    /// Each agent's send token bucket in this process (see `send`), created full on the agent's
    /// first send while `settings.rate_limits` is on. One entry per agent that sent here.
    pub(crate) buckets: Arc<Mutex<HashMap<Uuid, crewbus_domain::TokenBucket>>>,
    /// With a shared allowance (`ports.send_allowance`): the tokens this process holds of each
    /// agent's shared bucket, leased a chunk at a time; its lock serialises one agent's sends'
    /// takes here, so one empty chunk makes one lease.
    pub(crate) chunks: Arc<Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<u32>>>>>,
    /// Where the index worker's next pass starts in the backlog (see `search`): after the
    /// last message a pass listed when it stopped at its batch bound, `None` (the oldest) once
    /// a pass reached the backlog's end.
    pub(crate) index_resume: Arc<Mutex<Option<crewbus_domain::IndexPosition>>>,
    /// The console feed's publisher and viewers (see `feed`).
    pub(crate) feed: Arc<FeedHub>,
    /// What the store wrote (rows per table, group commits), read at scrape time for
    /// `/metrics`, when the store counts it (see [`Bus::with_store_writes`]).
    pub(crate) store_writes: Option<StoreWritesSource>,
}

impl Bus {
    /// A bus over `ports` with `settings`.
    pub fn new(ports: Ports, settings: BusSettings) -> Self {
        let tokens = Arc::new(TokenCache::new(settings.token_cache, TOKEN_CACHE_ENTRIES));
        let metrics = Arc::new(Metrics::default());
        let bodies = Arc::new(BodyRoom::new(
            settings.max_body_bytes_in_flight,
            metrics.fetch_bodies_in_flight.clone(),
        ));
        Bus {
            ports,
            settings: Arc::new(settings),
            metrics,
            wakers: Arc::new(Wakers::default()),
            push: None,
            topped_up: Arc::new(Mutex::new(HashMap::new())),
            deferred: Arc::new(Mutex::new(HashMap::new())),
            bodies,
            room: Arc::new(WaitRoom::default()),
            lease_room: Arc::new(LeaseRoom::default()),
            shutdown: Shutdown::new(),
            sends: Arc::new(OnceLock::new()),
            tokens,
            activity: Arc::new(ActivityTracker::default()),
            feed: Arc::new(FeedHub::default()),
            store_writes: None,
            buckets: Arc::new(Mutex::new(HashMap::new())),
            chunks: Arc::new(Mutex::new(HashMap::new())),
            index_resume: Arc::new(Mutex::new(None)),
        }
    }

    /// The same bus stopping with `shutdown`: when it fires, waiting fetches end at once with an
    /// empty page (the server passes its own shutdown here).
    pub fn with_shutdown(self, shutdown: Shutdown) -> Self {
        Bus { shutdown, ..self }
    }

    /// The same bus with the push outbox: admissions and resumes open registrations with
    /// `push.outbox`, and the server runs `push.worker` beside the other workers.
    pub fn with_push(self, push: PushRuntime) -> Self {
        Bus {
            push: Some(push),
            ..self
        }
    }

    /// The same bus exposing what the store wrote in `/metrics` (`crewbus_store_rows_total{table,
    /// op}`, `crewbus_store_commits_total`, `crewbus_store_commit_parts_total`), read from
    /// `source` at every scrape. The composition root passes one for a store that counts its
    /// writes (the embedded store).
    pub fn with_store_writes(self, source: StoreWritesSource) -> Self {
        Bus {
            store_writes: Some(source),
            ..self
        }
    }

    /// The push outbox and its worker, when the deployment has one.
    pub fn push(&self) -> Option<&PushRuntime> {
        self.push.as_ref()
    }

    /// The ports.
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// Runs `work` within `bus.request_timeout_ms` plus `extra`, so it is answered within a
    /// bound whatever a store does: when the deadline passes first, `work` is **dropped** where
    /// it stands and the answer is `Timeout` (HTTP 503 `timeout`), counted in
    /// `crewbus_request_timeouts_total`. For work that may stop at any await: a token lookup, a
    /// waiting fetch (its hand-outs, if committed, come back after their grace). A whole
    /// request's use case goes through [`Bus::finish_within_deadline`] instead, which lets it
    /// finish. It exists for a ledger or backend that does not answer at all: a server cut from
    /// its database waits on pooled connections whose peer is silent until TCP gives up,
    /// minutes later (found by the partition test; sqlx sets no `TCP_USER_TIMEOUT`).
    pub async fn within_deadline<T>(
        &self,
        extra: Duration,
        work: impl std::future::Future<Output = BusResult<T>>,
    ) -> BusResult<T> {
        let bound = self.settings.request_timeout.saturating_add(extra);
        match tokio::time::timeout(bound, work).await {
            Ok(answer) => answer,
            Err(_) => Err(self.timed_out(bound)),
        }
    }

    /// [`Bus::within_deadline`] for a whole request's use case: `work` runs in a task of its
    /// own, and when the deadline passes first the caller is answered `Timeout` while the task
    /// **runs on** to its end (its answer discarded), so the steps after a commit — a run's
    /// push registrations, a revocation's token drop and wake-ups, a send's feed events and
    /// worker wake-ups — still happen once the store answers. What the caller cannot know is
    /// whether the write took effect: a send retried with its `request_id` is never stored
    /// twice, a confirm is once per delivery. A panic of `work` is `Unavailable` (logged where answered).
    pub async fn finish_within_deadline<T: Send + 'static>(
        &self,
        extra: Duration,
        work: impl std::future::Future<Output = BusResult<T>> + Send + 'static,
    ) -> BusResult<T> {
        let bound = self.settings.request_timeout.saturating_add(extra);
        let task = tokio::spawn(work);
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(BusError::unavailable("the request ended without an answer")),
            // Dropping the join handle detaches the task: it runs on.
            Err(_) => Err(self.timed_out(bound)),
        }
    }

    /// The `Timeout` of a request not answered within `bound`, counted.
    pub(crate) fn timed_out(&self, bound: Duration) -> BusError {
        Metrics::inc(&self.metrics.request_timeouts);
        // Logged once, as a 5xx, where it is answered (`http::error::error_body`).
        BusError::timeout(format!(
            "the request did not finish within {} ms (bus.request_timeout_ms): a store is not \
             answering; retry (a send with the same request_id is never stored twice)",
            bound.as_millis()
        ))
    }

    /// The settings.
    pub fn settings(&self) -> &BusSettings {
        &self.settings
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.ports.clock.now()
    }

    /// The bus's send batcher, spawned on first use.
    pub(crate) fn send_batcher(&self) -> &SendBatcher {
        self.sends.get_or_init(|| {
            SendBatcher::spawn(
                Arc::clone(&self.ports.ledger),
                Arc::clone(&self.ports.clock),
                BatchBounds {
                    max: self.settings.send_batch_max,
                    max_bytes: self.settings.send_batch_max_bytes,
                },
            )
        })
    }
}

// The instant arithmetic lives in the domain (used by the push worker too).
pub(crate) use crewbus_domain::{after, before};
