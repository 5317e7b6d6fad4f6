//! The ledger refuses a revoked agent whatever the bearer-token cache says: an agent revoked in
//! the ledger directly (as an operator command beside an embedded server does, so this bus hears
//! nothing) still authenticates from the cache within its bound, but its sends, fetches and
//! confirms are refused by the ledger (memory store).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use crewbus::compose::memory_with_clock;
use crewbus::config::Config;
use crewbus_domain::{BusError, DeliveryId};
use crewbus_ports::{Ledger, SystemClock};
use uuid::Uuid;

#[tokio::test]
async fn the_ledger_refuses_a_revoked_senders_send_whatever_the_token_cache_says() {
    let config = Config::default();
    let (composed, parts) = memory_with_clock(&config, Arc::new(SystemClock)).unwrap();
    let b = composed.bus;
    let team = b.add_team("team-c", None, None).await.unwrap();
    let alice = b.add_agent(team.id, "alice").await.unwrap();
    b.add_agent(team.id, "bob").await.unwrap();
    let me = b.authenticate(&alice.token).await.unwrap();
    let conversation = b
        .create_conversation(&me, "c", &["bob".to_owned()])
        .await
        .unwrap();
    // Revoked in the ledger directly, as an operator command beside an embedded server does:
    // this bus hears nothing, and its cache still answers for the token (within the bound).
    parts
        .ledger
        .revoke_agent(team.id, me.id, Utc::now())
        .await
        .unwrap();
    let cached = b.authenticate(&alice.token).await.unwrap();
    assert!(!cached.revoked());
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
    let config = Config::default();
    let (composed, parts) = memory_with_clock(&config, Arc::new(SystemClock)).unwrap();
    let b = composed.bus;
    let team = b.add_team("team-f", None, None).await.unwrap();
    let alice = b.add_agent(team.id, "alice").await.unwrap();
    b.add_agent(team.id, "bob").await.unwrap();
    let me = b.authenticate(&alice.token).await.unwrap();
    parts
        .ledger
        .revoke_agent(team.id, me.id, Utc::now())
        .await
        .unwrap();
    let cached = b.authenticate(&alice.token).await.unwrap();
    assert!(!cached.revoked(), "the cache still answers for the token");
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
