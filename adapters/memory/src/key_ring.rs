//! `TestKeyRing`: a key ring for tests that holds data keys itself, like a KMS would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use crewbus_domain::{DataKey, StoreError, WrappedKey};
use crewbus_ports::KeyRing;
use uuid::Uuid;

#[derive(Default)]
struct State {
    /// scope → key id of the scope's live key (absent once destroyed or never used).
    scopes: HashMap<String, String>,
    /// wrapped handle → (scope, key id, data key).
    keys: HashMap<Vec<u8>, (String, String, DataKey)>,
    /// Whether every call fails as `Unavailable`.
    down: bool,
}

/// A [`KeyRing`] for tests: it keeps each data key in memory and hands out an opaque random
/// handle as the "wrapped" key, so nothing secret is derivable from what a store holds, and a
/// destroyed scope never opens again. Not for production (keys die with the process); the app has
/// the real local key ring.
///
/// [`TestKeyRing::set_down`] makes every call fail with `Unavailable`, for the "key ring down →
/// retry, never park" path. Clones share state.
#[derive(Clone, Default)]
pub struct TestKeyRing {
    state: Arc<Mutex<State>>,
}

impl TestKeyRing {
    /// An empty key ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every call fail with [`StoreError::Unavailable`] (`true`) or work again (`false`).
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_up(state: &State) -> Result<(), StoreError> {
        if state.down {
            return Err(StoreError::Unavailable {
                what: "test key ring".into(),
                source: None,
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for TestKeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestKeyRing")
    }
}

fn random_key() -> DataKey {
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(Uuid::new_v4().as_bytes());
    DataKey(bytes)
}

#[async_trait]
impl KeyRing for TestKeyRing {
    async fn data_key(&self, scope: &str) -> Result<(DataKey, WrappedKey), StoreError> {
        let mut state = self.lock();
        Self::check_up(&state)?;
        let key_id = state
            .scopes
            .entry(scope.to_owned())
            .or_insert_with(|| Uuid::new_v4().to_string())
            .clone();
        let key = random_key();
        let handle = Uuid::new_v4().as_bytes().to_vec();
        state.keys.insert(
            handle.clone(),
            (scope.to_owned(), key_id.clone(), key.clone()),
        );
        Ok((
            key,
            WrappedKey {
                scope: scope.to_owned(),
                key_id,
                ciphertext: handle,
            },
        ))
    }

    async fn open(&self, wrapped: &WrappedKey) -> Result<Option<DataKey>, StoreError> {
        let state = self.lock();
        Self::check_up(&state)?;
        let Some((scope, key_id, key)) = state.keys.get(&wrapped.ciphertext) else {
            return Ok(None);
        };
        let live = state.scopes.get(scope) == Some(key_id);
        if !live || *scope != wrapped.scope || *key_id != wrapped.key_id {
            return Ok(None);
        }
        Ok(Some(key.clone()))
    }

    async fn destroy(&self, scope: &str) -> Result<(), StoreError> {
        let mut state = self.lock();
        Self::check_up(&state)?;
        state.scopes.remove(scope);
        state.keys.retain(|_, (s, _, _)| s != scope);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn fresh_keys_open_until_destroyed() {
        let ring = TestKeyRing::new();
        let (k1, w1) = ring.data_key("t/push").await.unwrap();
        let (k2, w2) = ring.data_key("t/push").await.unwrap();
        assert_ne!(k1, k2);
        assert_ne!(w1.ciphertext, w2.ciphertext);
        assert_eq!(ring.open(&w1).await.unwrap(), Some(k1));
        let (_, other) = ring.data_key("u/push").await.unwrap();
        ring.destroy("t/push").await.unwrap();
        assert_eq!(ring.open(&w2).await.unwrap(), None);
        assert!(ring.open(&other).await.unwrap().is_some());
        let mut tampered = other.clone();
        tampered.ciphertext[0] ^= 1;
        assert_eq!(ring.open(&tampered).await.unwrap(), None);
    }

    #[tokio::test]
    async fn down_is_unavailable() {
        let ring = TestKeyRing::new();
        ring.set_down(true);
        assert!(matches!(
            ring.data_key("t/push").await,
            Err(StoreError::Unavailable { .. })
        ));
    }
}
