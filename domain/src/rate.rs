//! A token bucket: the send rate limit of one agent (crewbus issue 21, item 4).
//!
//! Pure arithmetic over a caller-supplied clock in milliseconds, so it is property-tested here and
//! driven by the bus clock in the app. Tokens are counted in thousandths (milli-tokens) so a
//! rate of a few tokens per second refills smoothly on a millisecond clock without floats.
//!
//! Bound: over any window of `t` seconds starting from a full bucket, a bucket grants at most
//! `burst + rate × t` tokens (tested below).

use serde::{Deserialize, Serialize};

use crate::{BusError, BusResult};

/// Milli-tokens in one token.
const MILLI: u64 = 1000;

/// The shape of a limit: `rate` tokens refilled per second, at most `burst` held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Tokens added per second (one token = one message sent). At least 1.
    pub rate_per_second: u32,
    /// Most tokens the bucket holds (the largest burst of sends). At least 1.
    pub burst: u32,
}

impl RateLimit {
    /// Checks the shape. Errors: `rate_per_second` or `burst` of 0 → `Invalid`.
    pub fn validate(&self) -> BusResult<()> {
        if self.rate_per_second == 0 {
            return Err(BusError::invalid(
                "rate_limit: rate_per_second must be at least 1",
            ));
        }
        if self.burst == 0 {
            return Err(BusError::invalid("rate_limit: burst must be at least 1"));
        }
        Ok(())
    }
}

/// One bucket's state: its limit, the milli-tokens it holds and when it was last refilled (ms on
/// the caller's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    limit: RateLimit,
    milli_tokens: u64,
    refilled_at_ms: i64,
}

impl TokenBucket {
    /// A full bucket of `limit` at `now_ms` (ms on the caller's clock).
    pub fn full(limit: RateLimit, now_ms: i64) -> Self {
        TokenBucket {
            limit,
            milli_tokens: u64::from(limit.burst) * MILLI,
            refilled_at_ms: now_ms,
        }
    }

    /// A bucket as a ledger stored it: `milli_tokens` thousandths of a token held at
    /// `refilled_at_ms` (kept to the limit's burst, so a lowered burst never over-grants).
    pub fn from_stored(limit: RateLimit, milli_tokens: u64, refilled_at_ms: i64) -> Self {
        TokenBucket {
            limit,
            milli_tokens: milli_tokens.min(u64::from(limit.burst) * MILLI),
            refilled_at_ms,
        }
    }

    /// What a ledger stores of the bucket: milli-tokens held and when they were counted (ms).
    pub fn stored(&self) -> (u64, i64) {
        (self.milli_tokens, self.refilled_at_ms)
    }

    /// Takes as many whole tokens as it holds at `now_ms`, up to `n` (a chunk a server leases
    /// from a shared bucket). Returns how many were taken (1 to `n`); none held → `Err(wait_ms)`
    /// until one is (at least 1). `n` of 0 takes nothing (`Ok(0)`).
    pub fn take_up_to(&mut self, n: u32, now_ms: i64) -> Result<u32, u64> {
        if n == 0 {
            return Ok(0);
        }
        self.refill(now_ms);
        let whole = u32::try_from(self.milli_tokens / MILLI).unwrap_or(u32::MAX);
        if whole == 0 {
            let rate = u64::from(self.limit.rate_per_second.max(1));
            return Err((MILLI - self.milli_tokens).div_ceil(rate).max(1));
        }
        let taken = whole.min(n);
        self.milli_tokens -= u64::from(taken) * MILLI;
        Ok(taken)
    }

    /// The bucket's limit.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Changes the limit (a configuration reload or a team override), keeping the tokens held up
    /// to the new burst.
    pub fn set_limit(&mut self, limit: RateLimit) {
        self.limit = limit;
        self.milli_tokens = self.milli_tokens.min(u64::from(limit.burst) * MILLI);
    }

    /// Whole tokens held at `now_ms` (after refilling).
    pub fn tokens(&mut self, now_ms: i64) -> u64 {
        self.refill(now_ms);
        self.milli_tokens / MILLI
    }

    fn refill(&mut self, now_ms: i64) {
        // A clock behind the mark (gone back, or another server's clock, behind: the shared
        // bucket of `take_chunk`) refills nothing and leaves the mark where it is; moving it
        // back would let the next take at a later clock credit the difference again.
        if now_ms <= self.refilled_at_ms {
            return;
        }
        let elapsed = u64::try_from(now_ms - self.refilled_at_ms).unwrap_or(u64::MAX);
        let cap = u64::from(self.limit.burst) * MILLI;
        // rate tokens/s = rate milli-tokens/ms.
        let added = elapsed.saturating_mul(u64::from(self.limit.rate_per_second));
        self.milli_tokens = self.milli_tokens.saturating_add(added).min(cap);
        self.refilled_at_ms = now_ms;
    }

    /// Takes `n` tokens at `now_ms`, all or none.
    ///
    /// Returns `Ok(())` when granted; otherwise `Err(wait_ms)`: the milliseconds until `n` tokens
    /// are held (at least 1). A request for more than `burst` tokens can never be granted at
    /// once: its wait is the time to refill a full bucket plus the rest, so a caller should split
    /// it (the bus counts each message of a send as one token).
    pub fn try_take(&mut self, n: u32, now_ms: i64) -> Result<(), u64> {
        self.refill(now_ms);
        let want = u64::from(n) * MILLI;
        if self.milli_tokens >= want {
            self.milli_tokens -= want;
            return Ok(());
        }
        let missing = want - self.milli_tokens;
        let rate = u64::from(self.limit.rate_per_second.max(1));
        Err(missing.div_ceil(rate).max(1))
    }
}

/// One take of a chunk from a bucket a ledger keeps (`SendAllowance::take_tokens`): the bucket
/// as stored (`None`: never taken from, so full), the chunk wanted, now (ms). Returns how many
/// tokens were taken and the bucket to store — unchanged but refilled when none could be taken.
///
/// Errors: no whole token held → `RateLimited` with the wait until one is, in whole seconds.
pub fn take_chunk(
    limit: RateLimit,
    stored: Option<(u64, i64)>,
    want: u32,
    now_ms: i64,
) -> (BusResult<u32>, (u64, i64)) {
    let mut bucket = match stored {
        Some((milli, at)) => TokenBucket::from_stored(limit, milli, at),
        None => TokenBucket::full(limit, now_ms),
    };
    let taken = bucket
        .take_up_to(want, now_ms)
        .map_err(|wait_ms| BusError::RateLimited {
            retry_after_seconds: retry_after_seconds(wait_ms),
        });
    (taken, bucket.stored())
}

/// Whole seconds of a wait in ms, rounded up (what `Retry-After` carries), at least 1.
pub fn retry_after_seconds(wait_ms: u64) -> u64 {
    wait_ms.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limit(rate: u32, burst: u32) -> RateLimit {
        RateLimit {
            rate_per_second: rate,
            burst,
        }
    }

    #[test]
    fn a_full_bucket_grants_its_burst_then_refuses_with_the_wait() {
        let mut b = TokenBucket::full(limit(2, 3), 0);
        for _ in 0..3 {
            assert_eq!(b.try_take(1, 0), Ok(()));
        }
        // One token at 2/s is 500 ms away.
        assert_eq!(b.try_take(1, 0), Err(500));
        assert_eq!(b.try_take(1, 499), Err(1));
        assert_eq!(b.try_take(1, 500), Ok(()));
    }

    #[test]
    fn refill_stops_at_the_burst_and_a_clock_going_back_grants_nothing() {
        let mut b = TokenBucket::full(limit(10, 5), 1000);
        assert_eq!(b.tokens(1_000_000), 5);
        assert_eq!(b.try_take(5, 1_000_000), Ok(()));
        assert_eq!(b.tokens(0), 0);
        assert!(b.try_take(1, 0).is_err());
    }

    #[test]
    fn take_up_to_takes_what_is_held_up_to_the_chunk() {
        let mut b = TokenBucket::full(limit(2, 7), 0);
        assert_eq!(b.take_up_to(5, 0), Ok(5));
        assert_eq!(b.take_up_to(5, 0), Ok(2));
        assert_eq!(b.take_up_to(5, 0), Err(500));
        assert_eq!(b.take_up_to(5, 250), Err(250));
        assert_eq!(b.take_up_to(5, 1000), Ok(2));
        assert_eq!(b.take_up_to(0, 1000), Ok(0));
        let (milli, at) = b.stored();
        assert_eq!((milli, at), (0, 1000));
        // A stored bucket above a lowered burst is cut to it.
        let mut kept = TokenBucket::from_stored(limit(2, 3), 9_000, 1000);
        assert_eq!(kept.take_up_to(10, 1000), Ok(3));
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_seconds(1), 1);
        assert_eq!(retry_after_seconds(1000), 1);
        assert_eq!(retry_after_seconds(1001), 2);
        assert_eq!(retry_after_seconds(0), 1);
    }

    #[test]
    fn zero_rate_or_burst_is_invalid() {
        assert!(matches!(
            limit(0, 1).validate(),
            Err(BusError::Invalid { .. })
        ));
        assert!(matches!(
            limit(1, 0).validate(),
            Err(BusError::Invalid { .. })
        ));
        assert!(limit(1, 1).validate().is_ok());
    }

    proptest! {
        /// Over any sequence of requests, the tokens granted by `t_ms` never exceed
        /// `burst + rate × t` (rounded down), and a refusal's wait is honest: taking again after
        /// it succeeds when nothing else was taken.
        #[test]
        fn grants_stay_within_burst_plus_rate_times_t(
            rate in 1u32..50,
            burst in 1u32..50,
            steps in proptest::collection::vec((0i64..400, 1u32..5), 1..200),
        ) {
            let l = limit(rate, burst);
            let mut b = TokenBucket::full(l, 0);
            let mut now = 0i64;
            let mut granted = 0u64;
            for (dt, n) in steps {
                now += dt;
                match b.try_take(n, now) {
                    Ok(()) => granted += u64::from(n),
                    Err(wait) => {
                        prop_assert!(wait >= 1);
                        if n <= burst {
                            let mut probe = b;
                            prop_assert_eq!(probe.try_take(n, now + wait as i64), Ok(()));
                            let mut early = b;
                            prop_assert!(early.try_take(n, now + wait as i64 - 1).is_err());
                        }
                    }
                }
                let bound = u64::from(burst) + u64::from(rate) * (now as u64) / 1000;
                prop_assert!(granted <= bound, "granted {} > bound {} at {} ms", granted, bound, now);
            }
        }

        /// Servers whose clocks disagree by up to `skew` ms, taking from one shared bucket in
        /// any order, never get more than `burst + rate × (t + skew)` in all by the latest
        /// clock's `t`: a clock behind the bucket's mark refills nothing and never moves it
        /// back (moving it back re-credits the skew on every take).
        #[test]
        fn skewed_clocks_never_refill_twice(
            rate in 1u32..50,
            burst in 1u32..50,
            skews in proptest::collection::vec(0i64..1000, 2..4),
            steps in proptest::collection::vec((0i64..100, 0usize..4, 1u32..10), 1..300),
        ) {
            let mut shared = TokenBucket::full(limit(rate, burst), 0);
            let mut now = 0i64;
            let mut granted = 0u64;
            for (dt, server, want) in steps {
                now += dt;
                // Server clocks run behind the true time by their skew.
                let clock = now - skews[server % skews.len()];
                if let Ok(n) = shared.take_up_to(want, clock) {
                    granted += u64::from(n);
                }
            }
            let bound = u64::from(burst) + u64::from(rate) * (now.max(0) as u64) / 1000;
            prop_assert!(granted <= bound, "granted {} > {}", granted, bound);
        }

        /// Servers sharing one bucket, each leasing `chunk` tokens from it when its own run out
        /// (how the bus shares an agent's limit across servers): the sends granted in any
        /// window of `t` ms are at most `burst + servers × chunk + rate × t`, whatever the
        /// interleaving — the chunks held when the window opens are the only slack.
        #[test]
        fn chunked_sends_stay_within_burst_plus_servers_times_chunk(
            rate in 1u32..50,
            burst in 1u32..50,
            chunk in 1u32..10,
            servers in 1usize..4,
            steps in proptest::collection::vec((0i64..200, 0usize..4), 1..300),
            window_start in 0usize..300,
        ) {
            let chunk = chunk.min(burst);
            let mut shared = TokenBucket::full(limit(rate, burst), 0);
            let mut held = vec![0u32; servers];
            let mut now = 0i64;
            let mut sends: Vec<i64> = Vec::new();
            for (dt, server) in steps {
                now += dt;
                let server = server % servers;
                if held[server] == 0
                    && let Ok(n) = shared.take_up_to(chunk, now)
                {
                    held[server] = n;
                }
                if held[server] > 0 {
                    held[server] -= 1;
                    sends.push(now);
                }
            }
            let from = sends.get(window_start).copied().unwrap_or(now);
            let in_window: Vec<&i64> = sends.iter().filter(|t| **t >= from).collect();
            let t = now - from;
            let bound = u64::from(burst)
                + servers as u64 * u64::from(chunk)
                + u64::from(rate) * (t as u64) / 1000;
            prop_assert!(in_window.len() as u64 <= bound, "{} sends in {} ms > {}", in_window.len(), t, bound);
        }
    }
}
