//! Push dispatch throughput against its baseline, in the same run and against the same loopback
//! receiver (axum on 127.0.0.1:0 answering 200):
//!
//! - `bare_post`: the baseline — `RUNS` tasks each POSTing `RECORDS` bodies of the same size in a
//!   row with a bare reqwest client (no signing, no store, no journal);
//! - `delivery_worker`: the real thing — `RUNS` runs of `RECORDS` records each, one sealed
//!   registration per run (credential sealed with the local key ring), signed with Standard
//!   Webhooks, projected to CloudEvents, cursors saved in the memory push store, swept by
//!   `DeliveryWorker::run_once` until every record is acknowledged.
//!
//! - `delivery_worker_without_http`: the same sweep over an in-memory transport answering 200:
//!   the worker's own cost (journal reads, projection, signing, opening the credential, cursors).
//!
//! Both move `RUNS × RECORDS` events per iteration with the same concurrency (`RUNS` in flight);
//! the ratio of their times is the dispatch overhead. Setup (runs, journals, registrations) is
//! outside the timed section.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use chrono::Utc;
use crewbus::push::{
    DeliverySettings, DeliveryWorker, Destination, HttpTransport, LocalKeyRing, MasterKey, Outbox,
};
use crewbus_domain::{PushAuthentication, Secret, TenantId, Uuid};
use crewbus_memory::RecordingTransport;
use crewbus_memory::{ManualClock, MemoryLedger, MemoryPushStore};
use crewbus_ports::{Journal, PushTransport};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const RUNS: usize = 16;
const RECORDS: usize = 64;

async fn receiver() -> String {
    let app = Router::new().fallback(|_body: Bytes| async { StatusCode::OK });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

struct Scene {
    worker: DeliveryWorker,
    _dir: tempfile::TempDir,
}

async fn scene(url: &str, transport: Arc<dyn PushTransport>) -> Scene {
    let tenant = TenantId::new("bench").unwrap();
    let journal = MemoryLedger::new(tenant.clone()).journal();
    let store = MemoryPushStore::new(tenant.clone());
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(LocalKeyRing::new(MasterKey::generate(), dir.path()).unwrap());
    let at = Utc::now();
    let outbox = Outbox::new(
        Arc::new(store),
        vec![Destination {
            name: "ops".into(),
            url: url.to_owned(),
            authentication: Some(PushAuthentication {
                scheme: "Bearer".into(),
                credentials: Secret::new("bench-token"),
            }),
            signing_keys: vec![Secret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")],
        }],
    )
    .with_clock(Arc::new(ManualClock::new(at)))
    .sealed(keys, tenant);
    for _ in 0..RUNS {
        let run = journal
            .admit(Uuid::new_v4(), Uuid::new_v4(), at)
            .await
            .unwrap();
        for i in 1..RECORDS {
            journal.note(run, &format!("note {i}"), at).await.unwrap();
        }
        outbox.open(run).await.unwrap();
    }
    let worker = DeliveryWorker::new(&outbox, Arc::new(journal), transport).with_settings(
        DeliverySettings {
            concurrency: RUNS,
            page: RECORDS,
            ..DeliverySettings::default()
        },
    );
    Scene { worker, _dir: dir }
}

fn dispatch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = rt.block_on(receiver());
    let transport: Arc<dyn PushTransport> =
        Arc::new(HttpTransport::new(Duration::from_secs(10)).unwrap());
    // A body of the size the worker sends (one CloudEvent of a note).
    let body = Bytes::from(vec![b'x'; 420]);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();

    let mut group = c.benchmark_group("push_dispatch");
    group.throughput(Throughput::Elements((RUNS * RECORDS) as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));

    group.bench_function("bare_post", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            async move {
                let start = Instant::now();
                for _ in 0..iters {
                    let mut tasks = Vec::with_capacity(RUNS);
                    for _ in 0..RUNS {
                        let (client, url, body) = (client.clone(), url.clone(), body.clone());
                        tasks.push(tokio::spawn(async move {
                            for _ in 0..RECORDS {
                                let r = client.post(&url).body(body.clone()).send().await.unwrap();
                                assert!(r.status().is_success());
                            }
                        }));
                    }
                    for t in tasks {
                        t.await.unwrap();
                    }
                }
                start.elapsed()
            }
        })
    });

    group.bench_function("delivery_worker", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (url, transport) = (url.clone(), Arc::clone(&transport));
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let scene = scene(&url, Arc::clone(&transport)).await;
                    let at = Utc::now();
                    let start = Instant::now();
                    let mut delivered = 0;
                    while delivered < RUNS * RECORDS {
                        delivered += scene.worker.run_once(at, RUNS).await.unwrap().delivered;
                    }
                    total += start.elapsed();
                }
                total
            }
        })
    });
    // The worker's own cost: the same sweep with a transport that answers 200 in memory.
    group.bench_function("delivery_worker_without_http", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let url = url.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let scene = scene(&url, Arc::new(RecordingTransport::new())).await;
                    let at = Utc::now();
                    let start = Instant::now();
                    let mut delivered = 0;
                    while delivered < RUNS * RECORDS {
                        delivered += scene.worker.run_once(at, RUNS).await.unwrap().delivered;
                    }
                    total += start.elapsed();
                }
                total
            }
        })
    });
    group.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
