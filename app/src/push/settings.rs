//! The `[push]` configuration section and the composition rule for the push outbox.
//!
//! Destinations come from the configuration file; their credentials and signing secrets come from
//! named environment variables or files, **never inline** (an inline value is an unknown field and
//! refused). Example (TOML):
//!
//! ```toml
//! [push]
//! timeout_ms = 10000
//! key_ring = { master_key_file = "/run/secrets/crewbus-master-key", dir = "/var/lib/crewbus/keys" }
//!
//! [[push.destinations]]
//! name = "ops"
//! url = "https://hooks.example.com/crewbus"
//! authentication = { scheme = "Bearer", credentials = { env = "OPS_HOOK_TOKEN" } }
//! signing_keys = [{ env = "OPS_WHSEC" }, { file = "/run/secrets/ops-whsec-previous" }]
//! ```

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crewbus_domain::{Backoff, Destination, PushAuthentication, Secret, StoreError, TenantId};
use crewbus_ports::{KeyRing, PushStore};
use serde::Deserialize;

use super::delivery::DeliverySettings;
use super::http_transport::HttpTransport;
use super::key_ring::{LocalKeyRing, MasterKey, MasterKeyError};
use super::outbox::Outbox;
use super::signing::Signer;

/// Where a secret comes from: exactly one of an environment variable or a file (whose content is
/// trimmed of surrounding whitespace).
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SecretSource {
    /// Name of the environment variable holding the secret.
    pub env: Option<String>,
    /// Path of the file holding the secret.
    pub file: Option<PathBuf>,
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretSource")
            .field("env", &self.env)
            .field("file", &self.file)
            .finish()
    }
}

/// Why the push section cannot be turned into a working outbox. Never holds a secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushSetupError {
    /// A secret source names neither or both of `env` and `file`.
    #[error("{what}: give exactly one of `env` or `file`")]
    SecretSource {
        /// Which secret.
        what: String,
    },
    /// The environment variable is not set (or not Unicode).
    #[error("{what}: the environment variable {var} is not set")]
    MissingVariable {
        /// Which secret.
        what: String,
        /// The variable.
        var: String,
    },
    /// The secret file cannot be read.
    #[error("{what}: the file {} cannot be read", path.display())]
    UnreadableFile {
        /// Which secret.
        what: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The secret is empty.
    #[error("{what}: the secret is empty")]
    EmptySecret {
        /// Which secret.
        what: String,
    },
    /// A destination breaks a rule (blank or duplicate name, bad URL, bad signing key).
    #[error("push destination: {0}")]
    Destination(String),
    /// The master key cannot be loaded.
    #[error("{key}: {source}")]
    MasterKey {
        /// The configuration key naming the master key's source.
        key: &'static str,
        /// Why it cannot be loaded.
        #[source]
        source: MasterKeyError,
    },
    /// The key ring directory cannot be used.
    #[error("push.key_ring.dir: {0}")]
    KeyRing(#[source] StoreError),
    /// A persistent push store without a key ring, and `allow_unsealed` is not set.
    #[error(
        "push.key_ring: a persistent push store needs [push.key_ring] (credentials are sealed at rest); set push.allow_unsealed = true only for development"
    )]
    UnsealedRefused,
    /// The HTTP client cannot be built.
    #[error("push.timeout_ms: the push HTTP client cannot be built")]
    Transport,
}

impl SecretSource {
    /// Reads the secret. `what` names it in errors (never its value).
    pub fn read(&self, what: &str) -> Result<Secret, PushSetupError> {
        let value = match (&self.env, &self.file) {
            (Some(var), None) => {
                std::env::var(var).map_err(|_| PushSetupError::MissingVariable {
                    what: what.to_owned(),
                    var: var.clone(),
                })?
            }
            (None, Some(path)) => {
                std::fs::read_to_string(path).map_err(|source| PushSetupError::UnreadableFile {
                    what: what.to_owned(),
                    path: path.clone(),
                    source,
                })?
            }
            _ => {
                return Err(PushSetupError::SecretSource {
                    what: what.to_owned(),
                });
            }
        };
        let secret = Secret::new(value.trim());
        drop(zeroize::Zeroizing::new(value));
        if secret.is_empty() {
            return Err(PushSetupError::EmptySecret {
                what: what.to_owned(),
            });
        }
        Ok(secret)
    }
}

/// `Authorization: <scheme> <credentials>` of a destination.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthenticationSettings {
    /// The scheme. Default `Bearer`.
    #[serde(default = "bearer")]
    pub scheme: String,
    /// Where the credential comes from.
    pub credentials: SecretSource,
}

fn bearer() -> String {
    "Bearer".to_owned()
}

/// One `[[push.destinations]]` entry.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationSettings {
    /// Unique, non-blank name; the registration id is `operator:<name>`.
    pub name: String,
    /// Absolute http(s) URL, without userinfo (`user:password@` is refused at start-up: give
    /// credentials in `authentication`, which is sealed). Stored in clear as configured, query
    /// string included; printed and logged without userinfo or query.
    pub url: String,
    /// Optional `Authorization` header.
    #[serde(default)]
    pub authentication: Option<AuthenticationSettings>,
    /// Standard Webhooks secrets (`whsec_<base64>`), newest first during a rotation.
    #[serde(default)]
    pub signing_keys: Vec<SecretSource>,
}

impl fmt::Debug for DestinationSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DestinationSettings")
            .field("name", &self.name)
            .field("url", &crewbus_domain::redact_url(&self.url))
            .field("authentication", &self.authentication)
            .field("signing_keys", &self.signing_keys)
            .finish()
    }
}

/// The local key ring: a master key (exactly one source) and the directory of scope keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRingSettings {
    /// Environment variable holding the base64 master key.
    #[serde(default)]
    pub master_key_env: Option<String>,
    /// File holding the master key (base64, or 32 raw bytes).
    #[serde(default)]
    pub master_key_file: Option<PathBuf>,
    /// Directory of the scope keys (shared by every process of the deployment).
    pub dir: PathBuf,
}

/// The `[push]` section. Durations in milliseconds unless the name says otherwise.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushSettings {
    /// The operator's destinations. Default none.
    pub destinations: Vec<DestinationSettings>,
    /// The local key ring sealing credentials at rest. Required with a persistent push store.
    pub key_ring: Option<KeyRingSettings>,
    /// Development only: allow a persistent push store without a key ring. Default false.
    pub allow_unsealed: bool,
    /// Per-request timeout. Default 10 000.
    pub timeout_ms: u64,
    /// Registrations served at once. Default 16.
    pub concurrency: usize,
    /// Records per registration per turn. Default 100.
    pub page: usize,
    /// Claim length, in seconds. Default 300.
    pub lease_secs: u64,
    /// Rest of an idle registration. Default 1 000.
    pub idle_ms: u64,
    /// How often the worker looks for due registrations while it claimed one within the last
    /// 30 s (and for 30 s after its start); after that every 5 s (`push/delivery.rs`). Default
    /// 250.
    pub poll_ms: u64,
    /// First retry delay. Default 500.
    pub backoff_base_ms: u64,
    /// Largest retry delay (also the bound of `Retry-After`). Default 60 000.
    pub backoff_cap_ms: u64,
    /// Failed attempts in a row after which a registration parks. Default 12.
    pub max_attempts: u32,
    /// Delivery attempts each registration's attempts log keeps (time, HTTP status or error,
    /// duration), the newest first: 1 to 1000. Default 20.
    pub attempts_kept: usize,
    /// Days a finished registration's attempts log is kept after its newest attempt (then
    /// pruned, hourly): 1 to 3650. Default 7.
    pub attempts_kept_days: u64,
}

/// The range of `push.attempts_kept` (count).
pub const ATTEMPTS_KEPT: std::ops::RangeInclusive<usize> = 1..=crewbus_domain::MAX_PAGE;

/// The range of `push.attempts_kept_days` (days).
pub const ATTEMPTS_KEPT_DAYS: std::ops::RangeInclusive<u64> = 1..=3650;

impl Default for PushSettings {
    fn default() -> Self {
        let d = DeliverySettings::default();
        PushSettings {
            destinations: Vec::new(),
            key_ring: None,
            allow_unsealed: false,
            timeout_ms: 10_000,
            concurrency: d.concurrency,
            page: d.page,
            lease_secs: d.lease.as_secs(),
            idle_ms: d.idle.as_millis() as u64,
            poll_ms: 250,
            backoff_base_ms: d.backoff.base.as_millis() as u64,
            backoff_cap_ms: d.backoff.cap.as_millis() as u64,
            max_attempts: d.backoff.max_attempts,
            attempts_kept: d.attempts_kept,
            attempts_kept_days: super::runtime::DEFAULT_ATTEMPTS_KEPT_DAYS,
        }
    }
}

impl PushSettings {
    /// Resolves every destination (reading its secrets) and checks them as `Outbox::new` would,
    /// returning an error instead of panicking. Errors: a secret source or a destination rule.
    pub fn destinations(&self) -> Result<Vec<Destination>, PushSetupError> {
        let mut names = HashSet::new();
        let mut out = Vec::with_capacity(self.destinations.len());
        for (i, d) in self.destinations.iter().enumerate() {
            let name = d.name.trim();
            // Every error names the key (`push.destinations[i]…`) and the destination.
            let key = format!("push.destinations[{i}]");
            let authentication = match &d.authentication {
                Some(a) => Some(PushAuthentication {
                    scheme: a.scheme.clone(),
                    credentials: a.credentials.read(&format!(
                        "{key}.authentication.credentials (destination {name:?})"
                    ))?,
                }),
                None => None,
            };
            let signing_keys = d
                .signing_keys
                .iter()
                .enumerate()
                .map(|(k, s)| s.read(&format!("{key}.signing_keys[{k}] (destination {name:?})")))
                .collect::<Result<Vec<_>, _>>()?;
            let destination = Destination {
                name: d.name.clone(),
                url: d.url.clone(),
                authentication,
                signing_keys,
            };
            destination
                .validate()
                .map_err(|e| PushSetupError::Destination(format!("{key}: {e}")))?;
            Signer::new(&destination.signing_keys).map_err(|e| {
                PushSetupError::Destination(format!(
                    "{key}.signing_keys (destination {name:?}): {e}"
                ))
            })?;
            if !names.insert(name.to_owned()) {
                return Err(PushSetupError::Destination(format!(
                    "{key}.name: two destinations are named {name:?}"
                )));
            }
            out.push(destination);
        }
        Ok(out)
    }

    /// The local key ring, if configured. Errors: master key source (`MasterKey`), the
    /// directory (`KeyRing`).
    pub fn key_ring(&self) -> Result<Option<LocalKeyRing>, PushSetupError> {
        let Some(k) = &self.key_ring else {
            return Ok(None);
        };
        let master = match (&k.master_key_env, &k.master_key_file) {
            (Some(var), None) => {
                MasterKey::from_env(var).map_err(|e| PushSetupError::MasterKey {
                    key: "push.key_ring.master_key_env",
                    source: e,
                })?
            }
            (None, Some(path)) => {
                MasterKey::from_file(path).map_err(|e| PushSetupError::MasterKey {
                    key: "push.key_ring.master_key_file",
                    source: e,
                })?
            }
            _ => {
                return Err(PushSetupError::SecretSource {
                    what: "push.key_ring: the master key (master_key_env or master_key_file)"
                        .into(),
                });
            }
        };
        LocalKeyRing::new(master, &k.dir)
            .map(Some)
            .map_err(PushSetupError::KeyRing)
    }

    /// The delivery worker's settings.
    pub fn delivery(&self) -> DeliverySettings {
        DeliverySettings {
            concurrency: self.concurrency.max(1),
            page: self.page.clamp(1, crewbus_domain::MAX_PAGE),
            lease: Duration::from_secs(self.lease_secs),
            idle: Duration::from_millis(self.idle_ms),
            backoff: Backoff {
                base: Duration::from_millis(self.backoff_base_ms),
                cap: Duration::from_millis(self.backoff_cap_ms),
                max_attempts: self.max_attempts,
            },
            attempts_kept: self
                .attempts_kept
                .clamp(*ATTEMPTS_KEPT.start(), *ATTEMPTS_KEPT.end()),
        }
    }

    /// How long a finished registration's attempts log is kept (`attempts_kept_days`).
    pub fn attempts_kept_for(&self) -> Duration {
        Duration::from_secs(
            self.attempts_kept_days
                .clamp(*ATTEMPTS_KEPT_DAYS.start(), *ATTEMPTS_KEPT_DAYS.end())
                * 86_400,
        )
    }

    /// How often the running worker looks for due registrations.
    pub fn poll(&self) -> Duration {
        Duration::from_millis(self.poll_ms)
    }

    /// The HTTP transport with the configured timeout. Errors: `Transport`.
    pub fn transport(&self) -> Result<HttpTransport, PushSetupError> {
        HttpTransport::new(Duration::from_millis(self.timeout_ms))
            .map_err(|_| PushSetupError::Transport)
    }

    /// The outbox over `store` per PUSH.md §6: destinations resolved, and the store sealed with
    /// `key_ring` when given (always, for a persistent store). A persistent store without a key
    /// ring is refused (`UnsealedRefused`) unless `allow_unsealed` is set; then a warning is logged
    /// when a destination has credentials (they are stored unsealed).
    pub fn outbox(
        &self,
        store: Arc<dyn PushStore>,
        persistent: bool,
        key_ring: Option<Arc<dyn KeyRing>>,
        tenant: TenantId,
    ) -> Result<Outbox, PushSetupError> {
        let destinations = self.destinations()?;
        let credentials = destinations.iter().any(|d| d.authentication.is_some());
        let outbox = Outbox::new(store, destinations);
        match key_ring {
            Some(keys) => Ok(outbox.sealed(keys, tenant)),
            None if persistent && !self.allow_unsealed => Err(PushSetupError::UnsealedRefused),
            None => {
                // Only a destination's `authentication` is sealed: without one there is nothing
                // stored unsealed to warn about.
                if persistent && credentials {
                    tracing::warn!(
                        "push credentials are stored unsealed (push.allow_unsealed = true)"
                    );
                }
                Ok(outbox)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> Result<PushSettings, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn secrets_come_from_files_or_variables_never_inline() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "tok-1\n").unwrap();
        let key = dir.path().join("whsec");
        std::fs::write(&key, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        let settings = parse(serde_json::json!({
            "destinations": [{
                "name": "ops",
                "url": "https://hooks.example.com/in",
                "authentication": { "credentials": { "file": token } },
                "signing_keys": [{ "file": key }],
            }]
        }))
        .unwrap();
        let d = settings.destinations().unwrap();
        assert_eq!(d[0].authentication.as_ref().unwrap().scheme, "Bearer");
        assert_eq!(
            d[0].authentication.as_ref().unwrap().credentials.expose(),
            "tok-1"
        );
        assert!(!format!("{settings:?} {d:?}").contains("tok-1"));

        // Inline secrets are unknown fields.
        assert!(
            parse(serde_json::json!({
                "destinations": [{
                    "name": "ops", "url": "https://h.example",
                    "authentication": { "credentials": "tok-inline" },
                }]
            }))
            .is_err()
        );
        assert!(
            parse(serde_json::json!({
                "destinations": [{ "name": "ops", "url": "https://h.example", "signing_keys": ["whsec_AAAA"] }]
            }))
            .is_err()
        );
    }

    #[test]
    fn bad_sources_and_destinations_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let cases = [
            serde_json::json!({ "destinations": [{ "name": "a", "url": "https://h.example",
                "signing_keys": [{ "file": missing }] }] }),
            serde_json::json!({ "destinations": [{ "name": "a", "url": "https://h.example",
                "signing_keys": [{ "env": "CREWBUS_TEST_SURELY_UNSET_WHSEC" }] }] }),
            serde_json::json!({ "destinations": [{ "name": "a", "url": "https://h.example",
                "signing_keys": [{}] }] }),
            serde_json::json!({ "destinations": [{ "name": " ", "url": "https://h.example" }] }),
            serde_json::json!({ "destinations": [{ "name": "a", "url": "nope" }] }),
            serde_json::json!({ "destinations": [{ "name": "a", "url": "https://h.example" },
                                                 { "name": "a ", "url": "https://i.example" }] }),
        ];
        for case in cases {
            let settings = parse(case.clone()).unwrap();
            assert!(settings.destinations().is_err(), "{case}");
        }
    }

    #[test]
    fn a_url_with_userinfo_is_refused_at_start_up_without_echoing_it() {
        let settings = parse(serde_json::json!({
            "destinations": [{ "name": "ops", "url": "https://hookuser:hookpass77@h.example/in?k=v" }]
        }))
        .unwrap();
        match settings.destinations() {
            Err(error @ PushSetupError::Destination(_)) => {
                let text = format!("{error} {error:?}");
                assert!(text.contains("`authentication`"), "{text}");
                for leak in ["hookpass77", "hookuser", "k=v"] {
                    assert!(!text.contains(leak), "{text} leaks {leak}");
                }
            }
            other => panic!("expected a destination error, got {other:?}"),
        }
        // A query string alone is accepted.
        let settings = parse(serde_json::json!({
            "destinations": [{ "name": "ops", "url": "https://h.example/in?k=v" }]
        }))
        .unwrap();
        assert_eq!(
            settings.destinations().unwrap()[0].url,
            "https://h.example/in?k=v"
        );
    }

    #[test]
    fn a_persistent_store_needs_a_key_ring_unless_allowed() {
        let store: Arc<dyn PushStore> =
            Arc::new(crewbus_memory::MemoryPushStore::new(TenantId::default()));
        let settings = PushSettings::default();
        assert!(matches!(
            settings.outbox(Arc::clone(&store), true, None, TenantId::default()),
            Err(PushSetupError::UnsealedRefused)
        ));
        assert!(
            !settings
                .outbox(Arc::clone(&store), false, None, TenantId::default())
                .unwrap()
                .is_sealed()
        );
        let allowed = PushSettings {
            allow_unsealed: true,
            ..PushSettings::default()
        };
        assert!(
            allowed
                .outbox(Arc::clone(&store), true, None, TenantId::default())
                .is_ok()
        );
        let dir = tempfile::tempdir().unwrap();
        let keys: Arc<dyn KeyRing> =
            Arc::new(LocalKeyRing::new(MasterKey::generate(), dir.path()).unwrap());
        assert!(
            settings
                .outbox(store, true, Some(keys), TenantId::default())
                .unwrap()
                .is_sealed()
        );
    }

    #[test]
    fn the_key_ring_reads_its_master_key_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master");
        std::fs::write(&path, MasterKey::generate().to_base64().as_str()).unwrap();
        let settings = PushSettings {
            key_ring: Some(KeyRingSettings {
                master_key_env: None,
                master_key_file: Some(path),
                dir: dir.path().join("keys"),
            }),
            ..PushSettings::default()
        };
        assert!(settings.key_ring().unwrap().is_some());
        assert!(PushSettings::default().key_ring().unwrap().is_none());
        let both = PushSettings {
            key_ring: Some(KeyRingSettings {
                master_key_env: Some("X".into()),
                master_key_file: Some(dir.path().join("master")),
                dir: dir.path().join("keys"),
            }),
            ..PushSettings::default()
        };
        assert!(matches!(
            both.key_ring(),
            Err(PushSetupError::SecretSource { .. })
        ));
        assert_eq!(settings.delivery(), DeliverySettings::default());
    }
}
