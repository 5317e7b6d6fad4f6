//! The operator push outbox (PUSH.md §4–§6): destinations registered on every run ([`Outbox`]),
//! credentials sealed at rest ([`SealedPush`], [`LocalKeyRing`]), and the [`DeliveryWorker`] that
//! signs (Standard Webhooks) and POSTs every run's journal as CloudEvents over
//! [`HttpTransport`].
//!
//! Composition (what the composition root does, in order), with `settings: PushSettings` (the
//! `[push]` section):
//! 1. `let keys = settings.key_ring()?` — the local key ring (master key from a file or an
//!    environment variable), if configured;
//! 2. `let outbox = settings.outbox(push_store, persistent, keys.map(|k| Arc::new(k) as _),
//!    tenant)?` — destinations resolved (secrets from named variables or files), the store sealed
//!    with the key ring; a persistent (Postgres) store without a key ring is refused unless
//!    `allow_unsealed`. (By hand: `Outbox::new(store, destinations).sealed(keys, tenant)`.)
//! 3. `let worker = DeliveryWorker::new(&outbox, journal, Arc::new(settings.transport()?))
//!    .with_settings(settings.delivery())` (`.with_events(sink)` to say on the console feed
//!    when it parks a registration), then `PushRuntime::run` as a background task: the worker,
//!    and the hourly pruning of finished registrations' attempts logs
//!    (`settings.attempts_kept_for()`);
//! 4. `outbox.open(run)` after `RunAdmitted` and on every resume that executes (an error fails the
//!    admission — seal the run as failed with the reason — or the resume);
//! 5. operator tools read `outbox.store()` through the oversight use cases
//!    (`Bus::admin_parked_registrations`, `Bus::admin_push_configs`, `Bus::admin_unpark` for
//!    `push parked|list|unpark`; `Bus::admin_parked`, `Bus::admin_push` with the attempts logs
//!    for the admin API).

mod delivery;
mod http_transport;
mod key_ring;
mod outbox;
mod payload;
mod runtime;
mod sealed;
mod settings;
mod signing;

pub use crewbus_domain::Destination;
pub use delivery::{DeliverySettings, DeliveryWorker, EventSink, Sweep};
pub use http_transport::HttpTransport;
pub use key_ring::{LocalKeyRing, MasterKey, MasterKeyError};
pub use outbox::Outbox;
pub use payload::{CLOUDEVENTS_JSON, CloudEvents, Event, Projection};
pub use runtime::{DEFAULT_ATTEMPTS_KEPT_DAYS, PRUNE_EVERY, PushRuntime};
pub use sealed::{ENVELOPE_VERSION, EnvelopeError, SealedPush};
pub use settings::{
    ATTEMPTS_KEPT, ATTEMPTS_KEPT_DAYS, AuthenticationSettings, DestinationSettings,
    KeyRingSettings, PushSettings, PushSetupError, SecretSource,
};
pub use signing::{
    Signer, SigningKeyError, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, webhook_id,
};
