//! `Leases` behaviours where leases meet the rest of the ledger: run records and the seal,
//! revocation, team scoping, and two servers racing for one claim (the list and the helpers are
//! in the parent module).

use std::sync::Arc;

use crewbus_domain::{
    Acquired, BusError, LeaseEnd, LeaseEventKind, LeaseFilter, LeaseMode, RecordKind, RunOutcome,
    Seq,
};
use crewbus_ports::Leases;

use super::{TTL, claim, granted};
use crate::LedgerFixture;
use crate::ledger::scene::{REMOTE, scene};
use crate::ledger::time::t;

/// A lease taken by a run writes `LeaseGranted`, `LeaseRenewed` and `LeaseEnded` records into
/// that run in the same transaction; sealing the run ends its live leases (`run_sealed`) with
/// their records before `RunSealed`, leaving other leases alone. The run rules hold: unknown →
/// `NotFound`, another agent's → `Forbidden`, sealed → `Conflict`, nothing granted.
pub async fn a_run_records_its_leases_and_its_seal_ends_them<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let j = fx.journal();
    let team = s.team.id;
    let run = j.admit(team, s.a.id, t(0)).await.unwrap();
    let held = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("src/**", LeaseMode::Exclusive),
            TTL,
            Some(run),
            t(1),
        )
        .await
        .unwrap(),
    );
    assert_eq!(held.run, Some(run));
    let released = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("docs", LeaseMode::Shared),
            TTL,
            Some(run),
            t(1),
        )
        .await
        .unwrap(),
    );
    let outside = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("tests", LeaseMode::Shared),
            TTL,
            None,
            t(1),
        )
        .await
        .unwrap(),
    );
    l.renew(team, s.a.id, held.id, TTL, t(2)).await.unwrap();
    l.release(team, Some(s.a.id), released.id, t(3))
        .await
        .unwrap();
    for bad in [Some(crewbus_domain::RunId::new())] {
        assert!(matches!(
            l.acquire(team, s.a.id, &claim("q", LeaseMode::Shared), TTL, bad, t(4))
                .await,
            Err(BusError::NotFound { .. })
        ));
    }
    assert!(matches!(
        l.acquire(
            team,
            s.b.id,
            &claim("q", LeaseMode::Shared),
            TTL,
            Some(run),
            t(4)
        )
        .await,
        Err(BusError::Forbidden { .. })
    ));
    j.seal(run, RunOutcome::Succeeded, "done", t(5))
        .await
        .unwrap();
    assert!(matches!(
        l.acquire(
            team,
            s.a.id,
            &claim("q", LeaseMode::Shared),
            TTL,
            Some(run),
            t(6)
        )
        .await,
        Err(BusError::Conflict { .. })
    ));
    let records = j.read(run, Seq(1), 100).await.unwrap();
    let kinds: Vec<RecordKind> = records.into_iter().map(|r| r.kind).collect();
    assert!(matches!(kinds[0], RecordKind::RunAdmitted { .. }));
    assert!(
        matches!(&kinds[1], RecordKind::LeaseGranted { lease, token, expires_at, .. }
            if *lease == held.id && *token == held.token && *expires_at == t(61))
    );
    assert!(matches!(&kinds[2], RecordKind::LeaseGranted { lease, .. } if *lease == released.id));
    assert_eq!(
        kinds[3],
        RecordKind::LeaseRenewed {
            lease: held.id,
            expires_at: t(62)
        }
    );
    assert_eq!(
        kinds[4],
        RecordKind::LeaseEnded {
            lease: released.id,
            reason: LeaseEnd::Released
        }
    );
    assert_eq!(
        kinds[5],
        RecordKind::LeaseEnded {
            lease: held.id,
            reason: LeaseEnd::RunSealed
        }
    );
    assert!(matches!(kinds[6], RecordKind::RunSealed { .. }));
    assert_eq!(kinds.len(), 7);
    let (ended, _) = l.lease(team, held.id).await.unwrap();
    let ending = ended.ended.expect("ended by the seal");
    assert_eq!((ending.reason, ending.at), (LeaseEnd::RunSealed, t(5)));
    let (kept, _) = l.lease(team, outside.id).await.unwrap();
    assert_eq!(kept.ended, None, "a lease outside the run stays");
    // A lease taken outside the run writes nothing into it.
    assert!(
        l.expire(t(100), 10)
            .await
            .unwrap()
            .iter()
            .any(|x| x.id == outside.id)
    );
    assert_eq!(j.read(run, Seq(1), 100).await.unwrap().len(), 7);
}

/// Revoking an agent ends its live leases (`revoked`) in the same transaction, frees their
/// claims, and a revoked agent's acquire is `Forbidden`; an unknown agent's is `NotFound`.
pub async fn revocation_ends_the_agents_leases<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let team = s.team.id;
    let lease = granted(
        l.acquire(
            team,
            s.a.id,
            &claim("src/**", LeaseMode::Exclusive),
            TTL,
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    let kept = granted(
        l.acquire(
            team,
            s.b.id,
            &claim("docs/**", LeaseMode::Exclusive),
            TTL,
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    s.ledger.revoke_agent(team, s.a.id, t(5)).await.unwrap();
    let (ended, history) = l.lease(team, lease.id).await.unwrap();
    let ending = ended.ended.expect("ended");
    assert_eq!((ending.reason, ending.at), (LeaseEnd::Revoked, t(5)));
    assert_eq!(
        history.last().map(|e| &e.kind),
        Some(&LeaseEventKind::Ended {
            reason: LeaseEnd::Revoked
        })
    );
    assert_eq!(l.lease(team, kept.id).await.unwrap().0.ended, None);
    granted(
        l.acquire(
            team,
            s.b.id,
            &claim("src/a", LeaseMode::Exclusive),
            TTL,
            None,
            t(6),
        )
        .await
        .unwrap(),
    );
    assert!(matches!(
        l.acquire(
            team,
            s.a.id,
            &claim("x", LeaseMode::Shared),
            TTL,
            None,
            t(6)
        )
        .await,
        Err(BusError::Forbidden { .. })
    ));
    assert!(matches!(
        l.acquire(
            team,
            uuid::Uuid::new_v4(),
            &claim("x", LeaseMode::Shared),
            TTL,
            None,
            t(6)
        )
        .await,
        Err(BusError::NotFound { .. })
    ));
}

/// Another team's lease ids are `NotFound` everywhere (read, renew, release), an agent named with
/// another team is `NotFound`, and another team's leases never conflict.
pub async fn another_teams_leases_are_not_found<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let l = fx.leases();
    let other = s.other_team().await;
    let x = s.agent_of(&other, "x").await;
    let theirs = granted(
        l.acquire(
            other.id,
            x.id,
            &claim("**", LeaseMode::Exclusive),
            TTL,
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    granted(
        l.acquire(
            s.team.id,
            s.a.id,
            &claim("**", LeaseMode::Exclusive),
            TTL,
            None,
            t(0),
        )
        .await
        .unwrap(),
    );
    assert!(matches!(
        l.lease(s.team.id, theirs.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        l.renew(s.team.id, x.id, theirs.id, TTL, t(1)).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        l.release(s.team.id, None, theirs.id, t(1)).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        l.acquire(
            s.team.id,
            x.id,
            &claim("y", LeaseMode::Shared),
            TTL,
            None,
            t(1)
        )
        .await,
        Err(BusError::NotFound { .. })
    ));
    assert_eq!(l.lease(other.id, theirs.id).await.unwrap().0.ended, None);
}

/// Two servers sharing the store (two ledger values, each with its own connections) race
/// acquires of mutually overlapping exclusive claims from several agents: in every round exactly
/// one is granted, and all others name a holder.
pub async fn two_servers_never_grant_conflicting_leases<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let servers: [Arc<dyn Leases>; 2] = [fx.leases(), fx.other_server_leases()];
    let team = s.team.id;
    let mut agents = vec![s.a.clone(), s.b.clone(), s.c.clone()];
    for i in 0..5 {
        agents.push(s.agent_of(&s.team, &format!("racer{i}")).await);
    }
    // Every two of these overlap (all cover `src/a/b`).
    let patterns = [
        "src/**", "src/a/*", "*/a/b", "src/a/b", "**/b", "src/*/b", "**", "src/a/**",
    ];
    for round in 0..6i64 {
        let at = t(round * 100);
        let mut tasks = Vec::new();
        for (i, agent) in agents.iter().enumerate() {
            let server = Arc::clone(&servers[i % 2]);
            let c = claim(patterns[i % patterns.len()], LeaseMode::Exclusive);
            let agent = agent.id;
            tasks.push(tokio::spawn(async move {
                server.acquire(team, agent, &c, TTL, None, at).await
            }));
        }
        let mut grants = Vec::new();
        for task in tasks {
            match task.await.expect("task").expect("acquire") {
                Acquired::Granted(l) => grants.push(l),
                Acquired::Conflict(c) => assert!(!c.is_empty()),
            }
        }
        assert_eq!(grants.len(), 1, "round {round}: {grants:?}");
        servers[0]
            .release(team, None, grants[0].id, at)
            .await
            .unwrap();
    }
}

/// A revocation through one server racing an agent's first acquire through another (the agent
/// holds nothing yet): whichever commits first, the revoked agent never keeps a live lease —
/// the acquire is refused (`Forbidden`), or granted and then ended as `revoked`.
pub async fn a_revocation_racing_a_first_acquire_leaves_no_live_lease<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let s = scene(fx, REMOTE).await;
    let (one, other) = (fx.leases(), fx.other_server_leases());
    let team = s.team.id;
    for round in 0..12i64 {
        let agent = s.agent_of(&s.team, &format!("racer{round}")).await;
        let at = t(round * 10 + 1);
        let acquire = {
            let (other, id) = (Arc::clone(&other), agent.id);
            let c = claim(&format!("r{round}/**"), LeaseMode::Exclusive);
            tokio::spawn(async move { other.acquire(team, id, &c, TTL, None, at).await })
        };
        s.ledger.revoke_agent(team, agent.id, at).await.unwrap();
        match acquire.await.expect("task") {
            Ok(Acquired::Granted(lease)) => {
                let (now, _) = one.lease(team, lease.id).await.unwrap();
                let ended = now
                    .ended
                    .expect("a lease granted before the revocation ended with it");
                assert_eq!(ended.reason, LeaseEnd::Revoked, "round {round}");
            }
            Err(BusError::Forbidden { .. }) => {}
            other => panic!("round {round}: {other:?}"),
        }
        let mine = LeaseFilter {
            agent: Some(agent.id),
            overlapping: None,
        };
        assert!(
            one.leases(team, &mine, at).await.unwrap().is_empty(),
            "round {round}"
        );
    }
}
