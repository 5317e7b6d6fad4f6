//! The locators of Sqlite bodies (the body backend is `crewbus_sql::body::SqlBodies<Lite>`,
//! [`crate::SqliteBackend`]).

use crewbus_domain::Locator;
use uuid::Uuid;

/// The locator scheme (and backend name) of SQLite bodies: `sqlite:<message id>`.
pub(crate) const SCHEME: &str = crate::NAME;

/// The locator of the body of `message_id`.
pub(crate) fn locator_for(message_id: Uuid) -> Locator {
    Locator::for_message(SCHEME, message_id)
}
