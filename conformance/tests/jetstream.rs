//! The JetStream adapter against real nats-server (libtest-mimic, `harness = false`).
//!
//! One fixture server (from `NATS_SERVER_BIN`, else `PATH`) is shared by the tests that need
//! nothing special; each test uses a fresh team. Tests that need a server of their own
//! (restart, account budget, `max_payload`, cluster) spawn one; under `NATS_URL` they are
//! reported as ignored, and so are the tests needing the fixture's credentials.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_trait::async_trait;
use bytes::Bytes;
use crewbus_conformance::nats::{
    self, NatsCluster, NatsOptions, NatsServer, UserPassword, parse_version,
};
use crewbus_conformance::stream_admin::{self, AdminFixture, AdminFixtureFactory};
use crewbus_conformance::trial::{Behaviour, Lack, Source, Suite};
use crewbus_conformance::{
    BodyFixture, Capabilities, FixtureError, FixtureFactory, InboxFixture, Namespace, TeamFixture,
};
use crewbus_domain::BusResult;
use crewbus_domain::{BusError, Envelope, Locator, Published, Quotas, Secret, StreamKind, Uuid};
use crewbus_jetstream::{Config, Credential, JetStreamAdmin, JetStreamBackend, JetStreamRegistry};
use crewbus_ports::{Backends, Inbox, MessagingBackend, StreamAdmin};
use libtest_mimic::Arguments;

const MIB: u64 = 1024 * 1024;

/// Where the suite's shared broker is.
struct Harness {
    url: String,
    version: String,
    /// Whether the broker is this suite's fixture (with its users), not `NATS_URL`.
    fixture: bool,
    _server: Option<NatsServer>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Any broker, also `NATS_URL`.
    Any,
    /// The fixture's users (provisioning vs runtime credential).
    Credentials,
    /// A server of its own (restart, budget, max_payload).
    OwnServer,
    /// A 3-node cluster on a server line with the R3 per-subject-discard fix.
    Cluster,
}

/// The suite's own tests share the broker: each trial gets the [`Harness`]. Those needing the
/// fixture's users or servers of their own are ignored under `NATS_URL` (naming why), and those
/// spawning servers of their own (restart, cluster) run one at a time.
struct Adapter(Arc<Harness>);

#[async_trait]
impl Source for Adapter {
    type Fixture = Arc<Harness>;
    type Need = Needs;

    fn lacks(&self, needs: &[Needs]) -> Option<Lack> {
        needs
            .iter()
            .find_map(|need| self.0.lacks(*need))
            .map(|reason| Lack {
                kind: None,
                reason: reason.to_owned(),
            })
    }

    fn exclusive(&self, needs: &[Needs]) -> bool {
        needs
            .iter()
            .any(|need| matches!(need, Needs::OwnServer | Needs::Cluster))
    }

    async fn fixture(&self) -> Result<Box<Arc<Harness>>, FixtureError> {
        Ok(Box::new(Arc::clone(&self.0)))
    }
}

fn credential(u: &UserPassword) -> Credential {
    Credential::UserPassword {
        user: u.user.clone(),
        password: Secret::new(u.password.clone()),
    }
}

/// Short windows: duplicate window 2 s, ack wait 1 s.
fn base_config(url: &str) -> Config {
    Config {
        servers: vec![url.to_owned()],
        body_quotas: Quotas {
            max_messages: 10_000,
            max_bytes: 64 * MIB,
        },
        inbox_quotas: Quotas {
            max_messages: 10_000,
            max_bytes: 8 * MIB,
        },
        duplicate_window: Duration::from_secs(2),
        inbox_max_age: Duration::from_secs(3600),
        ack_wait: Duration::from_secs(1),
        max_deliver: 5,
        request_timeout: Duration::from_secs(3),
        ..Config::default()
    }
}

impl Harness {
    fn prov(&self) -> Config {
        let mut c = base_config(&self.url);
        if self.fixture {
            c.credential = credential(&nats::provisioning_user());
        }
        c
    }

    fn rt(&self) -> Config {
        let mut c = base_config(&self.url);
        if self.fixture {
            c.credential = credential(&nats::runtime_user());
        }
        c
    }

    fn line(&self) -> (u32, u32, u32) {
        parse_version(&self.version)
    }

    /// nats-server before 2.10 evicts on a lowered limit and has the R3 per-subject bug.
    fn is_2_9(&self) -> bool {
        self.line() < (2, 10, 0)
    }

    /// Why a test needing `need` cannot run on this broker, or `None`.
    fn lacks(&self, need: Needs) -> Option<&'static str> {
        match need {
            Needs::Any => None,
            Needs::Credentials | Needs::OwnServer if !self.fixture => {
                Some("needs a server of its own (NATS_URL mode)")
            }
            Needs::Credentials | Needs::OwnServer => None,
            Needs::Cluster if !self.fixture => Some("needs a cluster of its own (NATS_URL mode)"),
            Needs::Cluster if self.is_2_9() => {
                Some("R3 with per-subject discard is buggy before late-2025 server releases")
            }
            Needs::Cluster => None,
        }
    }
}

fn prov_for(url: &str) -> Config {
    let mut c = base_config(url);
    c.credential = credential(&nats::provisioning_user());
    c
}

fn rt_for(url: &str) -> Config {
    let mut c = base_config(url);
    c.credential = credential(&nats::runtime_user());
    c
}

/// A fresh team: both streams provisioned with `prov`, the adapter connected with `rt`.
async fn team_with(prov: &Config, rt: &Config) -> (Uuid, JetStreamBackend) {
    let team = Uuid::new_v4();
    JetStreamBackend::provision(prov, team)
        .await
        .expect("provision");
    JetStreamBackend::provision_inbox(prov, team)
        .await
        .expect("provision inbox");
    let backend = JetStreamBackend::connect(rt, team).await.expect("connect");
    (team, backend)
}

async fn new_team(h: &Harness) -> (Uuid, JetStreamBackend) {
    team_with(&h.prov(), &h.rt()).await
}

fn envelope(team: Uuid, body: impl Into<String>) -> Envelope {
    Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: Uuid::new_v4(),
        team_id: team,
        body: body.into(),
        publish_key: Uuid::new_v4(),
    }
}

fn confirmed(p: &Published) -> (Locator, bool) {
    match p {
        Published::Confirmed { locator, duplicate } => (locator.clone(), *duplicate),
        other => panic!("expected Confirmed, got {other:?}"),
    }
}

/// Polls `check` until it holds or `deadline` passes (then panics naming `what`).
async fn eventually<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < end, "not within {deadline:?}: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls `attempt` until it yields a value or `deadline` passes (then panics naming `what`).
async fn poll_until<T, F, Fut>(what: &str, deadline: Duration, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = attempt().await {
            return v;
        }
        assert!(Instant::now() < end, "not within {deadline:?}: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn raw(url: &str, user: &UserPassword) -> (async_nats::Client, jetstream::Context) {
    let client = async_nats::ConnectOptions::new()
        .user_and_password(user.user.clone(), user.password.clone())
        .request_timeout(Some(Duration::from_secs(2)))
        .connect(url)
        .await
        .expect("raw connect");
    let js = jetstream::new(client.clone());
    (client, js)
}

async fn raw_h(h: &Harness, user: &UserPassword) -> (async_nats::Client, jetstream::Context) {
    if h.fixture {
        raw(&h.url, user).await
    } else {
        let client = async_nats::connect(h.url.as_str())
            .await
            .expect("raw connect");
        let js = jetstream::new(client.clone());
        (client, js)
    }
}

async fn stream_info(js: &jetstream::Context, name: &str) -> jetstream::stream::Info {
    js.get_stream(name)
        .await
        .expect("stream")
        .info()
        .await
        .expect("stream info")
        .clone()
}

/// Publishes until confirmed, settling `Uncertain` with reconcile (a relay in miniature).
async fn settle(b: &JetStreamBackend, e: &Envelope, deadline: Duration) -> Locator {
    let end = Instant::now() + deadline;
    loop {
        match b.publish(e.clone()).await {
            Published::Confirmed { locator, .. } => return locator,
            Published::Fatal(err) => panic!("fatal publish: {err:?}"),
            Published::Retryable(_) => {}
            Published::Uncertain(_) => {
                if let Ok(Some(l)) = b.reconcile(e).await {
                    return l;
                }
            }
        }
        assert!(Instant::now() < end, "body not settled within {deadline:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------

async fn connect_to_unprovisioned_team_is_not_provisioned(h: &Harness) {
    let err = JetStreamBackend::connect(&h.rt(), Uuid::new_v4())
        .await
        .expect_err("no stream");
    assert!(matches!(err, BusError::NotProvisioned { .. }), "{err:?}");
}

async fn provision_twice_keeps_limits(h: &Harness) {
    let team = Uuid::new_v4();
    let prov = h.prov();
    for kind in [StreamKind::Bodies, StreamKind::Inbox] {
        let provision = |c: Config| async move {
            match kind {
                StreamKind::Bodies => JetStreamBackend::provision(&c, team).await,
                StreamKind::Inbox => JetStreamBackend::provision_inbox(&c, team).await,
            }
        };
        let first = provision(prov.clone()).await.expect("first provision");
        assert!(first.created);
        assert_eq!(first.kind, kind);
        assert_eq!(first.limits, prov.quotas(kind));
        assert!(!first.differs_from(&prov.quotas(kind)));
        let mut other = prov.clone();
        other.body_quotas.max_messages += 7;
        other.inbox_quotas.max_bytes += MIB;
        let second = provision(other.clone()).await.expect("second provision");
        assert!(!second.created);
        assert_eq!(
            second.limits, first.limits,
            "an existing stream keeps its limits"
        );
        assert!(second.differs_from(&other.quotas(kind)));
    }
}

async fn body_at_the_limit_is_confirmed_and_one_more_byte_is_too_large(h: &Harness) {
    let (team, b) = new_team(h).await;
    let limit = b.body_limit();
    if h.fixture {
        assert_eq!(
            limit, MIB,
            "a 2 MB max_payload carries the whole 1 MiB contract"
        );
    }
    let at = envelope(team, "x".repeat(limit as usize));
    let (loc, _) = confirmed(&b.publish(at.clone()).await);
    assert_eq!(
        b.fetch(&loc, at.message_id)
            .await
            .expect("fetch")
            .as_deref(),
        Some(at.body.as_str())
    );
    let over = envelope(team, "x".repeat(limit as usize + 1));
    assert!(matches!(
        b.publish(over).await,
        Published::Fatal(BusError::TooLarge { .. })
    ));
}

async fn server_max_payload_lowers_the_effective_body_limit(_h: &Harness) {
    let server = NatsServer::start_with(&NatsOptions {
        max_payload: Some("1MB".into()),
        ..NatsOptions::default()
    });
    let (team, b) = team_with(&prov_for(&server.url()), &rt_for(&server.url())).await;
    let limit = b.body_limit();
    assert_eq!(limit, MIB - crewbus_jetstream::HEADER_ALLOWANCE);
    let at = envelope(team, "y".repeat(limit as usize));
    confirmed(&b.publish(at).await);
    assert!(matches!(
        b.publish(envelope(team, "y".repeat(limit as usize + 1)))
            .await,
        Published::Fatal(BusError::TooLarge { .. })
    ));
}

/// Log lines written by a `tracing_subscriber::fmt` subscriber, kept in memory.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The warning that the server lowers the effective body limit is logged once per team (as the
/// README says), however many lookups race to connect a new team first and however often the
/// team is evicted (its body stream vanished) and connected again.
async fn the_lowered_body_limit_is_logged_once_per_team(_h: &Harness) {
    use tracing::instrument::WithSubscriber as _;
    let server = NatsServer::start_with(&NatsOptions {
        max_payload: Some("1MB".into()),
        ..NatsOptions::default()
    });
    let (prov, rt) = (prov_for(&server.url()), rt_for(&server.url()));
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let registry =
        JetStreamRegistry::with_revalidation(rt.clone(), Duration::ZERO).expect("registry");
    let mut teams = Vec::new();
    for _ in 0..2 {
        let team = Uuid::new_v4();
        JetStreamBackend::provision(&prov, team)
            .await
            .expect("provision");
        JetStreamBackend::provision_inbox(&prov, team)
            .await
            .expect("provision inbox");
        teams.push(team);
    }
    async {
        // A new team's first requests come at once (a send, a fetch, the sweeps).
        let lookups = teams.iter().flat_map(|team| {
            let registry = &registry;
            (0..4).map(move |i| async move {
                if i % 2 == 0 {
                    registry
                        .body_backend(*team, JetStreamBackend::NAME)
                        .await
                        .map(drop)
                } else {
                    registry
                        .inbox(*team, JetStreamBackend::NAME)
                        .await
                        .map(drop)
                }
            })
        });
        for served in futures_util::future::join_all(lookups).await {
            served.expect("served");
        }
        // Evicted when its body stream vanished, connected again once it is provisioned again.
        JetStreamBackend::deprovision(&prov, teams[0])
            .await
            .expect("deprovision");
        assert!(matches!(
            registry
                .body_backend(teams[0], JetStreamBackend::NAME)
                .await,
            Err(BusError::NotProvisioned { .. })
        ));
        JetStreamBackend::provision(&prov, teams[0])
            .await
            .expect("provision again");
        registry
            .body_backend(teams[0], JetStreamBackend::NAME)
            .await
            .expect("served again");
    }
    .with_subscriber(subscriber)
    .await;
    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    for team in &teams {
        let stream = rt.stream_name(*team, StreamKind::Bodies);
        let warnings = logs
            .lines()
            .filter(|l| l.contains("lowers the effective body limit") && l.contains(&stream))
            .count();
        assert_eq!(warnings, 1, "team {team}:\n{logs}");
    }
}

async fn forged_locators_are_refused(h: &Harness) {
    let (team, b) = new_team(h).await;
    let (other_team, other) = new_team(h).await;
    let e = envelope(team, "mine");
    let (loc, _) = confirmed(&b.publish(e.clone()).await);
    // Another message's id on a real locator.
    assert!(matches!(
        b.fetch(&loc, Uuid::new_v4()).await,
        Err(BusError::Forbidden { .. })
    ));
    // Another team's body stream.
    let theirs = envelope(other_team, "theirs");
    let (their_loc, _) = confirmed(&other.publish(theirs.clone()).await);
    assert!(matches!(
        b.fetch(&their_loc, theirs.message_id).await,
        Err(BusError::Forbidden { .. })
    ));
    // This team's inbox stream (the locator of a reference).
    let r = b.publish_reference("alice", Uuid::new_v4(), "{}").await;
    let (inbox_loc, _) = confirmed(&r);
    assert!(matches!(
        b.fetch(&inbox_loc, e.message_id).await,
        Err(BusError::Forbidden { .. })
    ));
    // Malformed or another scheme.
    for bad in [
        "jetstream:nocolon",
        "jetstream:S:notanumber",
        "jetstream:S:0",
        "postgres:x",
        "x",
    ] {
        assert!(
            matches!(
                b.fetch(&Locator(bad.into()), e.message_id).await,
                Err(BusError::Invalid { .. })
            ),
            "{bad}"
        );
    }
    // Unknown sequence of the right stream.
    let unknown = Locator(format!("jetstream:{}:999999", b.stream()));
    assert_eq!(
        b.fetch(&unknown, e.message_id).await.expect("unknown"),
        None
    );
    // A body on this team's subject whose team header is another team's.
    let (_, js) = raw_h(h, &nats::runtime_user()).await;
    let forged_msg = Uuid::new_v4();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Crewbus-Message-Id", forged_msg.to_string().as_str());
    headers.insert("Crewbus-Team", Uuid::new_v4().to_string().as_str());
    headers.insert("Crewbus-Publish-Key", Uuid::new_v4().to_string().as_str());
    let subject = format!(
        "crewbus.{}.b.{}.{}",
        team.simple(),
        Uuid::new_v4().simple(),
        forged_msg.simple()
    );
    let ack = js
        .publish_with_headers(subject, headers, Bytes::from_static(b"forged"))
        .await
        .expect("raw publish")
        .await
        .expect("raw ack");
    let forged = Locator(format!("jetstream:{}:{}", b.stream(), ack.sequence));
    assert!(matches!(
        b.fetch(&forged, forged_msg).await,
        Err(BusError::Forbidden { .. })
    ));
}

async fn envelope_of_another_team_is_forbidden(h: &Harness) {
    let (_, b) = new_team(h).await;
    assert!(matches!(
        b.publish(envelope(Uuid::new_v4(), "x")).await,
        Published::Fatal(BusError::Forbidden { .. })
    ));
    assert!(matches!(
        b.reconcile(&envelope(Uuid::new_v4(), "x")).await,
        Err(BusError::Forbidden { .. })
    ));
}

async fn republish_after_the_duplicate_window_returns_the_same_locator(h: &Harness) {
    let (team, b) = new_team(h).await;
    let e = envelope(team, "once");
    let (loc, dup) = confirmed(&b.publish(e.clone()).await);
    assert!(!dup);
    let (again, dup) = confirmed(&b.publish(e.clone()).await);
    assert!(dup, "within the window: a PubAck marked duplicate");
    assert_eq!(again, loc);
    // The window (2 s) is the behaviour under test: let it pass for real.
    tokio::time::sleep(h.rt().duplicate_window + Duration::from_millis(500)).await;
    let (late, dup) = confirmed(&b.publish(e.clone()).await);
    assert!(dup, "after the window: found stored by its publish key");
    assert_eq!(late, loc);
    let conflicting = Envelope {
        publish_key: Uuid::new_v4(),
        ..e.clone()
    };
    assert!(matches!(
        b.publish(conflicting).await,
        Published::Fatal(BusError::Conflict { .. })
    ));
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    assert_eq!(stream_info(&js, b.stream()).await.state.messages, 1);
}

async fn burst_filling_the_stream_keeps_every_acknowledged_body(h: &Harness) {
    let mut prov = h.prov();
    prov.body_quotas = Quotas {
        max_messages: 25,
        max_bytes: 2 * MIB,
    };
    let (team, b) = team_with(&prov, &h.rt()).await;
    let envelopes: Vec<Envelope> = (0..60)
        .map(|i| envelope(team, format!("burst {i}")))
        .collect();
    let outcomes =
        futures_util::future::join_all(envelopes.iter().map(|e| b.publish(e.clone()))).await;
    let mut stored = 0;
    for (e, outcome) in envelopes.iter().zip(&outcomes) {
        match outcome {
            Published::Confirmed { locator, .. } => {
                stored += 1;
                assert_eq!(
                    b.fetch(locator, e.message_id)
                        .await
                        .expect("fetch")
                        .as_deref(),
                    Some(e.body.as_str()),
                    "an acknowledged body is fetchable"
                );
            }
            Published::Retryable(BusError::QuotaExceeded { .. }) => {}
            other => panic!("expected Confirmed or Retryable(QuotaExceeded), got {other:?}"),
        }
    }
    assert_eq!(stored, 25);
}

async fn retain_removes_bodies_stored_before_the_instant(h: &Harness) {
    let (team, b) = new_team(h).await;
    let old: Vec<Envelope> = (0..5).map(|i| envelope(team, format!("old {i}"))).collect();
    let mut old_locs = Vec::new();
    for e in &old {
        old_locs.push(confirmed(&b.publish(e.clone()).await).0);
    }
    let cut = chrono::Utc::now();
    eventually(
        "the clock moves past the cut",
        Duration::from_secs(1),
        || async { chrono::Utc::now() > cut },
    )
    .await;
    let new: Vec<Envelope> = (0..4).map(|i| envelope(team, format!("new {i}"))).collect();
    let mut new_locs = Vec::new();
    for e in &new {
        new_locs.push(confirmed(&b.publish(e.clone()).await).0);
    }
    assert_eq!(b.retain(cut).await.expect("retain"), 5);
    for (e, l) in old.iter().zip(&old_locs) {
        assert_eq!(b.fetch(l, e.message_id).await.expect("fetch"), None);
    }
    for (e, l) in new.iter().zip(&new_locs) {
        assert!(b.fetch(l, e.message_id).await.expect("fetch").is_some());
    }
    assert_eq!(b.retain(cut).await.expect("second retain"), 0);
}

async fn reconcile_publishes_the_real_body_when_not_held(h: &Harness) {
    let (team, b) = new_team(h).await;
    let e = envelope(team, "reconciled");
    let loc = b.reconcile(&e).await.expect("reconcile").expect("held now");
    assert_eq!(
        b.fetch(&loc, e.message_id).await.expect("fetch").as_deref(),
        Some("reconciled")
    );
    assert_eq!(b.reconcile(&e).await.expect("again"), Some(loc.clone()));
    let (again, dup) = confirmed(&b.publish(e.clone()).await);
    assert!(dup);
    assert_eq!(again, loc);
    let other_key = Envelope {
        publish_key: Uuid::new_v4(),
        ..e
    };
    assert!(matches!(
        b.reconcile(&other_key).await,
        Err(BusError::Conflict { .. })
    ));
}

async fn broker_restart_mid_burst_leaves_exactly_one_copy_after_reconcile(_h: &Harness) {
    let mut server = NatsServer::start();
    let url = server.url();
    let (team, b) = team_with(&prov_for(&url), &rt_for(&url)).await;
    let envelopes: Arc<Vec<Envelope>> = Arc::new(
        (0..150)
            .map(|i| envelope(team, format!("restart {i}")))
            .collect(),
    );
    let confirmed_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let publisher = {
        let (b, envelopes, count) = (b.clone(), envelopes.clone(), confirmed_count.clone());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for e in envelopes.iter() {
                let p = b.publish(e.clone()).await;
                if p.is_confirmed() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                outcomes.push(p);
            }
            outcomes
        })
    };
    eventually(
        "a third of the burst is acknowledged",
        Duration::from_secs(20),
        || async { confirmed_count.load(Ordering::SeqCst) >= 50 },
    )
    .await;
    // Kept until the end of the test (killed on drop).
    let _server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .expect("restart");
    let outcomes = publisher.await.expect("publisher");
    let mut locators = Vec::new();
    for (e, outcome) in envelopes.iter().zip(outcomes) {
        let loc = match outcome {
            Published::Confirmed { locator, .. } => locator,
            Published::Fatal(err) => panic!("fatal during restart: {err:?}"),
            Published::Retryable(_) | Published::Uncertain(_) => {
                settle(&b, e, Duration::from_secs(30)).await
            }
        };
        locators.push(loc);
    }
    for (e, loc) in envelopes.iter().zip(&locators) {
        assert_eq!(
            b.fetch(loc, e.message_id).await.expect("fetch").as_deref(),
            Some(e.body.as_str())
        );
        assert_eq!(b.reconcile(e).await.expect("reconcile"), Some(loc.clone()));
    }
    let (_, js) = raw(&url, &nats::provisioning_user()).await;
    assert_eq!(
        stream_info(&js, b.stream()).await.state.messages,
        envelopes.len() as u64,
        "exactly one copy of every body"
    );
}

async fn unreachable_broker_fails_within_the_request_timeout(_h: &Harness) {
    let mut config = base_config(&format!("nats://127.0.0.1:{}", nats::free_port()));
    config.request_timeout = Duration::from_secs(1);
    let slack = Duration::from_millis(1500);
    let started = Instant::now();
    let err = JetStreamBackend::connect(&config, Uuid::new_v4())
        .await
        .expect_err("nothing listens");
    assert!(
        matches!(err, BusError::Unavailable { .. } | BusError::Timeout { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < config.request_timeout + slack);
    let started = Instant::now();
    assert!(!JetStreamBackend::reachable(&config).await);
    assert!(started.elapsed() < config.request_timeout + slack);

    // A connected adapter whose broker goes away: each call fails within the timeout.
    let mut server = NatsServer::start();
    let mut rt = rt_for(&server.url());
    rt.request_timeout = Duration::from_secs(1);
    let (team, b) = team_with(&prov_for(&server.url()), &rt).await;
    let e = envelope(team, "before");
    let (loc, _) = confirmed(&b.publish(e.clone()).await);
    server.kill();
    let started = Instant::now();
    let fetched = b.fetch(&loc, e.message_id).await;
    assert!(
        matches!(
            fetched,
            Err(BusError::Unavailable { .. } | BusError::Timeout { .. })
        ),
        "{fetched:?}"
    );
    assert!(started.elapsed() < rt.request_timeout + slack);
    let started = Instant::now();
    let p = b.publish(envelope(team, "after")).await;
    assert!(
        matches!(p, Published::Retryable(_) | Published::Uncertain(_)),
        "{p:?}"
    );
    assert!(started.elapsed() < rt.request_timeout + slack);
    let started = Instant::now();
    assert!(
        b.inbox_status("alice").await.is_err(),
        "broker down is an error, not an empty inbox"
    );
    assert!(started.elapsed() < rt.request_timeout + slack);
}

// ---------------------------------------------------------------------------------------------
// Inbox
// ---------------------------------------------------------------------------------------------

async fn references_are_deduplicated_redelivered_and_double_acked(h: &Harness) {
    let (_, b) = new_team(h).await;
    let event = Uuid::new_v4();
    let (loc, dup) = confirmed(&b.publish_reference("alice", event, r#"{"m":1}"#).await);
    assert!(!dup);
    let (again, dup) = confirmed(&b.publish_reference("alice", event, r#"{"m":1}"#).await);
    assert!(dup);
    assert_eq!(again, loc);
    let first = b.fetch_references("alice", 10).await.expect("fetch");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].event_id, event);
    assert_eq!(first[0].deliveries, 1);
    assert_eq!(first[0].payload, r#"{"m":1}"#);
    // Both server lines issue the 9-token form `$JS.ACK.<stream>.<consumer>.…` (BUS.md §3).
    assert!(
        first[0]
            .ack_subject
            .starts_with(&format!("$JS.ACK.{}.alice.", b.inbox_stream())),
        "{}",
        first[0].ack_subject
    );
    let status = b.inbox_status("alice").await.expect("status");
    assert!(status.present);
    assert_eq!(status.awaiting_ack, 1);
    // Not acked: handed out again after the ack wait (1 s, the behaviour under test).
    let redelivered = poll_until("redelivery after ack wait", Duration::from_secs(10), || {
        let b = b.clone();
        async move {
            let refs = b.fetch_references("alice", 10).await.expect("fetch");
            (!refs.is_empty()).then_some(refs)
        }
    })
    .await;
    assert_eq!(redelivered[0].event_id, event);
    assert!(redelivered[0].deliveries >= 2);
    b.ack_reference(&redelivered[0].ack_subject)
        .await
        .expect("ack");
    b.ack_reference(&redelivered[0].ack_subject)
        .await
        .expect("a repeated ack is harmless");
    let status = b.inbox_status("alice").await.expect("status");
    assert_eq!((status.pending, status.awaiting_ack), (0, 0));
    assert!(
        b.fetch_references("alice", 10)
            .await
            .expect("fetch")
            .is_empty()
    );
}

async fn foreign_ack_subjects_and_bad_recipient_keys_are_refused(h: &Harness) {
    let (_, b) = new_team(h).await;
    let (_, other) = new_team(h).await;
    other
        .publish_reference("bob", Uuid::new_v4(), "{}")
        .await
        .is_confirmed()
        .then_some(())
        .expect("reference stored");
    let theirs = other.fetch_references("bob", 1).await.expect("fetch");
    assert!(matches!(
        b.ack_reference(&theirs[0].ack_subject).await,
        Err(BusError::Forbidden { .. })
    ));
    for foreign in [
        format!("$JS.ACK.{}.bob.1.1.1.1.0", b.stream()),
        format!("$JS.API.STREAM.DELETE.{}", b.inbox_stream()),
        format!("crewbus.{}.i.bob", Uuid::new_v4().simple()),
        String::new(),
    ] {
        assert!(
            matches!(
                b.ack_reference(&foreign).await,
                Err(BusError::Forbidden { .. })
            ),
            "{foreign}"
        );
    }
    for bad in ["a.b", "a*", ">", "a b", ""] {
        assert!(matches!(
            b.publish_reference(bad, Uuid::new_v4(), "{}").await,
            Published::Fatal(BusError::Invalid { .. })
        ));
        assert!(matches!(
            b.fetch_references(bad, 1).await,
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            b.inbox_status(bad).await,
            Err(BusError::Invalid { .. })
        ));
    }
    // Still there for its owner.
    other
        .ack_reference(&theirs[0].ack_subject)
        .await
        .expect("owner acks");
}

async fn deleted_consumer_reads_not_present_and_the_next_fetch_recreates_it(h: &Harness) {
    let (_, b) = new_team(h).await;
    let status = b.inbox_status("carol").await.expect("status");
    assert!(!status.present, "no consumer before the first fetch");
    let first = Uuid::new_v4();
    confirmed(&b.publish_reference("carol", first, "{}").await);
    assert_eq!(
        b.fetch_references("carol", 10).await.expect("fetch").len(),
        1
    );
    assert!(b.inbox_status("carol").await.expect("status").present);
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    js.delete_consumer_from_stream("carol", b.inbox_stream())
        .await
        .expect("delete consumer");
    let status = b.inbox_status("carol").await.expect("status");
    assert!(
        !status.present,
        "a deleted consumer is a fact, not an empty inbox"
    );
    let second = Uuid::new_v4();
    confirmed(&b.publish_reference("carol", second, "{}").await);
    let refs = b
        .fetch_references("carol", 10)
        .await
        .expect("fetch recreates");
    let ids: Vec<Uuid> = refs.iter().map(|r| r.event_id).collect();
    assert_eq!(
        ids,
        vec![first, second],
        "the unacked reference is handed out again"
    );
    assert!(b.inbox_status("carol").await.expect("status").present);
}

async fn inbox_overflow_drops_the_oldest_references(h: &Harness) {
    let mut prov = h.prov();
    prov.inbox_quotas = Quotas {
        max_messages: 5,
        max_bytes: MIB,
    };
    let (_, b) = team_with(&prov, &h.rt()).await;
    let events: Vec<Uuid> = (0..8).map(|_| Uuid::new_v4()).collect();
    for e in &events {
        confirmed(&b.publish_reference("dave", *e, "{}").await);
    }
    let refs = b.fetch_references("dave", 20).await.expect("fetch");
    let ids: Vec<Uuid> = refs.iter().map(|r| r.event_id).collect();
    assert_eq!(ids, events[3..].to_vec(), "the three oldest were discarded");
}

async fn missing_inbox_stream_is_not_provisioned_and_status_not_present(h: &Harness) {
    let team = Uuid::new_v4();
    JetStreamBackend::provision(&h.prov(), team)
        .await
        .expect("bodies only");
    let b = JetStreamBackend::connect(&h.rt(), team)
        .await
        .expect("connect");
    assert!(matches!(
        b.fetch_references("erin", 5).await,
        Err(BusError::NotProvisioned { .. })
    ));
    assert!(!b.inbox_status("erin").await.expect("status").present);
    assert!(matches!(
        b.publish_reference("erin", Uuid::new_v4(), "{}").await,
        Published::Retryable(_)
    ));
}

// ---------------------------------------------------------------------------------------------
// Credentials, quotas, storage
// ---------------------------------------------------------------------------------------------

async fn runtime_credential_cannot_change_streams_but_runs_the_bus(h: &Harness) {
    let (team, b) = new_team(h).await;
    let (_, prov_js) = raw(&h.url, &nats::provisioning_user()).await;
    let before = stream_info(&prov_js, b.stream()).await.config;
    let (_, rt_js) = raw(&h.url, &nats::runtime_user()).await;
    // Permission violations are answered asynchronously: the requests fail (time out), and the
    // proof is the streams being unchanged afterwards.
    let mut changed = before.clone();
    changed.max_messages = 1;
    assert!(rt_js.update_stream(changed).await.is_err());
    assert!(rt_js.delete_stream(b.stream()).await.is_err());
    let new_name = format!("RT_MADE_{}", team.simple());
    assert!(
        rt_js
            .create_stream(jetstream::stream::Config {
                name: new_name.clone(),
                subjects: vec![format!("crewbus.{}.x", team.simple())],
                ..Default::default()
            })
            .await
            .is_err()
    );
    assert!(
        JetStreamBackend::provision(&h.rt(), Uuid::new_v4())
            .await
            .is_err()
    );
    assert_eq!(stream_info(&prov_js, b.stream()).await.config, before);
    assert!(
        prov_js.get_stream(&new_name).await.is_err(),
        "no stream was created"
    );
    // …but publishes, fetches, acks and retains.
    let e = envelope(team, "runtime");
    let (loc, _) = confirmed(&b.publish(e.clone()).await);
    assert!(b.fetch(&loc, e.message_id).await.expect("fetch").is_some());
    confirmed(&b.publish_reference("frank", Uuid::new_v4(), "{}").await);
    let refs = b.fetch_references("frank", 5).await.expect("fetch refs");
    b.ack_reference(&refs[0].ack_subject).await.expect("ack");
    let cut = chrono::Utc::now();
    eventually("clock past cut", Duration::from_secs(1), || async {
        chrono::Utc::now() > cut
    })
    .await;
    assert_eq!(b.retain(cut).await.expect("retain"), 1);
}

async fn quota_decrease_below_contents_is_refused_and_loses_nothing(h: &Harness) {
    let (team, b) = new_team(h).await;
    let bodies: Vec<Envelope> = (0..30).map(|i| envelope(team, format!("q {i}"))).collect();
    for e in &bodies {
        confirmed(&b.publish(e.clone()).await);
    }
    let mut lower = h.prov();
    lower.body_quotas.max_messages = 20;
    assert!(matches!(
        JetStreamBackend::check_update(&lower, team, StreamKind::Bodies).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        JetStreamBackend::update_quotas(&lower, team, StreamKind::Bodies).await,
        Err(BusError::Conflict { .. })
    ));
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    let info = stream_info(&js, b.stream()).await;
    assert_eq!(info.state.messages, 30);
    assert_eq!(info.config.max_messages, 10_000, "limits unchanged");
    assert_eq!(
        info.config.subjects,
        vec![format!("crewbus.{}.b.>", team.simple())]
    );
    // A decrease that fits goes through and keeps accepting bodies.
    let mut fits = h.prov();
    fits.body_quotas.max_messages = 40;
    let change = JetStreamBackend::check_update(&fits, team, StreamKind::Bodies)
        .await
        .expect("check");
    assert!(change.is_decrease());
    let done = JetStreamBackend::apply_update(&fits, team, StreamKind::Bodies, &change)
        .await
        .expect("apply");
    assert_eq!(done.limits.max_messages, 40);
    assert_eq!(done.messages, 30);
    confirmed(&b.publish(envelope(team, "after")).await);
}

async fn quota_decrease_racing_a_publisher_loses_no_acknowledged_body(h: &Harness) {
    let (team, b) = new_team(h).await;
    let mut stored: Vec<(Envelope, Locator)> = Vec::new();
    for i in 0..30 {
        let e = envelope(team, format!("pre {i}"));
        let l = confirmed(&b.publish(e.clone()).await).0;
        stored.push((e, l));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let racer = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut refused = 0u32;
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let e = envelope(team, format!("race {i}"));
                i += 1;
                match b.publish(e.clone()).await {
                    Published::Confirmed { locator, .. } => acked.push((e, locator)),
                    Published::Retryable(_) => refused += 1,
                    other => panic!("a racing publisher got {other:?}"),
                }
            }
            (acked, refused)
        })
    };
    let mut lower = h.prov();
    lower.body_quotas.max_messages = 45;
    // Let the racer get going before the decrease.
    eventually("racer running", Duration::from_secs(5), || async {
        stream_info(&raw_h(h, &nats::provisioning_user()).await.1, b.stream())
            .await
            .state
            .messages
            > 32
    })
    .await;
    let outcome = JetStreamBackend::update_quotas(&lower, team, StreamKind::Bodies).await;
    stop.store(true, Ordering::SeqCst);
    let (acked, _refused) = racer.await.expect("racer");
    match &outcome {
        Ok(p) => assert_eq!(p.limits.max_messages, 45),
        Err(e) => assert!(matches!(e, BusError::Conflict { .. }), "{e:?}"),
    }
    stored.extend(acked);
    for (e, l) in &stored {
        assert_eq!(
            b.fetch(l, e.message_id).await.expect("fetch").as_deref(),
            Some(e.body.as_str()),
            "acknowledged body lost ({})",
            h.version
        );
    }
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    assert_eq!(
        stream_info(&js, b.stream()).await.state.messages,
        stored.len() as u64
    );
}

async fn paused_intake_answers_publishers_with_a_retryable_error(h: &Harness) {
    let (team, b) = new_team(h).await;
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    let mut config = stream_info(&js, b.stream()).await.config;
    let original = config.clone();
    config.subjects = vec![format!("crewbus.{}.paused.bodies", team.simple())];
    js.update_stream(config).await.expect("pause");
    let p = b.publish(envelope(team, "paused")).await;
    assert!(
        matches!(p, Published::Retryable(BusError::Unavailable { .. })),
        "{p:?}"
    );
    js.update_stream(original).await.expect("restore");
    confirmed(&b.publish(envelope(team, "resumed")).await);
}

async fn lowering_a_limit_evicts_on_2_9_and_not_on_the_current_line(h: &Harness) {
    // The broker behaviour that makes the pause necessary, pinned per server line.
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    let name = format!("EVICT_{}", Uuid::new_v4().simple());
    let subject = format!("evict.{}", Uuid::new_v4().simple());
    let config = jetstream::stream::Config {
        name: name.clone(),
        subjects: vec![format!("{subject}.>")],
        discard: jetstream::stream::DiscardPolicy::New,
        max_messages: 100,
        ..Default::default()
    };
    js.create_stream(config.clone()).await.expect("create");
    for i in 0..60 {
        js.publish(format!("{subject}.{i}"), Bytes::from_static(b"x"))
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let lowered = jetstream::stream::Config {
        max_messages: 14,
        ..config
    };
    let updated = js.update_stream(lowered).await;
    let messages = stream_info(&js, &name).await.state.messages;
    if h.is_2_9() {
        assert!(updated.is_ok());
        assert_eq!(
            messages, 14,
            "2.9.x evicts the oldest messages on a lowered max_msgs"
        );
    } else {
        assert_eq!(
            messages, 60,
            "the current line keeps the contents ({updated:?})"
        );
    }
    js.delete_stream(&name).await.expect("cleanup");
}

async fn account_budget_refuses_a_stream_that_does_not_fit(_h: &Harness) {
    let server = NatsServer::start_with(&NatsOptions {
        account_max_file: Some(20 * MIB),
        ..NatsOptions::default()
    });
    let mut prov = prov_for(&server.url());
    prov.body_quotas.max_bytes = 8 * MIB;
    prov.inbox_quotas.max_bytes = 2 * MIB;
    let account = JetStreamBackend::storage_account(&prov)
        .await
        .expect("account");
    assert_eq!(account.budget, Some(20 * MIB));
    assert_eq!(account.reserved, 0);
    let t1 = Uuid::new_v4();
    JetStreamBackend::provision(&prov, t1)
        .await
        .expect("8 MiB fits");
    JetStreamBackend::provision_inbox(&prov, t1)
        .await
        .expect("2 MiB fits");
    let t2 = Uuid::new_v4();
    JetStreamBackend::provision(&prov, t2)
        .await
        .expect("8 more fit");
    let account = JetStreamBackend::storage_account(&prov)
        .await
        .expect("account");
    assert_eq!(account.reserved, 18 * MIB, "Σ max_bytes × replicas");
    let t3 = Uuid::new_v4();
    let refused = JetStreamBackend::provision(&prov, t3).await;
    match refused {
        Err(BusError::InsufficientStorage {
            extra,
            per_replica,
            replicas,
            reserved,
            budget,
            ..
        }) => {
            assert_eq!(extra, 8 * MIB);
            assert_eq!((per_replica, replicas), (8 * MIB, 1));
            assert_eq!(reserved, 18 * MIB);
            assert_eq!(budget, Some(20 * MIB));
        }
        other => panic!("expected InsufficientStorage, got {other:?}"),
    }
    assert!(matches!(
        JetStreamBackend::connect(&prov, t3).await,
        Err(BusError::NotProvisioned { .. })
    ));
    // What the broker itself answers to a reservation beyond the budget: error code 10047,
    // the code the adapter maps to InsufficientStorage.
    let (_, js) = raw(&server.url(), &nats::provisioning_user()).await;
    let refused = js
        .create_stream(jetstream::stream::Config {
            name: format!("TOO_BIG_{}", t3.simple()),
            subjects: vec![format!("too-big.{}", t3.simple())],
            max_bytes: 64 * MIB as i64,
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect_err("beyond the account budget");
    match refused.kind() {
        jetstream::context::CreateStreamErrorKind::JetStream(e) => {
            assert_eq!(e.error_code().0, 10047, "{e}")
        }
        other => panic!("expected a JetStream API error, got {other:?}"),
    }
    // A raise the account cannot reserve is refused by check_update and update_quotas alike.
    let mut raise = prov.clone();
    raise.body_quotas.max_bytes = 16 * MIB;
    assert!(matches!(
        JetStreamBackend::check_update(&raise, t1, StreamKind::Bodies).await,
        Err(BusError::InsufficientStorage { .. })
    ));
    assert!(matches!(
        JetStreamBackend::update_quotas(&raise, t1, StreamKind::Bodies).await,
        Err(BusError::InsufficientStorage { .. })
    ));
    // A raise that fits goes through.
    let mut small_raise = prov.clone();
    small_raise.body_quotas.max_bytes = 10 * MIB;
    let p = JetStreamBackend::update_quotas(&small_raise, t1, StreamKind::Bodies)
        .await
        .expect("raise by 2 MiB");
    assert_eq!(p.limits.max_bytes, 10 * MIB);
    JetStreamBackend::deprovision(&prov, t1)
        .await
        .expect("deprovision");
    JetStreamBackend::deprovision(&prov, t1)
        .await
        .expect("deprovision twice: not found is success");
    let account = JetStreamBackend::storage_account(&prov)
        .await
        .expect("account");
    assert_eq!(account.reserved, 8 * MIB);
}

async fn r3_cluster_keeps_accepting_and_serving_with_one_node_stopped(_h: &Harness) {
    let mut cluster = tokio::task::spawn_blocking(NatsCluster::start)
        .await
        .expect("cluster");
    let urls = cluster.urls();
    let mut prov = prov_for(&urls[0]);
    prov.servers = urls.clone();
    prov.replicas = 3;
    prov.request_timeout = Duration::from_secs(5);
    let mut rt = rt_for(&urls[0]);
    rt.servers = urls.clone();
    rt.replicas = 3;
    let team = Uuid::new_v4();
    // The meta leader is elected shortly after the nodes are ready.
    eventually("R3 provision", Duration::from_secs(30), || {
        let prov = prov.clone();
        async move {
            JetStreamBackend::provision(&prov, team).await.is_ok()
                && JetStreamBackend::provision_inbox(&prov, team).await.is_ok()
        }
    })
    .await;
    let b = JetStreamBackend::connect(&rt, team).await.expect("connect");
    let mut stored = Vec::new();
    for i in 0..20 {
        let e = envelope(team, format!("r3 {i}"));
        let l = settle(&b, &e, Duration::from_secs(20)).await;
        assert_eq!(
            b.fetch(&l, e.message_id)
                .await
                .expect("read after ack")
                .as_deref(),
            Some(e.body.as_str())
        );
        stored.push((e, l));
    }
    cluster.node(0).kill();
    for i in 0..20 {
        let e = envelope(team, format!("r3 after {i}"));
        let l = settle(&b, &e, Duration::from_secs(30)).await;
        stored.push((e, l));
    }
    for (e, l) in &stored {
        let got = poll_until(
            "fetch on the surviving nodes",
            Duration::from_secs(20),
            || {
                let b = b.clone();
                async move {
                    match b.fetch(l, e.message_id).await {
                        Ok(body) => Some(body),
                        Err(err) => {
                            assert!(err.is_retryable(), "{err:?}");
                            None
                        }
                    }
                }
            },
        )
        .await;
        assert_eq!(got.as_deref(), Some(e.body.as_str()));
    }
}

// ---------------------------------------------------------------------------------------------
// Registry and admin
// ---------------------------------------------------------------------------------------------

async fn registry_shares_one_connection_and_caches_teams(h: &Harness) {
    let registry = JetStreamRegistry::new(h.rt()).expect("registry");
    assert_eq!(
        registry.connections_opened(),
        0,
        "nothing contacted before the first lookup"
    );
    let mut teams = Vec::new();
    for _ in 0..12 {
        teams.push(new_team(h).await.0);
    }
    for team in &teams {
        let bodies = registry
            .body_backend(*team, JetStreamBackend::NAME)
            .await
            .expect("body backend");
        assert_eq!(bodies.name(), JetStreamBackend::NAME);
        let inbox = registry
            .inbox(*team, JetStreamBackend::NAME)
            .await
            .expect("inbox");
        confirmed(&inbox.publish_reference("gina", Uuid::new_v4(), "{}").await);
        let e = envelope(*team, "via registry");
        let (loc, _) = confirmed(&bodies.publish(e.clone()).await);
        assert!(
            bodies
                .fetch(&loc, e.message_id)
                .await
                .expect("fetch")
                .is_some()
        );
    }
    assert_eq!(
        registry.connections_opened(),
        1,
        "one connection for every team"
    );
    assert_eq!(registry.cached_teams(), teams.len());
    assert!(matches!(
        registry.body_backend(teams[0], "postgres").await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        registry.inbox(Uuid::new_v4(), JetStreamBackend::NAME).await,
        Err(BusError::NotProvisioned { .. })
    ));
}

async fn registry_evicts_a_team_whose_streams_vanished(h: &Harness) {
    let registry = JetStreamRegistry::with_revalidation(h.rt(), Duration::ZERO).expect("registry");
    let (team, _) = new_team(h).await;
    registry
        .body_backend(team, JetStreamBackend::NAME)
        .await
        .expect("served");
    assert_eq!(registry.cached_teams(), 1);
    JetStreamBackend::deprovision(&h.prov(), team)
        .await
        .expect("deprovision");
    assert!(matches!(
        registry.body_backend(team, JetStreamBackend::NAME).await,
        Err(BusError::NotProvisioned { .. })
    ));
    assert_eq!(registry.cached_teams(), 0, "evicted, not served stale");
}

async fn registry_serves_bodies_while_the_inbox_stream_is_missing(h: &Harness) {
    let registry = JetStreamRegistry::with_revalidation(h.rt(), Duration::ZERO).expect("registry");
    let (team, b) = new_team(h).await;
    let bodies = registry
        .body_backend(team, JetStreamBackend::NAME)
        .await
        .expect("served");
    let e = envelope(team, "kept");
    let (loc, _) = confirmed(&bodies.publish(e.clone()).await);
    let inbox = registry
        .inbox(team, JetStreamBackend::NAME)
        .await
        .expect("inbox");
    confirmed(&inbox.publish_reference("hana", e.message_id, "{}").await);
    assert_eq!(
        inbox.fetch_references("hana", 5).await.expect("refs").len(),
        1
    );
    let (_, js) = raw_h(h, &nats::provisioning_user()).await;
    assert!(
        js.delete_stream(b.inbox_stream())
            .await
            .expect("delete")
            .success
    );
    // The inbox is reported missing (naming the inbox stream); the bodies stay readable.
    match registry.inbox(team, JetStreamBackend::NAME).await {
        Err(BusError::NotProvisioned { what, .. }) => assert!(what.contains(b.inbox_stream())),
        Err(other) => panic!("expected NotProvisioned, got {other:?}"),
        Ok(_) => panic!("a missing inbox stream was served"),
    }
    let bodies = registry
        .body_backend(team, JetStreamBackend::NAME)
        .await
        .expect("bodies still served");
    assert_eq!(
        bodies
            .fetch(&loc, e.message_id)
            .await
            .expect("fetch")
            .as_deref(),
        Some("kept")
    );
    assert_eq!(registry.cached_teams(), 1);
    // Provisioned again: the inbox is served again, with a fresh consumer.
    JetStreamBackend::provision_inbox(&h.prov(), team)
        .await
        .expect("provision inbox");
    let inbox = registry
        .inbox(team, JetStreamBackend::NAME)
        .await
        .expect("inbox again");
    confirmed(&inbox.publish_reference("hana", e.message_id, "{}").await);
    assert_eq!(
        inbox.fetch_references("hana", 5).await.expect("refs").len(),
        1
    );
}

async fn admin_port_runs_the_associated_functions(h: &Harness) {
    let admin: Arc<dyn StreamAdmin> = Arc::new(JetStreamAdmin::new(h.prov()));
    assert!(admin.reachable().await);
    let team = Uuid::new_v4();
    let bodies = admin.provision(team).await.expect("provision");
    let inbox = admin.provision_inbox(team).await.expect("provision inbox");
    assert!(bodies.created && inbox.created);
    assert_eq!(bodies.kind, StreamKind::Bodies);
    assert_eq!(inbox.kind, StreamKind::Inbox);
    let change = admin
        .check_update(team, StreamKind::Inbox)
        .await
        .expect("check");
    assert!(change.is_noop());
    let same = admin
        .apply_update(team, StreamKind::Inbox, &change)
        .await
        .expect("apply no-op");
    assert_eq!(same.limits, inbox.limits);
    admin.storage_account().await.expect("account");
    admin.deprovision(team).await.expect("deprovision");
    assert!(matches!(
        admin.check_update(team, StreamKind::Bodies).await,
        Err(BusError::NotProvisioned { .. })
    ));
    let unreachable = JetStreamAdmin::new(base_config(&format!(
        "nats://127.0.0.1:{}",
        nats::free_port()
    )));
    assert!(!unreachable.reachable().await);
}

async fn configured_body_limit_below_the_server_is_the_effective_limit(h: &Harness) {
    let mut rt = h.rt();
    rt.body_limit = 1000;
    let team = Uuid::new_v4();
    JetStreamBackend::provision(&h.prov(), team)
        .await
        .expect("provision");
    let b = JetStreamBackend::connect(&rt, team).await.expect("connect");
    assert_eq!(b.body_limit(), 1000);
    confirmed(&b.publish(envelope(team, "z".repeat(1000))).await);
    assert!(matches!(
        b.publish(envelope(team, "z".repeat(1001))).await,
        Published::Fatal(BusError::TooLarge {
            size: 1001,
            limit: 1000
        })
    ));
}

// ---------------------------------------------------------------------------------------------
// The shared conformance suite
// ---------------------------------------------------------------------------------------------

/// Hands out fresh teams on the suite's broker, through the registry (one shared connection),
/// configured with short windows; declares exactly those limits as capabilities.
struct JetStreamFactory {
    prov: Config,
    registry: JetStreamRegistry,
    admin: jetstream::Context,
    capabilities: Capabilities,
}

/// Small quotas a test can fill: 6 bodies / 3 MiB (the body floor is 2 MiB), 16 references.
const SUITE_BODY_QUOTA: Quotas = Quotas {
    max_messages: 6,
    max_bytes: 3 * MIB,
};
const SUITE_INBOX_QUOTA: Quotas = Quotas {
    max_messages: 16,
    max_bytes: MIB,
};
const SUITE_MAX_DELIVER: u32 = 3;
/// Added to every `advance` on the real-time server (see `JetStreamFixture::advance`).
const ADVANCE_MARGIN: Duration = Duration::from_millis(250);

impl JetStreamFactory {
    async fn start(h: &Harness) -> JetStreamFactory {
        let mut prov = h.prov();
        prov.body_quotas = SUITE_BODY_QUOTA;
        prov.inbox_quotas = SUITE_INBOX_QUOTA;
        prov.max_deliver = SUITE_MAX_DELIVER;
        let mut rt = h.rt();
        rt.max_deliver = SUITE_MAX_DELIVER;
        let (client, admin) = raw_h(h, &nats::provisioning_user()).await;
        // The effective body limit the adapters will have (BUS.md §1).
        let max_payload = client.server_info().max_payload as u64;
        let body_limit = rt
            .body_limit
            .min(max_payload - crewbus_jetstream::HEADER_ALLOWANCE);
        let capabilities = Capabilities {
            backend_name: JetStreamBackend::NAME,
            body_limit_bytes: body_limit,
            body_quota: Some(SUITE_BODY_QUOTA),
            body_duplicate_window: Some(rt.duplicate_window),
            ack_wait: rt.ack_wait,
            max_deliver: Some(u64::from(SUITE_MAX_DELIVER)),
            inbox_overflow_limit: Some(SUITE_INBOX_QUOTA.max_messages),
            inbox_dedup_for_life: false,
            inbox_duplicate_window: Some(rt.duplicate_window),
            delete_consumer: true,
            instant_advance: false,
            settle_timeout: Duration::from_secs(15),
        };
        JetStreamFactory {
            prov,
            registry: JetStreamRegistry::new(rt).expect("registry"),
            admin,
            capabilities,
        }
    }
}

#[async_trait]
impl FixtureFactory for JetStreamFactory {
    fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    async fn fixture(&self) -> Result<Box<dyn TeamFixture>, FixtureError> {
        let (team, other_team) = (Uuid::new_v4(), Uuid::new_v4());
        for t in [team, other_team] {
            JetStreamBackend::provision(&self.prov, t).await?;
            JetStreamBackend::provision_inbox(&self.prov, t).await?;
        }
        let name = JetStreamBackend::NAME;
        Ok(Box::new(JetStreamFixture {
            capabilities: self.capabilities.clone(),
            team,
            other_team,
            bodies: self.registry.body_backend(team, name).await?,
            other_bodies: self.registry.body_backend(other_team, name).await?,
            inbox: self.registry.inbox(team, name).await?,
            other_inbox: self.registry.inbox(other_team, name).await?,
            admin: self.admin.clone(),
            inbox_stream: self.prov.stream_name(team, StreamKind::Inbox),
        }))
    }
}

struct JetStreamFixture {
    capabilities: Capabilities,
    team: Uuid,
    other_team: Uuid,
    bodies: Arc<dyn MessagingBackend>,
    other_bodies: Arc<dyn MessagingBackend>,
    inbox: Arc<dyn Inbox>,
    other_inbox: Arc<dyn Inbox>,
    admin: jetstream::Context,
    inbox_stream: String,
}

#[async_trait]
impl Namespace for JetStreamFixture {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    fn team(&self) -> Uuid {
        self.team
    }
    fn other_team(&self) -> Uuid {
        self.other_team
    }
    /// The server's timers are the behaviour under test: wait the real duration, plus a margin
    /// for the server's timer to fire on a loaded machine (its ack-wait check runs on its own
    /// schedule; without the margin a fetch right at `ack_wait` may still see the reference as
    /// in flight).
    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by + ADVANCE_MARGIN).await;
    }
    async fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now()
    }
}

impl BodyFixture for JetStreamFixture {
    fn bodies(&self) -> Arc<dyn MessagingBackend> {
        self.bodies.clone()
    }
    fn other_bodies(&self) -> Arc<dyn MessagingBackend> {
        self.other_bodies.clone()
    }
}

#[async_trait]
impl InboxFixture for JetStreamFixture {
    fn inbox(&self) -> Arc<dyn Inbox> {
        self.inbox.clone()
    }
    fn other_inbox(&self) -> Arc<dyn Inbox> {
        self.other_inbox.clone()
    }
    async fn delete_consumer(&self, recipient: &str) -> BusResult<()> {
        self.admin
            .delete_consumer_from_stream(recipient, &self.inbox_stream)
            .await
            .map(|_| ())
            .map_err(|e| BusError::unavailable_from("deleting a consumer", e))
    }
}

// ---------------------------------------------------------------------------------------------
// StreamAdmin behaviours: a server of its own per test (exact account arithmetic)
// ---------------------------------------------------------------------------------------------

struct JetStreamAdminFactory;

struct JetStreamAdminFixture {
    server: NatsServer,
}

#[async_trait]
impl AdminFixtureFactory for JetStreamAdminFactory {
    async fn fixture(&self) -> Result<Box<dyn AdminFixture>, FixtureError> {
        let server = tokio::task::spawn_blocking(|| {
            NatsServer::start_with(&NatsOptions {
                account_max_file: Some(stream_admin::ADMIN_BUDGET),
                ..NatsOptions::default()
            })
        })
        .await?;
        Ok(Box::new(JetStreamAdminFixture { server }))
    }
}

#[async_trait]
impl AdminFixture for JetStreamAdminFixture {
    fn admin(&self, bodies: Quotas, inbox: Quotas) -> Arc<dyn StreamAdmin> {
        let mut prov = prov_for(&self.server.url());
        prov.body_quotas = bodies;
        prov.inbox_quotas = inbox;
        Arc::new(JetStreamAdmin::new(prov))
    }
    async fn bodies(&self, team: Uuid) -> Arc<dyn MessagingBackend> {
        Arc::new(
            JetStreamBackend::connect(&rt_for(&self.server.url()), team)
                .await
                .expect("connect"),
        )
    }
    fn replicas(&self) -> u32 {
        1
    }
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

/// `tests![Needs => f, …]`: the JetStream-only tests, `jetstream::adapter::<f>`.
macro_rules! tests {
    ($($needs:ident => $f:ident),* $(,)?) => {
        vec![$(Behaviour {
            port: "adapter",
            name: stringify!($f),
            needs: &[Needs::$needs],
            run: |h: &Arc<Harness>| Box::pin($f(h)),
        }),*]
    };
}

fn main() {
    let args = Arguments::from_args();
    let harness = match nats::external_url() {
        Some(url) => Harness {
            url,
            version: "external".into(),
            fixture: false,
            _server: None,
        },
        None => {
            let server = NatsServer::start();
            Harness {
                url: server.url(),
                version: server.version(),
                fixture: true,
                _server: Some(server),
            }
        }
    };
    eprintln!(
        "jetstream suite: nats-server {} at {} ({})",
        harness.version,
        harness.url,
        if harness.fixture {
            "fixture"
        } else {
            "NATS_URL"
        }
    );
    let harness = Arc::new(harness);
    let list = tests![
        Any => connect_to_unprovisioned_team_is_not_provisioned,
        Any => provision_twice_keeps_limits,
        Any => body_at_the_limit_is_confirmed_and_one_more_byte_is_too_large,
        OwnServer => server_max_payload_lowers_the_effective_body_limit,
        OwnServer => the_lowered_body_limit_is_logged_once_per_team,
        Any => forged_locators_are_refused,
        Any => envelope_of_another_team_is_forbidden,
        Any => republish_after_the_duplicate_window_returns_the_same_locator,
        Any => burst_filling_the_stream_keeps_every_acknowledged_body,
        Any => retain_removes_bodies_stored_before_the_instant,
        Any => reconcile_publishes_the_real_body_when_not_held,
        OwnServer => broker_restart_mid_burst_leaves_exactly_one_copy_after_reconcile,
        OwnServer => unreachable_broker_fails_within_the_request_timeout,
        Any => references_are_deduplicated_redelivered_and_double_acked,
        Any => foreign_ack_subjects_and_bad_recipient_keys_are_refused,
        Any => deleted_consumer_reads_not_present_and_the_next_fetch_recreates_it,
        Any => inbox_overflow_drops_the_oldest_references,
        Any => missing_inbox_stream_is_not_provisioned_and_status_not_present,
        Credentials => runtime_credential_cannot_change_streams_but_runs_the_bus,
        Any => quota_decrease_below_contents_is_refused_and_loses_nothing,
        Any => quota_decrease_racing_a_publisher_loses_no_acknowledged_body,
        Any => paused_intake_answers_publishers_with_a_retryable_error,
        Credentials => lowering_a_limit_evicts_on_2_9_and_not_on_the_current_line,
        OwnServer => account_budget_refuses_a_stream_that_does_not_fit,
        Cluster => r3_cluster_keeps_accepting_and_serving_with_one_node_stopped,
        Any => registry_shares_one_connection_and_caches_teams,
        Any => registry_evicts_a_team_whose_streams_vanished,
        Any => registry_serves_bodies_while_the_inbox_stream_is_missing,
        Any => admin_port_runs_the_associated_functions,
        Any => configured_body_limit_below_the_server_is_the_effective_limit,
    ];
    // The adapter's own tests on a runtime of their own: some start servers synchronously.
    let own = Suite::new(
        Arc::new(Adapter(Arc::clone(&harness))),
        &crewbus_conformance::runtime(),
    );
    let mut trials = own.trials("jetstream", list);
    let suite_runtime = crewbus_conformance::runtime();
    let factory = Arc::new(suite_runtime.block_on(JetStreamFactory::start(&harness)));
    trials.extend(crewbus_conformance::trials(
        "jetstream",
        factory,
        &suite_runtime,
    ));
    let admin_trials =
        stream_admin::admin_trials("jetstream", Arc::new(JetStreamAdminFactory), &suite_runtime);
    // Each admin behaviour needs a server of its own: none under NATS_URL.
    trials.extend(
        admin_trials
            .into_iter()
            .map(|t| t.with_ignored_flag(!harness.fixture)),
    );
    let conclusion = libtest_mimic::run(&args, trials);
    drop(harness);
    conclusion.exit();
}
