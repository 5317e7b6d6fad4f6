//! The listeners' lost sessions: a wake-up or feed listener whose `next` answers `Unavailable`
//! is logged at WARN and counted, started again (not at once when it was lost as soon as it was
//! made), and its return logged at INFO and counted.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use crewbus_domain::{BusResult, FeedEvent, FeedUpdate, Wakeup, WakeupTarget};
use crewbus_ports::{Feed, FeedListener, WakeupListener, Wakeups};

use super::*;
use crate::usecases::wait::LISTEN_PAUSE;

/// A port whose first `lose` listeners are lost at their first `next`; the later ones hear
/// nothing, forever. `starts` counts the listeners made.
#[derive(Default)]
struct Flaky {
    lose: usize,
    starts: AtomicUsize,
}

impl Flaky {
    fn losing(lose: usize) -> Arc<Flaky> {
        Arc::new(Flaky {
            lose,
            starts: AtomicUsize::new(0),
        })
    }

    fn start(&self) -> bool {
        self.starts.fetch_add(1, Ordering::SeqCst) < self.lose
    }
}

/// One listener of [`Flaky`]: lost (`Unavailable`) at its first `next` when `lost`.
struct FlakyListener {
    lost: bool,
}

impl FlakyListener {
    async fn next<T>(&mut self) -> BusResult<T> {
        if std::mem::take(&mut self.lost) {
            return Err(BusError::unavailable("the session was lost"));
        }
        std::future::pending().await
    }
}

#[async_trait]
impl WakeupListener for FlakyListener {
    async fn next(&mut self) -> BusResult<Wakeup> {
        FlakyListener::next(self).await
    }
}

#[async_trait]
impl FeedListener for FlakyListener {
    async fn next(&mut self) -> BusResult<FeedUpdate> {
        FlakyListener::next(self).await
    }
}

#[async_trait]
impl Wakeups for Flaky {
    async fn notify(&self, _: &[WakeupTarget]) -> BusResult<()> {
        Ok(())
    }
    async fn notify_leases(&self, _: &[crewbus_domain::Uuid]) -> BusResult<()> {
        Ok(())
    }
    async fn listen(&self) -> BusResult<Box<dyn WakeupListener>> {
        Ok(Box::new(FlakyListener { lost: self.start() }))
    }
}

#[async_trait]
impl Feed for Flaky {
    async fn publish(&self, _: &[FeedEvent]) -> BusResult<()> {
        Ok(())
    }
    async fn subscribe(&self) -> BusResult<Box<dyn FeedListener>> {
        Ok(Box::new(FlakyListener { lost: self.start() }))
    }
}

/// Log lines written while the guard returned with it lives (on this thread: the tests run
/// on the current-thread runtime).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// The lines at `level` (`WARN`, `INFO`) naming `what`.
    fn lines(&self, level: &str, what: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(&format!(" {level} ")) && l.contains(what))
            .count()
    }
}

/// Waits (on the paused clock, which moves when every task waits) until `done`.
async fn until(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(600), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
}

#[tokio::test(start_paused = true)]
async fn a_lost_wakeup_listener_is_logged_counted_and_started_again() {
    let (logs, _guard) = Captured::start();
    let flaky = Flaky::losing(2);
    let mut b = bus(MockLedger::new(), MockBackends::new());
    b.ports.wakeups = flaky.clone();
    let shutdown = crate::shutdown::Shutdown::new();
    let started = tokio::time::Instant::now();
    let listener = tokio::spawn(crate::usecases::wait::run_listener(
        b.clone(),
        shutdown.clone(),
    ));
    until("two reconnections", || {
        b.metrics.wakeup_listener_reconnected.get() == 2
    })
    .await;
    assert_eq!(b.metrics.wakeup_listener_lost.get(), 2);
    assert_eq!(
        flaky.starts.load(Ordering::SeqCst),
        3,
        "started again each time"
    );
    assert!(
        started.elapsed() >= 2 * LISTEN_PAUSE,
        "a listener lost as soon as it was made is not replaced at once"
    );
    assert_eq!(logs.lines("WARN", "code=\"unavailable\""), 2, "each loss");
    assert_eq!(logs.lines("INFO", "wait"), 2, "each reconnection");
    shutdown.trigger();
    listener.await.unwrap();
    assert_eq!(b.metrics.wakeup_listener_reconnected.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lost_feed_listener_is_logged_counted_and_its_viewers_told_they_lagged() {
    let (logs, _guard) = Captured::start();
    let flaky = Flaky::losing(1);
    let mut b = bus(MockLedger::new(), MockBackends::new());
    b.ports.feed = flaky.clone();
    let mut viewer = b.watch_feed().await;
    until("the reconnection", || {
        b.metrics.feed_listener_reconnected.get() == 1
    })
    .await;
    assert_eq!(b.metrics.feed_listener_lost.get(), 1);
    assert_eq!(flaky.starts.load(Ordering::SeqCst), 2);
    assert_eq!(viewer.recv().await.unwrap(), FeedUpdate::Lagged);
    assert_eq!(logs.lines("WARN", "code=\"unavailable\""), 1);
    assert_eq!(logs.lines("INFO", "feed"), 1);
}
