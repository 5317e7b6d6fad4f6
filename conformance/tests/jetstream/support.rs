//! What the JetStream tests share: configurations for the fixture's users, fresh teams,
//! envelopes, raw JetStream access and a relay in miniature.

use std::time::Duration;

use async_nats::jetstream;
use crewbus_conformance::nats::{self, UserPassword};
use crewbus_conformance::wait::until;
use crewbus_domain::{Envelope, Locator, Published, Quotas, Secret, Uuid};
use crewbus_jetstream::{Config, Credential, JetStreamBackend};
use crewbus_ports::MessagingBackend;

use super::Harness;

/// A mebibyte, in bytes.
pub(crate) const MIB: u64 = 1024 * 1024;

pub(crate) fn credential(u: &UserPassword) -> Credential {
    Credential::UserPassword {
        user: u.user.clone(),
        password: Secret::new(u.password.clone()),
    }
}

/// Short windows: duplicate window 2 s, ack wait 1 s.
pub(crate) fn base_config(url: &str) -> Config {
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

pub(crate) fn prov_for(url: &str) -> Config {
    let mut c = base_config(url);
    c.credential = credential(&nats::provisioning_user());
    c
}

pub(crate) fn rt_for(url: &str) -> Config {
    let mut c = base_config(url);
    c.credential = credential(&nats::runtime_user());
    c
}

/// A fresh team: both streams provisioned with `prov`, the adapter connected with `rt`.
pub(crate) async fn team_with(prov: &Config, rt: &Config) -> (Uuid, JetStreamBackend) {
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

pub(crate) async fn new_team(h: &Harness) -> (Uuid, JetStreamBackend) {
    team_with(&h.prov(), &h.rt()).await
}

pub(crate) fn envelope(team: Uuid, body: impl Into<String>) -> Envelope {
    Envelope {
        message_id: Uuid::new_v4(),
        conversation_id: Uuid::new_v4(),
        team_id: team,
        body: body.into(),
        publish_key: Uuid::new_v4(),
    }
}

pub(crate) fn confirmed(p: &Published) -> (Locator, bool) {
    match p {
        Published::Confirmed { locator, duplicate } => (locator.clone(), *duplicate),
        other => panic!("expected Confirmed, got {other:?}"),
    }
}

pub(crate) async fn raw(
    url: &str,
    user: &UserPassword,
) -> (async_nats::Client, jetstream::Context) {
    let client = async_nats::ConnectOptions::new()
        .user_and_password(user.user.clone(), user.password.clone())
        .request_timeout(Some(Duration::from_secs(2)))
        .connect(url)
        .await
        .expect("raw connect");
    let js = jetstream::new(client.clone());
    (client, js)
}

pub(crate) async fn raw_h(
    h: &Harness,
    user: &UserPassword,
) -> (async_nats::Client, jetstream::Context) {
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

pub(crate) async fn stream_info(js: &jetstream::Context, name: &str) -> jetstream::stream::Info {
    js.get_stream(name)
        .await
        .expect("stream")
        .info()
        .await
        .expect("stream info")
        .clone()
}

/// Publishes until confirmed, settling `Uncertain` with reconcile (a relay in miniature).
pub(crate) async fn settle(b: &JetStreamBackend, e: &Envelope, deadline: Duration) -> Locator {
    until(deadline, "the body to settle", || async {
        match b.publish(e.clone()).await {
            Published::Confirmed { locator, .. } => Some(locator),
            Published::Fatal(err) => panic!("fatal publish: {err:?}"),
            Published::Retryable(_) => None,
            Published::Uncertain(_) => b.reconcile(e).await.ok().flatten(),
        }
    })
    .await
}
