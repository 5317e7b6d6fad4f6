//! `Leases` behaviours: grants and conflicts, fencing tokens, expiry, renewal and release, the
//! fencing check, listings, run records, the ends that revocation and sealing bring, team
//! scoping, and two servers racing for one claim.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty ledger,
//! asserting error variants (never text); instants are the behaviour's own
//! ([`crate::ledger::time`]). [`leases_behaviours`] lists them; [`crate::ledger_trials`]
//! registers them with the ledger's. Those where leases meet the rest of the ledger (runs,
//! revocation, teams, two servers) are in `ends`.

use std::time::Duration;

use crewbus_domain::{
    Acquired, BusError, FencingToken, Lease, LeaseClaim, LeaseEnd, LeaseEventKind, LeaseFilter,
    LeaseMode,
};

use crate::LedgerFixture;
use crate::ledger::scene::{REMOTE, scene};
use crate::ledger::time::t;
use crate::trial::{Behaviour, behaviours};

mod ends;

pub use ends::{
    a_revocation_racing_a_first_acquire_leaves_no_live_lease,
    a_run_records_its_leases_and_its_seal_ends_them, another_teams_leases_are_not_found,
    revocation_ends_the_agents_leases, two_servers_never_grant_conflicting_leases,
};

/// Every lease behaviour, by name.
pub fn leases_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["leases" =>
        acquire_grants_or_names_the_conflicting_holders,
        tokens_grow_per_team_with_every_grant,
        a_lapsed_lease_frees_its_claim_and_the_sweep_records_it,
        renew_and_release_follow_holder_and_liveness,
        check_fences_only_the_holders_live_covering_token,
        listings_filter_by_agent_and_overlap,
        a_run_records_its_leases_and_its_seal_ends_them,
        revocation_ends_the_agents_leases,
        another_teams_leases_are_not_found,
        two_servers_never_grant_conflicting_leases,
        a_revocation_racing_a_first_acquire_leaves_no_live_lease,
    ]
}

/// A claim on `pattern` in `mode`.
pub(crate) fn claim(pattern: &str, mode: LeaseMode) -> LeaseClaim {
    LeaseClaim {
        pattern: pattern.parse().expect("a valid pattern"),
        mode,
    }
}

pub(crate) const TTL: Duration = Duration::from_secs(60);

/// Expects a grant.
pub(crate) fn granted(a: Acquired) -> Lease {
    match a {
        Acquired::Granted(l) => l,
        Acquired::Conflict(c) => panic!("expected a grant, got conflicts {c:?}"),
    }
}

/// Expects conflicts.
pub(crate) fn conflicts(a: Acquired) -> Vec<Lease> {
    match a {
        Acquired::Conflict(c) => c,
        Acquired::Granted(l) => panic!("expected a conflict, got a grant {l:?}"),
    }
}

/// An exclusive lease conflicts with any overlapping claim of another agent, a shared one only
/// with exclusive claims; the conflicts name the holders (agent, pattern, expiry) by token and
/// nothing is granted; an agent's own leases never conflict with its claims.
pub async fn acquire_grants_or_names_the_conflicting_holders<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let src = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("src/**", LeaseMode::Exclusive),
            TTL,
            None,
            t(1),
        )
        .await
        .unwrap(),
    );
    assert_eq!(src.agent, s.a.id);
    assert_eq!(src.agent_name, "a");
    assert_eq!(src.acquired_at, t(1));
    assert_eq!(src.expires_at, t(61));
    assert_eq!(src.ended, None);
    let got = conflicts(
        l.acquire(
            team,
            s.b.id,
            &claim("src/a.rs", LeaseMode::Shared),
            TTL,
            None,
            t(2),
        )
        .await
        .unwrap(),
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, src.id);
    assert_eq!(got[0].agent, s.a.id);
    assert_eq!(got[0].claim.pattern.as_str(), "src/**");
    assert_eq!(got[0].expires_at, t(61));
    // Shared beside shared; an exclusive claim then meets both shared holders.
    let d1 = granted(
        l.acquire(
            team,
            s.b.id,
            &claim("docs/**", LeaseMode::Shared),
            TTL,
            None,
            t(3),
        )
        .await
        .unwrap(),
    );
    let d2 = granted(
        l.acquire(
            team,
            s.c.id,
            &claim("docs/*.md", LeaseMode::Shared),
            TTL,
            None,
            t(3),
        )
        .await
        .unwrap(),
    );
    let got = conflicts(
        l.acquire(
            team,
            s.a.id,
            &claim("docs/a.md", LeaseMode::Exclusive),
            TTL,
            None,
            t(4),
        )
        .await
        .unwrap(),
    );
    let ids: Vec<_> = got.iter().map(|x| x.id).collect();
    assert_eq!(ids, vec![d1.id, d2.id], "by token");
    // Disjoint claims are granted; the holder's own overlapping claim too.
    granted(
        l.acquire(
            team,
            s.b.id,
            &claim("tests/**", LeaseMode::Exclusive),
            TTL,
            None,
            t(5),
        )
        .await
        .unwrap(),
    );
    granted(
        l.acquire(
            team,
            s.a.id,
            &claim("src/a.rs", LeaseMode::Exclusive),
            TTL,
            None,
            t(5),
        )
        .await
        .unwrap(),
    );
    let live = l.leases(team, &LeaseFilter::default(), t(5)).await.unwrap();
    assert_eq!(live.len(), 5, "conflicts wrote nothing");
}

/// Every grant takes the next token of its team's counter: strictly increasing within a team
/// whoever is granted, never reused after a release, counted per team; a conflict takes none.
pub async fn tokens_grow_per_team_with_every_grant<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let mut tokens = Vec::new();
    for (i, agent) in [&s.a, &s.b, &s.c, &s.a].into_iter().enumerate() {
        let lease = granted(
            l.acquire(
                team,
                agent.id,
                &claim(&format!("f{i}"), LeaseMode::Exclusive),
                TTL,
                None,
                t(1),
            )
            .await
            .unwrap(),
        );
        tokens.push(lease.token);
        if i == 1 {
            l.release(team, Some(agent.id), lease.id, t(1))
                .await
                .unwrap();
        }
    }
    conflicts(
        l.acquire(
            team,
            s.b.id,
            &claim("f0", LeaseMode::Shared),
            TTL,
            None,
            t(2),
        )
        .await
        .unwrap(),
    );
    let next = granted(
        l.acquire(
            team,
            s.b.id,
            &claim("g", LeaseMode::Shared),
            TTL,
            None,
            t(2),
        )
        .await
        .unwrap(),
    );
    tokens.push(next.token);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        next.token.0,
        tokens[0].0 + 4,
        "one step per grant, none per conflict"
    );
    let other = s.other_team().await;
    let stranger = s.agent_of(&other, "x").await;
    let first = granted(
        l.acquire(
            other.id,
            stranger.id,
            &claim("f0", LeaseMode::Exclusive),
            TTL,
            None,
            t(3),
        )
        .await
        .unwrap(),
    );
    assert_eq!(first.token, FencingToken(1), "a team's counter starts at 1");
}

/// A lease stops counting at its `expires_at` (exclusive) before any sweep: it conflicts no more
/// and is not listed. `expire` then ends it as expired at its expiry, with its history entry,
/// oldest expiry first and at most `limit`; a second sweep finds nothing. `limit` 0 is `Invalid`.
pub async fn a_lapsed_lease_frees_its_claim_and_the_sweep_records_it<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let short = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("a/**", LeaseMode::Exclusive),
            Duration::from_secs(10),
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    let shorter = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("b", LeaseMode::Exclusive),
            Duration::from_secs(5),
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    conflicts(
        l.acquire(
            team,
            s.b.id,
            &claim("a/x", LeaseMode::Exclusive),
            TTL,
            None,
            t(9),
        )
        .await
        .unwrap(),
    );
    let taken = granted(
        l.acquire(
            team,
            s.b.id,
            &claim("a/x", LeaseMode::Exclusive),
            TTL,
            None,
            t(10),
        )
        .await
        .unwrap(),
    );
    let listed = l
        .leases(team, &LeaseFilter::default(), t(10))
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![taken.id]
    );
    assert!(matches!(
        l.expire(t(10), 0).await,
        Err(BusError::Invalid { .. })
    ));
    let swept = l.expire(t(20), 1).await.unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].id, shorter.id, "oldest expiry first");
    let swept = l.expire(t(20), 10).await.unwrap();
    assert_eq!(
        swept.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![short.id]
    );
    let ended = swept[0].ended.expect("ended");
    assert_eq!(ended.reason, LeaseEnd::Expired);
    assert_eq!(ended.at, t(10), "ended at its expiry");
    assert!(l.expire(t(20), 10).await.unwrap().is_empty());
    let (lease, history) = l.lease(team, short.id).await.unwrap();
    assert_eq!(lease.ended, Some(ended));
    let kinds: Vec<_> = history.iter().map(|e| (e.seq, e.kind.clone())).collect();
    assert!(matches!(kinds[0], (1, LeaseEventKind::Granted { token, .. }) if token == short.token));
    assert_eq!(
        kinds[1],
        (
            2,
            LeaseEventKind::Ended {
                reason: LeaseEnd::Expired
            }
        )
    );
    assert_eq!(kinds.len(), 2);
}

/// A renewal moves the expiry to `at + ttl` and keeps the token; only the holder renews, only a
/// live lease (`Conflict` after it lapsed or ended). Release is the holder's or an operator's
/// (`None`), idempotent (an ended lease comes back as it ended), and a lapsed, unswept lease is
/// released as expired. Another agent's lease is `NotFound`; a bad TTL `Invalid`.
pub async fn renew_and_release_follow_holder_and_liveness<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let lease = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("x/**", LeaseMode::Exclusive),
            TTL,
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    assert!(matches!(
        l.acquire(
            team,
            s.a.id,
            &claim("y", LeaseMode::Exclusive),
            Duration::ZERO,
            None,
            t(0)
        )
        .await,
        Err(BusError::Invalid { .. })
    ));
    let renewed = l
        .renew(team, s.a.id, lease.id, Duration::from_secs(100), t(50))
        .await
        .unwrap();
    assert_eq!(renewed.expires_at, t(150));
    assert_eq!(renewed.token, lease.token);
    conflicts(
        l.acquire(
            team,
            s.b.id,
            &claim("x/y", LeaseMode::Shared),
            TTL,
            None,
            t(120),
        )
        .await
        .unwrap(),
    );
    assert!(matches!(
        l.renew(team, s.b.id, lease.id, TTL, t(60)).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        l.renew(team, s.a.id, lease.id, Duration::ZERO, t(60)).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        l.release(team, Some(s.b.id), lease.id, t(60)).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        l.renew(team, s.a.id, lease.id, TTL, t(150)).await,
        Err(BusError::Conflict { .. })
    ));
    // Lapsed at t(150), not swept: a release records the expiry.
    let gone = l
        .release(team, Some(s.a.id), lease.id, t(160))
        .await
        .unwrap();
    let ended = gone.ended.expect("ended");
    assert_eq!((ended.reason, ended.at), (LeaseEnd::Expired, t(150)));
    // An operator releases a live lease of anyone's; a second release changes nothing.
    let other = granted(
        l.acquire(
            team,
            s.b.id,
            &claim("z", LeaseMode::Shared),
            TTL,
            None,
            t(200),
        )
        .await
        .unwrap(),
    );
    let released = l.release(team, None, other.id, t(210)).await.unwrap();
    let ended = released.ended.expect("ended");
    assert_eq!((ended.reason, ended.at), (LeaseEnd::Released, t(210)));
    let again = l
        .release(team, Some(s.b.id), other.id, t(220))
        .await
        .unwrap();
    assert_eq!(again.ended, Some(ended));
    assert!(matches!(
        l.renew(team, s.b.id, other.id, TTL, t(220)).await,
        Err(BusError::Conflict { .. })
    ));
    let (_, history) = l.lease(team, lease.id).await.unwrap();
    let kinds: Vec<_> = history.into_iter().map(|e| e.kind).collect();
    assert!(matches!(kinds[0], LeaseEventKind::Granted { .. }));
    assert_eq!(kinds[1], LeaseEventKind::Renewed { expires_at: t(150) });
    assert_eq!(
        kinds[2],
        LeaseEventKind::Ended {
            reason: LeaseEnd::Expired
        }
    );
    assert_eq!(kinds.len(), 3);
    let (_, history) = l.lease(team, other.id).await.unwrap();
    assert_eq!(history.len(), 2, "the second release wrote nothing");
}

/// `check` is true only for the holder's own token, while the lease lives, on a path its pattern
/// covers; a token of a lapsed, released or superseded grant is false; a path that is not
/// concrete is `Invalid`.
pub async fn check_fences_only_the_holders_live_covering_token<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let first = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("src/*.rs", LeaseMode::Exclusive),
            Duration::from_secs(10),
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    assert!(
        l.check(team, s.a.id, first.token, "src/lib.rs", t(5))
            .await
            .unwrap()
    );
    assert!(
        !l.check(team, s.a.id, first.token, "src/a/lib.rs", t(5))
            .await
            .unwrap()
    );
    assert!(
        !l.check(team, s.b.id, first.token, "src/lib.rs", t(5))
            .await
            .unwrap()
    );
    assert!(
        !l.check(
            team,
            s.a.id,
            FencingToken(first.token.0 + 7),
            "src/lib.rs",
            t(5)
        )
        .await
        .unwrap()
    );
    assert!(
        !l.check(team, s.a.id, first.token, "src/lib.rs", t(10))
            .await
            .unwrap(),
        "lapsed"
    );
    // After the lapse another agent takes it: the old token is stale, the new one holds.
    let second = granted(
        l.acquire(
            team,
            s.b.id,
            &claim("src/lib.rs", LeaseMode::Exclusive),
            TTL,
            None,
            t(11),
        )
        .await
        .unwrap(),
    );
    assert!(second.token > first.token);
    assert!(
        !l.check(team, s.a.id, first.token, "src/lib.rs", t(12))
            .await
            .unwrap()
    );
    assert!(
        l.check(team, s.b.id, second.token, "src/lib.rs", t(12))
            .await
            .unwrap()
    );
    l.release(team, Some(s.b.id), second.id, t(13))
        .await
        .unwrap();
    assert!(
        !l.check(team, s.b.id, second.token, "src/lib.rs", t(14))
            .await
            .unwrap()
    );
    for bad in ["src/*.rs", "", "a//b", "../x"] {
        assert!(
            matches!(
                l.check(team, s.a.id, first.token, bad, t(1)).await,
                Err(BusError::Invalid { .. })
            ),
            "{bad:?}"
        );
    }
    let other = s.other_team().await;
    assert!(
        !l.check(other.id, s.a.id, first.token, "src/lib.rs", t(5))
            .await
            .unwrap()
    );
}

/// A listing holds the team's live leases by token, filtered by agent, by overlap with a
/// pattern, or both; ended and lapsed leases are left out; an unknown team is `NotFound`.
pub async fn listings_filter_by_agent_and_overlap<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let mut take = Vec::new();
    for (agent, pattern, ttl) in [
        (&s.a, "src/**", 60),
        (&s.b, "docs/*", 60),
        (&s.a, "docs/a.md", 60),
        (&s.c, "src/x", 5),
        (&s.c, "tests/*", 60),
    ] {
        take.push(
            granted(
                l.acquire(
                    team,
                    agent.id,
                    &claim(pattern, LeaseMode::Shared),
                    Duration::from_secs(ttl),
                    None,
                    t(0),
                )
                .await
                .unwrap(),
            )
            .id,
        );
    }
    l.release(team, Some(s.c.id), take[4], t(1)).await.unwrap();
    let ids = |v: Vec<Lease>| v.into_iter().map(|x| x.id).collect::<Vec<_>>();
    let all = l
        .leases(team, &LeaseFilter::default(), t(10))
        .await
        .unwrap();
    assert_eq!(ids(all), vec![take[0], take[1], take[2]]);
    let all = l.leases(team, &LeaseFilter::default(), t(1)).await.unwrap();
    assert_eq!(ids(all), vec![take[0], take[1], take[2], take[3]]);
    let mine = LeaseFilter {
        agent: Some(s.a.id),
        overlapping: None,
    };
    assert_eq!(
        ids(l.leases(team, &mine, t(2)).await.unwrap()),
        vec![take[0], take[2]]
    );
    let docs = LeaseFilter {
        agent: None,
        overlapping: Some("docs/a.md".parse().unwrap()),
    };
    assert_eq!(
        ids(l.leases(team, &docs, t(2)).await.unwrap()),
        vec![take[1], take[2]]
    );
    let both = LeaseFilter {
        agent: Some(s.b.id),
        overlapping: Some("**".parse().unwrap()),
    };
    assert_eq!(
        ids(l.leases(team, &both, t(2)).await.unwrap()),
        vec![take[1]]
    );
    assert!(matches!(
        l.leases(uuid::Uuid::new_v4(), &LeaseFilter::default(), t(2))
            .await,
        Err(BusError::NotFound { .. })
    ));
}
