//! The Postgres fixture: the scenario on a fresh database of `DATABASE_URL`'s server (this build's
//! migrations), its data read from the catalog into a [`Dump`], checked by loading the text into
//! a second fresh database and reading it back.

use std::collections::BTreeSet;
use std::sync::Arc;

use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::TenantId;
use crewbus_postgres::{PostgresBackends, PostgresLedger, PostgresSettings};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::dump::{Dump, Table, foreign_key_order, quote_ident, quote_text, readable};
use crate::ids::Renamer;
use crate::scenario::{self, FixedClock, GRACE, Made, Ports};

/// The last migration this build has.
pub fn version() -> i64 {
    crewbus_postgres::MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .expect("migrations")
}

/// Makes the fixture; returns what the scenario made, the renaming of its ids and the SQL text
/// (with `header`). Panics (keeping the databases, named on stderr) when anything fails.
pub async fn make(header: &[String]) -> (Made, Renamer, String) {
    let db = TestDatabase::create("make-upgrade-fixture postgres", |pool| async move {
        crewbus_postgres::migrate(&pool).await
    })
    .await;
    let pool = db.pool().clone();
    let clock = Arc::new(FixedClock::new());
    let ledger = PostgresLedger::new(pool.clone(), TenantId::default());
    let backends = PostgresBackends::new(
        pool.clone(),
        clock.clone(),
        PostgresSettings {
            ack_wait: GRACE,
            ..PostgresSettings::default()
        },
    );
    let ports = Ports {
        ledger: &ledger,
        backends: &backends,
        clock: &clock,
    };
    let made = loop {
        if let Some(made) = scenario::make(&ports).await {
            break made;
        }
        sqlx::query("DELETE FROM teams")
            .execute(&pool)
            .await
            .expect("discard the team");
    };
    let mut renamer = crate::name_made(&made);
    let slots: Vec<(Uuid, Uuid)> =
        sqlx::query_as("SELECT id, publish_key FROM outbox_slots ORDER BY ord")
            .fetch_all(&pool)
            .await
            .expect("slots");
    for (id, key) in slots {
        renamer.name(id);
        renamer.name(key);
    }
    for m in &made.messages {
        let key: Option<Uuid> =
            sqlx::query_scalar("SELECT publish_key FROM bodies WHERE message_id = $1")
                .bind(m.id)
                .fetch_optional(&pool)
                .await
                .expect("body");
        key.into_iter().for_each(|k| renamer.name(k));
    }
    // The references' event ids (derived from the random message and recipient ids).
    let events: Vec<Uuid> = sqlx::query_scalar("SELECT event_id FROM inbox_queue ORDER BY seq")
        .fetch_all(&pool)
        .await
        .expect("events");
    events.into_iter().for_each(|e| renamer.name(e));

    let data = dump(&pool).await;
    renamer.covers(&data.ids);
    let text = data.render(header, Some(&renamer));

    let again = TestDatabase::create("make-upgrade-fixture postgres reload", |pool| async move {
        crewbus_postgres::migrate(&pool).await
    })
    .await;
    sqlx::raw_sql(&text)
        .execute(again.pool())
        .await
        .expect("the fixture loads into a fresh database");
    let reloaded = dump(again.pool()).await.render(header, None);
    crate::same_text(&text, &reloaded);
    again.passed().await;
    db.passed().await;
    (made, renamer, text)
}

/// The data of the database behind `pool` (schema `public`).
pub async fn dump(pool: &PgPool) -> Dump {
    let mut conn = pool.acquire().await.expect("a connection");
    // Literals that read the same whatever session loads them.
    sqlx::raw_sql(
        "SET TimeZone TO 'UTC'; SET DateStyle TO 'ISO, YMD'; SET extra_float_digits TO 3;
         SET bytea_output TO 'hex'",
    )
    .execute(&mut *conn)
    .await
    .expect("session settings");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_class
         WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')
           AND relname <> '_sqlx_migrations'
         ORDER BY oid",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("tables");
    let edges: Vec<(String, String)> = sqlx::query_as(
        "SELECT child.relname::text, parent.relname::text FROM pg_constraint k
         JOIN pg_class child ON child.oid = k.conrelid
         JOIN pg_class parent ON parent.oid = k.confrelid
         WHERE k.contype = 'f' AND k.connamespace = 'public'::regnamespace",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("foreign keys");
    let mut out = Dump {
        tables: Vec::new(),
        counters: Vec::new(),
        ids: BTreeSet::new(),
    };
    for name in foreign_key_order(tables, &edges) {
        // (name, type, identity: '' | 'a' always | 'd' by default)
        let columns: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT attname::text, format_type(atttypid, atttypmod), attidentity::text
             FROM pg_attribute
             WHERE attrelid = (SELECT oid FROM pg_class
                               WHERE relname = $1 AND relnamespace = 'public'::regnamespace)
               AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
             ORDER BY attnum",
        )
        .bind(&name)
        .fetch_all(&mut *conn)
        .await
        .expect("columns");
        let select: Vec<String> = columns
            .iter()
            .map(|(c, ty, _)| match ty.as_str() {
                "bytea" => format!("encode({}, 'hex')", quote_ident(c)),
                _ => format!("quote_nullable({})", quote_ident(c)),
            })
            .collect();
        let identity: Vec<String> = columns
            .iter()
            .filter(|(_, _, i)| !i.is_empty())
            .map(|(c, _, _)| quote_ident(c))
            .collect();
        let order = if identity.is_empty() {
            "1".to_owned()
        } else {
            identity.join(", ")
        };
        let rows = sqlx::query(&format!(
            "SELECT {} FROM {} ORDER BY {order}",
            select.join(", "),
            quote_ident(&name)
        ))
        .fetch_all(&mut *conn)
        .await
        .expect("rows");
        let mut rendered = Vec::new();
        for row in rows {
            let mut values = Vec::new();
            for (i, (_, ty, _)) in columns.iter().enumerate() {
                let v: Option<String> = row.get(i);
                values.push(match (ty.as_str(), v) {
                    ("bytea", None) => "NULL".to_owned(),
                    ("bytea", Some(h)) => bytea_literal(&h),
                    ("uuid", Some(q)) if q != "NULL" => {
                        out.ids
                            .insert(q.trim_matches('\'').parse().expect("a uuid literal"));
                        q
                    }
                    (_, v) => v.expect("quote_nullable never answers NULL"),
                });
            }
            rendered.push(format!("({})", values.join(", ")));
        }
        out.tables.push(Table {
            name,
            overriding: columns.iter().any(|(_, _, i)| i == "a"),
            columns: columns.into_iter().map(|(c, _, _)| c).collect(),
            keyed: !identity.is_empty(),
            rows: rendered,
        });
    }
    let sequences: Vec<(String, Option<i64>)> = sqlx::query_as(
        "SELECT sequencename::text, last_value FROM pg_sequences
         WHERE schemaname = 'public' ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("sequences");
    for (name, last) in sequences {
        if let Some(last) = last {
            out.counters.push(format!(
                "SELECT setval({}, {last}, true);",
                quote_text(&format!("public.{}", quote_ident(&name)))
            ));
        }
    }
    out
}

/// A `bytea` value from its hex: as UTF-8 text when it is readable, else as hex.
fn bytea_literal(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex from encode()"))
        .collect();
    match readable(&bytes) {
        Some(text) => format!("convert_to({}, 'UTF8')", quote_text(text)),
        None => format!("'\\x{hex}'::bytea"),
    }
}
