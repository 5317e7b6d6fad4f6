//! No credential, signing key or URL query in logs (captured at TRACE), errors or
//! `Debug` output of the push pieces.

use crate::push_support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use crewbus::push::{
    DeliverySettings, DeliveryWorker, LocalKeyRing, MasterKey, Outbox, SealedPush,
};
use crewbus_domain::{Backoff, Secret};
use crewbus_memory::{ManualClock, MemoryPushStore};
use crewbus_ports::{KeyRing, PushStore};
use push_support::*;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

const QUERY_SECRET: &str = "querysecret99";

#[tokio::test]
async fn no_secret_reaches_logs_errors_or_debug() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = crate::common::capture_logs(subscriber);

    let rx = Receiver::start().await;
    let port = rx.base.trim_start_matches("http://");
    // (Userinfo in a URL is refused by `Destination::validate`; the query is the URL's secret.)
    let url = |path: &str| format!("http://{port}{path}?token={QUERY_SECRET}");
    rx.script("/ok/flaky", [(500, None)]);
    rx.script("/ok/gone", [(410, None)]);
    let mut destinations = vec![
        with_token(destination("ok", &url("/ok/fine"))),
        with_token(destination("flaky", &url("/ok/flaky"))),
        with_token(destination("gone", &url("/ok/gone"))),
        with_token(destination("slow", &url("/hang/slow"))),
        with_token(destination("redirect", &url("/redirect"))),
    ];
    destinations[0].signing_keys = vec![Secret::new(KEY_OLD), Secret::new(KEY_NEW)];

    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(LocalKeyRing::new(MasterKey::generate(), dir.path()).unwrap());
    let raw = MemoryPushStore::new(tenant("acme"));
    let journal = journal(&tenant("acme"));
    let at = Utc::now();
    let outbox = Outbox::new(Arc::new(raw.clone()), destinations)
        .with_clock(Arc::new(ManualClock::new(at)))
        .sealed(keys.clone(), tenant("acme"));
    let worker = DeliveryWorker::new(
        &outbox,
        Arc::new(journal.clone()),
        transport(Duration::from_millis(300)),
    )
    .with_settings(DeliverySettings {
        backoff: Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(5),
            max_attempts: 2,
        },
        ..DeliverySettings::default()
    });
    let run = run_with_notes(&journal, 1, at).await;
    outbox.open(run).await.unwrap();
    let mut outputs = Vec::new();
    let mut t = at;
    for _ in 0..3 {
        outputs.push(format!("{:?}", worker.run_once(t, 20).await.unwrap()));
        t += chrono::Duration::seconds(10);
    }
    // A destroyed scope: warn logs of credentials that do not open.
    keys.destroy(&SealedPush::scope_of(&tenant("acme")))
        .await
        .unwrap();
    outputs.push(format!("{:?}", outbox.store().list(run).await.unwrap()));
    outputs.push(format!("{:?}", worker.run_once(t, 20).await.unwrap()));

    // Errors and Debug of everything that held a secret.
    outputs.push(format!("{outbox:?} {worker:?} {keys:?}"));
    for registration in raw.parked(20).await.unwrap() {
        outputs.push(format!("{registration:?} {:?}", registration.last_error));
    }
    let _ = MasterKey::from_base64("not a key").map_err(|e| outputs.push(format!("{e} {e:?}")));

    let logs = captured.text();
    if std::env::var_os("PUSH_LOGS_SHOW").is_some() {
        eprintln!("{logs}");
    }
    assert!(logs.contains("event acknowledged"), "capture works: {logs}");
    assert!(logs.contains("registration parked"), "{logs}");
    assert!(logs.contains("reads as absent"), "{logs}");
    assert!(
        logs.contains(&format!("http://{port}/ok/gone")),
        "URLs are logged redacted: {logs}"
    );
    assert!(rx.hits("/ok/fine").len() >= 2, "deliveries happened");
    let everything = format!("{logs}\n{}", outputs.join("\n"));
    for leak in [
        TOKEN,
        "very-secret",
        KEY_OLD,
        KEY_NEW,
        "C2FVsBQIhrscChlQIMV",
        QUERY_SECRET,
    ] {
        assert!(!everything.contains(leak), "{leak} leaked:\n{everything}");
    }
}
