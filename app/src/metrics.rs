//! Prometheus metrics, written by hand in the text exposition format (version 0.0.4).
//!
//! Counters and histograms live here and are bumped by the use cases; gauges that describe the
//! ledger (publications pending/failed, age of the oldest pending one) are read from the ledger
//! when `/metrics` is scraped.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency histograms, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A fixed-bucket latency histogram (seconds). Lock-free.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, slot) in BUCKETS.iter().zip(&self.counts) {
            if secs <= *bound {
                slot.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            d.as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, slot) in BUCKETS.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                slot.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// The process's counters and histograms.
#[derive(Default)]
pub struct Metrics {
    /// Messages accepted by send (new ones, not idempotent repeats).
    pub messages_sent: AtomicU64,
    /// Bodies the relay got confirmed by a body backend.
    pub relay_published: AtomicU64,
    /// Relay attempts that will be retried (retryable or uncertain outcomes).
    pub relay_retried: AtomicU64,
    /// Messages the relay marked failed.
    pub relay_failed: AtomicU64,
    /// Inbox references published by the reference worker.
    pub references_published: AtomicU64,
    /// Deliveries handed to agents by inbox fetches (redeliveries included).
    pub deliveries_handed_out: AtomicU64,
    /// Receipts committed by confirm (first confirmation only).
    pub deliveries_confirmed: AtomicU64,
    /// Inbox acks that failed after the receipt was committed (redelivery will absorb them).
    pub inbox_ack_failures: AtomicU64,
    /// Inbox fetches whose inbox failed (down, not provisioned, erroring): the ledger topped the
    /// agent up alone.
    pub inbox_fetch_failures: AtomicU64,
    /// Waiting fetches woken (by a wake-up or the sweep) whose agent check or re-fetch failed;
    /// each kept waiting.
    pub fetch_wait_errors: AtomicU64,
    /// Waiting fetches woken (by a wake-up, the sweep or a listener reconnect).
    pub fetch_wakeups: AtomicU64,
    /// MCP tool calls (of a known tool; bus errors included).
    pub mcp_tool_calls: AtomicU64,
    /// MCP tool calls answered with a bus error (`isError: true`).
    pub mcp_tool_errors: AtomicU64,
    /// One body publish by the relay (request to answer).
    pub relay_latency: Histogram,
    /// One inbox fetch of references (request to answer).
    pub inbox_latency: Histogram,
    /// Send → first hand-out to the recipient.
    pub delivery_latency: Histogram,
}

/// Gauges read from the ledger at scrape time.
#[derive(Debug, Default, Clone, Copy)]
pub struct LedgerGauges {
    /// Messages waiting for the relay.
    pub publication_pending: u64,
    /// Messages the relay gave up on.
    pub publication_failed: u64,
    /// Age of the oldest pending publication, seconds (0 when none).
    pub oldest_pending_age_seconds: f64,
    /// Inbox events not yet published as references.
    pub inbox_events_pending: u64,
}

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Woken waiting fetches whose re-fetch failed so far (they kept waiting).
    pub fn wait_errors(&self) -> u64 {
        self.fetch_wait_errors.load(Ordering::Relaxed)
    }

    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The exposition text (`text/plain; version=0.0.4`).
    pub fn render(&self, gauges: Option<LedgerGauges>) -> String {
        let mut out = String::with_capacity(4096);
        let counters: [(&str, &str, &AtomicU64); 13] = [
            (
                "crewbus_messages_sent_total",
                "Messages accepted by send.",
                &self.messages_sent,
            ),
            (
                "crewbus_relay_published_total",
                "Bodies confirmed by a body backend.",
                &self.relay_published,
            ),
            (
                "crewbus_relay_retried_total",
                "Relay attempts to be retried.",
                &self.relay_retried,
            ),
            (
                "crewbus_relay_failed_total",
                "Messages the relay marked failed.",
                &self.relay_failed,
            ),
            (
                "crewbus_references_published_total",
                "Inbox references published.",
                &self.references_published,
            ),
            (
                "crewbus_deliveries_total",
                "Deliveries handed to agents (redeliveries included).",
                &self.deliveries_handed_out,
            ),
            (
                "crewbus_deliveries_confirmed_total",
                "Receipts committed by confirm.",
                &self.deliveries_confirmed,
            ),
            (
                "crewbus_inbox_ack_failures_total",
                "Inbox acks that failed after the receipt was committed.",
                &self.inbox_ack_failures,
            ),
            (
                "crewbus_inbox_fetch_failures_total",
                "Inbox fetches whose inbox failed; the ledger topped the agent up alone.",
                &self.inbox_fetch_failures,
            ),
            (
                "crewbus_fetch_wakeups_total",
                "Waiting fetches woken to look again.",
                &self.fetch_wakeups,
            ),
            (
                "crewbus_fetch_wait_errors_total",
                "Woken waiting fetches whose re-fetch failed (they kept waiting).",
                &self.fetch_wait_errors,
            ),
            (
                "crewbus_mcp_tool_calls_total",
                "MCP tool calls (bus errors included).",
                &self.mcp_tool_calls,
            ),
            (
                "crewbus_mcp_tool_errors_total",
                "MCP tool calls answered with a bus error (isError).",
                &self.mcp_tool_errors,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        if let Some(g) = gauges {
            let gauges: [(&str, &str, f64); 4] = [
                (
                    "crewbus_publication_pending",
                    "Messages waiting for the relay.",
                    g.publication_pending as f64,
                ),
                (
                    "crewbus_publication_failed",
                    "Messages the relay gave up on.",
                    g.publication_failed as f64,
                ),
                (
                    "crewbus_publication_oldest_pending_age_seconds",
                    "Age of the oldest pending publication.",
                    g.oldest_pending_age_seconds,
                ),
                (
                    "crewbus_inbox_events_pending",
                    "Inbox events not yet published.",
                    g.inbox_events_pending as f64,
                ),
            ];
            for (name, help, value) in gauges {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
                );
            }
        }
        self.relay_latency.write(
            &mut out,
            "crewbus_relay_latency_seconds",
            "One relay publish to a body backend, seconds.",
        );
        self.inbox_latency.write(
            &mut out,
            "crewbus_inbox_fetch_latency_seconds",
            "One fetch of references from an inbox, seconds.",
        );
        self.delivery_latency.write(
            &mut out,
            "crewbus_delivery_latency_seconds",
            "Send to first hand-out, seconds.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_is_well_formed() {
        let m = Metrics::default();
        Metrics::inc(&m.messages_sent);
        m.relay_latency.observe(Duration::from_millis(3));
        m.relay_latency.observe(Duration::from_secs(20));
        let text = m.render(Some(LedgerGauges {
            publication_pending: 2,
            ..Default::default()
        }));
        assert!(text.contains("crewbus_messages_sent_total 1\n"));
        assert!(text.contains("crewbus_publication_pending 2\n"));
        assert!(text.contains("crewbus_relay_latency_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("crewbus_relay_latency_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("crewbus_relay_latency_seconds_count 2\n"));
        for line in text.lines() {
            assert!(
                line.starts_with('#') || line.split(' ').count() == 2,
                "{line}"
            );
        }
    }
}
