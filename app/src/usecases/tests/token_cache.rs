//! The token cache's use cases: what it serves, when it drops a token, and what the ledger
//! refuses whatever it says.

use super::*;

/// A bus whose ledger answers `agent_by_token` with `answers` in turn (one call each: a further
/// call panics) and `revoke_agent` with the agent revoked.
fn token_bus(answers: Vec<Result<Agent, BusError>>, cache: Duration) -> (Bus, Agent) {
    let alice = agent(Uuid::new_v4());
    let mut ledger = MockLedger::new();
    let mut seq = Sequence::new();
    for answer in answers {
        ledger
            .expect_agent_by_token()
            .with(eq(TokenHash::of("t")))
            .times(1)
            .in_sequence(&mut seq)
            .returning(move |_| answer.clone());
    }
    let revoked = Agent {
        revoked_at: Some(t0()),
        ..alice.clone()
    };
    ledger
        .expect_revoke_agent()
        .returning(move |_, _, _| Ok(revoked.clone()));
    let mut b = bus(ledger, MockBackends::new());
    b.settings = Arc::new(BusSettings {
        token_cache: cache,
        ..(*b.settings).clone()
    });
    b.tokens = Arc::new(crate::usecases::token_cache::TokenCache::new(
        cache,
        crate::usecases::token_cache::TOKEN_CACHE_ENTRIES,
    ));
    (b, alice)
}

#[tokio::test(start_paused = true)]
async fn a_cached_token_serves_requests_without_the_ledger_until_the_bound() {
    let alice = agent(Uuid::new_v4());
    let (b, _) = token_bus(
        vec![Ok(alice.clone()), Ok(alice.clone())],
        Duration::from_millis(1_000),
    );
    assert_eq!(b.authenticate("t").await.unwrap().id, alice.id);
    tokio::time::advance(Duration::from_millis(999)).await;
    // Served from the cache: the mock allows one call per answer, in turn.
    assert_eq!(b.authenticate("t").await.unwrap().id, alice.id);
    tokio::time::advance(Duration::from_millis(1)).await;
    // Expired: the second answer is asked for.
    assert_eq!(b.authenticate("t").await.unwrap().id, alice.id);
    assert!(matches!(
        b.authenticate("").await,
        Err(BusError::Unauthenticated)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_revocation_through_the_bus_drops_the_token_at_once() {
    let alice = agent(Uuid::new_v4());
    let (b, _) = token_bus(
        vec![Ok(alice.clone()), Err(BusError::Unauthenticated)],
        Duration::from_millis(1_000),
    );
    b.authenticate("t").await.unwrap();
    b.revoke_agent(alice.team, alice.id).await.unwrap();
    // No time passes: the next request goes to the ledger, which refuses it (401).
    assert!(matches!(
        b.authenticate("t").await,
        Err(BusError::Unauthenticated)
    ));
}

#[tokio::test(start_paused = true)]
async fn misses_and_revoked_agents_are_not_cached_and_zero_disables_the_cache() {
    let alice = agent(Uuid::new_v4());
    let revoked = Agent {
        revoked_at: Some(t0()),
        ..alice.clone()
    };
    let (b, _) = token_bus(
        vec![
            Err(BusError::Unauthenticated),
            Ok(revoked),
            Ok(alice.clone()),
            Ok(alice.clone()),
        ],
        Duration::ZERO,
    );
    for _ in 0..2 {
        assert!(matches!(
            b.authenticate("t").await,
            Err(BusError::Unauthenticated)
        ));
    }
    // token_cache_ms = 0: every request asks the ledger (two answers for two requests).
    b.authenticate("t").await.unwrap();
    b.authenticate("t").await.unwrap();

    let (b, _) = token_bus(
        vec![Err(BusError::Unauthenticated), Ok(alice.clone())],
        Duration::from_millis(1_000),
    );
    assert!(b.authenticate("t").await.is_err());
    // The miss was not kept: the ledger is asked again (and now knows the token).
    b.authenticate("t").await.unwrap();
    b.authenticate("t").await.unwrap();
}

#[tokio::test]
async fn a_wake_up_from_the_port_drops_the_agents_token() {
    use crewbus_domain::WakeupTarget;
    use crewbus_ports::Wakeups;
    let alice = agent(Uuid::new_v4());
    let wakeups = crewbus_memory::MemoryWakeups::new();
    let (mut b, _) = token_bus(
        vec![Ok(alice.clone()), Ok(alice.clone())],
        Duration::from_millis(1_000),
    );
    b.ports.wakeups = Arc::new(wakeups.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let until = |what: &'static str, done: &dyn Fn() -> bool| {
        assert!(std::time::Instant::now() < deadline, "{what}");
        done()
    };
    // Another agent's entry, to see the listener start (it drops everything when it starts:
    // wake-ups may have been missed) and then to see it kept by alice's wake-up.
    let mut bob = agent(alice.team);
    bob.token_hash = TokenHash::of("bob");
    let put_bob = |b: &Bus| {
        b.tokens.insert(bob.token_hash, &bob, b.tokens.ticket());
    };
    put_bob(&b);
    let shutdown = crate::shutdown::Shutdown::new();
    let listener = tokio::spawn(crate::usecases::wait::run_listener(
        b.clone(),
        shutdown.clone(),
    ));
    while !until("the listener never started", &|| b.tokens.len() == 0) {
        tokio::task::yield_now().await;
    }
    put_bob(&b);
    b.authenticate("t").await.unwrap(); // the first answer, now cached
    assert_eq!(b.tokens.len(), 2);
    // A wake-up for alice from another server (through the port, not this bus's revoke).
    wakeups
        .notify(&[WakeupTarget::new(alice.team, alice.id)])
        .await
        .unwrap();
    while !until("the wake-up never dropped the token", &|| {
        b.tokens.len() == 1
    }) {
        tokio::task::yield_now().await;
    }
    assert!(b.tokens.get(&bob.token_hash).is_some(), "bob's entry stays");
    // Alice's next request asks the ledger again (the second answer).
    b.authenticate("t").await.unwrap();
    shutdown.trigger();
    listener.await.unwrap();
}
