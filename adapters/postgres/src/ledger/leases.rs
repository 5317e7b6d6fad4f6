//! The Postgres ledger's leases.
//!
//! # Locks, in one order everywhere
//! Every change to a team's leases first locks the team's row of `lease_fences`
//! (`SELECT … FOR UPDATE`; an acquire inserts it on the team's first grant), then the runs it
//! writes records into, in id order (`lock_run`). So the overlap check and the grant are
//! serialised per team across every server on the database, lease rows need no locks of their
//! own (only fence holders change them), and nothing takes a run before a fence: a seal locks its
//! team's fence before its run (`crate::journal`). Tokens come from the fence's counter, bumped
//! with the grant.

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
use crewbus_sql::{db_i64, from_db};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{PostgresLedger, db};
use crate::journal::{append, lock_run};

/// Which not-yet-ended leases [`end_leases`] ends.
pub(crate) enum Ending<'a> {
    /// Those a run took.
    Run(RunId),
    /// An agent's.
    Agent(Uuid),
    /// These ids, if they lapsed at or before the time given (the expiry sweep).
    Due(&'a [Uuid]),
}

/// Locks `team`'s fence; `None` when the team never had a lease.
pub(crate) async fn lock_fence(
    conn: &mut PgConnection,
    team: Uuid,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT last_token FROM lease_fences WHERE team_id = $1 FOR UPDATE")
        .bind(team)
        .fetch_optional(&mut *conn)
        .await
}

/// Locks `team`'s fence, inserting it first on the team's first acquire.
pub(crate) async fn lock_or_create_fence(
    conn: &mut PgConnection,
    team: Uuid,
) -> Result<i64, sqlx::Error> {
    sqlx::query(
        "INSERT INTO lease_fences (team_id, last_token) VALUES ($1, 0) ON CONFLICT DO NOTHING",
    )
    .bind(team)
    .execute(&mut *conn)
    .await?;
    Ok(lock_fence(conn, team).await?.unwrap_or(0))
}

/// The leases of `tenant` selected by `filter` (an SQL condition on `l`, its parameters from
/// `$2` on bound by `bind`), by team then token.
async fn select(
    conn: &mut PgConnection,
    tenant: &TenantId,
    filter: &str,
    bind: impl FnOnce(
        sqlx::query::QueryAs<'_, sqlx::Postgres, LeaseRow, sqlx::postgres::PgArguments>,
    )
        -> sqlx::query::QueryAs<'_, sqlx::Postgres, LeaseRow, sqlx::postgres::PgArguments>,
) -> Result<Vec<LeaseRow>, sqlx::Error> {
    let sql = format!(
        "SELECT {LEASE_COLUMNS} FROM leases l
         JOIN agents a ON a.id = l.agent_id
         JOIN teams t ON t.id = l.team_id AND t.tenant = $1
         WHERE {filter} ORDER BY l.team_id, l.token"
    );
    bind(sqlx::query_as(&sql).bind(tenant.as_str()))
        .fetch_all(&mut *conn)
        .await
}

/// Writes a history entry of `lease` and bumps its `last_event`.
async fn event(
    conn: &mut PgConnection,
    lease: Uuid,
    at: DateTime<Utc>,
    kind: &LeaseEventKind,
) -> Result<(), sqlx::Error> {
    let seq: i32 = sqlx::query_scalar(
        "UPDATE leases SET last_event = last_event + 1 WHERE id = $1 RETURNING last_event",
    )
    .bind(lease)
    .fetch_one(&mut *conn)
    .await?;
    insert_event(conn, lease, seq, at, kind).await
}

async fn insert_event(
    conn: &mut PgConnection,
    lease: Uuid,
    seq: i32,
    at: DateTime<Utc>,
    kind: &LeaseEventKind,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO lease_events (lease_id, seq, at, kind) VALUES ($1, $2, $3, $4)")
        .bind(lease)
        .bind(seq)
        .bind(at)
        .bind(event_text(kind)?)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Appends `kind` to `run` when there is one and it is open (locked by the caller's fence
/// order: this locks it, in the same transaction).
async fn run_record(
    conn: &mut PgConnection,
    tenant: &TenantId,
    run: Option<RunId>,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<(), sqlx::Error> {
    let Some(run) = run else { return Ok(()) };
    if let Some(locked) = lock_run(conn, tenant, run).await?
        && !locked.sealed
    {
        append(conn, run, at, kind).await?;
    }
    Ok(())
}

/// Ends `lease` (not ended; its fence locked) at `at` for `reason` (a lapsed one as expired),
/// with its history entry and run record. Returns it ended.
async fn finish(
    conn: &mut PgConnection,
    tenant: &TenantId,
    mut lease: Lease,
    reason: LeaseEnd,
    at: DateTime<Utc>,
) -> Result<Lease, sqlx::Error> {
    let end = ending(&lease, reason, at);
    sqlx::query("UPDATE leases SET ended_at = $2, end_reason = $3 WHERE id = $1")
        .bind(lease.id)
        .bind(end.at)
        .bind(end.reason.as_str())
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

/// The not-yet-ended leases `which` selects.
async fn pick(
    conn: &mut PgConnection,
    tenant: &TenantId,
    which: &Ending<'_>,
    at: DateTime<Utc>,
) -> Result<Vec<LeaseRow>, sqlx::Error> {
    match which {
        Ending::Run(run) => {
            let run = run.0;
            select(conn, tenant, "l.ended_at IS NULL AND l.run_id = $2", |q| {
                q.bind(run)
            })
            .await
        }
        Ending::Agent(agent) => {
            let agent = *agent;
            select(
                conn,
                tenant,
                "l.ended_at IS NULL AND l.agent_id = $2",
                |q| q.bind(agent),
            )
            .await
        }
        Ending::Due(ids) => {
            let ids = ids.to_vec();
            select(
                conn,
                tenant,
                "l.ended_at IS NULL AND l.id = ANY($2) AND l.expires_at <= $3",
                |q| q.bind(ids).bind(at),
            )
            .await
        }
    }
}

/// Ends the not-yet-ended leases `which` selects, in the caller's transaction: locks their
/// teams' fences (team order), then their runs (id order), then ends each ([`finish`]).
/// Returns them ended, by team then token.
pub(crate) async fn end_leases(
    conn: &mut PgConnection,
    tenant: &TenantId,
    which: Ending<'_>,
    reason: LeaseEnd,
    at: DateTime<Utc>,
) -> Result<Vec<Lease>, sqlx::Error> {
    let parsed = |rows| leases(rows).map_err(|e| sqlx::Error::Decode(Box::new(e)));
    let first = parsed(pick(conn, tenant, &which, at).await?)?;
    if first.is_empty() {
        return Ok(Vec::new());
    }
    let mut teams: Vec<Uuid> = first.iter().map(|l| l.team).collect();
    teams.sort_unstable();
    teams.dedup();
    for team in &teams {
        lock_fence(conn, *team).await?;
    }
    // Under the fences nothing changes them any more: read them again.
    let found = parsed(pick(conn, tenant, &which, at).await?)?;
    let mut runs: Vec<RunId> = found.iter().filter_map(|l| l.run).collect();
    runs.sort_unstable_by_key(|r| r.0);
    runs.dedup();
    for run in runs {
        lock_run(conn, tenant, run).await?;
    }
    let mut ended = Vec::with_capacity(found.len());
    for lease in found {
        ended.push(finish(conn, tenant, lease, reason, at).await?);
    }
    Ok(ended)
}

impl PostgresLedger {
    /// One lease of `team` (this tenant's). Errors: unknown → `NotFound`.
    async fn lease_row(
        &self,
        conn: &mut PgConnection,
        team: Uuid,
        lease: Uuid,
    ) -> BusResult<Lease> {
        let rows = select(conn, &self.tenant, "l.id = $2 AND l.team_id = $3", |q| {
            q.bind(lease).bind(team)
        })
        .await
        .map_err(db("lease lookup"))?;
        leases(rows)?
            .pop()
            .ok_or_else(|| BusError::not_found(format!("lease {lease}")))
    }
}

#[async_trait]
impl Leases for PostgresLedger {
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
        self.agent_row(&mut tx, team, agent).await?;
        let last = lock_or_create_fence(&mut tx, team)
            .await
            .map_err(db(what))?;
        // Read again under the fence: a revocation takes it before it marks the agent revoked
        // (whether or not the agent holds leases), so this read sees a revocation committed
        // before the grant, and one after it ends this lease.
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
            "l.team_id = $2 AND l.ended_at IS NULL AND l.expires_at > $3",
            |q| q.bind(team).bind(at),
        )
        .await
        .map_err(db(what))?;
        if let Err(conflicts) = decide_acquire(agent, claim, &leases(live)?, at)? {
            return Ok(Acquired::Conflict(conflicts));
        }
        let token = FencingToken(from_db(last))
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
        sqlx::query("UPDATE lease_fences SET last_token = $2 WHERE team_id = $1")
            .bind(team)
            .bind(db_i64(token.0))
            .execute(&mut *tx)
            .await
            .map_err(db(what))?;
        sqlx::query(
            "INSERT INTO leases (id, team_id, agent_id, pattern, mode, token, run_id,
                                 acquired_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(lease.id)
        .bind(team)
        .bind(agent)
        .bind(claim.pattern.as_str())
        .bind(mode_name(claim.mode))
        .bind(db_i64(token.0))
        .bind(run.map(|r| r.0))
        .bind(at)
        .bind(lease.expires_at)
        .execute(&mut *tx)
        .await
        .map_err(db(what))?;
        let (entry, record) = grant_entries(&lease);
        insert_event(&mut tx, lease.id, 1, at, &entry)
            .await
            .map_err(db(what))?;
        if let Some(run) = run {
            append(&mut tx, run, at, &record).await.map_err(db(what))?;
        }
        Self::commit(tx, what).await?;
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
        self.lease_row(&mut tx, team, lease).await?;
        lock_fence(&mut tx, team).await.map_err(db(what))?;
        let mut found = self.lease_row(&mut tx, team, lease).await?;
        check_lease_change(&found, Some(agent), true, at)?;
        found.expires_at = at + ttl;
        sqlx::query("UPDATE leases SET expires_at = $2 WHERE id = $1")
            .bind(lease)
            .bind(found.expires_at)
            .execute(&mut *tx)
            .await
            .map_err(db(what))?;
        let expires_at = found.expires_at;
        event(&mut tx, lease, at, &LeaseEventKind::Renewed { expires_at })
            .await
            .map_err(db(what))?;
        let record = RecordKind::LeaseRenewed { lease, expires_at };
        run_record(&mut tx, &self.tenant, found.run, at, &record)
            .await
            .map_err(db(what))?;
        Self::commit(tx, what).await?;
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
        self.lease_row(&mut tx, team, lease).await?;
        lock_fence(&mut tx, team).await.map_err(db(what))?;
        let found = self.lease_row(&mut tx, team, lease).await?;
        check_lease_change(&found, agent, false, at)?;
        let Some(end) = release_ending(&found, at) else {
            return Ok(found);
        };
        let ended = finish(&mut tx, &self.tenant, found, end.reason, at)
            .await
            .map_err(db(what))?;
        Self::commit(tx, what).await?;
        Ok(ended)
    }

    async fn leases(
        &self,
        team: Uuid,
        filter: &LeaseFilter,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<Lease>> {
        let what = "list leases";
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        self.require_team(&mut conn, team).await?;
        let rows = select(
            &mut conn,
            &self.tenant,
            "l.team_id = $2 AND l.ended_at IS NULL AND l.expires_at > $3
             AND ($4::uuid IS NULL OR l.agent_id = $4)",
            |q| q.bind(team).bind(at).bind(filter.agent),
        )
        .await
        .map_err(db(what))?;
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
        let mut tx = self.begin(what).await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db(what))?;
        let found = self.lease_row(&mut tx, team, lease).await?;
        let rows: Vec<(i32, DateTime<Utc>, String)> = sqlx::query_as(
            "SELECT seq, at, kind FROM lease_events WHERE lease_id = $1 ORDER BY seq",
        )
        .bind(lease)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(what))?;
        Self::commit(tx, what).await?;
        let rows = rows
            .into_iter()
            .map(|(seq, at, kind)| (i64::from(seq), at, kind))
            .collect();
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
        let mut conn = self.pool.acquire().await.map_err(db(what))?;
        let rows = select(
            &mut conn,
            &self.tenant,
            "l.team_id = $2 AND l.agent_id = $3 AND l.token = $4",
            |q| q.bind(team).bind(agent).bind(db_i64(token.0)),
        )
        .await
        .map_err(db(what))?;
        Ok(leases(rows)?
            .iter()
            .any(|l| l.fences(agent, token, path, at)))
    }

    async fn expire(&self, at: DateTime<Utc>, limit: usize) -> BusResult<Vec<Lease>> {
        validate_limit(limit)?;
        let what = "expire leases";
        let mut tx = self.begin(what).await?;
        let due: Vec<Uuid> = sqlx::query_scalar(
            "SELECT l.id FROM leases l JOIN teams t ON t.id = l.team_id AND t.tenant = $1
             WHERE l.ended_at IS NULL AND l.expires_at <= $2
             ORDER BY l.expires_at, l.id LIMIT $3",
        )
        .bind(self.tenant.as_str())
        .bind(at)
        .bind(limit as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(db(what))?;
        let mut ended = end_leases(
            &mut tx,
            &self.tenant,
            Ending::Due(&due),
            LeaseEnd::Expired,
            at,
        )
        .await
        .map_err(db(what))?;
        Self::commit(tx, what).await?;
        ended.sort_by_key(|l| (l.expires_at, l.id));
        Ok(ended)
    }
}
