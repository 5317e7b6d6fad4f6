//! Upgrading real stores: one made before the console migration (`20261201000003_console`) —
//! its agents stay agents, its messages stay agents' messages, and the console's reads work on
//! them —, and one made before request ids became per sender (`20261202000001`, which rebuilds
//! `messages` with foreign keys off) — every row of every table that references a message is
//! kept as it was, the rebuilt table has the old one's columns, checks, foreign keys and indexes,
//! and a second sender's use of a request id is now stored.

use std::borrow::Cow;
use std::collections::BTreeSet;

use crewbus_domain::{AgentKind, OperatorScope, Publication, SendRequest, TenantId, TokenHash};
use crewbus_ports::{Ledger, Operators, Oversight, Search};
use crewbus_sqlite::SqliteLedger;
use libtest_mimic::Failed;
use sqlx::migrate::Migrator;
use sqlx::{Connection, SqliteConnection};
use uuid::Uuid;

use crate::TestFn;
use crate::support::{server_config, t};
use crewbus_conformance::sqlite::TempStore;

pub(crate) const TESTS: &[(&str, TestFn)] = tests![
    a_store_from_before_the_console_upgrades,
    a_store_from_before_request_ids_per_sender_upgrades,
];

/// The version of the console migration.
const CONSOLE: i64 = 20261201000003;

/// The version of the migration that makes request ids per sender (a rebuild of `messages`).
const PER_SENDER: i64 = 20261202000001;
/// Columns of the tables [`PER_SENDER`] rebuilds that later migrations added.
const ADDED_AFTER_PER_SENDER: &[&str] = &["indexed_at"];

/// sqlx's migrator for the migrations before `version` only, as an older build ran them.
fn migrations_before(version: i64) -> Migrator {
    Migrator {
        migrations: Cow::Owned(
            crewbus_sqlite::MIGRATOR
                .iter()
                .filter(|m| m.version < version)
                .cloned()
                .collect(),
        ),
        ..Migrator::DEFAULT
    }
}

/// A team with agents `a` and `b`, a conversation of both and a stored message from `a` with
/// `b`'s receipt, written as the schema before the console migration holds them; then every
/// migration, and the ledger reads them back with their kinds.
async fn a_store_from_before_the_console_upgrades() -> Result<(), Failed> {
    let temp = TempStore::new("sqlite::upgrade");
    let pools = crewbus_sqlite::open(temp.path(), &server_config()).await?;
    let before = migrations_before(CONSOLE);
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

/// Every row of `table`, each as its columns' SQL literals (`quote`) in column order, sorted:
/// two reads are equal exactly when every value of every row is.
async fn rows_of(conn: &mut SqliteConnection, table: &str) -> Result<Vec<String>, Failed> {
    rows_without(conn, table, &[]).await
}

/// [`rows_of`] without the columns `except`.
async fn rows_without(
    conn: &mut SqliteConnection,
    table: &str,
    except: &[&str],
) -> Result<Vec<String>, Failed> {
    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
            .bind(table)
            .fetch_all(&mut *conn)
            .await?;
    let columns: Vec<String> = columns
        .into_iter()
        .filter(|c| !except.contains(&c.as_str()))
        .collect();
    assert!(!columns.is_empty(), "table {table} exists");
    let row = columns
        .iter()
        .map(|c| format!("quote(\"{c}\")"))
        .collect::<Vec<_>>()
        .join(" || '|' || ");
    Ok(
        sqlx::query_scalar(&format!("SELECT {row} FROM \"{table}\" ORDER BY 1"))
            .fetch_all(&mut *conn)
            .await?,
    )
}

/// What `messages` is made of, as SQLite reports it: its columns (name, type, not null,
/// default, primary key), its foreign keys, its CHECK clauses (from its SQL, whitespace
/// collapsed, sorted), its named indexes' SQL, and the columns of each UNIQUE constraint.
#[derive(Debug, PartialEq, Eq)]
struct MessagesSchema {
    columns: Vec<String>,
    foreign_keys: Vec<String>,
    checks: Vec<String>,
    indexes: Vec<String>,
    uniques: BTreeSet<String>,
}

async fn messages_schema(conn: &mut SqliteConnection) -> Result<MessagesSchema, Failed> {
    let columns = sqlx::query_scalar(
        "SELECT name || ' ' || type || ' ' || \"notnull\" || ' ' || ifnull(dflt_value, '-')
                || ' ' || pk
         FROM pragma_table_info('messages') ORDER BY cid",
    )
    .fetch_all(&mut *conn)
    .await?;
    let foreign_keys = sqlx::query_scalar(
        "SELECT id || ' ' || seq || ' ' || \"table\" || ' ' || \"from\" || ' ' || \"to\"
                || ' ' || on_update || ' ' || on_delete
         FROM pragma_foreign_key_list('messages') ORDER BY id, seq",
    )
    .fetch_all(&mut *conn)
    .await?;
    let sql: String = sqlx::query_scalar(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'",
    )
    .fetch_one(&mut *conn)
    .await?;
    let indexes = sqlx::query_scalar(
        "SELECT sql FROM sqlite_master
         WHERE type = 'index' AND tbl_name = 'messages' AND sql IS NOT NULL ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let uniques = sqlx::query_scalar(
        "SELECT (SELECT group_concat(name, ',') FROM
                     (SELECT name FROM pragma_index_info(l.name) ORDER BY seqno))
         FROM pragma_index_list('messages') l WHERE l.origin = 'u'",
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .collect();
    Ok(MessagesSchema {
        columns,
        foreign_keys,
        checks: check_clauses(&sql),
        indexes,
        uniques,
    })
}

/// Every `CHECK (…)` clause of a `CREATE TABLE` text, whitespace collapsed, sorted.
fn check_clauses(sql: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find("CHECK") {
        let after = &rest[at..];
        let open = after.find('(').expect("CHECK is followed by its clause");
        let mut depth = 0;
        let mut end = open;
        for (i, c) in after[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = open + i + 1;
                break;
            }
        }
        found.push(
            after[..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        );
        rest = &after[end..];
    }
    found.sort();
    found
}

/// The tables whose rows reference a message (directly, or through its receipts), and the
/// message table itself: what the rebuild must keep row for row.
const KEPT: [&str; 5] = [
    "messages",
    "receipts",
    "outbox_slots",
    "inbox_events",
    "hand_outs",
];

/// [`KEPT`] after the migration that keeps references as one marker per message
/// (`20261202000002`): the inbox events are gone.
const KEPT_NOW: [&str; 5] = [
    "messages",
    "receipts",
    "outbox_slots",
    "reference_marks",
    "hand_outs",
];

/// A store at the console migration (the last before request ids per sender) holding a team of
/// agents `a`, `b`, `c` and a human member, one conversation of all four, and messages in the
/// states a running store has them: `a`'s `t42-1` stored (b's receipt delivered and
/// acknowledged, its hand-out confirmed; c's receipt stored, its inbox event published), `b`'s
/// `r2` pending with its outbox slot (and receipts not yet stored), the human's `h1` stored.
/// Upgraded by `migrate`, every row of [`KEPT`] is as it was, `messages` is the same table but
/// for its request-id constraint, `foreign_key_check` finds nothing, the ledger reads every
/// message and receipt and counts them, and `b` sending `t42-1` creates its own message while
/// `a`'s repeat still answers `a`'s. A lost bookkeeping row makes the next start run the
/// rebuild again, into the same rows.
async fn a_store_from_before_request_ids_per_sender_upgrades() -> Result<(), Failed> {
    let temp = TempStore::new("sqlite::upgrade_per_sender");
    let pools = crewbus_sqlite::open(temp.path(), &server_config()).await?;
    let old = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(temp.path())
                .foreign_keys(true),
        )
        .await?;
    migrations_before(PER_SENDER).run(&old).await?;
    let [team, a, b, c, h, operator, conv, m1, m2, m3] = [(); 10].map(|()| Uuid::new_v4());
    let [slot, event, delivery] = [(); 3].map(|()| Uuid::new_v4());
    let tokens = ["a", "b", "c", "h", "op"].map(TokenHash::of);
    let (at, later) = (t(0).timestamp_micros(), t(1).timestamp_micros());
    let statements = [
        "INSERT INTO teams (id, tenant, name, body_backend, inbox, created_at)
         VALUES (?1, 'default', 'old', 'remote', 'sqlite', ?11)",
        "INSERT INTO operators (id, tenant, name, token_hash, all_teams, created_at)
         VALUES (?6, 'default', 'ana', ?17, 1, ?11)",
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at)
         VALUES (?2, ?1, 'a', 'ka', ?13, ?11), (?3, ?1, 'b', 'kb', ?14, ?11),
                (?4, ?1, 'c', 'kc', ?15, ?11)",
        "INSERT INTO agents (id, team_id, name, recipient_key, token_hash, created_at, kind,
                             operator_id)
         VALUES (?5, ?1, 'ana (human)', 'kh', ?16, ?11, 'human', ?6)",
        "INSERT INTO conversations (id, team_id, title, backend, next_seq, created_at)
         VALUES (?7, ?1, 'old talk', 'remote', 4, ?11)",
        "INSERT INTO members (conversation_id, agent_id, recipient_key, joined_at)
         VALUES (?7, ?2, 'ka', ?11), (?7, ?3, 'kb', ?11), (?7, ?4, 'kc', ?11),
                (?7, ?5, 'kh', ?11)",
        "INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                               body_sha256, body_len, backend, publication, locator, sent_at,
                               stored_at)
         VALUES (?8, ?1, ?7, 1, ?2, 't42-1', ?18, 2, 'remote', 'stored', 'remote:1', ?11, ?11),
                (?9, ?1, ?7, 2, ?3, 'r2', ?19, 5, 'remote', 'pending_publication', NULL, ?12,
                 NULL)",
        "INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                               body_sha256, body_len, backend, publication, locator, sent_at,
                               stored_at, sender_kind)
         VALUES (?10, ?1, ?7, 3, ?5, 'h1', ?18, 2, 'remote', 'stored', 'remote:3', ?12, ?12,
                 'human')",
        "INSERT INTO receipts (message_id, recipient_id, recipient_key, stored_at, delivered_at,
                               acknowledged_at)
         VALUES (?8, ?3, 'kb', ?11, ?12, ?12), (?8, ?4, 'kc', ?11, NULL, NULL),
                (?9, ?2, 'ka', NULL, NULL, NULL), (?9, ?4, 'kc', NULL, NULL, NULL),
                (?10, ?2, 'ka', ?12, NULL, NULL), (?10, ?3, 'kb', ?12, NULL, NULL),
                (?10, ?4, 'kc', ?12, NULL, NULL)",
        "INSERT INTO outbox_slots (id, tenant, message_id, team_id, conversation_id, backend,
                                   publish_key, body, next_attempt_at)
         VALUES (?20, 'default', ?9, ?1, ?7, 'remote', ?20, CAST('hello' AS BLOB), ?12)",
        "INSERT INTO inbox_events (id, tenant, team_id, message_id, recipient_id, recipient_key,
                                   inbox, payload, created_at, published_at)
         VALUES (?21, 'default', ?1, ?8, ?4, 'kc', 'sqlite', '{}', ?11, ?12),
                (randomblob(16), 'default', ?1, ?10, ?2, 'ka', 'sqlite', '{}', ?12, NULL)",
        "INSERT INTO hand_outs (delivery_id, team_id, message_id, recipient_id, conversation_id,
                                seq, redelivered, issued_at, held_until, ack_inbox, ack_subject,
                                confirmed_at)
         VALUES (?22, ?1, ?8, ?3, ?7, 1, 0, ?11, ?12, 'sqlite', 'ack-1', ?12)",
    ];
    for sql in statements {
        let mut q = sqlx::query(sql);
        for id in [team, a, b, c, h, operator, conv, m1, m2, m3] {
            q = q.bind(id);
        }
        q = q.bind(at).bind(later);
        for token in &tokens {
            q = q.bind(token.0.to_vec());
        }
        q.bind(crewbus_domain::body_sha256("hi"))
            .bind(crewbus_domain::body_sha256("hello"))
            .bind(slot)
            .bind(event)
            .bind(delivery)
            .execute(&old)
            .await?;
    }
    let mut conn = old.acquire().await?;
    let mut before = Vec::new();
    for table in KEPT {
        before.push(rows_of(&mut conn, table).await?);
    }
    assert_eq!(
        before.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 7, 1, 2, 1],
        "the old store holds what the test wrote"
    );
    let schema_before = messages_schema(&mut conn).await?;
    drop(conn);
    old.close().await;

    crewbus_sqlite::migrate_to(&pools, PER_SENDER).await?;

    let mut side = pools.side_connection().await?;
    for (table, rows) in KEPT.iter().zip(&before) {
        assert_eq!(
            &rows_of(&mut side, table).await?,
            rows,
            "{table} kept row for row"
        );
    }
    let violations: i64 = sqlx::query_scalar("SELECT count(*) FROM pragma_foreign_key_check")
        .fetch_one(&mut side)
        .await?;
    assert_eq!(violations, 0, "foreign_key_check finds nothing");
    let schema_after = messages_schema(&mut side).await?;
    assert_eq!(
        schema_before.uniques,
        BTreeSet::from([
            "conversation_id,request_id".to_owned(),
            "conversation_id,seq".to_owned()
        ])
    );
    assert_eq!(
        schema_after.uniques,
        BTreeSet::from([
            "conversation_id,sender_id,request_id".to_owned(),
            "conversation_id,seq".to_owned()
        ])
    );
    assert_eq!(schema_after.checks.len(), 11, "{:?}", schema_after.checks);
    assert_eq!(
        MessagesSchema {
            uniques: BTreeSet::new(),
            ..schema_after
        },
        MessagesSchema {
            uniques: BTreeSet::new(),
            ..schema_before
        },
        "the same columns, checks, foreign keys and indexes"
    );

    // Then every later migration: the references of m3 (an unpublished inbox event) stay due,
    // as one marker; m1's (published) do not.
    side.close().await?;
    crewbus_sqlite::migrate(&pools).await?;
    crewbus_sqlite::check_schema(&pools).await?;
    let mut side = pools.side_connection().await?;
    let marks: Vec<Uuid> = sqlx::query_scalar("SELECT message_id FROM reference_marks")
        .fetch_all(&mut side)
        .await?;
    assert_eq!(marks, vec![m3]);

    // Through the ledger: every message and receipt as it was, the counts over them (their
    // reads name the rebuilt partial indexes).
    let ledger = SqliteLedger::new(pools.clone(), TenantId::default());
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
    let delivered: Vec<(Uuid, bool, bool)> = ledger
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
        delivered.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([(b, true, true), (c, false, false)])
    );
    assert_eq!(ledger.receipts(team, m2).await?.len(), 2);
    assert_eq!(ledger.receipts(team, m3).await?.len(), 3);
    let counts = ledger.counts(t(2)).await?;
    assert_eq!(
        (
            counts.pending_publications,
            counts.deliveries,
            counts.undelivered
        ),
        (1, 1, 4)
    );
    let due = ledger.retention_due(t(5), 10).await?;
    assert_eq!(
        due.iter().map(|d| d.messages).sum::<u64>(),
        2,
        "the stored ones"
    );
    // Search (20261203000020): the messages stored before it are its backlog, oldest first.
    let backlog: Vec<Uuid> = ledger
        .unindexed(None, 10)
        .await?
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(backlog, [m1, m3]);

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

    // A start whose bookkeeping row was lost after the rebuild committed runs it again: the
    // same rows, the same schema. Such a start comes before any later migration; this store is
    // past them, and the rebuild copies only the columns it knows, so the columns later
    // migrations added to `messages` (`indexed_at`, 20261203000020) are left out of the
    // comparison.
    let mut after = Vec::new();
    for table in KEPT_NOW {
        after.push(rows_without(&mut side, table, ADDED_AFTER_PER_SENDER).await?);
    }
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = ?1")
        .bind(PER_SENDER)
        .execute(&mut side)
        .await?;
    side.close().await?;
    crewbus_sqlite::migrate(&pools).await?;
    let mut side = pools.side_connection().await?;
    for (table, rows) in KEPT_NOW.iter().zip(&after) {
        assert_eq!(
            &rows_without(&mut side, table, ADDED_AFTER_PER_SENDER).await?,
            rows,
            "{table} after a rerun"
        );
    }
    assert_eq!(messages_schema(&mut side).await?.uniques.len(), 2);
    side.close().await?;
    pools.close().await;
    drop(temp);
    Ok(())
}
