//! `PostgresBackends`: the registry of per-team Postgres body backends and inboxes.

use std::sync::Arc;

use crewbus_ports::{Clock, TeamAdapters, TeamCache, TeamRegistry};
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
    teams: TeamCache<PostgresBackend, PostgresInbox>,
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
            teams: TeamCache::default(),
        }
    }

    /// The team's body backend as its concrete type (cached, like [`crewbus_ports::Backends::body_backend`]).
    pub fn team_bodies(&self, team: Uuid) -> Arc<PostgresBackend> {
        self.team(team).body
    }

    /// The team's inbox as its concrete type, for operator actions such as
    /// [`PostgresInbox::delete_consumer`] (cached, like [`crewbus_ports::Backends::inbox`]).
    pub fn team_inbox(&self, team: Uuid) -> Arc<PostgresInbox> {
        self.team(team).inbox
    }
}

impl TeamRegistry for PostgresBackends {
    type Body = PostgresBackend;
    type Inbox = PostgresInbox;
    const NAME: &'static str = SCHEME;

    fn team(&self, team: Uuid) -> TeamAdapters<PostgresBackend, PostgresInbox> {
        self.teams.get_or_make(team, || {
            let body =
                PostgresBackend::new(self.pool.clone(), team, self.clock.clone(), &self.settings);
            let inbox =
                PostgresInbox::new(self.pool.clone(), team, self.clock.clone(), &self.settings);
            (body, inbox)
        })
    }
}
