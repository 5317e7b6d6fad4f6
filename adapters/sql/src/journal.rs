//! The journal's rows and records, for both SQL adapters: how a record is stored (`kind` as
//! serde's JSON text, the seal written on the run row) and how runs and records are read back;
//! and the port, implemented once for both stores: `impl<D: Dialect> Journal for SqlJournal<D>`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    LeaseEnd, Record, RecordKind, Run, RunId, RunOutcome, Seq, StoreError, TenantId,
    check_appendable, validate_journal_limit, validate_note_text,
};
use uuid::Uuid;

use crate::counter::{db_i64, from_db};
use crewbus_ports::Journal;

use crate::dialect::{Conn, Dialect, PerDialect};
use crate::driver::stmt;
use crate::leases::{Ending, end_leases, lock_fence};

/// The columns of a [`RunRow`], read from `runs`.
pub const RUN_COLUMNS: &str = "id, team_id, agent_id, admitted_at, last_seq, sealed_at, outcome";

/// A row of `runs` ([`RUN_COLUMNS`]); `T` is how the adapter stores a time.
#[derive(sqlx::FromRow)]
pub struct RunRow<T = DateTime<Utc>> {
    id: Uuid,
    team_id: Uuid,
    agent_id: Uuid,
    admitted_at: T,
    last_seq: i64,
    sealed_at: Option<T>,
    outcome: Option<String>,
}

impl<T: Into<DateTime<Utc>>> From<RunRow<T>> for Run {
    /// The run as stored (`Run::from_stored`: a seal needs both its time and a known outcome).
    fn from(r: RunRow<T>) -> Run {
        Run::from_stored(
            RunId(r.id),
            r.team_id,
            r.agent_id,
            r.admitted_at.into(),
            Seq(from_db(r.last_seq)),
            r.sealed_at.map(Into::into),
            r.outcome.as_deref(),
        )
    }
}

/// What appending `kind` at `at` writes on its run row: the seal's time and outcome name for a
/// `RunSealed` record, `(None, None)` (the row's values kept) for any other.
pub fn sealing(
    kind: &RecordKind,
    at: DateTime<Utc>,
) -> (Option<DateTime<Utc>>, Option<&'static str>) {
    match kind {
        RecordKind::RunSealed { outcome, .. } => (Some(at), Some(outcome.as_str())),
        _ => (None, None),
    }
}

/// The stored text of a record's kind: serde's JSON (a note's U+0000 is escaped by JSON). A kind
/// that does not serialise (never, for the domain's kinds) is an encode error.
pub fn kind_text(kind: &RecordKind) -> Result<String, sqlx::Error> {
    serde_json::to_string(kind).map_err(|e| sqlx::Error::Encode(Box::new(e)))
}

/// A row of a run's records as [`records`] reads it: `(seq, at, kind)`, all `NULL` for a run
/// with none left; `T` is how the adapter stores a time.
pub type RecordRow<T> = (Option<i64>, Option<T>, Option<String>);

/// The records of `run` from the rows of one statement that joins the run to its records from
/// the requested seq on: `(seq, at, kind)`, all `NULL` for a run with none left. No row at all →
/// the run is unknown (`StoreError::NotFound`); a stored kind that does not parse →
/// `StoreError::Backend`.
pub fn records<T: Into<DateTime<Utc>>>(
    run: RunId,
    rows: Vec<RecordRow<T>>,
) -> Result<Vec<Record>, StoreError> {
    if rows.is_empty() {
        return Err(StoreError::not_found(format!("run {run}")));
    }
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        let (Some(seq), Some(at), Some(kind)) = row else {
            continue;
        };
        records.push(Record::from_stored(
            run,
            Seq(from_db(seq)),
            at.into(),
            &kind,
        )?);
    }
    Ok(records)
}

/// A run row as read for an append: locked on Postgres, read inside the write transaction on
/// SQLite (so it cannot change before the append either way).
pub struct RunState {
    /// The run's team.
    pub team: Uuid,
    /// The agent the run is of.
    pub agent: Uuid,
    /// Whether it is sealed.
    pub sealed: bool,
}

/// Reads `run` of `tenant` for an append, locking its row where writers lock rows
/// ([`Dialect::FOR_NO_KEY_UPDATE`]); `None` when it does not exist.
pub async fn lock_run<D: Dialect>(
    conn: &mut Conn<D>,
    tenant: &TenantId,
    run: RunId,
) -> Result<Option<RunState>, sqlx::Error> {
    let sql = format!(
        "SELECT team_id, agent_id, sealed_at IS NOT NULL FROM runs
         WHERE id = $1 AND tenant = $2{}",
        D::FOR_NO_KEY_UPDATE
    );
    let row: Option<(Uuid, Uuid, bool)> = stmt::<D>(&sql)
        .arg(run.0)
        .arg(tenant.as_str().to_owned())
        .optional(conn)
        .await?;
    Ok(row.map(|(team, agent, sealed)| RunState {
        team,
        agent,
        sealed,
    }))
}

/// Appends `kind` at `at` to a run read with [`lock_run`] in the same transaction (and checked
/// open), and returns its seq (`last_seq + 1`). A `RunSealed` record seals the run.
pub async fn append<D: Dialect>(
    conn: &mut Conn<D>,
    run: RunId,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<Seq, sqlx::Error> {
    let (sealed_at, outcome) = sealing(kind, at);
    let (seq,): (i64,) = stmt::<D>(
        "UPDATE runs SET last_seq = last_seq + 1,
                         sealed_at = COALESCE($2, sealed_at),
                         outcome = COALESCE($3, outcome)
         WHERE id = $1 RETURNING last_seq",
    )
    .arg(run.0)
    .arg(sealed_at.map(D::time))
    .arg(outcome.map(str::to_owned))
    .one(&mut *conn)
    .await?;
    insert_record::<D>(conn, run, seq, at, kind).await?;
    Ok(Seq(from_db(seq)))
}

/// Writes the record `(run, seq, at, kind)` (`kind` as [`kind_text`]).
pub async fn insert_record<D: Dialect>(
    conn: &mut Conn<D>,
    run: RunId,
    seq: i64,
    at: DateTime<Utc>,
    kind: &RecordKind,
) -> Result<(), sqlx::Error> {
    stmt::<D>("INSERT INTO journal_records (run_id, seq, at, kind) VALUES ($1, $2, $3, $4)")
        .arg(run.0)
        .arg(seq)
        .arg(D::time(at))
        .arg(kind_text(kind)?)
        .run(conn)
        .await?;
    Ok(())
}

/// One tenant's runs and journals on an SQL store of dialect `D` (`crewbus_postgres::PostgresJournal`,
/// `crewbus_sqlite::SqliteJournal`).
///
/// Each append takes the run's row (where writers lock rows, `SELECT … FOR NO KEY UPDATE`:
/// foreign-key checks of inserted records are not blocked; on SQLite the write transaction is
/// serialised whole), refuses a sealed run, and takes `last_seq + 1` in the same transaction as
/// the record, so seqs are gap-free from 1 under any concurrency and nothing follows
/// `RunSealed`. The ledger appends the bus's own records through the same function inside its
/// transactions. Record kinds are stored as serde's JSON text (a note may hold U+0000, which
/// Postgres' `jsonb` would refuse; JSON escapes it). Time comes from the caller.
pub struct SqlJournal<D: Dialect> {
    store: D::Store,
    tenant: TenantId,
}

impl<D: Dialect> Clone for SqlJournal<D> {
    fn clone(&self) -> Self {
        SqlJournal {
            store: self.store.clone(),
            tenant: self.tenant.clone(),
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlJournal<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlJournal")
            .field("store", &D::NAME)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlJournal<D> {
    /// The journal of `tenant` over `store` (migrated by the driver crate's `migrate`).
    pub fn new(store: D::Store, tenant: TenantId) -> Self {
        SqlJournal { store, tenant }
    }

    /// The tenant whose runs this journal holds.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// `|e| D::store_error(store, e, what)`.
    fn st<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| D::store_error(&self.store, e, what)
    }

    async fn begin(&self, what: &'static str) -> Result<D::Tx, StoreError> {
        D::begin(&self.store).await.map_err(self.st(what))
    }

    async fn commit(&self, tx: D::Tx, what: &'static str) -> Result<(), StoreError> {
        D::commit(tx).await.map_err(self.st(what))
    }

    async fn reader(&self, what: &'static str) -> Result<D::Reader, StoreError> {
        D::reader(&self.store).await.map_err(self.st(what))
    }
}

/// The statement reading a run's records from a seq on, in one snapshot: `$1` the run, `$2` the
/// tenant, `$3` the first seq, `$4` at most that many records; rows `(seq, at, kind)`, one row of
/// `NULL`s for a run with none left, no row for an unknown run (see [`records`]).
const READ_RECORDS: PerDialect<&str> = PerDialect {
    postgres: "SELECT j.seq, j.at, j.kind
         FROM runs r LEFT JOIN LATERAL (
             SELECT seq, at, kind FROM journal_records
             WHERE run_id = r.id AND seq >= $3
             ORDER BY seq LIMIT $4) j ON true
         WHERE r.id = $1 AND r.tenant = $2
         ORDER BY j.seq",
    // A run without records from `$3` on is one row of NULLs.
    sqlite: "SELECT j.seq, j.at, j.kind
         FROM runs r LEFT JOIN journal_records j ON j.run_id = r.id AND j.seq >= $3
         WHERE r.id = $1 AND r.tenant = $2
         ORDER BY j.seq LIMIT $4",
};

/// Appends `kind` to an open run in one transaction. Errors: unknown run → `NotFound`; sealed →
/// `Conflict` (`check_appendable`).
async fn append_open<D: Dialect>(
    journal: &SqlJournal<D>,
    run: RunId,
    at: DateTime<Utc>,
    kind: RecordKind,
) -> Result<Seq, StoreError> {
    let what = "journal append";
    let mut tx = journal.begin(what).await?;
    let state = lock_run::<D>(&mut tx, journal.tenant(), run)
        .await
        .map_err(journal.st(what))?;
    check_appendable(run, state.map(|r| r.sealed))?;
    let seq = append::<D>(&mut tx, run, at, &kind)
        .await
        .map_err(journal.st(what))?;
    journal.commit(tx, what).await?;
    Ok(seq)
}

/// `Journal::admit`: a new run of `agent` of `team`, with its `RunAdmitted` record as seq 1.
async fn admit<D: Dialect>(
    journal: &SqlJournal<D>,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> Result<RunId, StoreError> {
    let what = "journal admit";
    let run = RunId::new();
    let mut tx = journal.begin(what).await?;
    stmt::<D>(
        "INSERT INTO runs (id, tenant, team_id, agent_id, admitted_at, last_seq)
         VALUES ($1, $2, $3, $4, $5, 1)",
    )
    .arg(run.0)
    .arg(journal.tenant().as_str().to_owned())
    .arg(team)
    .arg(agent)
    .arg(D::time(at))
    .run(&mut tx)
    .await
    .map_err(journal.st(what))?;
    let admitted = RecordKind::RunAdmitted { team, agent };
    insert_record::<D>(&mut tx, run, 1, at, &admitted)
        .await
        .map_err(journal.st(what))?;
    journal.commit(tx, what).await?;
    Ok(run)
}

/// `Journal::resume`: appends `RunResumed`.
async fn resume<D: Dialect>(
    journal: &SqlJournal<D>,
    run: RunId,
    at: DateTime<Utc>,
) -> Result<Seq, StoreError> {
    append_open(journal, run, at, RecordKind::RunResumed).await
}

/// `Journal::note`: appends a note. Errors: a bad text → `Invalid`.
async fn note<D: Dialect>(
    journal: &SqlJournal<D>,
    run: RunId,
    text: &str,
    at: DateTime<Utc>,
) -> Result<Seq, StoreError> {
    validate_note_text("note", text)?;
    let kind = RecordKind::Note {
        text: text.to_owned(),
    };
    append_open(journal, run, at, kind).await
}

/// `Journal::seal`: ends the run's live leases (their records first), then appends
/// `RunSealed`. Where writers lock rows, the team's lease fence is locked before the run (the
/// leases' lock order).
async fn seal<D: Dialect>(
    journal: &SqlJournal<D>,
    run: RunId,
    outcome: RunOutcome,
    reason: &str,
    at: DateTime<Utc>,
) -> Result<Seq, StoreError> {
    validate_note_text("reason", reason)?;
    let kind = RecordKind::RunSealed {
        outcome,
        reason: reason.to_owned(),
    };
    let what = "journal seal";
    let err = journal.st(what);
    let mut tx = journal.begin(what).await?;
    if D::ROW_LOCKS {
        let team: Option<(Uuid,)> =
            stmt::<D>("SELECT team_id FROM runs WHERE id = $1 AND tenant = $2")
                .arg(run.0)
                .arg(journal.tenant().as_str().to_owned())
                .optional(&mut tx)
                .await
                .map_err(&err)?;
        if let Some((team,)) = team {
            lock_fence::<D>(&mut tx, team).await.map_err(&err)?;
        }
    }
    let state = lock_run::<D>(&mut tx, journal.tenant(), run)
        .await
        .map_err(&err)?;
    check_appendable(run, state.map(|r| r.sealed))?;
    // Its live leases end first, their records before the seal's.
    end_leases::<D>(
        &mut tx,
        journal.tenant(),
        Ending::Run(run),
        LeaseEnd::RunSealed,
        at,
    )
    .await
    .map_err(&err)?;
    let seq = append::<D>(&mut tx, run, at, &kind).await.map_err(&err)?;
    journal.commit(tx, what).await?;
    Ok(seq)
}

/// `Journal::read`: at most `limit` records of `run` from `from_seq` on, by seq, from one
/// statement ([`READ_RECORDS`]). Errors: unknown run → `NotFound`.
async fn read<D: Dialect>(
    journal: &SqlJournal<D>,
    run: RunId,
    from_seq: Seq,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    validate_journal_limit(limit)?;
    let what = "journal read";
    let mut conn = journal.reader(what).await?;
    let rows: Vec<RecordRow<D::Time>> = stmt::<D>(READ_RECORDS.of::<D>())
        .arg(run.0)
        .arg(journal.tenant().as_str().to_owned())
        .arg(db_i64(from_seq.0))
        .arg(limit as i64)
        .all(&mut conn)
        .await
        .map_err(journal.st(what))?;
    records(run, rows)
}

/// `Journal::run`: one run. Errors: unknown → `NotFound`.
async fn run<D: Dialect>(journal: &SqlJournal<D>, run: RunId) -> Result<Run, StoreError> {
    let what = "journal run";
    let mut conn = journal.reader(what).await?;
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 AND tenant = $2");
    let row: Option<RunRow<D::Time>> = stmt::<D>(&sql)
        .arg(run.0)
        .arg(journal.tenant().as_str().to_owned())
        .optional(&mut conn)
        .await
        .map_err(journal.st(what))?;
    row.map(Run::from)
        .ok_or_else(|| StoreError::not_found(format!("run {run}")))
}

/// `Journal::runs`: at most `limit` runs of `team` admitted before `before` (all without it),
/// newest first.
async fn runs<D: Dialect>(
    journal: &SqlJournal<D>,
    team: Uuid,
    before: Option<DateTime<Utc>>,
    limit: usize,
) -> Result<Vec<Run>, StoreError> {
    validate_journal_limit(limit)?;
    let what = "journal runs";
    let mut conn = journal.reader(what).await?;
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs
         WHERE tenant = $1 AND team_id = $2 AND ($3 IS NULL OR admitted_at < $3)
         ORDER BY admitted_at DESC, id DESC LIMIT $4"
    );
    let rows: Vec<RunRow<D::Time>> = stmt::<D>(&sql)
        .arg(journal.tenant().as_str().to_owned())
        .arg(team)
        .arg(before.map(D::time))
        .arg(limit as i64)
        .all(&mut conn)
        .await
        .map_err(journal.st(what))?;
    Ok(rows.into_iter().map(Run::from).collect())
}

#[async_trait]
impl<D: Dialect> Journal for SqlJournal<D> {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn admit(&self, team: Uuid, agent: Uuid, at: DateTime<Utc>) -> Result<RunId, StoreError> {
        admit(self, team, agent, at).await
    }

    async fn resume(&self, run: RunId, at: DateTime<Utc>) -> Result<Seq, StoreError> {
        resume(self, run, at).await
    }

    async fn note(&self, run: RunId, text: &str, at: DateTime<Utc>) -> Result<Seq, StoreError> {
        note(self, run, text, at).await
    }

    async fn seal(
        &self,
        run: RunId,
        outcome: RunOutcome,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Seq, StoreError> {
        seal(self, run, outcome, reason, at).await
    }

    async fn read(
        &self,
        run: RunId,
        from_seq: Seq,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError> {
        read(self, run, from_seq, limit).await
    }

    async fn run(&self, id: RunId) -> Result<Run, StoreError> {
        run(self, id).await
    }

    async fn runs(
        &self,
        team: Uuid,
        before: Option<DateTime<Utc>>,
        limit: usize,
    ) -> Result<Vec<Run>, StoreError> {
        runs(self, team, before, limit).await
    }
}
