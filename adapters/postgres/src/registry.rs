//! `PostgresBackends`: the registry of per-team Postgres body backends and inboxes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult};
use crewbus_ports::{Backends, Clock, Inbox, MessagingBackend};
use sqlx::PgPool;
use uuid::Uuid;

use crate::body::{PostgresBackend, SCHEME};
use crate::inbox::PostgresInbox;
use crate::settings::PostgresSettings;

/// Answers for the backend name `"postgres"`: one [`PostgresBackend`] and one [`PostgresInbox`]
/// per team, created on first use and cached, all over one shared pool (thousands of teams never
/// open thousands of connections). Any other name → `NotFound`.
#[derive(Clone)]
pub struct PostgresBackends {
    pool: PgPool,
    clock: Arc<dyn Clock>,
    settings: PostgresSettings,
    teams: Arc<Mutex<HashMap<Uuid, TeamAdapters>>>,
}

#[derive(Clone)]
struct TeamAdapters {
    body: Arc<PostgresBackend>,
    inbox: Arc<PostgresInbox>,
}

impl std::fmt::Debug for PostgresBackends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackends")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PostgresBackends {
    /// The registry over `pool` (migrated), timed by `clock`, configured by `settings`.
    pub fn new(pool: PgPool, clock: Arc<dyn Clock>, settings: PostgresSettings) -> Self {
        PostgresBackends {
            pool,
            clock,
            settings,
            teams: Arc::default(),
        }
    }

    /// The team's body backend as its concrete type (cached, like [`Backends::body_backend`]).
    pub fn team_bodies(&self, team: Uuid) -> Arc<PostgresBackend> {
        self.team(team).body
    }

    /// The team's inbox as its concrete type, for operator actions such as
    /// [`PostgresInbox::delete_consumer`] (cached, like [`Backends::inbox`]).
    pub fn team_inbox(&self, team: Uuid) -> Arc<PostgresInbox> {
        self.team(team).inbox
    }

    fn team(&self, team: Uuid) -> TeamAdapters {
        let mut teams = self.teams.lock().unwrap_or_else(|p| p.into_inner());
        teams
            .entry(team)
            .or_insert_with(|| TeamAdapters {
                body: Arc::new(PostgresBackend::new(
                    self.pool.clone(),
                    team,
                    self.clock.clone(),
                    &self.settings,
                )),
                inbox: Arc::new(PostgresInbox::new(
                    self.pool.clone(),
                    team,
                    self.clock.clone(),
                    &self.settings,
                )),
            })
            .clone()
    }

    fn check_name(name: &str) -> BusResult<()> {
        if name == SCHEME {
            Ok(())
        } else {
            Err(BusError::not_found(format!(
                "backend `{name}` (this registry serves `{SCHEME}`)"
            )))
        }
    }
}

#[async_trait]
impl Backends for PostgresBackends {
    fn name(&self) -> &'static str {
        SCHEME
    }

    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>> {
        Self::check_name(name)?;
        Ok(self.team(team).body)
    }

    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>> {
        Self::check_name(name)?;
        Ok(self.team(team).inbox)
    }
}
