//! `SqliteInbox`: per-recipient references in the `inbox_queue` table.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, InboxRef, InboxStatus, Locator, Published, parse_queue_ack_token,
    queue_ack_token, validate_recipient_key,
};
use crewbus_ports::{Clock, Inbox};
use uuid::Uuid;

use crate::body::SCHEME;
use crate::codec::{Ts, from_db};
use crate::connect::SqlitePools;
use crate::settings::SqliteSettings;

/// The prefix of every ack token this inbox issues: `sqlite-inbox:<team>:<seq>`.
const ACK_PREFIX: &str = "sqlite-inbox";

/// One team's inbox as a queue table.
///
/// - `publish_reference` inserts one row, deduplicated on `(team, event id)` for the life of
///   the row (acknowledged rows are kept, so a late re-publish stays a duplicate). The confirmed
///   locator is `sqlite:inbox:<seq>`, which the body backend's `fetch` refuses (`Forbidden`).
/// - `fetch_references` leases, in one write transaction, up to `limit` rows that are not
///   acknowledged, visible at the clock's now, and handed out fewer than `max_deliver` times
///   (`UPDATE … WHERE seq IN (SELECT … LIMIT ?) RETURNING`; write transactions are serialised,
///   so two fetches never lease the same row); each gets `deliveries + 1` and becomes invisible
///   for `ack_wait` (the visibility timeout). Oldest first. Nothing is ever deleted or dropped
///   by the inbox.
/// - `ack_reference` takes the opaque token `sqlite-inbox:<team>:<seq>`; a token of another team
///   or any other string is `Forbidden`; acknowledging twice is `Ok`.
/// - Time comes from the injected [`Clock`], bound into every statement.
#[derive(Clone)]
pub struct SqliteInbox {
    pools: SqlitePools,
    team: Uuid,
    clock: Arc<dyn Clock>,
    ack_wait: chrono::Duration,
    max_deliver: i64,
}

impl std::fmt::Debug for SqliteInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteInbox")
            .field("team", &self.team)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .finish_non_exhaustive()
    }
}

impl SqliteInbox {
    /// The inbox of `team` over `pools`, with `settings`' ack wait and max deliver, timed by
    /// `clock`. The schema must be migrated ([`crate::migrate`]).
    pub fn new(
        pools: SqlitePools,
        team: Uuid,
        clock: Arc<dyn Clock>,
        settings: &SqliteSettings,
    ) -> Self {
        SqliteInbox {
            pools,
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
    /// whether it existed. The next fetch creates a new consumer that hands out every reference
    /// still unacknowledged (delivery counts start again); acknowledged references stay gone.
    /// Errors: `Invalid` key; database busy or down → `Unavailable`.
    pub async fn delete_consumer(&self, recipient_key: &str) -> BusResult<bool> {
        validate_recipient_key(recipient_key)?;
        let what = "inbox consumer delete";
        let mut tx = self.pools.begin(what).await?;
        let deleted =
            sqlx::query("DELETE FROM inbox_consumers WHERE team_id = ? AND recipient_key = ?")
                .bind(self.team)
                .bind(recipient_key)
                .execute(&mut *tx)
                .await
                .map_err(self.pools.db(what))?;
        sqlx::query(
            "UPDATE inbox_queue SET deliveries = 0, visible_at = stored_at
             WHERE team_id = ? AND recipient_key = ? AND acked_at IS NULL",
        )
        .bind(self.team)
        .bind(recipient_key)
        .execute(&mut *tx)
        .await
        .map_err(self.pools.db(what))?;
        tx.commit().await.map_err(self.pools.db(what))?;
        Ok(deleted.rows_affected() == 1)
    }

    /// Deletes this team's references acknowledged strictly before `before` and returns how
    /// many. Acknowledged rows are otherwise kept so dedup on the event id lasts; after a purge
    /// an event id published again is stored again (the ledger's receipts absorb it), at a new
    /// position (positions are never reused). Unacknowledged references are never deleted.
    /// Errors: database busy or down → `Unavailable`.
    pub async fn purge_acknowledged(&self, before: DateTime<Utc>) -> BusResult<u64> {
        let what = "inbox purge";
        let mut tx = self.pools.begin(what).await?;
        let done = sqlx::query(
            "DELETE FROM inbox_queue WHERE team_id = ? AND acked_at IS NOT NULL AND acked_at < ?",
        )
        .bind(self.team)
        .bind(Ts(before))
        .execute(&mut *tx)
        .await
        .map_err(self.pools.db(what))?;
        tx.commit().await.map_err(self.pools.db(what))?;
        Ok(done.rows_affected())
    }

    /// `publish_reference` after the key check: the insert, or the first locator of a repeat,
    /// in one write transaction.
    async fn publish(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> BusResult<Published> {
        let what = "inbox publish";
        let at = Ts(self.clock.now());
        let mut tx = self.pools.begin(what).await?;
        let inserted: Option<i64> = sqlx::query_scalar(
            "INSERT INTO inbox_queue
                 (team_id, recipient_key, event_id, payload, stored_at, visible_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?5)
             ON CONFLICT (team_id, event_id) DO NOTHING
             RETURNING seq",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(event_id)
        .bind(payload.as_bytes())
        .bind(at)
        .fetch_optional(&mut *tx)
        .await
        .map_err(self.pools.db(what))?;
        let (seq, duplicate) = match inserted {
            Some(seq) => (seq, false),
            None => {
                let held: i64 = sqlx::query_scalar(
                    "SELECT seq FROM inbox_queue WHERE team_id = ? AND event_id = ?",
                )
                .bind(self.team)
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await
                .map_err(self.pools.db(what))?;
                (held, true)
            }
        };
        tx.commit().await.map_err(self.pools.db(what))?;
        Ok(Published::Confirmed {
            locator: Locator::for_inbox_reference(SCHEME, seq),
            duplicate,
        })
    }
}

#[async_trait]
impl Inbox for SqliteInbox {
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published {
        if let Err(e) = validate_recipient_key(recipient_key) {
            return Published::Fatal(e);
        }
        // SQLite runs in process: a failed transaction did not commit, so every error is a
        // refusal (`Retryable` for busy or unavailable), never `Uncertain`.
        self.publish(recipient_key, event_id, payload)
            .await
            .unwrap_or_else(Published::from_error)
    }

    async fn fetch_references(
        &self,
        recipient_key: &str,
        limit: usize,
    ) -> BusResult<Vec<InboxRef>> {
        validate_recipient_key(recipient_key)?;
        let what = "inbox fetch";
        let now = self.clock.now();
        let mut tx = self.pools.begin(what).await?;
        sqlx::query(
            "INSERT INTO inbox_consumers (team_id, recipient_key, created_at)
             VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(Ts(now))
        .execute(&mut *tx)
        .await
        .map_err(self.pools.db("inbox consumer"))?;
        let mut rows: Vec<(i64, Uuid, Vec<u8>, i64)> = if limit == 0 {
            Vec::new()
        } else {
            sqlx::query_as(
                "UPDATE inbox_queue SET deliveries = deliveries + 1, visible_at = ?6
                 WHERE seq IN (
                     SELECT seq FROM inbox_queue
                     WHERE team_id = ?1 AND recipient_key = ?2 AND acked_at IS NULL
                       AND visible_at <= ?3 AND deliveries < ?4
                     ORDER BY seq
                     LIMIT ?5)
                 RETURNING seq, event_id, payload, deliveries",
            )
            .bind(self.team)
            .bind(recipient_key)
            .bind(Ts(now))
            .bind(self.max_deliver)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(Ts(now + self.ack_wait))
            .fetch_all(&mut *tx)
            .await
            .map_err(self.pools.db(what))?
        };
        tx.commit().await.map_err(self.pools.db(what))?;
        rows.sort_unstable_by_key(|r| r.0);
        rows.into_iter()
            .map(|(seq, event_id, payload, deliveries)| {
                Ok(InboxRef {
                    event_id,
                    payload: String::from_utf8(payload)
                        .map_err(|_| BusError::invalid("inbox fetch: a payload is not UTF-8"))?,
                    ack_subject: queue_ack_token(ACK_PREFIX, self.team, seq),
                    stream_seq: from_db(seq),
                    deliveries: from_db(deliveries),
                })
            })
            .collect()
    }

    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()> {
        let seq = parse_queue_ack_token(ACK_PREFIX, self.team, ack_subject)?;
        let what = "inbox ack";
        let mut tx = self.pools.begin(what).await?;
        sqlx::query(
            "UPDATE inbox_queue SET acked_at = ?
             WHERE team_id = ? AND seq = ? AND acked_at IS NULL AND deliveries > 0",
        )
        .bind(Ts(self.clock.now()))
        .bind(self.team)
        .bind(seq)
        .execute(&mut *tx)
        .await
        .map_err(self.pools.db(what))?;
        tx.commit().await.map_err(self.pools.db(what))?;
        Ok(())
    }

    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus> {
        validate_recipient_key(recipient_key)?;
        let (present, pending, awaiting_ack, redelivered): (bool, i64, i64, i64) = sqlx::query_as(
            "SELECT
                 EXISTS (SELECT 1 FROM inbox_consumers WHERE team_id = ?1 AND recipient_key = ?2),
                 count(*) FILTER (WHERE deliveries = 0),
                 count(*) FILTER (WHERE deliveries > 0 AND (visible_at > ?3 OR deliveries < ?4)),
                 count(*) FILTER (WHERE deliveries > 1 AND (visible_at > ?3 OR deliveries < ?4))
             FROM inbox_queue
             WHERE team_id = ?1 AND recipient_key = ?2 AND acked_at IS NULL",
        )
        .bind(self.team)
        .bind(recipient_key)
        .bind(Ts(self.clock.now()))
        .bind(self.max_deliver)
        .fetch_one(self.pools.reader())
        .await
        .map_err(self.pools.db("inbox status"))?;
        Ok(InboxStatus::from_counts(
            present,
            from_db(pending),
            from_db(awaiting_ack),
            from_db(redelivered),
        ))
    }
}
