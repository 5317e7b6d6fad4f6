//! `SendAllowance` behaviours: each agent's shared send bucket, its chunks, its refill and its
//! bound across two servers.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh ledger, asserting
//! error variants (never text); instants are the behaviour's own ([`crate::ledger::time`]).
//! [`send_allowance_behaviours`] lists them; [`crate::ledger_trials`] registers them.

use std::sync::Arc;

use crewbus_domain::{BusError, RateLimit};
use crewbus_ports::SendAllowance;
use uuid::Uuid;

use crate::LedgerFixture;
use crate::ledger::scene::{REMOTE, scene};
use crate::ledger::time::t;

fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n)
}
use crate::trial::{Behaviour, behaviours};

/// Every send-allowance behaviour, by name.
pub fn send_allowance_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["send_allowance" =>
        a_new_bucket_is_full_and_hands_out_chunks_until_empty,
        an_empty_bucket_refills_at_its_rate_up_to_its_burst,
        buckets_are_per_agent_and_strangers_are_not_found,
        two_servers_share_one_bucket_and_never_take_more_than_it_holds,
    ]
}

fn limit(rate_per_second: u32, burst: u32) -> RateLimit {
    RateLimit {
        rate_per_second,
        burst,
    }
}

fn retry_after(e: Result<u32, BusError>) -> u64 {
    match e {
        Err(BusError::RateLimited {
            retry_after_seconds,
        }) => retry_after_seconds,
        other => panic!("expected RateLimited, got {other:?}"),
    }
}

/// The first take finds a full bucket (`burst` tokens); each take hands out up to the chunk
/// asked for, the last one what is left; an empty bucket is `RateLimited` with the whole
/// seconds until a token is back (at least 1); a take of 0 takes nothing.
pub async fn a_new_bucket_is_full_and_hands_out_chunks_until_empty<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let [a, _] = fx.send_allowances();
    let (team, agent) = (s.team.id, s.a.id);
    let l = limit(1, 12);
    assert_eq!(a.take_tokens(team, agent, l, 0, t(1)).await.unwrap(), 0);
    assert_eq!(a.take_tokens(team, agent, l, 5, t(1)).await.unwrap(), 5);
    assert_eq!(a.take_tokens(team, agent, l, 5, t(1)).await.unwrap(), 5);
    assert_eq!(a.take_tokens(team, agent, l, 5, t(1)).await.unwrap(), 2);
    assert_eq!(retry_after(a.take_tokens(team, agent, l, 5, t(1)).await), 1);
}

/// An emptied bucket refills at `rate_per_second` from the take that emptied it, whole tokens
/// only, never past `burst`; a lowered burst cuts what it holds at once.
pub async fn an_empty_bucket_refills_at_its_rate_up_to_its_burst<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let [a, _] = fx.send_allowances();
    let (team, agent) = (s.team.id, s.a.id);
    let l = limit(2, 6);
    assert_eq!(a.take_tokens(team, agent, l, 10, t(10)).await.unwrap(), 6);
    // 400 ms at 2/s is 0.8 of a token: none yet, and the wait rounds up to 1 s.
    assert_eq!(
        retry_after(a.take_tokens(team, agent, l, 1, t(10) + ms(400)).await),
        1
    );
    // 1.5 s after the emptying take: 3 tokens.
    assert_eq!(
        a.take_tokens(team, agent, l, 10, t(10) + ms(1500))
            .await
            .unwrap(),
        3
    );
    // A long pause refills to the burst, not beyond.
    assert_eq!(
        a.take_tokens(team, agent, l, 100, t(1000)).await.unwrap(),
        6
    );
    // Refilled to 6 again, then read with a burst of 2: 2 at most.
    assert!(matches!(
        a.take_tokens(team, agent, l, 0, t(2000)).await,
        Ok(0)
    ));
    assert_eq!(
        a.take_tokens(team, agent, limit(2, 2), 100, t(2000))
            .await
            .unwrap(),
        2
    );
    // Empty at 1 token per second: the wait for one is 1 s.
    assert_eq!(
        retry_after(a.take_tokens(team, agent, limit(1, 2), 1, t(2000)).await),
        1
    );
}

/// Each agent has a bucket of its own; an agent unknown in the team it is named with (or of
/// another team) is `NotFound`.
pub async fn buckets_are_per_agent_and_strangers_are_not_found<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let [a, _] = fx.send_allowances();
    let team = s.team.id;
    let l = limit(1, 3);
    assert_eq!(a.take_tokens(team, s.a.id, l, 3, t(1)).await.unwrap(), 3);
    assert_eq!(a.take_tokens(team, s.b.id, l, 3, t(1)).await.unwrap(), 3);
    assert!(matches!(
        a.take_tokens(team, s.a.id, l, 1, t(1)).await,
        Err(BusError::RateLimited { .. })
    ));
    assert!(matches!(
        a.take_tokens(team, Uuid::new_v4(), l, 1, t(1)).await,
        Err(BusError::NotFound { .. })
    ));
    let other = s.other_team().await;
    assert!(matches!(
        a.take_tokens(other.id, s.a.id, l, 1, t(1)).await,
        Err(BusError::NotFound { .. })
    ));
}

/// Two servers taking chunks of one agent's bucket at once (8 concurrent takes each, at one
/// instant) never take more than the bucket holds in all: exactly `burst`, the first takes
/// included (the bucket is created once).
pub async fn two_servers_share_one_bucket_and_never_take_more_than_it_holds<
    F: LedgerFixture + ?Sized,
>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let servers = fx.send_allowances();
    let (team, agent) = (s.team.id, s.a.id);
    let l = limit(1, 37);
    let mut takes = Vec::new();
    for round in 0..8 {
        for server in &servers {
            let server: Arc<dyn SendAllowance> = Arc::clone(server);
            takes.push(tokio::spawn(async move {
                let mut got = 0;
                for _ in 0..3 {
                    match server
                        .take_tokens(team, agent, l, 2 + round % 3, t(5))
                        .await
                    {
                        Ok(n) => got += n,
                        Err(BusError::RateLimited { .. }) => {}
                        Err(e) => panic!("take: {e:?}"),
                    }
                }
                got
            }));
        }
    }
    let mut total = 0;
    for take in takes {
        total += take.await.unwrap();
    }
    assert_eq!(
        total, 37,
        "the servers took {total} tokens of a bucket of 37"
    );
}
