//! Rate-limited log lines: a warning or error that can happen many times a second (a client
//! repeating what causes it, a worker failing every pass while its store is damaged) is logged at
//! most once per [`WARNING_PERIOD`], each line counting the occurrences since the previous one.
//! The first occurrence is reported at once. Pure bookkeeping: the caller logs.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often, at most, one kind of repeated line is logged.
pub const WARNING_PERIOD: Duration = Duration::from_secs(5);

/// The most kinds a [`RepeatedWarnings`] keeps apart; one more kind is reported every time.
pub const MAX_WARNING_KINDS: usize = 256;

/// Rate-limits one kind of line: at most one per [`WARNING_PERIOD`], each counting the
/// occurrences since the previous one.
#[derive(Debug, Default)]
pub struct RepeatedWarning {
    last_warning: Option<Instant>,
    unreported: u64,
}

impl RepeatedWarning {
    /// Counts one occurrence at `now`; returns the number to report when a line is due (this one
    /// included), `None` while the last line is recent.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        self.unreported += 1;
        let due = self
            .last_warning
            .is_none_or(|at| now.saturating_duration_since(at) >= WARNING_PERIOD);
        if !due {
            return None;
        }
        self.last_warning = Some(now);
        Some(std::mem::take(&mut self.unreported))
    }
}

/// [`RepeatedWarning`]s by kind (a name the caller picks: what failed and how), shareable
/// between threads (a `static`). At most [`MAX_WARNING_KINDS`] kinds are kept; a kind beyond them is
/// never limited (`Some(1)` every time), so a caller that makes up kinds cannot grow it.
#[derive(Debug, Default)]
pub struct RepeatedWarnings {
    kinds: Mutex<BTreeMap<String, RepeatedWarning>>,
}

impl RepeatedWarnings {
    /// No kind seen yet.
    pub const fn new() -> Self {
        RepeatedWarnings {
            kinds: Mutex::new(BTreeMap::new()),
        }
    }

    /// Counts one occurrence of `kind` at `now`: see [`RepeatedWarning::note`].
    pub fn note(&self, kind: &str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = kinds.get_mut(kind) {
            return k.note(now);
        }
        if kinds.len() >= MAX_WARNING_KINDS {
            return Some(1);
        }
        kinds.entry(kind.to_owned()).or_default().note(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_warning_is_one_per_period_and_counts_what_it_skipped() {
        let mut r = RepeatedWarning::default();
        let t0 = Instant::now();
        assert_eq!(r.note(t0), Some(1));
        assert_eq!(r.note(t0 + Duration::from_millis(10)), None);
        assert_eq!(r.note(t0 + WARNING_PERIOD - Duration::from_secs(1)), None);
        assert_eq!(r.note(t0 + WARNING_PERIOD), Some(3));
        assert_eq!(r.note(t0 + WARNING_PERIOD + Duration::from_secs(1)), None);
        assert_eq!(r.note(t0 + WARNING_PERIOD * 3), Some(2));
    }

    #[test]
    fn kinds_are_limited_apart_and_their_number_is_bounded() {
        let r = RepeatedWarnings::new();
        let t0 = Instant::now();
        assert_eq!(r.note("a", t0), Some(1));
        assert_eq!(r.note("b", t0), Some(1), "another kind is not held back");
        assert_eq!(r.note("a", t0), None);
        assert_eq!(r.note("a", t0 + WARNING_PERIOD), Some(2));
        for i in 2..MAX_WARNING_KINDS {
            r.note(&format!("k{i}"), t0);
        }
        assert_eq!(r.note("one too many", t0), Some(1));
        assert_eq!(
            r.note("one too many", t0),
            Some(1),
            "not kept: never limited"
        );
        assert_eq!(r.note("b", t0), None, "the kept ones still are");
    }
}
