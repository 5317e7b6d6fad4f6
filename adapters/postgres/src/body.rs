//! `PostgresBackend`: message bodies in the `bodies` table, the table the ledger's send
//! transaction writes for Postgres conversations (written once for both SQL stores:
//! [`crewbus_sql::body`]).

use std::sync::Arc;

use crewbus_domain::Locator;
use crewbus_ports::Clock;
use crewbus_sql::body::SqlBodies;
use sqlx::PgPool;
use uuid::Uuid;

use crate::settings::PostgresSettings;
use crate::store::Store;

/// The locator scheme (and backend name) of Postgres bodies: `postgres:<message id>`.
pub(crate) const SCHEME: &str = "postgres";

/// One team's bodies in Postgres.
///
/// - `publish` inserts into `bodies` keyed by message id, unique on `publish_key`, so it is
///   idempotent for the life of the row: the same key again → `Confirmed { duplicate: true }`,
///   the same message id under another key → `Fatal(Conflict)`; another team's envelope →
///   `Fatal(Forbidden)`; a body above [`PostgresSettings::max_body_bytes`] → `Fatal(TooLarge)`
///   (`max_body_bytes` answers that limit). Bodies are stored as UTF-8 bytes (`bytea`), so
///   every Rust string is storable, U+0000 included (Postgres `text` refuses it). Each
///   statement commits on its own.
/// - A connection lost after the statement was sent → `Uncertain(Unavailable)`; the database
///   unreachable before sending (pool timeout) or refusing with a retryable SQLSTATE →
///   `Retryable`.
/// - Store times (for `retain`) come from the injected [`Clock`].
#[derive(Clone)]
pub struct PostgresBackend(SqlBodies<Store>);

crewbus_sql::impl_body_backend!(PostgresBackend);

/// The locator of the body of `message_id`.
pub(crate) fn locator_for(message_id: Uuid) -> Locator {
    Locator::for_message(SCHEME, message_id)
}

impl PostgresBackend {
    /// The body backend of `team` over `pool`, with the size limit of `settings` and store times
    /// from `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pool: PgPool,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &PostgresSettings,
    ) -> Self {
        PostgresBackend(SqlBodies::new(
            Store(pool),
            team,
            clock,
            settings.max_body_bytes,
        ))
    }
}
