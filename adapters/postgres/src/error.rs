//! The one place database errors are classified — by SQLSTATE and sqlx error kind, never by
//! message text — and turned into the bus's [`BusError`] or the stores' [`StoreError`]. The
//! database's own error is kept as the `source` of retryable and backend errors and logged (one
//! line of a kind per 5 s at most, counting the repeats); its text never reaches an agent.

use std::sync::Arc;
use std::time::Instant;

use crewbus_domain::{BusError, RepeatedWarnings, StoreError};

/// SQLSTATE codes the adapter classifies (PostgreSQL manual, appendix A).
pub(crate) mod sqlstate {
    /// `unique_violation`.
    pub(crate) const UNIQUE_VIOLATION: &str = "23505";
    /// `foreign_key_violation`.
    pub(crate) const FOREIGN_KEY_VIOLATION: &str = "23503";
    /// `query_canceled` (statement timeout, cancel request).
    pub(crate) const QUERY_CANCELED: &str = "57014";
    /// `undefined_table` (migrations not applied).
    pub(crate) const UNDEFINED_TABLE: &str = "42P01";
    /// `lock_not_available`.
    pub(crate) const LOCK_NOT_AVAILABLE: &str = "55P03";
    /// `invalid_catalog_name` (the database does not exist, e.g. while it is being created).
    pub(crate) const INVALID_CATALOG_NAME: &str = "3D000";
}

/// What a database error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// `23505`: the row is already recorded.
    Conflict,
    /// `23503`, or no row: something referenced does not exist.
    NotFound,
    /// `22xxx` data exception, `23xxx` other integrity violation: the input was refused.
    Refused,
    /// Connection lost or refused, pool timeout, `08xxx`, `40xxx` (serialization failure,
    /// deadlock), `53xxx` (resources), `55P03`, `57P01..` (shutdown, cannot connect now),
    /// `3D000`: retry later.
    Unavailable,
    /// `57014`: the statement was canceled (statement timeout).
    Timeout,
    /// `42P01`: the schema is missing (migrations not applied).
    NoSchema,
    /// Anything else: a statement the database refused for a reason a retry will not fix, or
    /// stored data that cannot be decoded.
    Internal,
}

/// Classifies a sqlx error: the single decision table of the adapter.
pub(crate) fn classify(err: &sqlx::Error) -> Class {
    use sqlx::Error as E;
    match err {
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            match (code.as_str(), code.get(..2).unwrap_or("")) {
                (sqlstate::UNIQUE_VIOLATION, _) => Class::Conflict,
                (sqlstate::FOREIGN_KEY_VIOLATION, _) => Class::NotFound,
                (sqlstate::QUERY_CANCELED, _) => Class::Timeout,
                (sqlstate::UNDEFINED_TABLE, _) => Class::NoSchema,
                (sqlstate::LOCK_NOT_AVAILABLE | sqlstate::INVALID_CATALOG_NAME, _) => {
                    Class::Unavailable
                }
                (_, "08" | "40" | "53") => Class::Unavailable,
                (c, "57") if c.starts_with("57P") => Class::Unavailable,
                (_, "22" | "23") => Class::Refused,
                _ => Class::Internal,
            }
        }
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::PoolClosed | E::WorkerCrashed => {
            Class::Unavailable
        }
        E::PoolTimedOut => Class::Unavailable,
        E::RowNotFound => Class::NotFound,
        _ => Class::Internal,
    }
}

/// The warnings and errors logged, by class and `what`: at most one line of a kind per
/// [`crewbus_domain::WARNING_PERIOD`], counting the occurrences (a database that is gone or
/// broken fails every worker pass and every request).
static REPEATED: RepeatedWarnings = RepeatedWarnings::new();

fn log(err: &sqlx::Error, class: Class, what: &str) {
    let due = || REPEATED.note(&format!("{class:?} {what}"), Instant::now());
    match class {
        Class::Unavailable | Class::Timeout => {
            if let Some(repeated) = due() {
                tracing::warn!(what, error = %err, repeated, "postgres unavailable")
            }
        }
        Class::NoSchema | Class::Internal => {
            if let Some(repeated) = due() {
                tracing::error!(what, error = %err, repeated, "postgres failure")
            }
        }
        Class::Conflict | Class::NotFound | Class::Refused => {
            tracing::debug!(what, error = %err, "postgres refused")
        }
    }
}

/// Maps a sqlx error met while doing `what` (e.g. `"body store"`) to the bus's error:
/// `Conflict`, `NotFound`, `Invalid` (refused data, or an internal failure), retryable
/// `Unavailable` (with the sqlx error as source) or `Timeout`, and `NotProvisioned` for a
/// missing schema. `Display` carries only `what`.
pub(crate) fn bus_error(err: sqlx::Error, what: &str) -> BusError {
    let class = classify(&err);
    log(&err, class, what);
    match class {
        Class::Conflict => BusError::conflict(format!("{what}: already recorded")),
        Class::NotFound => BusError::not_found(format!("{what}: a referenced row")),
        Class::Refused => BusError::invalid(format!("{what}: refused by the database")),
        Class::Unavailable => BusError::unavailable_from(format!("postgres ({what})"), err),
        Class::Timeout => BusError::timeout(format!("postgres ({what})")),
        Class::NoSchema => BusError::NotProvisioned {
            what: format!("postgres schema ({what})"),
            remedy: "apply the migrations (crewbus_postgres::migrate)".to_owned(),
        },
        Class::Internal => BusError::invalid(format!("{what}: the database failed the statement")),
    }
}

/// Maps a sqlx error met while doing `what` to the stores' error (journal, push store), by the
/// same classification: `Unavailable` (retryable, also for a timeout) with the sqlx error as
/// source, `Conflict`, `NotFound`, `Invalid` for refused data, `Backend` for the rest.
pub(crate) fn store_error(err: sqlx::Error, what: &str) -> StoreError {
    let class = classify(&err);
    log(&err, class, what);
    let source = || -> Option<crewbus_domain::Source> { Some(Arc::new(err)) };
    match class {
        Class::Conflict => StoreError::conflict(format!("{what}: already recorded")),
        Class::NotFound => StoreError::not_found(format!("{what}: a referenced row")),
        Class::Refused => StoreError::invalid(format!("{what}: refused by the database")),
        Class::Unavailable | Class::Timeout => StoreError::Unavailable {
            what: format!("postgres ({what})"),
            source: source(),
        },
        Class::NoSchema | Class::Internal => StoreError::Backend {
            what: format!("postgres ({what})"),
            source: source(),
        },
    }
}

/// Whether a failed statement may nevertheless have been committed: the request may have reached
/// the server before the connection broke (an I/O or protocol error, a crashed worker). Errors
/// raised before anything was sent (pool timeout, pool closed) or answered by the server with an
/// error (which aborts the statement) cannot have committed.
pub(crate) fn may_have_committed(err: &sqlx::Error) -> bool {
    matches!(
        err,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_errors_are_retryable_and_keep_their_source() {
        let io = || {
            sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "secret host detail",
            ))
        };
        assert!(may_have_committed(&io()));
        let e = bus_error(io(), "body store");
        assert!(matches!(e, BusError::Unavailable { .. }));
        assert!(e.is_retryable());
        assert!(!e.to_string().contains("secret host detail"));
        assert!(std::error::Error::source(&e).is_some());
        let s = store_error(io(), "journal");
        assert!(s.is_retryable());
        assert!(!s.to_string().contains("secret host detail"));
        assert!(!may_have_committed(&sqlx::Error::PoolTimedOut));
        assert!(matches!(
            bus_error(sqlx::Error::PoolTimedOut, "x"),
            BusError::Unavailable { .. }
        ));
        assert!(matches!(
            bus_error(sqlx::Error::RowNotFound, "x"),
            BusError::NotFound { .. }
        ));
        assert!(matches!(
            store_error(sqlx::Error::RowNotFound, "x"),
            StoreError::NotFound { .. }
        ));
    }
}
