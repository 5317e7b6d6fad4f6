//! Tunables of the SQL body backend and inbox ([`crate::body::SqlBodies`],
//! [`crate::inbox::SqlInbox`]), the same on every store.

use std::time::Duration;

/// What an SQL body backend and inbox are configured with (`crewbus_postgres::PostgresSettings`,
/// `crewbus_sqlite::SqliteSettings`). Every field has a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlSettings {
    /// Largest body `publish` stores, in bytes (default and ceiling: the bus's 1 MiB,
    /// [`crewbus_domain::MAX_BODY_BYTES`]).
    pub max_body_bytes: u64,
    /// The inbox's visibility timeout: a handed-out reference not acknowledged within it is
    /// handed out again (default 30 s).
    pub ack_wait: Duration,
    /// How many times one reference is handed out at most (default 10); past it the reference
    /// stays in the queue (never dropped) and the ledger tops the recipient up.
    pub max_deliver: u64,
}

impl Default for SqlSettings {
    fn default() -> Self {
        SqlSettings {
            max_body_bytes: crewbus_domain::MAX_BODY_BYTES,
            ack_wait: Duration::from_secs(30),
            max_deliver: 10,
        }
    }
}
