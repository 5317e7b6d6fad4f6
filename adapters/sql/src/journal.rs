//! The journal's rows and records, for both SQL adapters: how a record is stored (`kind` as
//! serde's JSON text, the seal written on the run row) and how runs and records are read back;
//! and the port's operations, once for both stores ([`impl_journal!`](crate::impl_journal)), over [`SqlJournal`].

use std::future::Future;
use std::ops::DerefMut;

use chrono::{DateTime, Utc};
use crewbus_domain::{
    LeaseEnd, Record, RecordKind, Run, RunId, RunOutcome, Seq, StoreError, TenantId,
    check_appendable, validate_journal_limit, validate_note_text,
};
use uuid::Uuid;

use crate::counter::{db_i64, from_db};
use crate::dialect::{Conn, Dialect};
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

/// One tenant's journal on an SQL store: its transactions, its reads and its error mapping.
///
/// Implemented by `PostgresJournal` (pool transactions and connections) and `SqliteJournal`
/// (write transactions on the one write connection; read-pool connections).
pub trait SqlJournal: Send + Sync {
    /// The store's dialect.
    type D: Dialect;
    /// A write transaction.
    type Tx: DerefMut<Target = Conn<Self::D>> + Send;
    /// A connection for reads.
    type Reader: DerefMut<Target = Conn<Self::D>> + Send;

    /// The statement reading a run's records from a seq on, in one snapshot: `$1` the run, `$2`
    /// the tenant, `$3` the first seq, `$4` at most that many records; rows `(seq, at, kind)`,
    /// one row of `NULL`s for a run with none left, no row for an unknown run (see [`records`]).
    const READ_RECORDS: &'static str;

    /// The tenant whose runs this journal holds.
    fn tenant(&self) -> &TenantId;

    /// A driver error of the operation `what` as the stores' error.
    fn store_error(&self, err: sqlx::Error, what: &str) -> StoreError;

    /// Begins a write transaction.
    fn begin(
        &self,
        what: &'static str,
    ) -> impl Future<Output = Result<Self::Tx, StoreError>> + Send;

    /// Commits a write transaction.
    fn commit(
        &self,
        tx: Self::Tx,
        what: &'static str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A connection for reads.
    fn reader(
        &self,
        what: &'static str,
    ) -> impl Future<Output = Result<Self::Reader, StoreError>> + Send;

    /// `|e| self.store_error(e, what)`.
    fn st<'a>(&'a self, what: &'a str) -> impl Fn(sqlx::Error) -> StoreError + 'a {
        move |e| self.store_error(e, what)
    }
}

/// Appends `kind` to an open run in one transaction. Errors: unknown run → `NotFound`; sealed →
/// `Conflict` (`check_appendable`).
async fn append_open<J: SqlJournal>(
    journal: &J,
    run: RunId,
    at: DateTime<Utc>,
    kind: RecordKind,
) -> Result<Seq, StoreError> {
    let what = "journal append";
    let mut tx = journal.begin(what).await?;
    let state = lock_run::<J::D>(&mut tx, journal.tenant(), run)
        .await
        .map_err(journal.st(what))?;
    check_appendable(run, state.map(|r| r.sealed))?;
    let seq = append::<J::D>(&mut tx, run, at, &kind)
        .await
        .map_err(journal.st(what))?;
    journal.commit(tx, what).await?;
    Ok(seq)
}

/// `Journal::admit`: a new run of `agent` of `team`, with its `RunAdmitted` record as seq 1.
pub async fn admit<J: SqlJournal>(
    journal: &J,
    team: Uuid,
    agent: Uuid,
    at: DateTime<Utc>,
) -> Result<RunId, StoreError> {
    let what = "journal admit";
    let run = RunId::new();
    let mut tx = journal.begin(what).await?;
    stmt::<J::D>(
        "INSERT INTO runs (id, tenant, team_id, agent_id, admitted_at, last_seq)
         VALUES ($1, $2, $3, $4, $5, 1)",
    )
    .arg(run.0)
    .arg(journal.tenant().as_str().to_owned())
    .arg(team)
    .arg(agent)
    .arg(J::D::time(at))
    .run(&mut tx)
    .await
    .map_err(journal.st(what))?;
    let admitted = RecordKind::RunAdmitted { team, agent };
    insert_record::<J::D>(&mut tx, run, 1, at, &admitted)
        .await
        .map_err(journal.st(what))?;
    journal.commit(tx, what).await?;
    Ok(run)
}

/// `Journal::resume`: appends `RunResumed`.
pub async fn resume<J: SqlJournal>(
    journal: &J,
    run: RunId,
    at: DateTime<Utc>,
) -> Result<Seq, StoreError> {
    append_open(journal, run, at, RecordKind::RunResumed).await
}

/// `Journal::note`: appends a note. Errors: a bad text → `Invalid`.
pub async fn note<J: SqlJournal>(
    journal: &J,
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
pub async fn seal<J: SqlJournal>(
    journal: &J,
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
    if J::D::ROW_LOCKS {
        let team: Option<(Uuid,)> =
            stmt::<J::D>("SELECT team_id FROM runs WHERE id = $1 AND tenant = $2")
                .arg(run.0)
                .arg(journal.tenant().as_str().to_owned())
                .optional(&mut tx)
                .await
                .map_err(&err)?;
        if let Some((team,)) = team {
            lock_fence::<J::D>(&mut tx, team).await.map_err(&err)?;
        }
    }
    let state = lock_run::<J::D>(&mut tx, journal.tenant(), run)
        .await
        .map_err(&err)?;
    check_appendable(run, state.map(|r| r.sealed))?;
    // Its live leases end first, their records before the seal's.
    end_leases::<J::D>(
        &mut tx,
        journal.tenant(),
        Ending::Run(run),
        LeaseEnd::RunSealed,
        at,
    )
    .await
    .map_err(&err)?;
    let seq = append::<J::D>(&mut tx, run, at, &kind)
        .await
        .map_err(&err)?;
    journal.commit(tx, what).await?;
    Ok(seq)
}

/// `Journal::read`: at most `limit` records of `run` from `from_seq` on, by seq, from one
/// statement ([`SqlJournal::READ_RECORDS`]). Errors: unknown run → `NotFound`.
pub async fn read<J: SqlJournal>(
    journal: &J,
    run: RunId,
    from_seq: Seq,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    validate_journal_limit(limit)?;
    let what = "journal read";
    let mut conn = journal.reader(what).await?;
    let rows: Vec<RecordRow<<J::D as Dialect>::Time>> = stmt::<J::D>(J::READ_RECORDS)
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
pub async fn run<J: SqlJournal>(journal: &J, run: RunId) -> Result<Run, StoreError> {
    let what = "journal run";
    let mut conn = journal.reader(what).await?;
    let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 AND tenant = $2");
    let row: Option<RunRow<<J::D as Dialect>::Time>> = stmt::<J::D>(&sql)
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
pub async fn runs<J: SqlJournal>(
    journal: &J,
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
    let rows: Vec<RunRow<<J::D as Dialect>::Time>> = stmt::<J::D>(&sql)
        .arg(journal.tenant().as_str().to_owned())
        .arg(team)
        .arg(before.map(J::D::time))
        .arg(limit as i64)
        .all(&mut conn)
        .await
        .map_err(journal.st(what))?;
    Ok(rows.into_iter().map(Run::from).collect())
}

/// Implements `crewbus_ports::Journal` for an [`SqlJournal`] type by delegating every method to
/// this module's function of the same name.
///
/// ```ignore
/// crewbus_sql::impl_journal!(MyJournal);
/// ```
#[macro_export]
macro_rules! impl_journal {
    ($ty:ty) => {
        const _: () = {
            use $crate::__private::{
                DateTime, Journal, Record, Run, RunId, RunOutcome, Seq, StoreError, TenantId, Utc,
                Uuid, async_trait,
            };
            use $crate::journal as sql;

            #[async_trait]
            impl Journal for $ty {
                fn tenant(&self) -> &TenantId {
                    <Self as sql::SqlJournal>::tenant(self)
                }

                async fn admit(
                    &self,
                    team: Uuid,
                    agent: Uuid,
                    at: DateTime<Utc>,
                ) -> Result<RunId, StoreError> {
                    sql::admit(self, team, agent, at).await
                }

                async fn resume(&self, run: RunId, at: DateTime<Utc>) -> Result<Seq, StoreError> {
                    sql::resume(self, run, at).await
                }

                async fn note(
                    &self,
                    run: RunId,
                    text: &str,
                    at: DateTime<Utc>,
                ) -> Result<Seq, StoreError> {
                    sql::note(self, run, text, at).await
                }

                async fn seal(
                    &self,
                    run: RunId,
                    outcome: RunOutcome,
                    reason: &str,
                    at: DateTime<Utc>,
                ) -> Result<Seq, StoreError> {
                    sql::seal(self, run, outcome, reason, at).await
                }

                async fn read(
                    &self,
                    run: RunId,
                    from_seq: Seq,
                    limit: usize,
                ) -> Result<Vec<Record>, StoreError> {
                    sql::read(self, run, from_seq, limit).await
                }

                async fn run(&self, run: RunId) -> Result<Run, StoreError> {
                    sql::run(self, run).await
                }

                async fn runs(
                    &self,
                    team: Uuid,
                    before: Option<DateTime<Utc>>,
                    limit: usize,
                ) -> Result<Vec<Run>, StoreError> {
                    sql::runs(self, team, before, limit).await
                }
            }
        };
    };
}
