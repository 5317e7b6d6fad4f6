//! The memory adapters' locators: `memory:<team hex>:<stream>:<seq>`.

use crewbus_domain::{BusError, BusResult, Locator};
use uuid::Uuid;

/// The scheme of every locator the memory adapters issue (and [`crate::MemoryBackend`]'s name).
pub(crate) const SCHEME: &str = "memory";

/// Which store of a team issued a locator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    /// The body store (`bodies`).
    Bodies,
    /// The inbox (`inbox`); `publish_reference` answers with these.
    Inbox,
}

impl Store {
    fn as_str(self) -> &'static str {
        match self {
            Store::Bodies => "bodies",
            Store::Inbox => "inbox",
        }
    }
}

/// Issues `memory:<team as 32 lowercase hex digits>:<bodies|inbox>:<seq>`.
pub(crate) fn issue(team: Uuid, store: Store, seq: u64) -> Locator {
    Locator::new(
        SCHEME,
        &format!("{}:{}:{seq}", team.simple(), store.as_str()),
    )
}

/// Parses a locator handed to `team`'s body store and returns the body sequence.
///
/// Errors: another scheme, or a rest that is not `<32 hex>:<name>:<decimal seq>` →
/// [`BusError::Invalid`]; another team or another store (the inbox, or any other name) →
/// [`BusError::Forbidden`].
pub(crate) fn body_seq(locator: &Locator, team: Uuid) -> BusResult<u64> {
    let rest = locator.rest_for(SCHEME)?;
    let mut parts = rest.split(':');
    let (Some(team_hex), Some(store), Some(seq), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BusError::invalid(
            "memory locator is not `memory:<team>:<store>:<seq>`",
        ));
    };
    let owner =
        parse_team(team_hex).ok_or_else(|| BusError::invalid("memory locator names no team id"))?;
    if store.is_empty() {
        return Err(BusError::invalid("memory locator names no store"));
    }
    let seq = parse_seq(seq).ok_or_else(|| BusError::invalid("memory locator has no sequence"))?;
    if owner != team {
        return Err(BusError::forbidden("the locator belongs to another team"));
    }
    if store != Store::Bodies.as_str() {
        return Err(BusError::forbidden(
            "the locator names another store of this team, not its bodies",
        ));
    }
    Ok(seq)
}

/// A team id written as 32 hex digits (the only form issued).
pub(crate) fn parse_team(hex: &str) -> Option<Uuid> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Uuid::try_parse(hex).ok()
}

/// A decimal sequence ≥ 1 made of ASCII digits only (no sign, no spaces).
pub(crate) fn parse_seq(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|seq| *seq >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_did_not_issue() {
        let team = Uuid::new_v4();
        let other = Uuid::new_v4();
        let l = issue(team, Store::Bodies, 7);
        assert_eq!(body_seq(&l, team).unwrap(), 7);
        assert!(matches!(
            body_seq(&l, other),
            Err(BusError::Forbidden { .. })
        ));
        let inbox = issue(team, Store::Inbox, 7);
        assert!(matches!(
            body_seq(&inbox, team),
            Err(BusError::Forbidden { .. })
        ));
        let t = team.simple().to_string();
        for bad in [
            "memory".to_owned(),
            "memory:".to_owned(),
            "jetstream:x:1".to_owned(),
            format!("memory:{t}:bodies"),
            format!("memory:{t}:bodies:"),
            format!("memory:{t}:bodies:+1"),
            format!("memory:{t}:bodies:0"),
            format!("memory:{t}:bodies:99999999999999999999999"),
            format!("memory:{t}:bodies:1:2"),
            format!("memory:{t}::1"),
            format!("memory:{}:bodies:1", team.hyphenated()),
            "memory:zz:bodies:1".to_owned(),
        ] {
            assert!(
                matches!(
                    body_seq(&Locator(bad.clone()), team),
                    Err(BusError::Invalid { .. })
                ),
                "{bad}"
            );
        }
    }
}
