//! The `[bus]` section: the use cases', workers' and server's bounds.

use std::time::Duration;

use crewbus_domain::MAX_BODY_BYTES;
use serde::Deserialize;

/// Bus tuning. Durations are in milliseconds unless the name says otherwise.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusConfig {
    /// Largest message body in bytes (at most the bus contract of 1 MiB). Default 1 048 576.
    pub max_body_bytes: u64,
    /// Slots leased per relay transaction. Default 64.
    pub relay_batch: usize,
    /// Group commit: most concurrent send requests recorded in one ledger transaction (one
    /// commit). Whatever queued while the previous batch committed forms the next one, without
    /// waiting (linger 0). At least 1; above `MAX_PAGE` (1000) it is capped. Default 64.
    pub send_batch_max: usize,
    /// Group commit: most body bytes (the sum of the bodies' UTF-8 lengths) in one send batch,
    /// bytes; a larger body is committed alone. At least 1. Default 4 194 304 (4 MiB).
    pub send_batch_max_bytes: u64,
    /// How long a relay lease holds, ms. Default 30 000.
    pub relay_lease_ms: u64,
    /// Pause of the relay and the reference worker after a pass that found nothing, ms, while
    /// they found work (or failed) within the last 30 s; after that they look every 5 s (each
    /// send wakes them at once: `usecases/workers.rs`). Default 50.
    pub idle_poll_ms: u64,
    /// Messages whose inbox references one reference-worker pass leases and publishes (each
    /// with all its recipients not yet delivered). Default 256.
    pub reference_batch: usize,
    /// Relay backoff: first delay, ms. Default 500.
    pub backoff_base_ms: u64,
    /// Relay backoff: largest delay, ms. Default 60 000.
    pub backoff_cap_ms: u64,
    /// Relay attempts before reconcile decides and the message is failed. Default 12.
    pub backoff_max_attempts: u32,
    /// A message handed out and not confirmed is not handed out again before this grace, ms.
    /// Default 30 000.
    pub handout_grace_ms: u64,
    /// Top-up from the ledger hands out a stored message without a delivered receipt once it has
    /// been stored this long (the inbox normally delivers it first), ms. Default 2000.
    pub topup_after_ms: u64,
    /// Keep bodies this many days; 0 keeps them forever. Default 0.
    pub retention_days: u64,
    /// How often the retention job runs, seconds. Default 3600.
    pub retention_interval_s: u64,
    /// Largest inbox fetch per request. Default 100.
    pub max_fetch: usize,
    /// Largest `max_bytes` a fetch may ask for (`POST /v1/inbox/fetch`; above it is `400
    /// invalid`): the most bytes of message bodies (UTF-8 bytes, summed over the deliveries)
    /// one answer carries, except that a single body larger than the caller's `max_bytes` is
    /// answered alone. A fetch without `max_bytes` gets 4 194 304 (4 MiB), or this when it is
    /// lower. Between 1 048 576 (the largest body) and `max_body_bytes_in_flight`, bytes.
    /// Default 16 777 216 (16 MiB).
    pub max_fetch_bytes: u64,
    /// Most bytes of message bodies held in memory by all fetches of this server at once (HTTP
    /// and MCP), each counted at its size as a JSON string in the answer (its UTF-8 length plus
    /// escapes: `"`, `\\` and `\n`-like controls 2 bytes, other control characters 6), from
    /// the moment a fetch reads its bodies until its answer has been handed to the connection. A
    /// body is reserved at its recorded length before it is read and topped up to its size as
    /// JSON once read, without waiting; one whose top-up does not fit is left for the next
    /// fetch (never lost), which reserves its whole size at once. A
    /// fetch that finds no room waits for it until its deadline (`wait_ms` after it began, and
    /// at least 1 s), then answers what fits — possibly nothing; whatever it leaves is not
    /// handed out and comes with the caller's next fetch (never lost). Waits are counted in
    /// `/metrics` (`crewbus_fetch_bytes_waits_total`), the bytes held in
    /// `crewbus_fetch_bodies_in_flight_bytes`. At least 1 048 576 (one body), bytes. Default
    /// 67 108 864 (64 MiB).
    pub max_body_bytes_in_flight: u64,
    /// Longest a fetch may wait for a delivery (`wait_ms` of `POST /v1/inbox/fetch`; above it
    /// is `400 invalid`), ms. Keep it below the ~60 s an MCP host allows a tool call. Default
    /// 50 000.
    pub max_wait_ms: u64,
    /// Deadline for a request's whole body, counted from the end of its headers: a body not
    /// fully received by then is cut and answered `400 invalid` (with `Connection: close`), however
    /// steadily it trickles. It bounds reading the body only, never the handler or a streamed
    /// answer (a waiting fetch, MCP's SSE answers), ms. Default 30 000.
    pub request_body_timeout_ms: u64,
    /// A connection that has not sent a complete request head (request line and headers) this
    /// long after it opened, or after its previous answer (an idle kept-alive connection), is
    /// closed, ms. Default 10 000.
    pub header_read_timeout_ms: u64,
    /// Most HTTP connections open at once; a connection accepted beyond it is closed at once
    /// (a warning, at most one every 5 s, counts them). Default 4 096.
    pub max_http_connections: usize,
    /// After a shutdown signal, how long `serve` waits for open HTTP connections and the
    /// workers' passes in progress before it abandons them (logged as a warning) and exits, ms.
    /// Default 10 000.
    pub shutdown_grace_ms: u64,
    /// Longest an API request (agents' and operators'; not the console's pages, nor `/health`,
    /// which has `health_timeout_ms`) or MCP tool call may take to be answered, counted from
    /// the end of its body (the token lookup before it has a deadline of the same length), ms.
    /// A request whose use case has not finished by then (the ledger or a backend not
    /// answering, as when the server is cut from its database and its pooled connections wait
    /// on a silent peer) is answered `503 timeout` (HTTP; an `isError` result with code
    /// `timeout` over MCP) while its work runs on to its end in the server: a send may or may
    /// not be stored (retry it with the same `request_id`: never stored twice); a fetch's
    /// hand-outs come back after the hand-out grace. A fetch's bound is this plus its `wait_ms`
    /// (at least 1 s). Never cuts an answer that has begun to stream. At least 1, at most
    /// 300 000. Default 10 000 (the pool's acquire timeout, 5 s, fits within it).
    pub request_timeout_ms: u64,
    /// Longest `/health` waits for the ledger (and the broker, at the same time) before it
    /// reports it unavailable, ms. `crewbus health` waits this plus 5 s for the answer.
    /// Default 2 000.
    pub health_timeout_ms: u64,
    /// How long a bearer-token lookup is reused for the same token, ms: at most 1000 (above
    /// is refused at load), 0 looks every request's token up in the ledger. A revocation
    /// through any server drops the token at once on every server that hears its wake-up; one
    /// heard of by no wake-up (an operator command beside an embedded server) takes effect
    /// within this. Default 1000.
    pub token_cache_ms: u64,
    /// Longest TTL a lease may be granted or renewed for, ms (an agent asking for more is
    /// refused `invalid`). At least 1 000, at most 86 400 000 (one day). Default 3 600 000 (1 h).
    pub lease_max_ttl_ms: u64,
    /// The TTL of a lease whose acquire names none, ms: at least 1 000 and at most
    /// `lease_max_ttl_ms`. Default 300 000 (5 min).
    pub lease_default_ttl_ms: u64,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            max_body_bytes: MAX_BODY_BYTES,
            relay_batch: 64,
            send_batch_max: 64,
            send_batch_max_bytes: 4 * 1024 * 1024,
            relay_lease_ms: 30_000,
            idle_poll_ms: 50,
            reference_batch: 256,
            backoff_base_ms: 500,
            backoff_cap_ms: 60_000,
            backoff_max_attempts: 12,
            handout_grace_ms: 30_000,
            topup_after_ms: 2_000,
            retention_days: 0,
            retention_interval_s: 3_600,
            max_fetch: 100,
            max_fetch_bytes: 16 * 1024 * 1024,
            max_body_bytes_in_flight: 64 * 1024 * 1024,
            max_wait_ms: 50_000,
            request_body_timeout_ms: 30_000,
            header_read_timeout_ms: 10_000,
            max_http_connections: 4_096,
            shutdown_grace_ms: 10_000,
            health_timeout_ms: 2_000,
            request_timeout_ms: 10_000,
            token_cache_ms: 1_000,
            lease_max_ttl_ms: 3_600_000,
            lease_default_ttl_ms: 300_000,
        }
    }
}

impl BusConfig {
    /// The relay's retry schedule.
    pub fn backoff(&self) -> crewbus_domain::Backoff {
        crewbus_domain::Backoff {
            base: Duration::from_millis(self.backoff_base_ms),
            cap: Duration::from_millis(self.backoff_cap_ms),
            max_attempts: self.backoff_max_attempts,
        }
    }
}

/// The largest `bus.token_cache_ms`, in milliseconds: how long a revoked token may still
/// authenticate on a server that heard of the revocation by no wake-up.
pub const MAX_TOKEN_CACHE_MS: u64 = 1_000;
