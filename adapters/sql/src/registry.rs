//! [`SqlBackends`]: the registry of per-team body backends and inboxes on an SQL store.

use std::sync::Arc;

use crewbus_ports::{Clock, TeamAdapters, TeamCache, TeamRegistry};
use uuid::Uuid;

use crate::body::SqlBodies;
use crate::dialect::Dialect;
use crate::inbox::SqlInbox;
use crate::settings::SqlSettings;

/// Answers for the store's backend name ([`Dialect::NAME`]: `"postgres"`, `"sqlite"`;
/// `crewbus_postgres::PostgresBackends`, `crewbus_sqlite::SqliteBackends`): one [`SqlBodies`] and
/// one [`SqlInbox`] per team, created on first use and cached, all over one shared store
/// (thousands of teams never open thousands of connections). Any other name → `NotFound`.
pub struct SqlBackends<D: Dialect> {
    store: D::Store,
    clock: Arc<dyn Clock>,
    settings: SqlSettings,
    teams: TeamCache<SqlBodies<D>, SqlInbox<D>>,
}

impl<D: Dialect> Clone for SqlBackends<D> {
    fn clone(&self) -> Self {
        SqlBackends {
            store: self.store.clone(),
            clock: self.clock.clone(),
            settings: self.settings.clone(),
            teams: self.teams.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlBackends<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBackends")
            .field("store", &D::NAME)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlBackends<D> {
    /// The registry over `store` (migrated), timed by `clock`, configured by `settings`.
    pub fn new(store: D::Store, clock: Arc<dyn Clock>, settings: SqlSettings) -> Self {
        SqlBackends {
            store,
            clock,
            settings,
            teams: TeamCache::default(),
        }
    }

    /// The team's body backend as its concrete type (cached, like
    /// [`crewbus_ports::Backends::body_backend`]).
    pub fn team_bodies(&self, team: Uuid) -> Arc<SqlBodies<D>> {
        self.team(team).body
    }

    /// The team's inbox as its concrete type, for operator actions such as
    /// [`SqlInbox::delete_consumer`] (cached, like [`crewbus_ports::Backends::inbox`]).
    pub fn team_inbox(&self, team: Uuid) -> Arc<SqlInbox<D>> {
        self.team(team).inbox
    }
}

impl<D: Dialect> TeamRegistry for SqlBackends<D> {
    type Body = SqlBodies<D>;
    type Inbox = SqlInbox<D>;
    const NAME: &'static str = D::NAME;

    fn team(&self, team: Uuid) -> TeamAdapters<SqlBodies<D>, SqlInbox<D>> {
        self.teams.get_or_make(team, || {
            let body = SqlBodies::new(self.store.clone(), team, self.clock.clone(), &self.settings);
            let inbox = SqlInbox::new(self.store.clone(), team, self.clock.clone(), &self.settings);
            (body, inbox)
        })
    }
}
