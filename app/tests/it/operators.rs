//! The operator use cases on the memory store: operator tokens, one-time sign-in codes and
//! console sessions, agents' last activity, the console feed, and the scope every oversight use
//! case applies (through `Bus`, as the admin API, the console and the CLI call them).

use std::sync::Arc;
use std::time::Duration;

use crate::common::memory_with_clock;
use crewbus::bus::Bus;
use crewbus::config::Config;
use crewbus_domain::{
    AgentKind, BusError, FeedEvent, FeedKind, FeedUpdate, OperatorScope, Publication, Uuid,
};
use crewbus_ports::SystemClock;
use tokio::sync::broadcast;
use tokio::time::Instant;

fn bus() -> Bus {
    memory_with_clock(&Config::default(), Arc::new(SystemClock))
        .unwrap()
        .0
        .bus
}

#[tokio::test]
async fn an_operator_token_is_never_an_agent_token_and_the_reverse() {
    let b = bus();
    let team = b.add_team("t", None, None).await.unwrap();
    let agent = b.add_agent(team.id, "alice").await.unwrap();
    let op = b.add_operator("ops", &[]).await.unwrap();
    assert!(op.token.starts_with("cbo_") && agent.token.starts_with("cbt_"));
    assert_eq!(op.operator.scope, OperatorScope::Everything);
    assert_eq!(
        b.authenticate_operator(&op.token).await.unwrap().name,
        "ops"
    );
    assert!(matches!(
        b.authenticate_operator(&agent.token).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        b.authenticate(&op.token).await,
        Err(BusError::Unauthenticated)
    ));
    // Debug output never holds the token.
    assert!(!format!("{op:?}").contains(&op.token));
    b.revoke_operator(op.operator.id).await.unwrap();
    assert!(matches!(
        b.authenticate_operator(&op.token).await,
        Err(BusError::Unauthenticated)
    ));
}

#[tokio::test]
async fn a_scope_names_existing_teams_and_hides_the_others() {
    let b = bus();
    let a = b.add_team("a", None, None).await.unwrap();
    let other = b.add_team("b", None, None).await.unwrap();
    assert!(matches!(
        b.add_operator("x", &["nope".to_owned()]).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        b.add_operator("bad name", &[]).await,
        Err(BusError::Invalid { .. })
    ));
    let op = b.add_operator("night", &["a".to_owned()]).await.unwrap();
    let scope = &op.operator.scope;
    let teams = b.admin_teams(scope).await.unwrap();
    assert_eq!(teams.iter().map(|t| t.id).collect::<Vec<_>>(), vec![a.id]);
    assert!(matches!(
        b.admin_agents(scope, other.id).await,
        Err(BusError::NotFound { .. })
    ));
    assert!(matches!(
        b.admin_add_agent(scope, other.id, "mallory").await,
        Err(BusError::NotFound { .. })
    ));
    let overview = b.admin_overview(scope).await.unwrap();
    assert_eq!(overview.len(), 1);
    assert_eq!(overview[0].team.id, a.id);
    // 61 one-minute buckets: the last hour and the current minute.
    assert!((60..=61).contains(&overview[0].series.len()));
}

#[tokio::test]
async fn a_sign_in_code_works_once_and_a_session_ends_at_sign_out() {
    let b = bus();
    let dev = b.dev_operator().await.unwrap();
    // Found again, not created twice.
    assert_eq!(b.dev_operator().await.unwrap().id, dev.id);
    let code = b.issue_sign_in_code(&dev).await.unwrap();
    assert!(!format!("{code:?}").contains(&code.code));
    // As typed: lower case, spaces instead of dashes.
    let typed = code.code.to_lowercase().replace('-', " ");
    let signed_in = b.sign_in_with_code(&typed).await.unwrap();
    assert_eq!(signed_in.operator.id, dev.id);
    assert!(matches!(
        b.sign_in_with_code(&code.code).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        b.sign_in_with_code("not a code").await,
        Err(BusError::Unauthenticated)
    ));
    let session = b.console_session(&signed_in.secret).await.unwrap();
    assert_eq!(session.operator.id, dev.id);
    b.sign_out(&signed_in.secret).await.unwrap();
    assert!(matches!(
        b.console_session(&signed_in.secret).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        b.console_session("").await,
        Err(BusError::Unauthenticated)
    ));
    // A token signs in too; revoking the operator ends its sessions.
    let ops = b.add_operator("ops", &[]).await.unwrap();
    let by_token = b.sign_in_with_token(&ops.token).await.unwrap();
    b.console_session(&by_token.secret).await.unwrap();
    b.revoke_operator(ops.operator.id).await.unwrap();
    assert!(matches!(
        b.console_session(&by_token.secret).await,
        Err(BusError::Unauthenticated)
    ));
}

#[tokio::test]
async fn an_authenticated_call_becomes_the_agents_last_activity() {
    let b = bus();
    let team = b.add_team("t", None, None).await.unwrap();
    let alice = b.add_agent(team.id, "alice").await.unwrap();
    let before = b
        .admin_agents(&OperatorScope::Everything, team.id)
        .await
        .unwrap();
    assert_eq!(before[0].last_active_at, None);
    b.authenticate(&alice.token).await.unwrap();
    assert_eq!(b.flush_activity().await.unwrap(), 1);
    let after = b
        .admin_agents(&OperatorScope::Everything, team.id)
        .await
        .unwrap();
    assert!(after[0].last_active_at.is_some());
    // A burst of calls is queued once per period.
    for _ in 0..50 {
        b.authenticate(&alice.token).await.unwrap();
    }
    assert_eq!(b.flush_activity().await.unwrap(), 0);
}

/// Waits (with a deadline) for a feed event of `kind` on `rx`; returns it.
async fn next_of(rx: &mut broadcast::Receiver<FeedUpdate>, kind: FeedKind) -> FeedEvent {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let update = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {kind:?} event within 5 s"))
            .expect("feed open");
        if let FeedUpdate::Events(events) = update
            && let Some(e) = events.into_iter().find(|e| e.kind == kind)
        {
            return e;
        }
    }
}

#[tokio::test]
async fn a_message_s_life_reaches_the_console_feed_and_a_human_member_posts() {
    let b = bus();
    let team = b.add_team("t", None, None).await.unwrap();
    let alice = b.add_agent(team.id, "alice").await.unwrap();
    let bob = b.add_agent(team.id, "bob").await.unwrap();
    let alice = b.authenticate(&alice.token).await.unwrap();
    let bob = b.authenticate(&bob.token).await.unwrap();
    let conversation = b
        .create_conversation(&alice, "c", &["bob".to_owned()])
        .await
        .unwrap();
    let mut feed = b.watch_feed().await;

    let sent = b
        .send(&alice, conversation.id, "r1".into(), "hello".into(), None)
        .await
        .unwrap();
    let e = next_of(&mut feed, FeedKind::MessageSent).await;
    assert_eq!(
        (e.team, e.conversation, e.message),
        (team.id, Some(conversation.id), Some(sent.message.id))
    );
    // Memory bodies go through the relay.
    assert_eq!(sent.message.publication, Publication::PendingPublication);
    b.relay_pass().await.unwrap();
    next_of(&mut feed, FeedKind::MessageStored).await;
    b.reference_pass().await.unwrap();
    let deliveries = b
        .fetch_waiting(&bob, 10, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 1);
    let e = next_of(&mut feed, FeedKind::HandedOut).await;
    assert_eq!(e.agent, Some(bob.id));
    b.confirm(&bob, &[deliveries[0].hand_out.delivery], None)
        .await
        .unwrap();
    next_of(&mut feed, FeedKind::Confirmed).await;

    // An operator posts as the team's human member: bob sees it marked as from a human; the
    // human member gets no receipt.
    let ops = b.add_operator("ops", &[]).await.unwrap();
    let posted = b
        .admin_post(
            &ops.operator,
            team.id,
            conversation.id,
            "op-1".into(),
            "please look at ticket 7".into(),
        )
        .await
        .unwrap();
    assert_eq!(posted.message.sender_kind, AgentKind::Human);
    b.relay_pass().await.unwrap();
    let page = b
        .admin_messages(&OperatorScope::Everything, team.id, conversation.id, 0, 10)
        .await
        .unwrap();
    let human = &page.messages[1];
    assert_eq!(human.entry.message.id, posted.message.id);
    let recipients: Vec<Uuid> = human
        .recipients
        .iter()
        .map(|r| r.receipt.recipient)
        .collect();
    assert_eq!(recipients.len(), 2, "alice and bob, not the human member");
    assert!(!recipients.contains(&posted.message.sender));
    let agents = b
        .admin_agents(&OperatorScope::Everything, team.id)
        .await
        .unwrap();
    assert!(
        agents
            .iter()
            .any(|a| a.agent.kind == AgentKind::Human && a.agent.id == posted.message.sender)
    );

    // Agents cannot invite the human member: it receives nothing.
    let human_name = agents
        .iter()
        .find(|a| a.agent.kind == AgentKind::Human)
        .map(|a| a.agent.name.clone())
        .unwrap();
    assert!(matches!(
        b.create_conversation(&alice, "with a human", &[human_name])
            .await,
        Err(BusError::NotFound { .. })
    ));

    // Revoking an agent is said on the feed too.
    b.admin_revoke_agent(&OperatorScope::Everything, team.id, bob.id)
        .await
        .unwrap();
    let e = next_of(&mut feed, FeedKind::AgentRevoked).await;
    assert_eq!(e.agent, Some(bob.id));
}

#[tokio::test]
async fn a_revoked_agents_pending_deliveries_leave_the_teams_totals() {
    let b = bus();
    let team = b.add_team("t", None, None).await.unwrap();
    let dave = b.add_agent(team.id, "dave").await.unwrap();
    let eve = b.add_agent(team.id, "eve").await.unwrap();
    let dave = b.authenticate(&dave.token).await.unwrap();
    let c = b
        .create_conversation(&dave, "c", &["eve".to_owned()])
        .await
        .unwrap();
    b.send(&dave, c.id, "r1".into(), "for eve".into(), None)
        .await
        .unwrap();
    b.relay_pass().await.unwrap();
    let all = OperatorScope::Everything;
    let before = &b.admin_overview(&all).await.unwrap()[0];
    assert_eq!(before.pending, 1);
    assert!(before.oldest_pending_at.is_some());
    b.admin_revoke_agent(&all, team.id, eve.agent.id)
        .await
        .unwrap();
    let after = &b.admin_overview(&all).await.unwrap()[0];
    assert_eq!((after.pending, after.oldest_pending_at), (0, None));
    // Eve's own row still says what never arrived.
    let agents = b.admin_agents(&all, team.id).await.unwrap();
    let eve_row = agents.iter().find(|a| a.agent.id == eve.agent.id).unwrap();
    assert_eq!(eve_row.pending, 1);
}
