//! The locators of Postgres bodies (the body backend is `crewbus_sql::body::SqlBodies<Pg>`,
//! [`crate::PostgresBackend`]).

use crewbus_domain::Locator;
use uuid::Uuid;

/// The locator scheme (and backend name) of Postgres bodies: `postgres:<message id>`.
pub(crate) const SCHEME: &str = "postgres";

/// The locator of the body of `message_id`.
pub(crate) fn locator_for(message_id: Uuid) -> Locator {
    Locator::for_message(SCHEME, message_id)
}
