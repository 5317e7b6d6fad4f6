//! Time, injected wherever a decision depends on it.

use chrono::{DateTime, Utc};

/// The current time. Use cases read it and pass it to the ports (`at: DateTime<Utc>`); memory
/// and Postgres adapters never read a clock of their own, so tests drive them with a manual one.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Clock: Send + Sync {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}
