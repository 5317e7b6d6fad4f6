//! `PostgresInbox`: per-recipient references in the `inbox_queue` table (written once for both
//! SQL stores: [`crewbus_sql::inbox`]).

use std::sync::Arc;

use crewbus_ports::Clock;
use crewbus_sql::inbox::{SqlInbox, SqlInboxStore};
use sqlx::PgPool;
use uuid::Uuid;

use crate::settings::PostgresSettings;
use crate::store::Store;

/// One team's inbox as a queue table.
///
/// - `publish_reference` inserts one row, deduplicated on `(team, event id)` for the life of
///   the row (acknowledged rows are kept, so a late re-publish stays a duplicate). The confirmed
///   locator is `postgres:inbox:<seq>`, which the body backend's `fetch` refuses (`Forbidden`).
///   The insert and the lookup of a repeat commit on their own: a repeat whose row an operator
///   purged in between → `Retryable(Unavailable)`.
/// - `fetch_references` takes, with `FOR UPDATE SKIP LOCKED`, up to `limit` rows that are not
///   acknowledged, visible at the clock's now, and handed out fewer than `max_deliver` times;
///   each gets `deliveries + 1` and becomes invisible for `ack_wait` (the visibility timeout).
///   Oldest first. Nothing is ever deleted or dropped by the inbox.
/// - `ack_reference` takes the opaque token `pg-inbox:<team>:<seq>`; a token of another team or
///   any other string is `Forbidden`; acknowledging twice is `Ok`.
/// - Time comes from the injected [`Clock`], bound into every statement (never `now()` in SQL).
#[derive(Clone)]
pub struct PostgresInbox(SqlInbox<Store>);

crewbus_sql::impl_inbox!(PostgresInbox);

impl SqlInboxStore for Store {
    /// `inbox_queue.payload` is `text`.
    type Payload = String;

    const ACK_PREFIX: &'static str = "pg-inbox";

    /// The rows picked and locked first (`SKIP LOCKED`: a concurrent fetch takes others), then
    /// updated in the same statement.
    const PICK: &'static str = "WITH picked AS (
             SELECT seq FROM inbox_queue
             WHERE team_id = $1 AND recipient_key = $2 AND acked_at IS NULL
               AND visible_at <= $3 AND deliveries < $4
             ORDER BY seq
             LIMIT $5
             FOR UPDATE SKIP LOCKED)
         UPDATE inbox_queue q
         SET deliveries = q.deliveries + 1, visible_at = $6
         FROM picked WHERE q.seq = picked.seq
         RETURNING q.seq, q.event_id, q.payload, q.deliveries";
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
        PostgresInbox(SqlInbox::new(
            Store(pool),
            team,
            clock,
            settings.ack_wait,
            settings.max_deliver,
        ))
    }
}
