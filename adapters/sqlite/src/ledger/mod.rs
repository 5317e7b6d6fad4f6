//! `SqliteLedger`: the bus's authority in SQLite.
//!
//! One file per section of the port, as the trait lists them (the Postgres ledger's layout):
//! `directory` (teams, agents, conversations), `send`, `relay` (leasing outbox slots), `settle`,
//! `references` (inbox events), `delivery` (messages, hand-outs, confirmations, receipts),
//! `history`, `retention` and `counts`; table rows and their conversions are in `rows`. The
//! `impl Ledger` is [`crewbus_ports::impl_ledger_by_sections!`]: it applies the port's argument
//! rules and delegates to the sections. The same store holds the operators (`operators`:
//! `impl Operators`) and answers the console's reads (`oversight`: `impl Oversight`). The
//! lookups and run checks the sections share are here.

use crewbus_domain::{Agent, BusError, BusResult, Message, RunId, Team, TenantId};
use sqlx::SqliteConnection;
use uuid::Uuid;

use crate::body::SCHEME;
use crate::connect::{SqlitePools, WriteTx};
use crate::journal::{SqliteJournal, run_state};
use rows::{AGENT_COLUMNS, AgentRow, MESSAGE_COLUMNS, MessageRow, TEAM_COLUMNS, TeamRow};

mod counts;
mod delivery;
mod directory;
mod history;
pub(crate) mod leases;
mod operators;
mod oversight;
mod references;
mod relay;
mod retention;
mod rows;
mod search;
mod send;
mod send_allowance;
mod settle;

/// One tenant's ledger in SQLite.
///
/// Every method is one transaction. Invariants are also enforced by the schema (unique
/// `(conversation, seq)` and `(conversation, sender, request_id)`, one receipt per (message,
/// recipient), one inbox event per (kind, message, recipient), non-negative counters). SQLite has no row
/// locks: every method that writes runs in a write transaction begun with `BEGIN IMMEDIATE` on
/// the pools' single write connection, so write transactions are serialised as a whole and
/// everything a transaction reads stays as read until it commits. What Postgres gets from row
/// locks follows from that:
///
/// - **send** reads the conversation's `next_seq`, checks the sender, applies the repeat rule and
///   writes the message, its receipts and its outbox slot or inbox events in one write
///   transaction: `seq` is gap-free (a rolled-back send gives its number back) and two identical
///   concurrent requests create one message (the second one sees the first). For SQLite
///   conversations ([`Ledger::local_backend`](crewbus_ports::Ledger::local_backend) is
///   `Some("sqlite")`) the body is written to the table [`crate::SqliteBackend`] reads, and the
///   inbox events enqueued, in the same transaction; other backends get an outbox slot holding
///   the body.
/// - **lease_slots** / **lease_inbox_events** are `UPDATE … WHERE id IN (SELECT … LIMIT ?)
///   RETURNING` (no `SKIP LOCKED`: a second caller waits for the write connection and then
///   sees the first one's leases), scanning every due row each time (no cursor), so a slot whose
///   send committed after a later one is never skipped. Settlements are fenced by `generation`
///   and `leased_until`, as on Postgres.
/// - **hand_out** / **confirm** read the facts and write the decision of the domain's delivery
///   rules (`plan_hand_outs`, `decide_confirms`, the ones every ledger applies) in one write
///   transaction.
/// - Reads that need no write (`team`, `messages`, `history`, `undelivered`, `counts`, …) use the
///   read pool; WAL readers see the last commit before they start and never block the writer.
/// - Time is always the caller's `at`, bound as a parameter, stored as microseconds since the
///   epoch: times read back are the caller's truncated to µs.
#[derive(Clone)]
pub struct SqliteLedger {
    pools: SqlitePools,
    tenant: TenantId,
}

impl std::fmt::Debug for SqliteLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteLedger")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl SqliteLedger {
    /// The ledger of `tenant` over `pools` (migrated: [`crate::migrate`]).
    pub fn new(pools: SqlitePools, tenant: TenantId) -> Self {
        SqliteLedger { pools, tenant }
    }

    /// The journal over the same store and tenant: the runs this ledger checks and writes the
    /// bus's records to.
    pub fn journal(&self) -> SqliteJournal {
        SqliteJournal::new(self.pools.clone(), self.tenant.clone())
    }

    /// The pools this ledger runs on.
    pub fn pools(&self) -> &SqlitePools {
        &self.pools
    }

    /// `|e| bus_error(e, what)`, counting busy errors.
    fn db<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> BusError + 'a {
        self.pools.db(what)
    }

    async fn begin(&self, what: &str) -> BusResult<WriteTx> {
        self.pools.begin(what).await
    }

    async fn commit(&self, tx: WriteTx, what: &str) -> BusResult<()> {
        tx.commit().await.map_err(self.db(what))
    }

    /// A read-only transaction on the read pool: one snapshot for several statements.
    async fn read(&self, what: &str) -> BusResult<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pools.reader().begin().await.map_err(self.db(what))
    }

    /// A connection of the read pool, for reads that need no snapshot across statements.
    async fn read_connection(
        &self,
        what: &str,
    ) -> BusResult<sqlx::pool::PoolConnection<sqlx::Sqlite>> {
        self.pools.reader().acquire().await.map_err(self.db(what))
    }

    /// `NotFound` unless `team` is a team of this tenant.
    async fn require_team(&self, conn: &mut SqliteConnection, team: Uuid) -> BusResult<()> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM teams WHERE id = ? AND tenant = ?")
                .bind(team)
                .bind(self.tenant.as_str())
                .fetch_optional(&mut *conn)
                .await
                .map_err(self.db("team lookup"))?;
        found
            .map(|_| ())
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    async fn team_row(&self, conn: &mut SqliteConnection, team: Uuid) -> BusResult<Team> {
        let row: Option<TeamRow> = sqlx::query_as(&format!(
            "SELECT {TEAM_COLUMNS} FROM teams WHERE id = ? AND tenant = ?"
        ))
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(self.db("team lookup"))?;
        row.map(Team::from)
            .ok_or_else(|| BusError::not_found(format!("team {team}")))
    }

    async fn agent_row(
        &self,
        conn: &mut SqliteConnection,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<Agent> {
        let row: Option<AgentRow> = sqlx::query_as(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents a JOIN teams t ON t.id = a.team_id
             WHERE a.id = ? AND a.team_id = ? AND t.tenant = ?"
        ))
        .bind(agent)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(self.db("agent lookup"))?;
        row.ok_or_else(|| BusError::not_found(format!("agent {agent}")))?
            .try_into()
    }

    async fn message_row(
        &self,
        conn: &mut SqliteConnection,
        team: Uuid,
        message: Uuid,
    ) -> BusResult<Message> {
        let row: Option<MessageRow> = sqlx::query_as(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m JOIN teams t ON t.id = m.team_id
             WHERE m.id = ? AND m.team_id = ? AND t.tenant = ?"
        ))
        .bind(message)
        .bind(team)
        .bind(self.tenant.as_str())
        .fetch_optional(&mut *conn)
        .await
        .map_err(self.db("message lookup"))?;
        row.ok_or_else(|| BusError::not_found(format!("message {message}")))?
            .try_into()
    }

    /// The run rules without the seal, for `agent` of `team`: unknown or of another team →
    /// `NotFound` (another team's run ids are never confirmed to exist), another agent's of
    /// this team → `Forbidden`. Returns whether it is sealed (`false` without a run); inside a
    /// write transaction the answer holds until the commit.
    async fn check_run_owner(
        &self,
        conn: &mut SqliteConnection,
        run: Option<RunId>,
        team: Uuid,
        agent: Uuid,
    ) -> BusResult<bool> {
        let Some(run) = run else { return Ok(false) };
        let state = run_state(conn, &self.tenant, run)
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

crewbus_ports::impl_ledger_by_sections! {
    SqliteLedger { tenant: tenant, local_backend: Some(SCHEME), sections: async }
}
