//! Operator use cases: operators as a credential of their own (`crewbus operator add`, the
//! admin API's bearer token), and the console's sign-in (a one-time code or an operator token)
//! and sessions. The CLI, the admin API and the console call these and nothing else.

use std::fmt;

use crewbus_domain::{
    BusError, BusResult, DateTime, Operator, OperatorScope, OperatorSession, SIGN_IN_CODE_TTL_SECS,
    TokenHash, Utc, Uuid, validate_recipient_key,
};

use crate::usecases::bus::{Bus, after};
use crate::usecases::token::{
    is_operator_token, new_operator_token, new_session_secret, new_sign_in_code,
    normalize_sign_in_code,
};

/// The operator `crewbus serve` sets up for its console sign-in code when it sets up the dev
/// team: every team in scope.
pub const DEV_OPERATOR: &str = "dev";

/// An operator just created, with its token: the only time the token exists in clear.
#[derive(Clone)]
pub struct NewOperator {
    /// The operator as recorded.
    pub operator: Operator,
    /// The bearer token (`cbo_…`). Show it once; it is not stored.
    pub token: String,
}

impl fmt::Debug for NewOperator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewOperator")
            .field("operator", &self.operator)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// A one-time console sign-in code just issued: the only time it exists in clear.
#[derive(Clone)]
pub struct SignInCode {
    /// Whom it signs in.
    pub operator: Operator,
    /// The code as printed (`K7QM-2XD4-9ZPA-1BHW`).
    pub code: String,
    /// When it stops working (10 minutes after it was issued).
    pub expires_at: DateTime<Utc>,
}

impl fmt::Debug for SignInCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignInCode")
            .field("operator", &self.operator.name)
            .field("code", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// A console session just opened: its secret goes into the browser's cookie and nowhere else.
#[derive(Clone)]
pub struct ConsoleSignIn {
    /// Who signed in.
    pub operator: Operator,
    /// The session secret (64 hex digits) for the cookie; the store keeps its hash.
    pub secret: String,
}

impl fmt::Debug for ConsoleSignIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleSignIn")
            .field("operator", &self.operator.name)
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// A store's `Conflict` on a create said in the words of the name that is taken (a fresh
/// random token cannot be what collides); any other error unchanged.
pub(crate) fn taken(e: BusError, what: impl FnOnce() -> String) -> BusError {
    match e {
        BusError::Conflict { .. } => BusError::conflict(what()),
        other => other,
    }
}

impl Bus {
    /// Creates an operator with a fresh `cbo_` token (returned once, stored as its SHA-256),
    /// scoped to `teams` (names or ids) — or to every team when `teams` is empty.
    ///
    /// Errors: a name that is not letters, digits, `_` and `-` (1–128) → `Invalid`; a team
    /// that does not exist → `NotFound` naming it; the name taken → `Conflict`.
    pub async fn add_operator(&self, name: &str, teams: &[String]) -> BusResult<NewOperator> {
        // A fresh random token collides with nothing: a conflict is the name.
        self.add_operator_with_token(name, teams, new_operator_token())
            .await
            .map_err(|e| {
                taken(e, || {
                    format!(
                        "an operator named `{name}` exists (a revoked operator's name is not \
                         reused)"
                    )
                })
            })
    }

    /// Creates an operator holding `token`, an operator token crewbus issued earlier (`cbo_`
    /// and 64 hex digits) — how `crewbus serve --dev-operator-token-file` brings back its dev
    /// API operator with the token kept in that file. Stored, like every token, as its SHA-256
    /// only.
    ///
    /// Errors: `token` not of that shape → `Invalid` (never echoed); the token or the name
    /// taken → `Conflict`; otherwise as [`Bus::add_operator`].
    pub async fn add_operator_with_token(
        &self,
        name: &str,
        teams: &[String],
        token: String,
    ) -> BusResult<NewOperator> {
        if !is_operator_token(&token) {
            return Err(BusError::invalid(
                "not a crewbus operator token (`cbo_` followed by 64 hex digits)",
            ));
        }
        validate_recipient_key(name).map_err(|_| {
            BusError::invalid(
                "operator name may hold only letters, digits, `_` and `-` (1 to 128 characters)",
            )
        })?;
        let scope = if teams.is_empty() {
            OperatorScope::Everything
        } else {
            let mut ids = Vec::with_capacity(teams.len());
            for team in teams {
                ids.push(self.find_team(team).await?.id);
            }
            OperatorScope::teams(ids)?
        };
        let operator = self
            .ports
            .operators
            .create_operator(name, &scope, TokenHash::of(&token), self.now())
            .await?;
        Ok(NewOperator { operator, token })
    }

    /// Every operator (revoked ones included), by name.
    pub async fn operators(&self) -> BusResult<Vec<Operator>> {
        self.ports.operators.operators().await
    }

    /// An operator by id or by name. Errors: none matches → `NotFound`.
    pub async fn find_operator(&self, name_or_id: &str) -> BusResult<Operator> {
        if let Ok(id) = name_or_id.parse::<Uuid>() {
            return self.ports.operators.operator(id).await;
        }
        self.operators()
            .await?
            .into_iter()
            .find(|o| o.name == name_or_id)
            .ok_or_else(|| BusError::not_found(format!("operator `{name_or_id}`")))
    }

    /// Revokes an operator: its token, sign-in codes and console sessions stop working at once
    /// on every server (each request looks the ledger up). Idempotent. Errors: `NotFound`.
    pub async fn revoke_operator(&self, operator: Uuid) -> BusResult<Operator> {
        self.ports
            .operators
            .revoke_operator(operator, self.now())
            .await
    }

    /// The operator presenting `token` (an admin request's bearer token). Never cached: every
    /// admin request asks the ledger, so a revocation holds at once. Errors: not an operator
    /// token (an agent's `cbt_` token included), unknown or revoked → `Unauthenticated`; the
    /// ledger not answering within `bus.request_timeout_ms` → `Timeout`.
    pub async fn authenticate_operator(&self, token: &str) -> BusResult<Operator> {
        if !is_operator_token(token) {
            return Err(BusError::Unauthenticated);
        }
        // Bounded like the request it authenticates (see `http::request_deadline`).
        self.within_deadline(
            std::time::Duration::ZERO,
            self.ports
                .operators
                .operator_by_token(&TokenHash::of(token)),
        )
        .await
    }

    /// Issues a one-time console sign-in code for `operator`, working once for
    /// [`SIGN_IN_CODE_TTL_SECS`] (10 minutes). Errors: unknown → `NotFound`; revoked →
    /// `Unauthenticated`.
    pub async fn issue_sign_in_code(&self, operator: &Operator) -> BusResult<SignInCode> {
        let code = new_sign_in_code();
        let canonical = normalize_sign_in_code(&code).expect("a fresh code is well formed");
        let now = self.now();
        let expires_at = after(now, std::time::Duration::from_secs(SIGN_IN_CODE_TTL_SECS));
        self.ports
            .operators
            .issue_sign_in_code(operator.id, TokenHash::of(&canonical), expires_at, now)
            .await?;
        Ok(SignInCode {
            operator: operator.clone(),
            code,
            expires_at,
        })
    }

    /// What a start of `crewbus serve` prints: a fresh sign-in code for `operator` (as
    /// [`Bus::issue_sign_in_code`]) after withdrawing the operator's earlier unused ones, so a
    /// code printed by an earlier start stops working (on every server of the deployment).
    /// Errors: as [`Bus::issue_sign_in_code`].
    pub async fn replace_sign_in_codes(&self, operator: &Operator) -> BusResult<SignInCode> {
        let withdrawn = self
            .ports
            .operators
            .withdraw_sign_in_codes(operator.id)
            .await?;
        if withdrawn > 0 {
            tracing::info!(
                operator = %operator.name,
                withdrawn,
                "earlier sign-in codes withdrawn"
            );
        }
        self.issue_sign_in_code(operator).await
    }

    /// Signs in with a code from [`Bus::issue_sign_in_code`] (as typed: case, spaces and dashes
    /// do not matter) and opens a console session. The code is used up, whatever server redeemed
    /// it. Errors: malformed, unknown, used, expired, or its operator revoked →
    /// `Unauthenticated`.
    pub async fn sign_in_with_code(&self, code: &str) -> BusResult<ConsoleSignIn> {
        let canonical = normalize_sign_in_code(code).ok_or(BusError::Unauthenticated)?;
        let secret = new_session_secret();
        let operator = self
            .ports
            .operators
            .redeem_sign_in_code(
                &TokenHash::of(&canonical),
                TokenHash::of(&secret),
                self.now(),
            )
            .await?;
        Ok(ConsoleSignIn { operator, secret })
    }

    /// Signs in with an operator token and opens a console session. Errors: as
    /// [`Bus::authenticate_operator`].
    pub async fn sign_in_with_token(&self, token: &str) -> BusResult<ConsoleSignIn> {
        let operator = self.authenticate_operator(token.trim()).await?;
        let secret = new_session_secret();
        self.ports
            .operators
            .open_session(operator.id, TokenHash::of(&secret), self.now())
            .await?;
        Ok(ConsoleSignIn { operator, secret })
    }

    /// The live console session holding `secret`, used now (it stays alive for another idle
    /// period, `console.session_idle_s`). Errors: unknown, ended, idle too long, or its operator
    /// revoked → `Unauthenticated`.
    pub async fn console_session(&self, secret: &str) -> BusResult<OperatorSession> {
        if secret.is_empty() {
            return Err(BusError::Unauthenticated);
        }
        self.ports
            .operators
            .session(
                &TokenHash::of(secret),
                self.settings.console.session_idle,
                self.now(),
            )
            .await
    }

    /// Whether the console session holding `secret` is live now, without counting this as a
    /// use (an open live page asks before every update: a revocation or a sign-out on any
    /// server ends its stream at the next one, and an unused session still idles out). Errors:
    /// the store's.
    pub async fn console_session_is_live(&self, secret: &str) -> BusResult<bool> {
        if secret.is_empty() {
            return Ok(false);
        }
        self.ports
            .operators
            .session_is_live(
                &TokenHash::of(secret),
                self.settings.console.session_idle,
                self.now(),
            )
            .await
    }

    /// Ends the console session holding `secret` (sign-out). Idempotent.
    pub async fn sign_out(&self, secret: &str) -> BusResult<()> {
        self.ports
            .operators
            .end_session(&TokenHash::of(secret), self.now())
            .await
    }

    /// Removes sign-in codes that expired or were used, and sessions ended or idle for longer
    /// than `console.session_idle_s`. Returns how many went.
    pub async fn prune_sign_ins(&self) -> BusResult<u64> {
        self.ports
            .operators
            .prune_sign_ins(self.settings.console.session_idle, self.now())
            .await
    }

    /// The dev operator ([`DEV_OPERATOR`], every team) `crewbus serve` prints a sign-in code
    /// for: found again when it exists and is active, created (with a token nobody is shown:
    /// the code is the way in) when it does not. Errors: it exists but was revoked →
    /// `Conflict` (an operator revoked on purpose is not brought back).
    pub async fn dev_operator(&self) -> BusResult<Operator> {
        match self.find_operator(DEV_OPERATOR).await {
            Ok(o) if o.revoked() => Err(BusError::conflict(format!(
                "the dev operator `{DEV_OPERATOR}` was revoked: sign in with another operator's \
                 token (`crewbus operator add NAME`)"
            ))),
            Ok(o) => Ok(o),
            // Two servers starting at once on one Postgres: the second finds the first's.
            Err(BusError::NotFound { .. }) => match self.add_operator(DEV_OPERATOR, &[]).await {
                Ok(new) => Ok(new.operator),
                Err(BusError::Conflict { .. }) => self.find_operator(DEV_OPERATOR).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        }
    }
}
