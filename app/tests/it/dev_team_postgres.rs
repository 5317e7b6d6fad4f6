//! `crewbus serve`'s dev team on a Postgres ledger (`DATABASE_URL`; a fresh database per test):
//! no dev agents unless `--dev-team` is given; then created once, and on later starts reused,
//! never re-created — with their tokens when dev-tokens.json holds ones that work, else with
//! the token reported as unknown.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::serve::sigterm_and_wait;
use crewbus_conformance::child::SpawnTied;
use crewbus_conformance::postgres::database_url_options;
use serde_json::Value;

/// `crewbus --json serve ARGS` on `db_url` with state in `dir`: the process and its stdout
/// lines up to and including `{listening, mcp_url}`.
fn serve(db_url: &str, dir: &Path, args: &[&str]) -> (Child, Vec<Value>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crewbus"))
        .args(["--json", "serve"])
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("CREWBUS_CONFIG")
        .env("CREWBUS_DATABASE__URL", db_url)
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn_tied()
        .unwrap();
    let out = read_until_listening(&mut child);
    (child, out)
}

/// `child`'s stdout lines as JSON, up to and including `{listening, …}`.
fn read_until_listening(child: &mut Child) -> Vec<Value> {
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut out = Vec::new();
    for line in lines {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        let done = v.get("listening").is_some();
        out.push(v);
        if done {
            return out;
        }
    }
    panic!("serve ended its output before its address: {out:?}");
}

fn stop(mut child: Child) {
    sigterm_and_wait(&mut child, Duration::from_secs(15));
}

async fn me(url: &str, token: &str) -> Value {
    let r = reqwest::Client::new()
        .get(format!("{url}/v1/me"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn on_postgres_dev_agents_are_set_up_only_when_asked_and_reused_never_re_created() {
    let (db, url) = crewbus_benches::kit::postgres::database_with_url(
        "dev_team_postgres",
        database_url_options(),
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("dev-tokens.json");

    // No --dev-team: production behaviour, no team, no agents, no file.
    let (child, out) = serve(&url, state.path(), &[]);
    assert_eq!(out.len(), 1, "{out:?}");
    stop(child);
    assert!(!file.exists());
    let teams: i64 = sqlx::query_scalar("SELECT count(*) FROM teams")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(teams, 0);

    // --dev-team: alice and bob created, their tokens kept.
    let (child, first) = serve(&url, state.path(), &["--dev-team", "pg"]);
    assert_eq!(first.len(), 3, "{first:?}");
    let base = first[2]["listening"].as_str().unwrap().to_owned();
    assert_eq!(
        me(&base, first[0]["token"].as_str().unwrap()).await["name"],
        "alice"
    );
    stop(child);
    assert!(file.exists());

    // Again: the same agents (same ids), with the kept tokens.
    let (child, again) = serve(&url, state.path(), &["--dev-team", "pg"]);
    for (a, b) in first[..2].iter().zip(&again[..2]) {
        assert_eq!(a["agent"], b["agent"], "reused, not re-created");
        assert_eq!(a["token"], b["token"]);
    }
    let base = again[2]["listening"].as_str().unwrap().to_owned();
    assert_eq!(
        me(&base, again[1]["token"].as_str().unwrap()).await["name"],
        "bob"
    );
    stop(child);

    // Without the file, the agents are still reused; their tokens cannot be recovered.
    std::fs::remove_file(&file).unwrap();
    let (child, lost) = serve(&url, state.path(), &["--dev-team", "pg"]);
    for (a, b) in first[..2].iter().zip(&lost[..2]) {
        assert_eq!(a["agent"], b["agent"]);
        assert!(b["token"].is_null(), "{b}");
    }
    stop(child);
    let agents: i64 = sqlx::query_scalar("SELECT count(*) FROM agents")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(agents, 2);
    db.passed().await;
}
