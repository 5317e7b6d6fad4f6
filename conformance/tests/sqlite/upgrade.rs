//! Upgrading a store made before the console migration (`20261201000003_console`): its agents
//! stay agents, its messages stay agents' messages, and the console's reads work on them.

use std::borrow::Cow;

use crewbus_domain::{AgentKind, OperatorScope, TenantId, TokenHash};
use crewbus_ports::{Ledger, Operators, Oversight};
use crewbus_sqlite::SqliteLedger;
use libtest_mimic::Failed;
use sqlx::migrate::Migrator;
use uuid::Uuid;

use crate::TestFn;
use crate::support::{server_config, t};
use crewbus_conformance::sqlite::TempStore;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![a_store_from_before_the_console_upgrades,];

/// The version of the console migration.
const CONSOLE: i64 = 20261201000003;

/// A team with agents `a` and `b`, a conversation of both and a stored message from `a` with
/// `b`'s receipt, written as the schema before the console migration holds them; then every
/// migration, and the ledger reads them back with their kinds.
async fn a_store_from_before_the_console_upgrades() -> Result<(), Failed> {
    let temp = TempStore::new("sqlite::upgrade");
    let pools = crewbus_sqlite::open(temp.path(), &server_config()).await?;
    let before = Migrator {
        migrations: Cow::Owned(
            crewbus_sqlite::MIGRATOR
                .iter()
                .filter(|m| m.version < CONSOLE)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    };
    // A pool of its own on the file (a migrator runs on a pool), as an older build would have.
    let old = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(temp.path()))
        .await?;
    before.run(&old).await?;
    let (team, a, b, conv, message) = (
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
        Uuid::new_v4(),
    );
    let (token_a, token_b) = (TokenHash::of("token-a"), TokenHash::of("token-b"));
    let at = t(0).timestamp_micros();
    let statements = [
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES (?1, 'default', 'old', 'sqlite', 'sqlite', ?2)",
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES (?3, ?1, 'a', 'ka', ?6, ?2), (?4, ?1, 'b', 'kb', ?7, ?2)",
        "INSERT INTO conversations (id, team_id, title, backend, next_seq, created_at)
         VALUES (?5, ?1, 'old talk', 'sqlite', 2, ?2)",
        "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
         VALUES (?5, ?3, 'ka', ?2), (?5, ?4, 'kb', ?2)",
        "INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                               body_sha256, body_len, backend, publication, locator, sent_at,
                               stored_at)
         VALUES (?8, ?1, ?5, 1, ?3, 'r1', ?9, 2, 'sqlite', 'stored', 'sqlite:x', ?2, ?2)",
        "INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at)
         VALUES (?8, ?4, 'kb', ?2)",
    ];
    for sql in statements {
        sqlx::query(sql)
            .bind(team)
            .bind(at)
            .bind(a)
            .bind(b)
            .bind(conv)
            .bind(&token_a.0[..])
            .bind(&token_b.0[..])
            .bind(message)
            .bind(crewbus_domain::body_sha256("hi"))
            .execute(&old)
            .await?;
    }
    old.close().await;
    crewbus_sqlite::migrate(&pools).await?;
    crewbus_sqlite::check_schema(&pools).await?;

    let ledger = SqliteLedger::new(pools.clone(), TenantId::default());
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
            crewbus_domain::SendRequest {
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
    pools.close().await;
    drop(temp);
    Ok(())
}
