//! Prometheus metrics through `prometheus-client`, the Prometheus project's Rust client.
//!
//! Counters and histograms live in one registry made with the bus and are bumped by the use
//! cases; gauges that describe the ledger (publications pending/failed, age of the oldest pending
//! one, inbox events pending) are read from the ledger when `/metrics` is scraped and encoded from
//! a registry made for that scrape, so a ledger that does not answer leaves them out. So are the
//! store's rows written per table (`crewbus_store_rows_total{table, op}`) and its group commit's
//! transactions and parts (`crewbus_store_commits_total`, `crewbus_store_commit_parts_total`),
//! for a store that counts them ([`StoreWritesSource`], given by the composition root: the
//! embedded SQLite store).
//!
//! Two formats ([`Format`]): the Prometheus text format 0.0.4 by default, OpenMetrics 1.0 when the
//! scraper's `Accept` asks for it. The names are the same samples in both: a counter registered
//! as `crewbus_x` is `crewbus_x_total` everywhere in 0.0.4 (`# HELP`, `# TYPE`, sample) and, as
//! OpenMetrics wants, the family `crewbus_x` with the sample `crewbus_x_total`; the histograms and
//! the age gauge carry the unit seconds, so their names end in `_seconds` in both (OpenMetrics adds
//! a `# UNIT` line). Only OpenMetrics ends with `# EOF`. Histogram bounds are written `le="1"` in
//! 0.0.4 (as the Go client writes them) and `le="1.0"` in OpenMetrics (its canonical number form).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds of the latency histograms, in seconds (`+Inf` is implicit).
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A latency histogram in seconds over [`BUCKETS`].
#[derive(Debug)]
pub struct Histogram(histogram::Histogram);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(histogram::Histogram::new(BUCKETS))
    }
}

impl Histogram {
    /// Records one observation (as seconds).
    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

/// The process's counters and histograms, and the registry that exposes them.
#[derive(Debug)]
pub struct Metrics {
    /// Messages accepted by send (new ones, not idempotent repeats).
    pub messages_sent: Counter,
    /// Bodies the relay got confirmed by a body backend.
    pub relay_published: Counter,
    /// Relay attempts that will be retried (retryable or uncertain outcomes).
    pub relay_retried: Counter,
    /// Messages the relay marked failed.
    pub relay_failed: Counter,
    /// Inbox references published by the reference worker.
    pub references_published: Counter,
    /// Deliveries handed to agents by inbox fetches (redeliveries included).
    pub deliveries_handed_out: Counter,
    /// Receipts committed by confirm (first confirmation only).
    pub deliveries_confirmed: Counter,
    /// Inbox acks that failed after the receipt was committed (redelivery will absorb them).
    pub inbox_ack_failures: Counter,
    /// Inbox fetches whose inbox failed (down, not provisioned, erroring): the ledger topped the
    /// agent up alone.
    pub inbox_fetch_failures: Counter,
    /// Waiting fetches woken (by a wake-up or the sweep) whose agent check or re-fetch failed;
    /// each kept waiting.
    pub fetch_wait_errors: Counter,
    /// Waiting fetches woken (by a wake-up, the sweep or a listener reconnect).
    pub fetch_wakeups: Counter,
    /// Requests (HTTP and MCP tool calls) answered `timeout` because their use case did not
    /// finish within `bus.request_timeout_ms` (plus a fetch's wait).
    pub request_timeouts: Counter,
    /// Fetches that found no room for their bodies (`bus.max_body_bytes_in_flight`) and waited
    /// for it.
    pub fetch_bytes_waits: Counter,
    /// Fetches that answered fewer deliveries than they could have for lack of room for their
    /// bodies (what they left comes with the next fetch).
    pub fetch_bytes_shortened: Counter,
    /// Bytes of bodies held by this process's fetches now (the room they reserved: each body at
    /// its size as JSON once read, at its recorded length before).
    pub fetch_bodies_in_flight: Gauge,
    /// Wake-up listeners lost (their session ended; each is started again).
    pub wakeup_listener_lost: Counter,
    /// Wake-up listeners started again after a loss (each woke every waiting fetch).
    pub wakeup_listener_reconnected: Counter,
    /// Console feed listeners lost while someone watched (each subscribes again).
    pub feed_listener_lost: Counter,
    /// Console feed listeners subscribed again after a loss (their viewers told they lagged).
    pub feed_listener_reconnected: Counter,
    /// Safety sweeps run over this process's waiting fetches and watches (`Bus::wait_sweep`).
    pub wait_sweeps: Counter,
    /// Ledger reads by inbox watches (`Ledger::inbox_news`): one per watch, plus one per
    /// wake-up or hand-out lapse while it waits.
    pub watch_reads: Counter,
    /// Reads of waiting inbox watches that failed (each kept waiting).
    pub watch_errors: Counter,
    /// MCP tool calls (of a known tool; bus errors included).
    pub mcp_tool_calls: Counter,
    /// MCP tool calls answered with a bus error (`isError: true`).
    pub mcp_tool_errors: Counter,
    /// One body publish by the relay (request to answer).
    pub relay_latency: Histogram,
    /// One inbox fetch of references (request to answer).
    pub inbox_latency: Histogram,
    /// Send → first hand-out to the recipient.
    pub delivery_latency: Histogram,
    /// The counters and histograms above, under their exposed names.
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            messages_sent: Counter::default(),
            relay_published: Counter::default(),
            relay_retried: Counter::default(),
            relay_failed: Counter::default(),
            references_published: Counter::default(),
            deliveries_handed_out: Counter::default(),
            deliveries_confirmed: Counter::default(),
            inbox_ack_failures: Counter::default(),
            inbox_fetch_failures: Counter::default(),
            fetch_wait_errors: Counter::default(),
            request_timeouts: Counter::default(),
            fetch_wakeups: Counter::default(),
            fetch_bytes_waits: Counter::default(),
            fetch_bytes_shortened: Counter::default(),
            fetch_bodies_in_flight: Gauge::default(),
            wakeup_listener_lost: Counter::default(),
            wakeup_listener_reconnected: Counter::default(),
            feed_listener_lost: Counter::default(),
            feed_listener_reconnected: Counter::default(),
            wait_sweeps: Counter::default(),
            watch_reads: Counter::default(),
            watch_errors: Counter::default(),
            mcp_tool_calls: Counter::default(),
            mcp_tool_errors: Counter::default(),
            relay_latency: Histogram::default(),
            inbox_latency: Histogram::default(),
            delivery_latency: Histogram::default(),
            registry: Registry::default(),
        };
        // Names without `_total` (the encoders add it) and help without the final full stop (the
        // registry adds it).
        let counters = [
            (
                "crewbus_messages_sent",
                "Messages accepted by send",
                &m.messages_sent,
            ),
            (
                "crewbus_relay_published",
                "Bodies confirmed by a body backend",
                &m.relay_published,
            ),
            (
                "crewbus_relay_retried",
                "Relay attempts to be retried",
                &m.relay_retried,
            ),
            (
                "crewbus_relay_failed",
                "Messages the relay marked failed",
                &m.relay_failed,
            ),
            (
                "crewbus_references_published",
                "Inbox references published",
                &m.references_published,
            ),
            (
                "crewbus_deliveries",
                "Deliveries handed to agents (redeliveries included)",
                &m.deliveries_handed_out,
            ),
            (
                "crewbus_deliveries_confirmed",
                "Receipts committed by confirm",
                &m.deliveries_confirmed,
            ),
            (
                "crewbus_inbox_ack_failures",
                "Inbox acks that failed after the receipt was committed",
                &m.inbox_ack_failures,
            ),
            (
                "crewbus_inbox_fetch_failures",
                "Inbox fetches whose inbox failed; the ledger topped the agent up alone",
                &m.inbox_fetch_failures,
            ),
            (
                "crewbus_fetch_wakeups",
                "Waiting fetches woken to look again",
                &m.fetch_wakeups,
            ),
            (
                "crewbus_request_timeouts",
                "Requests answered timeout: not finished within bus.request_timeout_ms (plus a fetch's wait)",
                &m.request_timeouts,
            ),
            (
                "crewbus_fetch_wait_errors",
                "Woken waiting fetches whose re-fetch failed (they kept waiting)",
                &m.fetch_wait_errors,
            ),
            (
                "crewbus_fetch_bytes_waits",
                "Fetches that waited for room for their bodies (bus.max_body_bytes_in_flight)",
                &m.fetch_bytes_waits,
            ),
            (
                "crewbus_fetch_bytes_shortened",
                "Fetches that answered fewer deliveries for lack of room for their bodies",
                &m.fetch_bytes_shortened,
            ),
            (
                "crewbus_wakeup_listener_lost",
                "Wake-up listeners whose session was lost",
                &m.wakeup_listener_lost,
            ),
            (
                "crewbus_wakeup_listener_reconnected",
                "Wake-up listeners started again after a loss",
                &m.wakeup_listener_reconnected,
            ),
            (
                "crewbus_feed_listener_lost",
                "Console feed listeners whose session was lost",
                &m.feed_listener_lost,
            ),
            (
                "crewbus_feed_listener_reconnected",
                "Console feed listeners subscribed again after a loss",
                &m.feed_listener_reconnected,
            ),
            (
                "crewbus_wait_sweeps",
                "Safety sweeps over this process's waiting fetches and watches",
                &m.wait_sweeps,
            ),
            (
                "crewbus_watch_reads",
                "Ledger reads by inbox watches (one per watch, one per wake-up or lapse while it waits)",
                &m.watch_reads,
            ),
            (
                "crewbus_watch_errors",
                "Reads of waiting inbox watches that failed (they kept waiting)",
                &m.watch_errors,
            ),
            (
                "crewbus_mcp_tool_calls",
                "MCP tool calls (bus errors included)",
                &m.mcp_tool_calls,
            ),
            (
                "crewbus_mcp_tool_errors",
                "MCP tool calls answered with a bus error (isError)",
                &m.mcp_tool_errors,
            ),
        ];
        let mut registry = Registry::default();
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        let histograms = [
            (
                "crewbus_relay_latency",
                "One relay publish to a body backend, seconds",
                &m.relay_latency,
            ),
            (
                "crewbus_inbox_fetch_latency",
                "One fetch of references from an inbox, seconds",
                &m.inbox_latency,
            ),
            (
                "crewbus_delivery_latency",
                "Send to first hand-out, seconds",
                &m.delivery_latency,
            ),
        ];
        for (name, help, h) in histograms {
            registry.register_with_unit(name, help, Unit::Seconds, h.0.clone());
        }
        registry.register_with_unit(
            "crewbus_fetch_bodies_in_flight",
            "Bytes of message bodies held by this server's fetches now",
            Unit::Bytes,
            m.fetch_bodies_in_flight.clone(),
        );
        m.registry = registry;
        m
    }
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

impl LedgerGauges {
    /// A registry of these values, for one scrape.
    fn registry(self) -> Registry {
        let mut r = Registry::default();
        r.register(
            "crewbus_publication_pending",
            "Messages waiting for the relay",
            ConstGauge::new(self.publication_pending),
        );
        r.register(
            "crewbus_publication_failed",
            "Messages the relay gave up on",
            ConstGauge::new(self.publication_failed),
        );
        r.register_with_unit(
            "crewbus_publication_oldest_pending_age",
            "Age of the oldest pending publication",
            Unit::Seconds,
            ConstGauge::new(self.oldest_pending_age_seconds),
        );
        r.register(
            "crewbus_inbox_events_pending",
            "Inbox events not yet published",
            ConstGauge::new(self.inbox_events_pending),
        );
        r
    }
}

/// Rows the store's writes changed in one table since the store was opened by this process,
/// each a count of rows: exposed as `crewbus_store_rows_total{table="…",op="insert|update|delete"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreRows {
    /// The table's name in the store.
    pub table: String,
    /// Rows inserted.
    pub inserted: u64,
    /// Rows updated.
    pub updated: u64,
    /// Rows deleted.
    pub deleted: u64,
}

/// The group commit's work since the store was opened by this process: `transactions` write
/// transactions committed (one fsynced `COMMIT` each) holding `parts` write requests in all
/// (`parts ÷ transactions` is the mean batch: 1.0 when writes never overlap). Exposed as
/// `crewbus_store_commits_total` and `crewbus_store_commit_parts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreCommits {
    /// Write transactions committed.
    pub transactions: u64,
    /// Write requests (parts) those transactions held.
    pub parts: u64,
}

/// What the store wrote, read at one scrape: rows per table, and the group commit's counts for
/// a store that groups its writes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreWrites {
    /// Rows per table.
    pub rows: Vec<StoreRows>,
    /// The group commit's transactions and parts, for a store that has one.
    pub commits: Option<StoreCommits>,
}

/// Reads what the store wrote when `/metrics` is scraped. The composition root gives one for a
/// store that counts its writes (the embedded SQLite store: rows from its update hook when
/// `storage.count_rows` is on, else none; commits from its group commit); other stores have
/// none and leave these families out (Postgres keeps its own in `pg_stat_user_tables` and
/// `pg_stat_database`).
pub type StoreWritesSource = Arc<dyn Fn() -> StoreWrites + Send + Sync>;

/// The labels of one `crewbus_store_rows_total` sample: `table` and `op`.
type RowLabels = [(&'static str, String); 2];

/// A registry of what the store wrote, for one scrape: one row counter per table and operation
/// (zeros included, so every table written has all three), and the group commit's two counters.
fn store_writes_registry(writes: &StoreWrites) -> Registry {
    let family = Family::<RowLabels, Counter>::default();
    for row in &writes.rows {
        for (op, n) in [
            ("insert", row.inserted),
            ("update", row.updated),
            ("delete", row.deleted),
        ] {
            family
                .get_or_create(&[("table", row.table.clone()), ("op", op.to_owned())])
                .inc_by(n);
        }
    }
    let mut r = Registry::default();
    r.register(
        "crewbus_store_rows",
        "Rows the store's writes inserted, updated or deleted, per table, since this server opened it",
        family,
    );
    if let Some(commits) = writes.commits {
        let transactions = Counter::<u64>::default();
        transactions.inc_by(commits.transactions);
        r.register(
            "crewbus_store_commits",
            "Write transactions the store committed since this server opened it, one fsynced COMMIT each",
            transactions,
        );
        let parts = Counter::<u64>::default();
        parts.inc_by(commits.parts);
        r.register(
            "crewbus_store_commit_parts",
            "Write requests the committed transactions held (parts / commits is the mean group-commit batch)",
            parts,
        );
    }
    r
}

/// An exposition format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4 (the default).
    Prometheus,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format a scraper's `Accept` header value asks for: OpenMetrics when it accepts
    /// `application/openmetrics-text` (any version) with a quality above 0 and at least that of
    /// the text format (`text/plain`, `text/*`, `*/*`); the Prometheus text format otherwise,
    /// also when there is no header. Media ranges that do not parse are skipped.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut openmetrics, mut text) = (0.0_f64, 0.0_f64);
        for range in accept.unwrap_or("").split(',') {
            let Ok(m) = range.trim().parse::<mime::Mime>() else {
                continue;
            };
            let q = m
                .get_param("q")
                .map_or(Some(1.0), |q| q.as_str().parse::<f64>().ok())
                .unwrap_or(0.0);
            match (m.type_().as_str(), m.subtype().as_str()) {
                ("application", "openmetrics-text") => openmetrics = openmetrics.max(q),
                ("text", "plain" | "*") | ("*", "*") => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(counter: &Counter) {
        counter.inc();
    }

    /// Woken waiting fetches whose re-fetch failed so far (they kept waiting).
    pub fn wait_errors(&self) -> u64 {
        self.fetch_wait_errors.get()
    }

    /// Adds `n` to a counter.
    pub fn add(counter: &Counter, n: u64) {
        counter.inc_by(n);
    }

    /// The exposition in `format` ([`Format::content_type`]); the ledger's gauges only when
    /// given, what the store wrote only when given.
    pub fn render(
        &self,
        gauges: Option<LedgerGauges>,
        store_writes: Option<&StoreWrites>,
        format: Format,
    ) -> String {
        let mut out = String::with_capacity(8192);
        let scraped: Vec<Registry> = gauges
            .map(LedgerGauges::registry)
            .into_iter()
            .chain(store_writes.map(store_writes_registry))
            .collect();
        // Writing to a String does not fail; an encoder error would be a bug in the encoder.
        let written = match format {
            Format::Prometheus => std::iter::once(&self.registry)
                .chain(&scraped)
                .try_for_each(|r| prometheus_text::encode(&mut out, r)),
            Format::OpenMetrics => std::iter::once(&self.registry)
                .chain(&scraped)
                .try_for_each(|r| text::encode_registry(&mut out, r))
                .and_then(|()| text::encode_eof(&mut out)),
        };
        debug_assert!(written.is_ok(), "encoding metrics into a String failed");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some_traffic() -> Metrics {
        let m = Metrics::default();
        Metrics::inc(&m.messages_sent);
        Metrics::add(&m.relay_published, 3);
        m.relay_latency.observe(Duration::from_millis(3));
        m.relay_latency.observe(Duration::from_secs(20));
        Metrics::inc(&m.fetch_bytes_waits);
        m.fetch_bodies_in_flight.set(2048);
        m
    }

    fn gauges() -> Option<LedgerGauges> {
        Some(LedgerGauges {
            publication_pending: 2,
            oldest_pending_age_seconds: 1.5,
            ..Default::default()
        })
    }

    #[test]
    fn the_prometheus_text_keeps_the_names_of_the_hand_written_one() {
        let text = some_traffic().render(gauges(), None, Format::Prometheus);
        for line in [
            "# HELP crewbus_messages_sent_total Messages accepted by send.",
            "# TYPE crewbus_messages_sent_total counter",
            "crewbus_messages_sent_total 1",
            "crewbus_relay_published_total 3",
            "crewbus_fetch_bytes_waits_total 1",
            "crewbus_fetch_bytes_shortened_total 0",
            "# TYPE crewbus_fetch_bodies_in_flight_bytes gauge",
            "crewbus_fetch_bodies_in_flight_bytes 2048",
            "# TYPE crewbus_publication_pending gauge",
            "crewbus_publication_pending 2",
            "# TYPE crewbus_publication_oldest_pending_age_seconds gauge",
            "crewbus_publication_oldest_pending_age_seconds 1.5",
            "# HELP crewbus_relay_latency_seconds One relay publish to a body backend, seconds.",
            "# TYPE crewbus_relay_latency_seconds histogram",
            "crewbus_relay_latency_seconds_bucket{le=\"0.0025\"} 0",
            "crewbus_relay_latency_seconds_bucket{le=\"0.005\"} 1",
            "crewbus_relay_latency_seconds_bucket{le=\"1\"} 1",
            "crewbus_relay_latency_seconds_bucket{le=\"10\"} 1",
            "crewbus_relay_latency_seconds_bucket{le=\"+Inf\"} 2",
            "crewbus_relay_latency_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        for line in text.lines() {
            assert!(
                line.starts_with('#') || line.split(' ').count() == 2,
                "{line}"
            );
        }
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let text = some_traffic().render(gauges(), None, Format::OpenMetrics);
        for line in [
            "# HELP crewbus_messages_sent Messages accepted by send.",
            "# TYPE crewbus_messages_sent counter",
            "crewbus_messages_sent_total 1",
            "# TYPE crewbus_relay_latency_seconds histogram",
            "# UNIT crewbus_relay_latency_seconds seconds",
            "crewbus_relay_latency_seconds_bucket{le=\"1.0\"} 1",
            "crewbus_relay_latency_seconds_bucket{le=\"+Inf\"} 2",
            "# UNIT crewbus_publication_oldest_pending_age_seconds seconds",
            "crewbus_publication_pending 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
    }

    #[test]
    fn the_store_rows_are_one_counter_per_table_and_operation_only_when_given() {
        let rows = [
            StoreRows {
                table: "messages".into(),
                inserted: 7,
                updated: 0,
                deleted: 2,
            },
            StoreRows {
                table: "receipts".into(),
                inserted: 21,
                updated: 21,
                deleted: 0,
            },
        ];
        let writes = StoreWrites {
            rows: rows.to_vec(),
            commits: Some(StoreCommits {
                transactions: 3,
                parts: 11,
            }),
        };
        let text = some_traffic().render(None, Some(&writes), Format::Prometheus);
        for line in [
            "# HELP crewbus_store_rows_total Rows the store's writes inserted, updated or deleted, per table, since this server opened it.",
            "# TYPE crewbus_store_rows_total counter",
            "crewbus_store_rows_total{table=\"messages\",op=\"insert\"} 7",
            "crewbus_store_rows_total{table=\"messages\",op=\"update\"} 0",
            "crewbus_store_rows_total{table=\"messages\",op=\"delete\"} 2",
            "crewbus_store_rows_total{table=\"receipts\",op=\"insert\"} 21",
            "crewbus_store_rows_total{table=\"receipts\",op=\"update\"} 21",
            "crewbus_store_rows_total{table=\"receipts\",op=\"delete\"} 0",
            "# TYPE crewbus_store_commits_total counter",
            "crewbus_store_commits_total 3",
            "crewbus_store_commit_parts_total 11",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert_eq!(text.matches("crewbus_store_rows_total{").count(), 6);
        let open = some_traffic().render(gauges(), Some(&writes), Format::OpenMetrics);
        assert!(
            open.contains("# TYPE crewbus_store_rows counter\n"),
            "{open}"
        );
        assert!(
            open.contains("crewbus_store_rows_total{table=\"receipts\",op=\"update\"} 21\n"),
            "{open}"
        );
        assert!(open.ends_with("\n# EOF\n"), "{open}");
        assert_eq!(open.matches("# EOF").count(), 1);
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = some_traffic().render(gauges(), None, format);
            assert!(!text.contains("crewbus_store_"), "{text}");
        }
    }

    #[test]
    fn without_the_ledger_the_gauges_are_left_out() {
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = some_traffic().render(None, None, format);
            assert!(!text.contains("crewbus_publication"), "{text}");
            assert!(text.contains("crewbus_messages_sent_total 1\n"), "{text}");
        }
    }

    #[test]
    fn openmetrics_is_served_only_when_asked_for() {
        use Format::{OpenMetrics, Prometheus};
        for (accept, want) in [
            (None, Prometheus),
            (Some(""), Prometheus),
            (Some("*/*"), Prometheus),
            (Some("text/plain"), Prometheus),
            (Some("text/plain;version=0.0.4"), Prometheus),
            (Some("application/json"), Prometheus),
            (Some("not a media type"), Prometheus),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
                OpenMetrics,
            ),
            // Prometheus 2's scrape header, and Prometheus 3's.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            (
                Some(
                    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                     application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;\
                     escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
                ),
                OpenMetrics,
            ),
            // Refused or preferred less than the text format.
            (Some("application/openmetrics-text;q=0"), Prometheus),
            (
                Some("text/plain;version=0.0.4,application/openmetrics-text;q=0.5"),
                Prometheus,
            ),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }
}
