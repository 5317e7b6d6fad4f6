//! `Ledger` behaviours of the directory: teams, agents and conversations.

use std::collections::HashSet;

use crewbus_domain::{BusError, TokenHash, recipient_key_for};
use uuid::Uuid;

use super::scene::{INBOX, REMOTE, scene, team_name, token};
use super::time::t;
use crate::LedgerFixture;

/// A team is created with its backends, read back, listed, and its name is unique.
pub async fn teams_are_created_listed_and_unique<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    let name = team_name();
    let team = ledger
        .create_team(&name, REMOTE, INBOX, t(0))
        .await
        .unwrap();
    assert_eq!(
        (
            team.name.as_str(),
            team.body_backend.as_str(),
            team.inbox.as_str()
        ),
        (name.as_str(), REMOTE, INBOX)
    );
    assert_eq!(team.created_at, t(0));
    assert_eq!(ledger.team(team.id).await.unwrap(), team);
    let other = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(1))
        .await
        .unwrap();
    let listed: Vec<Uuid> = ledger.teams().await.unwrap().iter().map(|t| t.id).collect();
    assert!(listed.contains(&team.id) && listed.contains(&other.id));
    assert!(matches!(
        ledger.create_team(&name, REMOTE, INBOX, t(2)).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        ledger.create_team("", REMOTE, INBOX, t(2)).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        ledger.create_team(&team_name(), "", INBOX, t(2)).await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        ledger.team(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
    assert_eq!(ledger.tenant(), fx.journal().tenant());
}

/// Changing a team's backends affects new conversations only: a conversation keeps its backend.
pub async fn team_backends_change_only_new_conversations<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    let changed = s
        .ledger
        .set_team_backends(s.team.id, "other-bodies", "other-inbox")
        .await
        .unwrap();
    assert_eq!(changed.body_backend, "other-bodies");
    assert_eq!(changed.inbox, "other-inbox");
    assert_eq!(s.ledger.team(s.team.id).await.unwrap(), changed);
    let old = s.ledger.conversation(s.team.id, s.conv.id).await.unwrap();
    assert_eq!(old.backend, REMOTE);
    let new = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "new", &[s.b.id], t(1))
        .await
        .unwrap();
    assert_eq!(new.backend, "other-bodies");
    let m = s.send(&s.a, "r1", "old conversation", t(2)).await;
    assert_eq!(m.backend, REMOTE);
    assert!(matches!(
        s.ledger.set_team_backends(Uuid::new_v4(), "x", "y").await,
        Err(BusError::NotFound { .. })
    ));
}

/// An agent is found by its token hash until it is revoked; revoking is idempotent.
pub async fn agents_authenticate_by_token_hash_until_revoked<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    let team = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let hash = TokenHash::of("a secret token");
    let agent = ledger
        .create_agent(team.id, "ana", hash, t(1))
        .await
        .unwrap();
    assert_eq!(agent.team, team.id);
    assert_eq!(agent.recipient_key, recipient_key_for(agent.id));
    assert_eq!(agent.token_hash, hash);
    assert!(!agent.revoked());
    assert_eq!(ledger.agent_by_token(&hash).await.unwrap(), agent);
    assert_eq!(ledger.agent(team.id, agent.id).await.unwrap(), agent);
    assert!(matches!(
        ledger.agent_by_token(&TokenHash::of("unknown")).await,
        Err(BusError::Unauthenticated)
    ));
    let revoked = ledger.revoke_agent(team.id, agent.id, t(2)).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(t(2)));
    let again = ledger.revoke_agent(team.id, agent.id, t(3)).await.unwrap();
    assert_eq!(
        again.revoked_at,
        Some(t(2)),
        "the first revocation time stays"
    );
    assert!(matches!(
        ledger.agent_by_token(&hash).await,
        Err(BusError::Unauthenticated)
    ));
    let listed = ledger.agents(team.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].revoked(), "revoked agents are still listed");
}

/// Agent names are unique per team, token hashes unique everywhere; another team's agent is not
/// found.
pub async fn agents_are_unique_per_team_and_token<F: LedgerFixture + ?Sized>(fx: &F) {
    let ledger = fx.ledger();
    let one = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let two = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let hash = token();
    let ana = ledger
        .create_agent(one.id, "ana", hash, t(0))
        .await
        .unwrap();
    assert!(matches!(
        ledger.create_agent(one.id, "ana", token(), t(0)).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        ledger.create_agent(two.id, "bo", hash, t(0)).await,
        Err(BusError::Conflict { .. })
    ));
    let ana_two = ledger
        .create_agent(two.id, "ana", token(), t(0))
        .await
        .unwrap();
    assert_ne!(
        ana.id, ana_two.id,
        "the same name in another team is another agent"
    );
    assert!(matches!(
        ledger.agent(two.id, ana.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        ledger
            .create_agent(Uuid::new_v4(), "x", token(), t(0))
            .await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        ledger.create_agent(one.id, " ", token(), t(0)).await,
        Err(BusError::Invalid { .. })
    ));
}

/// A conversation holds its creator and members (deduplicated), is listed for its members only,
/// takes only active agents of its team, and is not found from another team.
pub async fn conversations_hold_their_members_within_the_team<F: LedgerFixture + ?Sized>(fx: &F) {
    let s = scene(fx, REMOTE).await;
    assert_eq!(s.conv.team, s.team.id);
    assert_eq!(s.conv.backend, REMOTE);
    assert_eq!(s.conv.created_at, t(0));
    let members: HashSet<Uuid> = s.conv.members.iter().map(|m| m.agent).collect();
    assert_eq!(members, HashSet::from([s.a.id, s.b.id, s.c.id]));
    for m in &s.conv.members {
        assert_eq!(m.recipient_key, recipient_key_for(m.agent));
    }
    let pair = s
        .ledger
        .create_conversation(s.team.id, s.a.id, "pair", &[s.b.id, s.b.id, s.a.id], t(1))
        .await
        .unwrap();
    assert_eq!(
        pair.members.len(),
        2,
        "duplicates and the creator are listed once"
    );
    assert_eq!(
        s.ledger.conversation(s.team.id, pair.id).await.unwrap(),
        pair
    );
    let for_c: Vec<Uuid> = s
        .ledger
        .conversations_for(s.team.id, s.c.id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(for_c, vec![s.conv.id]);
    let for_a: Vec<Uuid> = s
        .ledger
        .conversations_for(s.team.id, s.a.id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(for_a, vec![s.conv.id, pair.id], "oldest first");
    let all: Vec<Uuid> = s
        .ledger
        .conversations(s.team.id)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(all, vec![s.conv.id, pair.id]);
    assert!(matches!(
        s.ledger.conversations(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));

    let other = s.other_team().await;
    let stranger = s.agent_of(&other, "stranger").await;
    assert!(matches!(
        s.ledger
            .create_conversation(s.team.id, s.a.id, "x", &[stranger.id], t(1))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        s.ledger.conversation(other.id, s.conv.id).await,
        Err(BusError::NotFound { .. })
    ));
    s.ledger
        .revoke_agent(s.team.id, s.c.id, t(2))
        .await
        .unwrap();
    assert!(matches!(
        s.ledger
            .create_conversation(s.team.id, s.a.id, "x", &[s.c.id], t(3))
            .await,
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        s.ledger
            .create_conversation(s.team.id, s.a.id, "", &[s.b.id], t(3))
            .await,
        Err(BusError::Invalid { .. })
    ));
}
