//! Postgres as a [`Dialect`] of the shared SQL code (`crewbus-sql`): times bound as
//! `timestamptz` (`DateTime<Utc>`), row locks, id lists as one `uuid[]` (`= ANY($n)`).

use chrono::{DateTime, Utc};
use crewbus_sql::driver::{Dialect, Stmt};
use sqlx::Postgres;
use uuid::Uuid;

/// The Postgres dialect.
pub struct Pg;

impl Dialect for Pg {
    type Db = Postgres;
    type Time = DateTime<Utc>;
    const ROW_LOCKS: bool = true;
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const FOR_NO_KEY_UPDATE: &'static str = " FOR NO KEY UPDATE";

    fn any_id(column: &str, first: usize, _n: usize) -> String {
        format!("{column} = ANY(${first})")
    }

    fn bind_ids<'q>(q: Stmt<'q, Postgres>, ids: &[Uuid]) -> Stmt<'q, Postgres> {
        q.arg(ids.to_vec())
    }

    fn rows_affected(done: &sqlx::postgres::PgQueryResult) -> u64 {
        done.rows_affected()
    }
}
