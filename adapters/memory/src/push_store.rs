//! `MemoryPushStore`: push registrations and cursors in process memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewbus_domain::{
    PushAttempt, PushConfig, PushRegistration, RunId, Seq, StoreError, TenantId,
    validate_journal_limit,
};
use crewbus_ports::PushStore;

type Key = (TenantId, RunId, String);

#[derive(Default)]
struct State {
    rows: BTreeMap<Key, Row>,
    /// Monotonic counter ordering parked rows by when they were parked.
    parks: u64,
    /// Each registration's attempts log, oldest first; kept apart from `rows`, so it outlives
    /// its registration until pruned.
    attempts: BTreeMap<Key, Vec<PushAttempt>>,
}

struct Row {
    registration: PushRegistration,
    parked_order: u64,
}

/// A [`PushStore`] in memory, with the same semantics as the Postgres store: tenant scoping,
/// cursors that never move backward, claims on `due`, parking, and attempts logs that outlive
/// their registrations until pruned.
///
/// Clones share state. Stores of several tenants can share one backing state
/// ([`MemoryPushStore::for_tenant`]), as tenants share one database; each sees only its rows.
#[derive(Clone)]
pub struct MemoryPushStore {
    tenant: TenantId,
    state: Arc<Mutex<State>>,
}

impl MemoryPushStore {
    /// An empty store serving `tenant`.
    pub fn new(tenant: TenantId) -> Self {
        MemoryPushStore {
            tenant,
            state: Arc::default(),
        }
    }

    /// A store serving `tenant` over the same backing state as `self`.
    pub fn for_tenant(&self, tenant: TenantId) -> Self {
        MemoryPushStore {
            tenant,
            state: Arc::clone(&self.state),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self, run: RunId, id: &str) -> Key {
        (self.tenant.clone(), run, id.to_owned())
    }
}

impl std::fmt::Debug for MemoryPushStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryPushStore")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl PushStore for MemoryPushStore {
    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    async fn put(
        &self,
        config: &PushConfig,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        PushRegistration::storable_cursor(next_seq)?;
        let key = self.key(config.run, &config.id);
        let mut state = self.lock();
        match state.rows.get_mut(&key) {
            Some(row) => {
                let r = &mut row.registration;
                r.config.url = config.url.clone();
                r.config.authentication = config.authentication.clone();
                r.attempts = 0;
                r.parked = false;
                r.last_error = None;
                r.next_attempt_at = at;
            }
            None => {
                state.rows.insert(
                    key,
                    Row {
                        registration: PushRegistration {
                            config: config.clone(),
                            next_seq,
                            attempts: 0,
                            next_attempt_at: at,
                            last_error: None,
                            parked: false,
                        },
                        parked_order: 0,
                    },
                );
            }
        }
        Ok(())
    }

    async fn get(&self, run: RunId, id: &str) -> Result<Option<PushConfig>, StoreError> {
        Ok(self
            .lock()
            .rows
            .get(&self.key(run, id))
            .map(|r| r.registration.config.clone()))
    }

    async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
        Ok(self
            .lock()
            .rows
            .iter()
            .filter(|((t, r, _), _)| *t == self.tenant && *r == run)
            .map(|(_, row)| row.registration.config.clone())
            .collect())
    }

    async fn due(
        &self,
        at: DateTime<Utc>,
        limit: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError> {
        let mut state = self.lock();
        let mut keys: Vec<(DateTime<Utc>, Key)> = state
            .rows
            .iter()
            .filter(|((t, _, _), row)| {
                *t == self.tenant
                    && !row.registration.parked
                    && row.registration.next_attempt_at <= at
            })
            .map(|(k, row)| (row.registration.next_attempt_at, k.clone()))
            .collect();
        keys.sort();
        keys.truncate(limit);
        let mut claimed = Vec::with_capacity(keys.len());
        for (_, key) in keys {
            if let Some(row) = state.rows.get_mut(&key) {
                claimed.push(row.registration.clone());
                row.registration.next_attempt_at = lease_until;
            }
        }
        Ok(claimed)
    }

    async fn advance(
        &self,
        run: RunId,
        id: &str,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        PushRegistration::storable_cursor(next_seq)?;
        if let Some(row) = self.lock().rows.get_mut(&self.key(run, id)) {
            let r = &mut row.registration;
            r.next_seq = r.next_seq.max(next_seq);
            r.attempts = 0;
            r.last_error = None;
            r.next_attempt_at = at;
        }
        Ok(())
    }

    async fn defer(&self, run: RunId, id: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some(row) = self.lock().rows.get_mut(&self.key(run, id)) {
            row.registration.next_attempt_at = until;
        }
        Ok(())
    }

    async fn retry(
        &self,
        run: RunId,
        id: &str,
        next_attempt_at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError> {
        if let Some(row) = self.lock().rows.get_mut(&self.key(run, id)) {
            let r = &mut row.registration;
            r.attempts = r.attempts.saturating_add(1);
            r.next_attempt_at = next_attempt_at;
            r.last_error = Some(error.to_owned());
        }
        Ok(())
    }

    async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError> {
        let key = self.key(run, id);
        let mut state = self.lock();
        state.parks += 1;
        let order = state.parks;
        if let Some(row) = state.rows.get_mut(&key) {
            row.registration.parked = true;
            row.registration.last_error = Some(error.to_owned());
            row.parked_order = order;
        }
        Ok(())
    }

    async fn parked(&self, limit: usize) -> Result<Vec<PushRegistration>, StoreError> {
        let state = self.lock();
        let mut rows: Vec<&Row> = state
            .rows
            .iter()
            .filter(|((t, _, _), row)| *t == self.tenant && row.registration.parked)
            .map(|(_, row)| row)
            .collect();
        rows.sort_by_key(|r| r.parked_order);
        Ok(rows
            .into_iter()
            .take(limit)
            .map(|r| r.registration.clone())
            .collect())
    }

    async fn unpark(&self, run: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        match self.lock().rows.get_mut(&self.key(run, id)) {
            Some(row) if row.registration.parked => {
                let r = &mut row.registration;
                r.parked = false;
                r.attempts = 0;
                r.next_attempt_at = at;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError> {
        self.lock().rows.remove(&self.key(run, id));
        Ok(())
    }

    async fn registrations(&self, run: RunId) -> Result<Vec<PushRegistration>, StoreError> {
        Ok(self
            .lock()
            .rows
            .iter()
            .filter(|((t, r, _), _)| *t == self.tenant && *r == run)
            .map(|(_, row)| row.registration.clone())
            .collect())
    }

    async fn record_attempt(
        &self,
        run: RunId,
        id: &str,
        attempt: &PushAttempt,
        keep: usize,
    ) -> Result<(), StoreError> {
        if keep == 0 {
            return Err(StoreError::invalid(
                "an attempts log keeps at least 1 attempt",
            ));
        }
        PushRegistration::storable_cursor(attempt.seq)?;
        let mut state = self.lock();
        let log = state.attempts.entry(self.key(run, id)).or_default();
        log.push(attempt.clone());
        let excess = log.len().saturating_sub(keep);
        log.drain(..excess);
        Ok(())
    }

    async fn attempts(
        &self,
        run: RunId,
        id: &str,
        limit: usize,
    ) -> Result<Vec<PushAttempt>, StoreError> {
        validate_journal_limit(limit)?;
        Ok(self
            .lock()
            .attempts
            .get(&self.key(run, id))
            .map(|log| log.iter().rev().take(limit).cloned().collect())
            .unwrap_or_default())
    }

    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut state = self.lock();
        let State { rows, attempts, .. } = &mut *state;
        let mut pruned = 0;
        attempts.retain(|key, log| {
            let gone = key.0 == self.tenant
                && !rows.contains_key(key)
                && log
                    .iter()
                    .map(|a| a.at)
                    .max()
                    .is_none_or(|newest| newest < before);
            if gone {
                pruned += log.len() as u64;
            }
            !gone
        });
        Ok(pruned)
    }
}
