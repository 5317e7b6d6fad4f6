//! The `crewbus` binary: help that teaches, configuration errors, and `serve` on the embedded
//! default answering /health, stopping gracefully on SIGTERM within the shutdown grace even when
//! a client holds an incomplete request, refusing an oversize declared body at once, and
//! abandoning a stalled body; the first five minutes: the dev team and its agents, their tokens
//! kept in a private dev-tokens.json and reused by the next start, the host configuration.

use crate::common::serve::{sigterm, sigterm_and_wait};
use crewbus_conformance::child::SpawnTied;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn crewbus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewbus"));
    // Never the user's own embedded store: a data directory no test creates, unless a test
    // passes its own (`--data-dir`, `XDG_DATA_HOME`).
    c.env_remove("CREWBUS_DATABASE__URL")
        .env_remove("CREWBUS_CONFIG")
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join("crewbus-cli-tests-no-store"),
        )
        .current_dir(std::env::temp_dir());
    c
}

#[test]
fn help_teaches_with_examples() {
    let out = crewbus().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "serve",
        "mcp",
        "migrate",
        "team",
        "agent",
        "stream",
        "health",
        "push",
        "Examples:",
        "CREWBUS_",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}");
    }
    let out = crewbus().args(["stream", "--help"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in ["provision", "check", "update", "usage", "remove"] {
        assert!(text.contains(needle), "stream --help lacks {needle}");
    }
}

#[test]
fn a_bad_environment_override_is_refused_without_echoing_it() {
    let out = crewbus()
        .env("CREWBUS_BUS__MAX_BODY_BYTES", "5000000")
        .arg("health")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("max_body_bytes"), "{err}");
    let out = crewbus()
        .env("CREWBUS_DATABASE__URL", "mysql://u:hunter2@h/db")
        .arg("migrate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
}

/// A bad configuration file is named in its error, exit 2, whether it was given (`--config`) or
/// picked up from the working directory; a syntax error never quotes the file's line (it may
/// hold a secret).
#[test]
fn a_bad_configuration_file_is_named_in_its_error() {
    let dir = tempfile::tempdir().unwrap();
    for text in [
        "lisen = \"127.0.0.1:1\"\n",
        "[database\nurl = \"postgres://u:hunter2@h/db\"\n",
    ] {
        let file = dir.path().join("crewbus.toml");
        std::fs::write(&file, text).unwrap();
        let given = crewbus()
            .arg("--config")
            .arg(&file)
            .arg("health")
            .output()
            .unwrap();
        let found = crewbus()
            .current_dir(dir.path())
            .arg("health")
            .output()
            .unwrap();
        for out in [given, found] {
            assert_eq!(out.status.code(), Some(2));
            let err = String::from_utf8(out.stderr).unwrap();
            assert!(err.contains("crewbus.toml"), "the file is not named: {err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}

/// Every push destination error found at start-up is a configuration error: exit 2, naming
/// its key, never echoing a secret.
#[test]
fn push_configuration_errors_exit_2_naming_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let dest = |extra: &str| {
        format!(
            "[[push.destinations]]\nname = \"ops\"\nurl = \"https://hooks.example.com/x\"\n{extra}"
        )
    };
    let cases = [
        (
            format!("{}{}", dest(""), dest("")),
            "push.destinations[1].name",
        ),
        (
            "[[push.destinations]]\nname = \" \"\nurl = \"https://h.example/x\"\n".to_owned(),
            "push.destinations[0]",
        ),
        (
            "[[push.destinations]]\nname = \"ops\"\nurl = \"not a url\"\n".to_owned(),
            "push.destinations[0]",
        ),
        (
            dest(
                "authentication = { scheme = \"Bearer\", credentials = { env = \"CB_TEST_UNSET_VAR\" } }\n",
            ),
            "push.destinations[0].authentication.credentials",
        ),
        (
            dest("signing_keys = [{ env = \"CB_TEST_BAD_WHSEC\" }]\n"),
            "push.destinations[0].signing_keys",
        ),
        (
            "[push]\nkey_ring = { master_key_env = \"CB_TEST_BAD_MASTER\", dir = \"keys\" }\n"
                .to_owned(),
            "push.key_ring.master_key_env",
        ),
    ];
    for (text, key) in cases {
        let file = dir.path().join("crewbus.toml");
        std::fs::write(&file, &text).unwrap();
        let out = crewbus()
            .env("CB_TEST_BAD_WHSEC", "whsec_hunter2-not-base64!")
            .env("CB_TEST_BAD_MASTER", "hunter3")
            .arg("--config")
            .arg(&file)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}: {err}");
        assert!(err.contains(key), "the error does not name {key}: {err}");
        for secret in ["hunter2", "hunter3"] {
            assert!(!err.contains(secret), "{err}");
        }
    }
}

#[test]
fn operator_commands_explain_what_they_need() {
    // On the memory store, the command says it needs a store that outlives a process.
    let out = crewbus()
        .args(["--json", "team", "list"])
        .env("CREWBUS_STORAGE__KIND", "memory")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "invalid");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("[database]")
    );
    // On the embedded store that no `serve` has created yet, it names the store and the fix.
    let home = tempfile::tempdir().unwrap();
    let out = crewbus()
        .args(["team", "list"])
        .env("XDG_DATA_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("crewbus serve") && err.contains("crewbus.db"),
        "{err}"
    );
    let out = crewbus()
        .args(["--json", "stream", "usage"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "invalid");
}

#[test]
fn serve_answers_health_and_stops_gracefully_on_sigterm() {
    let state = tempfile::tempdir().unwrap();
    let mut child = crewbus()
        .args(["--json", "serve", "--dev-team", "t", "--dev-agent", "alice"])
        .arg("--data-dir")
        .arg(state.path())
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn_tied()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let agent: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(agent["token"].as_str().unwrap().starts_with("cbt_"));
    let listening: serde_json::Value =
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let url = listening["listening"].as_str().unwrap().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"),
        "{url}"
    );

    let health = crewbus().args(["health", "--url", &url]).output().unwrap();
    assert!(health.status.success(), "{health:?}");
    assert!(String::from_utf8_lossy(&health.stdout).contains("ok"));

    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `crewbus --json serve` on a free port with `envs` set (stderr piped: JSON logs), its agent
/// token, `host:port` and its state directory (removed when dropped).
fn serve_with(envs: &[(&str, &str)]) -> (std::process::Child, String, String, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let mut cmd = crewbus();
    cmd.args(["--json", "serve", "--dev-team", "t", "--dev-agent", "alice"])
        .arg("--data-dir")
        .arg(state.path())
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .env("CREWBUS_LOG__FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn_tied().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let agent: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let token = agent["token"].as_str().unwrap().to_owned();
    let listening: serde_json::Value =
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let addr = listening["listening"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_owned();
    (child, token, addr, state)
}

/// Reads one HTTP/1.1 response (status line, headers, `Content-Length` body) from `reader`:
/// the status code and the body.
fn read_response(reader: &mut BufReader<TcpStream>) -> (u16, Vec<u8>) {
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let code: u16 = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (code, body)
}

#[test]
fn serve_stops_within_the_shutdown_grace_while_a_client_holds_an_incomplete_request() {
    let grace = Duration::from_millis(500);
    let (mut child, token, addr, _state) = serve_with(&[("CREWBUS_BUS__SHUTDOWN_GRACE_MS", "500")]);
    let mut stderr = child.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });

    // The connection is served (a complete request first, kept alive), then holds a request
    // whose body never completes.
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut reader).0, 200);
    writer
        .write_all(
            format!(
                "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"li"
            )
            .as_bytes(),
        )
        .unwrap();
    // A second connection's round trip: the server is past reading the first one's bytes.
    let health = crewbus()
        .args(["health", "--url", &format!("http://{addr}")])
        .output()
        .unwrap();
    assert!(health.status.success(), "{health:?}");

    sigterm(&child);
    let signalled = Instant::now();
    // Far below the 30 s request body timeout: only the grace can end the wait.
    let deadline = signalled + grace + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "serve still running {:?} after SIGTERM with a {grace:?} grace",
            signalled.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let logs = logs.join().unwrap();
    let abandoned = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| {
            v["level"] == "WARN"
                && v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("abandoning open HTTP connections"))
        });
    assert!(
        abandoned,
        "no JSON warning about the abandoned connection: {logs}"
    );
    drop(writer);
}

#[test]
fn an_oversize_declared_body_is_refused_at_once_and_a_stalled_body_is_abandoned() {
    let (mut child, token, addr, _state) =
        serve_with(&[("CREWBUS_BUS__REQUEST_BODY_TIMEOUT_MS", "300")]);
    child.stderr.take();

    // 413 before a single body byte is sent.
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer
        .write_all(
            format!(
                "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let (code, body) = read_response(&mut reader);
    assert_eq!(code, 413);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "too_large");

    // A body that stops arriving is abandoned after the request body timeout: 400 invalid.
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer
        .write_all(
            format!(
                "POST /v1/inbox/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"li"
            )
            .as_bytes(),
        )
        .unwrap();
    let (code, body) = read_response(&mut reader);
    assert_eq!(code, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["code"], "invalid");

    sigterm_and_wait(&mut child, Duration::from_secs(15));
}

/// Sends SIGTERM and waits (10 s at most) for a clean exit.
fn stop(mut child: std::process::Child) {
    let status = sigterm_and_wait(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

/// `GET /v1/me` with `token` on `addr` (`host:port`): the status and the answer.
fn me(addr: &str, token: &str) -> (u16, serde_json::Value) {
    get(addr, "/v1/me", token)
}

/// `GET path` with `token` on `addr` (`host:port`): the status and the answer.
fn get(addr: &str, path: &str, token: &str) -> (u16, serde_json::Value) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    writer
        .write_all(
            format!(
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let (code, body) = read_response(&mut BufReader::new(stream));
    (code, serde_json::from_slice(&body).unwrap())
}

#[test]
fn serve_on_the_memory_store_sets_up_alice_and_bob_and_reuses_their_tokens() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("state");

    // First start, human output: the agents, the tokens file, the host configuration.
    let mut child = crewbus()
        .args(["serve", "--ephemeral"])
        .arg("--data-dir")
        .arg(&dir)
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn_tied()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut text = Vec::new();
    let listening = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if line.starts_with("crewbus listening on ") {
            break line;
        }
        text.push(line);
    };
    let addr = listening
        .trim_start_matches("crewbus listening on http://")
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    // `agent NAME (ID) of team TEAM: token TOKEN`
    let mut tokens = std::collections::BTreeMap::new();
    for line in text.iter().filter(|l| l.starts_with("agent ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[3..6], ["of", "team", "local:"], "{line}");
        assert_eq!(words[6], "token");
        tokens.insert(words[1].to_owned(), words[7].to_owned());
    }
    assert_eq!(
        tokens.keys().collect::<Vec<_>>(),
        ["alice", "bob"],
        "{text:?}"
    );
    let (code, who) = me(&addr, &tokens["alice"]);
    assert_eq!(code, 200, "{who}");
    assert_eq!(who["name"], "alice");

    let file = dir.join("dev-tokens.json");
    let all = text.join("\n");
    assert!(all.contains(&file.display().to_string()), "{all}");
    // The Streamable HTTP block parses and points at this server with alice's token.
    let start = all.find("Streamable HTTP:\n").unwrap() + "Streamable HTTP:\n".len();
    let end = all.find("stdio (").unwrap();
    let http: serde_json::Value = serde_json::from_str(&all[start..end]).unwrap();
    let server = &http["mcpServers"]["crewbus"];
    assert_eq!(server["url"], format!("http://{addr}/mcp"));
    assert_eq!(
        server["headers"]["Authorization"],
        format!("Bearer {}", tokens["alice"])
    );
    // The stdio block names this binary by its absolute path.
    let stdio_start = all[end..].find('{').unwrap() + end;
    let stdio_end = all[stdio_start..].find("\n}").unwrap() + stdio_start + 2;
    let stdio: serde_json::Value = serde_json::from_str(&all[stdio_start..stdio_end]).unwrap();
    let server = &stdio["mcpServers"]["crewbus"];
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_crewbus")).unwrap();
    assert_eq!(server["command"], exe.display().to_string());
    assert_eq!(server["args"][2], format!("http://{addr}"));
    assert_eq!(server["env"]["CREWBUS_MCP_TOKEN"], tokens["alice"]);
    stop(child);

    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    // Second start (a fresh memory store), --json: the same tokens, and they work.
    let mut child = crewbus()
        .args(["--json", "serve", "--ephemeral"])
        .arg("--data-dir")
        .arg(&dir)
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn_tied()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next =
        || -> serde_json::Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    let (alice, bob, end) = (next(), next(), next());
    for (agent, name) in [(&alice, "alice"), (&bob, "bob")] {
        let keys: Vec<&String> = agent.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["agent", "name", "team", "token"], "{agent}");
        assert_eq!(agent["name"], name);
        assert_eq!(agent["token"], tokens[name], "the kept token is reused");
    }
    assert_eq!(alice["team"], bob["team"]);
    let keys: Vec<&String> = end.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["listening", "mcp_url"], "{end}");
    let url = end["listening"].as_str().unwrap();
    assert_eq!(end["mcp_url"], format!("{url}/mcp"));
    let addr = url.trim_start_matches("http://");
    let (code, who) = me(addr, &tokens["bob"]);
    assert_eq!(code, 200, "{who}");
    assert_eq!(who["name"], "bob");
    assert_eq!(who["id"], bob["agent"]);
    stop(child);
}

/// `serve --dev-operator-token-file FILE` keeps a `dev-api` operator's token in FILE (0600,
/// never printed): it works on the admin API, again after a restart of the memory store, and is
/// refused on the agents' routes.
#[test]
fn serve_keeps_a_dev_operator_token_in_the_file_it_is_given() {
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("operator.token");
    let mut first_token = None;
    for _ in 0..2 {
        let mut child = crewbus()
            .args(["--json", "serve", "--ephemeral"])
            .arg("--data-dir")
            .arg(state.path().join("data"))
            .arg("--dev-operator-token-file")
            .arg(&file)
            .env("CREWBUS_LISTEN", "127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn_tied()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        let (url, admin) = loop {
            let line = lines.next().expect("serve printed its lines").unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            printed.push(line);
            if v.get("admin_api").is_some() {
                let url = printed
                    .iter()
                    .find_map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l).ok()?;
                        v["listening"].as_str().map(str::to_owned)
                    })
                    .unwrap();
                break (url, v);
            }
        };
        assert_eq!(admin["operator"], "dev-api");
        assert_eq!(admin["operator_token_file"], file.display().to_string());
        let token = std::fs::read_to_string(&file).unwrap().trim().to_owned();
        assert!(token.starts_with("cbo_"), "{token}");
        assert!(
            !printed.join("\n").contains(&token),
            "the token was printed"
        );
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        if let Some(first) = &first_token {
            assert_eq!(&token, first, "the kept token is reused");
        }
        first_token = Some(token.clone());
        let addr = url.trim_start_matches("http://");
        let (code, me) = get(addr, "/v1/admin/me", &token);
        assert_eq!(code, 200, "{me}");
        assert_eq!(me["name"], "dev-api");
        assert!(me["teams"].is_null());
        let (code, _) = get(addr, "/v1/me", &token);
        assert_eq!(code, 401);
        stop(child);
    }
}

#[test]
fn with_a_database_dev_agents_need_an_explicit_dev_team() {
    let state = tempfile::tempdir().unwrap();
    let out = crewbus()
        .args(["--json", "serve", "--dev-agent", "alice", "--data-dir"])
        .arg(state.path())
        .env(
            "CREWBUS_DATABASE__URL",
            "postgres://crewbus@127.0.0.1:1/none",
        )
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "invalid");
    assert!(
        std::fs::read_dir(state.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

/// A database the server refuses (here: one that does not exist, on the real test server) is
/// `unavailable` with the reason the server gave, and the URL's password is never printed
/// (found by a fresh user: every such failure printed only the redacted URL).
#[test]
fn a_refused_database_says_why_without_its_password() {
    let pg = crewbus_conformance::postgres::database_url_options();
    let missing = format!("crewbus_missing_{}", uuid::Uuid::new_v4().simple());
    let password = "s3cret-pw-never-printed";
    let (_dir, path) = config_file(&format!(
        "[database]\nurl = \"postgres://{}:{password}@{}:{}/{missing}\"\n",
        pg.get_username(),
        pg.get_host(),
        pg.get_port()
    ));
    let out = crewbus()
        .arg("--config")
        .arg(&path)
        .args(["--json", "team", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains(password) && !stderr.contains(password),
        "the password printed: {stdout} {stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stdout}"));
    assert_eq!(v["error"]["code"], "unavailable", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the server says") && message.contains(&missing),
        "no reason in {message}"
    );
}

/// A fresh, migrated database named after `name` on the test server, and a configuration file
/// pointing at it (both kept alive by the returned guards).
async fn postgres_config_file(
    name: &str,
) -> (
    crewbus_conformance::postgres::TestDatabase,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    let db = crewbus_benches::kit::postgres::database(name).await;
    let (dir, path) = config_file(&format!(
        "[database]\nurl = \"{}\"\n",
        crewbus_benches::kit::postgres::url(&db)
    ));
    (db, dir, path)
}

/// A configuration file in a fresh temporary directory (kept alive by the returned guard).
fn config_file(toml: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crewbus.toml");
    std::fs::write(&path, toml).unwrap();
    (dir, path)
}

/// `team add --backend jetstream` on a deployment without `[nats]` is told that JetStream is
/// not configured (`invalid`, naming what is), before being told to provision: `--provision`
/// would not help there (found by a fresh user, who was sent round in a circle).
#[tokio::test]
async fn jetstream_asked_of_a_deployment_without_it_is_refused_as_not_configured() {
    let (db, _dir, path) = postgres_config_file("cli_no_nats").await;
    for extra in [&[][..], &["--provision"][..]] {
        let out = crewbus()
            .arg("--config")
            .arg(&path)
            .args(["--json", "team", "add", "t3", "--backend", "jetstream"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stdout)));
        assert_eq!(v["error"]["code"], "invalid", "{extra:?}: {v}");
    }
    let out = crewbus()
        .arg("--config")
        .arg(&path)
        .args(["--json", "team", "list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !v.to_string().contains("\"t3\""),
        "nothing was created: {v}"
    );
    db.passed().await;
}

/// `POST path` with a JSON `body` and `token` on `addr`: the status and the answer.
fn post(addr: &str, path: &str, token: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let body = body.to_string();
    writer
        .write_all(
            format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let (code, body) = read_response(&mut BufReader::new(stream));
    (code, serde_json::from_slice(&body).unwrap())
}

/// `crewbus lease check` (the pre-commit hook's command) exits 0 for held paths and 1 for one
/// that is not, refuses to run without a token; `lease list` and `lease release` work beside the
/// running embedded server, and a released lease no longer holds.
#[test]
fn lease_commands_check_list_and_release_beside_a_running_server() {
    let (child, token, addr, state) = serve_with(&[]);
    let (status, held) = post(
        &addr,
        "/v1/leases",
        &token,
        &serde_json::json!({ "pattern": "src/**" }),
    );
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["granted"], true, "{held}");
    let url = format!("http://{addr}");
    let check = |paths: &[&str], token: Option<&str>| {
        let mut c = crewbus();
        c.args(["lease", "check", "--url", &url]).args(paths);
        match token {
            Some(t) => c.env("CREWBUS_TOKEN", t),
            None => c.env_remove("CREWBUS_TOKEN"),
        };
        c.output().unwrap()
    };
    let ok = check(&["src/a.rs", "src/b/c.rs"], Some(&token));
    assert!(ok.status.success(), "{ok:?}");
    assert!(String::from_utf8_lossy(&ok.stdout).contains("held     src/a.rs"));
    let refused = check(&["src/a.rs", "docs/x.md"], Some(&token));
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stdout).contains("NOT HELD docs/x.md"));
    let no_token = check(&["src/a.rs"], None);
    assert!(!no_token.status.success(), "{no_token:?}");
    assert!(!String::from_utf8_lossy(&no_token.stderr).contains(&token));

    let list = crewbus()
        .args(["--json", "lease", "list", "--team", "t", "--data-dir"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed[0]["id"], held["lease"]["id"], "{listed}");
    assert_eq!(listed[0]["agent_name"], "alice");
    let id = held["lease"]["id"].as_str().unwrap();
    let release = crewbus()
        .args(["lease", "release", "--team", "t", id, "--data-dir"])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(release.status.success(), "{release:?}");
    let after = check(&["src/a.rs"], Some(&token));
    assert_eq!(after.status.code(), Some(1), "{after:?}");
    stop(child);
}

/// The load generator (`crewbus-load`, a binary of `benches/`; here its library, run as the
/// binary runs it) beside a data directory no server runs on (the server at `--url` uses
/// another) is refused before it creates anything in that store: `Invalid`, the binary's exit
/// code 1.
#[test]
fn load_refuses_a_data_directory_no_server_runs_on_before_creating_anything() {
    use clap::Parser as _;
    use crewbus_benches::load::{self, LoadCli};
    let (child, _token, addr, _state) = serve_with(&[]);
    // Another store: made by a server started once there, then stopped.
    let (other, _t, _a, other_state) = serve_with(&[]);
    stop(other);
    let url = format!("http://{addr}");
    let cli = LoadCli::try_parse_from([
        std::ffi::OsStr::new("crewbus-load"),
        "--url".as_ref(),
        url.as_ref(),
        "--messages".as_ref(),
        "10".as_ref(),
        "--data-dir".as_ref(),
        other_state.path().as_os_str(),
    ])
    .unwrap();
    let mut config = cli.apply(crewbus::config::Config::default()).unwrap();
    load::prepare(&cli.load, &mut config).unwrap();
    crewbus::compose::check_configuration(&config).unwrap();
    let refused = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(load::command(config, cli.load, false));
    assert!(
        matches!(refused, Err(crewbus_domain::BusError::Invalid { .. })),
        "{refused:?}"
    );
    let teams = crewbus()
        .args(["--json", "team", "list", "--data-dir"])
        .arg(other_state.path())
        .output()
        .unwrap();
    assert!(teams.status.success(), "{teams:?}");
    let listed: serde_json::Value = serde_json::from_slice(&teams.stdout).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["t"],
        "load created a team in the wrong store: {names:?}"
    );
    stop(child);
}

/// `crewbus search` beside the running embedded server finds what an agent sent once the
/// server indexed it (as JSON and as text, the matched word marked), refuses a bad limit, and
/// an unknown agent.
#[test]
fn search_finds_an_agents_messages_beside_a_running_server() {
    let (child, token, addr, state) = serve_with(&[]);
    let (status, conv) = post(
        &addr,
        "/v1/conversations",
        &token,
        &serde_json::json!({ "title": "ops", "members": [] }),
    );
    assert_eq!(status, 201, "{conv}");
    let id = conv["id"].as_str().unwrap();
    let (status, sent) = post(
        &addr,
        &format!("/v1/conversations/{id}/messages"),
        &token,
        &serde_json::json!({ "request_id": "r1", "body": "deploy the parser tonight" }),
    );
    assert_eq!(status, 201, "{sent}");
    let search = |extra: &[&str]| {
        crewbus()
            .args(["search", "--team", "t", "--agent", "alice"])
            .args(extra)
            .arg("--data-dir")
            .arg(state.path())
            .output()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let found = loop {
        let out = crewbus()
            .args([
                "--json", "search", "--team", "t", "--agent", "alice", "parser",
            ])
            .arg("--data-dir")
            .arg(state.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let page: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if !page["hits"].as_array().unwrap().is_empty() {
            break page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never indexed: {page}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        found["hits"][0]["message"], sent["message"]["id"],
        "{found}"
    );
    let text = search(&["parser"]);
    assert!(text.status.success(), "{text:?}");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("*parser*") && stdout.contains("1 hit(s)"),
        "{stdout}"
    );
    let bad = search(&["--limit", "0", "parser"]);
    assert!(!bad.status.success(), "{bad:?}");
    let stranger = crewbus()
        .args([
            "search",
            "--team",
            "t",
            "--agent",
            "nobody",
            "parser",
            "--data-dir",
        ])
        .arg(state.path())
        .output()
        .unwrap();
    assert!(!stranger.status.success(), "{stranger:?}");
    stop(child);
}
