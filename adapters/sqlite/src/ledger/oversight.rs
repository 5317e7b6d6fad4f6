//! What only SQLite has of the oversight (the port is `crewbus_sql::oversight`'s, `impl
//! Oversight for SqlLedger<D>`): `touch_agents` is one write transaction of one update per
//! agent.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, WakeupTarget};
use crewbus_sql::ledger::SqlLedger;

use crate::codec::Ts;
use crate::dialect::Lite;

/// `Dialect::touch_agents` on SQLite: one write transaction, one update per agent.
pub(crate) async fn touch_agents(
    ledger: &SqlLedger<Lite>,
    seen: &[WakeupTarget],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "touch agents";
    let mut tx = ledger.begin(what).await?;
    let mut changed = 0;
    for target in seen {
        changed += sqlx::query(
            "UPDATE agents SET last_active_at = ?1
             WHERE id = ?2 AND team_id = ?3
               AND (last_active_at IS NULL OR last_active_at < ?1)
               AND team_id IN (SELECT id FROM teams WHERE tenant = ?4)",
        )
        .bind(Ts(at))
        .bind(target.agent)
        .bind(target.team)
        .bind(ledger.tenant().as_str())
        .execute(&mut *tx)
        .await
        .map_err(ledger.db(what))?
        .rows_affected();
    }
    ledger.commit(tx, what).await?;
    Ok(changed)
}
