//! `Search` behaviours: the backlog of unindexed messages, indexing (idempotent, title-only for a
//! body gone), ranking of a fixed corpus, membership scoping, paging, snippets, the query
//! syntax, retention leaving the index, and refused queries.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty ledger,
//! asserting error variants (never text); instants are the behaviour's own
//! ([`crate::ledger::time`]). The corpus is built so every ranker agrees (Postgres
//! `ts_rank_cd`, SQLite `bm25`, memory's occurrence count): bodies of equal length, a term more
//! often in one than another, titles of similar length. [`search_behaviours`] lists them;
//! [`crate::ledger_trials`] registers them with the ledger's.

use std::collections::HashSet;

use crewbus_domain::{
    Agent, BusError, IndexEntry, IndexPosition, MAX_SEARCH_DEPTH, Message, SearchPage, SearchQuery,
    SendRequest, Settlement, SlotOutcome, Uuid,
};
use crewbus_ports::Search;

use crate::LedgerFixture;
use crate::ledger::scene::{LEASE, REMOTE, Scene, locator_for, scene};
use crate::ledger::time::t;
use crate::trial::{Behaviour, behaviours};

/// Every search behaviour, by name.
pub fn search_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["search" =>
        the_backlog_lists_stored_messages_until_they_are_indexed,
        a_message_is_found_only_once_indexed_and_indexing_is_idempotent,
        ranking_follows_occurrences_then_newest_first,
        a_title_match_counts_below_a_body_match,
        an_agent_finds_only_its_conversations,
        pages_have_neither_duplicates_nor_gaps,
        only_the_matches_indexed_last_are_ranked,
        snippets_mark_the_matched_words,
        phrases_and_exclusions_narrow_the_hits,
        retention_removes_what_it_removed_from_the_index,
        a_body_gone_is_found_by_its_title,
        bad_queries_are_invalid,
    ]
}

/// Sends `body` from `from` in the scene's conversation at `t(at)` and stores it then.
async fn stored(s: &Scene, from: &Agent, body: &str, at: i64) -> Message {
    s.send_stored(
        from,
        &format!("q{at}-{}", Uuid::new_v4().simple()),
        body,
        t(at),
    )
    .await
}

/// Indexes `messages` with `bodies`, expecting each one indexed.
async fn index(search: &dyn Search, items: &[(&Message, Option<&str>)], at: i64) {
    let entries: Vec<IndexEntry> = items
        .iter()
        .map(|(m, body)| IndexEntry {
            message: m.id,
            body: body.map(str::to_owned),
        })
        .collect();
    let done = search.index(&entries, t(at)).await.expect("index");
    assert_eq!(done, items.len() as u64, "every entry indexed");
}

/// The first page of up to 100 hits of `text` for `agent`.
async fn find(search: &dyn Search, agent: &Agent, text: &str) -> SearchPage {
    search
        .search(
            agent,
            &SearchQuery {
                limit: 100,
                ..SearchQuery::new(text)
            },
        )
        .await
        .expect("search")
}

/// The hits' message ids, in order.
fn ids(page: &SearchPage) -> Vec<Uuid> {
    page.hits.iter().map(|h| h.message).collect()
}

/// The backlog holds stored, unretained, unindexed messages ordered by stored time and id, from a
/// position on; pending ones are not in it, and indexed ones leave it.
pub async fn the_backlog_lists_stored_messages_until_they_are_indexed<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    assert!(search.unindexed(None, 100).await.unwrap().is_empty());
    let m1 = stored(&s, &s.a, "first", 1).await;
    let m2 = stored(&s, &s.b, "second", 2).await;
    let m3 = stored(&s, &s.a, "third", 3).await;
    let pending = s.send(&s.a, "pending", "not stored yet", t(4)).await;
    let all: Vec<Uuid> = search
        .unindexed(None, 100)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(all, [m1.id, m2.id, m3.id]);
    assert!(!all.contains(&pending.id));
    let first = search.unindexed(None, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, m1.id);
    assert_eq!(first[0].stored_at, Some(t(1)));
    let next = search
        .unindexed(IndexPosition::after(&first[0]), 100)
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|m| m.id).collect::<Vec<_>>(),
        [m2.id, m3.id]
    );
    index(&*search, &[(&m2, Some("second"))], 5).await;
    let left: Vec<Uuid> = search
        .unindexed(None, 100)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(left, [m1.id, m3.id]);
    for limit in [0, crewbus_domain::MAX_PAGE + 1] {
        assert!(matches!(
            search.unindexed(None, limit).await,
            Err(BusError::Invalid { .. })
        ));
    }
}

/// A stored message is not found before it is indexed; indexing it twice finds it once; entries
/// for unknown or pending messages are skipped; an empty batch is 0.
pub async fn a_message_is_found_only_once_indexed_and_indexing_is_idempotent<
    F: LedgerFixture + ?Sized,
>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let m = stored(&s, &s.a, "the quarterly kiwi report", 1).await;
    assert!(find(&*search, &s.b, "kiwi").await.hits.is_empty());
    index(&*search, &[(&m, Some("the quarterly kiwi report"))], 2).await;
    index(&*search, &[(&m, Some("the quarterly kiwi report"))], 3).await;
    let page = find(&*search, &s.b, "kiwi").await;
    assert_eq!(ids(&page), [m.id]);
    let hit = &page.hits[0];
    assert_eq!(
        (hit.conversation, hit.conversation_title.as_str(), hit.seq),
        (s.conv.id, "general", m.seq)
    );
    assert_eq!((hit.sender, hit.sent_at), (s.a.id, t(1)));
    assert!(hit.rank > 0.0);
    assert_eq!(page.next_offset, None);
    // The sender finds its own message too.
    assert_eq!(ids(&find(&*search, &s.a, "quarterly").await), [m.id]);
    let pending = s.send(&s.a, "p", "kiwi pending", t(4)).await;
    let skipped = [
        IndexEntry {
            message: Uuid::new_v4(),
            body: Some("kiwi".into()),
        },
        IndexEntry {
            message: pending.id,
            body: Some("kiwi pending".into()),
        },
    ];
    assert_eq!(search.index(&skipped, t(5)).await.unwrap(), 0);
    assert_eq!(search.index(&[], t(5)).await.unwrap(), 0);
    assert_eq!(ids(&find(&*search, &s.b, "kiwi").await), [m.id]);
    let too_many: Vec<IndexEntry> = (0..=crewbus_domain::MAX_PAGE)
        .map(|_| IndexEntry {
            message: Uuid::new_v4(),
            body: None,
        })
        .collect();
    assert!(matches!(
        search.index(&too_many, t(6)).await,
        Err(BusError::Invalid { .. })
    ));
}

/// For one word, more occurrences rank higher; equal documents rank newest first; a document
/// without the word is not a hit; case does not matter.
pub async fn ranking_follows_occurrences_then_newest_first<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let bodies = [
        "kiwi plum plum plum",
        "Kiwi kiwi KIWI plum",
        "fig plum plum plum",
        "kiwi kiwi plum plum",
        "kiwi plum plum plum",
        "fig fig plum plum",
        "fig plum fig plum",
        "plum fig fig fig",
        "plum fig plum fig",
        "fig fig fig plum",
    ];
    let mut sent = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        sent.push(stored(&s, &s.a, body, i as i64 + 1).await);
    }
    let items: Vec<(&Message, Option<&str>)> =
        sent.iter().zip(bodies).map(|(m, b)| (m, Some(b))).collect();
    index(&*search, &items, 20).await;
    let page = find(&*search, &s.b, "KIWI").await;
    assert_eq!(
        ids(&page),
        [sent[1].id, sent[3].id, sent[4].id, sent[0].id],
        "3 occurrences, 2, then the two with 1, newest first"
    );
    assert!(page.hits.windows(2).all(|w| w[0].rank >= w[1].rank));
    assert!(page.hits[0].rank > page.hits[1].rank && page.hits[1].rank > page.hits[2].rank);
}

/// A word in a conversation's title finds its messages, below a message holding it in its body.
pub async fn a_title_match_counts_below_a_body_match<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let notes = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "kiwi notes", &[s.b.id], t(0))
        .await
        .unwrap();
    let in_title = s
        .ledger
        .send(
            crewbus_domain::SendRequest {
                conversation: notes.id,
                ..s.request(&s.a, "title", "plum plum plum plum", None)
            },
            t(1),
        )
        .await
        .unwrap()
        .message;
    s.store_all(t(1)).await;
    let in_title = s.message(in_title.id).await;
    let in_body = stored(&s, &s.a, "kiwi plum plum plum", 2).await;
    let mut others = Vec::new();
    for i in 0..4 {
        others.push(stored(&s, &s.a, "fig plum plum plum", 3 + i).await);
    }
    let mut items = vec![
        (&in_title, Some("plum plum plum plum")),
        (&in_body, Some("kiwi plum plum plum")),
    ];
    items.extend(others.iter().map(|m| (m, Some("fig plum plum plum"))));
    index(&*search, &items, 20).await;
    let page = find(&*search, &s.b, "kiwi").await;
    assert_eq!(ids(&page), [in_body.id, in_title.id]);
    assert_eq!(page.hits[1].conversation_title, "kiwi notes");
    assert!(page.hits[0].rank > page.hits[1].rank);
    // A word of the title and one of the body, together.
    assert_eq!(
        ids(&find(&*search, &s.b, "notes plum").await),
        [in_title.id]
    );
}

/// An agent finds messages of the conversations it is a member of only; another team's agent
/// finds nothing; naming a conversation it is not in is `NotFound`, one it is in narrows.
pub async fn an_agent_finds_only_its_conversations<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let private = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "private", &[s.b.id], t(0))
        .await
        .unwrap();
    let open = stored(&s, &s.a, "kiwi for everyone", 1).await;
    let secret = s
        .ledger
        .send(
            crewbus_domain::SendRequest {
                conversation: private.id,
                ..s.request(&s.a, "secret", "kiwi for two", None)
            },
            t(2),
        )
        .await
        .unwrap()
        .message;
    s.store_all(t(2)).await;
    let secret = s.message(secret.id).await;
    index(
        &*search,
        &[
            (&open, Some("kiwi for everyone")),
            (&secret, Some("kiwi for two")),
        ],
        3,
    )
    .await;
    assert_eq!(
        ids(&find(&*search, &s.b, "kiwi").await),
        [secret.id, open.id]
    );
    assert_eq!(ids(&find(&*search, &s.c, "kiwi").await), [open.id]);
    let other = s.other_team().await;
    let stranger = s.agent_of(&other, "stranger").await;
    assert!(find(&*search, &stranger, "kiwi").await.hits.is_empty());
    let narrowed = search
        .search(
            &s.b,
            &SearchQuery {
                conversation: Some(private.id),
                ..SearchQuery::new("kiwi")
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&narrowed), [secret.id]);
    for (agent, conversation) in [
        (&s.c, private.id),
        (&stranger, s.conv.id),
        (&s.b, Uuid::new_v4()),
    ] {
        let asked = SearchQuery {
            conversation: Some(conversation),
            ..SearchQuery::new("kiwi")
        };
        assert!(matches!(
            search.search(agent, &asked).await,
            Err(BusError::NotFound { .. })
        ));
    }
}

/// Pages of a fixed index, followed by `next_offset`, hold every hit once, in order.
pub async fn pages_have_neither_duplicates_nor_gaps<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let mut sent = Vec::new();
    for i in 0..7 {
        sent.push(stored(&s, &s.a, "paging kiwi", i + 1).await);
    }
    let items: Vec<(&Message, Option<&str>)> =
        sent.iter().map(|m| (m, Some("paging kiwi"))).collect();
    index(&*search, &items, 20).await;
    let mut seen = Vec::new();
    let mut query = SearchQuery {
        limit: 3,
        ..SearchQuery::new("kiwi")
    };
    let mut pages = 0;
    loop {
        let page = search.search(&s.b, &query).await.unwrap();
        assert!(page.hits.len() <= 3);
        seen.extend(ids(&page));
        pages += 1;
        match page.next_offset {
            Some(next) => query.offset = next,
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let newest_first: Vec<Uuid> = sent.iter().rev().map(|m| m.id).collect();
    assert_eq!(seen, newest_first, "equal ranks: newest first, each once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7);
}

/// A search ranks the [`MAX_SEARCH_DEPTH`] matches indexed last only: a message indexed before
/// them that would rank first is not among them, even indexed again, and pages end at that
/// depth; a narrower search finds it.
pub async fn only_the_matches_indexed_last_are_ranked<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let oldest = stored(&s, &s.a, "kiwi kiwi kiwi", 1).await;
    index(&*search, &[(&oldest, Some("kiwi kiwi kiwi"))], 2).await;
    let depth = MAX_SEARCH_DEPTH as usize;
    let requests: Vec<SendRequest> = (0..depth)
        .map(|i| s.request(&s.a, &format!("newer-{i}"), "kiwi plum", None))
        .collect();
    let sent = s.ledger.send_batch(&requests, t(3)).await.unwrap();
    let newer: Vec<Uuid> = sent.into_iter().map(|r| r.unwrap().message.id).collect();
    let slots = s.ledger.lease_slots(t(3), LEASE, depth).await.unwrap();
    let settlements: Vec<Settlement> = slots
        .iter()
        .map(|slot| Settlement {
            slot: slot.slot,
            generation: slot.generation,
            outcome: SlotOutcome::Confirmed {
                locator: locator_for(slot.envelope.message_id),
            },
        })
        .collect();
    s.ledger.settle(&settlements, t(3)).await.unwrap();
    let entries: Vec<IndexEntry> = newer
        .iter()
        .map(|id| IndexEntry {
            message: *id,
            body: Some("kiwi plum".into()),
        })
        .collect();
    assert_eq!(search.index(&entries, t(4)).await.unwrap(), depth as u64);
    // Indexed again, it keeps its place.
    index(&*search, &[(&oldest, Some("kiwi kiwi kiwi"))], 5).await;
    let mut seen = HashSet::new();
    let mut query = SearchQuery {
        limit: crewbus_domain::MAX_SEARCH_LIMIT,
        ..SearchQuery::new("kiwi")
    };
    loop {
        let page = search.search(&s.b, &query).await.unwrap();
        seen.extend(ids(&page));
        match page.next_offset {
            Some(next) => query.offset = next,
            None => break,
        }
    }
    assert_eq!(seen.len(), depth);
    assert!(
        !seen.contains(&oldest.id),
        "indexed before the last {depth} matches"
    );
    assert_eq!(ids(&find(&*search, &s.b, "kiwi -plum").await), [oldest.id]);
}

/// A snippet is the body's text around the match, the matched words marked, as plain segments.
pub async fn snippets_mark_the_matched_words<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let body = "The <b>ripe</b> Kiwi is here & the plum too";
    let m = stored(&s, &s.a, body, 1).await;
    index(&*search, &[(&m, Some(body))], 2).await;
    let page = find(&*search, &s.b, "kiwi plum").await;
    let snippet = &page.hits[0].snippet;
    let marked: Vec<&str> = snippet
        .iter()
        .filter(|x| x.matched)
        .map(|x| x.text.as_str())
        .collect();
    assert_eq!(marked, ["Kiwi", "plum"]);
    let whole: String = snippet.iter().map(|x| x.text.as_str()).collect();
    assert_eq!(
        whole, body,
        "the text as it is, markup-like characters included"
    );
}

/// A quoted phrase needs its words next to each other in order; `-` excludes a word or phrase.
pub async fn phrases_and_exclusions_narrow_the_hits<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let bodies = [
        "we rolled back the deploy",
        "back then we rolled it",
        "rolled back staging first",
        "fixed deliver.rs today",
    ];
    let mut sent = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        sent.push(stored(&s, &s.a, body, i as i64 + 1).await);
    }
    let items: Vec<(&Message, Option<&str>)> =
        sent.iter().zip(bodies).map(|(m, b)| (m, Some(b))).collect();
    index(&*search, &items, 20).await;
    let set = |p: &SearchPage| ids(p).into_iter().collect::<HashSet<_>>();
    assert_eq!(
        set(&find(&*search, &s.b, "rolled back").await),
        HashSet::from([sent[0].id, sent[1].id, sent[2].id])
    );
    assert_eq!(
        set(&find(&*search, &s.b, "\"rolled back\"").await),
        HashSet::from([sent[0].id, sent[2].id])
    );
    assert_eq!(
        ids(&find(&*search, &s.b, "\"rolled back\" -staging").await),
        [sent[0].id]
    );
    assert_eq!(
        ids(&find(&*search, &s.b, "rolled -\"rolled back\"").await),
        [sent[1].id]
    );
    assert_eq!(ids(&find(&*search, &s.b, "DELIVER.RS").await), [sent[3].id]);
    // Store query syntax in the text is only text.
    for text in [
        "rolled OR fixed",
        "rolled & !back",
        "rolled NOT back",
        "back*",
        "\"rolled",
    ] {
        let page = find(&*search, &s.b, text).await;
        assert!(page.hits.len() <= 4, "{text:?}");
    }
    assert!(
        find(&*search, &s.b, "rolled OR fixed")
            .await
            .hits
            .is_empty()
    );
}

/// Messages whose bodies retention removed leave the index, are not in the backlog, and are not
/// indexed again.
pub async fn retention_removes_what_it_removed_from_the_index<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let old = stored(&s, &s.a, "old kiwi", 1).await;
    let unindexed_old = stored(&s, &s.a, "old unindexed kiwi", 2).await;
    let new = stored(&s, &s.a, "new kiwi", 20).await;
    index(
        &*search,
        &[(&old, Some("old kiwi")), (&new, Some("new kiwi"))],
        21,
    )
    .await;
    assert_eq!(ids(&find(&*search, &s.b, "kiwi").await), [new.id, old.id]);
    assert_eq!(
        s.ledger
            .mark_retained(s.team.id, REMOTE, t(10), t(30))
            .await
            .unwrap(),
        2
    );
    assert_eq!(ids(&find(&*search, &s.b, "kiwi").await), [new.id]);
    assert!(search.unindexed(None, 100).await.unwrap().is_empty());
    let again = [
        IndexEntry {
            message: old.id,
            body: Some("old kiwi".into()),
        },
        IndexEntry {
            message: unindexed_old.id,
            body: Some("old unindexed kiwi".into()),
        },
    ];
    assert_eq!(search.index(&again, t(31)).await.unwrap(), 0);
    assert_eq!(ids(&find(&*search, &s.b, "kiwi").await), [new.id]);
}

/// A message indexed without its body (gone, or unreadable for good) is found by its
/// conversation's title, with an empty snippet, and not by its body's words.
pub async fn a_body_gone_is_found_by_its_title<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let m = stored(&s, &s.a, "kiwi", 1).await;
    index(&*search, &[(&m, None)], 2).await;
    assert!(search.unindexed(None, 100).await.unwrap().is_empty());
    assert!(find(&*search, &s.b, "kiwi").await.hits.is_empty());
    let page = find(&*search, &s.b, "GENERAL").await;
    assert_eq!(ids(&page), [m.id]);
    assert!(page.hits[0].snippet.is_empty());
}

/// Queries without a word to find, too long, with a bad limit or too deep are `Invalid`.
pub async fn bad_queries_are_invalid<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let search = fx.search();
    let text = |t: &str| SearchQuery::new(t);
    let bad = [
        text(""),
        text("   "),
        text("-kiwi"),
        text("?!"),
        text(&"k".repeat(crewbus_domain::MAX_SEARCH_TEXT_CHARS + 1)),
        SearchQuery {
            limit: 0,
            ..text("kiwi")
        },
        SearchQuery {
            limit: crewbus_domain::MAX_SEARCH_LIMIT + 1,
            ..text("kiwi")
        },
        SearchQuery {
            offset: crewbus_domain::MAX_SEARCH_DEPTH,
            ..text("kiwi")
        },
    ];
    for q in bad {
        assert!(
            matches!(search.search(&s.a, &q).await, Err(BusError::Invalid { .. })),
            "{q:?}"
        );
    }
}
