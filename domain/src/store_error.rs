//! The error of the journal, push store and key ring ports.

use crate::{BusError, Source};

/// What went wrong in a store (journal, push store, key ring), by meaning.
///
/// Each adapter maps its backend's errors here in one function, by typed code; the backend's
/// text is kept as the [`std::error::Error::source`], never in `Display`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The run, registration or key asked for does not exist.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked up.
        what: String,
    },
    /// The request contradicts what is recorded (appending to a sealed run, sealing twice,
    /// a unique key taken).
    #[error("conflict: {reason}")]
    Conflict {
        /// What was already there.
        reason: String,
    },
    /// The input breaks a rule (a zero limit, an oversize note).
    #[error("invalid input: {reason}")]
    Invalid {
        /// Which rule.
        reason: String,
    },
    /// The store cannot be reached for now (connection lost, database restarting). Retryable.
    #[error("unavailable: {what}")]
    Unavailable {
        /// What was unavailable.
        what: String,
        /// The backend's own error, for logs.
        #[source]
        source: Option<Source>,
    },
    /// Sealing or opening a credential failed (a key ring failure).
    #[error("sealing failed: {what}")]
    Sealing {
        /// What could not be sealed or opened.
        what: String,
        /// The cause, for logs.
        #[source]
        source: Option<Source>,
    },
    /// Any other backend failure that a retry will not fix (a constraint the bus did not
    /// expect, corrupt data). Not retryable.
    #[error("store failure: {what}")]
    Backend {
        /// What failed.
        what: String,
        /// The backend's own error, for logs.
        #[source]
        source: Option<Source>,
    },
}

impl StoreError {
    /// Whether the same call may succeed later: only `Unavailable`.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// A stable machine-readable code (`not_found`, `conflict`, …).
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "not_found",
            StoreError::Conflict { .. } => "conflict",
            StoreError::Invalid { .. } => "invalid",
            StoreError::Unavailable { .. } => "unavailable",
            StoreError::Sealing { .. } => "sealing",
            StoreError::Backend { .. } => "backend",
        }
    }

    /// Shorthand for [`StoreError::NotFound`].
    pub fn not_found(what: impl Into<String>) -> Self {
        StoreError::NotFound { what: what.into() }
    }

    /// Shorthand for [`StoreError::Conflict`].
    pub fn conflict(reason: impl Into<String>) -> Self {
        StoreError::Conflict {
            reason: reason.into(),
        }
    }

    /// Shorthand for [`StoreError::Invalid`].
    pub fn invalid(reason: impl Into<String>) -> Self {
        StoreError::Invalid {
            reason: reason.into(),
        }
    }

    /// Shorthand for [`StoreError::Unavailable`] without a source.
    pub fn unavailable(what: impl Into<String>) -> Self {
        StoreError::Unavailable {
            what: what.into(),
            source: None,
        }
    }
}

/// A journal or push store error as the bus reports it: `NotFound`, `Conflict` and `Invalid`
/// keep their meaning; `Unavailable` stays retryable; a key ring (`Sealing`) or other store
/// failure is `Unavailable` with the store's error kept as the source (never in the message).
impl From<StoreError> for BusError {
    fn from(e: StoreError) -> BusError {
        match e {
            StoreError::NotFound { what } => BusError::not_found(what),
            StoreError::Conflict { reason } => BusError::conflict(reason),
            StoreError::Invalid { reason } => BusError::invalid(reason),
            StoreError::Unavailable { ref what, .. } => {
                BusError::unavailable_from(what.clone(), e.clone())
            }
            StoreError::Sealing { .. } => BusError::unavailable_from("the push key ring", e),
            other => BusError::unavailable_from(format!("store ({})", other.code()), other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unavailable_is_retryable() {
        assert!(StoreError::unavailable("db").is_retryable());
        for e in [
            StoreError::not_found("run"),
            StoreError::conflict("sealed"),
            StoreError::invalid("limit"),
            StoreError::Sealing {
                what: "k".into(),
                source: None,
            },
            StoreError::Backend {
                what: "x".into(),
                source: None,
            },
        ] {
            assert!(!e.is_retryable(), "{}", e.code());
        }
    }
}
