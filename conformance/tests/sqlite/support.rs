//! What the SQLite tests share: a migrated store file per test, a small world, instants.

use chrono::{DateTime, TimeZone, Utc};
use crewbus_conformance::sqlite::TempStore;
use crewbus_domain::{Agent, Conversation, SendRequest, Team, TenantId, TokenHash};
use crewbus_ports::Ledger;
use crewbus_sqlite::{SqliteConfig, SqliteLedger, SqlitePools};
use uuid::Uuid;

/// One test's store: its pools over a file in a temp directory of its own (deleted after the
/// test, kept and printed when it panics). Field order: the pools drop before the directory.
pub(crate) struct Store {
    pub(crate) pools: SqlitePools,
    pub(crate) temp: TempStore,
}

/// The configuration the server uses: create the file when missing.
pub(crate) fn server_config() -> SqliteConfig {
    SqliteConfig {
        create_if_missing: true,
        ..SqliteConfig::default()
    }
}

/// Opens (creating) and migrates the store at `temp`'s path with `config`. Panics — failing the
/// test — when it cannot.
pub(crate) async fn open_migrated(temp: &TempStore, config: &SqliteConfig) -> SqlitePools {
    let pools = crewbus_sqlite::open(temp.path(), config)
        .await
        .unwrap_or_else(|e| panic!("open {}: {e:?}", temp.path().display()));
    crewbus_sqlite::migrate(&pools)
        .await
        .unwrap_or_else(|e| panic!("migrate {}: {e:?}", temp.path().display()));
    pools
}

/// A fresh migrated store file for test `label`.
pub(crate) async fn store(label: &str) -> Store {
    let temp = TempStore::new(label);
    let pools = open_migrated(&temp, &server_config()).await;
    Store { pools, temp }
}

/// Instant `secs` after 2030-01-01.
pub(crate) fn t(secs: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(secs)
}

/// A team on `backend` with `n` agents, all members of one conversation.
pub(crate) struct World {
    pub(crate) ledger: SqliteLedger,
    pub(crate) team: Team,
    pub(crate) agents: Vec<Agent>,
    pub(crate) conv: Conversation,
}

pub(crate) async fn world(pools: &SqlitePools, backend: &str, n: usize) -> World {
    let ledger = SqliteLedger::new(pools.clone(), TenantId::default());
    let team = ledger
        .create_team(&format!("team-{}", Uuid::new_v4()), backend, "sqlite", t(0))
        .await
        .expect("team");
    let mut agents = Vec::new();
    for i in 0..n {
        let token = TokenHash::of(&Uuid::new_v4().to_string());
        agents.push(
            ledger
                .create_agent(team.id, &format!("agent-{i}"), token, t(0))
                .await
                .expect("agent"),
        );
    }
    let others: Vec<Uuid> = agents[1..].iter().map(|a| a.id).collect();
    let conv = ledger
        .create_conversation(team.id, agents[0].id, "talk", &others, t(0))
        .await
        .expect("conversation");
    World {
        ledger,
        team,
        agents,
        conv,
    }
}

/// A send of `body` by agent `sender` into `conversation` under `request_id`.
pub(crate) fn request(
    w: &World,
    conversation: Uuid,
    sender: usize,
    request_id: &str,
    body: &str,
) -> SendRequest {
    SendRequest {
        team: w.team.id,
        conversation,
        sender: w.agents[sender].id,
        request_id: request_id.to_owned(),
        body: body.to_owned(),
        run: None,
    }
}
