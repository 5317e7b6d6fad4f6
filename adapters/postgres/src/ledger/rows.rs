//! Rows of the ledger's tables: the ones both SQL adapters share (`crewbus_sql::rows`, times as
//! `timestamptz` → `DateTime<Utc>`), and the operator with the teams of its scope aggregated in
//! the query.

use crewbus_domain::{BusError, BusResult, Operator};
use uuid::Uuid;

pub(crate) use crewbus_sql::rows::{MESSAGE_COLUMNS, MessageRow};
pub(crate) use crewbus_sql::{db_i64, from_db};

pub(crate) const OPERATOR_COLUMNS: &str = "o.id, o.name, o.token_hash, o.all_teams, o.created_at, o.revoked_at, \
     COALESCE((SELECT array_agg(ot.team_id) FROM operator_teams ot \
               WHERE ot.operator_id = o.id), '{}') AS teams";

/// An operator with the teams of its scope (`teams`, aggregated in the query: ignored for every
/// team).
#[derive(sqlx::FromRow)]
pub struct OperatorRow {
    #[sqlx(flatten)]
    operator: crewbus_sql::rows::OperatorRow,
    teams: Vec<Uuid>,
}

impl TryFrom<OperatorRow> for Operator {
    type Error = BusError;
    fn try_from(r: OperatorRow) -> BusResult<Operator> {
        r.operator.into_operator(r.teams)
    }
}
