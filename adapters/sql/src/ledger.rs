//! [`SqlLedger`]: one tenant's ledger on an SQL store of dialect `D`, with how its operations
//! hold the store (transactions, reads, snapshots: [`Dialect`]'s, errors mapped) and the lookups
//! and run checks every section makes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Agent, BusError, BusResult, ConfirmOutcome, Conversation, DeliveryId, HandOutOutcome,
    HandOutRequest, HistoryPage, InboxEvent, InboxNews, LeasedSlot, LedgerCounts, Message, Receipt,
    Reported, RetentionTarget, RunId, SendRequest, Sent, SettleOutcome, Settlement, SweepTarget,
    Team, TenantId, TokenHash, WakeupTarget,
};
use crewbus_ports::LedgerSections;
use uuid::Uuid;

use crate::dialect::{Conn, Dialect, Held, Via};
use crate::driver::stmt;
use crate::journal::{SqlJournal, lock_run};
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

    /// The journal over the same store and tenant: the runs this ledger checks and writes the
    /// bus's records to.
    pub fn journal(&self) -> SqlJournal<D> {
        SqlJournal::new(self.store.clone(), self.tenant.clone())
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

/// The ledger port, once for every SQL store: the sections written over [`SqlLedger`]
/// (`directory`, `delivery`, `watch`, `history`, `retention`), and through the dialect what each
/// store writes its own way (send, the relay's leases and settle, the reference markers,
/// counts). The port's argument rules are [`LedgerSections`]' blanket `impl Ledger`.
#[async_trait]
impl<D: Dialect> LedgerSections for SqlLedger<D> {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn local_backend(&self) -> Option<&'static str> {
        Some(D::NAME)
    }

    async fn create_team(
        &self,
        name: &str,
        body_backend: &str,
        inbox: &str,
        at: DateTime<Utc>,
    ) -> BusResult<Team> {
        crate::directory::create_team(self, name, body_backend, inbox, at).await
    }

    async fn team(&self, team: Uuid) -> BusResult<Team> {
        crate::directory::team(self, team).await
    }

    async fn teams(&self) -> BusResult<Vec<Team>> {
        crate::directory::teams(self).await
    }

    async fn set_team_backends(
        &self,
        team: Uuid,
        body_backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        crate::directory::set_team_backends(self, team, body_backend, inbox).await
    }

    async fn create_agent(
        &self,
        team: Uuid,
        name: &str,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Agent> {
        crate::directory::create_agent(self, team, name, token_hash, at).await
    }

    async fn agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        crate::directory::agent(self, team, agent).await
    }

    async fn agent_by_token(&self, token_hash: &TokenHash) -> BusResult<Agent> {
        crate::directory::agent_by_token(self, token_hash).await
    }

    async fn agents(&self, team: Uuid) -> BusResult<Vec<Agent>> {
        crate::directory::agents(self, team).await
    }

    async fn revoke_agent(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> BusResult<Agent> {
        crate::directory::revoke_agent(self, team, agent, at).await
    }

    async fn create_conversation(
        &self,
        team: Uuid,
        creator: Uuid,
        title: &str,
        members: &[Uuid],
        at: DateTime<Utc>,
    ) -> BusResult<Conversation> {
        crate::directory::create_conversation(self, team, creator, title, members, at).await
    }

    async fn conversation(&self, team: Uuid, conversation: Uuid) -> BusResult<Conversation> {
        crate::directory::conversation(self, team, conversation).await
    }

    async fn conversations(&self, team: Uuid) -> BusResult<Vec<Conversation>> {
        crate::directory::conversations(self, team).await
    }

    async fn conversations_for(&self, team: Uuid, agent: Uuid) -> BusResult<Vec<Conversation>> {
        crate::directory::conversations_for(self, team, agent).await
    }

    async fn send(&self, request: SendRequest, at: DateTime<Utc>) -> BusResult<Sent> {
        crate::send::one(crate::send::send_batch(
            self,
            std::slice::from_ref(&request),
            at,
        ))
        .await
    }

    async fn send_batch(
        &self,
        requests: &[SendRequest],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<BusResult<Sent>>> {
        crate::send::send_batch(self, requests, at).await
    }

    async fn message(&self, team: Uuid, message: Uuid) -> BusResult<Message> {
        crate::delivery::message(self, team, message).await
    }

    async fn messages(&self, team: Uuid, ids: &[Uuid]) -> BusResult<Vec<Message>> {
        crate::delivery::messages(self, team, ids).await
    }

    async fn lease_slots(
        &self,
        at: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<LeasedSlot>> {
        crate::relay::lease_slots(self, at, until, limit).await
    }

    async fn settle(
        &self,
        settlements: &[Settlement],
        at: DateTime<Utc>,
    ) -> BusResult<Vec<SettleOutcome>> {
        crate::settle::settle(self, settlements, at).await
    }

    async fn lease_inbox_events(
        &self,
        at: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<InboxEvent>> {
        crate::references::lease_inbox_events(self, at, until, limit).await
    }

    async fn mark_references_published(
        &self,
        messages: &[Uuid],
        _at: DateTime<Utc>,
    ) -> BusResult<u64> {
        crate::references::mark_published(self, messages).await
    }

    async fn hand_out(
        &self,
        team: Uuid,
        recipient: Uuid,
        requests: &[HandOutRequest],
        held_until: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<HandOutOutcome>> {
        crate::delivery::hand_out(self, team, recipient, requests, held_until, at).await
    }

    async fn undelivered(
        &self,
        team: Uuid,
        recipient: Uuid,
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<Uuid>> {
        crate::delivery::undelivered(self, team, recipient, stored_before, at, limit).await
    }

    async fn wakeable(
        &self,
        targets: &[SweepTarget],
        stored_before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<WakeupTarget>> {
        crate::delivery::wakeable(self, targets, stored_before, at).await
    }

    async fn inbox_news(
        &self,
        team: Uuid,
        recipient: Uuid,
        reported: &Reported,
        at: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<InboxNews> {
        crate::watch::inbox_news(self, team, recipient, reported, at, limit).await
    }

    async fn confirm(
        &self,
        team: Uuid,
        recipient: Uuid,
        deliveries: &[DeliveryId],
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<ConfirmOutcome>> {
        crate::delivery::confirm(self, team, recipient, deliveries, run, at).await
    }

    async fn acknowledge(
        &self,
        team: Uuid,
        agent: Uuid,
        message: Uuid,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Receipt> {
        crate::delivery::acknowledge(self, team, agent, message, run, at).await
    }

    async fn receipts(&self, team: Uuid, message: Uuid) -> BusResult<Vec<Receipt>> {
        crate::delivery::receipts(self, team, message).await
    }

    async fn history(
        &self,
        team: Uuid,
        conversation: Uuid,
        after_seq: u64,
        limit: usize,
    ) -> BusResult<HistoryPage> {
        crate::history::history(self, team, conversation, after_seq, limit).await
    }

    async fn retention_due(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> BusResult<Vec<RetentionTarget>> {
        crate::retention::retention_due(self, before, limit).await
    }

    async fn mark_retained(
        &self,
        team: Uuid,
        backend: &str,
        before: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<u64> {
        crate::retention::mark_retained(self, team, backend, before, at).await
    }

    async fn counts(&self, at: DateTime<Utc>) -> BusResult<LedgerCounts> {
        crate::counts::counts(self, at).await
    }
}
