//! Waiting without fixed sleeps: poll a condition against a deadline.

use std::time::Duration;

use crewbus_domain::InboxRef;
use crewbus_ports::Inbox;
use tokio::time::Instant;

/// First pause between polls; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
/// Longest pause between polls.
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// A deadline for polling a condition: check, and if it does not hold yet, [`Deadline::tick`].
///
/// ```text
/// let mut deadline = Deadline::new(caps.settle_timeout, "the reference to come back");
/// loop {
///     if condition().await { break; }
///     deadline.tick().await; // panics naming what was awaited once the deadline passed
/// }
/// ```
///
/// The first check happens before any pause, so an adapter that answers at once (memory) never
/// waits; later pauses grow from 5 ms to 100 ms.
#[derive(Debug)]
pub struct Deadline {
    until: Instant,
    timeout: Duration,
    pause: Duration,
    what: String,
}

impl Deadline {
    /// A deadline `timeout` of real time from now, for awaiting `what`.
    pub fn new(timeout: Duration, what: impl Into<String>) -> Self {
        Deadline {
            until: Instant::now() + timeout,
            timeout,
            pause: FIRST_PAUSE,
            what: what.into(),
        }
    }

    /// Pauses before the next check. Panics (failing the behaviour) naming what was awaited
    /// when the deadline has passed.
    pub async fn tick(&mut self) {
        let now = Instant::now();
        assert!(
            now < self.until,
            "timed out after {:?} waiting for {}",
            self.timeout,
            self.what
        );
        tokio::time::sleep(self.pause.min(self.until - now)).await;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
    }
}

/// Fetches `recipient`'s references (batches of up to `batch`) until at least `n` arrived,
/// within `timeout`; returns them in arrival order. A short batch never means "caught up", so
/// this keeps asking. Panics on a fetch error or when the deadline passes.
pub async fn fetch_at_least(
    inbox: &dyn Inbox,
    recipient: &str,
    n: usize,
    batch: usize,
    timeout: Duration,
) -> Vec<InboxRef> {
    let mut deadline = Deadline::new(timeout, format!("{n} references for {recipient}"));
    let mut got = Vec::new();
    loop {
        let refs = inbox
            .fetch_references(recipient, batch)
            .await
            .expect("fetch_references failed");
        got.extend(refs);
        if got.len() >= n {
            return got;
        }
        deadline.tick().await;
    }
}
