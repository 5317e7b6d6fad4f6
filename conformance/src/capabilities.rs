//! What an adapter under test offers, declared up front.

use std::fmt;
use std::time::Duration;

use crewbus_domain::Quotas;

/// What a fixture's adapters offer: booleans and limits, each with its unit.
///
/// Declared by the fixture, never discovered by failure: [`crate::trials`] reads it before any
/// test runs and reports a behaviour that needs a missing [`Capability`] as ignored, naming the
/// capability. Behaviours also read the limits (the body limit, the ack wait, …) to drive their
/// checks, so the values must be exactly those the fixture configured its adapters with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// What `MessagingBackend::name()` answers (`"memory"`, `"postgres"`, `"jetstream"`).
    pub backend_name: &'static str,
    /// The body store's effective maximum body size, in bytes: a body of exactly this many bytes
    /// is confirmed, one byte more is `Fatal(TooLarge)`.
    pub body_limit_bytes: u64,
    /// The discard-new quota of every fresh body store the fixture hands out (count, bytes), when
    /// it is small enough for a test to fill (a few dozen bodies at most). `None`: the adapter
    /// has no quota a test can fill; the quota behaviours are ignored
    /// ([`Capability::BodyQuota`]).
    pub body_quota: Option<Quotas>,
    /// The body store's broker duplicate window. `None`: the store has no window (it finds a
    /// repeat by lookup for the life of the body). Behaviours that check idempotency *after* the
    /// window advance past it with [`crate::Namespace::advance`].
    pub body_duplicate_window: Option<Duration>,
    /// How long a handed-out reference waits for its ack before it is handed out again.
    pub ack_wait: Duration,
    /// Most deliveries of one reference (count). `None`: unbounded
    /// ([`Capability::MaxDeliver`] missing).
    pub max_deliver: Option<u64>,
    /// Most references the team's inbox keeps before discarding the oldest (count, discard-old).
    /// `None`: the inbox never drops a reference ([`Capability::InboxOverflow`] missing).
    pub inbox_overflow_limit: Option<u64>,
    /// Whether the inbox deduplicates an event id for the life of the inbox (memory, Postgres),
    /// rather than only within [`Capabilities::inbox_duplicate_window`] (JetStream)
    /// ([`Capability::InboxDedupForLife`]).
    pub inbox_dedup_for_life: bool,
    /// The inbox's duplicate window, when it has one.
    pub inbox_duplicate_window: Option<Duration>,
    /// Whether [`crate::InboxFixture::delete_consumer`] can delete a recipient's consumer
    /// ([`Capability::DeleteConsumer`]).
    pub delete_consumer: bool,
    /// Whether [`crate::Namespace::advance`] moves a manual clock at once (memory, Postgres)
    /// rather than waiting the real duration (JetStream's server timers).
    pub instant_advance: bool,
    /// How long, in real time, a behaviour polls for something to show up (a reference after
    /// its ack wait, a status change) before it fails.
    pub settle_timeout: Duration,
}

/// One optional capability a behaviour can need. [`Capability::name`] is what the test output
/// prints when a trial is ignored for lack of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// [`Capabilities::body_quota`] is `Some`.
    BodyQuota,
    /// [`Capabilities::max_deliver`] is `Some`.
    MaxDeliver,
    /// [`Capabilities::inbox_overflow_limit`] is `Some`.
    InboxOverflow,
    /// [`Capabilities::inbox_dedup_for_life`] is true.
    InboxDedupForLife,
    /// [`Capabilities::delete_consumer`] is true.
    DeleteConsumer,
}

impl Capability {
    /// The capability's name as the field of [`Capabilities`] that declares it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::BodyQuota => "body_quota",
            Capability::MaxDeliver => "max_deliver",
            Capability::InboxOverflow => "inbox_overflow_limit",
            Capability::InboxDedupForLife => "inbox_dedup_for_life",
            Capability::DeleteConsumer => "delete_consumer",
        }
    }

    /// Whether `caps` declares this capability.
    pub fn offered_by(self, caps: &Capabilities) -> bool {
        match self {
            Capability::BodyQuota => caps.body_quota.is_some(),
            Capability::MaxDeliver => caps.max_deliver.is_some(),
            Capability::InboxOverflow => caps.inbox_overflow_limit.is_some(),
            Capability::InboxDedupForLife => caps.inbox_dedup_for_life,
            Capability::DeleteConsumer => caps.delete_consumer,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Capabilities {
    /// What a SQL store declares (Postgres, SQLite) with these settings: no body quota (the
    /// table grows with the disk), no inbox overflow (the queue never drops a reference), dedup
    /// on the event id for the life of the row, no duplicate window, consumers deletable, time
    /// from a manual clock, 5 s to settle.
    pub fn sql_store(
        backend_name: &'static str,
        body_limit_bytes: u64,
        ack_wait: Duration,
        max_deliver: u64,
    ) -> Capabilities {
        Capabilities {
            backend_name,
            body_limit_bytes,
            body_quota: None,
            body_duplicate_window: None,
            ack_wait,
            max_deliver: Some(max_deliver),
            inbox_overflow_limit: None,
            inbox_dedup_for_life: true,
            inbox_duplicate_window: None,
            delete_consumer: true,
            instant_advance: true,
            settle_timeout: Duration::from_secs(5),
        }
    }

    /// The first of `needs` this fixture does not offer.
    pub fn missing(&self, needs: &[Capability]) -> Option<Capability> {
        needs.iter().copied().find(|c| !c.offered_by(self))
    }

    /// The body quota; panics (failing the behaviour loudly) when the harness ran a behaviour
    /// that needs [`Capability::BodyQuota`] without it.
    pub(crate) fn quota(&self) -> Quotas {
        self.body_quota
            .expect("behaviour needs the body_quota capability")
    }

    /// Far enough past the inbox's duplicate window that only dedup for life still holds; with
    /// no window, a day when `advance` is instant (else a second).
    pub(crate) fn past_inbox_window(&self) -> Duration {
        self.past(self.inbox_duplicate_window, Duration::from_secs(24 * 3600))
    }

    /// Far enough past the body store's duplicate window that a broker's own deduplication no
    /// longer applies; with no window, an hour when `advance` is instant (else a second).
    pub(crate) fn past_body_window(&self) -> Duration {
        self.past(self.body_duplicate_window, Duration::from_secs(3600))
    }

    fn past(&self, window: Option<Duration>, long: Duration) -> Duration {
        let second = Duration::from_secs(1);
        match window {
            Some(w) => w + second,
            None if self.instant_advance => long,
            None => second,
        }
    }
}
