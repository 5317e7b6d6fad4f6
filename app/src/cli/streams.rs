//! `crewbus stream …`: operator actions on a team's JetStream streams, with the provisioning
//! credential. Each prints what changed and the storage arithmetic (`--json` for scripts); a
//! progress line goes to stderr before each broker call.

use std::process::ExitCode;

use crewbus_domain::{
    BusError, BusResult, Provisioned, QuotaChange, StorageAccount, StreamKind, Uuid,
};
use crewbus_ports::StreamAdmin;
use serde_json::{Value, json};

use crate::cli::{StreamChoice, StreamCommand};
use crate::compose::{compose, stream_admin};
use crate::config::Config;
use crate::usecases::bus::Bus;

fn kind_of(c: StreamChoice) -> StreamKind {
    match c {
        StreamChoice::Bodies => StreamKind::Bodies,
        StreamChoice::Inbox => StreamKind::Inbox,
    }
}

fn progress(json: bool, what: &str) {
    if !json {
        eprintln!("… {what}");
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

/// `name (kind): max N messages / X MiB<between> holds n / Y MiB`.
fn stream_text(p: &Provisioned, between: &str) -> String {
    format!(
        "{} ({}): max {} messages / {}{between} holds {} / {}",
        p.name,
        p.kind.as_str(),
        p.limits.max_messages,
        mib(p.limits.max_bytes),
        p.messages,
        mib(p.bytes)
    )
}

fn account_text(a: &StorageAccount) -> String {
    match a.budget {
        Some(b) => format!(
            "account: used {}, reserved {} of a budget of {} ({} free to reserve)",
            mib(a.used),
            mib(a.reserved),
            mib(b),
            mib(b.saturating_sub(a.reserved))
        ),
        None => format!(
            "account: used {}, reserved {}, unlimited budget",
            mib(a.used),
            mib(a.reserved)
        ),
    }
}

fn account_json(a: &StorageAccount) -> Value {
    json!({"used": a.used, "reserved": a.reserved, "budget": a.budget})
}

fn provisioned_json(p: &Provisioned) -> Value {
    json!({
        "name": p.name, "kind": p.kind.as_str(), "created": p.created,
        "max_messages": p.limits.max_messages, "max_bytes": p.limits.max_bytes,
        "messages": p.messages, "bytes": p.bytes, "over_ceiling": p.over_ceiling(),
    })
}

fn change_json(c: &QuotaChange) -> Value {
    json!({
        "name": c.name, "kind": c.kind.as_str(),
        "current": {"max_messages": c.current.max_messages, "max_bytes": c.current.max_bytes},
        "wanted": {"max_messages": c.wanted.max_messages, "max_bytes": c.wanted.max_bytes},
        "messages": c.messages, "bytes": c.bytes, "replicas": c.replicas,
        "additional_bytes": c.additional_bytes(),
    })
}

fn change_text(c: &QuotaChange) -> String {
    format!(
        "{} ({}): max_messages {} → {}, max_bytes {} → {}; holds {} messages / {}; reserves {} more (× {} replicas)",
        c.name,
        c.kind.as_str(),
        c.current.max_messages,
        c.wanted.max_messages,
        mib(c.current.max_bytes),
        mib(c.wanted.max_bytes),
        c.messages,
        mib(c.bytes),
        mib(c.additional_bytes()),
        c.replicas
    )
}

/// The team id for `team` (an id, or a name looked up in the configured store), and the bus
/// when the store outlives a process (the embedded store or Postgres).
async fn resolve_team(config: &Config, team: &str) -> BusResult<(Uuid, Option<Bus>)> {
    if config.store()? != crate::config::StorageKind::Memory {
        let bus = compose(config).await?.bus;
        let t = bus.find_team(team).await?;
        return Ok((t.id, Some(bus)));
    }
    let id = team
        .parse::<Uuid>()
        .map_err(|_| BusError::invalid("without a database, name the team by its id (a UUID)"))?;
    Ok((id, None))
}

/// Runs one stream command. Errors: no `[nats]` → `Invalid`; the broker's refusals
/// (`Conflict`, `InsufficientStorage` with the arithmetic, `NotProvisioned`).
pub async fn run(config: Config, cmd: StreamCommand, json: bool) -> BusResult<ExitCode> {
    let admin = stream_admin(&config)?;
    match cmd {
        StreamCommand::Provision { team } => {
            let (team, _) = resolve_team(&config, &team).await?;
            progress(json, "provisioning the body stream");
            let bodies = admin.provision(team).await?;
            progress(json, "provisioning the inbox stream");
            let inbox = admin.provision_inbox(team).await?;
            let account = admin.storage_account().await?;
            if json {
                println!(
                    "{}",
                    json!({"team": team, "streams": [provisioned_json(&bodies), provisioned_json(&inbox)], "account": account_json(&account)})
                );
            } else {
                for p in [&bodies, &inbox] {
                    println!(
                        "{} {}",
                        if p.created { "created" } else { "found" },
                        stream_text(p, ",")
                    );
                    if !p.created {
                        println!(
                            "  (an existing stream keeps its limits; `crewbus stream check` shows what the configured quotas would change)"
                        );
                    }
                }
                println!("{}", account_text(&account));
            }
        }
        StreamCommand::Check { team, kind } => {
            let (team, _) = resolve_team(&config, &team).await?;
            progress(json, "reading the stream and the account");
            let change = admin.check_update(team, kind_of(kind)).await?;
            let account = admin.storage_account().await?;
            if json {
                println!(
                    "{}",
                    json!({"change": change_json(&change), "account": account_json(&account), "fits": account.fits(change.additional_bytes())})
                );
            } else {
                println!("{}", change_text(&change));
                println!("{}", account_text(&account));
                println!(
                    "{}",
                    if change.is_noop() {
                        "nothing to change"
                    } else {
                        "the change is possible: `crewbus stream update` applies it"
                    }
                );
            }
        }
        StreamCommand::Update { team, kind } => {
            let (team, _) = resolve_team(&config, &team).await?;
            let kinds: Vec<StreamKind> = match kind {
                Some(k) => vec![kind_of(k)],
                None => vec![StreamKind::Bodies, StreamKind::Inbox],
            };
            let applied = update_all(&*admin, team, &kinds, json).await?;
            let account = admin.storage_account().await?;
            if json {
                println!(
                    "{}",
                    json!({"streams": applied.iter().map(provisioned_json).collect::<Vec<_>>(), "account": account_json(&account)})
                );
            } else {
                for p in &applied {
                    println!("updated {}", stream_text(p, ";"));
                    if p.over_ceiling() {
                        println!(
                            "  warning: its contents read back exceed the new ceiling (a publisher raced the change); nothing was deleted"
                        );
                    }
                }
                println!("{}", account_text(&account));
            }
        }
        StreamCommand::Usage => {
            progress(json, "reading the account");
            let account = admin.storage_account().await?;
            if json {
                println!("{}", account_json(&account));
            } else {
                println!("{}", account_text(&account));
            }
        }
        StreamCommand::Remove { team, force } => {
            let (team, bus) = resolve_team(&config, &team).await?;
            match bus {
                Some(bus) => refuse_while_in_use(&bus, team).await?,
                None if force => {}
                None => {
                    return Err(BusError::invalid(
                        "without a database crewbus cannot check that no conversation uses these streams; pass --force to delete anyway",
                    ));
                }
            }
            progress(json, "deleting the team's streams");
            admin.deprovision(team).await?;
            if json {
                println!("{}", json!({"team": team, "removed": true}));
            } else {
                println!("removed the streams of team {team}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks every kind first (refusing what `check` refuses), then applies them in order; when a
/// later one fails, restores those already applied and returns the failure.
async fn update_all(
    admin: &dyn StreamAdmin,
    team: Uuid,
    kinds: &[StreamKind],
    json: bool,
) -> BusResult<Vec<Provisioned>> {
    let mut changes = Vec::new();
    for kind in kinds {
        progress(json, &format!("checking the {} stream", kind.as_str()));
        changes.push(admin.check_update(team, *kind).await?);
    }
    let mut applied: Vec<(QuotaChange, Provisioned)> = Vec::new();
    for change in changes {
        progress(json, &format!("updating {}", change.name));
        match admin.apply_update(team, change.kind, &change).await {
            Ok(p) => applied.push((change, p)),
            Err(error) => {
                for (done, _) in applied.iter().rev() {
                    progress(json, &format!("restoring {}", done.name));
                    let back = QuotaChange {
                        current: done.wanted,
                        wanted: done.current,
                        ..done.clone()
                    };
                    if let Err(e) = admin.apply_update(team, done.kind, &back).await {
                        tracing::error!(stream = %done.name, code = e.code(), error = ?e, "could not restore the earlier limits");
                    }
                }
                return Err(error);
            }
        }
    }
    Ok(applied.into_iter().map(|(_, p)| p).collect())
}

/// Refuses while the team records JetStream as its body backend or inbox, or any of its
/// conversations was created on JetStream.
async fn refuse_while_in_use(bus: &Bus, team: Uuid) -> BusResult<()> {
    let t = bus.ports().ledger.team(team).await?;
    if t.body_backend == "jetstream" || t.inbox == "jetstream" {
        return Err(BusError::conflict(format!(
            "team {} still uses jetstream (bodies: {}, inbox: {}); move it to another backend first",
            t.name, t.body_backend, t.inbox
        )));
    }
    let in_use = bus
        .ports()
        .ledger
        .conversations(team)
        .await?
        .iter()
        .filter(|c| c.backend == "jetstream")
        .count();
    if in_use > 0 {
        return Err(BusError::conflict(format!(
            "{in_use} conversation(s) of team {} still keep their bodies on jetstream",
            t.name
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::Quotas;
    use crewbus_ports::MockStreamAdmin;
    use mockall::Sequence;

    fn change(kind: StreamKind, current: u64, wanted: u64) -> QuotaChange {
        QuotaChange {
            name: format!("S_{}", kind.as_str()),
            kind,
            current: Quotas {
                max_messages: 10,
                max_bytes: current,
            },
            wanted: Quotas {
                max_messages: 10,
                max_bytes: wanted,
            },
            messages: 0,
            bytes: 0,
            replicas: 1,
        }
    }

    fn provisioned(c: &QuotaChange) -> Provisioned {
        Provisioned {
            name: c.name.clone(),
            kind: c.kind,
            created: false,
            limits: c.wanted,
            messages: 0,
            bytes: 0,
        }
    }

    #[tokio::test]
    async fn update_restores_applied_changes_when_a_later_one_fails() {
        let team = Uuid::new_v4();
        let mut admin = MockStreamAdmin::new();
        admin
            .expect_check_update()
            .returning(|_, kind| Ok(change(kind, 4 << 20, 8 << 20)));
        let mut seq = Sequence::new();
        admin
            .expect_apply_update()
            .withf(|_, kind, c| *kind == StreamKind::Bodies && c.wanted.max_bytes == 8 << 20)
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, c| Ok(provisioned(c)));
        admin
            .expect_apply_update()
            .withf(|_, kind, _| *kind == StreamKind::Inbox)
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, _| Err(BusError::timeout("broker")));
        // the rollback: the bodies stream back to its earlier limits
        admin
            .expect_apply_update()
            .withf(|_, kind, c| {
                *kind == StreamKind::Bodies
                    && c.wanted.max_bytes == 4 << 20
                    && c.current.max_bytes == 8 << 20
            })
            .times(1)
            .in_sequence(&mut seq)
            .returning(|_, _, c| Ok(provisioned(c)));
        let err = update_all(&admin, team, &[StreamKind::Bodies, StreamKind::Inbox], true)
            .await
            .unwrap_err();
        assert!(matches!(err, BusError::Timeout { .. }));
    }

    #[tokio::test]
    async fn update_refuses_before_applying_anything_when_a_check_refuses() {
        let mut admin = MockStreamAdmin::new();
        admin.expect_check_update().returning(|_, kind| match kind {
            StreamKind::Bodies => Ok(change(kind, 4 << 20, 8 << 20)),
            StreamKind::Inbox => Err(BusError::conflict("holds more than the new ceiling")),
        });
        admin.expect_apply_update().times(0);
        let err = update_all(
            &admin,
            Uuid::new_v4(),
            &[StreamKind::Bodies, StreamKind::Inbox],
            true,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, BusError::Conflict { .. }));
    }
}
