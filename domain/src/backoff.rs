//! The retry schedule: capped exponential backoff with deterministic jitter.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Capped, jittered exponential backoff shared by the relay and the push delivery worker.
///
/// The delay before attempt `n + 1` (after `n` failed attempts, `n ≥ 1`) is
/// `min(cap, base × 2^(n−1))`, of which the upper half is jittered: the result lies in
/// `[d/2, d]`. The jitter is a pure function of `(seed, attempt)` — seed it with a row's id so
/// tests can predict it and rows spread out without a random source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// First delay (before jitter).
    pub base: Duration,
    /// Largest delay (before jitter).
    pub cap: Duration,
    /// Attempts after which the caller gives up (reconciles, fails or parks).
    pub max_attempts: u32,
}

impl Default for Backoff {
    /// 500 ms doubling to a 60 s cap, 12 attempts.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(60),
            max_attempts: 12,
        }
    }
}

impl Backoff {
    /// The un-jittered delay after `attempts` failures (`attempts` of 0 is treated as 1).
    pub fn ceiling(&self, attempts: u32) -> Duration {
        let exp = attempts.max(1) - 1;
        let factor = 1u32.checked_shl(exp.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The jittered delay after `attempts` failures, in `[ceiling/2, ceiling]`.
    pub fn delay(&self, attempts: u32, seed: u64) -> Duration {
        let ceiling = self.ceiling(attempts);
        let half = ceiling / 2;
        let spread = ceiling - half;
        let r = mix(seed ^ u64::from(attempts).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // r / 2^64 in [0, 1): scale the spread by it without floating point.
        let nanos = (spread.as_nanos() * u128::from(r)) >> 64;
        half + Duration::from_nanos(nanos as u64)
    }

    /// The delay after `attempts` failures when the other side asked for `retry_after`:
    /// the larger of the two, bounded by the cap.
    pub fn delay_with_hint(
        &self,
        attempts: u32,
        seed: u64,
        retry_after: Option<Duration>,
    ) -> Duration {
        let own = self.delay(attempts, seed);
        match retry_after {
            Some(hint) => hint.min(self.cap).max(own),
            None => own,
        }
    }

    /// Whether `attempts` failures used up the schedule.
    pub fn exhausted(&self, attempts: u32) -> bool {
        attempts >= self.max_attempts
    }
}

/// splitmix64 finalizer: a well-spread pure hash of a 64-bit value.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn doubles_then_caps() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
            max_attempts: 5,
        };
        let c: Vec<u64> = (1..=6).map(|n| b.ceiling(n).as_secs()).collect();
        assert_eq!(c, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(b.ceiling(0), b.ceiling(1));
        assert_eq!(b.ceiling(u32::MAX), b.cap);
        assert!(b.exhausted(5) && !b.exhausted(4));
    }

    #[test]
    fn jitter_is_deterministic_and_varies_by_seed() {
        let b = Backoff::default();
        assert_eq!(b.delay(3, 42), b.delay(3, 42));
        let distinct: std::collections::HashSet<_> = (0..50).map(|s| b.delay(3, s)).collect();
        assert!(distinct.len() > 40);
    }

    #[test]
    fn retry_after_is_honoured_within_the_cap() {
        let b = Backoff::default();
        let hinted = b.delay_with_hint(1, 1, Some(Duration::from_secs(30)));
        assert_eq!(hinted, Duration::from_secs(30));
        let capped = b.delay_with_hint(1, 1, Some(Duration::from_secs(3600)));
        assert_eq!(capped, b.cap);
    }

    proptest! {
        #[test]
        fn delay_stays_within_half_and_full_ceiling(attempts in 0u32..100, seed in any::<u64>(),
                                                     base_ms in 1u64..10_000, cap_ms in 1u64..600_000) {
            let b = Backoff { base: Duration::from_millis(base_ms), cap: Duration::from_millis(cap_ms), max_attempts: 3 };
            let d = b.delay(attempts, seed);
            let c = b.ceiling(attempts);
            prop_assert!(d <= c);
            prop_assert!(d >= c / 2);
            prop_assert!(c <= b.cap);
        }
    }
}
