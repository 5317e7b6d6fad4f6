//! The Postgres ledger's retention: the section is [`crewbus_sql::retention`]; here is what
//! differs (the read of what is due, and the search index's removal).

use crewbus_sql::retention::SqlRetention;
use sqlx::PgConnection;
use uuid::Uuid;

use super::PostgresLedger;

pub(super) use crewbus_sql::retention::{mark_retained, retention_due};

impl SqlRetention for PostgresLedger {
    /// Backends ordered bytewise (`COLLATE "C"`), as the other ledgers order them.
    const RETENTION_DUE: &'static str = "SELECT m.team_id, m.backend, count(*) FROM messages m
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication = 'stored' AND m.retained_at IS NULL
           AND m.stored_at < $2
         GROUP BY m.team_id, m.backend
         ORDER BY m.team_id, m.backend COLLATE \"C\"
         LIMIT $3";

    /// One statement over the ids (see `search`: an index write racing this one).
    async fn unindex(&self, conn: &mut PgConnection, messages: &[Uuid]) -> Result<(), sqlx::Error> {
        super::search::unindex(conn, messages).await
    }
}
