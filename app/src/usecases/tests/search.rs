//! Search and the index worker: bodies sent, relayed to the memory backend, indexed by a pass
//! and found by members only; a body backend that does not answer holds up only its own
//! messages, which a later pass indexes; a bad query never reaches the ledger.

use std::sync::Arc;

use crewbus_domain::{
    Agent, BusError, IndexEntry, Locator, Message, Publication, SearchQuery, TokenHash, Uuid,
};
use crewbus_memory::{
    MemoryBackends, MemoryConfig, MemoryFeed, MemoryLedger, MemoryPushStore, MemoryWakeups,
};
use crewbus_ports::{
    Ledger, MessagingBackend, MockBackends, MockMessagingBackend, MockSearch, SystemClock,
};
use mockall::Sequence;

use crate::usecases::bus::{Bus, BusSettings, Ports};
use crate::usecases::search::INDEX_BATCH;

fn ports(ledger: &MemoryLedger) -> Ports {
    let clock = Arc::new(SystemClock);
    Ports {
        ledger: Arc::new(ledger.clone()),
        backends: Arc::new(MemoryBackends::new(MemoryConfig::default(), clock.clone()).unwrap()),
        journal: Arc::new(ledger.journal()),
        clock,
        broker: None,
        wakeups: Arc::new(MemoryWakeups::new()),
        operators: Arc::new(ledger.clone()),
        oversight: Arc::new(ledger.clone()),
        leases: Arc::new(ledger.clone()),
        send_allowance: None,
        search: Arc::new(ledger.clone()),
        feed: Arc::new(MemoryFeed::new()),
        push_store: Arc::new(MemoryPushStore::new(Default::default())),
    }
}

fn q(text: &str) -> SearchQuery {
    SearchQuery::new(text)
}

#[tokio::test]
async fn sent_bodies_are_found_by_members_once_a_pass_indexed_them() {
    let ledger = MemoryLedger::new(Default::default());
    let bus = Bus::new(ports(&ledger), BusSettings::default());
    let now = chrono::Utc::now();
    let team = ledger
        .create_team("t", "memory", "memory", now)
        .await
        .unwrap();
    let agent = |name: &'static str| {
        let ledger = ledger.clone();
        async move {
            ledger
                .create_agent(team.id, name, TokenHash::of(name), now)
                .await
                .unwrap()
        }
    };
    let (a, b, c) = (agent("a").await, agent("b").await, agent("c").await);
    let conv = ledger
        .create_conversation(team.id, a.id, "release", &[b.id], now)
        .await
        .unwrap();
    let sent = bus
        .send(
            &a,
            conv.id,
            "r1".into(),
            "the canary rolled back".into(),
            None,
        )
        .await
        .unwrap();
    // Not stored yet (the relay has not run): not in the backlog, not found.
    assert_eq!(bus.index_pass().await.unwrap().listed, 0);
    bus.relay_pass().await.unwrap();
    assert!(bus.search(&b, &q("canary")).await.unwrap().hits.is_empty());
    let pass = bus.index_pass().await.unwrap();
    assert_eq!(
        (pass.listed, pass.indexed, pass.skipped, pass.more),
        (1, 1, 0, false)
    );
    let page = bus.search(&b, &q("CANARY")).await.unwrap();
    assert_eq!(page.hits.len(), 1);
    let hit = &page.hits[0];
    assert_eq!((hit.message, hit.sender), (sent.message.id, a.id));
    assert_eq!(hit.conversation_title, "release");
    assert!(hit.snippet.iter().any(|s| s.matched && s.text == "canary"));
    assert_eq!(bus.search(&a, &q("release")).await.unwrap().hits.len(), 1);
    assert!(bus.search(&c, &q("canary")).await.unwrap().hits.is_empty());
    // The next pass finds nothing left to do.
    assert_eq!(bus.index_pass().await.unwrap().listed, 0);
}

fn stored(team: Uuid, backend: &str) -> Message {
    let id = Uuid::new_v4();
    Message {
        id,
        team,
        conversation: Uuid::new_v4(),
        seq: 1,
        sender: Uuid::new_v4(),
        request_id: "r".into(),
        body_sha256: crewbus_domain::body_sha256(""),
        body_len: 0,
        backend: backend.into(),
        locator: Some(Locator::new(backend, &id.to_string())),
        publication: Publication::Stored,
        sent_at: chrono::Utc::now(),
        stored_at: Some(chrono::Utc::now()),
        retained_at: None,
        failure: None,
        sender_kind: crewbus_domain::AgentKind::Agent,
    }
}

/// `down` answers `Unavailable`; `up` holds `good` ("kept") and refuses `refused` for good,
/// and holds nothing else (a body gone).
fn backends(good: Uuid, refused: Uuid) -> MockBackends {
    let mut up = MockMessagingBackend::new();
    up.expect_fetch().returning(move |_, id| {
        if id == good {
            Ok(Some("kept".into()))
        } else if id == refused {
            Err(BusError::forbidden("another stream"))
        } else {
            Ok(None)
        }
    });
    let mut down = MockMessagingBackend::new();
    down.expect_fetch()
        .returning(|_, _| Err(BusError::unavailable("broker")));
    let (up, down): (Arc<dyn MessagingBackend>, Arc<dyn MessagingBackend>) =
        (Arc::new(up), Arc::new(down));
    let mut backends = MockBackends::new();
    backends.expect_body_backend().returning(move |_, name| {
        Ok(if name == "down" {
            down.clone()
        } else {
            up.clone()
        })
    });
    backends
}

#[tokio::test]
async fn a_backend_that_does_not_answer_holds_up_only_its_own_messages() {
    let team = Uuid::new_v4();
    let first: Vec<Message> = (0..INDEX_BATCH)
        .map(|i| stored(team, if i % 2 == 0 { "down" } else { "up" }))
        .collect();
    let second = vec![stored(team, "up")];
    let (good, refused) = (first[1].id, first[3].id);
    let mut search = MockSearch::new();
    let mut seq = Sequence::new();
    let (b1, b2) = (first.clone(), second.clone());
    search
        .expect_unindexed()
        .times(1)
        .in_sequence(&mut seq)
        .withf(|after, limit| after.is_none() && *limit == INDEX_BATCH)
        .returning(move |_, _| Ok(b1.clone()));
    let last = crewbus_domain::IndexPosition::after(first.last().unwrap());
    let expected: Vec<IndexEntry> = first
        .iter()
        .filter(|m| m.backend == "up")
        .map(|m| IndexEntry {
            message: m.id,
            body: (m.id == good).then(|| "kept".to_owned()),
        })
        .collect();
    search
        .expect_index()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |entries, _| entries == expected.as_slice())
        .returning(|e, _| Ok(e.len() as u64));
    search
        .expect_unindexed()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |after, _| *after == last)
        .returning(move |_, _| Ok(b2.clone()));
    let only = second[0].id;
    search
        .expect_index()
        .times(1)
        .in_sequence(&mut seq)
        .withf(move |entries, _| entries.len() == 1 && entries[0].message == only)
        .returning(|e, _| Ok(e.len() as u64));
    let ledger = MemoryLedger::new(Default::default());
    let bus = Bus::new(
        Ports {
            backends: Arc::new(backends(good, refused)),
            search: Arc::new(search),
            ..ports(&ledger)
        },
        BusSettings::default(),
    );
    let pass = bus.index_pass().await.unwrap();
    let half = (INDEX_BATCH / 2) as u64;
    assert_eq!(pass.listed, INDEX_BATCH as u64 + 1);
    assert_eq!((pass.indexed, pass.skipped), (half + 1, half));
    assert!(!pass.more, "the backlog's last batch was short");
}

#[tokio::test]
async fn a_bad_query_never_reaches_the_ledger() {
    let ledger = MemoryLedger::new(Default::default());
    let bus = Bus::new(
        Ports {
            search: Arc::new(MockSearch::new()),
            ..ports(&ledger)
        },
        BusSettings::default(),
    );
    let agent = Agent {
        id: Uuid::new_v4(),
        team: Uuid::new_v4(),
        name: "a".into(),
        recipient_key: "a".into(),
        token_hash: TokenHash::of("a"),
        created_at: chrono::Utc::now(),
        revoked_at: None,
        kind: crewbus_domain::AgentKind::Agent,
    };
    assert!(matches!(
        bus.search(&agent, &q("")).await,
        Err(BusError::Invalid { .. })
    ));
    // Nothing in these can be found: an empty page, and the ledger is not asked either.
    for text in ["-only", "  ", "!!!"] {
        let page = bus.search(&agent, &q(text)).await.unwrap();
        assert!(
            page.hits.is_empty() && page.next_offset.is_none(),
            "{text:?}"
        );
    }
}
