//! What only Postgres has of the operators (`operators` and `operator_teams`; the port is
//! `crewbus_sql::operators`'s, `impl Operators for SqlLedger<D>`): an operator's teams are
//! aggregated into its row by the query (`array_agg`: [`OPERATOR_COLUMNS`]), and recorded with
//! it by one statement (`unnest`).

use crewbus_domain::{BusResult, Operator};
use crewbus_sql::driver::Stmt;
use sqlx::{PgConnection, Postgres};
use uuid::Uuid;

pub(crate) use super::rows::{OPERATOR_COLUMNS, OperatorRow};

/// `Dialect::operators_of` on Postgres: the rows hold their teams, no query.
pub(crate) fn operators_of(rows: Vec<OperatorRow>) -> BusResult<Vec<Operator>> {
    rows.into_iter().map(Operator::try_from).collect()
}

/// `Dialect::insert_operator` on Postgres: the teams go in the same statement, as one `uuid[]`
/// (`$7`).
pub(crate) async fn insert_operator(
    conn: &mut PgConnection,
    insert: Stmt<'_, Postgres>,
    teams: &[Uuid],
) -> Result<(), sqlx::Error> {
    insert.arg(teams.to_vec()).run(conn).await
}
