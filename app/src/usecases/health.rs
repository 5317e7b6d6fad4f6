//! Health: the database decides; the broker is reported but never fails the probe.

use crewbus_domain::LedgerCounts;
use serde::Serialize;
use utoipa::ToSchema;

use crate::metrics::{Format, LedgerGauges};
use crate::usecases::bus::Bus;

/// The answer of `/health`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthReport {
    /// `ok` when the ledger answers, else `unavailable` (then the status code is 503).
    pub status: &'static str,
    /// The ledger: `ok` or `unavailable`.
    pub ledger: &'static str,
    /// The broker: `ok`, `unreachable`, or `not_configured`. Never fails the probe.
    pub broker: &'static str,
    /// Messages waiting for the relay.
    pub publication_pending: Option<u64>,
    /// Of those, attempts that were unanswered and await reconcile.
    pub publication_uncertain: Option<u64>,
    /// Messages the relay gave up on.
    pub publication_failed: Option<u64>,
    /// Age of the oldest pending publication, seconds.
    pub oldest_pending_age_seconds: Option<f64>,
    /// Inbox events not yet published as references.
    pub inbox_events_pending: Option<u64>,
}

impl HealthReport {
    /// Whether the probe passes.
    pub fn healthy(&self) -> bool {
        self.status == "ok"
    }
}

impl Bus {
    /// Checks the ledger (by reading its counts) and, when configured, whether the broker
    /// answers — both at once, each bounded by `bus.health_timeout_ms` (2 s by default): a
    /// ledger that has not answered by then is reported `unavailable` (the probe fails), a
    /// broker `unreachable`. So the probe answers within that bound whatever is down (the
    /// pool's own acquire timeout is longer).
    pub async fn health(&self) -> HealthReport {
        let bound = self.settings.health_timeout;
        let counts = async {
            match tokio::time::timeout(bound, self.ports.ledger.counts(self.now())).await {
                Ok(counts) => counts,
                Err(_) => Err(crewbus_domain::BusError::timeout(format!(
                    "ledger counts within {} ms",
                    bound.as_millis()
                ))),
            }
        };
        let broker = async {
            match &self.ports.broker {
                None => "not_configured",
                Some(b) => match tokio::time::timeout(bound, b.reachable()).await {
                    Ok(true) => "ok",
                    _ => "unreachable",
                },
            }
        };
        let (counts, broker) = tokio::join!(counts, broker);
        match counts {
            Ok(c) => HealthReport {
                status: "ok",
                ledger: "ok",
                broker,
                publication_pending: Some(c.pending_publications),
                publication_uncertain: Some(c.uncertain_publications),
                publication_failed: Some(c.failed_publications),
                oldest_pending_age_seconds: Some(
                    c.oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()),
                ),
                inbox_events_pending: Some(c.pending_inbox_events),
            },
            Err(error) => {
                tracing::warn!(code = error.code(), error = ?error, "health: ledger unavailable");
                HealthReport {
                    status: "unavailable",
                    ledger: "unavailable",
                    broker,
                    publication_pending: None,
                    publication_uncertain: None,
                    publication_failed: None,
                    oldest_pending_age_seconds: None,
                    inbox_events_pending: None,
                }
            }
        }
    }

    /// The metrics exposition in `format`, with ledger gauges when the ledger answers, and the
    /// store's writes when the bus was given their source ([`Bus::with_store_writes`]).
    pub async fn metrics_text(&self, format: Format) -> String {
        let gauges = self
            .ports
            .ledger
            .counts(self.now())
            .await
            .ok()
            .map(gauges_of);
        let writes = self.store_writes.as_ref().map(|read| read());
        self.metrics.render(gauges, writes.as_ref(), format)
    }
}

fn gauges_of(c: LedgerCounts) -> LedgerGauges {
    LedgerGauges {
        publication_pending: c.pending_publications,
        publication_failed: c.failed_publications,
        oldest_pending_age_seconds: c.oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()),
        inbox_events_pending: c.pending_inbox_events,
    }
}
