//! Upgrading a database made before the console migration (`20261201000003_console`): its
//! agents stay agents, its messages stay agents' messages, and the console's reads work on them.

use std::borrow::Cow;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{AgentKind, OperatorScope, SendRequest, TenantId, TokenHash};
use crewbus_ports::{Ledger, Operators, Oversight};
use crewbus_postgres::PostgresLedger;
use libtest_mimic::Failed;
use sqlx::migrate::Migrator;
use uuid::Uuid;

use crate::TestFn;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![a_database_from_before_the_console_upgrades];

/// The version of the console migration.
const CONSOLE: i64 = 20261201000003;

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

/// A team with agents `a` and `b`, a conversation of both and a stored message from `a` with
/// `b`'s receipt, written as the schema before the console migration holds them; then every
/// migration, and the ledger reads them back with their kinds.
async fn a_database_from_before_the_console_upgrades() -> Result<(), Failed> {
    let before = Migrator {
        migrations: Cow::Owned(
            crewbus_postgres::MIGRATOR
                .iter()
                .filter(|m| m.version < CONSOLE)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    };
    let db = TestDatabase::create("postgres::upgrade", |pool| async move {
        before.run(&pool).await
    })
    .await;
    let pool = db.pool().clone();
    let (team, a, b, conv, message) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    let (token_a, token_b) = (TokenHash::of("token-a"), TokenHash::of("token-b"));
    // The rows as an older build's schema holds them.
    sqlx::query(
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES ($1, 'default', 'old', 'postgres', 'postgres', $2)",
    )
    .bind(team)
    .bind(t(0))
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES ($1, $3, 'a', 'ka', $4, $6), ($2, $3, 'b', 'kb', $5, $6)",
    )
    .bind(a)
    .bind(b)
    .bind(team)
    .bind(&token_a.0[..])
    .bind(&token_b.0[..])
    .bind(t(0))
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO conversations (id, team_id, title, backend, next_seq, created_at)
         VALUES ($1, $2, 'old talk', 'postgres', 2, $3)",
    )
    .bind(conv)
    .bind(team)
    .bind(t(0))
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
         VALUES ($1, $2, 'ka', $4), ($1, $3, 'kb', $4)",
    )
    .bind(conv)
    .bind(a)
    .bind(b)
    .bind(t(0))
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                               body_sha256, body_len, backend, publication, locator, sent_at,
                               stored_at)
         VALUES ($1, $2, $3, 1, $4, 'r1', $5, 2, 'postgres', 'stored', 'postgres:x', $6, $6)",
    )
    .bind(message)
    .bind(team)
    .bind(conv)
    .bind(a)
    .bind(crewbus_domain::body_sha256("hi"))
    .bind(t(0))
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at)
         VALUES ($1, $2, 'kb', $3)",
    )
    .bind(message)
    .bind(b)
    .bind(t(0))
    .execute(&pool)
    .await?;
    crewbus_postgres::migrate(&pool).await?;

    let ledger = PostgresLedger::new(pool.clone(), TenantId::default());
    let agent = ledger.agent_by_token(&token_a).await?;
    assert_eq!((agent.id, agent.kind), (a, AgentKind::Agent));
    let old = ledger.message(team, message).await?;
    assert_eq!(old.sender_kind, AgentKind::Agent);
    let activity = ledger.agent_activity(team).await?;
    let pending: Vec<(Uuid, u64)> = activity.iter().map(|x| (x.agent.id, x.pending)).collect();
    assert_eq!(pending, vec![(a, 0), (b, 1)]);
    assert!(activity.iter().all(|x| x.last_active_at.is_none()));
    let summaries = ledger.conversation_summaries(team).await?;
    assert_eq!(
        (summaries[0].messages, summaries[0].last_sent_at),
        (1, Some(t(0)))
    );
    // The new tables work beside the old rows: an operator, its human member, a send as it.
    let ana = ledger
        .create_operator(
            "ana",
            &OperatorScope::Everything,
            TokenHash::of("operator"),
            t(1),
        )
        .await?;
    let human = ledger.human_member(team, conv, &ana, t(2)).await?;
    assert_eq!(human.kind, AgentKind::Human);
    let sent = ledger
        .send(
            SendRequest {
                team,
                conversation: conv,
                sender: human.id,
                request_id: "r2".into(),
                body: "from a human".into(),
                run: None,
            },
            t(3),
        )
        .await?;
    assert_eq!(
        (sent.message.seq, sent.message.sender_kind),
        (2, AgentKind::Human)
    );
    db.passed().await;
    Ok(())
}
