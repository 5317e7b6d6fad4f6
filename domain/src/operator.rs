//! Operators: the people who run the agents, as a credential of their own (never an agent's),
//! scoped to every team or to named ones, and their console sign-ins.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::team::TokenHash;
use crate::{BusError, BusResult};

/// Which teams an operator may see and act on.
///
/// Everything of a team outside the scope is `NotFound` to the operator (never `Forbidden`: ids
/// of teams it may not see are not revealed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatorScope {
    /// Every team of the tenant, present and future.
    Everything,
    /// These teams only (at least one; kept sorted, each once).
    Teams(BTreeSet<Uuid>),
}

impl OperatorScope {
    /// Whether `team` is inside the scope.
    pub fn covers(&self, team: Uuid) -> bool {
        match self {
            OperatorScope::Everything => true,
            OperatorScope::Teams(teams) => teams.contains(&team),
        }
    }

    /// A scope of the named teams. Errors: an empty list → `Invalid` (an operator that sees no
    /// team is a mistake, not a scope; give none for [`OperatorScope::Everything`]).
    pub fn teams(teams: impl IntoIterator<Item = Uuid>) -> BusResult<Self> {
        let teams: BTreeSet<Uuid> = teams.into_iter().collect();
        if teams.is_empty() {
            return Err(BusError::invalid(
                "an operator scoped to teams needs at least one team",
            ));
        }
        Ok(OperatorScope::Teams(teams))
    }
}

/// An operator: a person who runs agents, authenticated by its own bearer token (`cbo_…`, never
/// valid on an agent's routes) or by a console session. Only the token's SHA-256 is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operator {
    /// Minted by the ledger.
    pub id: Uuid,
    /// Display name, unique in the tenant (the agent-name rule: letters, digits, `_`, `-`; 1–128).
    pub name: String,
    /// The teams it may see and act on.
    pub scope: OperatorScope,
    /// SHA-256 of its bearer token.
    pub token_hash: TokenHash,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked: its token, sign-in codes and sessions stop working at once.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl Operator {
    /// Whether the operator has been revoked.
    pub fn revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    /// `Ok` when `team` is inside the operator's scope; otherwise `NotFound` naming `what`, the
    /// answer for anything of a team it may not see.
    pub fn check_team(&self, team: Uuid, what: &str) -> BusResult<()> {
        if self.scope.covers(team) {
            Ok(())
        } else {
            Err(BusError::not_found(what.to_owned()))
        }
    }
}

/// A console session: a server-side record behind a cookie holding a random secret (only its
/// SHA-256 is stored), alive while used at least once per idle period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorSession {
    /// Whose session it is (as it stands now: a revoked operator has no live session).
    pub operator: Operator,
    /// When it was opened (the sign-in).
    pub opened_at: DateTime<Utc>,
    /// When it was last used, before this use.
    pub last_seen_at: DateTime<Utc>,
}

/// How long a sign-in code printed by `crewbus serve` works: 10 minutes, once.
pub const SIGN_IN_CODE_TTL_SECS: u64 = 600;

/// Validates an operator's name: the agent-name rule, 1–128 ASCII letters, digits, `_` or `-`.
/// Errors: [`BusError::Invalid`] naming the rule.
pub fn validate_operator_name(name: &str) -> BusResult<()> {
    crate::validate_recipient_key(name)
        .map_err(|_| BusError::invalid("an operator name is 1 to 128 letters, digits, `_` and `-`"))
}

/// The input check of `Operators::create_operator`, the same on every store: `name` by
/// [`validate_operator_name`], a scope of named teams with at least one. Returns the teams to
/// record for the scope (empty for [`OperatorScope::Everything`]), in id order, each once; the
/// store then checks each is a team of its tenant. Errors: [`BusError::Invalid`].
pub fn new_operator_teams(name: &str, scope: &OperatorScope) -> BusResult<Vec<Uuid>> {
    validate_operator_name(name)?;
    match scope {
        OperatorScope::Everything => Ok(Vec::new()),
        OperatorScope::Teams(teams) if teams.is_empty() => Err(BusError::invalid(
            "an operator scoped to teams needs at least one team",
        )),
        OperatorScope::Teams(teams) => Ok(teams.iter().copied().collect()),
    }
}

/// The name of the human member `operator` posts as in a team: `<operator name> (human)`.
/// Unique in the team as long as no agent was given that name (operator names hold no space, so
/// an agent named by the agent-name rule never has it).
pub fn human_member_name(operator: &str) -> String {
    format!("{operator} (human)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_names_follow_the_agent_name_rule() {
        assert!(validate_operator_name("ana_ops-1").is_ok());
        for bad in ["", "ana ops", "ana.ops", &"x".repeat(129)] {
            assert!(matches!(
                validate_operator_name(bad),
                Err(BusError::Invalid { .. })
            ));
        }
        assert_eq!(human_member_name("ana"), "ana (human)");
    }
}
