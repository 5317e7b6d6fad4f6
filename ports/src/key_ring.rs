//! The key ring port: envelope encryption of credentials at rest.

use async_trait::async_trait;
use crewbus_domain::{DataKey, StoreError, WrappedKey};

/// Issues and opens data keys, each wrapped under a scope's key (envelope encryption).
///
/// Scope for push credentials: `<tenant>/push`. Errors: the key ring cannot be reached →
/// [`StoreError::Unavailable`] (retry, never park); any other failure → [`StoreError::Sealing`].
/// Implemented by a test key ring (memory) and the app's local key ring; a KMS or Vault key ring is
/// a later adapter of the same port.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait KeyRing: Send + Sync {
    /// A fresh random 32-byte data key (a new one every call) and the same key wrapped under the
    /// scope's key. Creates the scope's key on first use.
    async fn data_key(&self, scope: &str) -> Result<(DataKey, WrappedKey), StoreError>;

    /// Unwraps a data key. `Ok(None)` when it cannot be opened: the scope was destroyed, the
    /// wrapping key is unknown, or the ciphertext was tampered with — the sealed value then reads
    /// as absent.
    async fn open(&self, wrapped: &WrappedKey) -> Result<Option<DataKey>, StoreError>;

    /// Destroys the scope's key (erasure): nothing wrapped under it opens again, ever. Idempotent.
    async fn destroy(&self, scope: &str) -> Result<(), StoreError>;
}
