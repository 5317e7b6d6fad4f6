//! JetStream-only tests of the body side: provisioning, the effective body limit, forged
//! locators, the duplicate window, a burst into a full stream, a broker restart, an unreachable
//! broker.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crewbus_conformance::nats::{self, NatsOptions, NatsServer};
use crewbus_conformance::trial::Behaviour;
use crewbus_conformance::wait::until;
use crewbus_domain::{BusError, Envelope, Locator, Published, Quotas, StreamKind, Uuid};
use crewbus_jetstream::{Config, JetStreamBackend, JetStreamBackends};
use crewbus_ports::{Backends, MessagingBackend};

use super::support::*;
use super::{Harness, Needs};

/// The tests of this file, in order.
pub(crate) const TESTS: &[Behaviour<Arc<Harness>, Needs>] = tests![
    Any => connect_to_unprovisioned_team_is_not_provisioned,
    Any => provision_twice_keeps_limits,
    Any => body_at_the_limit_is_confirmed_and_one_more_byte_is_too_large,
    OwnServer => server_max_payload_lowers_the_effective_body_limit,
    OwnServer => the_lowered_body_limit_is_logged_once_per_team,
    Any => forged_locators_are_refused,
    Any => republish_after_the_duplicate_window_returns_the_same_locator,
    Any => burst_filling_the_stream_keeps_every_acknowledged_body,
    OwnServer => broker_restart_mid_burst_leaves_exactly_one_copy_after_reconcile,
    OwnServer => unreachable_broker_fails_within_the_request_timeout,
];

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
        JetStreamBackends::with_revalidation(rt.clone(), Duration::ZERO).expect("registry");
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
    until(
        Duration::from_secs(20),
        "a third of the burst is acknowledged",
        || async { (confirmed_count.load(Ordering::SeqCst) >= 50).then_some(()) },
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
