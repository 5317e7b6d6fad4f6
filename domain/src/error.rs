//! The bus's semantic error enum and the one retry rule every adapter shares.

use std::error::Error as StdError;
use std::sync::Arc;

/// A boxed, shareable source error (the broker's or the database's own error).
///
/// Kept behind an `Arc` so [`BusError`] stays `Clone` (a [`crate::Published`] outcome is
/// cloned into settlements and logs). The source's text is for operators' logs only: it is
/// never part of [`BusError`]'s `Display`, so broker and database text never reaches an agent.
pub type Source = Arc<dyn StdError + Send + Sync + 'static>;

/// Result of every bus operation that can fail.
pub type BusResult<T> = Result<T, BusError>;

/// What went wrong, by meaning rather than by backend.
///
/// Every adapter maps its backend's errors into these variants in one function, by typed code
/// (JetStream error codes, SQLSTATE, client error kinds), never by message text. Whether a caller
/// may retry is decided by [`BusError::is_retryable`] alone.
///
/// `Display` renders only the context the bus itself wrote (names, sizes, arithmetic); the
/// backend's own error, when there is one, is kept as the [`std::error::Error::source`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BusError {
    /// The thing asked for does not exist (a conversation, a message, a registration, a backend
    /// name a registry does not serve). A stored body that is gone is not an error: `fetch`
    /// answers `Ok(None)`.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked up, e.g. `conversation 0b6f…`.
        what: String,
    },
    /// The team's stream (or other backing resource) has not been provisioned by an operator.
    #[error("not provisioned: {what}; {remedy}")]
    NotProvisioned {
        /// What is missing, e.g. `body stream CREWBUS_B_0b6f…`.
        what: String,
        /// The operator command that provisions it.
        remedy: String,
    },
    /// The input is malformed: a bad locator, recipient key, quota, name or page.
    #[error("invalid input: {reason}")]
    Invalid {
        /// Which rule the input broke.
        reason: String,
    },
    /// The request contradicts what is already recorded (the same message id under another
    /// publish key, a publish key held by another message, the same request id with another
    /// body, a ceiling below the contents).
    #[error("conflict: {reason}")]
    Conflict {
        /// What was already there.
        reason: String,
    },
    /// The item belongs to another team, stream or message (an envelope of another team, a
    /// forged or foreign locator, an inbox locator handed to a body store, a foreign or
    /// malformed ack subject, another agent's run).
    #[error("forbidden: {reason}")]
    Forbidden {
        /// Why access was refused.
        reason: String,
    },
    /// No valid credential was presented.
    #[error("unauthenticated")]
    Unauthenticated,
    /// A discard-new quota is full. Retryable: space may be freed by retention, or an operator
    /// may raise the quota.
    #[error("quota exceeded: {what}")]
    QuotaExceeded {
        /// Which stream or store is full.
        what: String,
    },
    /// A body (or payload) above the backend's effective maximum. Fatal: the same request can
    /// never fit.
    #[error("too large: {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Size of the refused item, in bytes (for a body, [`crate::Envelope::body_len`]).
        size: u64,
        /// Effective maximum, in bytes.
        limit: u64,
    },
    /// The account cannot reserve the storage a create or a raise needs.
    /// `Display` shows the factor: "3221225472 more bytes (1 GiB × 3 replicas) would be
    /// reserved, …".
    #[error(
        "insufficient storage: {extra} more bytes ({per_replica} × {replicas}) would be reserved, \
         but the account has used {used} and reserved {reserved} of {budget}; {remedy}",
        per_replica = bytes_text(*per_replica),
        replicas = replicas_text(*replicas),
        budget = budget_text(*budget)
    )]
    InsufficientStorage {
        /// Bytes the change would add to the reservation: `per_replica × replicas` (saturating).
        extra: u64,
        /// Bytes the change adds on each replica (the `max_bytes` of a new stream, or a raise's
        /// `wanted − current`).
        per_replica: u64,
        /// Replicas of the stream (each reserves `per_replica`; at least 1).
        replicas: u32,
        /// Bytes stored in the account now.
        used: u64,
        /// Bytes already reserved by existing streams (Σ max_bytes × replicas).
        reserved: u64,
        /// The account's storage budget in bytes; `None` is unlimited.
        budget: Option<u64>,
        /// What an operator can do about it.
        remedy: String,
    },
    /// The backend cannot be reached or refused service for now (connection lost, no
    /// responders, database restarting). Retryable.
    #[error("unavailable: {what}")]
    Unavailable {
        /// What was unavailable.
        what: String,
        /// The backend's own error, for logs.
        #[source]
        source: Option<Source>,
    },
    /// The agent sent faster than its send rate limit (`[rate_limit]`, a token bucket per agent;
    /// see `TokenBucket`). Retryable after `retry_after_seconds`: HTTP answers `429` with
    /// `Retry-After`, MCP an `isError` result with code `rate_limited`.
    #[error("rate limited: retry after {retry_after_seconds} s")]
    RateLimited {
        /// Whole seconds (rounded up, at least 1) until the send would be granted.
        retry_after_seconds: u64,
    },
    /// The backend did not answer within the configured request timeout. Retryable.
    #[error("timed out: {what}")]
    Timeout {
        /// What was waited for.
        what: String,
    },
}

/// `n` bytes for people: a whole number of GiB, MiB or KiB when it is one (`1 GiB`), else bytes.
fn bytes_text(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} bytes")
}

fn replicas_text(replicas: u32) -> String {
    if replicas == 1 {
        "1 replica".to_owned()
    } else {
        format!("{replicas} replicas")
    }
}

fn budget_text(budget: Option<u64>) -> String {
    match budget {
        Some(b) => format!("a budget of {b} bytes"),
        None => "an unlimited budget".to_owned(),
    }
}

impl BusError {
    /// Whether a caller may retry the same operation later.
    ///
    /// `QuotaExceeded`, `RateLimited`, `Unavailable` and `Timeout` are temporary; every other variant is final
    /// for the request that produced it. This is the single retry rule of the bus: adapters decide
    /// `Published::Retryable` versus `Published::Fatal` with it, and workers back off only on it.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            BusError::QuotaExceeded { .. }
                | BusError::RateLimited { .. }
                | BusError::Unavailable { .. }
                | BusError::Timeout { .. }
        )
    }

    /// A stable, machine-readable code for the variant (`not_found`, `too_large`, …), used by the
    /// HTTP API and the CLI's `--json` output.
    pub fn code(&self) -> &'static str {
        match self {
            BusError::NotFound { .. } => "not_found",
            BusError::NotProvisioned { .. } => "not_provisioned",
            BusError::Invalid { .. } => "invalid",
            BusError::Conflict { .. } => "conflict",
            BusError::Forbidden { .. } => "forbidden",
            BusError::Unauthenticated => "unauthenticated",
            BusError::QuotaExceeded { .. } => "quota_exceeded",
            BusError::TooLarge { .. } => "too_large",
            BusError::InsufficientStorage { .. } => "insufficient_storage",
            BusError::Unavailable { .. } => "unavailable",
            BusError::Timeout { .. } => "timeout",
            BusError::RateLimited { .. } => "rate_limited",
        }
    }

    /// Shorthand for [`BusError::NotFound`].
    pub fn not_found(what: impl Into<String>) -> Self {
        BusError::NotFound { what: what.into() }
    }

    /// Shorthand for [`BusError::Invalid`].
    pub fn invalid(reason: impl Into<String>) -> Self {
        BusError::Invalid {
            reason: reason.into(),
        }
    }

    /// Shorthand for [`BusError::Conflict`].
    pub fn conflict(reason: impl Into<String>) -> Self {
        BusError::Conflict {
            reason: reason.into(),
        }
    }

    /// Shorthand for [`BusError::Forbidden`].
    pub fn forbidden(reason: impl Into<String>) -> Self {
        BusError::Forbidden {
            reason: reason.into(),
        }
    }

    /// Shorthand for [`BusError::Unavailable`] without a source.
    pub fn unavailable(what: impl Into<String>) -> Self {
        BusError::Unavailable {
            what: what.into(),
            source: None,
        }
    }

    /// Shorthand for [`BusError::Unavailable`] keeping the backend's error as the source.
    pub fn unavailable_from(
        what: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        BusError::Unavailable {
            what: what.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// Shorthand for [`BusError::Timeout`].
    pub fn timeout(what: impl Into<String>) -> Self {
        BusError::Timeout { what: what.into() }
    }

    /// Shorthand for [`BusError::QuotaExceeded`].
    pub fn quota_exceeded(what: impl Into<String>) -> Self {
        BusError::QuotaExceeded { what: what.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<BusError> {
        vec![
            BusError::not_found("x"),
            BusError::NotProvisioned {
                what: "s".into(),
                remedy: "r".into(),
            },
            BusError::invalid("x"),
            BusError::conflict("x"),
            BusError::forbidden("x"),
            BusError::Unauthenticated,
            BusError::quota_exceeded("x"),
            BusError::RateLimited {
                retry_after_seconds: 2,
            },
            BusError::TooLarge { size: 2, limit: 1 },
            BusError::InsufficientStorage {
                extra: 1,
                per_replica: 1,
                replicas: 1,
                used: 2,
                reserved: 3,
                budget: Some(4),
                remedy: "r".into(),
            },
            BusError::unavailable("x"),
            BusError::timeout("x"),
        ]
    }

    #[test]
    fn only_temporary_variants_are_retryable() {
        let retryable: Vec<&'static str> = all()
            .iter()
            .filter(|e| e.is_retryable())
            .map(BusError::code)
            .collect();
        assert_eq!(
            retryable,
            vec!["quota_exceeded", "rate_limited", "unavailable", "timeout"]
        );
    }

    #[test]
    fn codes_are_distinct() {
        let mut codes: Vec<_> = all().iter().map(BusError::code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all().len());
    }

    #[test]
    fn display_never_includes_the_source_text() {
        let inner = std::io::Error::other("password=hunter2 at db");
        let e = BusError::unavailable_from("ledger", inner);
        assert!(!e.to_string().contains("hunter2"));
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn insufficient_storage_shows_the_arithmetic() {
        let e = BusError::InsufficientStorage {
            extra: 10,
            per_replica: 5,
            replicas: 2,
            used: 20,
            reserved: 30,
            budget: None,
            remedy: "raise it".into(),
        };
        let text = e.to_string();
        for part in [
            "10 more bytes (5 bytes × 2 replicas)",
            "20",
            "30",
            "unlimited",
            "raise it",
        ] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
    }

    #[test]
    fn sizes_read_as_whole_units_when_they_are_one() {
        assert_eq!(bytes_text(1 << 30), "1 GiB");
        assert_eq!(bytes_text(3 << 20), "3 MiB");
        assert_eq!(bytes_text(1536), "1536 bytes");
        assert_eq!(bytes_text(2048), "2 KiB");
        assert_eq!(bytes_text(0), "0 bytes");
        assert_eq!(bytes_text((1 << 30) + 1), "1073741825 bytes");
        assert_eq!(replicas_text(1), "1 replica");
    }
}
