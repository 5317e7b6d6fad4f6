//! What only Postgres has of the oversight (the port is `crewbus_sql::oversight`'s, `impl
//! Oversight for SqlLedger<D>`): `touch_agents` is one `UPDATE … FROM unnest` on a pool
//! connection.

use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, WakeupTarget};
use crewbus_sql::ledger::SqlLedger;
use uuid::Uuid;

use super::db;
use crate::dialect::Pg;

/// `Dialect::touch_agents` on Postgres: one statement on a pool connection (`unnest` of the
/// targets).
pub(crate) async fn touch_agents(
    ledger: &SqlLedger<Pg>,
    seen: &[WakeupTarget],
    at: DateTime<Utc>,
) -> BusResult<u64> {
    let (teams, agents): (Vec<Uuid>, Vec<Uuid>) = seen.iter().map(|t| (t.team, t.agent)).unzip();
    let changed = sqlx::query(
        "UPDATE agents a SET last_active_at = $3
         FROM unnest($1::uuid[], $2::uuid[]) AS u(team, agent), teams t
         WHERE a.id = u.agent AND a.team_id = u.team AND t.id = a.team_id AND t.tenant = $4
           AND (a.last_active_at IS NULL OR a.last_active_at < $3)",
    )
    .bind(&teams)
    .bind(&agents)
    .bind(at)
    .bind(ledger.tenant().as_str())
    .execute(ledger.store())
    .await
    .map_err(db("touch agents"))?;
    Ok(changed.rows_affected())
}
