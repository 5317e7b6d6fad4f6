//! The memory inbox's ack subjects: `$MEMORY.ACK.<team hex>.<recipient>.<stream seq>`.

use crewbus_domain::{BusError, BusResult, validate_recipient_key};
use uuid::Uuid;

use crate::locator::{parse_seq, parse_team};

const PREFIX: &str = "$MEMORY.ACK.";

/// Issues the ack subject of the reference at `seq`, handed to `recipient` of `team`.
pub(crate) fn issue(team: Uuid, recipient: &str, seq: u64) -> String {
    format!("{PREFIX}{}.{recipient}.{seq}", team.simple())
}

/// Parses an ack subject handed to `team`'s inbox into `(recipient, stream seq)`.
///
/// Errors: [`BusError::Forbidden`] for anything this team's inbox did not issue — another team's
/// subject, another prefix, or garbage (the caller never takes an ack subject from an agent, so
/// a malformed one is treated as foreign, never as a bad request to explain).
pub(crate) fn parse(subject: &str, team: Uuid) -> BusResult<(&str, u64)> {
    let foreign = || BusError::forbidden("not an ack subject of this team's inbox");
    let rest = subject.strip_prefix(PREFIX).ok_or_else(foreign)?;
    let mut parts = rest.split('.');
    let (Some(team_hex), Some(recipient), Some(seq), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(foreign());
    };
    if parse_team(team_hex) != Some(team) || validate_recipient_key(recipient).is_err() {
        return Err(foreign());
    }
    let seq = parse_seq(seq).ok_or_else(foreign)?;
    Ok((recipient, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_the_rest() {
        let team = Uuid::new_v4();
        let s = issue(team, "agent-1", 42);
        assert_eq!(parse(&s, team).unwrap(), ("agent-1", 42));
        assert!(matches!(
            parse(&s, Uuid::new_v4()),
            Err(BusError::Forbidden { .. })
        ));
        let t = team.simple();
        for bad in [
            String::new(),
            "garbage".into(),
            "$JS.ACK.stream.consumer.1.1.1.1.0".into(),
            format!("{PREFIX}{t}.agent.1.2"),
            format!("{PREFIX}{t}.a*b.1"),
            format!("{PREFIX}{t}.agent.x"),
            format!("{PREFIX}{t}..1"),
            format!("{PREFIX}{t}.agent"),
        ] {
            assert!(
                matches!(parse(&bad, team), Err(BusError::Forbidden { .. })),
                "{bad}"
            );
        }
    }
}
