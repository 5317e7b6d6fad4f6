//! The memory ledger's operators: their tokens, one-time sign-in codes and console sessions, in
//! the ledger's state under its one lock (an agent's and an operator's token hashes are checked
//! against each other in the same critical section).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    BusError, BusResult, Operator, OperatorScope, OperatorSession, TenantId, TokenHash,
    new_operator_teams,
};
use crewbus_ports::Operators;
use uuid::Uuid;

use super::MemoryLedger;
use super::state::{SessionRow, SignInCodeRow, State};

impl State {
    fn operator_of(&self, id: Uuid) -> BusResult<&Operator> {
        self.operators
            .get(&id)
            .ok_or_else(|| BusError::not_found(format!("operator {id}")))
    }

    /// The operator `id`, known and not revoked: unknown → `NotFound`, revoked →
    /// `Unauthenticated`.
    fn active_operator(&self, id: Uuid) -> BusResult<&Operator> {
        let operator = self.operator_of(id)?;
        if operator.revoked() {
            return Err(BusError::Unauthenticated);
        }
        Ok(operator)
    }
}

#[async_trait]
impl Operators for MemoryLedger {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn create_operator(
        &self,
        name: &str,
        scope: &OperatorScope,
        token_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator> {
        let teams = new_operator_teams(name, scope)?;
        let mut st = self.state()?;
        for team in teams {
            st.team_of(team)?;
        }
        if st.operators.values().any(|o| o.name == name) {
            return Err(BusError::conflict(format!(
                "operator name {name:?} is taken"
            )));
        }
        if st.token_in_use(&token_hash) {
            return Err(BusError::conflict("token hash is already in use"));
        }
        let operator = Operator {
            id: Uuid::new_v4(),
            name: name.to_owned(),
            scope: scope.clone(),
            token_hash,
            created_at: at,
            revoked_at: None,
        };
        st.operator_tokens.insert(token_hash, operator.id);
        st.operators.insert(operator.id, operator.clone());
        Ok(operator)
    }

    async fn operators(&self) -> BusResult<Vec<Operator>> {
        let st = self.state()?;
        let mut operators: Vec<Operator> = st.operators.values().cloned().collect();
        operators.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(operators)
    }

    async fn operator(&self, id: Uuid) -> BusResult<Operator> {
        self.state()?.operator_of(id).cloned()
    }

    async fn operator_by_token(&self, token_hash: &TokenHash) -> BusResult<Operator> {
        let st = self.state()?;
        st.operator_tokens
            .get(token_hash)
            .and_then(|id| st.operators.get(id))
            .filter(|o| !o.revoked())
            .cloned()
            .ok_or(BusError::Unauthenticated)
    }

    async fn revoke_operator(&self, id: Uuid, at: DateTime<Utc>) -> BusResult<Operator> {
        let mut st = self.state()?;
        st.operator_of(id)?;
        for session in st.sessions.values_mut().filter(|s| s.operator == id) {
            session.ended_at.get_or_insert(at);
        }
        let operator = st.operators.get_mut(&id).expect("checked above");
        operator.revoked_at.get_or_insert(at);
        Ok(operator.clone())
    }

    async fn issue_sign_in_code(
        &self,
        operator: Uuid,
        code_hash: TokenHash,
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        if expires_at <= at {
            return Err(BusError::invalid(
                "a sign-in code must expire after it is issued",
            ));
        }
        let mut st = self.state()?;
        st.active_operator(operator)?;
        if st.sign_in_codes.contains_key(&code_hash) {
            return Err(BusError::conflict("sign-in code is already recorded"));
        }
        st.sign_in_codes.insert(
            code_hash,
            SignInCodeRow {
                operator,
                expires_at,
                used_at: None,
            },
        );
        Ok(())
    }

    async fn withdraw_sign_in_codes(&self, operator: Uuid) -> BusResult<u64> {
        let mut st = self.state()?;
        st.operator_of(operator)?;
        let before = st.sign_in_codes.len();
        st.sign_in_codes
            .retain(|_, c| c.operator != operator || c.used_at.is_some());
        Ok((before - st.sign_in_codes.len()) as u64)
    }

    async fn redeem_sign_in_code(
        &self,
        code_hash: &TokenHash,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<Operator> {
        let mut st = self.state()?;
        let operator = st
            .sign_in_codes
            .get(code_hash)
            .filter(|c| c.used_at.is_none() && c.expires_at > at)
            .and_then(|c| st.operators.get(&c.operator))
            .filter(|o| !o.revoked())
            .cloned()
            .ok_or(BusError::Unauthenticated)?;
        if st.sessions.contains_key(&session_hash) {
            return Err(BusError::conflict("session secret is already in use"));
        }
        st.sign_in_codes
            .get_mut(code_hash)
            .expect("found above")
            .used_at = Some(at);
        st.sessions
            .insert(session_hash, new_session(operator.id, at));
        Ok(operator)
    }

    async fn open_session(
        &self,
        operator: Uuid,
        session_hash: TokenHash,
        at: DateTime<Utc>,
    ) -> BusResult<()> {
        let mut st = self.state()?;
        st.active_operator(operator)?;
        if st.sessions.contains_key(&session_hash) {
            return Err(BusError::conflict("session secret is already in use"));
        }
        st.sessions.insert(session_hash, new_session(operator, at));
        Ok(())
    }

    async fn session(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<OperatorSession> {
        let mut st = self.state()?;
        let State {
            sessions,
            operators,
            ..
        } = &mut *st;
        let row = sessions
            .get_mut(session_hash)
            .filter(|s| s.ended_at.is_none())
            .ok_or(BusError::Unauthenticated)?;
        let operator = operators
            .get(&row.operator)
            .filter(|o| !o.revoked())
            .ok_or(BusError::Unauthenticated)?;
        if idle_since(row.last_seen_at, idle, at) {
            row.ended_at = Some(at);
            return Err(BusError::Unauthenticated);
        }
        let session = OperatorSession {
            operator: operator.clone(),
            opened_at: row.opened_at,
            last_seen_at: row.last_seen_at,
        };
        row.last_seen_at = row.last_seen_at.max(at);
        Ok(session)
    }

    async fn session_is_live(
        &self,
        session_hash: &TokenHash,
        idle: Duration,
        at: DateTime<Utc>,
    ) -> BusResult<bool> {
        let st = self.state()?;
        Ok(st
            .sessions
            .get(session_hash)
            .filter(|s| s.ended_at.is_none() && !idle_since(s.last_seen_at, idle, at))
            .and_then(|s| st.operators.get(&s.operator))
            .is_some_and(|o| !o.revoked()))
    }

    async fn end_session(&self, session_hash: &TokenHash, at: DateTime<Utc>) -> BusResult<()> {
        let mut st = self.state()?;
        if let Some(row) = st.sessions.get_mut(session_hash) {
            row.ended_at.get_or_insert(at);
        }
        Ok(())
    }

    async fn prune_sign_ins(&self, idle: Duration, at: DateTime<Utc>) -> BusResult<u64> {
        let mut st = self.state()?;
        let (codes, sessions) = (st.sign_in_codes.len(), st.sessions.len());
        st.sign_in_codes
            .retain(|_, c| c.expires_at > at && c.used_at.is_none_or(|u| u > at));
        st.sessions
            .retain(|_, s| s.ended_at.is_none() && !idle_since(s.last_seen_at, idle, at));
        Ok((codes - st.sign_in_codes.len() + sessions - st.sessions.len()) as u64)
    }
}

fn new_session(operator: Uuid, at: DateTime<Utc>) -> SessionRow {
    SessionRow {
        operator,
        opened_at: at,
        last_seen_at: at,
        ended_at: None,
    }
}

/// Whether a session last used at `last_seen_at` has been idle for at least `idle` at `at`.
fn idle_since(last_seen_at: DateTime<Utc>, idle: Duration, at: DateTime<Utc>) -> bool {
    last_seen_at <= crewbus_domain::before(at, idle)
}
