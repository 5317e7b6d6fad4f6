//! `SqliteLedger`: the bus's authority in SQLite.
//!
//! One file per section of the port, as the trait lists them (the Postgres ledger's layout):
//! `directory` (teams, agents, conversations), `send`, `relay` (leasing outbox slots), `settle`,
//! `references` (inbox events), `delivery` (messages, hand-outs, confirmations, receipts),
//! `history`, `retention` and `counts`; table rows and their conversions are in `rows`. The
//! `impl Ledger` here only delegates; the lookups and run checks the sections share are here.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome,
    HandOutRequest, HistoryPage, InboxEvent, LeasedSlot, LedgerCounts, Message, Receipt,
    RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, Team, TenantId,
    TokenHash, WakeupTarget,
};
use crewbus_ports::Ledger;
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
mod references;
mod relay;
mod retention;
mod rows;
mod send;
mod settle;

/// One tenant's ledger in SQLite.
///
/// Every method is one transaction. Invariants are also enforced by the schema (unique
/// `(conversation, seq)` and `(conversation, request_id)`, one receipt per (message, recipient),
/// one inbox event per (kind, message, recipient), non-negative counters). SQLite has no row
/// locks: every method that writes runs in a write transaction begun with `BEGIN IMMEDIATE` on
/// the pools' single write connection, so write transactions are serialised as a whole and
/// everything a transaction reads stays as read until it commits. What Postgres gets from row
/// locks follows from that:
///
/// - **send** reads the conversation's `next_seq`, checks the sender, applies the repeat rule and
///   writes the message, its receipts and its outbox slot or inbox events in one write
///   transaction: `seq` is gap-free (a rolled-back send gives its number back) and two identical
///   concurrent requests create one message (the second one sees the first). For SQLite
///   conversations ([`Ledger::local_backend`] is `Some("sqlite")`) the body is written to the
///   table [`crate::SqliteBackend`] reads, and the inbox events enqueued, in the same
///   transaction; other backends get an outbox slot holding the body.
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

#[async_trait]
impl Ledger for SqliteLedger {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn local_backend(&self) -> Option<&'static str> {
        Some(SCHEME)
    }

    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team> {
        directory::create_team(self, name, body_backend, inbox, at).await
    }

    async fn team(&self, team: Uuid) -> BusResult<Team> {
        directory::team(self, team).await
    }

    async fn teams(&self) -> BusResult<Vec<Team>> {
        directory::teams(self).await
    }

    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        directory::set_team_backends(self, team, body_backend, inbox).await
    }

    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        directory::create_agent(self, team, name, token_hash, at).await
    }

    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        directory::agent(self, team, agent).await
    }

    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
        directory::agent_by_token(self, token_hash).await
    }

    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
        directory::agents(self, team).await
    }

    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent> {
        directory::revoke_agent(self, team, agent, at).await
    }

    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation> {
        directory::create_conversation(self, team, creator, title, members, at).await
    }

    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation> {
        directory::conversation(self, team, conversation).await
    }

    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
        directory::conversations(self, team).await
    }

    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>> {
        directory::conversations_for(self, team, agent).await
    }

    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
        send::send(self, request, at).await
    }

    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
        delivery::message(self, team, message).await
    }

    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
        delivery::messages(self, team, ids).await
    }

    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>> {
        relay::lease_slots(self, at, lease_for, limit).await
    }

    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>> {
        settle::settle(self, settlements, at).await
    }

    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        lease_for: Duration,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>> {
        references::lease_inbox_events(self, at, lease_for, limit).await
    }

    async fn mark_published(&self, events: &[Uuid], at: DateTime<Utc>) -> BusResult<u64> {
        references::mark_published(self, events, at).await
    }

    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        grace: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>> {
        delivery::hand_out(self, team, recipient, requests, grace, at).await
    }

    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>> {
        delivery::undelivered(self, team, recipient, stored_before, at, limit).await
    }

    async fn wakeable(
        &self,
        targets: &[WakeupTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>> {
        delivery::wakeable(self, targets, stored_before, at).await
    }

    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>> {
        delivery::confirm(self, team, recipient, deliveries, run, at).await
    }

    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt> {
        delivery::acknowledge(self, team, agent, message, run, at).await
    }

    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
        delivery::receipts(self, team, message).await
    }

    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage> {
        history::history(self, team, conversation, after_seq, limit).await
    }

    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>> {
        retention::retention_due(self, before, limit).await
    }

    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        retention::mark_retained(self, team, backend, before, at).await
    }

    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
        counts::counts(self, at).await
    }
}
