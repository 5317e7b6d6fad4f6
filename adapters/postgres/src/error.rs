//! The one place database errors become [`BusError`]s: by SQLSTATE and sqlx error kind, never by
//! message text. The database's own error is kept as the `source` of `Unavailable` and logged;
//! its text never reaches an agent.

use crewbus_domain::BusError;

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
}

/// Maps a sqlx error met while doing `what` (e.g. `"body store"`) to the bus's semantic error.
///
/// | sqlx error | SQLSTATE class | `BusError` |
/// |---|---|---|
/// | database | `23505` unique violation | `Conflict` |
/// | database | `23503` foreign key violation | `NotFound` |
/// | database | `23xxx` other integrity, `22xxx` data exception | `Invalid` |
/// | database | `40xxx` serialization failure / deadlock, `55P03` lock not available | `Unavailable` (retry) |
/// | database | `08xxx` connection, `53xxx` resources, `57P01..57P05` shutdown / cannot connect, `3D000` no database | `Unavailable` |
/// | database | `57014` query canceled | `Timeout` |
/// | database | `42P01` undefined table | `NotProvisioned` (run the migrations) |
/// | database | anything else (a bug in a statement) | `Invalid` |
/// | `Io`, `Tls`, `Protocol`, `PoolClosed`, `WorkerCrashed` | connection lost | `Unavailable` |
/// | `PoolTimedOut` | no connection within the acquire timeout | `Unavailable` |
/// | `RowNotFound` | | `NotFound` |
/// | decode and configuration errors | stored data unreadable | `Invalid` |
///
/// Every retryable outcome keeps the sqlx error as its source; `Display` carries only `what`.
pub(crate) fn bus_error(err: sqlx::Error, what: &str) -> BusError {
    use sqlx::Error as E;
    let unavailable = |err: sqlx::Error| {
        tracing::warn!(what, error = %err, "postgres unavailable");
        BusError::unavailable_from(format!("postgres ({what})"), err)
    };
    match &err {
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let class = code.get(..2).unwrap_or("");
            match (code.as_str(), class) {
                (sqlstate::UNIQUE_VIOLATION, _) => {
                    BusError::conflict(format!("{what}: already recorded"))
                }
                (sqlstate::FOREIGN_KEY_VIOLATION, _) => {
                    BusError::not_found(format!("{what}: a referenced row"))
                }
                (sqlstate::QUERY_CANCELED, _) => BusError::timeout(format!("postgres ({what})")),
                (sqlstate::UNDEFINED_TABLE, _) => BusError::NotProvisioned {
                    what: format!("postgres schema ({what})"),
                    remedy: "apply the migrations (crewbus_postgres::migrate)".to_owned(),
                },
                ("55P03" | "3D000", _) | (_, "08" | "40" | "53") => unavailable(err),
                (c, "57") if c.starts_with("57P") => unavailable(err),
                (_, "22" | "23") => {
                    tracing::debug!(what, code = %code, "postgres refused the data");
                    BusError::invalid(format!("{what}: refused by the database"))
                }
                _ => {
                    tracing::error!(what, code = %code, error = %err, "unexpected postgres error");
                    BusError::invalid(format!("{what}: statement refused by the database"))
                }
            }
        }
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::PoolClosed | E::WorkerCrashed => {
            unavailable(err)
        }
        E::PoolTimedOut => unavailable(err),
        E::RowNotFound => BusError::not_found(what.to_owned()),
        _ => {
            tracing::error!(what, error = %err, "postgres data could not be read");
            BusError::invalid(format!("{what}: stored data could not be read"))
        }
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
        let io = sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "secret host detail",
        ));
        assert!(may_have_committed(&io));
        let e = bus_error(io, "body store");
        assert!(matches!(e, BusError::Unavailable { .. }));
        assert!(e.is_retryable());
        assert!(!e.to_string().contains("secret host detail"));
        assert!(std::error::Error::source(&e).is_some());
        let timed_out = sqlx::Error::PoolTimedOut;
        assert!(!may_have_committed(&timed_out));
        assert!(matches!(
            bus_error(timed_out, "x"),
            BusError::Unavailable { .. }
        ));
        assert!(matches!(
            bus_error(sqlx::Error::RowNotFound, "x"),
            BusError::NotFound { .. }
        ));
    }
}
