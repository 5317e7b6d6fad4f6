//! SQLite under concurrency: writers queue on the one write connection (never `SQLITE_BUSY`),
//! readers run beside them, and leases are handed out once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::Publication;
use crewbus_ports::Ledger;
use libtest_mimic::Failed;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{request, store, t, world};

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    thirty_two_concurrent_writers_never_see_a_busy_error,
    racing_relays_lease_each_slot_once,
];

const WRITERS: usize = 32;
const SENDS: usize = 10;

/// 32 tasks send at once — every other send into the conversation all of them share, the rest
/// into a conversation of their own — while a reader pages the shared history. No send fails
/// (in particular none with a busy error), every conversation's seqs are gap-free, and the
/// busy counter stays at 0.
async fn thirty_two_concurrent_writers_never_see_a_busy_error() -> Result<(), Failed> {
    let store = store("sqlite::thirty_two_concurrent_writers_never_see_a_busy_error").await;
    let w = Arc::new(world(&store.pools, crewbus_sqlite::NAME, WRITERS).await);
    let mut own = Vec::new();
    for i in 0..WRITERS {
        let peer = w.agents[(i + 1) % WRITERS].id;
        let c = w
            .ledger
            .create_conversation(w.team.id, w.agents[i].id, "pair", &[peer], t(0))
            .await?;
        own.push(c.id);
    }
    let own = Arc::new(own);
    let writers: Vec<_> = (0..WRITERS)
        .map(|i| {
            let (w, own) = (w.clone(), own.clone());
            tokio::spawn(async move {
                let mut sent = Vec::new();
                for n in 0..SENDS {
                    let conversation = if n % 2 == 0 { w.conv.id } else { own[i] };
                    let req = request(&w, conversation, i, &format!("w{i}-{n}"), "hello");
                    let s = w.ledger.send(req, t(1)).await.expect("a send never fails");
                    sent.push((conversation, s.message.seq));
                }
                sent
            })
        })
        .collect();
    let reader = {
        let w = w.clone();
        tokio::spawn(async move {
            let mut pages = 0;
            loop {
                let page = w.ledger.history(w.team.id, w.conv.id, 0, 1000).await;
                let items = page.expect("a read never fails").items.len();
                pages += 1;
                if items == WRITERS * SENDS / 2 {
                    return pages;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut by_conversation: HashMap<Uuid, Vec<u64>> = HashMap::new();
    for writer in writers {
        for (conversation, seq) in writer.await? {
            by_conversation.entry(conversation).or_default().push(seq);
        }
    }
    assert!(reader.await? >= 1);
    for (conversation, mut seqs) in by_conversation {
        seqs.sort_unstable();
        let expected = if conversation == w.conv.id {
            WRITERS * SENDS / 2
        } else {
            SENDS / 2
        };
        assert_eq!(
            seqs,
            (1..=expected as u64).collect::<Vec<_>>(),
            "gap-free, distinct"
        );
    }
    let page = w.ledger.history(w.team.id, w.conv.id, 0, 1000).await?;
    assert!(
        page.items
            .iter()
            .all(|i| i.message.publication == Publication::Stored)
    );
    assert_eq!(store.pools.busy_errors(), 0, "no busy error was met");
    Ok(())
}

/// Eight relays race `lease_slots` over 100 due slots: every slot is leased exactly once
/// (no `SKIP LOCKED`: the write transactions are serialised).
async fn racing_relays_lease_each_slot_once() -> Result<(), Failed> {
    let store = store("sqlite::racing_relays_lease_each_slot_once").await;
    let w = Arc::new(world(&store.pools, "remote", 2).await);
    for i in 0..100 {
        let req = request(&w, w.conv.id, i % 2, &format!("r{i}"), "body");
        w.ledger.send(req, t(1)).await?;
    }
    let relays: Vec<_> = (0..8)
        .map(|_| {
            let w = w.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let got = w
                        .ledger
                        .lease_slots(t(2), Duration::from_secs(60), 7)
                        .await
                        .expect("lease");
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|s| s.slot));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for relay in relays {
        all.extend(relay.await?);
    }
    let distinct: HashSet<Uuid> = all.iter().copied().collect();
    assert_eq!(all.len(), 100, "every slot leased once");
    assert_eq!(distinct.len(), 100);
    Ok(())
}
