//! `SqliteBackend`: message bodies in the `bodies` table, the table the ledger's send
//! transaction writes for SQLite conversations (written once for both SQL stores:
//! [`crewbus_sql::body`]).

use std::sync::Arc;

use crewbus_domain::Locator;
use crewbus_ports::Clock;
use crewbus_sql::body::SqlBodies;
use uuid::Uuid;

use crate::connect::SqlitePools;
use crate::settings::SqliteSettings;
use crate::store::Store;

/// The locator scheme (and backend name) of SQLite bodies: `sqlite:<message id>`.
pub(crate) const SCHEME: &str = crate::NAME;

/// One team's bodies in SQLite.
///
/// - `publish` inserts into `bodies` keyed by message id, unique on `publish_key`, in one write
///   transaction, so it is idempotent for the life of the row: the same key again →
///   `Confirmed { duplicate: true }`, the same message id under another key →
///   `Fatal(Conflict)`; another team's envelope → `Fatal(Forbidden)`; a body above
///   [`SqliteSettings::max_body_bytes`] → `Fatal(TooLarge)` (`max_body_bytes` answers that
///   limit). Bodies are stored as UTF-8 bytes (`BLOB`), U+0000 included.
/// - The database busy past the busy timeout, or unreachable → `Retryable(Unavailable)` (the
///   transaction was rolled back: nothing was stored); the driver's worker lost mid-statement →
///   `Uncertain(Unavailable)`.
/// - Store times (for `retain`) come from the injected [`Clock`].
#[derive(Clone)]
pub struct SqliteBackend(SqlBodies<Store>);

crewbus_sql::impl_body_backend!(SqliteBackend);

/// The locator of the body of `message_id`.
pub(crate) fn locator_for(message_id: Uuid) -> Locator {
    Locator::for_message(SCHEME, message_id)
}

impl SqliteBackend {
    /// The body backend of `team` over `pools`, with the size limit of `settings` and store
    /// times from `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pools: SqlitePools,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &SqliteSettings,
    ) -> Self {
        SqliteBackend(SqlBodies::new(
            Store(pools),
            team,
            clock,
            settings.max_body_bytes,
        ))
    }
}
