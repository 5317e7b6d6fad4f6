//! The ledger's retention section (`retention_due`, `mark_retained`), once for every SQL
//! store, the statement that differs a [`PerDialect`] pair beside it.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, RetentionTarget};
use uuid::Uuid;

use crate::dialect::{Dialect, PerDialect};
use crate::driver::stmt;
use crate::ledger::SqlLedger;
use crate::rows::retention_target;

/// The read of what is due: per (team, backend) of the tenant `$1`, the count of stored,
/// unretained messages stored before `$2`, ordered by team then backend (bytewise), at most `$3`
/// rows of `(team_id, backend, count)`. SQLite reads through the retention index (`INDEXED BY
/// messages_retention`); Postgres orders backends bytewise (`COLLATE "C"`), as the other
/// ledgers order them.
const RETENTION_DUE: PerDialect<&str> = PerDialect {
    postgres: "SELECT m.team_id, m.backend, count(*) FROM messages m
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication = 'stored' AND m.retained_at IS NULL
           AND m.stored_at < $2
         GROUP BY m.team_id, m.backend
         ORDER BY m.team_id, m.backend COLLATE \"C\"
         LIMIT $3",
    sqlite: "SELECT m.team_id, m.backend, count(*)
         FROM messages m INDEXED BY messages_retention
         JOIN teams t ON t.id = m.team_id
         WHERE t.tenant = $1 AND m.publication = 'stored' AND m.retained_at IS NULL
           AND m.stored_at < $2
         GROUP BY m.team_id, m.backend
         ORDER BY m.team_id, m.backend
         LIMIT $3",
};

/// How many of the retained messages one statement removes from the search index: Postgres all
/// (one `= ANY` over an id array, see its `search`: an index write racing this one), SQLite one
/// (the rows' trigger removes their FTS5 rows; no list of host parameters grows with the batch).
const UNINDEX_BATCH: PerDialect<usize> = PerDialect {
    postgres: usize::MAX,
    sqlite: 1,
};

/// `Ledger::retention_due`: up to `limit` (team, backend) targets with messages stored before
/// `before`, one read.
pub async fn retention_due<D: Dialect>(
    ledger: &SqlLedger<D>,
    before: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<RetentionTarget>> {
    let what = "retention due";
    let mut reader = ledger.reader(what).await?;
    let rows: Vec<(Uuid, String, i64)> = stmt::<D>(RETENTION_DUE.of::<D>())
        .arg(ledger.tenant().as_str().to_owned())
        .arg(D::time(before))
        .arg(limit as i64)
        .all(&mut reader)
        .await
        .map_err(ledger.db(what))?;
    Ok(rows.into_iter().map(retention_target).collect())
}

/// `Ledger::mark_retained`: marks `team`'s stored messages on `backend` stored before `before`
/// retained at `at` and removes them from the search index, in one transaction; returns how
/// many. Errors: `team` not of this tenant → `NotFound`.
pub async fn mark_retained<D: Dialect>(
    ledger: &SqlLedger<D>,
    team: Uuid,
    backend: &str,
    before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "mark retained";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let retained: Vec<(Uuid,)> = stmt::<D>(
        "UPDATE messages SET retained_at = $4
         WHERE team_id = $1 AND backend = $2 AND publication = 'stored'
           AND retained_at IS NULL AND stored_at < $3
         RETURNING id",
    )
    .arg(team)
    .arg(backend.to_owned())
    .arg(D::time(before))
    .arg(D::time(at))
    .all(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let retained: Vec<Uuid> = retained.into_iter().map(|(id,)| id).collect();
    // Retention removes what it removed from the search index too, in the same transaction and
    // in a statement of its own (an index write racing this one).
    for batch in retained.chunks(UNINDEX_BATCH.of::<D>()) {
        let sql = format!(
            "DELETE FROM message_search WHERE {}",
            D::any_id("message_id", 1, batch.len())
        );
        D::bind_ids(stmt::<D>(&sql), batch)
            .run(&mut tx)
            .await
            .map_err(ledger.db(what))?;
    }
    ledger.commit(tx, what).await?;
    Ok(retained.len() as u64)
}
