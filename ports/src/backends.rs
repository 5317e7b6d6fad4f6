//! The registry of per-team body backends and inboxes.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_domain::BusResult;
use uuid::Uuid;

use crate::{Inbox, MessagingBackend};

/// Hands out the body backend and inbox of a team, by backend name.
///
/// Each adapter's registry answers for its own name ([`Backends::name`]); the composition root
/// combines them. A registry caches per-team adapters and shares one connection across teams
/// (thousands of teams never open thousands of connections). Every handle it gives out for one
/// team shares that team's state: bodies published through one are fetchable through another,
/// references published through one are handed out through another. A cached team whose
/// backing store vanished is evicted and answered as `NotProvisioned`, never served stale.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Backends: Send + Sync {
    /// The backend name this registry answers for (`"memory"`, `"postgres"`, `"jetstream"`);
    /// equal to [`crate::MessagingBackend::name`] of every body backend it hands out.
    fn name(&self) -> &'static str;

    /// The team's body backend named `name` — the name a conversation recorded when it was
    /// created. Errors: a `name` other than [`Backends::name`] → `NotFound`; an adapter that
    /// needs provisioning and finds the team's store missing → `NotProvisioned` (with the
    /// operator command as remedy; an adapter without provisioning, like memory, serves every
    /// team); the backend is down → `Unavailable`/`Timeout`.
    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>>;

    /// The team's inbox named `name` — the inbox backend the team records. Errors as
    /// [`Backends::body_backend`].
    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>>;
}
