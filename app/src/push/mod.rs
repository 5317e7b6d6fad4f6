//! The operator push outbox (PUSH.md §4–§6): destinations registered on every run ([`Outbox`]),
//! credentials sealed at rest ([`SealedPush`], [`LocalKeyRing`]), and the [`DeliveryWorker`] that
//! signs (Standard Webhooks) and POSTs every run's journal as CloudEvents over
//! [`HttpTransport`].
//!
//! Composition (what the composition root does, in order):
//! 1. `Outbox::new(push_store, destinations)` — panics on a blank, duplicate or unparsable
//!    destination;
//! 2. `.sealed(key_ring, tenant)` — always, for a persistent store;
//! 3. `DeliveryWorker::new(&outbox, journal, Arc::new(HttpTransport::new(timeout)?))`, then
//!    `worker.run(clock, poll, shutdown)` as a background task;
//! 4. `outbox.open(run)` after `RunAdmitted` and on every resume that executes.

mod delivery;
mod http_transport;
mod key_ring;
mod outbox;
mod payload;
mod sealed;
mod signing;

pub use crewbus_domain::Destination;
pub use delivery::{DeliverySettings, DeliveryWorker, Sweep};
pub use http_transport::HttpTransport;
pub use key_ring::{LocalKeyRing, MasterKey, MasterKeyError};
pub use outbox::Outbox;
pub use payload::{CLOUDEVENTS_JSON, CloudEvents, Event, Projection};
pub use sealed::{ENVELOPE_VERSION, EnvelopeError, SealedPush};
pub use signing::{
    Signer, SigningKeyError, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, webhook_id,
};
