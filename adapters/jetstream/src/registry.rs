//! The JetStream registry: per-team adapters over one shared connection.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::Client;
use async_trait::async_trait;
use crewbus_domain::{BusError, BusResult, StreamKind, Uuid};
use crewbus_ports::{Backends, Inbox, MessagingBackend};

use crate::backend::JetStreamBackend;
use crate::config::Config;
use crate::connection;
use crate::errors::{Failure, Op, bus_error};

/// How long a cached team adapter is served before its streams are checked again.
pub const REVALIDATE_AFTER: Duration = Duration::from_secs(5);

struct Cached {
    backend: JetStreamBackend,
    /// When each stream was last found to exist (`None`: not yet, or found missing), indexed
    /// by [`slot`].
    checked: [Option<Instant>; 2],
}

/// The index of `kind` in [`Cached::checked`].
fn slot(kind: StreamKind) -> usize {
    match kind {
        StreamKind::Bodies => 0,
        StreamKind::Inbox => 1,
    }
}

/// Hands out each team's [`JetStreamBackend`] (answers for the name `"jetstream"`).
///
/// One registry holds one [`Config`], so one (servers, credential) pair: it opens ONE connection,
/// lazily, and every team's adapter shares it — thousands of teams never open thousands of
/// connections. Adapters are cached per team. Each stream is checked on its own: a body backend
/// is served while the team's body stream exists, an inbox while its inbox stream exists, each
/// checked again at most every [`REVALIDATE_AFTER`] (configurable). A stream that vanished is
/// reported (`NotProvisioned` naming it and the command that provisions it, logged once), never
/// served stale — and only that stream: bodies stay readable while a deleted inbox stream waits
/// to be provisioned again (the ledger tops deliveries up meanwhile). A vanished body stream
/// evicts the team's adapter. The warning that the server lowers the effective body limit is
/// logged once per team for the registry's life, however many lookups race to connect it first
/// and however often it is evicted and connected again.
pub struct JetStreamBackends {
    config: Config,
    revalidate_after: Duration,
    connection: tokio::sync::Mutex<Option<Client>>,
    connections_opened: AtomicU64,
    teams: Mutex<HashMap<Uuid, Cached>>,
    /// Teams whose lowered body limit was already logged.
    warned: Mutex<HashSet<Uuid>>,
}

impl fmt::Debug for JetStreamBackends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStreamBackends")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl JetStreamBackends {
    /// A registry for `config` (validated now; nothing is contacted until the first lookup).
    /// Errors: `Invalid` config.
    pub fn new(config: Config) -> BusResult<Self> {
        Self::with_revalidation(config, REVALIDATE_AFTER)
    }

    /// [`JetStreamBackends::new`] with another revalidation interval (`Duration::ZERO` checks
    /// the team's streams on every lookup).
    pub fn with_revalidation(config: Config, revalidate_after: Duration) -> BusResult<Self> {
        config.validate()?;
        Ok(JetStreamBackends {
            config,
            revalidate_after,
            connection: tokio::sync::Mutex::new(None),
            connections_opened: AtomicU64::new(0),
            teams: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
        })
    }

    /// How many connections this registry has opened (1 after the first lookup, whatever the
    /// number of teams; more only if opening failed and was retried).
    pub fn connections_opened(&self) -> u64 {
        self.connections_opened.load(Ordering::Relaxed)
    }

    /// How many team adapters are cached.
    pub fn cached_teams(&self) -> usize {
        self.teams.lock().expect("registry cache").len()
    }

    async fn client(&self) -> BusResult<Client> {
        let mut slot = self.connection.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let client = connection::open(&self.config).await?;
        self.connections_opened.fetch_add(1, Ordering::Relaxed);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Whether `kind`'s stream of `team` exists; errors other than "not found" propagate.
    async fn stream_exists(
        &self,
        client: &Client,
        team: Uuid,
        kind: StreamKind,
    ) -> BusResult<bool> {
        let js = connection::context(client.clone(), &self.config);
        match js.get_stream(self.config.stream_name(team, kind)).await {
            Ok(_) => Ok(true),
            Err(e) => {
                let failure = Failure::from(e);
                if failure.is_not_found() {
                    Ok(false)
                } else {
                    Err(bus_error(Op::Request, "stream lookup", failure))
                }
            }
        }
    }

    /// The team's adapter for a use of its `kind` stream: cached, or connected over the shared
    /// connection. Served while that stream exists; it is checked on first use and again once
    /// its check is older than the revalidation interval. Errors: the stream (or, when the
    /// adapter is not cached yet, the body stream) missing → `NotProvisioned`; the broker
    /// failing → as [`bus_error`].
    async fn team(&self, team: Uuid, kind: StreamKind) -> BusResult<JetStreamBackend> {
        let client = self.client().await?;
        let cached = {
            let teams = self.teams.lock().expect("registry cache");
            teams.get(&team).map(|c| {
                (
                    c.backend.clone(),
                    c.checked[slot(kind)].is_some_and(|at| at.elapsed() < self.revalidate_after),
                )
            })
        };
        let (backend, exists) = match cached {
            Some((backend, true)) => return Ok(backend),
            Some((backend, false)) => {
                let exists = self.stream_exists(&client, team, kind).await?;
                (backend, exists)
            }
            None => {
                // Connecting reads the body stream: it exists when this succeeds.
                let backend =
                    JetStreamBackend::connect_with(client.clone(), &self.config, team).await?;
                if backend.body_limit_lowered()
                    && self.warned.lock().expect("warned teams").insert(team)
                {
                    backend.warn_if_body_limit_lowered();
                }
                let exists =
                    kind == StreamKind::Bodies || self.stream_exists(&client, team, kind).await?;
                (backend, exists)
            }
        };
        let mut teams = self.teams.lock().expect("registry cache");
        if !exists {
            let name = self.config.stream_name(team, kind);
            let was_served = match kind {
                StreamKind::Bodies => teams.remove(&team).is_some(),
                StreamKind::Inbox => {
                    // Bodies stay served; the inbox's consumers are looked up afresh once the
                    // stream is provisioned again.
                    backend
                        .inner
                        .consumers
                        .lock()
                        .expect("consumer cache")
                        .clear();
                    let entry = teams.entry(team).or_insert_with(|| Cached {
                        backend: backend.clone(),
                        checked: [None; 2],
                    });
                    entry.checked[slot(kind)].take().is_some()
                }
            };
            if was_served {
                tracing::warn!(team = %team, stream = %name, "team stream vanished: no longer served until it is provisioned again");
            }
            return Err(BusError::NotProvisioned {
                what: format!("{kind} stream {name}"),
                remedy: Config::provision_command(team),
            });
        }
        let entry = teams.entry(team).or_insert_with(|| Cached {
            backend: backend.clone(),
            checked: [None; 2],
        });
        entry.checked[slot(kind)] = Some(Instant::now());
        Ok(entry.backend.clone())
    }

    fn check_name(name: &str) -> BusResult<()> {
        if name != JetStreamBackend::NAME {
            return Err(BusError::not_found(format!("body backend `{name}`")));
        }
        Ok(())
    }
}

#[async_trait]
impl Backends for JetStreamBackends {
    fn name(&self) -> &'static str {
        JetStreamBackend::NAME
    }

    async fn body_backend(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn MessagingBackend>> {
        Self::check_name(name)?;
        Ok(Arc::new(self.team(team, StreamKind::Bodies).await?))
    }

    async fn inbox(&self, team: Uuid, name: &str) -> BusResult<Arc<dyn Inbox>> {
        Self::check_name(name)?;
        Ok(Arc::new(self.team(team, StreamKind::Inbox).await?))
    }
}
