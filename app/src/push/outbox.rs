//! `Outbox`: the operator's push destinations and their registration on every run (PUSH.md §4).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use crewbus_domain::{Destination, PushConfig, RunId, Seq, StoreError, TenantId};
use crewbus_ports::{Clock, KeyRing, PushStore, SystemClock};

use super::sealed::SealedPush;
use super::signing::Signer;

/// The operator's push destinations over one tenant's push store.
///
/// Cheap to clone (shared state). `Debug` prints the tenant, the destinations (names and URLs
/// without userinfo or query, never a credential or signing key) and whether the store is sealed.
#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn PushStore>,
    destinations: Arc<Vec<Destination>>,
    sealed: bool,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("tenant", self.store.tenant())
            .field("destinations", &self.destinations)
            .field("sealed", &self.sealed)
            .finish()
    }
}

impl Outbox {
    /// An outbox registering `destinations` in `store`.
    ///
    /// # Panics
    /// If a destination fails [`Destination::validate`] (blank name, URL that does not parse or is
    /// not absolute http(s), bad authentication), if two destinations share a name after trimming
    /// (a shared registration id would let one receiver's acknowledgements advance the other's
    /// cursor — silent loss), or if a signing key is not a Standard Webhooks secret
    /// (`whsec_<base64>`). The panic message names the destination, never a secret.
    pub fn new(store: Arc<dyn PushStore>, destinations: Vec<Destination>) -> Self {
        let mut names = HashSet::new();
        for destination in &destinations {
            if let Err(error) = destination.validate() {
                panic!("invalid push destination: {error}");
            }
            let name = destination.name.trim();
            if !names.insert(name.to_owned()) {
                panic!("two push destinations are named {name:?}: names must be unique");
            }
            if let Err(error) = Signer::new(&destination.signing_keys) {
                panic!("push destination {name}: {error}");
            }
        }
        Outbox {
            store,
            destinations: Arc::new(destinations),
            sealed: false,
            clock: Arc::new(SystemClock),
        }
    }

    /// The destinations, as given to [`Outbox::new`].
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }

    /// The same outbox with its store wrapped in [`SealedPush`]: credentials land sealed at rest
    /// (key ring scope `<tenant>/push`) and read back opened.
    ///
    /// # Panics
    /// If `tenant` is not the store's tenant (erasing a tenant destroys its own scope only, so a
    /// mismatch would seal one tenant's credentials under another's key), or if the outbox is
    /// already sealed.
    pub fn sealed(self, keys: Arc<dyn KeyRing>, tenant: TenantId) -> Self {
        let served = self.store.tenant();
        assert!(
            *served == tenant,
            "Outbox::sealed: tenant {tenant} is not the push store's tenant {served}"
        );
        assert!(!self.sealed, "Outbox::sealed: the outbox is already sealed");
        Outbox {
            store: Arc::new(SealedPush::new(self.store, keys)),
            sealed: true,
            ..self
        }
    }

    /// The same outbox taking the registration time from `clock` (default: the system clock).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Outbox { clock, ..self }
    }

    /// Registers every destination against `run` with its cursor at 1, due now (the clock's
    /// time). Idempotent and never rewinding: an existing registration keeps its cursor (its URL
    /// and credential are replaced, its attempts reset and it is un-parked).
    ///
    /// Call at admission (after `RunAdmitted` is journaled) and on every resume that executes; an
    /// error must fail that admission or resume (and a failed admission seals the run as failed).
    /// Errors: the store's or the key ring's [`StoreError`] (`Unavailable` is retryable); the
    /// destinations registered before the failure stay registered.
    pub async fn open(&self, run: RunId) -> Result<(), StoreError> {
        let at = self.clock.now();
        for destination in self.destinations.iter() {
            let config = PushConfig {
                id: destination.registration_id(),
                run,
                url: destination.url.clone(),
                authentication: destination.authentication.clone(),
            };
            self.store.put(&config, Seq::FIRST, at).await?;
        }
        tracing::debug!(%run, destinations = self.destinations.len(), "push registrations opened");
        Ok(())
    }

    /// The push store the outbox writes (sealed after [`Outbox::sealed`]): what the delivery worker
    /// and the operator tools (`push list|parked|unpark`) read through.
    pub fn store(&self) -> &Arc<dyn PushStore> {
        &self.store
    }

    /// Whether [`Outbox::sealed`] wrapped the store.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// The tenant of the push store.
    pub fn tenant(&self) -> &TenantId {
        self.store.tenant()
    }
}
