//! A clock that only moves when a test moves it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use crewbus_ports::Clock;

/// A manual [`Clock`]: `now()` returns the instant last set, and only [`ManualClock::advance`] or
/// [`ManualClock::set`] move it. It is not truncated to whole microseconds as `SystemClock` is
/// (see [`Clock`]): a test that compares answers with what a durable store reads back sets whole
/// microseconds.
///
/// Clones share one instant, so a test keeps a clone and hands another (as `Arc<dyn Clock>`) to
/// the adapters it drives. Memory adapters read time only from the clock they are given, so
/// advancing it is how a test makes an ack wait pass or a body become old enough to retain.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock standing at `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(at)),
        }
    }

    /// The instant a [`ManualClock::default`] starts at: 2026-01-01T00:00:00Z.
    pub fn epoch() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
    }

    /// Moves the clock forward by `by` (saturating at the latest representable instant) and
    /// returns the new instant.
    pub fn advance(&self, by: Duration) -> DateTime<Utc> {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let delta = chrono::TimeDelta::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
        *now = now
            .checked_add_signed(delta)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        *now
    }

    /// Puts the clock at `at` (forwards or backwards).
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }
}

impl Default for ManualClock {
    /// A clock standing at [`ManualClock::epoch`].
    fn default() -> Self {
        ManualClock::new(ManualClock::epoch())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_only_when_told_and_clones_share_the_instant() {
        let clock = ManualClock::default();
        let shared: Arc<dyn Clock> = Arc::new(clock.clone());
        let start = shared.now();
        assert_eq!(start, ManualClock::epoch());
        assert_eq!(shared.now(), start);
        let later = clock.advance(Duration::from_secs(90));
        assert_eq!(later - start, chrono::TimeDelta::seconds(90));
        assert_eq!(shared.now(), later);
        clock.set(start);
        assert_eq!(shared.now(), start);
    }

    #[test]
    fn advance_saturates() {
        let clock = ManualClock::default();
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), DateTime::<Utc>::MAX_UTC);
    }
}
