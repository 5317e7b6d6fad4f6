//! The leases' rows for both SQL adapters: how a lease and its history entries are stored and
//! read back, and what ending one writes.
//!
//! Stored shape (`leases`): the claim as its pattern text and mode name (`exclusive`, `shared`),
//! the token as a `BIGINT`, the end as `ended_at` and `end_reason` (both `NULL` while it has not
//! ended); each history entry (`lease_events`) is `(lease_id, seq, at, kind)` with `kind` as
//! serde's JSON of [`LeaseEventKind`].
//!
//! The port is implemented here once for every SQL store (`impl<D: Dialect> Leases for
//! SqlLedger<D>`), over the statements below.
//!
//! # Locks
//! Where writers lock rows ([`Dialect::ROW_LOCKS`]: Postgres), every change to a team's leases
//! first locks the team's row of `lease_fences` (`SELECT … FOR UPDATE`; an acquire inserts it
//! on the team's first grant), then the runs it writes records into, in id order
//! ([`lock_run`]). So the overlap check and the grant are serialised per team across every
//! server on the database, lease rows need no locks of their own (only fence holders change
//! them), and nothing takes a run before a fence: a seal locks its team's fence before its run.
//! On SQLite every change runs in a write transaction (`BEGIN IMMEDIATE` on the one write
//! connection), so what it read stays as read until it commits, and the one server a SQLite
//! store has is the only one granting; the same statements run without the locks and without
//! reading again under them. Tokens come from the fence's counter, bumped with the grant.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    Acquired, BusError, BusResult, FencingToken, Lease, LeaseClaim, LeaseEnd, LeaseEnding,
    LeaseEvent, LeaseEventKind, LeaseFilter, LeaseMode, LeasePattern, MAX_LEASE_LIST, RecordKind,
    RunId, StoreError, TenantId, check_lease_change, decide_acquire, release_ending,
    validate_lease_path, validate_lease_ttl, validate_limit,
};
use crewbus_ports::Leases;
use uuid::Uuid;

use crate::counter::{db_i64, from_db};
use crate::dialect::{Conn, Dialect};
use crate::driver::{Stmt, stmt};
use crate::journal::{append, lock_run};
use crate::ledger::SqlLedger;

/// The columns of a [`LeaseRow`], read from `leases l JOIN agents a ON a.id = l.agent_id`.
pub const LEASE_COLUMNS: &str = "l.id, l.team_id, l.agent_id, a.name AS agent_name, l.pattern, \
     l.mode, l.token, l.run_id, l.acquired_at, l.expires_at, l.ended_at, l.end_reason";

/// A row of `leases` with its holder's name ([`LEASE_COLUMNS`]); `T` is how the adapter stores
/// a time.
#[derive(sqlx::FromRow)]
pub struct LeaseRow<T = DateTime<Utc>> {
    id: Uuid,
    team_id: Uuid,
    agent_id: Uuid,
    agent_name: String,
    pattern: String,
    mode: String,
    token: i64,
    run_id: Option<Uuid>,
    acquired_at: T,
    expires_at: T,
    ended_at: Option<T>,
    end_reason: Option<String>,
}

/// The stored name of a mode.
pub fn mode_name(mode: LeaseMode) -> &'static str {
    match mode {
        LeaseMode::Exclusive => "exclusive",
        LeaseMode::Shared => "shared",
    }
}

fn unreadable(id: Uuid, what: &str) -> BusError {
    StoreError::Backend {
        what: format!("lease {id} is unreadable: {what}"),
        source: None,
    }
    .into()
}

impl<T: Into<DateTime<Utc>>> LeaseRow<T> {
    /// The lease as stored. Errors: a pattern, mode or end that does not parse (never, for
    /// rows this crate's adapters wrote) → the store's `Backend` error.
    pub fn into_lease(self) -> Result<Lease, BusError> {
        let id = self.id;
        let pattern = LeasePattern::parse(&self.pattern).map_err(|_| unreadable(id, "pattern"))?;
        let mode = match self.mode.as_str() {
            "exclusive" => LeaseMode::Exclusive,
            "shared" => LeaseMode::Shared,
            _ => return Err(unreadable(id, "mode")),
        };
        let ended = match (self.ended_at, self.end_reason.as_deref()) {
            (None, None) => None,
            (Some(at), Some(reason)) => Some(LeaseEnding {
                at: at.into(),
                reason: LeaseEnd::from_name(reason).ok_or_else(|| unreadable(id, "end"))?,
            }),
            _ => return Err(unreadable(id, "end")),
        };
        Ok(Lease {
            id,
            team: self.team_id,
            agent: self.agent_id,
            agent_name: self.agent_name,
            claim: LeaseClaim { pattern, mode },
            token: FencingToken(from_db(self.token)),
            run: self.run_id.map(RunId),
            acquired_at: self.acquired_at.into(),
            expires_at: self.expires_at.into(),
            ended,
        })
    }
}

/// Every row as a lease ([`LeaseRow::into_lease`]).
pub fn leases<T: Into<DateTime<Utc>>>(rows: Vec<LeaseRow<T>>) -> Result<Vec<Lease>, BusError> {
    rows.into_iter().map(LeaseRow::into_lease).collect()
}

/// The stored text of a history entry's kind: serde's JSON.
pub fn event_text(kind: &LeaseEventKind) -> Result<String, sqlx::Error> {
    serde_json::to_string(kind).map_err(|e| sqlx::Error::Encode(Box::new(e)))
}

/// The history of `lease` from its rows `(seq, at, kind)`. Errors: a kind that does not parse →
/// the store's `Backend` error.
pub fn events<T: Into<DateTime<Utc>>>(
    lease: Uuid,
    rows: Vec<(i64, T, String)>,
) -> Result<Vec<LeaseEvent>, BusError> {
    rows.into_iter()
        .map(|(seq, at, kind)| {
            Ok(LeaseEvent {
                seq: from_db(seq),
                at: at.into(),
                kind: serde_json::from_str(&kind).map_err(|_| unreadable(lease, "history"))?,
            })
        })
        .collect()
}

/// The grant's history entry and, for a lease a run took, its run record.
pub fn grant_entries(lease: &Lease) -> (LeaseEventKind, RecordKind) {
    (
        LeaseEventKind::Granted {
            pattern: lease.claim.pattern.clone(),
            mode: lease.claim.mode,
            token: lease.token,
            expires_at: lease.expires_at,
        },
        RecordKind::LeaseGranted {
            lease: lease.id,
            pattern: lease.claim.pattern.clone(),
            mode: lease.claim.mode,
            token: lease.token,
            expires_at: lease.expires_at,
        },
    )
}

/// How ending a not-yet-ended `lease` at `at` for `reason` is stored: a lapsed lease ends as
/// expired at its expiry, a live one with `reason` at `at`.
pub fn ending(lease: &Lease, reason: LeaseEnd, at: DateTime<Utc>) -> LeaseEnding {
    if lease.is_live(at) {
        LeaseEnding { at, reason }
    } else {
        LeaseEnding {
            at: lease.expires_at,
            reason: LeaseEnd::Expired,
        }
    }
}

/// Which not-yet-ended leases [`end_leases`] ends.
pub enum Ending<'a> {
    /// Those a run took.
    Run(RunId),
    /// An agent's.
    Agent(Uuid),
    /// These ids, if they lapsed at or before the time given (the expiry sweep).
    Due(&'a [Uuid]),
}

/// Locks `team`'s fence where writers lock rows (reads it on SQLite); its last token, `None`
/// when the team never had a lease.
pub async fn lock_fence<D: Dialect>(
    conn: &mut Conn<D>,
    team: Uuid,
) -> Result<Option<i64>, sqlx::Error> {
    let sql = format!(
        "SELECT last_token FROM lease_fences WHERE team_id = $1{}",
        D::FOR_UPDATE
    );
    let last: Option<(i64,)> = stmt::<D>(&sql).arg(team).optional(conn).await?;
    Ok(last.map(|(t,)| t))
}

/// Inserts `team`'s fence (last token 0) unless it has one.
pub async fn create_fence<D: Dialect>(conn: &mut Conn<D>, team: Uuid) -> Result<(), sqlx::Error> {
    stmt::<D>(
        "INSERT INTO lease_fences (team_id, last_token) VALUES ($1, 0) ON CONFLICT DO NOTHING",
    )
    .arg(team)
    .run(conn)
    .await?;
    Ok(())
}

/// Locks `team`'s fence, inserting it first on the team's first acquire (Postgres: a revocation
/// takes it before it marks the agent revoked).
pub async fn lock_or_create_fence<D: Dialect>(
    conn: &mut Conn<D>,
    team: Uuid,
) -> Result<i64, sqlx::Error> {
    create_fence::<D>(conn, team).await?;
    Ok(lock_fence::<D>(conn, team).await?.unwrap_or(0))
}

/// The leases of `tenant` selected by `filter` (an SQL condition on `l`, its parameters from
/// `$2` on bound by `bind`), by team then token.
async fn select<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    filter: &str,
    bind: impl for<'q> FnOnce(Stmt<'q, D::Db>) -> Stmt<'q, D::Db>,
) -> Result<Vec<LeaseRow<D::Time>>, sqlx::Error> {
    let sql = format!(
        "SELECT {LEASE_COLUMNS} FROM leases l
         JOIN agents a ON a.id = l.agent_id
         JOIN teams t ON t.id = l.team_id AND t.tenant = $1
         WHERE {filter} ORDER BY l.team_id, l.token"
    );
    bind(stmt::<D>(&sql).arg(tenant.as_str().to_owned()))
        .all(conn)
        .await
}

/// Writes a history entry of `lease` and bumps its `last_event`.
async fn event<D: Dialect>(
    conn: &mut Conn<D>,
    lease: Uuid,
    at: DateTime<Utc>,
    kind: &LeaseEventKind,
) -> Result<(), sqlx::Error> {
    let (seq,): (i32,) = stmt::<D>(
        "UPDATE leases SET last_event = last_event + 1 WHERE id = $1 RETURNING last_event",
    )
    .arg(lease)
    .one(&mut *conn)
    .await?;
    insert_event::<D>(conn, lease, seq, at, kind).await
}

async fn insert_event<D: Dialect>(
    conn: &mut Conn<D>,
    lease: Uuid,
    seq: i32,
    at: DateTime<Utc>,
    kind: &LeaseEventKind,
) -> Result<(), sqlx::Error> {
    stmt::<D>("INSERT INTO lease_events (lease_id, seq, at, kind) VALUES ($1, $2, $3, $4)")
        .arg(lease)
        .arg(seq)
        .arg(D::time(at))
        .arg(event_text(kind)?)
        .run(conn)
        .await?;
    Ok(())
}

/// Appends `kind` to `run` when there is one and it is open (locked by the caller's fence
/// order where writers lock rows: this locks it, in the same transaction).
async fn run_record<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    run: Option<RunId>,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<(), sqlx::Error> {
    let Some(run) = run else { return Ok(()) };
    if let Some(state) = lock_run::<D>(conn, tenant, run).await?
        && !state.sealed
    {
        append::<D>(conn, run, at, kind).await?;
    }
    Ok(())
}

/// Ends `lease` (not ended; its fence locked) at `at` for `reason` (a lapsed one as expired),
/// with its history entry and run record. Returns it ended.
async fn finish<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    mut lease: Lease,
    reason: LeaseEnd,
    at: DateTime<Utc>,
) -> Result<Lease, sqlx::Error> {
    let end = ending(&lease, reason, at);
    stmt::<D>("UPDATE leases SET ended_at = $2, end_reason = $3 WHERE id = $1")
        .arg(lease.id)
        .arg(D::time(end.at))
        .arg(end.reason.as_str().to_owned())
        .run(&mut *conn)
        .await?;
    event::<D>(
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
    run_record::<D>(conn, tenant, lease.run, at, &record).await?;
    lease.ended = Some(end);
    Ok(lease)
}

/// The not-yet-ended leases `which` selects.
async fn pick<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    which: &Ending<'_>,
    at: DateTime<Utc>,
) -> Result<Vec<Lease>, sqlx::Error> {
    let rows = match *which {
        Ending::Run(run) => {
            select::<D>(conn, tenant, "l.ended_at IS NULL AND l.run_id = $2", |q| {
                q.arg(run.0)
            })
            .await?
        }
        Ending::Agent(agent) => {
            select::<D>(
                conn,
                tenant,
                "l.ended_at IS NULL AND l.agent_id = $2",
                |q| q.arg(agent),
            )
            .await?
        }
        Ending::Due([]) => Vec::new(),
        Ending::Due(ids) => {
            let filter = format!(
                "l.ended_at IS NULL AND l.expires_at <= $2 AND {}",
                D::any_id("l.id", 3, ids.len())
            );
            select::<D>(conn, tenant, &filter, |q| {
                D::bind_ids(q.arg(D::time(at)), ids)
            })
            .await?
        }
    };
    leases(rows).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

/// Ends the not-yet-ended leases `which` selects, in the caller's write transaction. Where
/// writers lock rows, first locks their teams' fences (team order), reads them again under the
/// fences, then locks their runs (id order). Then ends each (`finish`). Returns them ended,
/// by team then token.
pub async fn end_leases<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    which: Ending<'_>,
    reason: LeaseEnd,
    at: DateTime<Utc>,
) -> Result<Vec<Lease>, sqlx::Error> {
    let mut found = pick::<D>(conn, tenant, &which, at).await?;
    if D::ROW_LOCKS && !found.is_empty() {
        let mut teams: Vec<Uuid> = found.iter().map(|l| l.team).collect();
        teams.sort_unstable();
        teams.dedup();
        for team in &teams {
            lock_fence::<D>(conn, *team).await?;
        }
        // Under the fences nothing changes them any more: read them again.
        found = pick::<D>(conn, tenant, &which, at).await?;
        let mut runs: Vec<RunId> = found.iter().filter_map(|l| l.run).collect();
        runs.sort_unstable_by_key(|r| r.0);
        runs.dedup();
        for run in runs {
            lock_run::<D>(conn, tenant, run).await?;
        }
    }
    let mut ended = Vec::with_capacity(found.len());
    for lease in found {
        ended.push(finish::<D>(conn, tenant, lease, reason, at).await?);
    }
    Ok(ended)
}

impl<D: Dialect> SqlLedger<D> {
    /// One lease of `team` (this tenant's). Errors: unknown → `NotFound`.
    async fn lease_row(&self, conn: &mut Conn<D>, team: Uuid, lease: Uuid) -> BusResult<Lease> {
        let rows = select::<D>(conn, self.tenant(), "l.id = $2 AND l.team_id = $3", |q| {
            q.arg(lease).arg(team)
        })
        .await
        .map_err(self.db("lease lookup"))?;
        leases(rows)?
            .pop()
            .ok_or_else(|| BusError::not_found(format!("lease {lease}")))
    }

    /// Begins the change `what` of the lease `lease` of `team`: a write transaction, the lease
    /// in it (where writers lock rows, read once, its fence locked, and read again under it),
    /// checked by `check_lease_change` (`agent` its holder, or anyone when `None`).
    async fn begin_lease_change(
        &self,
        team: Uuid,
        agent: Option<Uuid>,
        lease: Uuid,
        renewing: bool,
        at: DateTime<Utc>,
        what: &'static str,
    ) -> BusResult<(D::Tx, Lease)> {
        let mut tx = self.begin(what).await?;
        if D::ROW_LOCKS {
            self.lease_row(&mut tx, team, lease).await?;
            lock_fence::<D>(&mut tx, team)
                .await
                .map_err(self.db(what))?;
        }
        let found = self.lease_row(&mut tx, team, lease).await?;
        check_lease_change(&found, agent, renewing, at)?;
        Ok((tx, found))
    }
}

/// `Leases` on every SQL store: the operations written once over the statements above.
#[async_trait]
impl<D: Dialect> Leases for SqlLedger<D> {
    /// Checks the holder (known, not revoked; its run its own and open) and the overlap with
    /// the team's live leases, then grants the next token of the team's fence.
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
        let last = if D::ROW_LOCKS {
            self.agent_row(&mut tx, team, agent).await?;
            lock_or_create_fence::<D>(&mut tx, team)
                .await
                .map_err(self.db(what))?
        } else {
            0
        };
        // Read (again) under the fence: a revocation takes it before it marks the agent revoked
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
        let live = select::<D>(
            &mut tx,
            self.tenant(),
            "l.team_id = $2 AND l.ended_at IS NULL AND l.expires_at > $3",
            |q| q.arg(team).arg(D::time(at)),
        )
        .await
        .map_err(self.db(what))?;
        if let Err(conflicts) = decide_acquire(agent, claim, &leases(live)?, at)? {
            return Ok(Acquired::Conflict(conflicts));
        }
        let last = if D::ROW_LOCKS {
            last
        } else {
            lock_fence::<D>(&mut tx, team)
                .await
                .map_err(self.db(what))?
                .unwrap_or(0)
        };
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
        stmt::<D>(
            "INSERT INTO lease_fences (team_id, last_token) VALUES ($1, $2)
             ON CONFLICT (team_id) DO UPDATE SET last_token = $2",
        )
        .arg(team)
        .arg(db_i64(token.0))
        .run(&mut tx)
        .await
        .map_err(self.db(what))?;
        stmt::<D>(
            "INSERT INTO leases (id, team_id, agent_id, pattern, mode, token, run_id,
                                 acquired_at, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .arg(lease.id)
        .arg(team)
        .arg(agent)
        .arg(claim.pattern.as_str().to_owned())
        .arg(mode_name(claim.mode).to_owned())
        .arg(db_i64(token.0))
        .arg(run.map(|r| r.0))
        .arg(D::time(at))
        .arg(D::time(lease.expires_at))
        .run(&mut tx)
        .await
        .map_err(self.db(what))?;
        let (entry, record) = grant_entries(&lease);
        insert_event::<D>(&mut tx, lease.id, 1, at, &entry)
            .await
            .map_err(self.db(what))?;
        if let Some(run) = run {
            append::<D>(&mut tx, run, at, &record)
                .await
                .map_err(self.db(what))?;
        }
        self.commit(tx, what).await?;
        Ok(Acquired::Granted(lease))
    }

    /// The holder's live lease expires `ttl` after `at`.
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
        let (mut tx, mut found) = self
            .begin_lease_change(team, Some(agent), lease, true, at, what)
            .await?;
        found.expires_at = at + ttl;
        stmt::<D>("UPDATE leases SET expires_at = $2 WHERE id = $1")
            .arg(lease)
            .arg(D::time(found.expires_at))
            .run(&mut tx)
            .await
            .map_err(self.db(what))?;
        let expires_at = found.expires_at;
        event::<D>(&mut tx, lease, at, &LeaseEventKind::Renewed { expires_at })
            .await
            .map_err(self.db(what))?;
        let record = RecordKind::LeaseRenewed { lease, expires_at };
        run_record::<D>(&mut tx, self.tenant(), found.run, at, &record)
            .await
            .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(found)
    }

    /// Ends the lease (by its holder, or anyone when `agent` is `None`); an ended one is
    /// returned as it is.
    async fn release(
        &self,
        team: Uuid,
        agent: Option<Uuid>,
        lease: Uuid,
        at: DateTime<Utc>,
    ) -> BusResult<Lease> {
        let what = "release lease";
        let (mut tx, found) = self
            .begin_lease_change(team, agent, lease, false, at, what)
            .await?;
        let Some(end) = release_ending(&found, at) else {
            return Ok(found);
        };
        let ended = finish::<D>(&mut tx, self.tenant(), found, end.reason, at)
            .await
            .map_err(self.db(what))?;
        self.commit(tx, what).await?;
        Ok(ended)
    }

    /// The team's live leases `filter` admits, by token, at most `MAX_LEASE_LIST`.
    async fn leases(
        &self,
        team: Uuid,
        filter: &LeaseFilter,
        at: DateTime<Utc>,
    ) -> BusResult<Vec<Lease>> {
        let what = "list leases";
        let mut conn = self.reader(what).await?;
        self.require_team(&mut conn, team).await?;
        let rows = select::<D>(
            &mut conn,
            self.tenant(),
            "l.team_id = $2 AND l.ended_at IS NULL AND l.expires_at > $3
             AND ($4 IS NULL OR l.agent_id = $4)",
            |q| q.arg(team).arg(D::time(at)).arg(filter.agent),
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

    /// One lease with its history, from one snapshot.
    async fn lease(&self, team: Uuid, lease: Uuid) -> BusResult<(Lease, Vec<LeaseEvent>)> {
        let what = "lease history";
        let mut snapshot = self.snapshot(what).await?;
        let found = self.lease_row(&mut snapshot, team, lease).await?;
        let rows: Vec<(i32, D::Time, String)> =
            stmt::<D>("SELECT seq, at, kind FROM lease_events WHERE lease_id = $1 ORDER BY seq")
                .arg(lease)
                .all(&mut snapshot)
                .await
                .map_err(self.db(what))?;
        self.end_snapshot(snapshot, what).await?;
        let rows = rows
            .into_iter()
            .map(|(seq, at, kind)| (i64::from(seq), at, kind))
            .collect();
        Ok((found, events(lease, rows)?))
    }

    /// Whether `agent` holds a live lease with `token` covering `path` at `at`.
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
        let mut conn = self.reader(what).await?;
        let rows = select::<D>(
            &mut conn,
            self.tenant(),
            "l.team_id = $2 AND l.agent_id = $3 AND l.token = $4",
            |q| q.arg(team).arg(agent).arg(db_i64(token.0)),
        )
        .await
        .map_err(self.db(what))?;
        Ok(leases(rows)?
            .iter()
            .any(|l| l.fences(agent, token, path, at)))
    }

    /// Ends at most `limit` of this tenant's leases lapsed at `at`, the earliest first; returns
    /// them by expiry then id.
    async fn expire(&self, at: DateTime<Utc>, limit: usize) -> BusResult<Vec<Lease>> {
        validate_limit(limit)?;
        let what = "expire leases";
        let mut tx = self.begin(what).await?;
        let due: Vec<(Uuid,)> = stmt::<D>(
            "SELECT l.id FROM leases l JOIN teams t ON t.id = l.team_id AND t.tenant = $1
             WHERE l.ended_at IS NULL AND l.expires_at <= $2
             ORDER BY l.expires_at, l.id LIMIT $3",
        )
        .arg(self.tenant().as_str().to_owned())
        .arg(D::time(at))
        .arg(limit as i64)
        .all(&mut tx)
        .await
        .map_err(self.db(what))?;
        let due: Vec<Uuid> = due.into_iter().map(|(id,)| id).collect();
        let mut ended = end_leases::<D>(
            &mut tx,
            self.tenant(),
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
