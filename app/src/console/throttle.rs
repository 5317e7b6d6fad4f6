//! Slowing repeated failed sign-ins, per client address.
//!
//! A client (its peer address; an IPv6 address counts by its /64) that failed
//! [`MAX_FAILURES`] sign-ins within [`WINDOW`] is refused (`429` with `Retry-After`) until the
//! oldest of them leaves the window — whatever it presents, a good code included. Counted in
//! this process only, on the real clock. Behind a reverse proxy every client shares the proxy's
//! address: the limit then holds for all of them together.
//!
//! The warnings about refused sign-ins are rate-limited too ([`RepeatedWarning`]): a guessing
//! client would otherwise write a line per guess. At most one line per period for each of
//! "too many failed sign-ins" and "a sign-in refused", each counting the refusals since the
//! previous one, from any address.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::logging::RepeatedWarning;

/// Failed sign-ins a client may have within [`WINDOW`] before it is refused.
pub(crate) const MAX_FAILURES: usize = 5;

/// The window failures are counted in (one minute).
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Most clients remembered at once; past it, clients whose failures all left the window are
/// forgotten, and if that is not enough, the one with the oldest newest failure.
const MAX_CLIENTS: usize = 10_000;

/// Failed sign-ins per client within the window, and the warnings about refused ones.
#[derive(Debug, Default)]
pub(crate) struct SignInThrottle {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
    /// Sign-ins refused because their client failed too often.
    throttled: Mutex<RepeatedWarning>,
    /// Sign-ins refused for their code or token.
    refused: Mutex<RepeatedWarning>,
}

impl SignInThrottle {
    /// `Ok` when `client` may try to sign in at `now`; otherwise how long until it may.
    #[cfg(test)]
    pub(crate) fn check(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let Some(times) = failures.get_mut(&key(client)) else {
            return Ok(());
        };
        forget_old(times, now);
        if times.len() < MAX_FAILURES {
            return Ok(());
        }
        // The oldest failure counted leaves the window then.
        let oldest = times[times.len() - MAX_FAILURES];
        Err((oldest + WINDOW).saturating_duration_since(now))
    }

    /// Begins a sign-in of `client` at `now`, in one step with [`SignInThrottle::check`]: it is
    /// counted as failed at once (so concurrent guesses each take a place within the limit)
    /// until [`SignInThrottle::forgive`] takes it back — after a success, or an outcome that
    /// was no credential refused. Returns the attempt's instant, or how long until `client` may
    /// try.
    pub(crate) fn begin(&self, client: IpAddr, now: Instant) -> Result<Instant, Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(times) = failures.get_mut(&key(client)) {
            forget_old(times, now);
            if times.len() >= MAX_FAILURES {
                let oldest = times[times.len() - MAX_FAILURES];
                return Err((oldest + WINDOW).saturating_duration_since(now));
            }
        }
        record(&mut failures, client, now);
        Ok(now)
    }

    /// Takes back the attempt [`SignInThrottle::begin`] counted at `at` (it signed in, or was
    /// refused for another reason than its credential).
    pub(crate) fn forgive(&self, client: IpAddr, at: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(times) = failures.get_mut(&key(client))
            && let Some(i) = times.iter().rposition(|t| *t == at)
        {
            times.remove(i);
        }
    }

    /// Counts a sign-in refused at `now` because its client failed too often: how many such
    /// refusals to report when a warning is due (see [`RepeatedWarning::note`]).
    pub(crate) fn warn_throttled(&self, now: Instant) -> Option<u64> {
        let mut w = self.throttled.lock().unwrap_or_else(|e| e.into_inner());
        w.note(now)
    }

    /// Counts a sign-in refused at `now` for its code or token: how many such refusals to
    /// report when a warning is due.
    pub(crate) fn warn_refused(&self, now: Instant) -> Option<u64> {
        let mut w = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        w.note(now)
    }

    /// Counts a failed sign-in of `client` at `now`.
    #[cfg(test)]
    pub(crate) fn fail(&self, client: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        record(&mut failures, client, now);
    }
}

/// Counts a failed sign-in of `client` at `now` in `failures`, keeping the table bounded.
fn record(failures: &mut HashMap<IpAddr, VecDeque<Instant>>, client: IpAddr, now: Instant) {
    if failures.len() >= MAX_CLIENTS && !failures.contains_key(&key(client)) {
        failures.retain(|_, times| {
            forget_old(times, now);
            !times.is_empty()
        });
        if failures.len() >= MAX_CLIENTS
            && let Some(stalest) = failures
                .iter()
                .min_by_key(|(_, times)| times.back().copied())
                .map(|(ip, _)| *ip)
        {
            failures.remove(&stalest);
        }
    }
    let times = failures.entry(key(client)).or_default();
    forget_old(times, now);
    times.push_back(now);
    // Only the newest MAX_FAILURES decide anything.
    while times.len() > MAX_FAILURES {
        times.pop_front();
    }
}

/// Drops the failures that left the window.
fn forget_old(times: &mut VecDeque<Instant>, now: Instant) {
    while times
        .front()
        .is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW)
    {
        times.pop_front();
    }
}

/// What a client is counted by: its IPv4 address, its IPv6 /64 (an IPv4-mapped IPv6 address as
/// the IPv4 one).
fn key(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sixth_failure_within_a_minute_waits_until_the_oldest_leaves_the_window() {
        let t = SignInThrottle::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let t0 = Instant::now();
        for i in 0..MAX_FAILURES as u64 {
            assert_eq!(t.check(a, t0 + Duration::from_secs(i)), Ok(()));
            t.fail(a, t0 + Duration::from_secs(i));
        }
        let now = t0 + Duration::from_secs(10);
        assert_eq!(t.check(a, now), Err(Duration::from_secs(50)));
        // Another client is not slowed.
        assert_eq!(t.check(b, now), Ok(()));
        // The first failure leaves the window at t0 + 60 s.
        assert_eq!(t.check(a, t0 + WINDOW), Ok(()));
        t.fail(a, t0 + WINDOW);
        assert_eq!(
            t.check(a, t0 + WINDOW),
            Err(Duration::from_secs(1)),
            "failures at 1..4 s and 60 s: the one at 1 s leaves at 61 s"
        );
    }

    #[test]
    fn an_ipv6_client_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let t = SignInThrottle::default();
        let t0 = Instant::now();
        for i in 0..MAX_FAILURES {
            let ip: IpAddr = format!("2001:db8:1:2::{i}").parse().unwrap();
            t.fail(ip, t0);
        }
        assert!(t.check("2001:db8:1:2::99".parse().unwrap(), t0).is_err());
        assert!(t.check("2001:db8:1:3::1".parse().unwrap(), t0).is_ok());
        for _ in 0..MAX_FAILURES {
            t.fail("::ffff:127.0.0.9".parse().unwrap(), t0);
        }
        assert!(t.check("127.0.0.9".parse().unwrap(), t0).is_err());
    }

    #[test]
    fn a_sign_in_is_counted_as_it_begins_and_forgiven_when_it_succeeds() {
        let t = SignInThrottle::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        // Concurrent guesses: each takes its place at once; the sixth waits.
        let begun: Vec<Instant> = (0..MAX_FAILURES)
            .map(|_| t.begin(a, t0).expect("within the limit"))
            .collect();
        assert!(t.begin(a, t0).is_err());
        // One of them signed in: its place is given back.
        t.forgive(a, begun[0]);
        let next = t.begin(a, t0 + Duration::from_secs(1)).unwrap();
        assert!(t.begin(a, t0 + Duration::from_secs(1)).is_err());
        t.forgive(a, next);
        assert!(t.check(a, t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = SignInThrottle::default();
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 + 10) {
            t.fail(
                IpAddr::V4(i.into()),
                t0 + Duration::from_millis(u64::from(i)),
            );
        }
        assert!(t.failures.lock().unwrap().len() <= MAX_CLIENTS);
    }
}
