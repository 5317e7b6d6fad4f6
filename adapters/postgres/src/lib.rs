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
mod inbox;
mod ledger;
mod push_store;
mod registry;
mod settings;
mod store;
mod wakeups;

pub use body::PostgresBackend;
pub use connect::{PostgresConfig, connect};
pub use feed::{FEED_CHANNEL, LAGGED_PAYLOAD, PostgresFeed};
pub use inbox::PostgresInbox;
pub use ledger::PostgresLedger;
pub use push_store::PostgresPushStore;
pub use registry::PostgresBackends;
pub use settings::PostgresSettings;
pub use wakeups::{CHANNEL as WAKEUP_CHANNEL, PostgresWakeups};

pub use dialect::Pg;

/// One tenant's runs and journals in this store (`PostgresJournal::new(pool, tenant)`; the ledger's
/// `journal()` gives the one over its store and tenant).
pub type PostgresJournal = crewbus_sql::journal::SqlJournal<Pg>;

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
