//! `SealedPush`: a push store wrapper that seals each credential at rest (envelope encryption).
//!
//! Each credential gets a fresh data key from the [`KeyRing`] (scope `<tenant>/push`), is
//! encrypted with XChaCha20-Poly1305 under a fresh random 24-byte nonce, and is bound by the
//! associated data to its tenant, run and registration id, so a sealed value copied to another
//! row does not open. The envelope (below) is stored base64 in the credentials field; URL, scheme,
//! ids and cursor stay in clear because the store queries on them.
//!
//! Envelope, version 1 (all lengths big-endian `u16`):
//! `0x01 | len scope | scope | len key_id | key_id | len wrapped | wrapped | nonce (24) | ciphertext+tag`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use chrono::{DateTime, Utc};
use crewbus_domain::{
    PushAttempt, PushAuthentication, PushConfig, PushRegistration, RunId, Secret, Seq, StoreError,
    TenantId, WrappedKey,
};
use crewbus_ports::{KeyRing, PushStore};
use zeroize::Zeroizing;

/// The envelope version this code writes.
pub const ENVELOPE_VERSION: u8 = 1;

const NONCE_LEN: usize = 24;

/// Why a sealed credential could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The envelope starts with a version this code does not know (written by a newer crewbus,
    /// or not an envelope at all).
    #[error("unknown envelope version {version}")]
    UnknownVersion {
        /// The first byte of the envelope.
        version: u8,
    },
    /// The stored text is not a well-formed envelope (bad base64, truncated).
    #[error("malformed envelope")]
    Malformed,
    /// The key ring no longer opens the data key (scope destroyed, key unknown or tampered).
    #[error("the data key does not open")]
    KeyUnavailable,
    /// The ciphertext does not authenticate: tampered, or copied from another row.
    #[error("the credential does not authenticate for this row")]
    Forged,
}

/// A parsed envelope (no secret in it: the data key is wrapped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub(crate) wrapped: WrappedKey,
    pub(crate) nonce: [u8; NONCE_LEN],
    pub(crate) ciphertext: Vec<u8>,
}

impl Envelope {
    pub(crate) fn encode(&self) -> String {
        let mut out = vec![ENVELOPE_VERSION];
        for part in [
            self.wrapped.scope.as_bytes(),
            self.wrapped.key_id.as_bytes(),
            &self.wrapped.ciphertext,
        ] {
            let len = u16::try_from(part.len()).expect("envelope parts are short");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&self.nonce);
        out.extend_from_slice(&self.ciphertext);
        STANDARD_NO_PAD.encode(out)
    }

    /// Parses stored text. Errors: [`EnvelopeError::UnknownVersion`] for any first byte but 1,
    /// [`EnvelopeError::Malformed`] for anything that does not parse.
    pub(crate) fn decode(text: &str) -> Result<Self, EnvelopeError> {
        let bytes = STANDARD_NO_PAD
            .decode(text)
            .map_err(|_| EnvelopeError::Malformed)?;
        let (&version, mut rest) = bytes.split_first().ok_or(EnvelopeError::Malformed)?;
        if version != ENVELOPE_VERSION {
            return Err(EnvelopeError::UnknownVersion { version });
        }
        let mut part = || -> Result<Vec<u8>, EnvelopeError> {
            let (len, tail) = rest.split_at_checked(2).ok_or(EnvelopeError::Malformed)?;
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            let (value, tail) = tail.split_at_checked(len).ok_or(EnvelopeError::Malformed)?;
            rest = tail;
            Ok(value.to_vec())
        };
        let scope = String::from_utf8(part()?).map_err(|_| EnvelopeError::Malformed)?;
        let key_id = String::from_utf8(part()?).map_err(|_| EnvelopeError::Malformed)?;
        let wrapped = part()?;
        let (nonce, ciphertext) = rest
            .split_at_checked(NONCE_LEN)
            .ok_or(EnvelopeError::Malformed)?;
        Ok(Envelope {
            wrapped: WrappedKey {
                scope,
                key_id,
                ciphertext: wrapped,
            },
            nonce: nonce.try_into().map_err(|_| EnvelopeError::Malformed)?,
            ciphertext: ciphertext.to_vec(),
        })
    }
}

/// The associated data binding a sealed credential to its row: version, tenant, run and id.
fn associated_data(tenant: &TenantId, run: RunId, id: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(64 + id.len());
    ad.extend_from_slice(b"crewbus/push/credential/v1\0");
    ad.extend_from_slice(tenant.as_str().as_bytes());
    ad.push(0);
    ad.extend_from_slice(run.0.as_bytes());
    ad.extend_from_slice(id.as_bytes());
    ad
}

/// A [`PushStore`] that seals credentials on the way in and opens them on the way out.
///
/// Writes: `put` seals `config.authentication.credentials` (the scheme stays clear). A key ring
/// failure fails the `put` (`Unavailable` or `Sealing`, as the key ring reported it).
/// Reads (`get`, `list`, `due`, `parked`): a credential that will not open — scope destroyed,
/// tampered, copied from another row, unknown envelope version — reads as **absent**
/// (`authentication: None`) and is logged at `warn` with run, id and the [`EnvelopeError`] kind,
/// so one erased tenant never stops a sweep. A key ring that is down fails the read with
/// `Unavailable` (retry, never park). Every other method passes through.
#[derive(Clone)]
pub struct SealedPush {
    inner: Arc<dyn PushStore>,
    keys: Arc<dyn KeyRing>,
    scope: String,
}

impl fmt::Debug for SealedPush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedPush")
            .field("tenant", self.inner.tenant())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl SealedPush {
    /// Wraps `inner`; credentials are sealed under the key ring scope `<tenant>/push`, where the
    /// tenant is `inner.tenant()`.
    pub fn new(inner: Arc<dyn PushStore>, keys: Arc<dyn KeyRing>) -> Self {
        let scope = Self::scope_of(inner.tenant());
        SealedPush { inner, keys, scope }
    }

    /// The key ring scope of a tenant's push credentials: `<tenant>/push`. Destroying it erases
    /// every push credential of that tenant.
    pub fn scope_of(tenant: &TenantId) -> String {
        format!("{tenant}/push")
    }

    async fn seal(&self, run: RunId, id: &str, plain: &Secret) -> Result<Secret, StoreError> {
        let (key, wrapped) = self.keys.data_key(&self.scope).await?;
        let cipher = XChaCha20Poly1305::new(key.expose().into());
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let ad = associated_data(self.inner.tenant(), run, id);
        let ciphertext = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plain.expose().as_bytes(),
                    aad: &ad,
                },
            )
            .map_err(|_| StoreError::Sealing {
                what: format!("credential of {run}/{id}"),
                source: None,
            })?;
        let envelope = Envelope {
            wrapped,
            nonce: nonce.into(),
            ciphertext,
        };
        Ok(Secret::new(envelope.encode()))
    }

    /// Opens a stored credential. `Ok(Err(_))`: it will not open (reads as absent);
    /// `Err(_)`: the key ring failed (propagated).
    async fn open(
        &self,
        run: RunId,
        id: &str,
        sealed: &Secret,
    ) -> Result<Result<Secret, EnvelopeError>, StoreError> {
        let envelope = match Envelope::decode(sealed.expose()) {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        let Some(key) = self.keys.open(&envelope.wrapped).await? else {
            return Ok(Err(EnvelopeError::KeyUnavailable));
        };
        let cipher = XChaCha20Poly1305::new(key.expose().into());
        let ad = associated_data(self.inner.tenant(), run, id);
        let plain = cipher.decrypt(
            XNonce::from_slice(&envelope.nonce),
            Payload {
                msg: &envelope.ciphertext,
                aad: &ad,
            },
        );
        let Ok(plain) = plain.map(Zeroizing::new) else {
            return Ok(Err(EnvelopeError::Forged));
        };
        match std::str::from_utf8(&plain) {
            Ok(text) => Ok(Ok(Secret::new(text))),
            Err(_) => Ok(Err(EnvelopeError::Malformed)),
        }
    }

    async fn open_config(&self, mut config: PushConfig) -> Result<PushConfig, StoreError> {
        if let Some(auth) = config.authentication.take() {
            match self.open(config.run, &config.id, &auth.credentials).await? {
                Ok(credentials) => {
                    config.authentication = Some(PushAuthentication {
                        scheme: auth.scheme,
                        credentials,
                    });
                }
                Err(error) => {
                    tracing::warn!(
                        run = %config.run,
                        id = %config.id,
                        %error,
                        "a sealed push credential does not open; it reads as absent"
                    );
                }
            }
        }
        Ok(config)
    }

    async fn open_registration(
        &self,
        mut registration: PushRegistration,
    ) -> Result<PushRegistration, StoreError> {
        registration.config = self.open_config(registration.config).await?;
        Ok(registration)
    }
}

#[async_trait]
impl PushStore for SealedPush {
    fn tenant(&self) -> &TenantId {
        self.inner.tenant()
    }

    async fn put(
        &self,
        config: &PushConfig,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let authentication = match &config.authentication {
            Some(auth) => Some(PushAuthentication {
                scheme: auth.scheme.clone(),
                credentials: self.seal(config.run, &config.id, &auth.credentials).await?,
            }),
            None => None,
        };
        let sealed = PushConfig {
            id: config.id.clone(),
            run: config.run,
            url: config.url.clone(),
            authentication,
        };
        self.inner.put(&sealed, next_seq, at).await
    }

    async fn get(&self, run: RunId, id: &str) -> Result<Option<PushConfig>, StoreError> {
        match self.inner.get(run, id).await? {
            Some(config) => Ok(Some(self.open_config(config).await?)),
            None => Ok(None),
        }
    }

    async fn list(&self, run: RunId) -> Result<Vec<PushConfig>, StoreError> {
        let mut out = Vec::new();
        for config in self.inner.list(run).await? {
            out.push(self.open_config(config).await?);
        }
        Ok(out)
    }

    async fn due(
        &self,
        at: DateTime<Utc>,
        limit: usize,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<PushRegistration>, StoreError> {
        let mut out = Vec::new();
        for registration in self.inner.due(at, limit, lease_until).await? {
            out.push(self.open_registration(registration).await?);
        }
        Ok(out)
    }

    async fn advance(
        &self,
        run: RunId,
        id: &str,
        next_seq: Seq,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.inner.advance(run, id, next_seq, at).await
    }

    async fn defer(&self, run: RunId, id: &str, until: DateTime<Utc>) -> Result<(), StoreError> {
        self.inner.defer(run, id, until).await
    }

    async fn retry(
        &self,
        run: RunId,
        id: &str,
        next_attempt_at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError> {
        self.inner.retry(run, id, next_attempt_at, error).await
    }

    async fn park(&self, run: RunId, id: &str, error: &str) -> Result<(), StoreError> {
        self.inner.park(run, id, error).await
    }

    async fn parked(&self, limit: usize) -> Result<Vec<PushRegistration>, StoreError> {
        let mut out = Vec::new();
        for registration in self.inner.parked(limit).await? {
            out.push(self.open_registration(registration).await?);
        }
        Ok(out)
    }

    async fn unpark(&self, run: RunId, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.inner.unpark(run, id, at).await
    }

    async fn delete(&self, run: RunId, id: &str) -> Result<(), StoreError> {
        self.inner.delete(run, id).await
    }

    async fn registrations(&self, run: RunId) -> Result<Vec<PushRegistration>, StoreError> {
        let mut out = Vec::new();
        for registration in self.inner.registrations(run).await? {
            out.push(self.open_registration(registration).await?);
        }
        Ok(out)
    }

    async fn record_attempt(
        &self,
        run: RunId,
        id: &str,
        attempt: &PushAttempt,
        keep: usize,
    ) -> Result<(), StoreError> {
        self.inner.record_attempt(run, id, attempt, keep).await
    }

    async fn attempts(
        &self,
        run: RunId,
        id: &str,
        limit: usize,
    ) -> Result<Vec<PushAttempt>, StoreError> {
        self.inner.attempts(run, id, limit).await
    }

    async fn prune_attempts(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        self.inner.prune_attempts(before).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            wrapped: WrappedKey {
                scope: "acme/push".into(),
                key_id: "k1".into(),
                ciphertext: vec![1, 2, 3],
            },
            nonce: [9; NONCE_LEN],
            ciphertext: vec![4, 5, 6, 7],
        }
    }

    #[test]
    fn envelope_round_trips_and_starts_with_its_version() {
        let text = sample().encode();
        assert_eq!(Envelope::decode(&text).unwrap(), sample());
        let bytes = STANDARD_NO_PAD.decode(&text).unwrap();
        assert_eq!(bytes[0], ENVELOPE_VERSION);
    }

    #[test]
    fn unknown_version_and_garbage_are_typed_errors() {
        let mut bytes = STANDARD_NO_PAD.decode(sample().encode()).unwrap();
        bytes[0] = 2;
        assert_eq!(
            Envelope::decode(&STANDARD_NO_PAD.encode(&bytes)),
            Err(EnvelopeError::UnknownVersion { version: 2 })
        );
        assert_eq!(Envelope::decode("!!"), Err(EnvelopeError::Malformed));
        assert_eq!(Envelope::decode(""), Err(EnvelopeError::Malformed));
        bytes[0] = ENVELOPE_VERSION;
        bytes.truncate(12);
        assert_eq!(
            Envelope::decode(&STANDARD_NO_PAD.encode(&bytes)),
            Err(EnvelopeError::Malformed)
        );
    }

    #[test]
    fn associated_data_separates_rows() {
        let t = TenantId::new("acme").unwrap();
        let run = RunId::new();
        let a = associated_data(&t, run, "operator:a");
        assert_ne!(a, associated_data(&t, run, "operator:b"));
        assert_ne!(a, associated_data(&t, RunId::new(), "operator:a"));
        assert_ne!(
            a,
            associated_data(&TenantId::new("other").unwrap(), run, "operator:a")
        );
    }
}
