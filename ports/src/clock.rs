//! Time, injected wherever a decision depends on it.

use chrono::{DateTime, Utc};

/// The current time. Use cases read it and pass it to the ports (`at: DateTime<Utc>`); memory
/// and Postgres adapters never read a clock of their own but take an `Arc<dyn Clock>` at
/// construction, so tests drive them with a manual one (`crewbus-memory`'s `ManualClock`).
///
/// No monotonicity is promised: a manual clock may be set backwards, and the wall clock may
/// step. An adapter given a clock decides everything time-dependent (ack deadlines, store times,
/// duplicate windows) by comparing instants read from it, and measures time with nothing else.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Clock: Send + Sync {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock ([`Utc::now`]), for production wiring.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}
