//! `PostgresInbox` (queue table) on a real database.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{BusError, Published};
use crewbus_ports::Inbox;
use crewbus_postgres::{PostgresInbox, PostgresSettings};
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{ManualClock, database};

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    inbox_publish_dedups_on_event_id,
    inbox_reference_is_redelivered_after_ack_wait_until_acked,
    inbox_ack_refuses_foreign_tokens_and_repeats_harmlessly,
    inbox_status_reports_a_missing_consumer_and_counts,
    inbox_stops_at_max_deliver_but_never_drops,
    inbox_concurrent_fetchers_never_share_a_reference,
    inbox_refuses_invalid_recipient_keys,
    inbox_purge_removes_only_acknowledged_references,
];

const ACK_WAIT: Duration = Duration::from_secs(30);

fn settings() -> PostgresSettings {
    PostgresSettings {
        ack_wait: ACK_WAIT,
        max_deliver: 3,
        ..PostgresSettings::default()
    }
}

fn inbox(pool: &sqlx::PgPool, team: Uuid, clock: Arc<ManualClock>) -> PostgresInbox {
    PostgresInbox::new(pool.clone(), team, clock, &settings())
}

async fn inbox_publish_dedups_on_event_id() -> Result<(), Failed> {
    let db = database("inbox_publish_dedups_on_event_id").await;
    let clock = ManualClock::new();
    let i = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    let event = Uuid::new_v4();
    let first = i.publish_reference("bob", event, r#"{"m":1}"#).await;
    let Published::Confirmed {
        locator,
        duplicate: false,
    } = first
    else {
        panic!("{first:?}");
    };
    assert!(locator.as_str().starts_with("postgres:inbox:"));
    let again = i.publish_reference("bob", event, r#"{"m":1}"#).await;
    assert!(
        matches!(&again, Published::Confirmed { locator: l, duplicate: true } if *l == locator),
        "{again:?}"
    );
    let refs = i.fetch_references("bob", 10).await?;
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].event_id, event);
    assert_eq!(refs[0].payload, r#"{"m":1}"#);
    assert_eq!(refs[0].deliveries, 1);
    // Still a duplicate after it was acknowledged: dedup lasts for the life of the row.
    i.ack_reference(&refs[0].ack_subject).await?;
    assert!(matches!(
        i.publish_reference("bob", event, "{}").await,
        Published::Confirmed {
            duplicate: true,
            ..
        }
    ));
    clock.advance(ACK_WAIT * 2);
    assert!(i.fetch_references("bob", 10).await?.is_empty());
    db.passed().await;
    Ok(())
}

async fn inbox_reference_is_redelivered_after_ack_wait_until_acked() -> Result<(), Failed> {
    let db = database("inbox_reference_is_redelivered_after_ack_wait_until_acked").await;
    let clock = ManualClock::new();
    let i = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    let events: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    for e in &events {
        assert!(i.publish_reference("ann", *e, "{}").await.is_confirmed());
    }
    let first = i.fetch_references("ann", 2).await?;
    assert_eq!(
        first.iter().map(|r| r.event_id).collect::<Vec<_>>(),
        events[..2],
        "oldest first, at most `limit`"
    );
    assert!(first.iter().all(|r| !r.redelivered()));
    // Handed out, not acked: invisible within the ack wait.
    let rest = i.fetch_references("ann", 10).await?;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].event_id, events[2]);
    assert!(i.fetch_references("ann", 10).await?.is_empty());
    i.ack_reference(&first[0].ack_subject).await?;
    clock.advance(ACK_WAIT - Duration::from_secs(1));
    assert!(i.fetch_references("ann", 10).await?.is_empty());
    clock.advance(Duration::from_secs(1));
    let again = i.fetch_references("ann", 10).await?;
    assert_eq!(
        again.iter().map(|r| r.event_id).collect::<Vec<_>>(),
        vec![events[1], events[2]],
        "the acked one never comes back; the others are redelivered"
    );
    assert!(again.iter().all(|r| r.deliveries == 2 && r.redelivered()));
    db.passed().await;
    Ok(())
}

async fn inbox_ack_refuses_foreign_tokens_and_repeats_harmlessly() -> Result<(), Failed> {
    let db = database("inbox_ack_refuses_foreign_tokens_and_repeats_harmlessly").await;
    let clock = ManualClock::new();
    let mine = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    let theirs = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    assert!(
        theirs
            .publish_reference("eve", Uuid::new_v4(), "{}")
            .await
            .is_confirmed()
    );
    let foreign = theirs.fetch_references("eve", 1).await?.remove(0);
    let r = mine.ack_reference(&foreign.ack_subject).await;
    assert!(matches!(r, Err(BusError::Forbidden { .. })), "{r:?}");
    for bad in [
        "",
        "pg-inbox",
        "pg-inbox:x:1",
        "$JS.ACK.S.c.1.1.1.1.0",
        "pg-inbox:1:2:3:4",
    ] {
        let r = mine.ack_reference(bad).await;
        assert!(matches!(r, Err(BusError::Forbidden { .. })), "{bad}: {r:?}");
    }
    // The foreign reference is still unacked in its own inbox: redelivered after the ack wait.
    clock.advance(ACK_WAIT);
    assert_eq!(theirs.fetch_references("eve", 1).await?.len(), 1);
    assert!(
        mine.publish_reference("eve", Uuid::new_v4(), "{}")
            .await
            .is_confirmed()
    );
    let r = mine.fetch_references("eve", 1).await?.remove(0);
    mine.ack_reference(&r.ack_subject).await?;
    mine.ack_reference(&r.ack_subject).await?;
    clock.advance(ACK_WAIT * 2);
    assert!(mine.fetch_references("eve", 1).await?.is_empty());
    db.passed().await;
    Ok(())
}

async fn inbox_status_reports_a_missing_consumer_and_counts() -> Result<(), Failed> {
    let db = database("inbox_status_reports_a_missing_consumer_and_counts").await;
    let clock = ManualClock::new();
    let i = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    for _ in 0..3 {
        assert!(
            i.publish_reference("cy", Uuid::new_v4(), "{}")
                .await
                .is_confirmed()
        );
    }
    let s = i.inbox_status("cy").await?;
    assert!(
        !s.present,
        "no fetch yet: no consumer, which is not an empty inbox"
    );
    let got = i.fetch_references("cy", 2).await?;
    let s = i.inbox_status("cy").await?;
    assert!(s.present);
    assert_eq!((s.pending, s.awaiting_ack, s.redelivered), (1, 2, 0));
    i.ack_reference(&got[0].ack_subject).await?;
    clock.advance(ACK_WAIT);
    let again = i.fetch_references("cy", 10).await?;
    assert_eq!(again.len(), 2);
    let s = i.inbox_status("cy").await?;
    assert_eq!((s.pending, s.awaiting_ack, s.redelivered), (0, 2, 1));
    // A recipient nobody fetched for is absent even though others are present.
    assert!(!i.inbox_status("nobody").await?.present);
    db.passed().await;
    Ok(())
}

async fn inbox_stops_at_max_deliver_but_never_drops() -> Result<(), Failed> {
    let db = database("inbox_stops_at_max_deliver_but_never_drops").await;
    let clock = ManualClock::new();
    let i = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    assert!(
        i.publish_reference("dee", Uuid::new_v4(), "{}")
            .await
            .is_confirmed()
    );
    for delivery in 1..=3u64 {
        let refs = i.fetch_references("dee", 10).await?;
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].deliveries, delivery);
        clock.advance(ACK_WAIT);
    }
    assert!(
        i.fetch_references("dee", 10).await?.is_empty(),
        "past max deliver"
    );
    let s = i.inbox_status("dee").await?;
    assert_eq!((s.pending, s.awaiting_ack), (0, 0));
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_queue WHERE acked_at IS NULL")
        .fetch_one(db.pool())
        .await?;
    assert_eq!(kept, 1, "the reference is kept, never dropped");
    db.passed().await;
    Ok(())
}

async fn inbox_concurrent_fetchers_never_share_a_reference() -> Result<(), Failed> {
    let db = database("inbox_concurrent_fetchers_never_share_a_reference").await;
    let clock = ManualClock::new();
    let i = Arc::new(inbox(db.pool(), Uuid::new_v4(), clock));
    for _ in 0..200 {
        assert!(
            i.publish_reference("fay", Uuid::new_v4(), "{}")
                .await
                .is_confirmed()
        );
    }
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let i = i.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let batch = i.fetch_references("fay", 7).await.unwrap();
                    if batch.is_empty() {
                        return got;
                    }
                    got.extend(batch.into_iter().map(|r| r.event_id));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for t in tasks {
        for e in t.await? {
            total += 1;
            seen.insert(e);
        }
    }
    assert_eq!(total, 200, "each reference handed out once");
    assert_eq!(seen.len(), 200);
    db.passed().await;
    Ok(())
}

async fn inbox_refuses_invalid_recipient_keys() -> Result<(), Failed> {
    let db = database("inbox_refuses_invalid_recipient_keys").await;
    let i = inbox(db.pool(), Uuid::new_v4(), ManualClock::new());
    for bad in ["", "a.b", "a*", "a b", ">"] {
        assert!(matches!(
            i.publish_reference(bad, Uuid::new_v4(), "{}").await,
            Published::Fatal(BusError::Invalid { .. })
        ));
        assert!(matches!(
            i.fetch_references(bad, 1).await,
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            i.inbox_status(bad).await,
            Err(BusError::Invalid { .. })
        ));
    }
    db.passed().await;
    Ok(())
}

async fn inbox_purge_removes_only_acknowledged_references() -> Result<(), Failed> {
    let db = database("inbox_purge_removes_only_acknowledged_references").await;
    let clock = ManualClock::new();
    let i = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    let other = inbox(db.pool(), Uuid::new_v4(), clock.clone());
    for _ in 0..3 {
        assert!(
            i.publish_reference("gus", Uuid::new_v4(), "{}")
                .await
                .is_confirmed()
        );
    }
    let event = Uuid::new_v4();
    assert!(
        other
            .publish_reference("gus", event, "{}")
            .await
            .is_confirmed()
    );
    let theirs = other.fetch_references("gus", 1).await?.remove(0);
    other.ack_reference(&theirs.ack_subject).await?;
    let refs = i.fetch_references("gus", 2).await?;
    i.ack_reference(&refs[0].ack_subject).await?;
    clock.advance(Duration::from_secs(1));
    let cut = crewbus_ports::Clock::now(&*clock);
    assert_eq!(i.purge_acknowledged(cut).await?, 1);
    assert_eq!(i.purge_acknowledged(cut).await?, 0);
    // The unacked ones are still handed out after the ack wait; the other team keeps its row.
    clock.advance(ACK_WAIT);
    assert_eq!(i.fetch_references("gus", 10).await?.len(), 2);
    assert!(matches!(
        other.publish_reference("gus", event, "{}").await,
        Published::Confirmed {
            duplicate: true,
            ..
        }
    ));
    db.passed().await;
    Ok(())
}
