//! The embedded store through the `crewbus` binary: `serve` with no configuration keeps a
//! conversation across a restart (the data directory from `XDG_DATA_HOME`, as a user's would
//! be); a second `serve` on the same data directory is refused at once; `crewbus agent revoke`
//! beside a running server refuses the agent's next call; operator commands refuse a store that
//! does not exist; `crewbus backup` copies the store online and the copy reads back.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::serve::{ServeProcess, call};
use crewbus_conformance::child::SpawnTied;
use serde_json::{Value, json};

/// The binary with no configuration from the test's environment, `XDG_DATA_HOME` and `HOME`
/// pointed at `home` (so the default data directory is `home/data/crewbus`).
fn crewbus(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewbus"));
    c.env_remove("CREWBUS_DATABASE__URL")
        .env_remove("CREWBUS_CONFIG")
        .env_remove("CREWBUS_STORAGE__KIND")
        .env_remove("CREWBUS_STORAGE__DATA_DIR")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join("data"))
        .env("CREWBUS_LOG__LEVEL", "warn")
        .current_dir(home);
    c
}

/// `crewbus --json serve` on a free loopback port with the data directory of `home`, its dev
/// agents' tokens, address and console line read; every line before its address is a fresh dev
/// agent with a token.
fn start_serve(home: &Path) -> ServeProcess {
    let serve = ServeProcess::start(
        crewbus(home).args(["--json", "serve", "--listen", "127.0.0.1:0"]),
        true,
    );
    for v in &serve.before {
        v["name"].as_str().unwrap();
        v["token"].as_str().expect("a fresh dev agent has a token");
    }
    serve
}

/// SIGTERM, then waits for the exit (deadline 30 s).
fn stop(serve: ServeProcess) {
    serve.stop(Duration::from_secs(30));
}

#[tokio::test]
async fn serve_with_no_configuration_keeps_a_conversation_across_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let first = start_serve(home.path());
    let (alice, bob) = (first.tokens["alice"].clone(), first.tokens["bob"].clone());
    let (status, conv) = call(
        &first.url,
        &alice,
        "POST",
        "/v1/conversations",
        json!({"title": "kept", "members": ["bob"]}),
    )
    .await;
    assert_eq!(status, 201, "{conv}");
    let conv_id = conv["id"].as_str().unwrap().to_owned();
    let (status, sent) = call(
        &first.url,
        &alice,
        "POST",
        &format!("/v1/conversations/{conv_id}/messages"),
        json!({"request_id": "r1", "body": "still here after a restart"}),
    )
    .await;
    assert_eq!(status, 201, "{sent}");
    stop(first);
    assert!(
        home.path().join("data/crewbus/crewbus.db").exists(),
        "the default data directory is $XDG_DATA_HOME/crewbus"
    );

    let second = start_serve(home.path());
    assert_eq!(
        second.tokens["bob"], bob,
        "the dev agents keep their tokens"
    );
    let (status, history) = call(
        &second.url,
        &bob,
        "GET",
        &format!("/v1/conversations/{conv_id}/messages?after_seq=0&limit=10"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{history}");
    assert_eq!(messages[0]["body"], "still here after a restart");
    let (status, page) = call(
        &second.url,
        &bob,
        "POST",
        "/v1/inbox/fetch",
        json!({"limit": 10, "wait_ms": 5000}),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let deliveries = page["deliveries"].as_array().unwrap();
    assert_eq!(
        deliveries.len(),
        1,
        "bob's delivery survived the restart: {page}"
    );
    stop(second);
}

#[tokio::test]
async fn a_second_serve_on_the_same_data_directory_is_refused_at_once() {
    let home = tempfile::tempdir().unwrap();
    let first = start_serve(home.path());
    let started = Instant::now();
    let out = crewbus(home.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not after a wait"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("serve.lock"),
        "the message names the lock: {stderr}"
    );
    // The first server is untouched.
    let (status, _) = call(
        &first.url,
        &first.tokens["alice"],
        "GET",
        "/v1/me",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    stop(first);
}

#[tokio::test]
async fn agent_revoke_beside_a_running_server_refuses_the_agents_next_call() {
    let home = tempfile::tempdir().unwrap();
    let serve = start_serve(home.path());
    let bob = serve.tokens["bob"].clone();
    let (status, _) = call(&serve.url, &bob, "GET", "/v1/me", Value::Null).await;
    assert_eq!(status, 200);
    let out = crewbus(home.path())
        .args(["agent", "revoke", "--team", "local", "bob"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The server hears of a revocation made by another process through no wake-up: its token
    // cache (`bus.token_cache_ms`, at most 1 s) may still answer for bob until the entry
    // expires. Polled with a deadline well above that bound.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (status, body) = call(&serve.url, &bob, "GET", "/v1/me", Value::Null).await;
        if status == 401 {
            break;
        }
        assert_eq!(status, 200, "{body}");
        assert!(
            std::time::Instant::now() < deadline,
            "bob still authenticates 5 s after his revocation"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A team added beside the server is there for the server too.
    let out = crewbus(home.path())
        .args(["--json", "team", "add", "research"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop(serve);
}

#[test]
fn operator_commands_refuse_a_store_that_does_not_exist() {
    let home = tempfile::tempdir().unwrap();
    let out = crewbus(home.path())
        .args(["--json", "team", "list"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "not_found", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("crewbus serve"),
        "the fix is named: {message}"
    );
    assert!(
        !home.path().join("data/crewbus").exists(),
        "only serve creates the store"
    );
}

#[tokio::test]
async fn backup_copies_the_store_online_and_the_copy_reads_back() {
    let home = tempfile::tempdir().unwrap();
    let serve = start_serve(home.path());
    let alice = serve.tokens["alice"].clone();
    let (_, conv) = call(
        &serve.url,
        &alice,
        "POST",
        "/v1/conversations",
        json!({"title": "backed up", "members": ["bob"]}),
    )
    .await;
    let conv_id = conv["id"].as_str().unwrap().to_owned();
    for i in 0..3 {
        let (status, _) = call(
            &serve.url,
            &alice,
            "POST",
            &format!("/v1/conversations/{conv_id}/messages"),
            json!({"request_id": format!("r{i}"), "body": format!("message {i}")}),
        )
        .await;
        assert_eq!(status, 201);
    }
    let copy = home.path().join("copy.db");
    let out = crewbus(home.path())
        .args(["--json", "backup", "--to"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A second backup to the same file is refused: nothing is overwritten.
    let again = crewbus(home.path())
        .args(["backup", "--to"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(!again.status.success());
    stop(serve);

    // Restore: a new data directory holding the copy as its database, and the master key.
    let restored = tempfile::tempdir().unwrap();
    let dir = restored.path().join("data/crewbus");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&copy, dir.join("crewbus.db")).unwrap();
    // The documented restore: the copy, and master.key (with keys/, none here) beside it.
    let old = home.path().join("data/crewbus");
    std::fs::copy(old.join("dev-tokens.json"), dir.join("dev-tokens.json")).unwrap();
    std::fs::copy(old.join("master.key"), dir.join("master.key")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the copy is readable by its owner only");
    }
    let serve = start_serve(restored.path());
    let (status, history) = call(
        &serve.url,
        &serve.tokens["bob"],
        "GET",
        &format!("/v1/conversations/{conv_id}/messages?after_seq=0&limit=10"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let bodies: Vec<&str> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["message 0", "message 1", "message 2"]);
    stop(serve);
}

#[tokio::test]
async fn operators_are_added_listed_and_revoked_beside_a_running_server() {
    let home = tempfile::tempdir().unwrap();
    let serve = start_serve(home.path());
    // Serve printed a one-time sign-in URL for the dev operator, right after its address.
    let console = &serve.console;
    let code = console["sign_in_code"].as_str().unwrap();
    assert_eq!(code.len(), 19, "{console}");
    assert_eq!(
        console["console_url"].as_str().unwrap(),
        format!("{}/console/sign-in?code={code}", serve.url)
    );
    assert_eq!(console["operator"], "dev");
    let run = |args: &[&str]| {
        let out = crewbus(home.path()).args(args).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.success(), v)
    };
    let (ok, ops) = run(&["--json", "operator", "add", "ops"]);
    assert!(ok, "{ops}");
    assert!(ops["token"].as_str().unwrap().starts_with("cbo_"));
    assert_eq!(ops["teams"], Value::Null, "every team");
    let (ok, night) = run(&["--json", "operator", "add", "night", "--team", "local"]);
    assert!(ok, "{night}");
    assert_eq!(night["teams"].as_array().unwrap().len(), 1);
    // An unknown team, a bad name and a taken name are refused, naming what is wrong.
    let (ok, refused) = run(&["--json", "operator", "add", "x", "--team", "nope"]);
    assert!(!ok);
    assert_eq!(refused["error"]["code"], "not_found", "{refused}");
    let (ok, refused) = run(&["--json", "operator", "add", "two words"]);
    assert!(!ok);
    assert_eq!(refused["error"]["code"], "invalid", "{refused}");
    let (ok, refused) = run(&["--json", "operator", "add", "ops"]);
    assert!(!ok);
    assert_eq!(refused["error"]["code"], "conflict", "{refused}");
    // The list shows the dev operator serve made, ops and night; never a token.
    let (ok, list) = run(&["--json", "operator", "list"]);
    assert!(ok);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dev", "night", "ops"], "{list}");
    assert!(!list.to_string().contains("cbo_"));
    let (ok, revoked) = run(&["--json", "operator", "revoke", "night"]);
    assert!(ok, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    stop(serve);
}

#[test]
fn a_dev_operator_token_file_that_cannot_be_written_leaves_no_operator_behind() {
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("no-such-dir").join("op.token");
    let out = crewbus(home.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--dev-operator-token-file",
        ])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot write it"), "{stderr}");
    // No operator nobody holds the token of: the next start with a writable file works.
    let file = home.path().join("op.token");
    let mut child = crewbus(home.path())
        .args([
            "--json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--dev-operator-token-file",
        ])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_tied()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["listening"].is_string() {
            break v;
        }
    };
    assert!(listening["listening"].is_string());
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(token.trim().starts_with("cbo_"), "the file holds the token");
    let _ = child.kill();
    let _ = child.wait();
}

/// `n` messages from alice to bob in a new conversation, through `serve`.
async fn send_some(serve: &ServeProcess, n: usize) {
    let alice = serve.tokens["alice"].clone();
    let (status, conv) = call(
        &serve.url,
        &alice,
        "POST",
        "/v1/conversations",
        json!({"title": "filler", "members": ["bob"]}),
    )
    .await;
    assert_eq!(status, 201, "{conv}");
    let conv_id = conv["id"].as_str().unwrap().to_owned();
    for i in 0..n {
        let (status, sent) = call(
            &serve.url,
            &alice,
            "POST",
            &format!("/v1/conversations/{conv_id}/messages"),
            json!({"request_id": format!("r{i}"), "body": "x".repeat(2000)}),
        )
        .await;
        assert_eq!(status, 201, "{sent}");
    }
}

/// The length of the store's write-ahead log (0 when there is none).
fn wal_len(store: &Path) -> u64 {
    std::fs::metadata(store.with_extension("db-wal")).map_or(0, |m| m.len())
}

#[tokio::test]
async fn a_damaged_store_is_refused_before_anything_listens_and_a_clean_stop_empties_the_log() {
    for clean in [true, false] {
        let home = tempfile::tempdir().unwrap();
        let store = home.path().join("data/crewbus/crewbus.db");
        let serve = start_serve(home.path());
        send_some(&serve, 100).await;
        assert!(
            wal_len(&store) > 0,
            "the writes are in the log while it runs"
        );
        stop(serve);
        assert_eq!(
            wal_len(&store),
            0,
            "a clean stop leaves the log checkpointed into the file"
        );
        if !clean {
            // The issue's case: a stop that leaves the log holding frames (here a kill), then
            // the file damaged.
            let serve = start_serve(home.path());
            send_some(&serve, 5).await;
            drop(serve);
            assert!(wal_len(&store) > 0, "killed: the log holds frames");
        }
        let len = std::fs::metadata(&store).unwrap().len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&store)
            .unwrap();
        file.set_len(len / 2).unwrap();
        drop(file);

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let started = Instant::now();
        let out = crewbus(home.path())
            .args(["--json", "serve", "--listen", &format!("127.0.0.1:{port}")])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "clean {clean}: refused as a configuration error: {stderr}"
        );
        assert!(
            stderr.contains(&store.display().to_string()),
            "the file is named: {stderr}"
        );
        assert!(
            !stdout.contains("listening") && !stdout.contains("cbt_"),
            "nothing served, no token printed: {stdout}"
        );
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "nothing listens on {port}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refused at once"
        );
    }
}

/// Signs in to `url`'s console with `code` as a browser does (the form's pre-session cookie and
/// CSRF field, the console's own `Origin`): the POST's status (303 signed in, 401 refused).
async fn console_sign_in(url: &str, code: &str) -> u16 {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let form = http
        .get(format!("{url}/console/sign-in"))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);
    let cookie = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|v| v.starts_with("crewbus_sign_in="))
        .expect("the pre-session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = form.text().await.unwrap();
    let csrf = regex::Regex::new(r#"name="_csrf"[^>]*?value="([^"]*)""#)
        .unwrap()
        .captures(&page)
        .expect("the form's CSRF field")[1]
        .to_owned();
    http.post(format!("{url}/console/sign-in"))
        .header("cookie", cookie)
        .header("origin", url)
        .form(&[("_csrf", csrf.as_str()), ("code", code)])
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_sign_in_code_of_an_earlier_start_stops_working_at_the_next_start() {
    let home = tempfile::tempdir().unwrap();
    let first = start_serve(home.path());
    let earlier = first.console["sign_in_code"].as_str().unwrap().to_owned();
    stop(first);
    let second = start_serve(home.path());
    let newest = second.console["sign_in_code"].as_str().unwrap().to_owned();
    assert_ne!(earlier, newest);
    assert_eq!(
        console_sign_in(&second.url, &earlier).await,
        401,
        "the code the first start printed no longer signs in"
    );
    assert_eq!(console_sign_in(&second.url, &newest).await, 303);
    stop(second);
}
