//! The `Outbox` API of PUSH.md §4.

use crate::push_support;

use std::sync::Arc;

use chrono::Utc;
use crewbus::push::{Destination, Outbox};
use crewbus_domain::{PushAuthentication, RunId, Secret, Seq};
use crewbus_memory::{ManualClock, MemoryPushStore, TestKeyRing};
use crewbus_ports::PushStore;
use push_support::*;

fn store() -> Arc<MemoryPushStore> {
    Arc::new(MemoryPushStore::new(tenant("acme")))
}

fn ok(name: &str) -> Destination {
    destination(name, &format!("https://hooks.example.com/{name}"))
}

#[test]
#[should_panic(expected = "blank")]
fn a_blank_name_panics() {
    Outbox::new(store(), vec![ok("a"), ok("  ")]);
}

#[test]
#[should_panic(expected = "named \"a\"")]
fn a_shared_name_panics_even_after_trimming() {
    Outbox::new(store(), vec![ok("a"), ok(" a ")]);
}

#[test]
#[should_panic(expected = "URL")]
fn an_unparsable_url_panics() {
    Outbox::new(store(), vec![destination("a", "http//nope")]);
}

#[test]
#[should_panic(expected = "Standard Webhooks")]
fn a_signing_key_that_is_not_a_standard_webhooks_secret_panics() {
    let mut d = ok("a");
    d.signing_keys = vec![Secret::new("whsec_***")];
    Outbox::new(store(), vec![d]);
}

#[test]
#[should_panic(expected = "not the push store's tenant")]
fn sealed_with_the_wrong_tenant_panics() {
    Outbox::new(store(), vec![ok("a")]).sealed(Arc::new(TestKeyRing::new()), tenant("globex"));
}

#[test]
fn sealed_with_the_right_tenant_and_destinations_as_given() {
    let outbox = Outbox::new(store(), vec![ok("a"), ok("b")])
        .sealed(Arc::new(TestKeyRing::new()), tenant("acme"));
    assert!(outbox.is_sealed());
    let names: Vec<_> = outbox
        .destinations()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(outbox.tenant().as_str(), "acme");
}

#[test]
fn no_destinations_is_allowed() {
    assert!(Outbox::new(store(), vec![]).destinations().is_empty());
}

#[test]
fn debug_prints_no_secret_or_query() {
    let mut d = destination("a", "https://hooks.example.com/x?sig=query-secret");
    d.authentication = Some(PushAuthentication {
        scheme: "Bearer".into(),
        credentials: Secret::new(TOKEN),
    });
    let outbox = Outbox::new(store(), vec![d]);
    let text = format!("{outbox:?} {:?}", outbox.clone());
    for leak in [TOKEN, KEY_OLD, "query-secret"] {
        assert!(!text.contains(leak), "{text} leaks {leak}");
    }
    assert!(text.contains("hooks.example.com/x"));
}

#[tokio::test]
async fn open_registers_every_destination_at_cursor_one_and_never_rewinds() {
    let store = store();
    let at = Utc::now();
    let outbox = Outbox::new(store.clone(), vec![ok("a"), ok("b")])
        .with_clock(Arc::new(ManualClock::new(at)));
    let run = RunId::new();
    outbox.open(run).await.unwrap();
    let configs = store.list(run).await.unwrap();
    let ids: Vec<_> = configs.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["operator:a", "operator:b"]);
    assert_eq!(configs[0].url, "https://hooks.example.com/a");

    // The receiver acknowledged up to seq 7; a resume opens again: the cursor stays.
    store.advance(run, "operator:a", Seq(8), at).await.unwrap();
    store
        .park(run, "operator:b", "the receiver answered 410")
        .await
        .unwrap();
    outbox.open(run).await.unwrap();
    outbox.clone().open(run).await.unwrap();
    let due = store.due(at, 10, at).await.unwrap();
    assert_eq!(due.len(), 2, "both due; the parked one was re-registered");
    let a = due.iter().find(|r| r.config.id == "operator:a").unwrap();
    let b = due.iter().find(|r| r.config.id == "operator:b").unwrap();
    assert_eq!(a.next_seq, Seq(8));
    assert_eq!(b.next_seq, Seq(1));
    assert!(!b.parked);
    // Another run gets its own registrations.
    assert!(store.list(RunId::new()).await.unwrap().is_empty());
}

#[tokio::test]
async fn open_fails_when_the_key_ring_is_down() {
    let keys = TestKeyRing::new();
    let mut d = ok("a");
    d.authentication = Some(PushAuthentication {
        scheme: "Bearer".into(),
        credentials: Secret::new(TOKEN),
    });
    let store = store();
    let outbox = Outbox::new(store.clone(), vec![d]).sealed(Arc::new(keys.clone()), tenant("acme"));
    keys.set_down(true);
    let err = outbox.open(RunId::new()).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    keys.set_down(false);
    let run = RunId::new();
    outbox.open(run).await.unwrap();
    assert_eq!(store.list(run).await.unwrap().len(), 1);
}
