//! Where a body backend keeps a body: an opaque `<scheme>:<rest>` string.

use std::fmt;

use serde::{Deserialize, Serialize};

use uuid::Uuid;

use crate::{BusError, BusResult};

/// The `rest` prefix of the locators an inbox issues for references (`<scheme>:inbox:<seq>`) in a
/// store that keeps bodies under `<scheme>:<message id>`: a body fetch refuses them
/// ([`Locator::message_id_for`]).
pub const INBOX_LOCATOR_PREFIX: &str = "inbox:";

/// An opaque reference to a stored body, `<scheme>:<rest>`.
///
/// The domain only splits the scheme from the rest; each adapter issues and parses its own rest
/// (e.g. `jetstream:<stream>:<seq>`, `postgres:<message id>`). A locator is not proof of access:
/// `fetch` re-checks the team and the message id against what is stored.
///
/// How adapters answer a locator: wrong scheme or unparsable rest → [`BusError::Invalid`]; right
/// scheme but another stream, team or message (including the locator an inbox confirmed a
/// reference with) → [`BusError::Forbidden`]; unknown position → `Ok(None)`. Never a panic.
/// By convention the scheme is the issuing backend's name (`memory`, `postgres`, `jetstream`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Locator(pub String);

impl Locator {
    /// Builds `<scheme>:<rest>`. `scheme` must be what [`Locator::split`] accepts (non-empty,
    /// ASCII letters, digits and `-` only); this is the issuing adapter's responsibility. Debug
    /// builds check only that it is non-empty and has no `:`. `rest` may be anything, `:`
    /// included.
    pub fn new(scheme: &str, rest: &str) -> Self {
        debug_assert!(!scheme.is_empty() && !scheme.contains(':'));
        Locator(format!("{scheme}:{rest}"))
    }

    /// The whole string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Splits into `(scheme, rest)` at the first `:`.
    ///
    /// Errors: [`BusError::Invalid`] when there is no `:`, the scheme is empty, or the scheme
    /// contains anything but ASCII letters, digits and `-`.
    pub fn split(&self) -> BusResult<(&str, &str)> {
        let Some((scheme, rest)) = self.0.split_once(':') else {
            return Err(BusError::invalid("locator has no `<scheme>:` prefix"));
        };
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(BusError::invalid("locator scheme is malformed"));
        }
        Ok((scheme, rest))
    }

    /// The rest after `<scheme>:` when the scheme is `expected`.
    ///
    /// Errors: [`BusError::Invalid`] for a malformed locator or another scheme.
    pub fn rest_for(&self, expected: &str) -> BusResult<&str> {
        let (scheme, rest) = self.split()?;
        if scheme != expected {
            return Err(BusError::invalid(format!(
                "locator scheme `{scheme}` is not `{expected}`"
            )));
        }
        Ok(rest)
    }

    /// `<scheme>:<message id>`: where a store that keeps bodies by message id keeps
    /// `message_id`'s.
    pub fn for_message(scheme: &str, message_id: Uuid) -> Self {
        Locator::new(scheme, &message_id.to_string())
    }

    /// `<scheme>:inbox:<seq>`: the locator an inbox of such a store confirms the reference at
    /// queue position `seq` with.
    pub fn for_inbox_reference(scheme: &str, seq: i64) -> Self {
        Locator::new(scheme, &format!("{INBOX_LOCATOR_PREFIX}{seq}"))
    }

    /// The message id of a [`Locator::for_message`] locator of `scheme`, which must be
    /// `message_id`. Errors: another scheme or a malformed rest → [`BusError::Invalid`]; an
    /// inbox locator ([`Locator::for_inbox_reference`]) or another message's →
    /// [`BusError::Forbidden`].
    pub fn message_id_for(&self, scheme: &str, message_id: Uuid) -> BusResult<Uuid> {
        let rest = self.rest_for(scheme)?;
        if rest.starts_with(INBOX_LOCATOR_PREFIX) {
            return Err(BusError::forbidden(
                "the locator names the inbox, not the body table",
            ));
        }
        let id = Uuid::try_parse(rest).map_err(|_| {
            BusError::invalid(format!("{scheme} locator is not `{scheme}:<message id>`"))
        })?;
        if id != message_id {
            return Err(BusError::forbidden("the locator names another message"));
        }
        Ok(id)
    }
}

impl fmt::Display for Locator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn message_locators_name_one_message_of_one_scheme() {
        let id = Uuid::new_v4();
        let l = Locator::for_message("postgres", id);
        assert_eq!(l.as_str(), format!("postgres:{id}"));
        assert_eq!(l.message_id_for("postgres", id).unwrap(), id);
        assert!(matches!(
            l.message_id_for("postgres", Uuid::new_v4()),
            Err(BusError::Forbidden { .. })
        ));
        assert!(matches!(
            l.message_id_for("sqlite", id),
            Err(BusError::Invalid { .. })
        ));
        let inbox = Locator::for_inbox_reference("postgres", 7);
        assert_eq!(inbox.as_str(), "postgres:inbox:7");
        assert!(matches!(
            inbox.message_id_for("postgres", id),
            Err(BusError::Forbidden { .. })
        ));
        assert!(matches!(
            Locator::new("postgres", "x").message_id_for("postgres", id),
            Err(BusError::Invalid { .. })
        ));
    }

    #[test]
    fn splits_at_the_first_colon() {
        let l = Locator::new("jetstream", "CREWBUS_B_ab:42");
        assert_eq!(l.split().unwrap(), ("jetstream", "CREWBUS_B_ab:42"));
        assert_eq!(l.rest_for("jetstream").unwrap(), "CREWBUS_B_ab:42");
        assert!(matches!(
            l.rest_for("postgres"),
            Err(BusError::Invalid { .. })
        ));
    }

    #[test]
    fn malformed_locators_are_invalid() {
        for bad in ["", "nocolon", ":rest", "sp ace:x", "a.b:x"] {
            assert!(
                matches!(Locator(bad.into()).split(), Err(BusError::Invalid { .. })),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn new_then_split_round_trips(scheme in "[a-z][a-z0-9-]{0,12}", rest in "\\PC{0,40}") {
            let l = Locator::new(&scheme, &rest);
            prop_assert_eq!(l.split().unwrap(), (scheme.as_str(), rest.as_str()));
        }

        #[test]
        fn split_never_panics(s in "\\PC{0,40}") {
            let _ = Locator(s).split();
        }
    }
}
