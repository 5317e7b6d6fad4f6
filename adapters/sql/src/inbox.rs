//! The SQL inbox (`Inbox` over the `inbox_queue` and `inbox_consumers` tables), once for both
//! stores ([`SqlInbox`], [`impl_inbox!`](crate::impl_inbox)).
//!
//! - `publish_reference` inserts one row, deduplicated on `(team, event id)` for the life of
//!   the row (acknowledged rows are kept, so a late re-publish stays a duplicate). The confirmed
//!   locator is `<scheme>:inbox:<seq>`, which the body backend's `fetch` refuses (`Forbidden`).
//!   Every failure is a refusal (`Retryable` or `Fatal`), never `Uncertain`: the insert is
//!   idempotent on the event id, so a retry of one that did land answers `duplicate`.
//! - `fetch_references` leases up to `limit` rows that are not acknowledged, visible at the
//!   clock's now, and handed out fewer than `max_deliver` times, with the store's statement
//!   ([`SqlInboxStore::PICK`]: Postgres `FOR UPDATE SKIP LOCKED`, SQLite one serialised write
//!   transaction), so two fetches never lease the same row; each gets `deliveries + 1` and
//!   becomes invisible for `ack_wait` (the visibility timeout). Oldest first. Nothing is ever
//!   deleted or dropped by the inbox.
//! - `ack_reference` takes the opaque token `<ack prefix>:<team>:<seq>`; a token of another team
//!   or any other string is `Forbidden`; acknowledging twice is `Ok`.
//! - Time comes from the injected [`Clock`], bound into every statement (never `now()` in SQL).

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, InboxRef, InboxStatus, Locator, Published, parse_queue_ack_token,
    queue_ack_token, validate_recipient_key,
};
use crewbus_ports::{Clock, Inbox};
use sqlx::Database;
use uuid::Uuid;

use crate::counter::from_db;
use crate::dialect::{Dialect, PerDialect};
use crate::driver::{Binds, Reads, Stmt, stmt};
use crate::settings::SqlSettings;
use crate::store::{SqlStore, finish};

/// A leased reference as the pick statement returns it: `(seq, event id, payload, deliveries)`.
pub type PickedRow<P> = (i64, Uuid, P, i64);

/// A reference's payload as a store keeps it on the database `DB`: Postgres `text` (`String`),
/// SQLite a `BLOB` of UTF-8 bytes (`Vec<u8>`). How it is bound and read is here (not bounds on
/// the database), so the shared functions need no bound of their own.
pub trait StoredText<DB: Database>: Sized + Send + Unpin + 'static {
    /// `q` with `text` bound as stored as its next argument.
    fn bind<'q>(q: Stmt<'q, DB>, text: &str) -> Stmt<'q, DB>;

    /// Every row of the pick statement `q` (its text and arguments owned), run on `conn`.
    fn picked<'c>(
        q: Stmt<'static, DB>,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Vec<PickedRow<Self>>, sqlx::Error>> + Send + 'c;

    /// The text back. Errors: bytes that are not UTF-8 → `Invalid`.
    fn text(self) -> BusResult<String>;
}

impl<DB: Binds<String> + Reads<PickedRow<String>>> StoredText<DB> for String {
    fn bind<'q>(q: Stmt<'q, DB>, text: &str) -> Stmt<'q, DB> {
        q.arg(text.to_owned())
    }

    fn picked<'c>(
        q: Stmt<'static, DB>,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Vec<PickedRow<String>>, sqlx::Error>> + Send + 'c {
        q.all(conn)
    }

    fn text(self) -> BusResult<String> {
        Ok(self)
    }
}

impl<DB: Binds<Vec<u8>> + Reads<PickedRow<Vec<u8>>>> StoredText<DB> for Vec<u8> {
    fn bind<'q>(q: Stmt<'q, DB>, text: &str) -> Stmt<'q, DB> {
        q.arg(text.as_bytes().to_vec())
    }

    fn picked<'c>(
        q: Stmt<'static, DB>,
        conn: &'c mut DB::Connection,
    ) -> impl Future<Output = Result<Vec<PickedRow<Vec<u8>>>, sqlx::Error>> + Send + 'c {
        q.all(conn)
    }

    fn text(self) -> BusResult<String> {
        String::from_utf8(self)
            .map_err(|_| BusError::invalid("inbox fetch: a payload is not UTF-8"))
    }
}

/// The statement leasing references: the rows of team `$1`, recipient `$2`, not acknowledged,
/// visible at `$3` (`visible_at <= $3`) and handed out fewer than `$4` times, oldest first, at
/// most `$5`, each set to `deliveries + 1` and `visible_at = $6`, returning `seq, event_id,
/// payload, deliveries` (in any order).
const PICK: PerDialect<&str> = PerDialect {
    // The rows picked and locked first (`SKIP LOCKED`: a concurrent fetch takes others), then
    // updated in the same statement.
    postgres: "WITH picked AS (
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
    // One statement in the write transaction: no other writer runs meanwhile.
    sqlite: "UPDATE inbox_queue SET deliveries = deliveries + 1, visible_at = ?6
         WHERE seq IN (
             SELECT seq FROM inbox_queue
             WHERE team_id = ?1 AND recipient_key = ?2 AND acked_at IS NULL
               AND visible_at <= ?3 AND deliveries < ?4
             ORDER BY seq
             LIMIT ?5)
         RETURNING seq, event_id, payload, deliveries",
};

/// One team's inbox as a queue table on an SQL store of dialect `D`
/// (`crewbus_postgres::PostgresInbox`, `crewbus_sqlite::SqliteInbox`).
///
/// - `publish_reference` inserts one row, deduplicated on `(team, event id)` for the life of
///   the row (acknowledged rows are kept, so a late re-publish stays a duplicate). The confirmed
///   locator is `<store>:inbox:<seq>`, which the body backend's `fetch` refuses (`Forbidden`).
/// - `fetch_references` takes up to `limit` rows that are not acknowledged, visible at the
///   clock's now, and handed out fewer than `max_deliver` times (Postgres `FOR UPDATE SKIP
///   LOCKED`; SQLite in its write transaction); each gets `deliveries + 1` and becomes
///   invisible for `ack_wait` (the visibility timeout). Oldest first. Nothing is ever deleted or
///   dropped by the inbox.
/// - `ack_reference` takes the opaque token `<prefix>:<team>:<seq>` ([`Dialect::INBOX_ACK_PREFIX`]);
///   a token of another team or any other string is `Forbidden`; acknowledging twice is `Ok`.
/// - Time comes from the injected [`Clock`], bound into every statement (never `now()` in SQL).
pub struct SqlInbox<D: Dialect> {
    store: SqlStore<D>,
    team: Uuid,
    clock: Arc<dyn Clock>,
    ack_wait: chrono::Duration,
    max_deliver: i64,
}

impl<D: Dialect> Clone for SqlInbox<D> {
    fn clone(&self) -> Self {
        SqlInbox {
            store: self.store.clone(),
            team: self.team,
            clock: self.clock.clone(),
            ack_wait: self.ack_wait,
            max_deliver: self.max_deliver,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlInbox<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlInbox")
            .field("store", &D::NAME)
            .field("team", &self.team)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlInbox<D> {
    /// The inbox of `team` over `store` (migrated by the driver crate's `migrate`): a handed-out
    /// reference not acknowledged within `settings.ack_wait` is handed out again, at most
    /// `settings.max_deliver` times (both saturating); timed by `clock`.
    pub fn new(store: D::Store, team: Uuid, clock: Arc<dyn Clock>, settings: &SqlSettings) -> Self {
        SqlInbox {
            store: SqlStore::new(store),
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

    /// The visibility timeout.
    pub fn ack_wait(&self) -> chrono::Duration {
        self.ack_wait
    }

    /// How many times one reference is handed out at most.
    pub fn max_deliver(&self) -> i64 {
        self.max_deliver
    }

    /// Deletes `recipient_key`'s consumer, as an operator (or an accident) would, and returns
    /// whether it existed. Like a JetStream consumer recreated from the start of the stream, the
    /// next fetch creates a new consumer that hands out every reference still unacknowledged
    /// (delivery counts start again); acknowledged references stay gone. Errors: `Invalid` key;
    /// database busy or down → `Unavailable`.
    pub async fn delete_consumer(&self, recipient_key: &str) -> BusResult<bool> {
        delete_consumer(self, recipient_key).await
    }

    /// Deletes this team's references acknowledged strictly before `before` and returns how
    /// many. Acknowledged rows are otherwise kept so dedup on the event id lasts; after a purge
    /// an event id published again is stored again (the ledger's receipts absorb it), at a new
    /// position (positions are never reused). Unacknowledged references are never deleted.
    /// Errors: database busy or down → `Unavailable`.
    pub async fn purge_acknowledged(&self, before: DateTime<Utc>) -> BusResult<u64> {
        purge_acknowledged(self, before).await
    }
}

/// `Inbox::publish_reference` after the key check: the insert, or the first locator of a
/// repeat, in one write. A repeat whose row vanished before it was read (an operator purge on a
/// store whose statements commit on their own) → `Retryable(Unavailable)`.
async fn publish<D: Dialect>(
    inbox: &SqlInbox<D>,
    recipient_key: &str,
    event_id: Uuid,
    payload: &str,
) -> BusResult<Published> {
    let what = "inbox publish";
    let at = D::time(inbox.clock.now());
    let mut write = inbox.store.write(what).await?;
    let insert = stmt::<D>(
        "INSERT INTO inbox_queue (team_id, recipient_key, event_id, payload, stored_at, visible_at)
         VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (team_id, event_id) DO NOTHING
         RETURNING seq",
    )
    .arg(inbox.team)
    .arg(recipient_key.to_owned())
    .arg(event_id);
    let inserted: Option<(i64,)> = D::InboxPayload::bind(insert, payload)
        .arg(at)
        .optional(&mut write)
        .await
        .map_err(inbox.store.db(what))?;
    let (seq, duplicate) = match inserted {
        Some((seq,)) => (seq, false),
        None => {
            let held: Option<(i64,)> =
                stmt::<D>("SELECT seq FROM inbox_queue WHERE team_id = $1 AND event_id = $2")
                    .arg(inbox.team)
                    .arg(event_id)
                    .optional(&mut write)
                    .await
                    .map_err(inbox.store.db(what))?;
            // Rows are never deleted by the inbox; a vanished row is a concurrent operator
            // purge: the caller may publish again.
            let Some((seq,)) = held else {
                return Ok(Published::Retryable(BusError::unavailable(
                    "inbox reference vanished during publish",
                )));
            };
            (seq, true)
        }
    };
    finish(&inbox.store, write, what).await?;
    Ok(Published::Confirmed {
        locator: Locator::for_inbox_reference(D::NAME, seq),
        duplicate,
    })
}

/// `Inbox::publish_reference`: an invalid key → `Fatal(Invalid)`; every failure a refusal.
async fn publish_reference<D: Dialect>(
    inbox: &SqlInbox<D>,
    recipient_key: &str,
    event_id: Uuid,
    payload: &str,
) -> Published {
    if let Err(e) = validate_recipient_key(recipient_key) {
        return Published::Fatal(e);
    }
    publish(inbox, recipient_key, event_id, payload)
        .await
        .unwrap_or_else(Published::from_error)
}

/// `Inbox::fetch_references`: creates the recipient's consumer (if it has none), then leases
/// up to `limit` references ([`SqlInboxStore::PICK`]), in one write.
async fn fetch_references<D: Dialect>(
    inbox: &SqlInbox<D>,
    recipient_key: &str,
    limit: usize,
) -> BusResult<Vec<InboxRef>> {
    validate_recipient_key(recipient_key)?;
    let what = "inbox fetch";
    let now = inbox.clock.now();
    let mut write = inbox.store.write(what).await?;
    stmt::<D>(
        "INSERT INTO inbox_consumers (team_id, recipient_key, created_at)
         VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    )
    .arg(inbox.team)
    .arg(recipient_key.to_owned())
    .arg(D::time(now))
    .run(&mut write)
    .await
    .map_err(inbox.store.db("inbox consumer"))?;
    let mut rows: Vec<PickedRow<D::InboxPayload>> = if limit == 0 {
        Vec::new()
    } else {
        let pick = stmt::<D>(PICK.of::<D>())
            .arg(inbox.team)
            .arg(recipient_key.to_owned())
            .arg(D::time(now))
            .arg(inbox.max_deliver)
            .arg(i64::try_from(limit).unwrap_or(i64::MAX))
            .arg(D::time(now + inbox.ack_wait));
        D::InboxPayload::picked(pick, &mut write)
            .await
            .map_err(inbox.store.db(what))?
    };
    finish(&inbox.store, write, what).await?;
    rows.sort_unstable_by_key(|r| r.0);
    rows.into_iter()
        .map(|(seq, event_id, payload, deliveries)| {
            Ok(InboxRef {
                event_id,
                payload: payload.text()?,
                ack_subject: queue_ack_token(D::INBOX_ACK_PREFIX, inbox.team, seq),
                stream_seq: from_db(seq),
                deliveries: from_db(deliveries),
            })
        })
        .collect()
}

/// `Inbox::ack_reference`: one write.
async fn ack_reference<D: Dialect>(inbox: &SqlInbox<D>, ack_subject: &str) -> BusResult<()> {
    let seq = parse_queue_ack_token(D::INBOX_ACK_PREFIX, inbox.team, ack_subject)?;
    let what = "inbox ack";
    let mut write = inbox.store.write(what).await?;
    stmt::<D>(
        "UPDATE inbox_queue SET acked_at = $3
         WHERE team_id = $1 AND seq = $2 AND acked_at IS NULL AND deliveries > 0",
    )
    .arg(inbox.team)
    .arg(seq)
    .arg(D::time(inbox.clock.now()))
    .run(&mut write)
    .await
    .map_err(inbox.store.db(what))?;
    finish(&inbox.store, write, what).await
}

/// `Inbox::inbox_status`: one read.
async fn inbox_status<D: Dialect>(
    inbox: &SqlInbox<D>,
    recipient_key: &str,
) -> BusResult<InboxStatus> {
    validate_recipient_key(recipient_key)?;
    let what = "inbox status";
    let mut reader = inbox.store.reader(what).await?;
    let (present, pending, awaiting_ack, redelivered): (bool, i64, i64, i64) = stmt::<D>(
        "SELECT
             EXISTS (SELECT 1 FROM inbox_consumers WHERE team_id = $1 AND recipient_key = $2),
             count(*) FILTER (WHERE deliveries = 0),
             count(*) FILTER (WHERE deliveries > 0 AND (visible_at > $3 OR deliveries < $4)),
             count(*) FILTER (WHERE deliveries > 1 AND (visible_at > $3 OR deliveries < $4))
         FROM inbox_queue
         WHERE team_id = $1 AND recipient_key = $2 AND acked_at IS NULL",
    )
    .arg(inbox.team)
    .arg(recipient_key.to_owned())
    .arg(D::time(inbox.clock.now()))
    .arg(inbox.max_deliver)
    .one(&mut reader)
    .await
    .map_err(inbox.store.db(what))?;
    Ok(InboxStatus::from_counts(
        present,
        from_db(pending),
        from_db(awaiting_ack),
        from_db(redelivered),
    ))
}

/// Deletes `recipient_key`'s consumer and makes its unacknowledged references new again
/// (delivery counts 0, visible from their store time), in one transaction; returns whether the
/// consumer existed. Errors: `Invalid` key; database busy or down → `Unavailable`.
async fn delete_consumer<D: Dialect>(inbox: &SqlInbox<D>, recipient_key: &str) -> BusResult<bool> {
    validate_recipient_key(recipient_key)?;
    let what = "inbox consumer delete";
    let mut tx = inbox.store.begin(what).await?;
    let deleted =
        stmt::<D>("DELETE FROM inbox_consumers WHERE team_id = $1 AND recipient_key = $2")
            .arg(inbox.team)
            .arg(recipient_key.to_owned())
            .execute(&mut tx)
            .await
            .map_err(inbox.store.db(what))?;
    stmt::<D>(
        "UPDATE inbox_queue SET deliveries = 0, visible_at = stored_at
         WHERE team_id = $1 AND recipient_key = $2 AND acked_at IS NULL",
    )
    .arg(inbox.team)
    .arg(recipient_key.to_owned())
    .run(&mut tx)
    .await
    .map_err(inbox.store.db(what))?;
    inbox.store.commit(tx).await.map_err(inbox.store.db(what))?;
    Ok(D::rows_affected(&deleted) == 1)
}

/// Deletes the team's references acknowledged strictly before `before`, in one write; returns
/// how many. Unacknowledged references are never deleted. Errors: database busy or down →
/// `Unavailable`.
async fn purge_acknowledged<D: Dialect>(
    inbox: &SqlInbox<D>,
    before: DateTime<Utc>,
) -> BusResult<u64> {
    let what = "inbox purge";
    let mut write = inbox.store.write(what).await?;
    let done = stmt::<D>(
        "DELETE FROM inbox_queue WHERE team_id = $1 AND acked_at IS NOT NULL AND acked_at < $2",
    )
    .arg(inbox.team)
    .arg(D::time(before))
    .execute(&mut write)
    .await
    .map_err(inbox.store.db(what))?;
    finish(&inbox.store, write, what).await?;
    Ok(D::rows_affected(&done))
}

#[async_trait]
impl<D: Dialect> Inbox for SqlInbox<D> {
    async fn publish_reference(
        &self,
        recipient_key: &str,
        event_id: Uuid,
        payload: &str,
    ) -> Published {
        publish_reference(self, recipient_key, event_id, payload).await
    }

    async fn fetch_references(
        &self,
        recipient_key: &str,
        limit: usize,
    ) -> BusResult<Vec<InboxRef>> {
        fetch_references(self, recipient_key, limit).await
    }

    async fn ack_reference(&self, ack_subject: &str) -> BusResult<()> {
        ack_reference(self, ack_subject).await
    }

    async fn inbox_status(&self, recipient_key: &str) -> BusResult<InboxStatus> {
        inbox_status(self, recipient_key).await
    }
}
