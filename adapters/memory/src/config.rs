//! Limits of the memory adapters, with defaults.

use std::time::Duration;

use crewbus_domain::{BusError, BusResult, MAX_BODY_BYTES, Quotas};

/// Configuration of every memory adapter a [`crate::MemoryBackends`] hands out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryConfig {
    /// The body store of each team.
    pub bodies: BodiesConfig,
    /// The inbox of each team.
    pub inbox: InboxConfig,
}

impl MemoryConfig {
    /// Checks every limit. Errors: [`BusError::Invalid`] naming the first limit out of range.
    pub fn validate(&self) -> BusResult<()> {
        self.bodies.validate()?;
        self.inbox.validate()
    }
}

/// Limits of one team's body store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodiesConfig {
    /// Largest body accepted, in bytes (`Envelope::body_len`). One byte more is
    /// `Fatal(TooLarge)`. Default and ceiling: [`MAX_BODY_BYTES`] (1 MiB).
    pub max_body_bytes: u64,
    /// Discard-new quota of the store: most bodies (count) and most body bytes (bytes, body
    /// lengths only; no header overhead) it keeps. A publish that would exceed either is
    /// `Retryable(QuotaExceeded)` and stores nothing. Default: 1,000,000 bodies / 1 GiB.
    pub quota: Quotas,
}

impl Default for BodiesConfig {
    fn default() -> Self {
        BodiesConfig {
            max_body_bytes: MAX_BODY_BYTES,
            quota: Quotas {
                max_messages: 1_000_000,
                max_bytes: 1024 * 1024 * 1024,
            },
        }
    }
}

impl BodiesConfig {
    /// Errors: [`BusError::Invalid`] when `max_body_bytes` is 0 or above [`MAX_BODY_BYTES`], or a
    /// quota is 0. (Unlike a provisioned stream, the memory quota has no 2 MiB floor, so tests can
    /// fill it cheaply.)
    pub fn validate(&self) -> BusResult<()> {
        if self.max_body_bytes == 0 || self.max_body_bytes > MAX_BODY_BYTES {
            return Err(BusError::invalid(format!(
                "memory body limit must be 1..={MAX_BODY_BYTES} bytes, got {}",
                self.max_body_bytes
            )));
        }
        if self.quota.max_messages == 0 || self.quota.max_bytes == 0 {
            return Err(BusError::invalid(
                "memory body quota must allow at least 1 message and 1 byte",
            ));
        }
        Ok(())
    }
}

/// Limits of one team's inbox (the memory counterpart of a work-queue inbox stream with one
/// durable pull consumer per recipient).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxConfig {
    /// How long a handed-out reference waits for its ack before it is handed out again, measured
    /// on the injected clock. Default: 30 s.
    pub ack_wait: Duration,
    /// Most times one reference is handed out by one consumer (count, ≥ 1). After the last
    /// delivery's ack wait passes, the reference is no longer handed out nor counted as awaiting
    /// an ack; it stays stored until acked, discarded or its consumer is recreated. Default: 5.
    pub max_deliver: u64,
    /// Most references the team's inbox keeps across all recipients (count). Publishing beyond it
    /// discards the oldest (discard-old); the ledger tops recipients up. Default: 100,000.
    pub max_messages: u64,
    /// How long an event id is remembered for deduplication, on the injected clock. `None`
    /// (default): for the life of the inbox, so a repeat is a duplicate even after the reference
    /// was acked. `Some(window)` mimics a broker's duplicate window.
    pub duplicate_window: Option<Duration>,
}

impl Default for InboxConfig {
    fn default() -> Self {
        InboxConfig {
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            max_messages: 100_000,
            duplicate_window: None,
        }
    }
}

impl InboxConfig {
    /// Errors: [`BusError::Invalid`] when `ack_wait` is zero, `max_deliver` or `max_messages`
    /// is 0, or the duplicate window is zero.
    pub fn validate(&self) -> BusResult<()> {
        if self.ack_wait.is_zero() {
            return Err(BusError::invalid("memory inbox ack_wait must be positive"));
        }
        if self.max_deliver == 0 || self.max_messages == 0 {
            return Err(BusError::invalid(
                "memory inbox max_deliver and max_messages must be at least 1",
            ));
        }
        if self.duplicate_window.is_some_and(|w| w.is_zero()) {
            return Err(BusError::invalid(
                "memory inbox duplicate window must be positive",
            ));
        }
        Ok(())
    }
}

/// A std duration as a chrono delta, saturating.
pub(crate) fn delta(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_limits_are_checked() {
        assert!(MemoryConfig::default().validate().is_ok());
        assert_eq!(BodiesConfig::default().max_body_bytes, MAX_BODY_BYTES);
        let mut c = MemoryConfig::default();
        c.bodies.max_body_bytes = MAX_BODY_BYTES + 1;
        assert!(matches!(c.validate(), Err(BusError::Invalid { .. })));
        let mut c = MemoryConfig::default();
        c.inbox.max_deliver = 0;
        assert!(matches!(c.validate(), Err(BusError::Invalid { .. })));
        let mut c = MemoryConfig::default();
        c.inbox.duplicate_window = Some(Duration::ZERO);
        assert!(matches!(c.validate(), Err(BusError::Invalid { .. })));
    }
}
