//! `make-upgrade-fixture`: writes one store's upgrade fixture — the data of a store made by this
//! build's adapters, with messages in every state (see `scenario.rs`), as SQL text, and a
//! manifest saying what it holds and what an upgraded store must do with it. Run by
//! `scripts/make-upgrade-fixtures` (which builds it at a given commit); read by the upgrade test
//! `app/tests/upgrade_fixtures.rs`.
//!
//! ```text
//! make-upgrade-fixture --store postgres|sqlite --out DIR --commit SHA
//! ```
//!
//! Writes `DIR/<store>-<version>.sql` and `DIR/<store>-<version>.json`, where `<version>` is the
//! last migration of this build (the schema the data is in). Postgres needs `DATABASE_URL` (two
//! fresh databases are made there and dropped; kept, and named on stderr, on a failure); SQLite
//! works in temp directories. The same build makes the same bytes every time (fixed instants on
//! 2026-12-02, fixed ids, fixed tokens; only `--commit` changes the manifest). Exit status 2 for
//! bad arguments; a failure of the store panics (exit 101) with its cause.
//!
//! The SQL holds only data (no schema, no `_sqlx_migrations`): load it into an empty store with
//! exactly the migrations up to `<version>` applied, in one transaction (`BEGIN; … COMMIT;` is in
//! the file).
//!
//! # The manifest
//!
//! JSON with sorted keys: `store`, `schema_version` (i64), `commit`, `sql` (the file name),
//! `instant` (RFC 3339), `team` `{id, name, body_backend, inbox}`, `agents` `[{name, id, token}]`,
//! `conversations` `[{id, title, backend}]`, `messages` `[{name, id, conversation, seq, sender,
//! body, publication}]` and `deliveries` — one per (message, recipient): `{message, recipient
//! (a name), state, outcome, delivery_id?, confirm_old?, delivered_at?, acknowledged_at?}` with
//! `state` and `outcome` as `scenario::Pair` documents them.

mod dump;
mod ids;
mod postgres;
mod scenario;
mod sqlite;

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::ids::Renamer;
use crate::scenario::{AGENTS, Made};

/// Which store a fixture is of.
#[derive(Debug, Clone, Copy)]
enum Store {
    Postgres,
    Sqlite,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Store::Postgres => "postgres",
            Store::Sqlite => "sqlite",
        }
    }
}

#[derive(Debug)]
struct Args {
    store: Store,
    out: PathBuf,
    commit: String,
}

const USAGE: &str = "usage: make-upgrade-fixture --store postgres|sqlite --out DIR --commit SHA";

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut store, mut out, mut commit) = (None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--store" => {
                store = Some(match value.as_str() {
                    "postgres" => Store::Postgres,
                    "sqlite" => Store::Sqlite,
                    other => return Err(format!("unknown store `{other}`")),
                })
            }
            "--out" => out = Some(PathBuf::from(value)),
            "--commit" => commit = Some(value),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Args {
        store: store.ok_or("--store is required")?,
        out: out.ok_or("--out is required")?,
        commit: commit.ok_or("--commit is required")?,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let store = args.store.name();
    let version = match args.store {
        Store::Postgres => postgres::version(),
        Store::Sqlite => sqlite::version(),
    };
    let sql_name = format!("{store}-{version}.sql");
    let header = vec![
        format!("crewbus upgrade fixture: the data of a {store} store at schema version {version}"),
        format!("(its last migration), made by commit {}.", args.commit),
        String::new(),
        "Made by scripts/make-upgrade-fixtures (conformance/src/bin/make_upgrade_fixture): remake"
            .to_owned(),
        "it, never edit it. What it holds and what an upgraded store must do with it:".to_owned(),
        format!("{store}-{version}.json. Load it into an empty store with exactly the migrations"),
        format!("up to {version} applied (app/tests/upgrade_fixtures.rs does)."),
    ];
    let (made, renamer, text) = match args.store {
        Store::Postgres => postgres::make(&header).await,
        Store::Sqlite => sqlite::make(&header).await,
    };
    let manifest = manifest(&made, &renamer, store, version, &args.commit, &sql_name);
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("cannot create {}: {e}", args.out.display());
        return ExitCode::FAILURE;
    }
    let json = serde_json::to_string_pretty(&manifest).expect("JSON") + "\n";
    for (name, contents) in [
        (sql_name.clone(), text),
        (format!("{store}-{version}.json"), json),
    ] {
        let path = args.out.join(&name);
        if let Err(e) = std::fs::write(&path, contents) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

/// The ids the ports returned, named in the order made: the team, the agents, the
/// conversations, the messages, the delivery ids.
pub fn name_made(made: &Made) -> Renamer {
    let mut r = Renamer::default();
    r.name(made.team.id);
    made.agents.iter().for_each(|a| r.name(a.id));
    made.conversations.iter().for_each(|c| r.name(c.id));
    made.messages.iter().for_each(|m| r.name(m.id));
    made.deliveries.iter().for_each(|d| r.name(d.0));
    r
}

/// Panics, showing the first line that differs, unless the fixture read back from a store it
/// was loaded into is the fixture.
pub fn same_text(written: &str, read_back: &str) {
    if written != read_back {
        let (line, (w, r)) = written
            .lines()
            .zip(read_back.lines())
            .enumerate()
            .find(|(_, (w, r))| w != r)
            .unwrap_or((0, ("(lengths differ)", "")));
        panic!(
            "the fixture does not read back as written; line {}:\n  written:   {w}\n  read back: {r}",
            line + 1
        );
    }
}

/// The manifest (see the module docs).
fn manifest(made: &Made, r: &Renamer, store: &str, version: i64, commit: &str, sql: &str) -> Value {
    let id = |u: uuid::Uuid| r.get(u).to_string();
    json!({
        "store": store,
        "schema_version": version,
        "commit": commit,
        "sql": sql,
        "instant": scenario::instant().to_rfc3339(),
        "team": {
            "id": id(made.team.id),
            "name": made.team.name,
            "body_backend": made.team.body_backend,
            "inbox": made.team.inbox,
        },
        "agents": made.agents.iter().map(|a| json!({
            "name": a.name,
            "id": id(a.id),
            "token": scenario::token(&a.name),
        })).collect::<Vec<_>>(),
        "conversations": made.conversations.iter().map(|c| json!({
            "id": id(c.id),
            "title": c.title,
            "backend": c.backend,
        })).collect::<Vec<_>>(),
        "messages": made.messages.iter().map(|m| json!({
            "name": m.name,
            "id": id(m.id),
            "conversation": id(m.conversation),
            "seq": m.seq,
            "sender": AGENTS[m.sender],
            "body": m.body,
            "publication": m.publication,
        })).collect::<Vec<_>>(),
        "deliveries": made.pairs.iter().map(|p| {
            let mut d = json!({
                "message": id(made.messages[p.message].id),
                "recipient": AGENTS[p.recipient],
                "state": p.state,
                "outcome": p.outcome,
            });
            if let Some(delivery) = p.delivery {
                d["delivery_id"] = json!(id(delivery.0));
            }
            if let Some(how) = p.confirm_old {
                d["confirm_old"] = json!(how);
            }
            if let Some(at) = p.delivered_at {
                d["delivered_at"] = json!(at.to_rfc3339());
            }
            if let Some(at) = p.acknowledged_at {
                d["acknowledged_at"] = json!(at.to_rfc3339());
            }
            d
        }).collect::<Vec<_>>(),
    })
}
