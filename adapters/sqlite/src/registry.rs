//! `SqliteBackends`: the registry of per-team SQLite body backends and inboxes.

use std::sync::Arc;

use crate::connect::SqlitePools;
use crewbus_ports::{Clock, TeamAdapters, TeamCache, TeamRegistry};
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
    teams: TeamCache<SqliteBackend, SqliteInbox>,
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
            teams: TeamCache::default(),
        }
    }

    /// The team's body backend as its concrete type (cached, like [`crewbus_ports::Backends::body_backend`]).
    pub fn team_bodies(&self, team: Uuid) -> Arc<SqliteBackend> {
        self.team(team).body
    }

    /// The team's inbox as its concrete type, for operator actions such as
    /// [`SqliteInbox::delete_consumer`] (cached, like [`crewbus_ports::Backends::inbox`]).
    pub fn team_inbox(&self, team: Uuid) -> Arc<SqliteInbox> {
        self.team(team).inbox
    }
}

impl TeamRegistry for SqliteBackends {
    type Body = SqliteBackend;
    type Inbox = SqliteInbox;
    const NAME: &'static str = SCHEME;

    fn team(&self, team: Uuid) -> TeamAdapters<SqliteBackend, SqliteInbox> {
        self.teams.get_or_make(team, || {
            let body =
                SqliteBackend::new(self.pools.clone(), team, self.clock.clone(), &self.settings);
            let inbox =
                SqliteInbox::new(self.pools.clone(), team, self.clock.clone(), &self.settings);
            (body, inbox)
        })
    }
}
