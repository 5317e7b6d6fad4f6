//! Wake-ups over Postgres `LISTEN/NOTIFY`: a message sent through one crewbus server wakes an
//! agent waiting on another.

use async_trait::async_trait;
use crewbus_domain::{
    BusError, BusResult, Wakeup, WakeupTarget, lease_wakeup_from_payload, lease_wakeup_payload,
};
use crewbus_ports::{WakeupListener, Wakeups};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener};
use uuid::Uuid;

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

    async fn notify_leases(&self, teams: &[Uuid]) -> BusResult<()> {
        if teams.is_empty() {
            return Ok(());
        }
        let payloads: Vec<String> = teams.iter().map(|t| lease_wakeup_payload(*t)).collect();
        sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&self.pool)
            .await
            .map_err(|e| bus_error(e, "lease wake-up notify"))?;
        Ok(())
    }

    async fn listen(&self) -> BusResult<Box<dyn WakeupListener>> {
        let listener = crate::connect::listen_on(&self.listen, CHANNEL, "wake-up listener").await?;
        Ok(Box::new(PostgresListener {
            listener,
            pending: None,
        }))
    }
}

struct PostgresListener {
    listener: PgListener,
    /// Lease wake-ups read with agents' ones, handed on by the next call.
    pending: Option<Wakeup>,
}

#[async_trait]
impl WakeupListener for PostgresListener {
    async fn next(&mut self) -> BusResult<Wakeup> {
        if let Some(pending) = self.pending.take() {
            return Ok(pending);
        }
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
            // Agents' and teams' lease wake-ups arrive mixed: one batch of buffered ones is
            // split by kind, the agents' handed on first and the leases' kept for the next call.
            let mut targets: Vec<WakeupTarget> = Vec::new();
            let mut teams: Vec<Uuid> = Vec::new();
            let mut sort = |payload: &str| {
                if let Some(t) = WakeupTarget::from_payload(payload) {
                    targets.push(t);
                } else if let Some(team) = lease_wakeup_from_payload(payload) {
                    teams.push(team);
                }
            };
            sort(first.payload());
            while let Some(more) = self.listener.next_buffered() {
                sort(more.payload());
            }
            if !teams.is_empty() {
                self.pending = Some(Wakeup::Leases(teams));
            }
            if !targets.is_empty() {
                return Ok(Wakeup::Agents(targets));
            }
            if let Some(pending) = self.pending.take() {
                return Ok(pending);
            }
            // Only foreign payloads on our channel: nothing to wake.
        }
    }
}
