//! Upgrading real databases: one made before the console migration (`20261201000003_console`)
//! — its agents stay agents, its messages stay agents' messages, and the console's reads work on
//! them —, and one made before request ids became per sender (`20261202000001`) — every row that
//! is or references a message is kept, the request-id constraint is the new one, and a second
//! sender's use of a request id is now stored.

use std::borrow::Cow;
use std::collections::BTreeSet;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{AgentKind, OperatorScope, Publication, SendRequest, TenantId, TokenHash};
use crewbus_ports::{Ledger, Operators, Oversight, Search};
use crewbus_postgres::PostgresLedger;
use libtest_mimic::Failed;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use uuid::Uuid;

use crate::TestFn;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    a_database_from_before_the_console_upgrades,
    a_database_from_before_request_ids_per_sender_upgrades,
];

/// The version of the console migration.
const CONSOLE: i64 = 20261201000003;

/// The version of the migration that makes request ids per sender.
const PER_SENDER: i64 = 20261202000001;

/// sqlx's migrator for the migrations before `version` only, as an older build ran them.
fn migrations_before(version: i64) -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            crewbus_postgres::MIGRATOR
                .iter()
                .filter(|m| m.version < version)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

/// A team with agents `a` and `b`, a conversation of both and a stored message from `a` with
/// `b`'s receipt, written as the schema before the console migration holds them; then every
/// migration, and the ledger reads them back with their kinds.
async fn a_database_from_before_the_console_upgrades() -> Result<(), Failed> {
    let before = migrations_before(CONSOLE);
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

/// The tables whose rows are or reference a message (directly, or through its receipts).
const KEPT: [&str; 5] = [
    "messages",
    "receipts",
    "outbox_slots",
    "inbox_events",
    "hand_outs",
];

/// Every row of `table` as JSON text, sorted: two reads are equal exactly when every value of
/// every row is.
async fn rows_of(pool: &PgPool, table: &str) -> Result<Vec<String>, Failed> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT row_to_json(t)::text FROM {table} t ORDER BY 1"
    ))
    .fetch_all(pool)
    .await?)
}

/// The unique constraints of `messages`: name and definition.
async fn unique_constraints(pool: &PgPool) -> Result<BTreeSet<(String, String)>, Failed> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint
         WHERE conrelid = 'messages'::regclass AND contype = 'u'",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// A database at the console migration (the last before request ids per sender) holding a team
/// of agents `a`, `b`, `c` and a human member, one conversation of all four, and messages in the
/// states a running store has them: `a`'s `t42-1` stored (b's receipt delivered and
/// acknowledged, its hand-out confirmed; c's receipt stored, its inbox event published), `b`'s
/// `r2` pending with its outbox slot, the human's `h1` stored. Upgraded by `migrate`: every row
/// of [`KEPT`] is as it was, the unique constraint on `(conversation_id, request_id)` is
/// replaced by one on `(conversation_id, sender_id, request_id)`, the ledger reads every message
/// and receipt, and `b` sending `t42-1` creates its own message while `a`'s repeat still answers
/// `a`'s.
async fn a_database_from_before_request_ids_per_sender_upgrades() -> Result<(), Failed> {
    let before = migrations_before(PER_SENDER);
    let db = TestDatabase::create("postgres::upgrade_per_sender", |pool| async move {
        before.run(&pool).await
    })
    .await;
    let pool = db.pool().clone();
    let [team, a, b, c, h, operator, conv, m1, m2, m3] = [(); 10].map(|()| Uuid::new_v4());
    let [slot, publish_key, event, delivery] = [(); 4].map(|()| Uuid::new_v4());
    let tokens = ["a", "b", "c", "h", "op"].map(TokenHash::of);
    let statements = [
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES ($1, 'default', 'old', 'remote', 'postgres', $11)",
        "INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
         VALUES ($6, 'default', 'ana', $17, true, $11)",
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES ($2, $1, 'a', 'ka', $13, $11), ($3, $1, 'b', 'kb', $14, $11),
                ($4, $1, 'c', 'kc', $15, $11)",
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at, kind,
                             operator_id)
         VALUES ($5, $1, 'ana (human)', 'kh', $16, $11, 'human', $6)",
        "INSERT INTO conversations (id, team_id, title, backend, next_seq, created_at)
         VALUES ($7, $1, 'old talk', 'remote', 4, $11)",
        "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
         VALUES ($7, $2, 'ka', $11), ($7, $3, 'kb', $11), ($7, $4, 'kc', $11),
                ($7, $5, 'kh', $11)",
        "INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                               body_sha256, body_len, backend, publication, locator, sent_at,
                               stored_at, sender_kind)
         VALUES ($8, $1, $7, 1, $2, 't42-1', $18, 2, 'remote', 'stored', 'remote:1', $11, $11,
                 'agent'),
                ($9, $1, $7, 2, $3, 'r2', $19, 5, 'remote', 'pending_publication', NULL, $12,
                 NULL, 'agent'),
                ($10, $1, $7, 3, $5, 'h1', $18, 2, 'remote', 'stored', 'remote:3', $12, $12,
                 'human')",
        "INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at, delivered_at,
                               acknowledged_at)
         VALUES ($8, $3, 'kb', $11, $12, $12), ($8, $4, 'kc', $11, NULL, NULL),
                ($9, $2, 'ka', NULL, NULL, NULL), ($9, $4, 'kc', NULL, NULL, NULL),
                ($10, $2, 'ka', $12, NULL, NULL), ($10, $3, 'kb', $12, NULL, NULL),
                ($10, $4, 'kc', $12, NULL, NULL)",
        "INSERT INTO outbox_slots (id, tenant, message_id, team_id, conversation_id, backend,
                                   publish_key, body, next_attempt_at)
         VALUES ($20, 'default', $9, $1, $7, 'remote', $21, convert_to('hello', 'UTF8'), $12)",
        "INSERT INTO inbox_events (id, tenant, team_id, message_id, recipient_id, recipient_key,
                                   inbox, payload, created_at, published_at)
         VALUES ($22, 'default', $1, $8, $4, 'kc', 'postgres', '{}', $11, $12),
                (gen_random_uuid(), 'default', $1, $10, $2, 'ka', 'postgres', '{}', $12, NULL)",
        "INSERT INTO hand_outs (delivery_id, team_id, message_id, recipient_id, conversation_id,
                                seq, redelivered, issued_at, held_until, ack_inbox, ack_subject,
                                confirmed_at)
         VALUES ($23, $1, $8, $3, $7, 1, false, $11, $12, 'postgres', 'ack-1', $12)",
    ];
    // Each statement is sent with every parameter it names (Postgres refuses unused ones).
    for sql in statements {
        let mut q = sqlx::query(sql);
        let last = (1..=23)
            .rev()
            .find(|n| sql.contains(&format!("${n}")))
            .expect("a statement names its parameters");
        for n in 1..=last {
            q = match n {
                1..=10 => q.bind([team, a, b, c, h, operator, conv, m1, m2, m3][n - 1]),
                11 => q.bind(t(0)),
                12 => q.bind(t(1)),
                13..=17 => q.bind(tokens[n - 13].0.to_vec()),
                18 => q.bind(crewbus_domain::body_sha256("hi")),
                19 => q.bind(crewbus_domain::body_sha256("hello")),
                _ => q.bind([slot, publish_key, event, delivery][n - 20]),
            };
        }
        q.execute(&pool).await?;
    }
    let mut before = Vec::new();
    for table in KEPT {
        before.push(rows_of(&pool, table).await?);
    }
    assert_eq!(
        before.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 7, 1, 2, 1],
        "the old database holds what the test wrote"
    );
    let constraint = |name: &str, columns: &str| (name.to_owned(), format!("UNIQUE ({columns})"));
    assert_eq!(
        unique_constraints(&pool).await?,
        BTreeSet::from([
            constraint("messages_conversation_id_seq_key", "conversation_id, seq"),
            constraint(
                "messages_conversation_id_request_id_key",
                "conversation_id, request_id"
            ),
        ])
    );

    migrations_before(PER_SENDER + 1).run(&pool).await?;

    for (table, rows) in KEPT.iter().zip(&before) {
        assert_eq!(
            &rows_of(&pool, table).await?,
            rows,
            "{table} kept row for row"
        );
    }
    assert_eq!(
        unique_constraints(&pool).await?,
        BTreeSet::from([
            constraint("messages_conversation_id_seq_key", "conversation_id, seq"),
            constraint(
                "messages_conversation_id_sender_id_request_id_key",
                "conversation_id, sender_id, request_id"
            ),
        ])
    );

    // Then every later migration: the references of m3 (an unpublished inbox event) stay due,
    // as one marker; m1's (published) do not.
    crewbus_postgres::migrate(&pool).await?;
    let marks: Vec<Uuid> = sqlx::query_scalar("SELECT message_id FROM reference_marks")
        .fetch_all(&pool)
        .await?;
    assert_eq!(marks, vec![m3]);

    let ledger = PostgresLedger::new(pool.clone(), TenantId::default());
    crewbus_conformance::ledger::references::references_due_after_the_upgrade(
        &ledger,
        team,
        m3,
        &[a, b, c],
        m1,
        t(0),
        t(5),
    )
    .await;
    for (id, seq, sender, kind, publication) in [
        (m1, 1, a, AgentKind::Agent, Publication::Stored),
        (m2, 2, b, AgentKind::Agent, Publication::PendingPublication),
        (m3, 3, h, AgentKind::Human, Publication::Stored),
    ] {
        let m = ledger.message(team, id).await?;
        assert_eq!(
            (m.seq, m.sender, m.sender_kind, m.publication),
            (seq, sender, kind, publication)
        );
    }
    let delivered: BTreeSet<(Uuid, bool, bool)> = ledger
        .receipts(team, m1)
        .await?
        .into_iter()
        .map(|r| {
            (
                r.recipient,
                r.delivered_at.is_some(),
                r.acknowledged_at.is_some(),
            )
        })
        .collect();
    assert_eq!(
        delivered,
        BTreeSet::from([(b, true, true), (c, false, false)])
    );
    assert_eq!(ledger.receipts(team, m2).await?.len(), 2);
    assert_eq!(ledger.receipts(team, m3).await?.len(), 3);
    // Search (20261203000020): the messages stored before it are its backlog.
    let backlog: BTreeSet<Uuid> = ledger
        .unindexed(None, 10)
        .await?
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(backlog, BTreeSet::from([m1, m3]));

    // The request id `a` used is free for `b`; `a`'s repeat still answers `a`'s message.
    let send = |sender: Uuid, body: &str| SendRequest {
        team,
        conversation: conv,
        sender,
        request_id: "t42-1".into(),
        body: body.into(),
        run: None,
    };
    let bobs = ledger.send(send(b, "bob's own"), t(3)).await?;
    assert!(bobs.created, "b's first use of t42-1 is stored");
    assert_eq!((bobs.message.seq, bobs.message.sender), (4, b));
    let again = ledger.send(send(a, "hi"), t(3)).await?;
    assert_eq!((again.created, again.message.id), (false, m1));
    let bobs_again = ledger.send(send(b, "bob's own"), t(4)).await?;
    assert_eq!(
        (bobs_again.created, bobs_again.message.id),
        (false, bobs.message.id)
    );
    db.passed().await;
    Ok(())
}
