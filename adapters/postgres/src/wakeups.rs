//! Wake-ups over Postgres `LISTEN/NOTIFY`: a message sent through one crewbus server wakes an
//! agent waiting on another.

use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult, Wakeup, WakeupTarget};
use crewbus_ports::{WakeupListener, Wakeups};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener};

use crate::error::bus_error;

/// The one channel every crewbus server of a database listens on; each notification's payload
/// is one `team:agent` ([`WakeupTarget::to_payload`]).
pub const CHANNEL: &str = "crewbus_wakeups";

/// [`Wakeups`] over Postgres `LISTEN/NOTIFY`.
///
/// - `notify` sends one statement per batch on the shared pool (one `pg_notify` per target,
///   delivered when that statement's implicit transaction commits).
/// - `listen` opens a **dedicated connection** (never one of the shared pool's), from the
///   options given at construction: behind a transaction-pooling proxy they point at the
///   database directly (`[database] listen_url`), since `LISTEN` needs a session of its own.
///   When that session is lost (terminated, the server restarted, the network cut), the
///   listener's `next` answers `Unavailable` and the listener is finished: it does not reconnect
///   by itself, so the caller sees every loss and decides when to listen again (and wakes every
///   waiter then: notifications sent meanwhile were missed).
///
/// Postgres delivers a notification to every session listening when it commits, in commit
/// order, and drops it for sessions that were not listening then.
#[derive(Clone)]
pub struct PostgresWakeups {
    pool: PgPool,
    listen: PgConnectOptions,
}

impl std::fmt::Debug for PostgresWakeups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresWakeups")
            .field("channel", &CHANNEL)
            .finish_non_exhaustive()
    }
}

impl PostgresWakeups {
    /// Notifies on `pool`; listens on a connection of its own opened with `listen`.
    pub fn new(pool: PgPool, listen: PgConnectOptions) -> Self {
        PostgresWakeups { pool, listen }
    }
}

#[async_trait]
impl Wakeups for PostgresWakeups {
    async fn notify(&self, targets: &[WakeupTarget]) -> BusResult<()> {
        if targets.is_empty() {
            return Ok(());
        }
        let payloads: Vec<String> = targets.iter().map(WakeupTarget::to_payload).collect();
        sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&self.pool)
            .await
            .map_err(|e| bus_error(e, "wake-up notify"))?;
        Ok(())
    }

    async fn listen(&self) -> BusResult<Box<dyn WakeupListener>> {
        let listener = crate::connect::listen_on(&self.listen, CHANNEL, "wake-up listener").await?;
        Ok(Box::new(PostgresListener { listener }))
    }
}

struct PostgresListener {
    listener: PgListener,
}

#[async_trait]
impl WakeupListener for PostgresListener {
    async fn next(&mut self) -> BusResult<Wakeup> {
        loop {
            let first = self
                .listener
                .try_recv()
                .await
                .map_err(|e| bus_error(e, "wake-up listener"))?;
            let Some(first) = first else {
                // The session was lost (sqlx answers `None` and, without eager reconnection,
                // opens no other): this listener is finished.
                return Err(BusError::unavailable(
                    "wake-up listener: its database session was lost",
                ));
            };
            let mut targets: Vec<WakeupTarget> = WakeupTarget::from_payload(first.payload())
                .into_iter()
                .collect();
            while let Some(more) = self.listener.next_buffered() {
                targets.extend(WakeupTarget::from_payload(more.payload()));
            }
            if !targets.is_empty() {
                return Ok(Wakeup::Agents(targets));
            }
            // Only foreign payloads on our channel: nothing to wake.
        }
    }
}
