//! Group commit on the write connection: every write transaction of the process (the ledger's
//! sends, hand-outs, confirms, settlements and leases, the inbox's references and acks, the
//! journal, the bodies) is a **part** of a shared SQLite transaction, so the parts queued while
//! one transaction commits share the next one and its one WAL fsync (`synchronous=FULL`).
//!
//! - **Linger 0**: a part that finds no transaction open begins one (`BEGIN IMMEDIATE`) for
//!   itself and the parts already waiting then — the writes that queued while the last
//!   transaction committed — and the transaction commits once those are done (or sooner, when no
//!   part is left running or waiting), at most [`MAX_PARTS`] parts. A part that arrives later
//!   waits for the next one, so no part's answer waits for work queued after it began. A lone
//!   write is committed alone, without waiting for company — the rule the send batcher follows.
//! - **Bounded wait**: a part waits for the connection at most the pool's acquire timeout
//!   (`storage` `acquire_timeout`), then fails with the pool's timeout (`Unavailable`).
//! - **One outcome per part**: each part runs inside its own `SAVEPOINT`; a part that fails (its
//!   [`WriteTx`] dropped without [`WriteTx::commit`]) is rolled back to it, and the others are
//!   untouched. [`WriteTx::commit`] returns only after the shared transaction's `COMMIT`.
//! - **A failed transaction answers every part with the same retryable error**: when the
//!   `COMMIT` (or a savepoint statement, after SQLite rolled the transaction back on an I/O or
//!   full-disk error) fails, nothing of the transaction was written and each part's `commit`
//!   answers an I/O error the adapters map to `Unavailable`; the connection is closed (the pool
//!   opens a fresh one).
//! - **Cancellation is safe**: the statements that move the transaction on (`BEGIN`, savepoints,
//!   `COMMIT`) run in tasks of their own, and a part abandoned by its caller (a dropped request)
//!   is rolled back to its savepoint and leaves the transaction, so it never holds the others'
//!   commit.
//!
//! Parts run one at a time, in arrival order (a fair mutex over the connection): a part sees
//! every earlier part's writes, as serial transactions would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqlitePool;
use sqlx::{Executor, Sqlite, SqliteConnection};
use tokio::sync::{Mutex, OwnedMutexGuard, watch};

/// Most parts in one transaction: a steady stream of writers still commits at least this often.
pub(crate) const MAX_PARTS: usize = 64;

/// How one shared transaction ended: `Ok`, or the failure's text (every part gets it).
type Outcome = Option<Result<(), Arc<str>>>;

/// The open shared transaction.
struct Batch {
    conn: PoolConnection<Sqlite>,
    parts: usize,
    /// The parts this transaction takes: its first and those waiting when it began.
    quota: usize,
    outcome: watch::Sender<Outcome>,
}

/// What the mutex guards: the open transaction, if any.
#[derive(Default)]
struct Writer {
    batch: Option<Batch>,
    /// A part was dropped without a runtime to roll it back: the next holder does it first.
    rollback_pending: bool,
}

struct Inner {
    pool: SqlitePool,
    /// How long a part waits for the connection.
    acquire_timeout: std::time::Duration,
    writer: Arc<Mutex<Writer>>,
    /// Parts that hold or wait for the connection and have not left the transaction.
    active: AtomicUsize,
    /// Shared transactions committed (each one `COMMIT`, one WAL fsync), since start.
    commits: AtomicU64,
    /// Parts those transactions held.
    parts: AtomicU64,
}

/// The group committer of one write pool. Cheap to clone.
#[derive(Clone)]
pub(crate) struct GroupCommit {
    inner: Arc<Inner>,
}

/// One part of the shared write transaction: derefs to the write connection, inside the part's
/// savepoint. [`WriteTx::commit`] keeps its writes; dropping it rolls them back.
pub struct WriteTx {
    guard: Option<OwnedMutexGuard<Writer>>,
    inner: Arc<Inner>,
}

/// A part counted in `active` that has not joined yet: dropped unused (its wait for the
/// connection timed out, or its task was cancelled by the runtime's shutdown), it leaves, so the
/// open transaction can commit.
struct Ticket {
    inner: Option<Arc<Inner>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let left = inner.active.fetch_sub(1, Ordering::SeqCst) - 1;
            if left == 0
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(async move {
                    let guard = inner.writer.clone().lock_owned().await;
                    if inner.active.load(Ordering::SeqCst) == 0 {
                        inner.finish(guard).await;
                    }
                });
            }
        }
    }
}

impl GroupCommit {
    /// The group committer of `pool` (the single-connection write pool); a part waits for the
    /// connection at most `acquire_timeout`.
    pub(crate) fn new(pool: SqlitePool, acquire_timeout: std::time::Duration) -> Self {
        GroupCommit {
            inner: Arc::new(Inner {
                pool,
                acquire_timeout,
                writer: Arc::new(Mutex::new(Writer::default())),
                active: AtomicUsize::new(0),
                commits: AtomicU64::new(0),
                parts: AtomicU64::new(0),
            }),
        }
    }

    /// Begins a part: waits for the connection (parts run one at a time, in arrival order),
    /// joins the open transaction or begins one (`BEGIN IMMEDIATE`: the write lock is taken at
    /// once, waiting up to the busy timeout for another process), and opens the part's
    /// savepoint. Errors: the connection not acquired in time, the store busy or failing → the
    /// sqlx error (the adapters map it to `Unavailable`).
    pub(crate) async fn begin(&self) -> Result<WriteTx, sqlx::Error> {
        let inner = self.inner.clone();
        inner.active.fetch_add(1, Ordering::SeqCst);
        let ticket = Ticket {
            inner: Some(inner.clone()),
        };
        // In a task of its own: a caller that goes away mid-`BEGIN` leaves nothing half done
        // (the task's WriteTx is dropped, which rolls the part back and leaves).
        tokio::spawn(async move {
            let mut ticket = ticket;
            let locked =
                tokio::time::timeout(inner.acquire_timeout, inner.writer.clone().lock_owned())
                    .await;
            // Timed out: the ticket, dropped armed, leaves for this part.
            let mut guard = locked.map_err(|_| sqlx::Error::PoolTimedOut)?;
            ticket.inner = None;
            match inner.join(&mut guard).await {
                Ok(()) => Ok(WriteTx {
                    guard: Some(guard),
                    inner,
                }),
                Err(e) => {
                    inner.leave(guard).await;
                    Err(e)
                }
            }
        })
        .await
        .unwrap_or_else(|e| Err(sqlx::Error::Io(std::io::Error::other(e))))
    }
}

impl GroupCommit {
    /// (shared transactions committed, parts they held) since start: parts ÷ transactions is
    /// the mean batch (1.0 when writes never overlap).
    pub(crate) fn committed(&self) -> (u64, u64) {
        (
            self.inner.commits.load(Ordering::Relaxed),
            self.inner.parts.load(Ordering::Relaxed),
        )
    }

    #[cfg(test)]
    fn active(&self) -> usize {
        self.inner.active.load(Ordering::SeqCst)
    }
}

impl Inner {
    /// Joins (or begins) the shared transaction and opens a savepoint for the part.
    async fn join(&self, w: &mut Writer) -> Result<(), sqlx::Error> {
        if std::mem::take(&mut w.rollback_pending)
            && let Some(batch) = w.batch.as_mut()
            && let Err(e) = batch.conn.execute("ROLLBACK TO part; RELEASE part").await
        {
            self.abort(w, &e).await;
        }
        if w.batch.is_none() {
            let mut conn = self.pool.acquire().await?;
            conn.execute("BEGIN IMMEDIATE").await?;
            w.batch = Some(Batch {
                conn,
                parts: 0,
                // This part, counted in `active`, and every part waiting now.
                quota: self.active.load(Ordering::SeqCst).clamp(1, MAX_PARTS),
                outcome: watch::channel(None).0,
            });
        }
        let batch = w.batch.as_mut().expect("begun above");
        if let Err(e) = batch.conn.execute("SAVEPOINT part").await {
            self.abort(w, &e).await;
            return Err(e);
        }
        batch.parts += 1;
        Ok(())
    }

    /// The part leaves the transaction; the last one out (or the one that filled it) commits.
    async fn leave(&self, guard: OwnedMutexGuard<Writer>) {
        let left = self.active.fetch_sub(1, Ordering::SeqCst) - 1;
        let full = guard
            .batch
            .as_ref()
            .is_some_and(|b| b.parts >= b.quota || b.parts >= MAX_PARTS);
        if left == 0 || full {
            self.finish(guard).await;
        }
    }

    /// Commits the open transaction, if any, and tells its parts how it ended.
    async fn finish(&self, mut guard: OwnedMutexGuard<Writer>) {
        if std::mem::take(&mut guard.rollback_pending)
            && let Some(batch) = guard.batch.as_mut()
            && let Err(e) = batch.conn.execute("ROLLBACK TO part; RELEASE part").await
        {
            self.abort(&mut guard, &e).await;
        }
        let Some(mut batch) = guard.batch.take() else {
            return;
        };
        match batch.conn.execute("COMMIT").await {
            Ok(_) => {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.parts.fetch_add(batch.parts as u64, Ordering::Relaxed);
                batch.outcome.send_replace(Some(Ok(())));
            }
            Err(e) => {
                tracing::warn!(error = %e, parts = batch.parts, "sqlite group commit failed; every part answered unavailable");
                let _ = batch.conn.execute("ROLLBACK").await;
                batch.outcome.send_replace(Some(Err(e.to_string().into())));
                batch.conn.close_on_drop();
            }
        }
    }

    /// Ends a transaction a failed statement broke: rolled back, its connection closed, its
    /// parts answered with `error`.
    async fn abort(&self, w: &mut Writer, error: &sqlx::Error) {
        if let Some(mut batch) = w.batch.take() {
            tracing::warn!(error = %error, parts = batch.parts, "sqlite group transaction broken; rolled back, every part answered unavailable");
            let _ = batch.conn.execute("ROLLBACK").await;
            batch
                .outcome
                .send_replace(Some(Err(error.to_string().into())));
            batch.conn.close_on_drop();
        }
    }

    /// Rolls a dropped part back to its savepoint, then leaves.
    async fn drop_part(&self, mut guard: OwnedMutexGuard<Writer>) {
        if let Some(batch) = guard.batch.as_mut()
            && let Err(e) = batch.conn.execute("ROLLBACK TO part; RELEASE part").await
        {
            self.abort(&mut guard, &e).await;
        }
        self.leave(guard).await;
    }

    /// Keeps the part (releases its savepoint), leaves, and waits for the transaction's end.
    async fn commit_part(
        self: Arc<Self>,
        mut guard: OwnedMutexGuard<Writer>,
    ) -> Result<watch::Receiver<Outcome>, sqlx::Error> {
        // (Never `Err` today; the type keeps the join error's shape for the caller.)
        let batch = guard
            .batch
            .as_mut()
            .expect("a joined part has a transaction");
        let outcome = batch.outcome.subscribe();
        if let Err(e) = batch.conn.execute("RELEASE part").await {
            // The transaction is gone (SQLite rolled it back): every part hears it, this one too.
            self.abort(&mut guard, &e).await;
        }
        self.leave(guard).await;
        Ok(outcome)
    }
}

impl WriteTx {
    /// Keeps the part's writes and waits for the shared transaction's `COMMIT`. Errors: the
    /// transaction failed (nothing of it was written) → an I/O error (`Unavailable` for the
    /// adapters), the same for every part.
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        let guard = self.guard.take().expect("a part is committed once");
        let inner = self.inner.clone();
        let mut outcome = tokio::spawn(inner.commit_part(guard))
            .await
            .map_err(|e| sqlx::Error::Io(std::io::Error::other(e)))??;
        let ended = outcome
            .wait_for(Option::is_some)
            .await
            .map(|o| o.clone())
            .unwrap_or_else(|_| Some(Err("the write transaction was abandoned".into())));
        match ended {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => Err(sqlx::Error::Io(std::io::Error::other(format!(
                "the shared write transaction failed: {why}"
            )))),
            None => unreachable!("waited for an outcome"),
        }
    }
}

impl Drop for WriteTx {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let inner = self.inner.clone();
                rt.spawn(async move { inner.drop_part(guard).await });
            }
            Err(_) => {
                guard.rollback_pending = true;
                self.inner.active.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl std::ops::Deref for WriteTx {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        let guard = self.guard.as_ref().expect("a live part holds the writer");
        &guard
            .batch
            .as_ref()
            .expect("a live part has a transaction")
            .conn
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        let guard = self.guard.as_mut().expect("a live part holds the writer");
        &mut guard
            .batch
            .as_mut()
            .expect("a live part has a transaction")
            .conn
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use sqlx::Executor;

    use super::*;
    use crate::{SqliteConfig, open};

    async fn store() -> (tempfile::TempDir, crate::SqlitePools) {
        let dir = tempfile::tempdir().unwrap();
        let config = SqliteConfig {
            create_if_missing: true,
            ..SqliteConfig::default()
        };
        let pools = open(dir.path().join("bus.db"), &config).await.unwrap();
        pools
            .writer()
            .execute("CREATE TABLE t (x INTEGER NOT NULL PRIMARY KEY) STRICT")
            .await
            .unwrap();
        (dir, pools)
    }

    async fn rows(pools: &crate::SqlitePools) -> Vec<i64> {
        sqlx::query_scalar("SELECT x FROM t ORDER BY x")
            .fetch_all(pools.reader())
            .await
            .unwrap()
    }

    /// Waits (deadline 10 s) until `n` parts hold or wait for the connection.
    async fn until_active(group: &GroupCommit, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while group.active() != n {
            assert!(
                Instant::now() < deadline,
                "{} parts active, not {n}",
                group.active()
            );
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn insert(tx: &mut WriteTx, x: i64) {
        sqlx::query("INSERT INTO t VALUES (?)")
            .bind(x)
            .execute(&mut **tx)
            .await
            .unwrap();
    }

    /// Parts queued while one transaction runs share the next one: the first part commits alone
    /// (nobody waited when it began), the five queued behind it in one COMMIT; every row kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parts_queued_while_one_runs_share_one_commit() {
        let (_dir, pools) = store().await;
        let group = pools.group.clone();
        let mut first = group.begin().await.unwrap();
        insert(&mut first, 0).await;
        let waiting: Vec<_> = (1..=5)
            .map(|x| {
                let group = group.clone();
                tokio::spawn(async move {
                    let mut tx = group.begin().await.unwrap();
                    insert(&mut tx, x).await;
                    tx.commit().await
                })
            })
            .collect();
        until_active(&group, 6).await;
        first.commit().await.unwrap();
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        assert_eq!(rows(&pools).await, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(
            group.committed(),
            (2, 6),
            "the first alone (nobody waited when it began), then the five that queued behind it \
             in one transaction"
        );
        // A lone part commits alone, at once.
        let mut alone = group.begin().await.unwrap();
        insert(&mut alone, 6).await;
        alone.commit().await.unwrap();
        assert_eq!(group.committed(), (3, 7));
    }

    /// A part dropped without commit is rolled back to its savepoint; the part after it in the
    /// same transaction is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_part_is_rolled_back_alone() {
        let (_dir, pools) = store().await;
        let group = pools.group.clone();
        // A part holds the connection while the two under test queue behind it, so they begin
        // the next transaction together.
        let mut holder = group.begin().await.unwrap();
        insert(&mut holder, 0).await;
        let dropped = {
            let group = group.clone();
            tokio::spawn(async move {
                let mut tx = group.begin().await.unwrap();
                insert(&mut tx, 1).await;
                drop(tx);
            })
        };
        until_active(&group, 2).await;
        let kept = {
            let group = group.clone();
            tokio::spawn(async move {
                let mut tx = group.begin().await.unwrap();
                insert(&mut tx, 2).await;
                tx.commit().await
            })
        };
        until_active(&group, 3).await;
        holder.commit().await.unwrap();
        dropped.await.unwrap();
        kept.await.unwrap().unwrap();
        assert_eq!(rows(&pools).await, vec![0, 2]);
        assert_eq!(
            group.committed(),
            (2, 3),
            "the holder alone, then the dropped and the kept part in one transaction"
        );
    }

    /// A part that breaks the shared transaction (here: rolls it back itself) fails it for every
    /// part: each commit answers an error the adapters map to `Unavailable`, nothing of it is
    /// kept, and the next part begins a fresh transaction.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broken_transaction_fails_every_part_and_the_next_begins_afresh() {
        let (_dir, pools) = store().await;
        let group = pools.group.clone();
        let holder = group.begin().await.unwrap();
        let first = {
            let group = group.clone();
            tokio::spawn(async move {
                let mut tx = group.begin().await.unwrap();
                insert(&mut tx, 1).await;
                tx.commit().await
            })
        };
        until_active(&group, 2).await;
        let breaker = {
            let group = group.clone();
            tokio::spawn(async move {
                let mut tx = group.begin().await.unwrap();
                insert(&mut tx, 2).await;
                tx.execute("ROLLBACK").await.unwrap();
                tx.commit().await
            })
        };
        until_active(&group, 3).await;
        holder.commit().await.unwrap();
        let first = first.await.unwrap().unwrap_err();
        let second = breaker.await.unwrap().unwrap_err();
        for e in [first, second] {
            assert!(
                matches!(crate::error::classify(&e), crate::error::Class::Unavailable),
                "{e:?}"
            );
        }
        assert!(rows(&pools).await.is_empty());
        let mut next = group.begin().await.unwrap();
        insert(&mut next, 3).await;
        next.commit().await.unwrap();
        assert_eq!(rows(&pools).await, vec![3]);
    }

    /// A part that cannot get the connection within the acquire timeout fails with the pool's
    /// timeout (`Unavailable`), and the transaction it waited for still commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_part_waits_for_the_connection_at_most_the_acquire_timeout() {
        let (_dir, pools) = store().await;
        let group = GroupCommit::new(pools.writer().clone(), Duration::from_millis(50));
        let mut holder = group.begin().await.unwrap();
        insert(&mut holder, 1).await;
        let e = group.begin().await.err().expect("timed out");
        assert!(matches!(e, sqlx::Error::PoolTimedOut), "{e:?}");
        holder.commit().await.unwrap();
        assert_eq!(rows(&pools).await, vec![1]);
        assert_eq!(group.committed(), (1, 1));
    }
}
