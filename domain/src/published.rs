//! The outcome of a publish: stored, or why not.

use crate::{BusError, Locator};

/// What a publish (of a body or an inbox reference) came to.
///
/// Only `Confirmed` means stored. Whether an error is `Retryable` or `Fatal` is decided by
/// [`BusError::is_retryable`], one rule for every adapter (use [`Published::from_error`]).
/// `Retryable` and `Fatal` store nothing and consume nothing (the publish key, message id or
/// event id stays free); `Uncertain` is the only outcome that leaves the store unknown.
#[derive(Debug, Clone)]
pub enum Published {
    /// Stored. `duplicate` is true whenever the item was already accepted before this call (a
    /// PubAck marked duplicate, or found stored after the duplicate window) — on every adapter —
    /// and this call stored nothing. For a body that means it is still held (retention forgets
    /// the key); for an inbox reference it means the event id was seen, though the reference
    /// may since have been acked or discarded.
    Confirmed {
        /// Where the item is kept: for a repeat, the locator of the first confirmation.
        locator: Locator,
        /// Whether it was already stored.
        duplicate: bool,
    },
    /// Known not stored; the same call may succeed later (backend down, quota full).
    Retryable(BusError),
    /// Known not stored; retrying the same call cannot succeed (too large, conflict, forbidden).
    Fatal(BusError),
    /// The request left but no answer came (ack timeout, connection lost after sending): it may
    /// or may not have been stored. The error is `Timeout` or `Unavailable`. Settle a body with
    /// `MessagingBackend::reconcile`; an inbox reference by publishing the same event id again
    /// (deduplicated).
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
