//! The registry of per-team body backends and inboxes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult};
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

/// The check every registry makes of the backend name it is asked for: `name` must be `served`
/// (its [`Backends::name`]). Errors: any other name → [`BusError::NotFound`].
pub fn check_backend_name(name: &str, served: &str) -> BusResult<()> {
    if name == served {
        Ok(())
    } else {
        Err(BusError::not_found(format!(
            "backend `{name}` (this registry serves `{served}`)"
        )))
    }
}

/// One team's body backend and inbox as a [`TeamRegistry`] caches them (clones share them).
#[derive(Debug)]
pub struct TeamAdapters<B, I> {
    /// The team's body backend.
    pub body: Arc<B>,
    /// The team's inbox.
    pub inbox: Arc<I>,
}

impl<B, I> Clone for TeamAdapters<B, I> {
    fn clone(&self) -> Self {
        TeamAdapters {
            body: Arc::clone(&self.body),
            inbox: Arc::clone(&self.inbox),
        }
    }
}

/// A registry's cache of per-team adapters: each team's are made on first use and handed to
/// every later caller, so all handles of one team share that team's state. Clones share the
/// cache.
#[derive(Debug)]
pub struct TeamCache<B, I> {
    teams: Arc<Mutex<HashMap<Uuid, TeamAdapters<B, I>>>>,
}

impl<B, I> Clone for TeamCache<B, I> {
    fn clone(&self) -> Self {
        TeamCache {
            teams: Arc::clone(&self.teams),
        }
    }
}

impl<B, I> Default for TeamCache<B, I> {
    fn default() -> Self {
        TeamCache {
            teams: Arc::default(),
        }
    }
}

impl<B, I> TeamCache<B, I> {
    /// `team`'s adapters, made by `make` (body backend, inbox) when the team is not cached yet.
    pub fn get_or_make(&self, team: Uuid, make: impl FnOnce() -> (B, I)) -> TeamAdapters<B, I> {
        let mut teams = self.teams.lock().unwrap_or_else(PoisonError::into_inner);
        teams
            .entry(team)
            .or_insert_with(|| {
                let (body, inbox) = make();
                TeamAdapters {
                    body: Arc::new(body),
                    inbox: Arc::new(inbox),
                }
            })
            .clone()
    }
}

/// A [`Backends`] registry that serves one backend name, [`TeamRegistry::NAME`], from per-team
/// adapters it caches (a [`TeamCache`]) and that need no provisioning. Implementing it
/// implements [`Backends`]: `body_backend` and `inbox` check the name with
/// [`check_backend_name`] and hand out the team's cached adapters.
pub trait TeamRegistry: Send + Sync {
    /// The team's body backend.
    type Body: MessagingBackend + 'static;
    /// The team's inbox.
    type Inbox: Inbox + 'static;
    /// The backend name this registry answers for ([`Backends::name`]).
    const NAME: &'static str;
    /// `team`'s adapters, made on first use and cached.
    fn team(&self, team: Uuid) -> TeamAdapters<Self::Body, Self::Inbox>;
}

#[async_trait]
impl<T: TeamRegistry> Backends for T {
    fn name(&self) -> &'static str {
        T::NAME
    }

    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>> {
        check_backend_name(name, T::NAME)?;
        Ok(self.team(team).body)
    }

    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>> {
        check_backend_name(name, T::NAME)?;
        Ok(self.team(team).inbox)
    }
}
