//! The send-allowance port: each agent's send rate limit as one bucket in the ledger, shared by
//! every server on that ledger.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusResult, RateLimit};
use uuid::Uuid;

/// One token bucket per agent (`crewbus_domain::TokenBucket`), kept by the ledger, from which
/// servers lease chunks of tokens: a server counts sends against the chunk it holds and writes
/// to the ledger only when it runs out, so a send costs no ledger write of its own.
///
/// **Tolerance**: in any window of `t` seconds an agent sends at most
/// `burst + servers × chunk + rate × t` messages (the chunks held when the window opens are the
/// slack; `crewbus_domain`'s property test proves the arithmetic).
///
/// Implemented by every ledger (memory, SQLite, Postgres); all pass the same conformance
/// functions (`crewbus_conformance::send_allowance`). The rules of [`crate::Ledger`] hold: time
/// from the caller, one transaction per call, store outages `Unavailable`/`Timeout`.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait SendAllowance: Send + Sync {
    /// Takes up to `want` whole tokens (messages) of `agent`'s bucket of shape `limit` at `at`,
    /// serialised with every other take of that agent (on any server). The bucket is created
    /// full on the first take; it refills at `limit.rate_per_second` from its last take and
    /// holds at most `limit.burst` (a lowered burst cuts it at once). Returns how many were
    /// taken (1 to `want`; 0 when `want` is 0).
    ///
    /// Errors: no token held → `RateLimited` with the whole seconds (at least 1) until one is;
    /// the agent unknown in `team` → `NotFound`.
    async fn take_tokens(
        &self,
        team: Uuid,
        agent: Uuid,
        limit: RateLimit,
        want: u32,
        at: DateTime<Utc>,
    ) -> BusResult<u32>;
}
