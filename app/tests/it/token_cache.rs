//! The ledger refuses a revoked agent whatever the bearer-token cache says: an agent revoked in
//! the ledger directly (as an operator command beside an embedded server does, so this bus hears
//! nothing) still authenticates from the cache within its bound, but its sends, fetches and
//! confirms are refused by the ledger (memory store).

use std::sync::Arc;
use std::time::Duration;

use crate::common::memory_with_clock;
use chrono::Utc;
use crewbus::bus::Bus;
use crewbus::compose::MemoryParts;
use crewbus::config::Config;
use crewbus_domain::{Agent, BusError, DeliveryId};
use crewbus_ports::{Ledger, SystemClock};
use uuid::Uuid;

/// A memory bus with team `team` of alice and bob; alice authenticated once (so the token
/// cache holds her). Returns the bus, its memory parts, alice and her token.
async fn team_of_alice_and_bob(team: &str) -> (Bus, MemoryParts, Agent, String) {
    let config = Config::default();
    let (composed, parts) = memory_with_clock(&config, Arc::new(SystemClock)).unwrap();
    let b = composed.bus;
    let team = b.add_team(team, None, None).await.unwrap();
    let alice = b.add_agent(team.id, "alice").await.unwrap();
    b.add_agent(team.id, "bob").await.unwrap();
    let me = b.authenticate(&alice.token).await.unwrap();
    (b, parts, me, alice.token)
}

/// Revokes `me` in the ledger directly, as an operator command beside an embedded server does:
/// the bus hears nothing, and its cache still answers for the token (within the bound). Returns
/// `me` as the bus authenticates the token now.
async fn revoke_behind_the_cache(b: &Bus, parts: &MemoryParts, me: &Agent, token: &str) -> Agent {
    parts
        .ledger
        .revoke_agent(me.team, me.id, Utc::now())
        .await
        .unwrap();
    let cached = b.authenticate(token).await.unwrap();
    assert!(!cached.revoked(), "the cache still answers for the token");
    cached
}

#[tokio::test]
async fn the_ledger_refuses_a_revoked_senders_send_whatever_the_token_cache_says() {
    let (b, parts, me, token) = team_of_alice_and_bob("team-c").await;
    let conversation = b
        .create_conversation(&me, "c", &["bob".to_owned()])
        .await
        .unwrap();
    let cached = revoke_behind_the_cache(&b, &parts, &me, &token).await;
    let refused = b
        .send(&cached, conversation.id, "r-1".into(), "hi".into(), None)
        .await;
    assert!(
        matches!(refused, Err(BusError::Forbidden { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn the_ledger_refuses_a_revoked_agents_fetch_and_confirm_whatever_the_token_cache_says() {
    let (b, parts, me, token) = team_of_alice_and_bob("team-f").await;
    let cached = revoke_behind_the_cache(&b, &parts, &me, &token).await;
    // A first fetch runs the ledger top-up, which the ledger refuses.
    let fetched = b.fetch(&cached, 10).await;
    assert!(
        matches!(fetched, Err(BusError::Unauthenticated)),
        "{fetched:?}"
    );
    let waited = b
        .fetch_waiting(&cached, 10, Duration::from_millis(50))
        .await;
    assert!(
        matches!(waited, Err(BusError::Unauthenticated)),
        "{waited:?}"
    );
    let confirmed = b
        .confirm(&cached, &[DeliveryId(Uuid::new_v4())], None)
        .await;
    assert!(
        matches!(confirmed, Err(BusError::Unauthenticated)),
        "{confirmed:?}"
    );
}
