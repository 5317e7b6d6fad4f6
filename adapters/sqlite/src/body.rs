//! `SqliteBackend`: message bodies in the `bodies` table, the table the ledger's send
//! transaction writes for SQLite conversations.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, Locator, Published, stored_body};
use crewbus_ports::{Clock, MessagingBackend};
use sqlx::SqliteConnection;
use uuid::Uuid;

use crate::codec::Ts;
use crate::connect::SqlitePools;
use crate::settings::SqliteSettings;

/// The locator scheme (and backend name) of SQLite bodies: `sqlite:<message id>`.
pub(crate) const SCHEME: &str = crate::NAME;

/// One team's bodies in SQLite.
///
/// - `publish` inserts into `bodies` keyed by message id, unique on `publish_key`, in one write
///   transaction, so it is idempotent for the life of the row: the same key again →
///   `Confirmed { duplicate: true }`, the same message id under another key →
///   `Fatal(Conflict)`; another team's envelope → `Fatal(Forbidden)`; a body above
///   [`SqliteSettings::max_body_bytes`] → `Fatal(TooLarge)`. Bodies are stored as UTF-8 bytes
///   (`BLOB`), U+0000 included.
/// - The database busy past the busy timeout, or unreachable → `Retryable(Unavailable)` (the
///   transaction was rolled back: nothing was stored); the driver's worker lost mid-statement →
///   `Uncertain(Unavailable)`.
/// - Store times (for `retain`) come from the injected [`Clock`].
#[derive(Clone)]
pub struct SqliteBackend {
    pools: SqlitePools,
    team: Uuid,
    clock: Arc<dyn Clock>,
    max_body_bytes: u64,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("team", &self.team)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// What storing a body came to.
pub(crate) enum Stored {
    /// Written now.
    New,
    /// Already held under the same key.
    Duplicate,
}

/// The locator of the body of `message_id`.
pub(crate) fn locator_for(message_id: Uuid) -> Locator {
    Locator::for_message(SCHEME, message_id)
}

/// Inserts `envelope`'s body stored at `at`, idempotently on its publish key, inside the
/// caller's write transaction (so the insert and the lookup see the same rows). Used by
/// [`SqliteBackend::publish`] and by the ledger's send transaction.
///
/// Errors: the message id or publish key already held with another key/message/team →
/// `Err(Ok(Conflict))`; a database error → `Err(Err(sqlx error))` for the caller to classify.
pub(crate) async fn store_body(
    conn: &mut SqliteConnection,
    envelope: &Envelope,
    at: DateTime<Utc>,
) -> Result<Stored, Result<BusError, sqlx::Error>> {
    let inserted = sqlx::query(
        "INSERT INTO bodies (message_id, team_id, conversation_id, publish_key, body, stored_at)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT DO NOTHING",
    )
    .bind(envelope.message_id)
    .bind(envelope.team_id)
    .bind(envelope.conversation_id)
    .bind(envelope.publish_key)
    .bind(envelope.body.as_bytes())
    .bind(Ts(at))
    .execute(&mut *conn)
    .await
    .map_err(Err)?;
    if inserted.rows_affected() == 1 {
        return Ok(Stored::New);
    }
    let held: Vec<(Uuid, Uuid, Uuid)> = sqlx::query_as(
        "SELECT message_id, team_id, publish_key FROM bodies
         WHERE message_id = ? OR publish_key = ?",
    )
    .bind(envelope.message_id)
    .bind(envelope.publish_key)
    .fetch_all(&mut *conn)
    .await
    .map_err(Err)?;
    envelope
        .check_held(&held)
        .map(|()| Stored::Duplicate)
        .map_err(Ok)
}

impl SqliteBackend {
    /// The body backend of `team` over `pools`, with the size limit of `settings` and store
    /// times from `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pools: SqlitePools,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &SqliteSettings,
    ) -> Self {
        SqliteBackend {
            pools,
            team,
            clock,
            max_body_bytes: settings.max_body_bytes,
        }
    }

    /// The team this backend serves.
    pub fn team(&self) -> Uuid {
        self.team
    }

    /// The effective maximum body size, in bytes.
    pub fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    async fn store(&self, envelope: &Envelope) -> Published {
        if let Err(e) = envelope.check_for(self.team, self.max_body_bytes) {
            return Published::Fatal(e);
        }
        let what = "body store";
        let at = self.clock.now();
        let mut tx = match self.pools.begin(what).await {
            Ok(tx) => tx,
            Err(e) => return Published::from_error(e),
        };
        let stored = match store_body(&mut tx, envelope, at).await {
            Ok(stored) => stored,
            Err(Ok(refused)) => return Published::from_error(refused),
            Err(Err(e)) => return self.failed(e, what),
        };
        if let Err(e) = tx.commit().await {
            return self.failed(e, what);
        }
        Published::Confirmed {
            locator: locator_for(envelope.message_id),
            duplicate: matches!(stored, Stored::Duplicate),
        }
    }

    /// A failed statement: uncertain only when the driver's worker thread was lost (SQLite runs
    /// in process: any other error means the transaction did not commit).
    fn failed(&self, e: sqlx::Error, what: &str) -> Published {
        let uncertain = matches!(e, sqlx::Error::WorkerCrashed);
        let e = self.pools.bus_error(e, what);
        if uncertain {
            Published::Uncertain(e)
        } else {
            Published::from_error(e)
        }
    }
}

#[async_trait]
impl MessagingBackend for SqliteBackend {
    fn name(&self) -> &'static str {
        SCHEME
    }

    fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    async fn publish(&self, envelope: Envelope) -> Published {
        self.store(&envelope).await
    }

    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>> {
        let id = locator.message_id_for(SCHEME, message_id)?;
        let row: Option<(Uuid, Vec<u8>)> =
            sqlx::query_as("SELECT team_id, body FROM bodies WHERE message_id = ?")
                .bind(id)
                .fetch_optional(self.pools.reader())
                .await
                .map_err(self.pools.db("body fetch"))?;
        stored_body(self.team, row)
    }

    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64> {
        let what = "body retention";
        let mut tx = self.pools.begin(what).await?;
        let done = sqlx::query("DELETE FROM bodies WHERE team_id = ? AND stored_at < ?")
            .bind(self.team)
            .bind(Ts(before))
            .execute(&mut *tx)
            .await
            .map_err(self.pools.db(what))?;
        tx.commit().await.map_err(self.pools.db(what))?;
        Ok(done.rows_affected())
    }

    async fn reconcile(&self, envelope: &Envelope) -> BusResult<Option<Locator>> {
        envelope.check_for(self.team, self.max_body_bytes)?;
        // Publishing under the same key is the lookup: a held body answers `duplicate`.
        match self.store(envelope).await {
            Published::Confirmed { locator, .. } => Ok(Some(locator)),
            Published::Retryable(_) => Ok(None),
            Published::Fatal(e) | Published::Uncertain(e) => Err(e),
        }
    }
}
