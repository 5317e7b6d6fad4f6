//! The adapter's configuration: where the broker is, the one credential, quotas and windows.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crewbus_domain::{BusError, BusResult, MAX_BODY_BYTES, Quotas, Secret, StreamKind, Uuid};

/// The one credential a [`Config`] connects with. Which credential it is decides the role:
/// operator tools use the provisioning credential (may create, update and delete streams), the
/// server uses the runtime credential (publish, read, purge, consume, ack — never stream changes).
#[derive(Clone, Default)]
pub enum Credential {
    /// No credential (a development server without authorization).
    #[default]
    None,
    /// A NATS `.creds` file (user JWT and nkey seed). The path is not secret; the file is.
    CredsFile(PathBuf),
    /// A user name and password.
    UserPassword {
        /// The user name.
        user: String,
        /// The password.
        password: Secret,
    },
    /// A bearer token.
    Token(Secret),
}

impl Credential {
    /// A stable, secret-free description used to tell connections apart (`user:<name>`, …).
    /// Two credentials with the same description and different secrets are told apart by
    /// [`Credential::same_as`].
    pub fn describe(&self) -> String {
        match self {
            Credential::None => "none".to_owned(),
            Credential::CredsFile(path) => format!("creds-file:{}", path.display()),
            Credential::UserPassword { user, .. } => format!("user:{user}"),
            Credential::Token(_) => "token".to_owned(),
        }
    }

    /// Whether two credentials are identical (secrets compared too).
    pub fn same_as(&self, other: &Credential) -> bool {
        match (self, other) {
            (Credential::None, Credential::None) => true,
            (Credential::CredsFile(a), Credential::CredsFile(b)) => a == b,
            (
                Credential::UserPassword {
                    user: a,
                    password: p,
                },
                Credential::UserPassword {
                    user: b,
                    password: q,
                },
            ) => a == b && p == q,
            (Credential::Token(a), Credential::Token(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::None => f.write_str("None"),
            Credential::CredsFile(path) => f.debug_tuple("CredsFile").field(path).finish(),
            Credential::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"[redacted]")
                .finish(),
            Credential::Token(_) => f.write_str("Token([redacted])"),
        }
    }
}

/// Configuration of the JetStream adapter. Every field has a default ([`Config::default`]);
/// [`Config::validate`] checks it before any broker is contacted.
#[derive(Clone)]
pub struct Config {
    /// Server URLs, e.g. `nats://127.0.0.1:4222`. Default: that one.
    pub servers: Vec<String>,
    /// The one credential (its kind decides the role). Default: none.
    pub credential: Credential,
    /// Limits of each team's body stream. Default: 1 000 000 messages, 1 GiB.
    pub body_quotas: Quotas,
    /// Limits of each team's inbox stream. Default: 100 000 references, 64 MiB.
    pub inbox_quotas: Quotas,
    /// Replicas of each stream (1 or 3 in practice; R3 needs a cluster). Default: 1.
    pub replicas: u32,
    /// The broker's duplicate window on both streams; must not exceed `inbox_max_age`.
    /// Default: 2 minutes.
    pub duplicate_window: Duration,
    /// How long the inbox keeps an unacknowledged reference. Default: 7 days.
    pub inbox_max_age: Duration,
    /// How long a handed-out reference waits for its ack before redelivery. Default: 30 s.
    pub ack_wait: Duration,
    /// How many times a reference is handed out at most (≥ 1). Default: 20.
    pub max_deliver: u32,
    /// Bound on every broker request and on connecting. Default: 5 s.
    pub request_timeout: Duration,
    /// Prefix of stream names (upper-cased) and subjects (as given): ASCII letters, digits,
    /// `-` and `_`. Default: `crewbus`.
    pub name_prefix: String,
    /// Largest body accepted, in bytes (≤ 1 MiB, the bus contract). The effective maximum may
    /// be lower when the server's `max_payload` cannot carry it. Default: 1 MiB.
    pub body_limit: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            servers: vec!["nats://127.0.0.1:4222".to_owned()],
            credential: Credential::None,
            body_quotas: Quotas::DEFAULT_BODIES,
            inbox_quotas: Quotas::DEFAULT_INBOX,
            replicas: 1,
            duplicate_window: Duration::from_secs(120),
            inbox_max_age: Duration::from_secs(7 * 24 * 3600),
            ack_wait: Duration::from_secs(30),
            max_deliver: 20,
            request_timeout: Duration::from_secs(5),
            name_prefix: "crewbus".to_owned(),
            body_limit: MAX_BODY_BYTES,
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("servers", &self.servers)
            .field("credential", &self.credential)
            .field("body_quotas", &self.body_quotas)
            .field("inbox_quotas", &self.inbox_quotas)
            .field("replicas", &self.replicas)
            .field("duplicate_window", &self.duplicate_window)
            .field("inbox_max_age", &self.inbox_max_age)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .field("request_timeout", &self.request_timeout)
            .field("name_prefix", &self.name_prefix)
            .field("body_limit", &self.body_limit)
            .finish()
    }
}

impl Config {
    /// Checks the configuration before any broker is contacted. Errors: [`BusError::Invalid`]
    /// naming the rule — quotas below their floors ([`Quotas::validate`]), a duplicate window of
    /// zero or longer than `inbox_max_age`, no server, zero `replicas`, `ack_wait`,
    /// `max_deliver`, `request_timeout` or `body_limit`, a body limit above 1 MiB, or a
    /// malformed name prefix.
    pub fn validate(&self) -> BusResult<()> {
        self.body_quotas.validate(StreamKind::Bodies)?;
        self.inbox_quotas.validate(StreamKind::Inbox)?;
        if self.servers.is_empty() {
            return Err(BusError::invalid(
                "at least one NATS server URL is required",
            ));
        }
        if self.replicas == 0 {
            return Err(BusError::invalid("replicas must be at least 1"));
        }
        if self.duplicate_window.is_zero() {
            return Err(BusError::invalid("duplicate window must be positive"));
        }
        if self.duplicate_window > self.inbox_max_age {
            return Err(BusError::invalid(format!(
                "duplicate window ({:?}) must not exceed the inbox max_age ({:?})",
                self.duplicate_window, self.inbox_max_age
            )));
        }
        if self.ack_wait.is_zero() || self.request_timeout.is_zero() {
            return Err(BusError::invalid(
                "ack_wait and request_timeout must be positive",
            ));
        }
        if self.max_deliver == 0 {
            return Err(BusError::invalid("max_deliver must be at least 1"));
        }
        if self.body_limit == 0 || self.body_limit > MAX_BODY_BYTES {
            return Err(BusError::invalid(format!(
                "body_limit must be between 1 and {MAX_BODY_BYTES} bytes"
            )));
        }
        if self.name_prefix.is_empty()
            || self.name_prefix.len() > 32
            || !self
                .name_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(BusError::invalid(
                "name_prefix must be 1-32 ASCII letters, digits, `-` or `_`",
            ));
        }
        Ok(())
    }

    /// The configured quotas of `kind`'s stream.
    pub fn quotas(&self, kind: StreamKind) -> Quotas {
        match kind {
            StreamKind::Bodies => self.body_quotas,
            StreamKind::Inbox => self.inbox_quotas,
        }
    }

    /// The name of a team's `kind` stream: `<PREFIX>_B_<team hex>` or `<PREFIX>_I_<team hex>`
    /// (upper-cased prefix, `-` turned into `_`; derived from the team UUID, never a display name).
    pub fn stream_name(&self, team: Uuid, kind: StreamKind) -> String {
        let letter = match kind {
            StreamKind::Bodies => 'B',
            StreamKind::Inbox => 'I',
        };
        format!(
            "{}_{letter}_{}",
            self.name_prefix.to_ascii_uppercase().replace('-', "_"),
            team.simple()
        )
    }

    /// Subject filter of a team's `kind` stream: `<prefix>.<team hex>.b.>` or
    /// `<prefix>.<team hex>.i.*`.
    pub(crate) fn stream_subject(&self, team: Uuid, kind: StreamKind) -> String {
        match kind {
            StreamKind::Bodies => format!("{}.{}.b.>", self.name_prefix, team.simple()),
            StreamKind::Inbox => format!("{}.{}.i.*", self.name_prefix, team.simple()),
        }
    }

    /// The subject that stands in for a stream's subjects while intake is paused.
    pub(crate) fn paused_subject(&self, team: Uuid, kind: StreamKind) -> String {
        format!(
            "{}.{}.paused.{}",
            self.name_prefix,
            team.simple(),
            kind.as_str()
        )
    }

    /// One body's subject: `<prefix>.<team hex>.b.<conversation>.<message>`.
    pub(crate) fn body_subject(&self, team: Uuid, conversation: Uuid, message: Uuid) -> String {
        format!(
            "{}.{}.b.{}.{}",
            self.name_prefix,
            team.simple(),
            conversation.simple(),
            message.simple()
        )
    }

    /// One recipient's inbox subject: `<prefix>.<team hex>.i.<recipient key>`.
    pub(crate) fn inbox_subject(&self, team: Uuid, recipient_key: &str) -> String {
        format!("{}.{}.i.{recipient_key}", self.name_prefix, team.simple())
    }

    /// The operator command that provisions a team's streams (named in `NotProvisioned`).
    pub(crate) fn provision_command(team: Uuid) -> String {
        format!("run `crewbus stream provision --team {team}` with the provisioning credential")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_debug_hides_secrets() {
        let mut c = Config::default();
        assert!(c.validate().is_ok());
        c.credential = Credential::UserPassword {
            user: "rt".into(),
            password: Secret::new("hunter2"),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        c.credential = Credential::Token(Secret::new("tok-hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn validation_rules() {
        let bad = |f: fn(&mut Config)| {
            let mut c = Config::default();
            f(&mut c);
            matches!(c.validate(), Err(BusError::Invalid { .. }))
        };
        assert!(bad(|c| c.body_quotas.max_bytes = 1024));
        assert!(bad(|c| c.inbox_quotas.max_messages = 0));
        assert!(bad(|c| {
            c.inbox_max_age = Duration::from_secs(1);
            c.duplicate_window = Duration::from_secs(2)
        }));
        assert!(bad(|c| c.servers.clear()));
        assert!(bad(|c| c.replicas = 0));
        assert!(bad(|c| c.max_deliver = 0));
        assert!(bad(|c| c.body_limit = MAX_BODY_BYTES + 1));
        assert!(bad(|c| c.name_prefix = "a.b".into()));
    }

    #[test]
    fn names_derive_from_the_team_uuid() {
        let c = Config::default();
        let team = Uuid::from_u128(0xab);
        assert_eq!(
            c.stream_name(team, StreamKind::Bodies),
            "CREWBUS_B_000000000000000000000000000000ab"
        );
        assert_eq!(
            c.inbox_subject(team, "agent-1"),
            "crewbus.000000000000000000000000000000ab.i.agent-1"
        );
    }
}
