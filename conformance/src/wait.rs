//! Waiting without fixed sleeps: poll a condition against a deadline. The one poll helper of
//! the suite: behaviours, fixtures (a server becoming ready) and test targets wait through it.

use std::future::Future;
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
/// waits; later pauses grow from 5 ms to 100 ms. Blocking code (a fixture starting a server
/// process) pauses with [`Deadline::tick_blocking`]; a caller that fails with its own message
/// (a server's log) asks [`Deadline::passed`] first. [`until`] is the whole loop for a check
/// that yields a value.
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

    /// Whether the deadline has passed: for a caller that fails with its own message (a
    /// server's log) before [`Deadline::tick`] would fail with this one's.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.until
    }

    /// Pauses before the next check. Panics (failing the behaviour) naming what was awaited
    /// when the deadline has passed.
    pub async fn tick(&mut self) {
        tokio::time::sleep(self.next_pause()).await;
    }

    /// [`Deadline::tick`] for blocking code (no runtime): the thread sleeps.
    pub fn tick_blocking(&mut self) {
        std::thread::sleep(self.next_pause());
    }

    /// Awaits `fut` until the deadline; `None` once it has passed first.
    pub async fn within<F: Future>(&self, fut: F) -> Option<F::Output> {
        tokio::time::timeout_at(self.until, fut).await.ok()
    }

    fn next_pause(&mut self) -> Duration {
        let now = Instant::now();
        assert!(
            now < self.until,
            "timed out after {:?} waiting for {}",
            self.timeout,
            self.what
        );
        let pause = self.pause.min(self.until - now);
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        pause
    }
}

/// Polls `check` until it yields a value, within `timeout`, and returns it. Panics naming `what`
/// once the deadline has passed.
///
/// ```text
/// let refs = until(Duration::from_secs(10), "redelivery", || async {
///     let refs = inbox.fetch_references("alice", 10).await.expect("fetch");
///     (!refs.is_empty()).then_some(refs)
/// })
/// .await;
/// ```
pub async fn until<T, F, Fut>(timeout: Duration, what: impl Into<String>, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let mut deadline = Deadline::new(timeout, what);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        deadline.tick().await;
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
