//! The `crewbus` binary: help that teaches, configuration errors, and `serve` on the embedded
//! default answering /health and stopping gracefully on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn crewbus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crewbus"));
    c.env_remove("CREWBUS_DATABASE__URL")
        .env_remove("CREWBUS_CONFIG")
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
        "demo",
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

#[test]
fn operator_commands_explain_what_they_need() {
    let out = crewbus().args(["team", "list"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("database"));
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
    let mut child = crewbus()
        .args(["--json", "serve", "--dev-team", "t", "--dev-agent", "alice"])
        .env("CREWBUS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
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

#[test]
fn demo_runs_on_the_embedded_default_and_proves_exactly_once() {
    let out = crewbus().args(["--json", "demo"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["summary"];
    assert_eq!(s["exactly_once"], true, "{s}");
    assert_eq!(s["messages"], 62);
    assert!(
        s["redeliveries"].as_u64().unwrap() >= 1,
        "the unconfirmed fetch came back"
    );
    assert_eq!(s["confirmed"], 124);
    assert!(s["latency_p50_ms"].as_f64().unwrap() > 0.0);
    let transcript = v["transcript"].as_array().unwrap();
    assert!(
        transcript
            .iter()
            .any(|l| l["what"].as_str().unwrap().contains("(redelivered)"))
    );
    // The runs' journals arrived at the demo's local receiver, signed and in order.
    let events = s["push_events"].as_u64().unwrap();
    assert!(events >= 3 * 2 + 62 + 124, "{s}");
    assert_eq!(s["push_signatures_verified"], events);
    assert_eq!(s["push_in_journal_order"], true);
    let types = s["push_event_types"].as_array().unwrap();
    let count = |t: &str| {
        types
            .iter()
            .find(|x| x["type"] == t)
            .and_then(|x| x["count"].as_u64())
    };
    assert_eq!(count("run_admitted"), Some(3));
    assert_eq!(count("run_sealed"), Some(3));
    assert_eq!(count("message_sent"), Some(62));
    assert!(
        transcript
            .iter()
            .any(|l| l["who"] == "hook" && l["what"].as_str().unwrap().contains("run_sealed"))
    );
    let human = crewbus().arg("demo").output().unwrap();
    let text = String::from_utf8(human.stdout).unwrap();
    for needle in [
        "alice",
        "bob",
        "carol",
        "summary",
        "p50",
        "p99",
        "exactly once",
        "push events",
        "CloudEvents",
    ] {
        assert!(text.contains(needle), "demo output lacks {needle}");
    }
}
