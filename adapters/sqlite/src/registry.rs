//! `SqliteBackends`: the registry of per-team SQLite body backends and inboxes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::connect::SqlitePools;
use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult};
use crewbus_ports::{Backends, Clock, Inbox, MessagingBackend};
use uuid::Uuid;

use crate::body::{SCHEME, SqliteBackend};
use crate::inbox::SqliteInbox;
use crate::settings::SqliteSettings;

/// Answers for the backend name `"sqlite"`: one [`SqliteBackend`] and one [`SqliteInbox`]
/// per team, created on first use and cached, all over one shared set of pools (thousands of teams never
/// open thousands of connections). Any other name → `NotFound`.
#[derive(Clone)]
pub struct SqliteBackends {
    pools: SqlitePools,
    clock: Arc<dyn Clock>,
    settings: SqliteSettings,
    teams: Arc<Mutex<HashMap<Uuid, TeamAdapters>>>,
}

#[derive(Clone)]
struct TeamAdapters {
    body: Arc<SqliteBackend>,
    inbox: Arc<SqliteInbox>,
}

impl std::fmt::Debug for SqliteBackends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackends")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl SqliteBackends {
    /// The registry over `pools` (migrated), timed by `clock`, configured by `settings`.
    pub fn new(pools: SqlitePools, clock: Arc<dyn Clock>, settings: SqliteSettings) -> Self {
        SqliteBackends {
            pools,
            clock,
            settings,
            teams: Arc::default(),
        }
    }

    /// The team's body backend as its concrete type (cached, like [`Backends::body_backend`]).
    pub fn team_bodies(&self, team: Uuid) -> Arc<SqliteBackend> {
        self.team(team).body
    }

    /// The team's inbox as its concrete type, for operator actions such as
    /// [`SqliteInbox::delete_consumer`] (cached, like [`Backends::inbox`]).
    pub fn team_inbox(&self, team: Uuid) -> Arc<SqliteInbox> {
        self.team(team).inbox
    }

    fn team(&self, team: Uuid) -> TeamAdapters {
        let mut teams = self.teams.lock().unwrap_or_else(|p| p.into_inner());
        teams
            .entry(team)
            .or_insert_with(|| TeamAdapters {
                body: Arc::new(SqliteBackend::new(
                    self.pools.clone(),
                    team,
                    self.clock.clone(),
                    &self.settings,
                )),
                inbox: Arc::new(SqliteInbox::new(
                    self.pools.clone(),
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
impl Backends for SqliteBackends {
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
