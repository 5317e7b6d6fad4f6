//! What only SQLite has of the operators (`operators` and `operator_teams`; the port is
//! `crewbus_sql::operators`'s, `impl Operators for SqlLedger<D>`): an operator's teams are read
//! by a second statement on the same read snapshot, and recorded one row per statement. Every
//! write is one `BEGIN IMMEDIATE` write transaction: write transactions are serialised, so what
//! a method checks (a token hash no agent holds, an unused code) holds until it commits, and no
//! lock is taken on a token hash.

use std::collections::HashMap;

use crewbus_domain::{BusResult, Operator};
use crewbus_sql::driver::Stmt;
use crewbus_sql::ledger::SqlLedger;
use sqlx::{Sqlite, SqliteConnection};
use uuid::Uuid;

pub(crate) use super::rows::OperatorRow;
use crate::codec::marks;
use crate::dialect::Lite;
pub(crate) use crewbus_sql::operators::OPERATOR_COLUMNS;

/// `Dialect::operators_of` on SQLite: reads the teams of the rows' scopes from
/// `operator_teams` (one statement).
pub(crate) async fn operators_of(
    ledger: &SqlLedger<Lite>,
    conn: &mut SqliteConnection,
    rows: Vec<OperatorRow>,
) -> BusResult<Vec<Operator>> {
    let mut teams: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    if !rows.is_empty() {
        let sql = format!(
            "SELECT operator_id, team_id FROM operator_teams WHERE operator_id IN ({})",
            marks(rows.len())
        );
        let mut query = sqlx::query_as::<_, (Uuid, Uuid)>(&sql);
        for row in &rows {
            query = query.bind(row.id);
        }
        for (operator, team) in query
            .fetch_all(&mut *conn)
            .await
            .map_err(ledger.db("operator teams"))?
        {
            teams.entry(operator).or_default().push(team);
        }
    }
    rows.into_iter()
        .map(|row| {
            let of = teams.remove(&row.id).unwrap_or_default();
            row.into_operator(of)
        })
        .collect()
}

/// `Dialect::insert_operator` on SQLite: the operator row, then one row of `operator_teams` per
/// team.
pub(crate) async fn insert_operator(
    conn: &mut SqliteConnection,
    insert: Stmt<'_, Sqlite>,
    id: Uuid,
    teams: &[Uuid],
) -> Result<(), sqlx::Error> {
    insert.run(&mut *conn).await?;
    for team in teams {
        sqlx::query("INSERT INTO operator_teams (operator_id, team_id) VALUES (?, ?)")
            .bind(id)
            .bind(*team)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}
