//! What the shared ledger functions need of an SQL ledger ([`LedgerHooks`]), and the lookups and
//! run checks every section makes, written once over it.

use std::future::Future;
use std::ops::DerefMut;

use crewbus_domain::{Agent, BusError, BusResult, RunId, TenantId};
use uuid::Uuid;

use crate::driver::{Conn, Dialect, stmt};
use crate::journal::lock_run;
use crate::rows::{AGENT_COLUMNS, AgentRow};

/// One tenant's ledger on an SQL store: its transactions, its reads and its error mapping.
///
/// Implemented by `PostgresLedger` (`Tx` a pool transaction, `Reader` a pool connection,
/// `Snapshot` a repeatable-read, read-only transaction) and `SqliteLedger` (`Tx` a write
/// transaction on the one write connection, `Reader` a read-pool connection, `Snapshot` a
/// read-pool transaction: one WAL snapshot).
pub trait LedgerHooks: Send + Sync {
    /// The store's dialect.
    type D: Dialect;
    /// A write transaction.
    type Tx: DerefMut<Target = Conn<Self::D>> + Send;
    /// A connection for reads that need no snapshot across statements.
    type Reader: DerefMut<Target = Conn<Self::D>> + Send;
    /// A read-only transaction: one snapshot for several statements.
    type Snapshot: DerefMut<Target = Conn<Self::D>> + Send;

    /// The tenant whose teams this ledger holds.
    fn tenant(&self) -> &TenantId;

    /// A driver error of the operation `what` as the bus's error (the adapter's mapping: unique
    /// violations → `Conflict`, unavailability → `Unavailable`, …).
    fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError;

    /// Begins a write transaction.
    fn begin(&self, what: &'static str) -> impl Future<Output = BusResult<Self::Tx>> + Send;

    /// Commits a write transaction.
    fn commit(
        &self,
        tx: Self::Tx,
        what: &'static str,
    ) -> impl Future<Output = BusResult<()>> + Send;

    /// A connection for reads.
    fn reader(&self, what: &'static str) -> impl Future<Output = BusResult<Self::Reader>> + Send;

    /// Begins a snapshot.
    fn snapshot(
        &self,
        what: &'static str,
    ) -> impl Future<Output = BusResult<Self::Snapshot>> + Send;

    /// Ends a snapshot taken with [`LedgerHooks::snapshot`].
    fn end_snapshot(
        &self,
        snapshot: Self::Snapshot,
        what: &'static str,
    ) -> impl Future<Output = BusResult<()>> + Send;

    /// `|e| self.bus_error(e, what)`.
    fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        move |e| self.bus_error(e, what)
    }

    /// `NotFound` unless `team` is a team of this tenant.
    fn require_team(
        &self,
        conn: &mut Conn<Self::D>,
        team: Uuid,
    ) -> impl Future<Output = BusResult<()>> + Send {
        async move {
            let found: Option<(i32,)> =
                stmt::<Self::D>("SELECT 1 FROM teams WHERE id = $1 AND tenant = $2")
                    .arg(team)
                    .arg(self.tenant().as_str().to_owned())
                    .optional(conn)
                    .await
                    .map_err(self.db("team lookup"))?;
            found
                .map(|_| ())
                .ok_or_else(|| BusError::not_found(format!("team {team}")))
        }
    }

    /// The agent `agent` of `team` (this tenant's). Errors: unknown → `NotFound`; a stored
    /// token hash or kind the domain refuses → its error.
    fn agent_row(
        &self,
        conn: &mut Conn<Self::D>,
        team: Uuid,
        agent: Uuid,
    ) -> impl Future<Output = BusResult<Agent>> + Send {
        async move {
            let sql = format!(
                "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
                 WHERE a.id = $1 AND a.team_id = $2 AND t.tenant = $3"
            );
            let row: Option<AgentRow<<Self::D as Dialect>::Time>> = stmt::<Self::D>(&sql)
                .arg(agent)
                .arg(team)
                .arg(self.tenant().as_str().to_owned())
                .optional(conn)
                .await
                .map_err(self.db("agent lookup"))?;
            row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
                .try_into()
        }
    }

    /// The run rules without the seal, for `agent` of `team`: unknown or of another team →
    /// `NotFound` (another team's run ids are never confirmed to exist), another agent's of
    /// this team → `Forbidden`. Returns whether it is sealed (`false` without a run). Locks the
    /// run row where writers lock rows ([`lock_run`]); inside a SQLite write transaction the
    /// answer holds until the commit anyway.
    fn check_run_owner(
        &self,
        conn: &mut Conn<Self::D>,
        run: Option<RunId>,
        team: Uuid,
        agent: Uuid,
    ) -> impl Future<Output = BusResult<bool>> + Send {
        async move {
            let Some(run) = run else { return Ok(false) };
            let state = lock_run::<Self::D>(conn, self.tenant(), run)
                .await
                .map_err(self.db("run lookup"))?
                .filter(|state| state.team == team)
                .ok_or_else(|| BusError::not_found(format!("run {run}")))?;
            if state.agent != agent {
                return Err(BusError::forbidden(format!(
                    "run {run} belongs to another agent"
                )));
            }
            Ok(state.sealed)
        }
    }
}
