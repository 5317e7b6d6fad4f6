//! `PostgresInbox`: per-recipient references in the `inbox_queue` table.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, InboxRef, InboxStatus, Locator, Published, parse_queue_ack_token,
    queue_ack_token, validate_recipient_key,
};
use crewbus_ports::{Clock, Inbox};
use sqlx::PgPool;
use uuid::Uuid;

use crate::body::SCHEME;
use crate::error::bus_error;
use crate::settings::PostgresSettings;

/// The prefix of every ack token this inbox issues: `pg-inbox:<team>:<seq>`.
const ACK_PREFIX: &str = "pg-inbox";

/// One team's inbox as a queue table.
///
/// - `publish_reference` inserts one row, deduplicated on `(team, event id)` for the life of
///   the row (acknowledged rows are kept, so a late re-publish stays a duplicate). The confirmed
///   locator is `postgres:inbox:<seq>`, which the body backend's `fetch` refuses (`Forbidden`).
/// - `fetch_references` takes, with `FOR UPDATE SKIP LOCKED`, up to `limit` rows that are not
///   acknowledged, visible at the clock's now, and handed out fewer than `max_deliver` times;
///   each gets `deliveries + 1` and becomes invisible for `ack_wait` (the visibility timeout).
///   Oldest first. Nothing is ever deleted or dropped by the inbox.
/// - `ack_reference` takes the opaque token `pg-inbox:<team>:<seq>`; a token of another team or
///   any other string is `Forbidden`; acknowledging twice is `Ok`.
/// - Time comes from the injected [`Clock`], bound into every statement (never `now()` in SQL).
#[derive(Clone)]
pub struct PostgresInbox {
    pool: PgPool,
    team: Uuid,
    clock: Arc<dyn Clock>,
    ack_wait: chrono::Duration,
    max_deliver: i64,
}

impl std::fmt::Debug for PostgresInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresInbox")
            .field("team", &self.team)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .finish_non_exhaustive()
    }
}

impl PostgresInbox {
    /// The inbox of `team` over `pool`, with `settings`' ack wait and max deliver, timed by
    /// `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pool: PgPool,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &PostgresSettings,
    ) -> Self {
        PostgresInbox {
            pool,
            team,
            clock,
            ack_wait: chrono::Duration::from_std(settings.ack_wait)
                .unwrap_or(chrono::Duration::MAX),
            max_deliver: i64::try_from(settings.max_deliver).unwrap_or(i64::MAX),
        }
    }

    /// The team this inbox serves.
    pub fn team(&self) -> Uuid {
        self.team
    }

    /// Deletes `recipient_key`'s consumer, as an operator (or an accident) would, and returns
    /// whether it existed. Like a JetStream consumer recreated from the start of the stream, the
    /// next fetch creates a new consumer that hands out every reference still unacknowledged
    /// (delivery counts start again); acknowledged references stay gone. Errors: `Invalid` key;
    /// database down → `Unavailable`.
    pub async fn delete_consumer(&self, recipient_key: &str) -> BusResult<bool> {
        validate_recipient_key(recipient_key)?;
        let what = "inbox consumer delete";
        let mut tx = self.pool.begin().await.map_err(|e| bus_error(e, what))?;
        let deleted =
            sqlx::query("DELETE FROM inbox_consumers WHERE team_id = $1 AND recipient_key = $2")
                .bind(self.team)
                .bind(recipient_key)
                .execute(&mut *tx)
                .await
                .map_err(|e| bus_error(e, what))?;
        sqlx::query(
            "UPDATE inbox_queue SET deliveries = 0, visible_at = stored_at
             WHERE team_id = $1 AND recipient_key = $2 AND acked_at IS NULL",
        )
        .bind(self.team)
        .bind(recipient_key)
        .execute(&mut *tx)
        .await
        .map_err(|e| bus_error(e, what))?;
        tx.commit().await.map_err(|e| bus_error(e, what))?;
        Ok(deleted.rows_affected() == 1)
    }

    /// Deletes this team's references acknowledged strictly before `before` and returns how
    /// many. Acknowledged rows are otherwise kept so dedup on the event id lasts; after a purge an
    /// event id published again is stored again (the ledger's receipts absorb it). Unacknowledged
    /// references are never deleted. Errors: database down → `Unavailable`.
    pub async fn purge_acknowledged(&self, before: DateTime<Utc>) -> BusResult<u64> {
        let done = sqlx::query(
            "DELETE FROM inbox_queue WHERE team_id = $1 AND acked_at IS NOT NULL AND acked_at < $2",
        )
        .bind(self.team)
        .bind(before)
        .execute(&self.pool)
        .await
        .map_err(|e| bus_error(e, "inbox purge"))?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl Inbox for PostgresInbox {
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published {
        if let Err(e) = validate_recipient_key(recipient_key) {
            return Published::Fatal(e);
        }
        let at = self.clock.now();
        let inserted: Result<Option<(i64,)>, _> = sqlx::query_as(
            "INSERT INTO inbox_queue (team_id, recipient_key, event_id, payload, stored_at, visible_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (team_id, event_id) DO NOTHING
             RETURNING seq",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(event_id)
        .bind(payload)
        .bind(at)
        .fetch_optional(&self.pool)
        .await;
        let (seq, duplicate) = match inserted {
            Ok(Some((seq,))) => (seq, false),
            Ok(None) => {
                let held: Result<Option<(i64,)>, _> = sqlx::query_as(
                    "SELECT seq FROM inbox_queue WHERE team_id = $1 AND event_id = $2",
                )
                .bind(self.team)
                .bind(event_id)
                .fetch_optional(&self.pool)
                .await;
                match held {
                    Ok(Some((seq,))) => (seq, true),
                    // Rows are never deleted by the inbox; a vanished row is a concurrent
                    // operator purge: the caller may publish again.
                    Ok(None) => {
                        return Published::Retryable(BusError::unavailable(
                            "inbox reference vanished during publish",
                        ));
                    }
                    Err(e) => return Published::from_error(bus_error(e, "inbox publish")),
                }
            }
            // An insert is idempotent on the event id, so an unanswered one is simply retried:
            // Retryable is truthful even when the row did land (the retry answers `duplicate`).
            Err(e) => return Published::from_error(bus_error(e, "inbox publish")),
        };
        Published::Confirmed {
            locator: Locator::for_inbox_reference(SCHEME, seq),
            duplicate,
        }
    }

    async fn fetch_references(
        &self,
        recipient_key: &str,
        limit: usize,
    ) -> BusResult<Vec<InboxRef>> {
        validate_recipient_key(recipient_key)?;
        let now = self.clock.now();
        sqlx::query(
            "INSERT INTO inbox_consumers (team_id, recipient_key, created_at)
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| bus_error(e, "inbox consumer"))?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows: Vec<(i64, Uuid, String, i64)> = sqlx::query_as(
            "WITH picked AS (
                 SELECT seq FROM inbox_queue
                 WHERE team_id = $1 AND recipient_key = $2 AND acked_at IS NULL
                   AND visible_at <= $3 AND deliveries < $4
                 ORDER BY seq
                 LIMIT $5
                 FOR UPDATE SKIP LOCKED)
             UPDATE inbox_queue q
             SET deliveries = q.deliveries + 1, visible_at = $6
             FROM picked WHERE q.seq = picked.seq
             RETURNING q.seq, q.event_id, q.payload, q.deliveries",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(now)
        .bind(self.max_deliver)
        .bind(limit)
        .bind(now + self.ack_wait)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| bus_error(e, "inbox fetch"))?;
        rows.sort_unstable_by_key(|r| r.0);
        Ok(rows
            .into_iter()
            .map(|(seq, event_id, payload, deliveries)| InboxRef {
                event_id,
                payload,
                ack_subject: queue_ack_token(ACK_PREFIX, self.team, seq),
                stream_seq: seq as u64,
                deliveries: deliveries as u64,
            })
            .collect())
    }

    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()> {
        let seq = parse_queue_ack_token(ACK_PREFIX, self.team, ack_subject)?;
        sqlx::query(
            "UPDATE inbox_queue SET acked_at = $3
             WHERE team_id = $1 AND seq = $2 AND acked_at IS NULL AND deliveries > 0",
        )
        .bind(self.team)
        .bind(seq)
        .bind(self.clock.now())
        .execute(&self.pool)
        .await
        .map_err(|e| bus_error(e, "inbox ack"))?;
        Ok(())
    }

    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus> {
        validate_recipient_key(recipient_key)?;
        let (present, pending, awaiting_ack, redelivered): (bool, i64, i64, i64) = sqlx::query_as(
            "SELECT
                 EXISTS (SELECT 1 FROM inbox_consumers WHERE team_id = $1 AND recipient_key = $2),
                 count(*) FILTER (WHERE deliveries = 0),
                 count(*) FILTER (WHERE deliveries > 0 AND (visible_at > $3 OR deliveries < $4)),
                 count(*) FILTER (WHERE deliveries > 1 AND (visible_at > $3 OR deliveries < $4))
             FROM inbox_queue
             WHERE team_id = $1 AND recipient_key = $2 AND acked_at IS NULL",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(self.clock.now())
        .bind(self.max_deliver)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| bus_error(e, "inbox status"))?;
        Ok(InboxStatus::from_counts(
            present,
            pending as u64,
            awaiting_ack as u64,
            redelivered as u64,
        ))
    }
}
