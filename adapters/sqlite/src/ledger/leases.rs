//! The SQLite ledger's leases.
//!
//! Every change runs in a write transaction (`BEGIN IMMEDIATE` on the one write connection), so
//! the overlap check and the grant are serialised with every other write of the store: what an
//! acquire read stays as read until it commits. The one server a SQLite store has (its
//! one-host rule) is the only one granting. Tokens come from `lease_fences`, bumped with the
//! grant.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Acquired, BusError, BusResult, FencingToken, Lease, LeaseClaim, LeaseEnd, LeaseEvent,
    LeaseEventKind, LeaseFilter, MAX_LEASE_LIST, RecordKind, RunId, TenantId, check_lease_change,
    decide_acquire, release_ending, validate_lease_path, validate_lease_ttl, validate_limit,
};
use crewbus_ports::Leases;
use crewbus_sql::leases::{
    LEASE_COLUMNS, LeaseRow, ending, event_text, events, grant_entries, leases, mode_name,
};
use sqlx::SqliteConnection;
use sqlx::sqlite::SqliteArguments;
use uuid::Uuid;

use super::SqliteLedger;
use crate::codec::{Ts, db_i64, from_db, marks};
use crate::journal::{append, run_state};

/// Which not-yet-ended leases [`end_leases`] ends.
pub(crate) enum Ending<'a> {
    /// Those a run took.
    Run(RunId),
    /// An agent's.
    Agent(Uuid),
    /// These ids, if they lapsed at or before the time given (the expiry sweep).
    Due(&'a [Uuid]),
}

type Query<'q> = sqlx::query::QueryAs<'q, sqlx::Sqlite, LeaseRow<Ts>, SqliteArguments<'q>>;

/// The leases of `tenant` selected by `filter` (an SQL condition on `l`, its parameters after the
/// tenant's bound by `bind`), by team then token.
async fn select(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    filter: &str,
    bind: impl for<'q> FnOnce(Query<'q>) -> Query<'q>,
) -> Result<Vec<LeaseRow<Ts>>, sqlx::Error> {
    let sql = format!(
        "SELECT {LEASE_COLUMNS} FROM leases l
         JOIN agents a ON a.id = l.agent_id
         JOIN teams t ON t.id = l.team_id AND t.tenant = ?
         WHERE {filter} ORDER BY l.team_id, l.token"
    );
    bind(sqlx::query_as(&sql).bind(tenant.as_str().to_owned()))
        .fetch_all(&mut *conn)
        .await
}

/// Writes a history entry of `lease` and bumps its `last_event`.
async fn event(
    conn: &mut SqliteConnection,
    lease: Uuid,
    at: DateTime<Utc>,
    kind: &LeaseEventKind,
) -> Result<(), sqlx::Error> {
    let seq: i64 = sqlx::query_scalar(
        "UPDATE leases SET last_event = last_event + 1 WHERE id = ? RETURNING last_event",
    )
    .bind(lease)
    .fetch_one(&mut *conn)
    .await?;
    insert_event(conn, lease, seq, at, kind).await
}

async fn insert_event(
    conn: &mut SqliteConnection,
    lease: Uuid,
    seq: i64,
    at: DateTime<Utc>,
    kind: &LeaseEventKind,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO lease_events (lease_id, seq, at, kind) VALUES (?, ?, ?, ?)")
        .bind(lease)
        .bind(seq)
        .bind(Ts(at))
        .bind(event_text(kind)?)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Appends `kind` to `run` when there is one and it is open.
async fn run_record(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    run: Option<RunId>,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<(), sqlx::Error> {
    let Some(run) = run else { return Ok(()) };
    if let Some(state) = run_state(conn, tenant, run).await?
        && !state.sealed
    {
        append(conn, run, at, kind).await?;
    }
    Ok(())
}

/// Ends `lease` (not ended) at `at` for `reason` (a lapsed one as expired), with its history
/// entry and run record. Returns it ended.
async fn finish(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    mut lease: Lease,
    reason: LeaseEnd,
    at: DateTime<Utc>,
) -> Result<Lease, sqlx::Error> {
    let end = ending(&lease, reason, at);
    sqlx::query("UPDATE leases SET ended_at = ?, end_reason = ? WHERE id = ?")
        .bind(Ts(end.at))
        .bind(end.reason.as_str())
        .bind(lease.id)
        .execute(&mut *conn)
        .await?;
    event(
        conn,
        lease.id,
        at,
        &LeaseEventKind::Ended { reason: end.reason },
    )
    .await?;
    let record = RecordKind::LeaseEnded {
        lease: lease.id,
        reason: end.reason,
    };
    run_record(conn, tenant, lease.run, at, &record).await?;
    lease.ended = Some(end);
    Ok(lease)
}

/// Ends the not-yet-ended leases `which` selects, in the caller's write transaction. Returns
/// them ended, by team then token.
pub(crate) async fn end_leases(
    conn: &mut SqliteConnection,
    tenant: &TenantId,
    which: Ending<'_>,
    reason: LeaseEnd,
    at: DateTime<Utc>,
) -> Result<Vec<Lease>, sqlx::Error> {
    let rows = match which {
        Ending::Run(run) => {
            select(conn, tenant, "l.ended_at IS NULL AND l.run_id = ?", |q| {
                q.bind(run.0)
            })
            .await?
        }
        Ending::Agent(agent) => {
            select(conn, tenant, "l.ended_at IS NULL AND l.agent_id = ?", |q| {
                q.bind(agent)
            })
            .await?
        }
        Ending::Due([]) => Vec::new(),
        Ending::Due(ids) => {
            let filter = format!(
                "l.ended_at IS NULL AND l.expires_at <= ? AND l.id IN ({})",
                marks(ids.len())
            );
            let ids = ids.to_vec();
            select(conn, tenant, &filter, move |q| {
                ids.into_iter().fold(q.bind(Ts(at)), |q, id| q.bind(id))
            })
            .await?
        }
    };
    let found = leases(rows).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let mut ended = Vec::with_capacity(found.len());
    for lease in found {
        ended.push(finish(conn, tenant, lease, reason, at).await?);
    }
    Ok(ended)
}

impl SqliteLedger {
    /// One lease of `team` (this tenant's). Errors: unknown → `NotFound`.
    async fn lease_row(
        &self,
        conn: &mut SqliteConnection,
        team: Uuid,
        lease: Uuid,
    ) -> BusResult<Lease> {
        let rows = select(conn, &self.tenant, "l.id = ? AND l.team_id = ?", |q| {
            q.bind(lease).bind(team)
        })
        .await
        .map_err(self.db("lease lookup"))?;
        leases(rows)?
            .pop()
            .ok_or_else(|| BusError::not_found(format!("lease {lease}")))
    }
}

#[async_trait]
impl Leases for SqliteLedger {
    async fn acquire(
        &self,
        team: Uuid,
        agent: Uuid,
        claim: &LeaseClaim,
        ttl: Duration,
        run: Option<RunId>,
        at: DateTime<Utc>,
    ) -> BusResult<Acquired> {
        validate_lease_ttl(ttl)?;
        let what = "acquire lease";
        let mut tx = self.begin(what).await?;
        let holder = self.agent_row(&mut tx, team, agent).await?;
        if holder.revoked() {
            return Err(BusError::forbidden(format!("agent {agent} is revoked")));
        }
        if self.check_run_owner(&mut tx, run, team, agent).await? {
            return Err(BusError::conflict(format!(
                "run {} is sealed",
                run.map(|r| r.to_string()).unwrap_or_default()
            )));
        }
        let live = select(
            &mut tx,
            &self.tenant,
            "l.team_id = ? AND l.ended_at IS NULL AND l.expires_at > ?",
            |q| q.bind(team).bind(Ts(at)),
        )
        .await
        .map_err(self.db(what))?;
        if let Err(conflicts) = decide_acquire(agent, claim, &leases(live)?, at)? {
            return Ok(Acquired::Conflict(conflicts));
        }
        let last: Option<i64> =
            sqlx::query_scalar("SELECT last_token FROM lease_fences WHERE team_id = ?")
                .bind(team)
                .fetch_optional(&mut *tx)
                .await
                .map_err(self.db(what))?;
        let token = FencingToken(from_db(last.unwrap_or(0)))
            .next()
            .ok_or_else(|| BusError::conflict("the team's fencing counter is exhausted"))?;
        let lease = Lease {
            id: Uuid::new_v4(),
            team,
            agent,
            agent_name: holder.name.clone(),
            claim: claim.clone(),
            token,
            run,
            acquired_at: at,
            expires_at: at + ttl,
            ended: None,
        };
        sqlx::query(
            "INSERT INTO lease_fences (team_id, last_token) VALUES (?1, ?2)
             ON CONFLICT (team_id) DO UPDATE SET last_token = ?2",
        )
        .bind(team)
        .bind(db_i64(token.0))
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        sqlx::query(
            "INSERT INTO leases (id, team_id, agent_id, pattern, mode, token, run_id,
                                 acquired_at, expires_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(lease.id)
        .bind(team)
        .bind(agent)
        .bind(claim.pattern.as_str())
        .bind(mode_name(claim.mode))
        .bind(db_i64(token.0))
        .bind(run.map(|r| r.0))
        .bind(Ts(at))
        .bind(Ts(lease.expires_at))
        .execute(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let (entry, record) = grant_entries(&lease);
        insert_event(&mut tx, lease.id, 1, at, &entry)
            .await
            .map_err(self.db(what))?;
        if let Some(run) = run {
            append(&mut tx, run, at, &record)
                .await
                .map_err(self.db(what))?;
        }
        self.commit(tx, what).await?;
        Ok(Acquired::Granted(lease))
    }

    async fn renew(
        &self,
        team: Uuid,
        agent: Uuid,
        lease: Uuid,
        ttl: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<Lease> {
        validate_lease_ttl(ttl)?;
        let what = "renew lease";
        let mut tx = self.begin(what).await?;
        let mut found = self.lease_row(&mut tx, team, lease).await?;
        check_lease_change(&found, Some(agent), true, at)?;
        found.expires_at = at + ttl;
        sqlx::query("UPDATE leases SET expires_at = ? WHERE id = ?")
            .bind(Ts(found.expires_at))
            .bind(lease)
            .execute(&mut *tx)
            .await
            .map_err(self.db(what))?;
        let expires_at = found.expires_at;
        event(&mut tx, lease, at, &LeaseEventKind::Renewed { expires_at })
            .await
            .map_err(self.db(what))?;
        let record = RecordKind::LeaseRenewed { lease, expires_at };
        run_record(&mut tx, &self.tenant, found.run, at, &record)
            .await
            .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(found)
    }

    async fn release(
        &self,
        team: Uuid,
        agent: Option<Uuid>,
        lease: Uuid,
        at: DateTime<Utc>,
    ) -> BusResult<Lease> {
        let what = "release lease";
        let mut tx = self.begin(what).await?;
        let found = self.lease_row(&mut tx, team, lease).await?;
        check_lease_change(&found, agent, false, at)?;
        let Some(end) = release_ending(&found, at) else {
            return Ok(found);
        };
        let ended = finish(&mut tx, &self.tenant, found, end.reason, at)
            .await
            .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(ended)
    }

    async fn leases(
        &self,
        team: Uuid,
        filter: &LeaseFilter,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<Lease>> {
        let what = "list leases";
        let mut tx = self.read(what).await?;
        self.require_team(&mut tx, team).await?;
        let rows = select(
            &mut tx,
            &self.tenant,
            "l.team_id = ? AND l.ended_at IS NULL AND l.expires_at > ?
             AND (?4 IS NULL OR l.agent_id = ?4)",
            |q| q.bind(team).bind(Ts(at)).bind(filter.agent),
        )
        .await
        .map_err(self.db(what))?;
        let mut out: Vec<Lease> = leases(rows)?
            .into_iter()
            .filter(|l| filter.admits(l))
            .collect();
        out.truncate(MAX_LEASE_LIST);
        Ok(out)
    }

    async fn lease(&self, team: Uuid, lease: Uuid) -> BusResult<(Lease, Vec<LeaseEvent>)> {
        let what = "lease history";
        // One snapshot for the lease and its history.
        let mut tx = self.read(what).await?;
        let found = self.lease_row(&mut tx, team, lease).await?;
        let rows: Vec<(i64, Ts, String)> = sqlx::query_as(
            "SELECT seq, at, kind FROM lease_events WHERE lease_id = ? ORDER BY seq",
        )
        .bind(lease)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
        Ok((found, events(lease, rows)?))
    }

    async fn check(
        &self,
        team: Uuid,
        agent: Uuid,
        token: FencingToken,
        path: &str,
        at: DateTime<Utc>,
    ) -> BusResult<bool> {
        validate_lease_path(path)?;
        let what = "check lease";
        let mut conn = self.read_connection(what).await?;
        let rows = select(
            &mut conn,
            &self.tenant,
            "l.team_id = ? AND l.agent_id = ? AND l.token = ?",
            |q| q.bind(team).bind(agent).bind(db_i64(token.0)),
        )
        .await
        .map_err(self.db(what))?;
        Ok(leases(rows)?
            .iter()
            .any(|l| l.fences(agent, token, path, at)))
    }

    async fn expire(&self, at: DateTime<Utc>, limit: usize) -> BusResult<Vec<Lease>> {
        validate_limit(limit)?;
        let what = "expire leases";
        let mut tx = self.begin(what).await?;
        let due: Vec<Uuid> = sqlx::query_scalar(
            "SELECT l.id FROM leases l JOIN teams t ON t.id = l.team_id AND t.tenant = ?
             WHERE l.ended_at IS NULL AND l.expires_at <= ?
             ORDER BY l.expires_at, l.id LIMIT ?",
        )
        .bind(self.tenant.as_str())
        .bind(Ts(at))
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(self.db(what))?;
        let mut ended = end_leases(
            &mut tx,
            &self.tenant,
            Ending::Due(&due),
            LeaseEnd::Expired,
            at,
        )
        .await
        .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        ended.sort_by_key(|l| (l.expires_at, l.id));
        Ok(ended)
    }
}
