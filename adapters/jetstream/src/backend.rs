//! `JetStreamBackend`: a connected adapter for one team.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_nats::Client;
use async_nats::jetstream::{self, consumer::PullConsumer};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{BusError, BusResult, Envelope, Locator, Published, StreamKind, Uuid};
use crewbus_ports::MessagingBackend;

use crate::config::Config;
use crate::connection;
use crate::errors::{Failure, Op, bus_error};

/// Bytes reserved for the message headers (publish key, message id, team, `Nats-Msg-Id`) when
/// the effective body limit is derived from the server's `max_payload`.
pub const HEADER_ALLOWANCE: u64 = 1024;

/// A connected adapter for one team: its body stream (bodies, [`MessagingBackend`]) and its
/// inbox stream (references, [`crewbus_ports::Inbox`]).
///
/// Cheap to clone (shares one connection). Built by [`JetStreamBackend::connect`], which never
/// creates a stream; streams are created by [`JetStreamBackend::provision`] and
/// [`JetStreamBackend::provision_inbox`] with the provisioning credential.
#[derive(Clone)]
pub struct JetStreamBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) team: Uuid,
    pub(crate) config: Config,
    pub(crate) client: Client,
    pub(crate) js: jetstream::Context,
    pub(crate) body_stream: String,
    pub(crate) inbox_stream: String,
    pub(crate) body_limit: u64,
    /// The server's `max_payload` when connected, bytes (for the lowered-limit warning).
    pub(crate) server_max_payload: u64,
    /// Durable pull consumers already created or looked up, by recipient key.
    pub(crate) consumers: Mutex<HashMap<String, PullConsumer>>,
}

impl fmt::Debug for JetStreamBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JetStreamBackend")
            .field("team", &self.inner.team)
            .field("body_stream", &self.inner.body_stream)
            .field("inbox_stream", &self.inner.inbox_stream)
            .field("body_limit", &self.inner.body_limit)
            .field("config", &self.inner.config)
            .finish()
    }
}

impl JetStreamBackend {
    /// The backend name recorded on conversations and outbox rows.
    pub const NAME: &'static str = "jetstream";

    /// Adopts the team's existing body stream over a new connection. Never creates a stream.
    /// Logs one warning when the server lowers the effective body limit (see
    /// [`JetStreamBackend::body_limit_lowered`]).
    ///
    /// Errors: invalid `config` → `Invalid`; the body stream does not exist → `NotProvisioned`
    /// naming the command that provisions it; a refused credential → `Unauthenticated`; broker
    /// unreachable → `Unavailable`/`Timeout` (within `config.request_timeout`).
    pub async fn connect(config: &Config, team_id: Uuid) -> BusResult<Self> {
        config.validate()?;
        let client = connection::open(config).await?;
        let backend = Self::connect_with(client, config, team_id).await?;
        backend.warn_if_body_limit_lowered();
        Ok(backend)
    }

    /// [`JetStreamBackend::connect`] over an existing connection (the registry shares one),
    /// without the warning: the registry logs it once per team, however many times it connects.
    pub(crate) async fn connect_with(
        client: Client,
        config: &Config,
        team_id: Uuid,
    ) -> BusResult<Self> {
        config.validate()?;
        let js = connection::context(client.clone(), config);
        let body_stream = config.stream_name(team_id, StreamKind::Bodies);
        let inbox_stream = config.stream_name(team_id, StreamKind::Inbox);
        let info = match js.get_stream(&body_stream).await {
            Ok(mut stream) => stream
                .info()
                .await
                .map_err(|e| bus_error(Op::Request, "body stream info", Failure::from(e)))?
                .clone(),
            Err(e) => {
                let failure = Failure::from(e);
                if failure.is_not_found() {
                    return Err(BusError::NotProvisioned {
                        what: format!("body stream {body_stream}"),
                        remedy: Config::provision_command(team_id),
                    });
                }
                return Err(bus_error(Op::Request, "body stream lookup", failure));
            }
        };
        let max_payload = client.server_info().max_payload as u64;
        let mut body_limit = config
            .body_limit
            .min(max_payload.saturating_sub(HEADER_ALLOWANCE));
        if info.config.max_message_size > 0 {
            body_limit = body_limit
                .min((info.config.max_message_size as u64).saturating_sub(HEADER_ALLOWANCE));
        }
        Ok(JetStreamBackend {
            inner: Arc::new(Inner {
                team: team_id,
                config: config.clone(),
                client,
                js,
                body_stream,
                inbox_stream,
                body_limit,
                server_max_payload: max_payload,
                consumers: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Whether the server (its `max_payload`) or the stream (its maximum message size) lowers
    /// the effective body limit below the configured one.
    pub fn body_limit_lowered(&self) -> bool {
        self.inner.body_limit < self.inner.config.body_limit
    }

    /// Logs the lowered body limit (configured, effective, the server's `max_payload`, the
    /// stream) as a warning, if it is lowered. Returns whether it logged.
    pub(crate) fn warn_if_body_limit_lowered(&self) -> bool {
        if !self.body_limit_lowered() {
            return false;
        }
        tracing::warn!(
            configured = self.inner.config.body_limit,
            effective = self.inner.body_limit,
            server_max_payload = self.inner.server_max_payload,
            stream = %self.inner.body_stream,
            "the server lowers the effective body limit: raise max_payload in the server's \
             configuration (2 MB carries a 1 MiB body)"
        );
        true
    }

    /// The body stream's name (`<PREFIX>_B_<team hex>`).
    pub fn stream(&self) -> &str {
        &self.inner.body_stream
    }

    /// The inbox stream's name (`<PREFIX>_I_<team hex>`).
    pub fn inbox_stream(&self) -> &str {
        &self.inner.inbox_stream
    }

    /// The team this adapter serves.
    pub fn team(&self) -> Uuid {
        self.inner.team
    }

    /// The effective body limit in bytes: the smaller of the configured limit and what the
    /// server's `max_payload` (and the stream's maximum message size) can carry after
    /// [`HEADER_ALLOWANCE`].
    pub fn body_limit(&self) -> u64 {
        self.inner.body_limit
    }

    /// Whether a broker answers with `config`: opens and drops its own connection (a question
    /// about the deployment, not a stream). Bounded by `config.request_timeout`.
    pub async fn reachable(config: &Config) -> bool {
        match connection::open(config).await {
            Ok(client) => {
                let ok = tokio::time::timeout(config.request_timeout, client.flush())
                    .await
                    .is_ok_and(|r| r.is_ok());
                drop(client);
                ok
            }
            Err(_) => false,
        }
    }

    pub(crate) fn request_timeout(&self) -> std::time::Duration {
        self.inner.config.request_timeout
    }
}

#[async_trait]
impl MessagingBackend for JetStreamBackend {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn max_body_bytes(&self) -> u64 {
        self.body_limit()
    }

    async fn publish(&self, envelope: Envelope) -> Published {
        self.publish_body(&envelope).await
    }

    async fn fetch(&self, locator: &Locator, message_id: Uuid) -> BusResult<Option<String>> {
        self.fetch_body(locator, message_id).await
    }

    async fn retain(&self, before: DateTime<Utc>) -> BusResult<u64> {
        self.retain_bodies(before).await
    }

    async fn reconcile(&self, envelope: &Envelope) -> BusResult<Option<Locator>> {
        self.reconcile_body(envelope).await
    }
}
