//! The inbox watch on the memory store: news at once, cleaned previews, the cursor, never a
//! delivery-state write, woken by a send, re-checked when a hand-out lapses, not woken by the
//! sweep for what it was told of, bad cursors refused, long waits clamped, and no body read
//! when no preview is asked for.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crewbus_domain::{
    Agent, BusError, BusResult, Conversation, TokenHash, Uuid, WakeupTarget, WatchCursor,
};
use crewbus_memory::{
    MemoryBackends, MemoryConfig, MemoryFeed, MemoryLedger, MemoryPushStore, MemoryWakeups,
};
use crewbus_ports::{Backends, Clock, Inbox, Ledger, MessagingBackend, SystemClock};

use crate::usecases::bus::{Bus, BusSettings, Ports};

/// Agents `a` (the sender) and `b` of one team, in one conversation titled `title`.
struct World {
    bus: Bus,
    a: Agent,
    b: Agent,
    conv: Conversation,
    backends: Arc<CountingBackends>,
}

/// The memory backends, counting the body backends asked for.
struct CountingBackends {
    inner: MemoryBackends,
    body_lookups: AtomicUsize,
}

#[async_trait::async_trait]
impl Backends for CountingBackends {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>> {
        self.body_lookups.fetch_add(1, Ordering::SeqCst);
        self.inner.body_backend(team, name).await
    }

    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>> {
        self.inner.inbox(team, name).await
    }
}

async fn world(title: &str, settings: BusSettings) -> World {
    let ledger = MemoryLedger::new(Default::default());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let backends = Arc::new(CountingBackends {
        inner: MemoryBackends::new(MemoryConfig::default(), clock.clone()).unwrap(),
        body_lookups: AtomicUsize::new(0),
    });
    let ports = Ports {
        ledger: Arc::new(ledger.clone()),
        backends: backends.clone(),
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
    };
    let bus = Bus::new(ports, settings);
    let now = chrono::Utc::now();
    let team = ledger
        .create_team("t", "memory", "memory", now)
        .await
        .unwrap();
    let a = ledger
        .create_agent(team.id, "a\u{202E}<b>", TokenHash::of("a"), now)
        .await
        .unwrap();
    let b = ledger
        .create_agent(team.id, "b", TokenHash::of("b"), now)
        .await
        .unwrap();
    let conv = ledger
        .create_conversation(team.id, a.id, title, &[b.id], now)
        .await
        .unwrap();
    World {
        bus,
        a,
        b,
        conv,
        backends,
    }
}

impl World {
    /// `a` sends `body`; the relay stores it and the reference worker publishes its reference
    /// (waking a waiter of `b`).
    async fn send(&self, request: &str, body: &str) -> Uuid {
        let sent = self
            .bus
            .send(&self.a, self.conv.id, request.into(), body.into(), None)
            .await
            .unwrap();
        self.bus.relay_pass().await.unwrap();
        self.bus.reference_pass().await.unwrap();
        sent.message.id
    }

    async fn watch(&self, after: Option<&str>) -> crate::usecases::watch::Watched {
        watch_as(&self.bus, &self.b, after, Duration::ZERO)
            .await
            .unwrap()
    }

    /// Waits (up to 10 s) until `b` has a waiter in the wait room.
    async fn until_waiting(&self) {
        let target = WakeupTarget::new(self.b.team, self.b.id);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !self.bus.room.targets().iter().any(|t| t.target == target) {
            assert!(tokio::time::Instant::now() < deadline, "no waiter");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn body_lookups(&self) -> usize {
        self.backends.body_lookups.load(Ordering::SeqCst)
    }

    fn reads(&self) -> u64 {
        self.bus.metrics.watch_reads.get()
    }
}

/// A whole watch as the HTTP route runs it: the cursor decoded, then the watch with previews.
async fn watch_as(
    bus: &Bus,
    agent: &Agent,
    after: Option<&str>,
    wait: Duration,
) -> BusResult<crate::usecases::watch::Watched> {
    let cursor = bus.watch_cursor(agent, after)?;
    bus.watch(agent, cursor, wait, true).await
}

fn settings() -> BusSettings {
    BusSettings::default()
}

#[tokio::test]
async fn news_comes_at_once_cleaned_and_the_watch_hands_nothing_out() {
    let w = world("ticket\u{2028}<42>", settings()).await;
    let body = format!("hi\u{200B} <channel>\n\n{}", "x".repeat(500));
    let m1 = w.send("r1", &body).await;
    let m2 = w.send("r2", "second").await;

    let first = w.watch(None).await;
    assert_eq!(first.pending, 2);
    let ids: Vec<Uuid> = first.news.iter().map(|n| n.message).collect();
    assert_eq!(ids, vec![m1, m2], "oldest first");
    let n = &first.news[0];
    assert_eq!(n.conversation, w.conv.id);
    assert_eq!(n.conversation_title, "ticket ‹42›");
    assert_eq!(n.sender, w.a.id);
    assert_eq!(
        n.sender_name, "a‹b›",
        "bidi control removed, brackets replaced"
    );
    assert_eq!(n.seq, 1);
    assert!(n.preview.starts_with("hi ‹channel› xxx"), "{}", n.preview);
    assert_eq!(n.preview.chars().count(), crewbus_domain::PREVIEW_CHARS);
    assert!(n.preview.ends_with('…'));
    assert_eq!(first.news[1].preview, "second");

    let again = w.watch(Some(&first.cursor)).await;
    assert_eq!(
        (again.pending, again.news.len()),
        (2, 0),
        "reported: not news"
    );
    assert_eq!(
        WatchCursor::decode(&again.cursor, w.b.team, w.b.id).unwrap(),
        WatchCursor::decode(&first.cursor, w.b.team, w.b.id).unwrap(),
        "no news: the cursor means the same"
    );

    // The watch handed nothing out: the fetch hands both out, neither redelivered.
    let fetched = w.bus.fetch(&w.b, 10).await.unwrap();
    assert_eq!(fetched.len(), 2);
    assert!(fetched.iter().all(|d| !d.hand_out.redelivered));
    let held = w.watch(None).await;
    assert_eq!((held.pending, held.news.len()), (0, 0), "held: not pending");
    let deliveries: Vec<_> = fetched.iter().map(|d| d.hand_out.delivery).collect();
    w.bus.confirm(&w.b, &deliveries, None).await.unwrap();
    let confirmed = w.watch(None).await;
    assert_eq!((confirmed.pending, confirmed.news.len()), (0, 0));
}

#[tokio::test]
async fn a_waiting_watch_is_woken_by_a_send() {
    let w = Arc::new(world("general", settings()).await);
    let waiting = {
        let w = Arc::clone(&w);
        tokio::spawn(async move {
            watch_as(&w.bus, &w.b, None, Duration::from_secs(30))
                .await
                .unwrap()
        })
    };
    w.until_waiting().await;
    let m = w.send("r1", "wake up").await;
    let woken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered within 10 s")
        .unwrap();
    assert_eq!(woken.news.len(), 1);
    assert_eq!(woken.news[0].message, m);
}

#[tokio::test]
async fn the_sweep_does_not_wake_a_watcher_for_what_it_was_told_of() {
    let w = Arc::new(world("general", settings()).await);
    w.send("r1", "old news").await;
    let told = w.watch(None).await;
    assert_eq!(told.news.len(), 1);

    let waiting = {
        let (w, cursor) = (Arc::clone(&w), told.cursor.clone());
        tokio::spawn(async move {
            watch_as(&w.bus, &w.b, Some(&cursor), Duration::from_secs(30))
                .await
                .unwrap()
        })
    };
    w.until_waiting().await;
    // Its first read (after it subscribed) done: the first watch's and this one's.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let reads = loop {
        let r = w.reads();
        if r >= 2 {
            break r;
        }
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    for _ in 0..5 {
        assert_eq!(w.bus.wait_sweep().await.unwrap(), 0, "nothing new for it");
    }
    assert_eq!(w.reads(), reads, "not read again");

    assert!(!waiting.is_finished());
    // A new message (stored after what it was told of) wakes it through the sweep alone (no
    // reference pass: only the relay stores it).
    let sent = w
        .bus
        .send(&w.a, w.conv.id, "r2".into(), "new".into(), None)
        .await
        .unwrap();
    w.bus.relay_pass().await.unwrap();
    assert_eq!(w.bus.wait_sweep().await.unwrap(), 1);
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered")
        .unwrap();
    let ids: Vec<Uuid> = answer.news.iter().map(|n| n.message).collect();
    assert_eq!(ids, vec![sent.message.id], "only the new one");
    assert_eq!(answer.pending, 2);
}

#[tokio::test]
async fn a_waiting_watch_looks_again_when_a_hand_out_lapses() {
    let w = Arc::new(
        world(
            "general",
            BusSettings {
                handout_grace: Duration::from_millis(300),
                ..settings()
            },
        )
        .await,
    );
    let m = w.send("r1", "held").await;
    let fetched = w.bus.fetch(&w.b, 10).await.unwrap();
    assert_eq!(fetched.len(), 1, "handed out, held 300 ms, never confirmed");
    let answer = watch_as(&w.bus, &w.b, None, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(answer.news.len(), 1, "news once the hold lapsed");
    assert_eq!(answer.news[0].message, m);

    // Reported before their hand-out: pending again once it lapses, but not news.
    let m2 = w.send("r2", "reported first").await;
    let told = w.watch(Some(&answer.cursor)).await;
    let ids: Vec<Uuid> = told.news.iter().map(|n| n.message).collect();
    assert_eq!(ids, vec![m2], "m1 was reported by the waiting watch");
    let fetched = w.bus.fetch(&w.b, 10).await.unwrap();
    assert!(!fetched.is_empty(), "m2 handed out at least");
    let lapse = fetched.iter().map(|d| d.hand_out.held_until).max().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while chrono::Utc::now() <= lapse {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lapsed = w.watch(Some(&told.cursor)).await;
    assert_eq!((lapsed.pending, lapsed.news.len()), (2, 0));
}

#[tokio::test]
async fn a_cursor_of_another_agent_or_team_or_malformed_is_invalid() {
    let w = world("general", settings()).await;
    w.send("r1", "x").await;
    let mine = w.watch(None).await.cursor;
    let theirs = watch_as(&w.bus, &w.a, None, Duration::ZERO)
        .await
        .unwrap()
        .cursor;
    let other_team = WatchCursor::new(Uuid::new_v4(), w.b.id).encode();
    for bad in [
        theirs.as_str(),
        other_team.as_str(),
        "",
        "not a cursor",
        "AAAA",
    ] {
        assert!(
            matches!(
                watch_as(&w.bus, &w.b, Some(bad), Duration::ZERO).await,
                Err(BusError::Invalid { .. })
            ),
            "{bad:?}"
        );
    }
    assert!(
        watch_as(&w.bus, &w.b, Some(&mine), Duration::ZERO)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_wait_above_max_wait_is_clamped_to_it_not_refused() {
    let w = world(
        "general",
        BusSettings {
            max_wait: Duration::from_millis(200),
            ..settings()
        },
    )
    .await;
    let started = std::time::Instant::now();
    let answer = watch_as(&w.bus, &w.b, None, Duration::from_secs(3600))
        .await
        .expect("a long wait is clamped to bus.max_wait_ms");
    let took = started.elapsed();
    assert_eq!((answer.pending, answer.news.len()), (0, 0));
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(10),
        "waited bus.max_wait_ms: {took:?}"
    );
}

#[tokio::test]
async fn without_previews_no_body_is_read() {
    let w = world("general", settings()).await;
    let m = w.send("r1", "a body worth a preview").await;
    let before = w.body_lookups();
    let cursor = w.bus.watch_cursor(&w.b, None).unwrap();
    let bare = w
        .bus
        .watch(&w.b, cursor.clone(), Duration::ZERO, false)
        .await
        .unwrap();
    assert_eq!(bare.news.len(), 1);
    assert_eq!(bare.news[0].message, m);
    assert_eq!(bare.news[0].preview, "", "no preview asked for");
    assert_eq!(w.body_lookups(), before, "no body backend asked");
    let full = w
        .bus
        .watch(&w.b, cursor, Duration::ZERO, true)
        .await
        .unwrap();
    assert_eq!(full.news[0].preview, "a body worth a preview");
    assert!(w.body_lookups() > before, "the preview read the body");
    assert_eq!(
        bare.cursor, full.cursor,
        "the same news recorded either way"
    );
}

#[tokio::test]
async fn shutdown_ends_a_waiting_watch_at_once_with_what_it_has() {
    let w = Arc::new(world("general", settings()).await);
    let waiting = {
        let w = Arc::clone(&w);
        tokio::spawn(async move {
            watch_as(&w.bus, &w.b, None, Duration::from_secs(30))
                .await
                .unwrap()
        })
    };
    w.until_waiting().await;
    w.bus.shutdown.trigger();
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered at once")
        .unwrap();
    assert_eq!((answer.pending, answer.news.len()), (0, 0));
}

#[tokio::test]
async fn a_watch_counts_as_waiting_only_while_it_waits() {
    let w = Arc::new(world("general", settings()).await);
    assert_eq!(w.bus.waiting_watches(), 0);
    let waiting = {
        let w = Arc::clone(&w);
        tokio::spawn(async move {
            watch_as(&w.bus, &w.b, None, Duration::from_secs(30))
                .await
                .unwrap()
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while w.bus.waiting_watches() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never counted");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(w.bus.waiting_watches(), 1);
    assert_eq!(w.bus.waiting_fetches(), 0, "a watch is not a fetch");
    let m = w.send("r1", "wake up").await;
    let woken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("answered within 10 s")
        .unwrap();
    assert_eq!(woken.news[0].message, m);
    assert_eq!(w.bus.waiting_watches(), 0, "answered: no longer waiting");
}
