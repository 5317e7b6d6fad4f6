//! The ledger's retention section (`retention_due`, `mark_retained`), once for both SQL
//! ledgers over [`SqlRetention`]: the adapter's `ledger/retention.rs` re-exports these two
//! functions for `impl_ledger_by_sections!` and keeps the SQL that differs.

use std::future::Future;

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, RetentionTarget};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect};
use crate::driver::stmt;
use crate::ledger::LedgerHooks;
use crate::rows::retention_target;

/// What only the ledger knows of its retention.
pub trait SqlRetention: LedgerHooks {
    /// The read of what is due: per (team, backend) of the tenant `$1`, the count of stored,
    /// unretained messages stored before `$2`, ordered by team then backend (bytewise), at most
    /// `$3` rows of `(team_id, backend, count)`. Differs by the store's index hint and collation.
    const RETENTION_DUE: &'static str;

    /// Removes `messages` (just marked retained) from the search index, on the retention's
    /// transaction `conn` (Postgres one statement over an id array; SQLite one statement per
    /// message, so no list of host parameters grows with the batch).
    fn unindex(
        &self,
        conn: &mut Conn<Self::D>,
        messages: &[Uuid],
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// `Ledger::retention_due`: up to `limit` (team, backend) targets with messages stored before
/// `before`, one read.
pub async fn retention_due<L: SqlRetention>(
    ledger: &L,
    before: DateTime<Utc>,
    limit: usize,
) -> BusResult<Vec<RetentionTarget>> {
    let what = "retention due";
    let mut reader = ledger.reader(what).await?;
    let rows: Vec<(Uuid, String, i64)> = stmt::<L::D>(L::RETENTION_DUE)
        .arg(ledger.tenant().as_str().to_owned())
        .arg(L::D::time(before))
        .arg(limit as i64)
        .all(&mut reader)
        .await
        .map_err(ledger.db(what))?;
    Ok(rows.into_iter().map(retention_target).collect())
}

/// `Ledger::mark_retained`: marks `team`'s stored messages on `backend` stored before `before`
/// retained at `at` and removes them from the search index, in one transaction; returns how
/// many. Errors: `team` not of this tenant → `NotFound`.
pub async fn mark_retained<L: SqlRetention>(
    ledger: &L,
    team: Uuid,
    backend: &str,
    before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "mark retained";
    let mut tx = ledger.begin(what).await?;
    ledger.require_team(&mut tx, team).await?;
    let retained: Vec<(Uuid,)> = stmt::<L::D>(
        "UPDATE messages SET retained_at = $4
         WHERE team_id = $1 AND backend = $2 AND publication = 'stored'
           AND retained_at IS NULL AND stored_at < $3
         RETURNING id",
    )
    .arg(team)
    .arg(backend.to_owned())
    .arg(L::D::time(before))
    .arg(L::D::time(at))
    .all(&mut tx)
    .await
    .map_err(ledger.db(what))?;
    let retained: Vec<Uuid> = retained.into_iter().map(|(id,)| id).collect();
    // Retention removes what it removed from the search index too, in the same transaction and
    // in a statement of its own (an index write racing this one).
    ledger
        .unindex(&mut tx, &retained)
        .await
        .map_err(ledger.db(what))?;
    ledger.commit(tx, what).await?;
    Ok(retained.len() as u64)
}
