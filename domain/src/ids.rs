//! Identifiers: tenants, runs and journal sequence numbers.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{BusError, BusResult};

/// The deployment's tenant: a validated name (non-empty, at most 64 characters, no `/`, `:` or
/// control characters). Teams live inside a tenant; every store reports the tenant it serves.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    /// Longest accepted tenant name, in characters.
    pub const MAX_LEN: usize = 64;

    /// Validates `name`. Errors: [`BusError::Invalid`] naming the rule that was broken.
    pub fn new(name: impl Into<String>) -> BusResult<Self> {
        let name = name.into();
        if name.trim().is_empty() {
            return Err(BusError::invalid("tenant name is empty"));
        }
        if name.chars().count() > Self::MAX_LEN {
            return Err(BusError::invalid(format!(
                "tenant name is longer than {} characters",
                Self::MAX_LEN
            )));
        }
        if let Some(c) = name
            .chars()
            .find(|c| *c == '/' || *c == ':' || c.is_control())
        {
            return Err(BusError::invalid(format!(
                "tenant name contains the forbidden character {c:?}"
            )));
        }
        Ok(TenantId(name))
    }

    /// The tenant of a single-tenant deployment: `"default"`.
    pub fn default_tenant() -> Self {
        TenantId("default".to_owned())
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({:?})", self.0)
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for TenantId {
    type Error = BusError;
    fn try_from(value: String) -> BusResult<Self> {
        TenantId::new(value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

/// One agent session on the bus (admitted, resumed, sealed). Minted by the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub Uuid);

impl RunId {
    /// A fresh random run id.
    pub fn new() -> Self {
        RunId(Uuid::new_v4())
    }
}

impl Default for RunId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A record's position in its run's journal: per run, gap-free, starting at 1. (Not the
/// conversation's message `seq`.)
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    /// The first record of every run.
    pub const FIRST: Seq = Seq(1);

    /// The next position (saturating).
    pub fn next(self) -> Seq {
        Seq(self.0.saturating_add(1))
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tenant_rules() {
        assert!(TenantId::new("default").is_ok());
        assert!(TenantId::new("acme-prod_1 eu").is_ok());
        for bad in ["", "  ", "a/b", "a:b", "a\nb", "a\u{7f}b"] {
            assert!(
                matches!(TenantId::new(bad), Err(BusError::Invalid { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(TenantId::new("x".repeat(64)).is_ok());
        assert!(TenantId::new("x".repeat(65)).is_err());
        assert_eq!(TenantId::default().as_str(), "default");
    }

    #[test]
    fn tenant_deserialization_validates() {
        // serde goes through TryFrom<String>, so a bad name never enters through config.
        let ok: Result<TenantId, _> = TenantId::try_from("ok".to_owned());
        assert!(ok.is_ok());
        assert!(TenantId::try_from("a/b".to_owned()).is_err());
    }

    proptest! {
        #[test]
        fn accepted_tenants_obey_every_rule(s in "\\PC{0,80}") {
            if let Ok(t) = TenantId::new(s.clone()) {
                prop_assert!(!t.as_str().trim().is_empty());
                prop_assert!(t.as_str().chars().count() <= 64);
                prop_assert!(!t.as_str().contains(['/', ':']));
            }
        }
    }

    #[test]
    fn seq_starts_at_one_and_saturates() {
        assert_eq!(Seq::FIRST.0, 1);
        assert_eq!(Seq(u64::MAX).next(), Seq(u64::MAX));
    }
}
