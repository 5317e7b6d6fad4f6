//! The registry of per-team body backends and inboxes.

use std::sync::Arc;

use async_trait::async_trait;
use crewbus_domain::BusResult;
use uuid::Uuid;

use crate::{Inbox, MessagingBackend};

/// Hands out the body backend and inbox of a team, by backend name.
///
/// Each adapter's registry answers for its own name ([`Backends::name`]); the composition root
/// combines them. A registry caches per-team adapters and shares one connection across teams.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Backends: Send + Sync {
    /// The backend name this registry answers for (`"memory"`, `"postgres"`, `"jetstream"`).
    fn name(&self) -> &'static str;

    /// The team's body backend named `name` — the name a conversation recorded when it was
    /// created. Errors: another name → `NotFound`; the team's streams are not provisioned →
    /// `NotProvisioned`; the backend is down → `Unavailable`/`Timeout`.
    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>>;

    /// The team's inbox named `name` — the inbox the team records. Errors as
    /// [`Backends::body_backend`].
    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>>;
}
