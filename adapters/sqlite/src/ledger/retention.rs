//! The SQLite ledger's retention: the section is [`crewbus_sql::retention`]; here is what
//! differs (the read of what is due, and the search index's removal).

use crewbus_sql::retention::SqlRetention;
use sqlx::SqliteConnection;
use uuid::Uuid;

use super::SqliteLedger;

pub(super) use crewbus_sql::retention::{mark_retained, retention_due};

impl SqlRetention for SqliteLedger {
    /// Read through the retention index (`INDEXED BY messages_retention`).
    const RETENTION_DUE: &'static str = "SELECT m.team_id, m.backend, count(*)
         FROM messages m INDEXED BY messages_retention
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = ? AND m.publication = 'stored' AND m.retained_at IS NULL
           AND m.stored_at < ?
         GROUP BY m.team_id, m.backend
         ORDER BY m.team_id, m.backend
         LIMIT ?";

    /// One statement per message (the rows' trigger removes their FTS5 rows), so no list of
    /// host parameters grows with the batch.
    async fn unindex(
        &self,
        conn: &mut SqliteConnection,
        messages: &[Uuid],
    ) -> Result<(), sqlx::Error> {
        for id in messages {
            sqlx::query("DELETE FROM message_search WHERE message_id = ?")
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}
