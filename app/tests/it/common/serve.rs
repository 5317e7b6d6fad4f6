//! A `crewbus --json serve` process of a test (the built binary, spawned by the caller's
//! command): its dev agents' tokens and base URL read from what it prints, stopped with SIGTERM,
//! killed and reaped on drop however the test ends.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crewbus_conformance::child::SpawnTied;
use serde_json::Value;

/// A running `crewbus --json serve` and what it printed up to its address.
pub struct ServeProcess {
    pub child: Child,
    /// Its base URL (the `listening` line).
    pub url: String,
    /// The dev agents' tokens by name (the lines before `listening` that carry both).
    pub tokens: HashMap<String, String>,
    /// Every JSON line printed before `listening`.
    pub before: Vec<Value>,
    /// The console line printed right after the address (`{console_url, operator,
    /// sign_in_code, expires_at}`), when [`ServeProcess::start`] was asked to read it; else
    /// `Null`.
    pub console: Value,
}

impl ServeProcess {
    /// Spawns `command` (a `crewbus --json serve …`) tied to this test binary, stdout piped and
    /// stderr inherited; reads its JSON lines up to `listening` and, with `console`, the line
    /// after it. The rest of stdout is drained on a thread so the server never blocks on a full
    /// pipe. Panics when it ends its output before its address.
    pub fn start(command: &mut Command, console: bool) -> ServeProcess {
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn_tied()
            .unwrap();
        // Owned by the value at once, so a failed read below still kills and reaps it.
        let mut serve = ServeProcess {
            child,
            url: String::new(),
            tokens: HashMap::new(),
            before: Vec::new(),
            console: Value::Null,
        };
        let mut lines = BufReader::new(serve.child.stdout.take().unwrap()).lines();
        loop {
            let line = lines.next().expect("serve printed its address").unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if let Some(url) = v["listening"].as_str() {
                serve.url = url.to_owned();
                if console {
                    let line = lines
                        .next()
                        .expect("serve printed its console line")
                        .unwrap();
                    serve.console = serde_json::from_str(&line).unwrap();
                }
                std::thread::spawn(move || for _ in lines.by_ref() {});
                return serve;
            }
            if let (Some(name), Some(token)) = (v["name"].as_str(), v["token"].as_str()) {
                serve.tokens.insert(name.to_owned(), token.to_owned());
            }
            serve.before.push(v);
        }
    }

    /// SIGTERM, then waits at most `deadline` for the exit: its status.
    pub fn stop(mut self, deadline: Duration) -> ExitStatus {
        sigterm_and_wait(&mut self.child, deadline)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call of the HTTP API at `url` with `token`: `GET`, or with any other `method` a `POST` of
/// `body`; the status and the JSON answer (`Null` when it is not JSON).
pub async fn call(url: &str, token: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let client = reqwest::Client::new();
    let request = match method {
        "GET" => client.get(format!("{url}{path}")),
        _ => client.post(format!("{url}{path}")).json(&body),
    };
    let r = request.bearer_auth(token).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Sends SIGTERM to `child`; panics when it cannot be sent.
pub fn sigterm(child: &Child) {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM {}: {sent}", child.id());
}

/// Sends SIGTERM to `child` and waits at most `deadline` for it to exit: its status. Panics
/// when the signal cannot be sent or the deadline passes.
pub fn sigterm_and_wait(child: &mut Child, deadline: Duration) -> ExitStatus {
    sigterm(child);
    let until = Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < until, "serve did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}
