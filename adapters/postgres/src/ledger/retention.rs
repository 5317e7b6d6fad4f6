//! The Postgres ledger's retention: what is due, and marking it retained.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, RetentionTarget};
use crewbus_sql::ledger::SqlLedger;
use crewbus_sql::rows::retention_target;
use uuid::Uuid;

use super::{PostgresLedger, db};

pub(super) async fn retention_due(
    ledger: &PostgresLedger,
    before: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<RetentionTarget>> {
    let rows: Vec<(Uuid, String, i64)> = sqlx::query_as(
        "SELECT m.team_id, m.backend, count(*) FROM messages m
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication = 'stored' AND m.retained_at IS NULL
           AND m.stored_at < $2
         GROUP BY m.team_id, m.backend
         ORDER BY m.team_id, m.backend COLLATE \"C\"
         LIMIT $3",
    )
    .bind(ledger.tenant.as_str())
    .bind(before)
    .bind(limit as i64)
    .fetch_all(&ledger.pool)
    .await
    .map_err(db("retention due"))?;
    Ok(rows.into_iter().map(retention_target).collect())
}

pub(super) async fn mark_retained(
    ledger: &PostgresLedger,
    team: Uuid,
    backend: &str,
    before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "mark retained";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let retained: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE messages SET retained_at = $4
         WHERE team_id = $1 AND backend = $2 AND publication = 'stored'
           AND retained_at IS NULL AND stored_at < $3
         RETURNING id",
    )
    .bind(team)
    .bind(backend)
    .bind(before)
    .bind(at)
    .fetch_all(&mut *tx)
    .await
    .map_err(db(what))?;
    // Retention removes what it removed from the search index too, in the same transaction and
    // in a statement of its own (see `search`: an index write racing this one).
    super::search::unindex(&mut tx, &retained)
        .await
        .map_err(db(what))?;
    PostgresLedger::commit(tx, what).await?;
    Ok(retained.len() as u64)
}
