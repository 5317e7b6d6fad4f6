//! Postgres-specific ledger behaviours: concurrency, fencing and restarts against a real
//! database (issue 4, point 8).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_domain::{
    Agent, BusError, Conversation, Locator, Publication, RecordKind, RunOutcome, SendRequest,
    SettleOutcome, Settlement, SlotOutcome, Team, TenantId, TokenHash,
};
use crewbus_ports::{Journal, Ledger, MessagingBackend};
use crewbus_postgres::{PostgresBackend, PostgresLedger, PostgresSettings};
use libtest_mimic::Failed;
use sqlx::PgPool;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{ManualClock, database};
use crewbus_conformance::wait::until;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    fifty_concurrent_senders_get_gap_free_distinct_seq,
    relay_never_skips_a_slot_committed_after_a_later_one,
    racing_relays_never_both_settle_one_slot,
    a_repeat_committed_during_the_lock_wait_is_a_repeat,
    a_sender_revoked_during_the_lock_wait_is_forbidden,
    expired_lease_is_fenced_mid_publish,
    nul_bodies_and_notes_are_stored_faithfully,
];

/// A body backend name Postgres does not store itself: sends go through the outbox.
const REMOTE: &str = "remote";
const LEASE: Duration = Duration::from_secs(30);

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

pub(crate) struct World {
    pub(crate) ledger: PostgresLedger,
    pub(crate) team: Team,
    pub(crate) agents: Vec<Agent>,
    pub(crate) conv: Conversation,
}

/// A team on `backend` with `n` agents, all members of one conversation.
pub(crate) async fn world(pool: &PgPool, backend: &str, n: usize) -> World {
    let ledger = PostgresLedger::new(pool.clone(), TenantId::default());
    let team = ledger
        .create_team(
            &format!("team-{}", Uuid::new_v4()),
            backend,
            "postgres",
            t(0),
        )
        .await
        .expect("team");
    let mut agents = Vec::new();
    for i in 0..n {
        let token = TokenHash::of(&Uuid::new_v4().to_string());
        agents.push(
            ledger
                .create_agent(team.id, &format!("agent-{i}"), token, t(0))
                .await
                .expect("agent"),
        );
    }
    let others: Vec<Uuid> = agents[1..].iter().map(|a| a.id).collect();
    let conv = ledger
        .create_conversation(team.id, agents[0].id, "talk", &others, t(0))
        .await
        .expect("conversation");
    World {
        ledger,
        team,
        agents,
        conv,
    }
}

pub(crate) fn request(w: &World, sender: usize, request_id: &str, body: &str) -> SendRequest {
    SendRequest {
        team: w.team.id,
        conversation: w.conv.id,
        sender: w.agents[sender].id,
        request_id: request_id.to_owned(),
        body: body.to_owned(),
        run: None,
    }
}

async fn fifty_concurrent_senders_get_gap_free_distinct_seq() -> Result<(), Failed> {
    let db = database("fifty_concurrent_senders_get_gap_free_distinct_seq").await;
    for backend in ["postgres", REMOTE] {
        let w = Arc::new(world(db.pool(), backend, 5).await);
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let w = w.clone();
                tokio::spawn(async move {
                    // Every sender sends its request twice, concurrently: one message each.
                    let req = request(&w, i % 5, &format!("req-{i}"), &format!("body {i}"));
                    let (a, b) =
                        tokio::join!(w.ledger.send(req.clone(), t(1)), w.ledger.send(req, t(1)));
                    let (a, b) = (a.expect("send"), b.expect("send"));
                    assert_eq!(a.message.id, b.message.id, "one message per request");
                    assert!(a.created != b.created, "exactly one of the two created it");
                    a.message.seq
                })
            })
            .collect();
        let mut seqs = Vec::new();
        for task in tasks {
            seqs.push(task.await?);
        }
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=50).collect::<Vec<u64>>(),
            "{backend}: gap-free, distinct"
        );
        let page = w.ledger.history(w.team.id, w.conv.id, 0, 100).await?;
        let stored = page.items.iter().map(|i| i.message.seq).collect::<Vec<_>>();
        if backend == "postgres" {
            assert_eq!(stored, (1..=50).collect::<Vec<u64>>());
        } else {
            // Pending publications: the page stops at the first one.
            assert_eq!(stored, vec![1]);
        }
    }
    db.passed().await;
    Ok(())
}

/// Waits until some session of this database waits on a lock.
async fn someone_waits_on_a_lock(pool: &PgPool) {
    until(
        Duration::from_secs(20),
        "a send blocked on a lock",
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            (waiting > 0).then_some(())
        },
    )
    .await;
}

async fn relay_never_skips_a_slot_committed_after_a_later_one() -> Result<(), Failed> {
    // Send 1 inserts its slot first but commits last: it is held open by a lock on its journal
    // record (another session holds an uncommitted record with the seq it will take). Send 2,
    // in another conversation (sends in one conversation are serialised), commits meanwhile. A
    // relay pass sees only slot 2; once send 1 commits, the next pass must lease slot 1 — a
    // relay that kept a cursor past slot 2 would skip it forever.
    let db = database("relay_never_skips_a_slot_committed_after_a_later_one").await;
    let w = Arc::new(world(db.pool(), REMOTE, 2).await);
    let journal = w.ledger.journal();
    let run = journal.admit(w.team.id, w.agents[0].id, t(0)).await?;
    let mut blocker = db.pool().begin().await?;
    sqlx::query("INSERT INTO journal_records (run_id, seq, at, kind) VALUES ($1, 2, $2, '{}')")
        .bind(run.0)
        .bind(t(0))
        .execute(&mut *blocker)
        .await?;
    let first = {
        let w = w.clone();
        tokio::spawn(async move {
            let mut req = request(&w, 0, "first", "one");
            req.run = Some(run);
            w.ledger.send(req, t(1)).await
        })
    };
    someone_waits_on_a_lock(db.pool()).await;
    let other = w
        .ledger
        .create_conversation(w.team.id, w.agents[1].id, "other", &[w.agents[0].id], t(0))
        .await?;
    let mut req = request(&w, 1, "second", "two");
    req.conversation = other.id;
    let second = w.ledger.send(req, t(2)).await?;
    let slot_order: Vec<Uuid> =
        sqlx::query_scalar("SELECT message_id FROM outbox_slots ORDER BY ord")
            .fetch_all(db.pool())
            .await?;
    assert_eq!(
        slot_order,
        vec![second.message.id],
        "slot 1 is not committed yet"
    );
    let pass1 = w.ledger.lease_slots(t(3), LEASE, 10).await?;
    assert_eq!(
        pass1
            .iter()
            .map(|s| s.envelope.message_id)
            .collect::<Vec<_>>(),
        vec![second.message.id],
        "only the committed slot is visible"
    );
    blocker.rollback().await?;
    let first = first.await??;
    let slot_order: Vec<Uuid> =
        sqlx::query_scalar("SELECT message_id FROM outbox_slots ORDER BY ord")
            .fetch_all(db.pool())
            .await?;
    assert_eq!(
        slot_order,
        vec![first.message.id, second.message.id],
        "slot 1 was inserted before slot 2 but committed after it"
    );
    let pass2 = w.ledger.lease_slots(t(4), LEASE, 10).await?;
    assert_eq!(
        pass2
            .iter()
            .map(|s| s.envelope.message_id)
            .collect::<Vec<_>>(),
        vec![first.message.id],
        "the slot that committed late is leased"
    );
    let records = journal.read(run, crewbus_domain::Seq(1), 10).await?;
    assert!(matches!(
        records[1].kind,
        RecordKind::MessageSent { seq: 1, .. }
    ));
    db.passed().await;
    Ok(())
}

async fn racing_relays_never_both_settle_one_slot() -> Result<(), Failed> {
    let db = database("racing_relays_never_both_settle_one_slot").await;
    let w = Arc::new(world(db.pool(), REMOTE, 3).await);
    let mut ids = HashSet::new();
    for i in 0..120 {
        let sent = w
            .ledger
            .send(request(&w, i % 3, &format!("r{i}"), "b"), t(1))
            .await?;
        ids.insert(sent.message.id);
    }
    let relays: Vec<_> = (0..3)
        .map(|_| {
            let w = w.clone();
            tokio::spawn(async move {
                let mut applied = Vec::new();
                loop {
                    let slots = w.ledger.lease_slots(t(2), LEASE, 7).await.unwrap();
                    if slots.is_empty() {
                        return applied;
                    }
                    let settlements: Vec<Settlement> = slots
                        .iter()
                        .map(|s| Settlement {
                            slot: s.slot,
                            generation: s.generation,
                            outcome: SlotOutcome::Confirmed {
                                locator: Locator::new("remote", &s.envelope.message_id.to_string()),
                            },
                        })
                        .collect();
                    let outcomes = w.ledger.settle(&settlements, t(3)).await.unwrap();
                    for (s, o) in slots.iter().zip(outcomes) {
                        assert_eq!(o, SettleOutcome::Applied, "a fresh lease settles");
                        applied.push(s.envelope.message_id);
                    }
                }
            })
        })
        .collect();
    let mut settled = Vec::new();
    for r in relays {
        settled.extend(r.await?);
    }
    assert_eq!(settled.len(), 120, "every slot settled exactly once");
    assert_eq!(settled.iter().copied().collect::<HashSet<_>>(), ids);
    let marks: i64 = sqlx::query_scalar("SELECT count(*) FROM reference_marks")
        .fetch_one(db.pool())
        .await?;
    assert_eq!(marks, 120, "one reference marker per message");
    assert_eq!(
        w.ledger.counts(t(4)).await?.pending_inbox_events,
        240,
        "one reference per recipient per message"
    );
    let counts = w.ledger.counts(t(4)).await?;
    assert_eq!(counts.pending_publications, 0);
    db.passed().await;
    Ok(())
}

/// Waits until `n` sessions of this database wait on a lock.
async fn sessions_wait_on_a_lock(pool: &PgPool, n: i64) {
    until(
        Duration::from_secs(20),
        "sends blocked on a lock",
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            (waiting >= n).then_some(())
        },
    )
    .await;
}

/// Another session's transaction holding `conversation`'s row lock (the one `send` takes) until
/// it is rolled back.
async fn hold_conversation_lock(
    pool: &PgPool,
    conversation: Uuid,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    let mut blocker = pool.begin().await?;
    sqlx::query("SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE")
        .bind(conversation)
        .execute(&mut *blocker)
        .await?;
    Ok(blocker)
}

async fn a_repeat_committed_during_the_lock_wait_is_a_repeat() -> Result<(), Failed> {
    // Three sends of one request id queue on the conversation lock (held by another session),
    // so each takes its snapshot before any of them has written: whichever gets the lock first
    // creates the message; the others find it only after waiting — the same body is answered
    // as a repeat (`created: false`), another body is `Conflict`, and the seq stays gap-free.
    let db = database("a_repeat_committed_during_the_lock_wait_is_a_repeat").await;
    for backend in ["postgres", REMOTE] {
        let w = Arc::new(world(db.pool(), backend, 2).await);
        let blocker = hold_conversation_lock(db.pool(), w.conv.id).await?;
        let mut sends = Vec::new();
        for (i, body) in ["same", "same", "other"].into_iter().enumerate() {
            let w = w.clone();
            sends.push((
                body,
                tokio::spawn(async move { w.ledger.send(request(&w, 0, "req", body), t(1)).await }),
            ));
            sessions_wait_on_a_lock(db.pool(), i as i64 + 1).await;
        }
        blocker.rollback().await?;
        let mut results = Vec::new();
        for (body, send) in sends {
            results.push((body, send.await?));
        }
        let created: Vec<_> = results
            .iter()
            .filter_map(|(body, r)| match r {
                Ok(sent) if sent.created => Some((*body, sent.message.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(created.len(), 1, "{backend}: one send creates the message");
        let (winner, message) = &created[0];
        assert_eq!(message.seq, 1);
        for (body, result) in &results {
            match result {
                Ok(sent) if sent.created => {}
                Ok(sent) => {
                    assert_eq!(body, winner, "{backend}: a repeat has the winner's body");
                    assert_eq!(sent.message.id, message.id);
                }
                Err(e) => {
                    assert_ne!(body, winner, "{backend}: only another body is refused");
                    assert!(matches!(e, BusError::Conflict { .. }), "{e:?}");
                }
            }
        }
        let next = w.ledger.send(request(&w, 1, "next", "b"), t(2)).await?;
        assert_eq!(next.message.seq, 2, "{backend}: gap-free after the repeats");
    }
    db.passed().await;
    Ok(())
}

async fn a_sender_revoked_during_the_lock_wait_is_forbidden() -> Result<(), Failed> {
    // A send queues on the conversation lock (held by another session); its sender is revoked
    // and the revocation commits before the lock is released. The send must be refused
    // (`Forbidden`), write nothing, and leave the seq gap-free.
    let db = database("a_sender_revoked_during_the_lock_wait_is_forbidden").await;
    for backend in ["postgres", REMOTE] {
        let w = Arc::new(world(db.pool(), backend, 2).await);
        let blocker = hold_conversation_lock(db.pool(), w.conv.id).await?;
        let send = {
            let w = w.clone();
            tokio::spawn(async move { w.ledger.send(request(&w, 0, "req", "body"), t(1)).await })
        };
        sessions_wait_on_a_lock(db.pool(), 1).await;
        w.ledger
            .revoke_agent(w.team.id, w.agents[0].id, t(1))
            .await?;
        blocker.rollback().await?;
        let result = send.await?;
        assert!(
            matches!(result, Err(BusError::Forbidden { .. })),
            "{backend}: {result:?}"
        );
        let page = w.ledger.history(w.team.id, w.conv.id, 0, 10).await?;
        assert!(
            page.items.is_empty(),
            "{backend}: nothing written: {page:?}"
        );
        let next = w.ledger.send(request(&w, 1, "next", "b"), t(2)).await?;
        assert_eq!(next.message.seq, 1, "{backend}: the seq stays gap-free");
    }
    db.passed().await;
    Ok(())
}

async fn expired_lease_is_fenced_mid_publish() -> Result<(), Failed> {
    let db = database("expired_lease_is_fenced_mid_publish").await;
    let w = world(db.pool(), REMOTE, 2).await;
    let sent = w.ledger.send(request(&w, 0, "r", "body"), t(1)).await?;
    let slow = w
        .ledger
        .lease_slots(t(2), Duration::from_secs(10), 1)
        .await?
        .remove(0);
    // The slow relay's lease runs out while its publish is in flight.
    let late = t(12);
    let fast = w.ledger.lease_slots(late, LEASE, 1).await?.remove(0);
    assert_eq!(fast.slot, slow.slot);
    assert!(fast.generation > slow.generation);
    let confirm = |generation, locator: &str| Settlement {
        slot: slow.slot,
        generation,
        outcome: SlotOutcome::Confirmed {
            locator: Locator::new("remote", locator),
        },
    };
    let fenced = w
        .ledger
        .settle(&[confirm(slow.generation, "slow")], t(13))
        .await?;
    assert_eq!(fenced, vec![SettleOutcome::Stale]);
    let m = w.ledger.message(w.team.id, sent.message.id).await?;
    assert_eq!(
        m.publication,
        Publication::PendingPublication,
        "the stale lease wrote nothing"
    );
    let applied = w
        .ledger
        .settle(&[confirm(fast.generation, "fast")], t(14))
        .await?;
    assert_eq!(applied, vec![SettleOutcome::Applied]);
    let m = w.ledger.message(w.team.id, sent.message.id).await?;
    assert_eq!(m.locator, Some(Locator::new("remote", "fast")));
    // An expired lease nobody re-leased is fenced too.
    let sent2 = w.ledger.send(request(&w, 0, "r2", "body"), t(20)).await?;
    let lease = w
        .ledger
        .lease_slots(t(21), Duration::from_secs(5), 1)
        .await?
        .remove(0);
    let stale = w
        .ledger
        .settle(
            &[Settlement {
                slot: lease.slot,
                generation: lease.generation,
                outcome: SlotOutcome::Fatal {
                    error: BusError::TooLarge { size: 2, limit: 1 },
                },
            }],
            t(26),
        )
        .await?;
    assert_eq!(stale, vec![SettleOutcome::Stale]);
    let m = w.ledger.message(w.team.id, sent2.message.id).await?;
    assert_eq!(m.publication, Publication::PendingPublication);
    db.passed().await;
    Ok(())
}

async fn nul_bodies_and_notes_are_stored_faithfully() -> Result<(), Failed> {
    // U+0000 is valid in a body and a note but refused by Postgres `text`: the ledger stores
    // bodies as bytes (the body table and outbox slots) and records as escaped JSON text, so
    // nothing is refused and no row is left half-written.
    let db = database("nul_bodies_and_notes_are_stored_faithfully").await;
    let body = "nul\u{0}inside\u{0}";
    let local = world(db.pool(), "postgres", 2).await;
    let sent = local
        .ledger
        .send(request(&local, 0, "r", body), t(1))
        .await?;
    assert_eq!(sent.message.publication, Publication::Stored);
    let backend = PostgresBackend::new(
        db.pool().clone(),
        local.team.id,
        ManualClock::new(),
        &PostgresSettings::default(),
    );
    let locator = sent.message.locator.clone().unwrap();
    assert_eq!(
        backend.fetch(&locator, sent.message.id).await?.as_deref(),
        Some(body)
    );
    let remote = world(db.pool(), REMOTE, 2).await;
    remote
        .ledger
        .send(request(&remote, 0, "r", body), t(1))
        .await?;
    let slot = remote.ledger.lease_slots(t(2), LEASE, 1).await?.remove(0);
    assert_eq!(slot.envelope.body, body);
    let journal = local.ledger.journal();
    let run = journal
        .admit(local.team.id, local.agents[0].id, t(0))
        .await?;
    journal.note(run, "note\u{0}", t(1)).await?;
    journal
        .seal(run, RunOutcome::Succeeded, "done\u{0}", t(2))
        .await?;
    let records = journal.read(run, crewbus_domain::Seq(1), 10).await?;
    assert!(matches!(&records[1].kind, RecordKind::Note { text } if text == "note\u{0}"));
    assert!(
        matches!(&records[2].kind, RecordKind::RunSealed { reason, .. } if reason == "done\u{0}")
    );
    db.passed().await;
    Ok(())
}
