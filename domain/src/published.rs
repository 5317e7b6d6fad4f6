//! The outcome of a publish: stored, or why not.

use crate::{BusError, Locator};

/// What a publish (of a body or an inbox reference) came to.
///
/// Only `Confirmed` means stored. Whether an error is `Retryable` or `Fatal` is decided by
/// [`BusError::is_retryable`], one rule for every adapter (use [`Published::from_error`]).
#[derive(Debug, Clone)]
pub enum Published {
    /// Stored. `duplicate` is true whenever the item was already stored before this call (a
    /// PubAck marked duplicate, or found stored after the duplicate window) — on every adapter.
    Confirmed {
        /// Where the item is kept.
        locator: Locator,
        /// Whether it was already stored.
        duplicate: bool,
    },
    /// Known not stored; the same call may succeed later (backend down, quota full).
    Retryable(BusError),
    /// Known not stored; retrying the same call cannot succeed (too large, conflict, forbidden).
    Fatal(BusError),
    /// The request left but no answer came (ack timeout, connection lost after sending): it may
    /// or may not have been stored. Settle it with `MessagingBackend::reconcile`.
    Uncertain(BusError),
}

impl Published {
    /// `Retryable` or `Fatal` according to [`BusError::is_retryable`].
    pub fn from_error(error: BusError) -> Self {
        if error.is_retryable() {
            Published::Retryable(error)
        } else {
            Published::Fatal(error)
        }
    }

    /// Whether the item is stored.
    pub fn is_confirmed(&self) -> bool {
        matches!(self, Published::Confirmed { .. })
    }

    /// The locator of a confirmed publish.
    pub fn locator(&self) -> Option<&Locator> {
        match self {
            Published::Confirmed { locator, .. } => Some(locator),
            _ => None,
        }
    }

    /// The error of an unconfirmed publish.
    pub fn error(&self) -> Option<&BusError> {
        match self {
            Published::Confirmed { .. } => None,
            Published::Retryable(e) | Published::Fatal(e) | Published::Uncertain(e) => Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_error_uses_the_one_retry_rule() {
        assert!(matches!(
            Published::from_error(BusError::timeout("x")),
            Published::Retryable(BusError::Timeout { .. })
        ));
        assert!(matches!(
            Published::from_error(BusError::TooLarge { size: 2, limit: 1 }),
            Published::Fatal(BusError::TooLarge { .. })
        ));
        assert!(matches!(
            Published::from_error(BusError::quota_exceeded("s")),
            Published::Retryable(_)
        ));
    }

    #[test]
    fn accessors() {
        let p = Published::Confirmed {
            locator: Locator::new("memory", "1"),
            duplicate: false,
        };
        assert!(p.is_confirmed());
        assert_eq!(p.locator().unwrap().as_str(), "memory:1");
        assert!(p.error().is_none());
        let u = Published::Uncertain(BusError::timeout("ack"));
        assert!(!u.is_confirmed());
        assert!(u.locator().is_none());
        assert!(matches!(u.error(), Some(BusError::Timeout { .. })));
    }
}
