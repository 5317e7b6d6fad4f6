//! The SQLite fixture: the scenario on a fresh store file (this build's migrations), its data
//! read from the catalog into a [`Dump`], checked by loading the text into a second fresh store
//! and reading it back.

use std::collections::BTreeSet;
use std::sync::Arc;

use crewbus_conformance::sqlite::TempStore;
use crewbus_domain::TenantId;
use crewbus_sqlite::{SqliteBackends, SqliteConfig, SqliteLedger, SqlitePools, SqliteSettings};
use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

use crate::dump::{Dump, Table, foreign_key_order, hex, quote_ident, quote_text, readable};
use crate::ids::Renamer;
use crate::scenario::{self, FixedClock, GRACE, Made, Ports};

/// The last migration this build has.
pub fn version() -> i64 {
    crewbus_sqlite::MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .expect("migrations")
}

/// A fresh store in `temp`, with every migration of this build.
async fn fresh(temp: &TempStore) -> SqlitePools {
    let pools = crewbus_sqlite::open(
        temp.path(),
        &SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        },
    )
    .await
    .expect("open the store");
    crewbus_sqlite::migrate(&pools).await.expect("migrate");
    pools
}

/// Makes the fixture; returns what the scenario made, the renaming of its ids and the SQL text
/// (with `header`). Panics (keeping the store files, named on stderr) when anything fails.
pub async fn make(header: &[String]) -> (Made, Renamer, String) {
    let temp = TempStore::new("make-upgrade-fixture sqlite");
    let pools = fresh(&temp).await;
    let clock = Arc::new(FixedClock::new());
    let ledger = SqliteLedger::new(pools.clone(), TenantId::default());
    let backends = SqliteBackends::new(
        pools.clone(),
        clock.clone(),
        SqliteSettings {
            ack_wait: GRACE,
            ..SqliteSettings::default()
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
        let mut conn = pools.side_connection().await.expect("a connection");
        sqlx::query("DELETE FROM teams")
            .execute(&mut conn)
            .await
            .expect("discard the team");
    };
    let mut conn = pools.side_connection().await.expect("a connection");
    let mut renamer = crate::name_made(&made);
    let slots: Vec<(Uuid, Uuid)> =
        sqlx::query_as("SELECT id, publish_key FROM outbox_slots ORDER BY ord")
            .fetch_all(&mut conn)
            .await
            .expect("slots");
    for (id, key) in slots {
        renamer.name(id);
        renamer.name(key);
    }
    for m in &made.messages {
        let key: Option<Uuid> =
            sqlx::query_scalar("SELECT publish_key FROM bodies WHERE message_id = ?1")
                .bind(m.id)
                .fetch_optional(&mut conn)
                .await
                .expect("body");
        key.into_iter().for_each(|k| renamer.name(k));
    }
    // The references' event ids (derived from the random message and recipient ids).
    let events: Vec<Uuid> = sqlx::query_scalar("SELECT event_id FROM inbox_queue ORDER BY seq")
        .fetch_all(&mut conn)
        .await
        .expect("events");
    events.into_iter().for_each(|e| renamer.name(e));

    let data = dump(&mut conn).await;
    renamer.covers(&data.ids);
    let text = data.render(header, Some(&renamer));
    drop(conn);
    pools.close().await;

    let again_dir = TempStore::new("make-upgrade-fixture sqlite reload");
    let again = fresh(&again_dir).await;
    let mut conn = again.side_connection().await.expect("a connection");
    sqlx::raw_sql(&text)
        .execute(&mut conn)
        .await
        .expect("the fixture loads into a fresh store");
    let reloaded = dump(&mut conn).await.render(header, None);
    crate::same_text(&text, &reloaded);
    drop(conn);
    again.close().await;
    (made, renamer, text)
}

/// The data of the store behind `conn`.
pub async fn dump(conn: &mut SqliteConnection) -> Dump {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master
         WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'
         ORDER BY rowid",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("tables");
    let mut edges = Vec::new();
    for t in &tables {
        let parents: Vec<String> =
            sqlx::query_scalar("SELECT DISTINCT \"table\" FROM pragma_foreign_key_list(?1)")
                .bind(t)
                .fetch_all(&mut *conn)
                .await
                .expect("foreign keys");
        edges.extend(parents.into_iter().map(|p| (t.clone(), p)));
    }
    let mut out = Dump {
        tables: Vec::new(),
        counters: Vec::new(),
        ids: BTreeSet::new(),
    };
    for name in foreign_key_order(tables, &edges) {
        // (name, declared type, position in the primary key)
        let columns: Vec<(String, String, i64)> =
            sqlx::query_as("SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid")
                .bind(&name)
                .fetch_all(&mut *conn)
                .await
                .expect("columns");
        // A single INTEGER primary key is the rowid: the order the store assigned.
        let key = match &columns
            .iter()
            .filter(|(_, _, pk)| *pk > 0)
            .collect::<Vec<_>>()[..]
        {
            [(c, ty, _)] if ty.eq_ignore_ascii_case("INTEGER") => Some(quote_ident(c)),
            _ => None,
        };
        let select: Vec<String> = columns
            .iter()
            .map(|(c, _, _)| {
                let c = quote_ident(c);
                format!(
                    "typeof({c}), quote({c}), \
                     CASE WHEN typeof({c}) IN ('text', 'blob') THEN CAST({c} AS BLOB) END"
                )
            })
            .collect();
        let rows = sqlx::query(&format!(
            "SELECT {} FROM {} ORDER BY {}",
            select.join(", "),
            quote_ident(&name),
            key.as_deref().unwrap_or("rowid")
        ))
        .fetch_all(&mut *conn)
        .await
        .expect("rows");
        let mut rendered = Vec::new();
        for row in rows {
            let mut values = Vec::new();
            for i in 0..columns.len() {
                let kind: String = row.get(3 * i);
                let quoted: String = row.get(3 * i + 1);
                let bytes: Option<Vec<u8>> = row.get(3 * i + 2);
                values.push(match (kind.as_str(), bytes) {
                    ("blob", Some(b)) if b.len() == 16 => {
                        out.ids.insert(Uuid::from_slice(&b).expect("16 bytes"));
                        format!("X'{}'", hex(&b))
                    }
                    ("blob", Some(b)) => match readable(&b) {
                        Some(text) => format!("CAST({} AS BLOB)", quote_text(text)),
                        None => format!("X'{}'", hex(&b)),
                    },
                    ("text", Some(b)) => match readable(&b) {
                        Some(text) => quote_text(text),
                        None => format!("CAST(X'{}' AS TEXT)", hex(&b)),
                    },
                    // integer, real, null: quote() writes them exactly.
                    _ => quoted,
                });
            }
            rendered.push(format!("({})", values.join(", ")));
        }
        out.tables.push(Table {
            name,
            columns: columns.into_iter().map(|(c, _, _)| c).collect(),
            overriding: false,
            keyed: key.is_some(),
            rows: rendered,
        });
    }
    let counters: Vec<(String, i64)> =
        sqlx::query_as("SELECT name, seq FROM sqlite_sequence ORDER BY name")
            .fetch_all(&mut *conn)
            .await
            .expect("sqlite_sequence");
    for (name, seq) in counters {
        // Inserting rows moved the counter to their largest key; the store's may be higher.
        out.counters.push(format!(
            "DELETE FROM sqlite_sequence WHERE name = {0};\n\
             INSERT INTO sqlite_sequence (name, seq) VALUES ({0}, {seq});",
            quote_text(&name)
        ));
    }
    out
}
