//! `Operators` behaviours: operators and their scopes, tokens unique across agents and
//! operators, one-time sign-in codes, console sessions, revocation, pruning.
//!
//! One async function per behaviour, generic over the fixture, each on a fresh, empty ledger
//! (the operators share its store), asserting error variants (never text); instants are the
//! behaviour's own ([`crate::ledger::time`]). [`operators_behaviours`] lists them for a test
//! target; [`crate::ledger_trials`] registers them with the ledger's.

use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{BusError, Operator, OperatorScope};
use crewbus_ports::Operators;
use uuid::Uuid;

use crate::LedgerFixture;
use crate::ledger::scene::{INBOX, REMOTE, team_name, token};
use crate::ledger::time::t;
use crate::trial::{Behaviour, behaviours};

/// The idle period the session behaviours use.
const IDLE: Duration = Duration::from_secs(60);

/// Every operators behaviour, by name.
pub fn operators_behaviours() -> Vec<Behaviour<dyn LedgerFixture>> {
    behaviours!["operators" =>
        operators_are_created_and_listed_by_name,
        operator_names_are_unique_and_follow_the_agent_name_rule,
        token_hashes_are_unique_across_agents_and_operators,
        a_scope_names_known_teams,
        operators_authenticate_by_token_until_revoked,
        revoking_an_operator_ends_its_codes_and_sessions,
        a_sign_in_code_opens_a_session_once,
        concurrent_redeems_of_one_code_open_one_session,
        a_sign_in_code_expires,
        issuing_a_code_checks_the_operator_the_expiry_and_the_hash,
        withdrawn_sign_in_codes_stop_working,
        a_failed_redeem_writes_nothing,
        sessions_end_when_idle,
        using_a_session_moves_last_seen,
        a_session_is_checked_without_being_used,
        a_session_opened_with_a_token_checks_the_operator,
        end_session_signs_out_idempotently,
        prune_removes_spent_codes_and_dead_sessions,
    ]
}

/// An operator `name` of every team, created at `t(0)`.
async fn operator(ops: &dyn Operators, name: &str) -> Operator {
    ops.create_operator(name, &OperatorScope::Everything, token(), t(0))
        .await
        .expect("create operator")
}

/// `create_operator` mints an operator with the given scope and token hash; `operators` lists
/// every one by name, `operator` reads one; an unknown id is `NotFound`.
pub async fn operators_are_created_and_listed_by_name<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    assert_eq!(ops.tenant(), fx.ledger().tenant());
    assert!(ops.operators().await.unwrap().is_empty());
    let hash = token();
    let bo = ops
        .create_operator("bo", &OperatorScope::Everything, hash, t(1))
        .await
        .unwrap();
    assert_eq!(bo.name, "bo");
    assert_eq!(bo.scope, OperatorScope::Everything);
    assert_eq!(bo.token_hash, hash);
    assert_eq!((bo.created_at, bo.revoked_at), (t(1), None));
    let ana = operator(&*ops, "ana").await;
    assert_ne!(ana.id, bo.id);
    assert_eq!(
        ops.operators().await.unwrap(),
        vec![ana.clone(), bo.clone()]
    );
    assert_eq!(ops.operator(bo.id).await.unwrap(), bo);
    assert!(matches!(
        ops.operator(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
}

/// A name is unique in the tenant (`Conflict`) and follows the agent-name rule: letters, digits,
/// `_`, `-`, 1–128 (`Invalid`).
pub async fn operator_names_are_unique_and_follow_the_agent_name_rule<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let ops = fx.operators();
    operator(&*ops, "ana").await;
    assert!(matches!(
        ops.create_operator("ana", &OperatorScope::Everything, token(), t(1))
            .await,
        Err(BusError::Conflict { .. })
    ));
    let long = "x".repeat(129);
    for bad in ["", "ana ops", "ana.ops", long.as_str()] {
        assert!(
            matches!(
                ops.create_operator(bad, &OperatorScope::Everything, token(), t(1))
                    .await,
                Err(BusError::Invalid { .. })
            ),
            "{bad:?} is refused"
        );
    }
    assert_eq!(ops.operators().await.unwrap().len(), 1);
}

/// An operator's token hash is no agent's and no other operator's, and an agent's is no
/// operator's: each way round `Conflict`, nothing written.
pub async fn token_hashes_are_unique_across_agents_and_operators<F: LedgerFixture + ?Sized>(
    fx: &F,
) {
    let (ledger, ops) = (fx.ledger(), fx.operators());
    let team = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let agent = ledger
        .create_agent(team.id, "agent", token(), t(0))
        .await
        .unwrap();
    assert!(matches!(
        ops.create_operator("ana", &OperatorScope::Everything, agent.token_hash, t(1))
            .await,
        Err(BusError::Conflict { .. })
    ));
    let ana = operator(&*ops, "ana").await;
    assert!(matches!(
        ops.create_operator("bo", &OperatorScope::Everything, ana.token_hash, t(1))
            .await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        ledger
            .create_agent(team.id, "other", ana.token_hash, t(1))
            .await,
        Err(BusError::Conflict { .. })
    ));
    assert_eq!(ops.operators().await.unwrap(), vec![ana]);
    assert_eq!(ledger.agents(team.id).await.unwrap(), vec![agent]);
}

/// A scope of named teams is kept as given; a team of it that is unknown is `NotFound`, an empty
/// one `Invalid`, and nothing is written.
pub async fn a_scope_names_known_teams<F: LedgerFixture + ?Sized>(fx: &F) {
    let (ledger, ops) = (fx.ledger(), fx.operators());
    let mut teams = Vec::new();
    for _ in 0..2 {
        teams.push(
            ledger
                .create_team(&team_name(), REMOTE, INBOX, t(0))
                .await
                .unwrap()
                .id,
        );
    }
    let scope = OperatorScope::teams(teams.clone()).unwrap();
    let ana = ops
        .create_operator("ana", &scope, token(), t(1))
        .await
        .unwrap();
    assert_eq!(ana.scope, scope);
    assert_eq!(ops.operator(ana.id).await.unwrap().scope, scope);
    assert!(ana.scope.covers(teams[0]) && ana.scope.covers(teams[1]));
    let unknown = OperatorScope::teams([teams[0], Uuid::new_v4()]).unwrap();
    assert!(matches!(
        ops.create_operator("bo", &unknown, token(), t(1)).await,
        Err(BusError::NotFound { .. })
    ));
    let empty = OperatorScope::Teams(Default::default());
    assert!(matches!(
        ops.create_operator("bo", &empty, token(), t(1)).await,
        Err(BusError::Invalid { .. })
    ));
    assert_eq!(ops.operators().await.unwrap(), vec![ana]);
}

/// `operator_by_token` finds the operator holding a token hash until it is revoked; an agent's
/// hash or an unknown one is `Unauthenticated`. A revoke is idempotent (the first time stays),
/// the revoked operator is still listed, and an unknown one is `NotFound`.
pub async fn operators_authenticate_by_token_until_revoked<F: LedgerFixture + ?Sized>(fx: &F) {
    let (ledger, ops) = (fx.ledger(), fx.operators());
    let ana = operator(&*ops, "ana").await;
    assert_eq!(ops.operator_by_token(&ana.token_hash).await.unwrap(), ana);
    let team = ledger
        .create_team(&team_name(), REMOTE, INBOX, t(0))
        .await
        .unwrap();
    let agent = ledger
        .create_agent(team.id, "agent", token(), t(0))
        .await
        .unwrap();
    for hash in [agent.token_hash, token()] {
        assert!(matches!(
            ops.operator_by_token(&hash).await,
            Err(BusError::Unauthenticated)
        ));
    }
    assert!(matches!(
        ledger.agent_by_token(&ana.token_hash).await,
        Err(BusError::Unauthenticated)
    ));
    let revoked = ops.revoke_operator(ana.id, t(5)).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(t(5)));
    assert!(revoked.revoked());
    assert_eq!(
        ops.revoke_operator(ana.id, t(9)).await.unwrap().revoked_at,
        Some(t(5))
    );
    assert!(matches!(
        ops.operator_by_token(&ana.token_hash).await,
        Err(BusError::Unauthenticated)
    ));
    assert_eq!(ops.operators().await.unwrap(), vec![revoked]);
    assert!(matches!(
        ops.revoke_operator(Uuid::new_v4(), t(5)).await,
        Err(BusError::NotFound { .. })
    ));
}

/// From a revoke on, the operator's sign-in codes and sessions answer `Unauthenticated`, and it
/// can be issued no code and opened no session.
pub async fn revoking_an_operator_ends_its_codes_and_sessions<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let (code, session) = (token(), token());
    ops.issue_sign_in_code(ana.id, code, t(600), t(0))
        .await
        .unwrap();
    ops.open_session(ana.id, session, t(0)).await.unwrap();
    ops.revoke_operator(ana.id, t(1)).await.unwrap();
    assert!(matches!(
        ops.redeem_sign_in_code(&code, token(), t(2)).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        ops.session(&session, IDLE, t(2)).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        ops.issue_sign_in_code(ana.id, token(), t(600), t(2)).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        ops.open_session(ana.id, token(), t(2)).await,
        Err(BusError::Unauthenticated)
    ));
}

/// A code redeems once: the first redeem opens a session (usable at once) and returns the
/// operator; any later one is `Unauthenticated`.
pub async fn a_sign_in_code_opens_a_session_once<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let (code, session) = (token(), token());
    ops.issue_sign_in_code(ana.id, code, t(600), t(0))
        .await
        .unwrap();
    let signed_in = ops
        .redeem_sign_in_code(&code, session, t(10))
        .await
        .unwrap();
    assert_eq!(signed_in, ana);
    let live = ops.session(&session, IDLE, t(11)).await.unwrap();
    assert_eq!(live.operator, ana);
    assert_eq!((live.opened_at, live.last_seen_at), (t(10), t(10)));
    assert!(matches!(
        ops.redeem_sign_in_code(&code, token(), t(12)).await,
        Err(BusError::Unauthenticated)
    ));
}

/// Two concurrent redeems of one code: exactly one opens its session, the other is
/// `Unauthenticated` and its session does not exist.
pub async fn concurrent_redeems_of_one_code_open_one_session<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let code = token();
    ops.issue_sign_in_code(ana.id, code, t(600), t(0))
        .await
        .unwrap();
    let sessions = [token(), token()];
    let redeems = sessions.map(|session| {
        let ops = Arc::clone(&ops);
        tokio::spawn(async move { ops.redeem_sign_in_code(&code, session, t(1)).await })
    });
    let mut outcomes = Vec::new();
    for redeem in redeems {
        outcomes.push(redeem.await.expect("redeem task"));
    }
    let won: Vec<usize> = (0..2).filter(|i| outcomes[*i].is_ok()).collect();
    assert_eq!(won.len(), 1, "exactly one redeem wins: {outcomes:?}");
    let (winner, loser) = (won[0], 1 - won[0]);
    assert!(matches!(outcomes[loser], Err(BusError::Unauthenticated)));
    assert!(ops.session(&sessions[winner], IDLE, t(2)).await.is_ok());
    assert!(matches!(
        ops.session(&sessions[loser], IDLE, t(2)).await,
        Err(BusError::Unauthenticated)
    ));
}

/// A code works until `expires_at` (exclusive): redeemed at its expiry it is `Unauthenticated`.
pub async fn a_sign_in_code_expires<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let (late, in_time) = (token(), token());
    for code in [late, in_time] {
        ops.issue_sign_in_code(ana.id, code, t(600), t(0))
            .await
            .unwrap();
    }
    assert!(matches!(
        ops.redeem_sign_in_code(&late, token(), t(600)).await,
        Err(BusError::Unauthenticated)
    ));
    assert_eq!(
        ops.redeem_sign_in_code(&in_time, token(), t(599))
            .await
            .unwrap()
            .id,
        ana.id
    );
}

/// Issuing a code: an unknown operator is `NotFound`, an expiry not after `at` is `Invalid`, a
/// hash already recorded is `Conflict`; an unknown code redeems as `Unauthenticated`.
pub async fn issuing_a_code_checks_the_operator_the_expiry_and_the_hash<
    F: LedgerFixture + ?Sized,
>(
    fx: &F,
) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    assert!(matches!(
        ops.issue_sign_in_code(Uuid::new_v4(), token(), t(600), t(0))
            .await,
        Err(BusError::NotFound { .. })
    ));
    for expires_at in [t(0), t(-1)] {
        assert!(matches!(
            ops.issue_sign_in_code(ana.id, token(), expires_at, t(0))
                .await,
            Err(BusError::Invalid { .. })
        ));
    }
    let code = token();
    ops.issue_sign_in_code(ana.id, code, t(600), t(0))
        .await
        .unwrap();
    assert!(matches!(
        ops.issue_sign_in_code(ana.id, code, t(900), t(1)).await,
        Err(BusError::Conflict { .. })
    ));
    assert!(matches!(
        ops.redeem_sign_in_code(&token(), token(), t(1)).await,
        Err(BusError::Unauthenticated)
    ));
}

/// `withdraw_sign_in_codes` takes back the operator's unused codes and counts them: they redeem
/// as `Unauthenticated` from then on. A session a code opened before stays, another operator's
/// codes still work, and a code issued afterwards works; an unknown operator is `NotFound`.
pub async fn withdrawn_sign_in_codes_stop_working<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let bo = operator(&*ops, "bo").await;
    let (first, second, used, bos) = (token(), token(), token(), token());
    for code in [first, second, used] {
        ops.issue_sign_in_code(ana.id, code, t(600), t(0))
            .await
            .unwrap();
    }
    ops.issue_sign_in_code(bo.id, bos, t(600), t(0))
        .await
        .unwrap();
    let session = token();
    ops.redeem_sign_in_code(&used, session, t(1)).await.unwrap();
    assert_eq!(ops.withdraw_sign_in_codes(ana.id).await.unwrap(), 2);
    for code in [first, second] {
        assert!(matches!(
            ops.redeem_sign_in_code(&code, token(), t(2)).await,
            Err(BusError::Unauthenticated)
        ));
    }
    assert!(ops.session(&session, IDLE, t(2)).await.is_ok());
    assert_eq!(
        ops.redeem_sign_in_code(&bos, token(), t(2))
            .await
            .unwrap()
            .id,
        bo.id,
        "only that operator's codes"
    );
    let fresh = token();
    ops.issue_sign_in_code(ana.id, fresh, t(600), t(3))
        .await
        .unwrap();
    assert_eq!(
        ops.redeem_sign_in_code(&fresh, token(), t(4))
            .await
            .unwrap()
            .id,
        ana.id
    );
    assert_eq!(ops.withdraw_sign_in_codes(ana.id).await.unwrap(), 0);
    assert!(matches!(
        ops.withdraw_sign_in_codes(Uuid::new_v4()).await,
        Err(BusError::NotFound { .. })
    ));
}

/// A redeem refused — an unknown code, or a session hash already in use (`Conflict`) — writes
/// nothing: no session opens and the code still works afterwards.
pub async fn a_failed_redeem_writes_nothing<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let unused = token();
    assert!(matches!(
        ops.redeem_sign_in_code(&token(), unused, t(1)).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        ops.session(&unused, IDLE, t(1)).await,
        Err(BusError::Unauthenticated)
    ));
    let (code, taken) = (token(), token());
    ops.open_session(ana.id, taken, t(0)).await.unwrap();
    ops.issue_sign_in_code(ana.id, code, t(600), t(0))
        .await
        .unwrap();
    assert!(matches!(
        ops.redeem_sign_in_code(&code, taken, t(1)).await,
        Err(BusError::Conflict { .. })
    ));
    let fresh = token();
    ops.redeem_sign_in_code(&code, fresh, t(2)).await.unwrap();
    assert!(ops.session(&fresh, IDLE, t(3)).await.is_ok());
}

/// A session is live while used less than `idle` before: used at `idle` after its last use it
/// is `Unauthenticated`, and it stays ended (a use within the idle period afterwards fails
/// too).
pub async fn sessions_end_when_idle<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let session = token();
    ops.open_session(ana.id, session, t(0)).await.unwrap();
    assert!(ops.session(&session, IDLE, t(59)).await.is_ok());
    assert!(matches!(
        ops.session(&session, IDLE, t(119)).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        ops.session(&session, IDLE, t(120)).await,
        Err(BusError::Unauthenticated)
    ));
    assert!(matches!(
        ops.session(&token(), IDLE, t(0)).await,
        Err(BusError::Unauthenticated)
    ));
}

/// Each use moves `last_seen_at` to its `at` and returns the value before it; `opened_at` stays.
pub async fn using_a_session_moves_last_seen<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let session = token();
    ops.open_session(ana.id, session, t(5)).await.unwrap();
    let first = ops.session(&session, IDLE, t(30)).await.unwrap();
    assert_eq!((first.opened_at, first.last_seen_at), (t(5), t(5)));
    let second = ops.session(&session, IDLE, t(80)).await.unwrap();
    assert_eq!((second.opened_at, second.last_seen_at), (t(5), t(30)));
    // 80 + 59: still live, since it was last used at 80.
    let third = ops.session(&session, IDLE, t(139)).await.unwrap();
    assert_eq!(third.last_seen_at, t(80));
    assert_eq!(third.operator, ana);
}

/// `session_is_live` answers what `session` would, without using the session: asking never
/// moves `last_seen_at` (the session still idles out from its last use), and it is `false` for
/// an ended session, a revoked operator's, an idle or an unknown one.
pub async fn a_session_is_checked_without_being_used<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let session = token();
    ops.open_session(ana.id, session, t(0)).await.unwrap();
    for at in [1, 30, 59] {
        assert!(
            ops.session_is_live(&session, IDLE, t(at)).await.unwrap(),
            "at {at}"
        );
    }
    // Asked at 59, never used since 0: idle at 60.
    assert!(!ops.session_is_live(&session, IDLE, t(60)).await.unwrap());
    let used = token();
    ops.open_session(ana.id, used, t(0)).await.unwrap();
    ops.session(&used, IDLE, t(50)).await.unwrap();
    assert!(ops.session_is_live(&used, IDLE, t(100)).await.unwrap());
    let first = ops.session(&used, IDLE, t(101)).await.unwrap();
    assert_eq!(first.last_seen_at, t(50), "asking is not a use");
    assert!(!ops.session_is_live(&token(), IDLE, t(0)).await.unwrap());
    ops.end_session(&used, t(102)).await.unwrap();
    assert!(!ops.session_is_live(&used, IDLE, t(103)).await.unwrap());
    let bo = operator(&*ops, "bo").await;
    let bos = token();
    ops.open_session(bo.id, bos, t(0)).await.unwrap();
    assert!(ops.session_is_live(&bos, IDLE, t(1)).await.unwrap());
    ops.revoke_operator(bo.id, t(2)).await.unwrap();
    assert!(!ops.session_is_live(&bos, IDLE, t(3)).await.unwrap());
}

/// `open_session` (after a token sign-in): an unknown operator is `NotFound`, a revoked one
/// `Unauthenticated`, a session hash already used `Conflict`.
pub async fn a_session_opened_with_a_token_checks_the_operator<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let bo = operator(&*ops, "bo").await;
    assert!(matches!(
        ops.open_session(Uuid::new_v4(), token(), t(0)).await,
        Err(BusError::NotFound { .. })
    ));
    let session = token();
    ops.open_session(ana.id, session, t(0)).await.unwrap();
    assert!(matches!(
        ops.open_session(bo.id, session, t(1)).await,
        Err(BusError::Conflict { .. })
    ));
    assert_eq!(
        ops.session(&session, IDLE, t(2)).await.unwrap().operator,
        ana
    );
    ops.revoke_operator(bo.id, t(3)).await.unwrap();
    assert!(matches!(
        ops.open_session(bo.id, token(), t(4)).await,
        Err(BusError::Unauthenticated)
    ));
}

/// `end_session` signs out at once; ending it again, or an unknown session, is no error.
pub async fn end_session_signs_out_idempotently<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let (session, other) = (token(), token());
    ops.open_session(ana.id, session, t(0)).await.unwrap();
    ops.open_session(ana.id, other, t(0)).await.unwrap();
    ops.end_session(&session, t(1)).await.unwrap();
    assert!(matches!(
        ops.session(&session, IDLE, t(2)).await,
        Err(BusError::Unauthenticated)
    ));
    ops.end_session(&session, t(3)).await.unwrap();
    ops.end_session(&token(), t(3)).await.unwrap();
    assert!(
        ops.session(&other, IDLE, t(4)).await.is_ok(),
        "only that one"
    );
}

/// `prune_sign_ins` deletes codes used or expired and sessions ended or idle for `idle`, counts
/// them, and leaves live ones working.
pub async fn prune_removes_spent_codes_and_dead_sessions<F: LedgerFixture + ?Sized>(fx: &F) {
    let ops = fx.operators();
    let ana = operator(&*ops, "ana").await;
    let (used, expired, live_code) = (token(), token(), token());
    ops.issue_sign_in_code(ana.id, used, t(600), t(0))
        .await
        .unwrap();
    ops.issue_sign_in_code(ana.id, expired, t(50), t(0))
        .await
        .unwrap();
    ops.issue_sign_in_code(ana.id, live_code, t(600), t(0))
        .await
        .unwrap();
    let from_code = token();
    ops.redeem_sign_in_code(&used, from_code, t(50))
        .await
        .unwrap();
    let (ended, idle, live) = (token(), token(), token());
    for session in [ended, idle] {
        ops.open_session(ana.id, session, t(0)).await.unwrap();
    }
    ops.open_session(ana.id, live, t(50)).await.unwrap();
    ops.end_session(&ended, t(20)).await.unwrap();
    ops.session(&live, IDLE, t(90)).await.unwrap();
    ops.session(&from_code, IDLE, t(90)).await.unwrap();
    // At 100: `used` was used, `expired` expired, `ended` ended, `idle` last seen at 0.
    assert_eq!(ops.prune_sign_ins(IDLE, t(100)).await.unwrap(), 4);
    assert_eq!(ops.prune_sign_ins(IDLE, t(100)).await.unwrap(), 0);
    assert!(ops.session(&live, IDLE, t(101)).await.is_ok());
    assert!(ops.session(&from_code, IDLE, t(101)).await.is_ok());
    assert!(
        ops.redeem_sign_in_code(&live_code, token(), t(102))
            .await
            .is_ok()
    );
    assert!(matches!(
        ops.session(&idle, IDLE, t(101)).await,
        Err(BusError::Unauthenticated)
    ));
}
