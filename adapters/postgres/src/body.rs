//! `PostgresBackend`: message bodies in the `bodies` table, the table the ledger's send
//! transaction writes for Postgres conversations.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, Locator, Published, stored_body};
use crewbus_ports::{Clock, MessagingBackend};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::error::{bus_error, may_have_committed};
use crate::settings::PostgresSettings;

/// The locator scheme (and backend name) of Postgres bodies: `postgres:<message id>`.
pub(crate) const SCHEME: &str = "postgres";

/// One team's bodies in Postgres.
///
/// - `publish` inserts into `bodies` keyed by message id, unique on `publish_key`, so it is
///   idempotent for the life of the row: the same key again → `Confirmed { duplicate: true }`,
///   the same message id under another key → `Fatal(Conflict)`; another team's envelope →
///   `Fatal(Forbidden)`; a body above [`PostgresSettings::max_body_bytes`] → `Fatal(TooLarge)`.
///   Bodies are stored as UTF-8 bytes (`bytea`), so every Rust string is storable, U+0000
///   included (Postgres `text` refuses it).
/// - A connection lost after the statement was sent → `Uncertain(Unavailable)`; the database
///   unreachable before sending (pool timeout) or refusing with a retryable SQLSTATE →
///   `Retryable`.
/// - Store times (for `retain`) come from the injected [`Clock`].
#[derive(Clone)]
pub struct PostgresBackend {
    pool: PgPool,
    team: Uuid,
    clock: Arc<dyn Clock>,
    max_body_bytes: u64,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
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

/// Inserts `envelope`'s body stored at `at`, idempotently on its publish key. Used by
/// [`PostgresBackend::publish`] and by the ledger's send transaction (on its connection).
///
/// Errors: the message id or publish key already held with another key/message/team →
/// `Err(Ok(Conflict))`; a database error → `Err(Err(sqlx error))` for the caller to classify.
pub(crate) async fn store_body(
    conn: &mut PgConnection,
    envelope: &Envelope,
    at: DateTime<Utc>,
) -> Result<Stored, Result<BusError, sqlx::Error>> {
    // A row deleted by retention between the insert and the lookup makes us go round again.
    for _ in 0..3 {
        let inserted = sqlx::query(
            "INSERT INTO bodies (message_id, team_id, conversation_id, publish_key, body, stored_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT DO NOTHING",
        )
        .bind(envelope.message_id)
        .bind(envelope.team_id)
        .bind(envelope.conversation_id)
        .bind(envelope.publish_key)
        .bind(envelope.body.as_bytes())
        .bind(at)
        .execute(&mut *conn)
        .await
        .map_err(Err)?;
        if inserted.rows_affected() == 1 {
            return Ok(Stored::New);
        }
        let held: Vec<(Uuid, Uuid, Uuid)> = sqlx::query_as(
            "SELECT message_id, team_id, publish_key FROM bodies
             WHERE message_id = $1 OR publish_key = $2",
        )
        .bind(envelope.message_id)
        .bind(envelope.publish_key)
        .fetch_all(&mut *conn)
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

impl PostgresBackend {
    /// The body backend of `team` over `pool`, with the size limit of `settings` and store times
    /// from `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pool: PgPool,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &PostgresSettings,
    ) -> Self {
        PostgresBackend {
            pool,
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
        let at = self.clock.now();
        let mut conn = match self.pool.acquire().await {
            Ok(conn) => conn,
            Err(e) => return Published::from_error(bus_error(e, "body store")),
        };
        match store_body(&mut conn, envelope, at).await {
            Ok(stored) => Published::Confirmed {
                locator: locator_for(envelope.message_id),
                duplicate: matches!(stored, Stored::Duplicate),
            },
            Err(Ok(refused)) => Published::from_error(refused),
            Err(Err(e)) if may_have_committed(&e) => {
                Published::Uncertain(bus_error(e, "body store"))
            }
            Err(Err(e)) => Published::from_error(bus_error(e, "body store")),
        }
    }
}

#[async_trait]
impl MessagingBackend for PostgresBackend {
    fn name(&self) -> &'static str {
        SCHEME
    }

    async fn publish(&self, envelope: Envelope) -> Published {
        self.store(&envelope).await
    }

    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>> {
        let id = locator.message_id_for(SCHEME, message_id)?;
        let row: Option<(Uuid, Vec<u8>)> =
            sqlx::query_as("SELECT team_id, body FROM bodies WHERE message_id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| bus_error(e, "body fetch"))?;
        stored_body(self.team, row)
    }

    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64> {
        let done = sqlx::query("DELETE FROM bodies WHERE team_id = $1 AND stored_at < $2")
            .bind(self.team)
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(|e| bus_error(e, "body retention"))?;
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
