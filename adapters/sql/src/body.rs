//! The SQL body backend (`MessagingBackend` over the `bodies` table), once for both stores
//! ([`SqlBodies`]: `impl<D: Dialect> MessagingBackend for SqlBodies<D>`).
//!
//! - `publish` inserts into `bodies` keyed by message id, unique on `publish_key`
//!   ([`store_body`]), so it is idempotent for the life of the row: the same key again →
//!   `Confirmed { duplicate: true }`, the same message id under another key → `Fatal(Conflict)`;
//!   another team's envelope → `Fatal(Forbidden)`; a body above the configured maximum →
//!   `Fatal(TooLarge)`, and [`MessagingBackend::max_body_bytes`](crewbus_ports::MessagingBackend::max_body_bytes)
//!   answers that maximum. Bodies are stored as UTF-8 bytes (`bytea`, `BLOB`), U+0000 included.
//! - A failure the store says may have committed ([`Dialect::may_have_committed`]) →
//!   `Uncertain`; any other → `Retryable` or `Fatal` by its error (nothing was stored).
//! - Store times (for `retain`) come from the injected [`Clock`].

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, Locator, Published, stored_body};
use crewbus_ports::{Clock, MessagingBackend};
use uuid::Uuid;

use crate::dialect::{Conn, Dialect};
use crate::driver::stmt;
use crate::settings::SqlSettings;
use crate::store::{SqlStore, finish};

/// One team's bodies on an SQL store of dialect `D` (`crewbus_postgres::PostgresBackend`,
/// `crewbus_sqlite::SqliteBackend`), in the `bodies` table the ledger's send transaction writes
/// for the store's own conversations.
pub struct SqlBodies<D: Dialect> {
    store: SqlStore<D>,
    team: Uuid,
    clock: Arc<dyn Clock>,
    max_body_bytes: u64,
}

impl<D: Dialect> Clone for SqlBodies<D> {
    fn clone(&self) -> Self {
        SqlBodies {
            store: self.store.clone(),
            team: self.team,
            clock: self.clock.clone(),
            max_body_bytes: self.max_body_bytes,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlBodies<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBodies")
            .field("store", &D::NAME)
            .field("team", &self.team)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlBodies<D> {
    /// The body backend of `team` over `store` (migrated by the driver crate's `migrate`),
    /// refusing bodies above `settings.max_body_bytes` (bytes), store times from `clock`.
    pub fn new(store: D::Store, team: Uuid, clock: Arc<dyn Clock>, settings: &SqlSettings) -> Self {
        SqlBodies {
            store: SqlStore::new(store),
            team,
            clock,
            max_body_bytes: settings.max_body_bytes,
        }
    }

    /// The team these bodies belong to.
    pub fn team(&self) -> Uuid {
        self.team
    }

    /// The effective maximum body size, in bytes.
    pub fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }
}

/// What storing a body came to.
pub enum Stored {
    /// Written now.
    New,
    /// Already held under the same key.
    Duplicate,
}

/// Inserts `envelope`'s body stored at `at`, idempotently on its publish key, on `conn` (the
/// caller's write: a SQLite ledger's send transaction, or [`publish`]'s).
///
/// A conflicting row that is gone by the time it is looked up (deleted by a concurrent
/// retention, possible where statements commit on their own) makes it go round again, three
/// times at most; inside a SQLite write transaction the row stays.
///
/// Errors: the message id or publish key already held with another key/message/team →
/// `Err(Ok(Conflict))`; the row changing three times → `Err(Ok(Unavailable))`; a database error
/// → `Err(Err(sqlx error))` for the caller to classify.
pub async fn store_body<D: Dialect>(
    conn: &mut Conn<D>,
    envelope: &Envelope,
    at: DateTime<Utc>,
) -> Result<Stored, Result<BusError, sqlx::Error>> {
    for _ in 0..3 {
        let inserted = stmt::<D>(
            "INSERT INTO bodies (message_id, team_id, conversation_id, publish_key, body, stored_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT DO NOTHING",
        )
        .arg(envelope.message_id)
        .arg(envelope.team_id)
        .arg(envelope.conversation_id)
        .arg(envelope.publish_key)
        .arg(envelope.body.as_bytes().to_vec())
        .arg(D::time(at))
        .execute(&mut *conn)
        .await
        .map_err(Err)?;
        if D::rows_affected(&inserted) == 1 {
            return Ok(Stored::New);
        }
        let held: Vec<(Uuid, Uuid, Uuid)> = stmt::<D>(
            "SELECT message_id, team_id, publish_key FROM bodies
             WHERE message_id = $1 OR publish_key = $2",
        )
        .arg(envelope.message_id)
        .arg(envelope.publish_key)
        .all(&mut *conn)
        .await
        .map_err(Err)?;
        if held.is_empty() {
            continue;
        }
        return envelope
            .check_held(&held)
            .map(|()| Stored::Duplicate)
            .map_err(Ok);
    }
    Err(Ok(BusError::unavailable(
        "body store: the row changed repeatedly under the publish",
    )))
}

/// A failed statement or commit of a publish: `Uncertain` where it may have committed.
fn failed<D: Dialect>(store: &SqlStore<D>, e: sqlx::Error, what: &str) -> Published {
    let uncertain = D::may_have_committed(&e);
    let e = store.bus_error(e, what);
    if uncertain {
        Published::Uncertain(e)
    } else {
        Published::from_error(e)
    }
}

/// `MessagingBackend::publish`: the checks of the envelope, then [`store_body`] in one write.
async fn publish<D: Dialect>(b: &SqlBodies<D>, envelope: &Envelope) -> Published {
    if let Err(e) = envelope.check_for(b.team, b.max_body_bytes) {
        return Published::Fatal(e);
    }
    let what = "body store";
    let at = b.clock.now();
    let mut write = match b.store.write(what).await {
        Ok(write) => write,
        Err(e) => return Published::from_error(e),
    };
    let stored = match store_body::<D>(&mut write, envelope, at).await {
        Ok(stored) => stored,
        Err(Ok(refused)) => return Published::from_error(refused),
        Err(Err(e)) => return failed(&b.store, e, what),
    };
    if let Err(e) = b.store.end_write(write).await {
        return failed(&b.store, e, what);
    }
    Published::Confirmed {
        locator: Locator::for_message(D::NAME, envelope.message_id),
        duplicate: matches!(stored, Stored::Duplicate),
    }
}

/// `MessagingBackend::fetch`: the body of `message_id` at `locator`, one read.
async fn fetch<D: Dialect>(
    b: &SqlBodies<D>,
    locator: &Locator,
    message_id: Uuid,
) -> BusResult<Option<String>> {
    let what = "body fetch";
    let id = locator.message_id_for(D::NAME, message_id)?;
    let mut reader = b.store.reader(what).await?;
    let row: Option<(Uuid, Vec<u8>)> =
        stmt::<D>("SELECT team_id, body FROM bodies WHERE message_id = $1")
            .arg(id)
            .optional(&mut reader)
            .await
            .map_err(b.store.db(what))?;
    stored_body(b.team, row)
}

/// `MessagingBackend::retain`: deletes the team's bodies stored before `before`, one write;
/// returns how many.
async fn retain<D: Dialect>(b: &SqlBodies<D>, before: DateTime<Utc>) -> BusResult<u64> {
    let what = "body retention";
    let mut write = b.store.write(what).await?;
    let done = stmt::<D>("DELETE FROM bodies WHERE team_id = $1 AND stored_at < $2")
        .arg(b.team)
        .arg(D::time(before))
        .execute(&mut write)
        .await
        .map_err(b.store.db(what))?;
    finish(&b.store, write, what).await?;
    Ok(D::rows_affected(&done))
}

/// `MessagingBackend::reconcile`: publishing under the same key is the lookup (a held body
/// answers `duplicate`).
async fn reconcile<D: Dialect>(
    b: &SqlBodies<D>,
    envelope: &Envelope,
) -> BusResult<Option<Locator>> {
    envelope.check_for(b.team, b.max_body_bytes)?;
    match publish(b, envelope).await {
        Published::Confirmed { locator, .. } => Ok(Some(locator)),
        Published::Retryable(_) => Ok(None),
        Published::Fatal(e) | Published::Uncertain(e) => Err(e),
    }
}

#[async_trait]
impl<D: Dialect> MessagingBackend for SqlBodies<D> {
    fn name(&self) -> &'static str {
        D::NAME
    }

    fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    async fn publish(&self, envelope: Envelope) -> Published {
        publish(self, &envelope).await
    }

    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>> {
        fetch(self, locator, message_id).await
    }

    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64> {
        retain(self, before).await
    }

    async fn reconcile(&self, envelope: &Envelope) -> BusResult<Option<Locator>> {
        reconcile(self, envelope).await
    }
}
