//! Time, injected wherever a decision depends on it.

use chrono::{DateTime, SubsecRound, Utc};

/// The current time. Use cases read it and pass it to the ports (`at: DateTime<Utc>`); memory
/// and Postgres adapters never read a clock of their own but take an `Arc<dyn Clock>` at
/// construction, so tests drive them with a manual one (`crewbus-memory`'s `ManualClock`).
///
/// No monotonicity is promised: a manual clock may be set backwards, and the wall clock may
/// step. An adapter given a clock decides everything time-dependent (ack deadlines, store times,
/// duplicate windows) by comparing instants read from it, and measures time with nothing else.
///
/// Precision: every durable store keeps instants in whole **microseconds** (Postgres
/// `timestamptz`, SQLite integer microseconds), so a clock should give whole microseconds: then
/// what a use case answers from the instant it wrote (a send's `sent_at`, a conversation's
/// `created_at`, a run's `admitted_at`) is what every later read of the store gives, and an
/// instant compared with a stored one is compared at the precision both have. [`SystemClock`]
/// does; a test clock gives what the test set.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Clock: Send + Sync {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock ([`Utc::now`]) truncated to whole microseconds, for production
/// wiring.
///
/// Truncated here, at the one source of production time, rather than where the use cases read
/// it: time is read in several places (the use cases, the send batcher, the push worker, the
/// adapters handed this clock), and a truncation repeated at each would bring the nanosecond
/// answers back wherever one was forgotten.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now().trunc_subsecs(6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_gives_whole_microseconds() {
        // Linux's wall clock has nanoseconds: an untruncated reading falls on a whole
        // microsecond one time in a thousand, so a thousand that all do are the truncation.
        for _ in 0..1000 {
            let now = SystemClock.now();
            assert_eq!(now.timestamp_subsec_nanos() % 1_000, 0, "{now:?}");
            assert!(Utc::now() - now < chrono::TimeDelta::seconds(1));
        }
    }
}
