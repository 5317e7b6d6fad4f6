//! Operator use cases: teams and agents, and authenticating an agent's token.

use crewbus_domain::{Agent, BusError, BusResult, Team, TokenHash, Uuid, validate_recipient_key};

use crate::usecases::bus::Bus;
use crate::usecases::token::{is_token, new_token};

/// An agent just created, with its token: the only time the token exists in clear.
#[derive(Clone)]
pub struct NewAgent {
    /// The agent as recorded.
    pub agent: Agent,
    /// The bearer token. Show it once; it is not stored.
    pub token: String,
}

impl std::fmt::Debug for NewAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewAgent")
            .field("agent", &self.agent)
            .field("token", &"[redacted]")
            .finish()
    }
}

impl Bus {
    /// The body backend and inbox a new team gets when the operator names none: the ledger's
    /// co-located backend (`postgres` with a database), else `memory`.
    pub fn default_backend(&self) -> &'static str {
        self.ports.ledger.local_backend().unwrap_or("memory")
    }

    /// Creates a team. `backend`/`inbox` default to [`Bus::default_backend`]. Errors: as
    /// `Ledger::create_team` (`Invalid`, `Conflict` for a taken name).
    pub async fn add_team(
        &self,
        name: &str,
        backend: Option<&str>,
        inbox: Option<&str>,
    ) -> BusResult<Team> {
        let default = self.default_backend();
        for name in [backend, inbox].into_iter().flatten() {
            self.check_backend(name)?;
        }
        self.ports
            .ledger
            .create_team(
                name,
                backend.unwrap_or(default),
                inbox.unwrap_or(default),
                self.now(),
            )
            .await
    }

    /// Errors: `name` is not a backend this deployment serves → `Invalid` naming those it does.
    pub fn check_backend(&self, name: &str) -> BusResult<()> {
        if self.settings.backends.iter().any(|b| b == name) {
            return Ok(());
        }
        Err(BusError::invalid(format!(
            "backend `{name}` is not configured in this deployment (available: {})",
            self.settings.backends.join(", ")
        )))
    }

    /// Moves a team's default body backend and inbox (existing conversations keep theirs).
    /// Errors: a backend this deployment does not serve → `Invalid`; unknown team → `NotFound`.
    pub async fn set_team_backends(
        &self,
        team: Uuid,
        backend: &str,
        inbox: &str,
    ) -> BusResult<Team> {
        self.check_backend(backend)?;
        self.check_backend(inbox)?;
        self.ports
            .ledger
            .set_team_backends(team, backend, inbox)
            .await
    }

    /// A team by id or by name. Errors: none matches → `NotFound`.
    pub async fn find_team(&self, name_or_id: &str) -> BusResult<Team> {
        if let Ok(id) = name_or_id.parse::<Uuid>() {
            return self.ports.ledger.team(id).await;
        }
        self.ports
            .ledger
            .teams()
            .await?
            .into_iter()
            .find(|t| t.name == name_or_id)
            .ok_or_else(|| BusError::not_found(format!("team `{name_or_id}`")))
    }

    /// Creates an agent with a fresh token (returned once, stored as its SHA-256 hash).
    /// Errors: as `Ledger::create_agent`; a name that is not a recipient-key-safe token →
    /// `Invalid`.
    pub async fn add_agent(&self, team: Uuid, name: &str) -> BusResult<NewAgent> {
        // A fresh random token collides with nothing: a conflict is the name.
        self.add_agent_with_token(team, name, new_token())
            .await
            .map_err(|e| {
                crate::usecases::operators::taken(e, || {
                    format!(
                        "an agent named `{name}` exists in this team (revoked ones too: names are \
                         not reused)"
                    )
                })
            })
    }

    /// Creates an agent holding `token`, a token crewbus issued earlier (`cbt_` and 64 hex
    /// digits) — how `crewbus serve` re-creates its dev agents on a memory ledger with the
    /// tokens kept in `dev-tokens.json`, so a host configuration keeps working. Stored, like
    /// every token, as its SHA-256 hash only.
    ///
    /// Errors: `token` not of that shape → `Invalid` (the value is never echoed); the token
    /// already held by an agent, or the name taken → `Conflict`; otherwise as
    /// [`Bus::add_agent`].
    pub async fn add_agent_with_token(
        &self,
        team: Uuid,
        name: &str,
        token: String,
    ) -> BusResult<NewAgent> {
        validate_recipient_key(name).map_err(|_| {
            BusError::invalid("agent name may hold only letters, digits, `_` and `-`")
        })?;
        if !is_token(&token) {
            return Err(BusError::invalid(
                "not a crewbus agent token (`cbt_` followed by 64 hex digits)",
            ));
        }
        let agent = self
            .ports
            .ledger
            .create_agent(team, name, TokenHash::of(&token), self.now())
            .await?;
        Ok(NewAgent { agent, token })
    }

    /// An agent of `team` by id or name. Errors: none matches → `NotFound`.
    pub async fn find_agent(&self, team: Uuid, name_or_id: &str) -> BusResult<Agent> {
        if let Ok(id) = name_or_id.parse::<Uuid>() {
            return self.ports.ledger.agent(team, id).await;
        }
        self.ports
            .ledger
            .agents(team)
            .await?
            .into_iter()
            .find(|a| a.name == name_or_id)
            .ok_or_else(|| BusError::not_found(format!("agent `{name_or_id}`")))
    }

    /// Revokes an agent of `team`: its token is refused from now on (this server's token cache
    /// drops it at once), and its waiting fetches on every server end with `Unauthenticated`
    /// (woken through the wake-up port after the commit; the wake-up also drops the token from
    /// the other servers' caches). Idempotent. Errors: as `Ledger::revoke_agent` (`NotFound`).
    pub async fn revoke_agent(&self, team: Uuid, agent: Uuid) -> BusResult<Agent> {
        let target = crewbus_domain::WakeupTarget::new(team, agent);
        let revoked = self
            .ports
            .ledger
            .revoke_agent(team, agent, self.now())
            .await;
        // Dropped whatever the answer: a revocation that timed out may still have committed.
        self.tokens.forget(&[target]);
        let revoked = revoked?;
        self.notify_waiters(&mut vec![target]).await;
        // Its leases ended with the revocation: acquires waiting on them try again.
        self.leases_ended(team).await;
        self.emit(vec![
            crewbus_domain::FeedEvent::new(team, crewbus_domain::FeedKind::AgentRevoked)
                .agent(agent),
        ]);
        Ok(revoked)
    }

    /// The agent presenting `token`. A lookup of an active agent is reused for at most
    /// `bus.token_cache_ms` (see [`token_cache`](crate::usecases::token_cache)); the ledger
    /// still refuses a revoked agent's `send` (`Forbidden`), and its `hand_out`, `undelivered`
    /// and `confirm` (`Unauthenticated`), whatever the cache says. Errors: unknown or revoked →
    /// `Unauthenticated`; the ledger not answering within `bus.request_timeout_ms` → `Timeout`.
    pub async fn authenticate(&self, token: &str) -> BusResult<Agent> {
        if token.is_empty() {
            return Err(BusError::Unauthenticated);
        }
        let hash = TokenHash::of(token);
        if let Some(agent) = self.tokens.get(&hash) {
            self.activity.note(&agent);
            return Ok(agent);
        }
        let ticket = self.tokens.ticket();
        // Bounded like the request it authenticates (it runs before the request's own
        // deadline starts, see `http::request_deadline`).
        let agent = self
            .within_deadline(
                std::time::Duration::ZERO,
                self.ports.ledger.agent_by_token(&hash),
            )
            .await?;
        if agent.revoked() || agent.is_human() {
            return Err(BusError::Unauthenticated);
        }
        self.tokens.insert(hash, &agent, ticket);
        self.activity.note(&agent);
        Ok(agent)
    }
}

impl Bus {
    /// The agents of `agent`'s team, by name.
    pub async fn team_agents(&self, agent: &Agent) -> BusResult<Vec<Agent>> {
        self.ports.ledger.agents(agent.team).await
    }
}
