//! `LocalKeyRing`: the app's own key ring — a master key from a file or an environment variable,
//! and one random key per scope kept (wrapped under the master key) in a key directory.
//!
//! Layout of the key directory: `scopes/<hex(scope)>.key`, each holding
//! `key_id (36 bytes, a UUID) | nonce (24) | XChaCha20-Poly1305(master, scope key, ad = scope|key_id)`.
//! A data key is wrapped as `nonce (24) | XChaCha20-Poly1305(scope key, data key, ad = scope|key_id)`.
//!
//! Limits (honest):
//! - Erasure is as good as the file system's: `destroy` overwrites the scope file with zeros,
//!   syncs and removes it; copy-on-write file systems, snapshots and backups may keep the old
//!   bytes. For guaranteed erasure use a KMS key ring (a later adapter of the same port).
//! - The master key protects the scope files; whoever holds the master key *and* a copy of a
//!   scope file taken before `destroy` can still open that scope's data keys.
//! - Several processes may share the directory (a scope key is created with `create_new`, so two
//!   creators agree on one key). Nothing is cached: every `open` reads the scope file, so a
//!   `destroy` in one process is seen by every process at its next `open`.
//! - File I/O is synchronous (small files); it runs on the async caller's thread.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload, rand_core::RngCore};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use crewbus_domain::{DataKey, StoreError, WrappedKey};
use crewbus_ports::KeyRing;
use uuid::Uuid;
use zeroize::Zeroizing;

const NONCE_LEN: usize = 24;
const KEY_ID_LEN: usize = 36;

/// The 32-byte master key that wraps every scope key. Zeroized on drop; never printed.
#[derive(Clone)]
pub struct MasterKey(Zeroizing<[u8; 32]>);

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey([redacted])")
    }
}

/// Why a master key could not be loaded. Never holds key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MasterKeyError {
    /// The environment variable is not set (or not Unicode).
    #[error("the environment variable {0} is not set")]
    MissingVariable(String),
    /// The key file could not be read.
    #[error("the master key file cannot be read")]
    Unreadable(#[source] std::io::Error),
    /// The value is not 32 bytes in base64 (or, for a file, 32 raw bytes).
    #[error("the master key must be 32 bytes, base64 encoded")]
    Malformed,
}

impl MasterKey {
    /// A fresh random master key (for tests and for `key generate`-style tooling).
    pub fn generate() -> Self {
        let mut key = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(key.as_mut());
        MasterKey(key)
    }

    /// The key as base64 text, to store it in a file or a secret manager. Handle with care.
    pub fn to_base64(&self) -> Zeroizing<String> {
        Zeroizing::new(STANDARD.encode(self.0.as_ref()))
    }

    /// Parses base64 text of exactly 32 bytes (surrounding whitespace ignored).
    /// Errors: [`MasterKeyError::Malformed`].
    pub fn from_base64(text: &str) -> Result<Self, MasterKeyError> {
        let bytes = Zeroizing::new(
            STANDARD
                .decode(text.trim())
                .map_err(|_| MasterKeyError::Malformed)?,
        );
        let array: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| MasterKeyError::Malformed)?;
        Ok(MasterKey(Zeroizing::new(array)))
    }

    /// Reads the key from the environment variable `name` (base64 of 32 bytes).
    /// Errors: `MissingVariable`, `Malformed`.
    pub fn from_env(name: &str) -> Result<Self, MasterKeyError> {
        let value = Zeroizing::new(
            std::env::var(name).map_err(|_| MasterKeyError::MissingVariable(name.to_owned()))?,
        );
        Self::from_base64(&value)
    }

    /// Reads the key from a file: base64 text of 32 bytes, or exactly 32 raw bytes.
    /// Errors: `Unreadable`, `Malformed`.
    pub fn from_file(path: &Path) -> Result<Self, MasterKeyError> {
        let bytes = Zeroizing::new(fs::read(path).map_err(MasterKeyError::Unreadable)?);
        if let Ok(array) = <[u8; 32]>::try_from(bytes.as_slice()) {
            return Ok(MasterKey(Zeroizing::new(array)));
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| MasterKeyError::Malformed)?;
        Self::from_base64(text)
    }
}

/// A [`KeyRing`] on the local file system (see the module docs for the format and the limits).
///
/// `data_key(scope)` creates the scope's key on first use; `open` returns `Ok(None)` when the
/// scope file is gone (destroyed), its key id differs (destroyed and re-created), or anything
/// fails to authenticate; `destroy(scope)` overwrites and removes the scope file (idempotent).
/// Errors: I/O failures of the key directory → [`StoreError::Sealing`] (with the I/O error as
/// source), except interrupted/timed-out I/O → `Unavailable`.
#[derive(Clone)]
pub struct LocalKeyRing {
    master: MasterKey,
    dir: PathBuf,
}

impl fmt::Debug for LocalKeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKeyRing")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

struct ScopeKey {
    key_id: String,
    key: Zeroizing<[u8; 32]>,
}

fn io_error(what: &str, error: std::io::Error) -> StoreError {
    let what = format!("local key ring: {what}");
    match error.kind() {
        ErrorKind::Interrupted | ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            StoreError::Unavailable {
                what,
                source: Some(std::sync::Arc::new(error)),
            }
        }
        _ => StoreError::Sealing {
            what,
            source: Some(std::sync::Arc::new(error)),
        },
    }
}

fn sealing(what: &str) -> StoreError {
    StoreError::Sealing {
        what: format!("local key ring: {what}"),
        source: None,
    }
}

fn scope_ad(scope: &str, key_id: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(scope.len() + key_id.len() + 1);
    ad.extend_from_slice(scope.as_bytes());
    ad.push(0);
    ad.extend_from_slice(key_id.as_bytes());
    ad
}

impl LocalKeyRing {
    /// A key ring keeping its scope keys under `dir` (created if missing, mode 0700 on Unix).
    /// Errors: the directory cannot be created → [`StoreError::Sealing`].
    pub fn new(master: MasterKey, dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(dir.join("scopes")).map_err(|e| io_error("create the directory", e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        }
        Ok(LocalKeyRing { master, dir })
    }

    fn scope_path(&self, scope: &str) -> PathBuf {
        self.dir
            .join("scopes")
            .join(format!("{}.key", hex::encode(scope.as_bytes())))
    }

    fn master_cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.master.0.as_ref().into())
    }

    /// Reads the scope's key; `Ok(None)` when the file is absent or does not authenticate.
    fn read_scope(&self, scope: &str) -> Result<Option<ScopeKey>, StoreError> {
        let bytes = match fs::read(self.scope_path(scope)) {
            Ok(b) => Zeroizing::new(b),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("read a scope key", e)),
        };
        if bytes.len() < KEY_ID_LEN + NONCE_LEN {
            return Ok(None);
        }
        let (key_id, rest) = bytes.split_at(KEY_ID_LEN);
        let Ok(key_id) = std::str::from_utf8(key_id) else {
            return Ok(None);
        };
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let plain = self.master_cipher().decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: ciphertext,
                aad: &scope_ad(scope, key_id),
            },
        );
        let Ok(plain) = plain.map(Zeroizing::new) else {
            return Ok(None);
        };
        let Ok(key) = <[u8; 32]>::try_from(plain.as_slice()) else {
            return Ok(None);
        };
        Ok(Some(ScopeKey {
            key_id: key_id.to_owned(),
            key: Zeroizing::new(key),
        }))
    }

    /// The scope's key, created (with `create_new`, so concurrent creators agree) if absent.
    fn scope_key(&self, scope: &str) -> Result<ScopeKey, StoreError> {
        if let Some(key) = self.read_scope(scope)? {
            return Ok(key);
        }
        let key_id = Uuid::new_v4().hyphenated().to_string();
        let mut key = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(key.as_mut());
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let ciphertext = self
            .master_cipher()
            .encrypt(
                &nonce,
                Payload {
                    msg: key.as_ref(),
                    aad: &scope_ad(scope, &key_id),
                },
            )
            .map_err(|_| sealing("wrap a scope key"))?;
        let mut file_bytes = Vec::with_capacity(KEY_ID_LEN + NONCE_LEN + ciphertext.len());
        file_bytes.extend_from_slice(key_id.as_bytes());
        file_bytes.extend_from_slice(&nonce);
        file_bytes.extend_from_slice(&ciphertext);
        let path = self.scope_path(scope);
        let tmp = path.with_extension(format!("tmp-{}", Uuid::new_v4().simple()));
        {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| io_error("create a scope key", e))?;
            file.write_all(&file_bytes)
                .and_then(|()| file.sync_all())
                .map_err(|e| io_error("write a scope key", e))?;
        }
        // hard_link fails if another process created the scope first: then use theirs.
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(ScopeKey { key_id, key }),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => self
                .read_scope(scope)?
                .ok_or_else(|| sealing("a concurrently created scope key does not open")),
            Err(e) => Err(io_error("store a scope key", e)),
        }
    }
}

#[async_trait]
impl KeyRing for LocalKeyRing {
    async fn data_key(&self, scope: &str) -> Result<(DataKey, WrappedKey), StoreError> {
        let scope_key = self.scope_key(scope)?;
        let mut data = [0u8; 32];
        OsRng.fill_bytes(&mut data);
        let data = DataKey(data);
        let cipher = XChaCha20Poly1305::new(scope_key.key.as_ref().into());
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let ciphertext = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: data.expose(),
                    aad: &scope_ad(scope, &scope_key.key_id),
                },
            )
            .map_err(|_| sealing("wrap a data key"))?;
        let mut wrapped = nonce.to_vec();
        wrapped.extend_from_slice(&ciphertext);
        Ok((
            data,
            WrappedKey {
                scope: scope.to_owned(),
                key_id: scope_key.key_id,
                ciphertext: wrapped,
            },
        ))
    }

    async fn open(&self, wrapped: &WrappedKey) -> Result<Option<DataKey>, StoreError> {
        let Some(scope_key) = self.read_scope(&wrapped.scope)? else {
            return Ok(None);
        };
        if scope_key.key_id != wrapped.key_id || wrapped.ciphertext.len() < NONCE_LEN {
            return Ok(None);
        }
        let (nonce, ciphertext) = wrapped.ciphertext.split_at(NONCE_LEN);
        let cipher = XChaCha20Poly1305::new(scope_key.key.as_ref().into());
        let Ok(plain) = cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &scope_ad(&wrapped.scope, &wrapped.key_id),
                },
            )
            .map(Zeroizing::new)
        else {
            return Ok(None);
        };
        Ok(<[u8; 32]>::try_from(plain.as_slice()).ok().map(DataKey))
    }

    async fn destroy(&self, scope: &str) -> Result<(), StoreError> {
        let path = self.scope_path(scope);
        match fs::metadata(&path) {
            Ok(meta) => {
                let zeros = vec![0u8; meta.len() as usize];
                if let Ok(mut file) = OpenOptions::new().write(true).open(&path) {
                    let _ = file.write_all(&zeros).and_then(|()| file.sync_all());
                }
                match fs::remove_file(&path) {
                    Ok(()) => Ok(()),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(io_error("remove a scope key", e)),
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("inspect a scope key", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(dir: &Path) -> LocalKeyRing {
        LocalKeyRing::new(MasterKey::generate(), dir).unwrap()
    }

    #[tokio::test]
    async fn fresh_data_keys_open_until_the_scope_is_destroyed() {
        let dir = tempfile::tempdir().unwrap();
        let ring = ring(dir.path());
        let (k1, w1) = ring.data_key("acme/push").await.unwrap();
        let (k2, w2) = ring.data_key("acme/push").await.unwrap();
        assert_ne!(k1, k2);
        assert_eq!(w1.key_id, w2.key_id);
        assert_eq!(ring.open(&w1).await.unwrap(), Some(k1.clone()));
        assert!(!w1.ciphertext.windows(32).any(|w| w == k1.expose()));
        let (_, other) = ring.data_key("globex/push").await.unwrap();

        ring.destroy("acme/push").await.unwrap();
        ring.destroy("acme/push").await.unwrap();
        assert_eq!(ring.open(&w1).await.unwrap(), None);
        assert_eq!(ring.open(&w2).await.unwrap(), None);
        assert!(ring.open(&other).await.unwrap().is_some());

        // A new key for the scope never opens what was wrapped before the destroy.
        let (k3, w3) = ring.data_key("acme/push").await.unwrap();
        assert_ne!(w3.key_id, w1.key_id);
        assert_eq!(ring.open(&w3).await.unwrap(), Some(k3));
        assert_eq!(ring.open(&w1).await.unwrap(), None);
    }

    #[tokio::test]
    async fn tampering_or_a_wrong_master_key_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let master = MasterKey::generate();
        let ring = LocalKeyRing::new(master.clone(), dir.path()).unwrap();
        let (_, wrapped) = ring.data_key("acme/push").await.unwrap();
        let mut tampered = wrapped.clone();
        *tampered.ciphertext.last_mut().unwrap() ^= 1;
        assert_eq!(ring.open(&tampered).await.unwrap(), None);
        let mut moved = wrapped.clone();
        moved.scope = "globex/push".into();
        assert_eq!(ring.open(&moved).await.unwrap(), None);

        let stranger = LocalKeyRing::new(MasterKey::generate(), dir.path()).unwrap();
        assert_eq!(stranger.open(&wrapped).await.unwrap(), None);
        // The same master key in another process (same directory) opens it.
        let twin = LocalKeyRing::new(master, dir.path()).unwrap();
        assert!(twin.open(&wrapped).await.unwrap().is_some());
    }

    #[test]
    fn master_key_sources() {
        let key = MasterKey::generate();
        let text = key.to_base64();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        fs::write(&path, format!("{}\n", text.as_str())).unwrap();
        assert_eq!(MasterKey::from_file(&path).unwrap().0, key.0);
        fs::write(&path, key.0.as_ref()).unwrap();
        assert_eq!(MasterKey::from_file(&path).unwrap().0, key.0);
        fs::write(&path, "c2hvcnQ=").unwrap();
        assert!(matches!(
            MasterKey::from_file(&path),
            Err(MasterKeyError::Malformed)
        ));
        assert!(matches!(
            MasterKey::from_env("CREWBUS_TEST_SURELY_UNSET_MASTER_KEY"),
            Err(MasterKeyError::MissingVariable(_))
        ));
        assert!(!format!("{key:?}").contains(text.as_str()));
    }
}
