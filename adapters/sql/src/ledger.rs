//! [`SqlLedger`]: one tenant's ledger on an SQL store of dialect `D`, with how its operations
//! hold the store (transactions, reads, snapshots: [`Dialect`]'s, errors mapped) and the lookups
//! and run checks every section makes.

use crewbus_domain::{Agent, BusError, BusResult, RunId, TenantId};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect, Held, Via};
use crate::driver::stmt;
use crate::journal::lock_run;
use crate::rows::{AGENT_COLUMNS, AgentRow};

/// One tenant's ledger on an SQL store of dialect `D` (`PgPool`, `SqlitePools`: `D::Store`).
/// Cheap to clone.
pub struct SqlLedger<D: Dialect> {
    store: D::Store,
    tenant: TenantId,
}

impl<D: Dialect> Clone for SqlLedger<D> {
    fn clone(&self) -> Self {
        SqlLedger {
            store: self.store.clone(),
            tenant: self.tenant.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlLedger<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlLedger")
            .field("store", &D::NAME)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlLedger<D> {
    /// The ledger of `tenant` over `store` (migrated by the driver crate's `migrate`).
    pub fn new(store: D::Store, tenant: TenantId) -> Self {
        SqlLedger { store, tenant }
    }

    /// The store this ledger runs on.
    pub fn store(&self) -> &D::Store {
        &self.store
    }

    /// The tenant whose teams this ledger holds.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// A driver error of the operation `what` as the bus's error ([`Dialect::bus_error`]).
    pub fn bus_error(&self, err: sqlx::Error, what: &str) -> BusError {
        D::bus_error(&self.store, err, what)
    }

    /// `|e| self.bus_error(e, what)`.
    pub fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        move |e| self.bus_error(e, what)
    }

    /// Begins a write transaction.
    pub async fn begin(&self, what: &'static str) -> BusResult<D::Tx> {
        D::begin(&self.store).await.map_err(self.db(what))
    }

    /// Commits a write transaction.
    pub async fn commit(&self, tx: D::Tx, what: &'static str) -> BusResult<()> {
        D::commit(tx).await.map_err(self.db(what))
    }

    /// A connection for reads.
    pub async fn reader(&self, what: &'static str) -> BusResult<D::Reader> {
        D::reader(&self.store).await.map_err(self.db(what))
    }

    /// Begins a snapshot.
    pub async fn snapshot(&self, what: &'static str) -> BusResult<D::Snapshot> {
        D::snapshot(&self.store).await.map_err(self.db(what))
    }

    /// Ends a snapshot taken with [`SqlLedger::snapshot`].
    pub async fn end_snapshot(&self, snapshot: D::Snapshot, what: &'static str) -> BusResult<()> {
        D::end_snapshot(snapshot).await.map_err(self.db(what))
    }

    /// A connection for one write ([`Dialect::write`]).
    pub async fn write(&self, what: &'static str) -> BusResult<D::Write> {
        D::write(&self.store).await.map_err(self.db(what))
    }

    /// Ends a write taken with [`SqlLedger::write`].
    pub async fn end_write(&self, write: D::Write, what: &'static str) -> BusResult<()> {
        D::end_write(write).await.map_err(self.db(what))
    }

    /// Takes hold of the store `via` for the operation `what`. Errors: the store's, unavailable.
    pub async fn hold(&self, via: Via, what: &'static str) -> BusResult<Held<D>> {
        Ok(match via {
            Via::Connection => Held::Connection(self.reader(what).await?),
            Via::Transaction => Held::Transaction(self.begin(what).await?),
            Via::Snapshot => Held::Snapshot(self.snapshot(what).await?),
        })
    }

    /// Lets go of what [`SqlLedger::hold`] took: commits a transaction, ends a snapshot, returns
    /// a connection. (Dropping a [`Held`] instead rolls a transaction back.)
    pub async fn release(&self, held: Held<D>, what: &'static str) -> BusResult<()> {
        match held {
            Held::Connection(_) => Ok(()),
            Held::Transaction(tx) => self.commit(tx, what).await,
            Held::Snapshot(s) => self.end_snapshot(s, what).await,
        }
    }

    /// `NotFound` unless `team` is a team of this tenant.
    pub async fn require_team(&self, conn: &mut Conn<D>, team: Uuid) -> BusResult<()> {
        let found: Option<(i32,)> = stmt::<D>("SELECT 1 FROM teams WHERE id = $1 AND tenant = $2")
            .arg(team)
            .arg(self.tenant.as_str().to_owned())
            .optional(conn)
            .await
            .map_err(self.db("team lookup"))?;
        found
            .map(|_| ())
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    /// The agent `agent` of `team` (this tenant's). Errors: unknown → `NotFound`; a stored
    /// token hash or kind the domain refuses → its error.
    pub async fn agent_row(&self, conn: &mut Conn<D>, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        let sql = format!(
            "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
             WHERE a.id = $1 AND a.team_id = $2 AND t.tenant = $3"
        );
        let row: Option<AgentRow<D::Time>> = stmt::<D>(&sql)
            .arg(agent)
            .arg(team)
            .arg(self.tenant.as_str().to_owned())
            .optional(conn)
            .await
            .map_err(self.db("agent lookup"))?;
        row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
            .try_into()
    }

    /// The run rules without the seal, for `agent` of `team`: unknown or of another team →
    /// `NotFound` (another team's run ids are never confirmed to exist), another agent's of
    /// this team → `Forbidden`. Returns whether it is sealed (`false` without a run). Locks the
    /// run row where writers lock rows ([`lock_run`]); inside a SQLite write transaction the
    /// answer holds until the commit anyway.
    pub async fn check_run_owner(
        &self,
        conn: &mut Conn<D>,
        run: Option<RunId>,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<bool> {
        let Some(run) = run else { return Ok(false) };
        let state = lock_run::<D>(conn, &self.tenant, run)
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
