//! crewbus Postgres adapter, over sqlx: the schema and its migrations ([`migrate`]), the ledger
//! ([`PostgresLedger`], also the operators and the console's oversight reads) and journal
//! ([`PostgresJournal`]), a body backend ([`PostgresBackend`]), an inbox as a queue table
//! ([`PostgresInbox`]) and their registry ([`PostgresBackends`]), the push store
//! ([`PostgresPushStore`]), wake-ups ([`PostgresWakeups`]) and the console feed
//! ([`PostgresFeed`]) over `LISTEN/NOTIFY`.
//!
//! Every statement binds its time from the caller or an injected `Clock` (never `now()` in SQL),
//! and every database error is mapped to a `BusError` in one function, by SQLSTATE and sqlx
//! error kind.
#![warn(missing_docs)]

mod body;
mod connect;
mod dialect;
mod error;
mod feed;
mod ledger;
mod push_store;
mod wakeups;

pub use connect::{PostgresConfig, connect};
pub use feed::{FEED_CHANNEL, LAGGED_PAYLOAD, PostgresFeed};
pub use ledger::PostgresLedger;
pub use wakeups::{CHANNEL as WAKEUP_CHANNEL, PostgresWakeups};

pub use dialect::Pg;

/// One tenant's runs and journals in this store (`PostgresJournal::new(pool, tenant)`; the ledger's
/// `journal()` gives the one over its store and tenant).
pub type PostgresJournal = crewbus_sql::journal::SqlJournal<Pg>;

/// One team's bodies in this store's `bodies` table, the table the ledger's send transaction
/// writes for its own conversations (`PostgresBackend::new(pool, team, clock, &settings)`).
pub type PostgresBackend = crewbus_sql::body::SqlBodies<Pg>;

/// One team's inbox as this store's queue table, `inbox_queue`
/// (`PostgresInbox::new(pool, team, clock, &settings)`).
pub type PostgresInbox = crewbus_sql::inbox::SqlInbox<Pg>;

/// What this store's body backend and inbox are configured with.
pub type PostgresSettings = crewbus_sql::settings::SqlSettings;

/// The registry of this store's per-team body backends and inboxes, answering for [`NAME`]
/// (`PostgresBackends::new(pool, clock, settings)`).
pub type PostgresBackends = crewbus_sql::registry::SqlBackends<Pg>;

/// One tenant's push registrations and their cursors (`PostgresPushStore::new(pool, tenant)`).
pub type PostgresPushStore = crewbus_sql::push_store::SqlPushStore<Pg>;

use crewbus_domain::{BusError, BusResult};
use sqlx::PgPool;

/// The backend name Postgres answers for (`MessagingBackend::name`, `Backends::name`, the
/// scheme of its locators).
pub const NAME: &str = body::SCHEME;

/// The embedded migrations (`adapters/postgres/migrations`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Applies every pending migration to the database behind `pool`; the app calls it at start-up.
///
/// Idempotent (applied migrations are skipped) and safe to run from several processes at once
/// (sqlx takes an advisory lock). Errors: the database unreachable → `Unavailable`; a migration
/// refused or an applied migration changed since → `Conflict` (the schema needs an operator);
/// the cause is kept as the source and logged.
pub async fn migrate(pool: &PgPool) -> BusResult<()> {
    use sqlx::migrate::MigrateError;
    match MIGRATOR.run(pool).await {
        Ok(()) => Ok(()),
        Err(MigrateError::Execute(e)) => Err(error::bus_error(e, "migrations")),
        Err(e) => {
            tracing::error!(error = %e, "postgres migrations refused");
            Err(BusError::conflict(
                "postgres schema: migrations could not be applied",
            ))
        }
    }
}
