//! Creating, finding, re-limiting and deleting a team's streams, and the account's storage.

use async_nats::jetstream::response::Response;
use async_nats::jetstream::stream::{self, DiscardPolicy, Info, RetentionPolicy, StorageType};
use async_nats::jetstream::{self as js_api};
use crewbus_domain::{
    BusError, BusResult, Provisioned, QuotaChange, Quotas, Reservation, StorageAccount, StreamKind,
    Uuid,
};
use futures_util::StreamExt;
use serde::Deserialize;

use crate::backend::JetStreamBackend;
use crate::config::Config;
use crate::connection;
use crate::errors::{Failure, Op, bus_error, code};

/// Largest message the body stream stores, in bytes: a 1 MiB body plus headers.
pub const BODY_STREAM_MAX_MESSAGE_SIZE: i32 = 2 * 1024 * 1024;
/// Largest message the inbox stream stores, in bytes (references carry ids, never bodies).
pub const INBOX_STREAM_MAX_MESSAGE_SIZE: i32 = 64 * 1024;

/// `$JS.API.INFO` as every server line answers it (fields a line omits default to 0 / −1).
#[derive(Debug, Deserialize)]
struct AccountInfo {
    #[serde(default)]
    storage: u64,
    #[serde(default)]
    reserved_storage: u64,
    #[serde(default)]
    limits: AccountLimits,
}

#[derive(Debug, Deserialize)]
struct AccountLimits {
    /// File storage budget in bytes; −1 is unlimited.
    #[serde(default = "unlimited")]
    max_storage: i64,
}

impl Default for AccountLimits {
    fn default() -> Self {
        AccountLimits {
            max_storage: unlimited(),
        }
    }
}

fn unlimited() -> i64 {
    -1
}

/// A provisioning session: one connection, closed when dropped.
struct Admin {
    js: js_api::Context,
    config: Config,
}

fn as_limit(v: i64) -> u64 {
    if v < 0 { u64::MAX } else { v as u64 }
}

fn limits(info: &Info) -> Quotas {
    Quotas {
        max_messages: as_limit(info.config.max_messages),
        max_bytes: as_limit(info.config.max_bytes),
    }
}

fn provisioned(info: &Info, kind: StreamKind, created: bool) -> Provisioned {
    Provisioned {
        name: info.config.name.clone(),
        kind,
        created,
        limits: limits(info),
        messages: info.state.messages,
        bytes: info.state.bytes,
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Admin {
    async fn open(config: &Config) -> BusResult<Admin> {
        config.validate()?;
        let client = connection::open(config).await?;
        Ok(Admin {
            js: connection::context(client, config),
            config: config.clone(),
        })
    }

    /// The stream configuration a team's `kind` stream is created with.
    fn stream_config(&self, team: Uuid, kind: StreamKind) -> stream::Config {
        let c = &self.config;
        let q = c.quotas(kind);
        let common = stream::Config {
            name: c.stream_name(team, kind),
            subjects: vec![c.stream_subject(team, kind)],
            max_messages: clamp(q.max_messages),
            max_bytes: clamp(q.max_bytes),
            storage: StorageType::File,
            num_replicas: c.replicas as usize,
            duplicate_window: c.duplicate_window,
            ..Default::default()
        };
        match kind {
            StreamKind::Bodies => stream::Config {
                retention: RetentionPolicy::Limits,
                discard: DiscardPolicy::New,
                discard_new_per_subject: true,
                max_messages_per_subject: 1,
                max_message_size: BODY_STREAM_MAX_MESSAGE_SIZE,
                allow_direct: true,
                ..common
            },
            StreamKind::Inbox => stream::Config {
                retention: RetentionPolicy::WorkQueue,
                discard: DiscardPolicy::Old,
                max_age: c.inbox_max_age,
                max_message_size: INBOX_STREAM_MAX_MESSAGE_SIZE,
                ..common
            },
        }
    }

    /// The stream's info, `None` when it does not exist.
    async fn read(&self, name: &str) -> BusResult<Option<Info>> {
        match self.js.get_stream(name).await {
            Ok(mut s) => Ok(Some(
                s.info()
                    .await
                    .map_err(|e| bus_error(Op::Request, "stream info", Failure::from(e)))?
                    .clone(),
            )),
            Err(e) => {
                let failure = Failure::from(e);
                if failure.is_not_found() {
                    Ok(None)
                } else {
                    Err(bus_error(Op::Request, "stream lookup", failure))
                }
            }
        }
    }

    async fn read_existing(&self, team: Uuid, kind: StreamKind) -> BusResult<Info> {
        let name = self.config.stream_name(team, kind);
        self.read(&name)
            .await?
            .ok_or_else(|| BusError::NotProvisioned {
                what: format!("{kind} stream {name}"),
                remedy: Config::provision_command(team),
            })
    }

    async fn account(&self) -> BusResult<StorageAccount> {
        // Read `$JS.API.INFO` with our own lenient shape: async-nats 0.51's `query_account`
        // requires `reserved_storage`, which nats-server 2.9.10 does not send.
        let response: Response<AccountInfo> = self
            .js
            .request("INFO", &())
            .await
            .map_err(|e| bus_error(Op::Request, "account info", Failure::from(e)))?;
        let account = match response {
            Response::Ok(a) => a,
            Response::Err { error } => {
                return Err(bus_error(Op::Request, "account info", Failure::from(error)));
            }
        };
        // 2.9.10 does not report reserved storage: compute Σ max_bytes × replicas.
        let mut computed: u64 = 0;
        let mut streams = self.js.streams();
        while let Some(info) = streams.next().await {
            let info =
                info.map_err(|e| bus_error(Op::Request, "listing streams", Failure::from(e)))?;
            if info.config.storage == StorageType::File && info.config.max_bytes > 0 {
                computed = computed.saturating_add(
                    (info.config.max_bytes as u64)
                        .saturating_mul(info.config.num_replicas.max(1) as u64),
                );
            }
        }
        Ok(StorageAccount {
            used: account.storage,
            reserved: account.reserved_storage.max(computed),
            budget: u64::try_from(account.limits.max_storage).ok(),
        })
    }

    /// Refuses a reservation the account cannot hold.
    async fn ensure_fits(&self, reservation: Reservation) -> BusResult<StorageAccount> {
        let account = self.account().await?;
        let extra = reservation.bytes();
        if extra > 0 && !account.fits(extra) {
            return Err(account.refuse(reservation));
        }
        Ok(account)
    }

    async fn update(&self, config: stream::Config, reservation: Reservation) -> BusResult<Info> {
        match self.js.update_stream(config).await {
            Ok(info) => Ok(info),
            Err(e) => Err(self
                .storage_aware(Failure::from(e), reservation, "updating a stream")
                .await),
        }
    }

    /// Maps a failure; a 10047 becomes `InsufficientStorage` with the account's arithmetic.
    async fn storage_aware(
        &self,
        failure: Failure,
        reservation: Reservation,
        what: &str,
    ) -> BusError {
        if failure.code() == Some(code::STORAGE_RESOURCES_EXCEEDED)
            && let Ok(account) = self.account().await
        {
            return account.refuse(reservation);
        }
        bus_error(Op::Request, what, failure)
    }

    async fn provision(&self, team: Uuid, kind: StreamKind) -> BusResult<Provisioned> {
        let name = self.config.stream_name(team, kind);
        if let Some(info) = self.read(&name).await? {
            return Ok(provisioned(&info, kind, false));
        }
        let reservation =
            Reservation::new(self.config.quotas(kind).max_bytes, self.config.replicas);
        self.ensure_fits(reservation).await?;
        match self.js.create_stream(self.stream_config(team, kind)).await {
            Ok(mut s) => {
                let info = s
                    .info()
                    .await
                    .map_err(|e| bus_error(Op::Request, "stream info", Failure::from(e)))?
                    .clone();
                Ok(provisioned(&info, kind, true))
            }
            Err(e) => {
                let failure = Failure::from(e);
                if failure.code() == Some(code::STREAM_NAME_EXIST) {
                    // Created concurrently: it exists and keeps its limits.
                    let info = self.read_existing(team, kind).await?;
                    return Ok(provisioned(&info, kind, false));
                }
                Err(self
                    .storage_aware(failure, reservation, "creating a stream")
                    .await)
            }
        }
    }

    async fn check_update(&self, team: Uuid, kind: StreamKind) -> BusResult<QuotaChange> {
        let info = self.read_existing(team, kind).await?;
        let change = QuotaChange {
            name: info.config.name.clone(),
            kind,
            current: limits(&info),
            wanted: self.config.quotas(kind),
            messages: info.state.messages,
            bytes: info.state.bytes,
            replicas: info.config.num_replicas.max(1) as u32,
        };
        if change.below_contents() {
            return Err(change.below_contents_error());
        }
        self.ensure_fits(change.reservation()).await?;
        Ok(change)
    }

    async fn apply_update(
        &self,
        team: Uuid,
        kind: StreamKind,
        change: &QuotaChange,
    ) -> BusResult<Provisioned> {
        change.wanted.validate(kind)?;
        let info = self.read_existing(team, kind).await?;
        let current = limits(&info);
        let wanted = change.wanted;
        if current == wanted {
            return Ok(provisioned(&info, kind, false));
        }
        let live = QuotaChange {
            current,
            messages: info.state.messages,
            bytes: info.state.bytes,
            replicas: info.config.num_replicas.max(1) as u32,
            ..change.clone()
        };
        if live.below_contents() {
            return Err(live.below_contents_error());
        }
        let reservation = live.reservation();
        self.ensure_fits(reservation).await?;
        let mut next = info.config.clone();
        next.max_messages = clamp(wanted.max_messages);
        next.max_bytes = clamp(wanted.max_bytes);
        if !live.is_decrease() {
            let updated = self.update(next, reservation).await?;
            return Ok(provisioned(&updated, kind, false));
        }
        // A decrease. nats-server 2.9.x evicts the oldest messages when a limit is lowered
        // below the contents, even on a discard-new stream, and a snapshot check cannot stop
        // a racing publisher. So: pause intake (subjects → a placeholder; publishers get
        // "no responders", a retryable error), read the now-stable contents, refuse if they
        // exceed the new ceiling, else restore the subjects together with the new limits.
        let original = info.config.clone();
        let mut paused = original.clone();
        paused.subjects = vec![self.config.paused_subject(team, kind)];
        self.update(paused, Reservation::new(0, 1)).await?;
        let settled = async {
            let now = self.read_existing(team, kind).await?;
            let at_pause = QuotaChange {
                messages: now.state.messages,
                bytes: now.state.bytes,
                ..live.clone()
            };
            if at_pause.below_contents() {
                return Err(at_pause.below_contents_error());
            }
            self.update(next, Reservation::new(0, 1)).await
        }
        .await;
        match settled {
            Ok(updated) => Ok(provisioned(&updated, kind, false)),
            Err(e) => {
                if let Err(restore) = self.update(original, Reservation::new(0, 1)).await {
                    tracing::error!(
                        stream = %live.name,
                        error = %restore,
                        "could not restore the stream's subjects after a refused quota decrease"
                    );
                }
                Err(e)
            }
        }
    }

    async fn deprovision(&self, team: Uuid) -> BusResult<()> {
        for kind in [StreamKind::Bodies, StreamKind::Inbox] {
            let name = self.config.stream_name(team, kind);
            if let Err(e) = self.js.delete_stream(&name).await {
                let failure = Failure::from(e);
                if !failure.is_not_found() {
                    return Err(bus_error(Op::Request, "deleting a stream", failure));
                }
            }
        }
        Ok(())
    }
}

impl JetStreamBackend {
    /// Creates or finds the team's body stream (file storage, limits retention, discard new,
    /// one message per subject with discard-new-per-subject, direct get allowed).
    ///
    /// An existing stream keeps its limits whatever `config` asks (`created: false`;
    /// [`Provisioned::differs_from`] tells the caller). A create the account cannot reserve
    /// (`max_bytes × replicas`) is refused before anything is touched: `InsufficientStorage`
    /// with the arithmetic. Run with the provisioning credential. Errors: `Invalid` config;
    /// `Unauthenticated`; `Unavailable`/`Timeout`.
    pub async fn provision(config: &Config, team_id: Uuid) -> BusResult<Provisioned> {
        Admin::open(config)
            .await?
            .provision(team_id, StreamKind::Bodies)
            .await
    }

    /// Creates or finds the team's inbox stream (work-queue retention, discard old, `max_age`,
    /// duplicate window). Same rules as [`JetStreamBackend::provision`].
    pub async fn provision_inbox(config: &Config, team_id: Uuid) -> BusResult<Provisioned> {
        Admin::open(config)
            .await?
            .provision(team_id, StreamKind::Inbox)
            .await
    }

    /// What changing the `kind` stream's quotas to `config`'s would do, without doing it.
    /// Errors: `NotProvisioned`; `Conflict` naming contents and ceiling when the stream holds
    /// more than the new ceiling; `InsufficientStorage` when the account cannot reserve
    /// [`QuotaChange::additional_bytes`].
    pub async fn check_update(
        config: &Config,
        team_id: Uuid,
        kind: StreamKind,
    ) -> BusResult<QuotaChange> {
        Admin::open(config).await?.check_update(team_id, kind).await
    }

    /// The team's `kind` stream as it stands (limits and contents from its stream info),
    /// judging nothing: `$JS.API.STREAM.INFO` only, so the runtime credential may ask.
    /// Errors: no such stream → `NotProvisioned`; the broker's.
    pub async fn stream_status(
        config: &Config,
        team_id: Uuid,
        kind: StreamKind,
    ) -> BusResult<Provisioned> {
        let admin = Admin::open(config).await?;
        let info = admin.read_existing(team_id, kind).await?;
        Ok(provisioned(&info, kind, false))
    }

    /// [`JetStreamBackend::check_update`], then [`JetStreamBackend::apply_update`]. The result
    /// carries contents read back afterwards.
    pub async fn update_quotas(
        config: &Config,
        team_id: Uuid,
        kind: StreamKind,
    ) -> BusResult<Provisioned> {
        let admin = Admin::open(config).await?;
        let change = admin.check_update(team_id, kind).await?;
        admin.apply_update(team_id, kind, &change).await
    }

    /// Applies a vetted change (`change.wanted`), re-checking contents and reservation against
    /// the stream as it is now. A decrease pauses intake during the change (publishers get a
    /// retryable "no responders") so no acknowledged body is evicted on any server line; it is
    /// refused with `Conflict` when the contents at the pause exceed the new ceiling, and the
    /// stream is restored as it was.
    pub async fn apply_update(
        config: &Config,
        team_id: Uuid,
        kind: StreamKind,
        change: &QuotaChange,
    ) -> BusResult<Provisioned> {
        Admin::open(config)
            .await?
            .apply_update(team_id, kind, change)
            .await
    }

    /// The account's storage: used bytes, reserved bytes (the server's figure, or Σ max_bytes ×
    /// replicas over every file stream where the server does not report it, as 2.9.10 does
    /// not) and the budget (`None`: unlimited).
    pub async fn storage_account(config: &Config) -> BusResult<StorageAccount> {
        Admin::open(config).await?.account().await
    }

    /// Deletes the team's body and inbox streams (destructive; "not found" is success).
    pub async fn deprovision(config: &Config, team_id: Uuid) -> BusResult<()> {
        Admin::open(config).await?.deprovision(team_id).await
    }
}
