//! JetStream-only tests of the inbox side: the ack subjects the server issues, foreign ack
//! subjects, a missing inbox stream.

use std::sync::Arc;
use std::time::Duration;

use crewbus_conformance::trial::Behaviour;
use crewbus_conformance::wait::until;
use crewbus_domain::{BusError, Published, Uuid};
use crewbus_jetstream::JetStreamBackend;

use super::support::*;
use super::{Harness, Needs};

/// The tests of this file, in order.
pub(crate) const TESTS: &[Behaviour<Arc<Harness>, Needs>] = tests![
    Any => references_are_deduplicated_redelivered_and_double_acked,
    Any => foreign_ack_subjects_and_bad_recipient_keys_are_refused,
    Any => missing_inbox_stream_is_not_provisioned_and_status_not_present,
];

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
    let redelivered = until(Duration::from_secs(10), "redelivery after ack wait", || {
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
