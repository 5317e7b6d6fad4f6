//! The read path bounded in memory (issue 19, item 9), on the embedded store (SQLite) in
//! process, driven through the real HTTP API: 300 fetches at once over agents each holding
//! 1 MiB bodies keep the process's resident memory within the configured room for bodies
//! (`bus.max_body_bytes_in_flight`, 32 MiB here) plus a stated overhead, the room is used and
//! waited for (its gauge never above the bound, given back at the end), and every delivery
//! arrives exactly once (counted by message id per agent, every confirm the first, every
//! receipt delivered in the ledger).
//!
//! # What is measured
//! The load runs in a child process of this test binary (nothing else runs in it). The
//! baseline is its `VmRSS` once every message is stored and every reference published (the
//! sends' own buffers are part of it), with the kernel's peak (`VmHWM`) reset there through
//! `/proc/self/clear_refs`. During the load a sampler thread reads `VmRSS` and the room's gauge
//! every 2 ms; the peak is the larger of the sampled maximum and `VmHWM`.
//!
//! The child runs with glibc's `mmap` threshold pinned at its starting value, 128 KiB
//! (`MALLOC_MMAP_THRESHOLD_`): a freed 1 MiB body then goes back to the kernel at once, so the
//! resident size is what the process holds. Measured on 2 shared cores under load: 60-63 MiB
//! of growth with the room; with glibc's default dynamic threshold (freed bodies kept in the
//! allocator's per-thread arenas for reuse) the same run grows by about 150 MiB; without the
//! bound (the room set to 4 GiB, the fetches' own 4 MiB default still applied) by 507 MiB
//! (567 MiB with the default threshold), with 160-190 calls answered 503 by the store's
//! exhausted read pool.
//!
//! # The overhead, and why
//! [`OVERHEAD`] = the room once more + 32 MiB. The room counts each body once, as the ledger
//! records its length; while a body is in flight a second copy of it exists for a moment, and
//! only fetches holding room (or an answer the room just let go) have one: reading (the store's
//! row value beside the `String` decoded from it), answering (an answer's JSON beside the
//! deliveries' strings while it is written), and the test's own clients in the same process
//! (an answer collected from its frames, then parsed). The 32 MiB are what does not scale with
//! the room: 300 connections' buffers on both ends and their tasks, SQLite's page caches (five
//! connections of 2 MiB), the allocator's slack for small blocks.

use crate::common;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crewbus::client::{ApiClient, uuid_of};
use crewbus::compose::compose_server;
use crewbus::config::{Config, StorageKind};
use crewbus::server::Server;
use crewbus::shutdown::Shutdown;
use crewbus_domain::Uuid;
use serde::Deserialize;
use serde_json::json;

const MIB: u64 = 1 << 20;
/// `bus.max_body_bytes_in_flight` of the server under test.
const ROOM: u64 = 32 * MIB;
/// What the process may hold beyond the room (see the module docs).
const OVERHEAD: u64 = ROOM + 32 * MIB;
/// Agents fetching, each from [`LOOPS`] loops at once: 300 fetches in flight.
const AGENTS: usize = 150;
const LOOPS: usize = 2;
/// 1 MiB messages every agent receives.
const MESSAGES: usize = 3;

/// One load: how many agents and messages, and what the bodies are made of.
#[derive(Clone, Copy)]
struct Shape {
    agents: usize,
    messages: usize,
    /// Bodies of one control character (U+0001, U+0002, ...: six bytes each as JSON) instead
    /// of one letter.
    control: bool,
}
/// glibc's `mmap` threshold in the measured process, bytes: its documented starting value,
/// pinned (see the module docs).
const MMAP_THRESHOLD: usize = 128 * 1024;
/// The longest the load may take.
const LOAD_DEADLINE: Duration = Duration::from_secs(240);

/// The parts of a fetch answer the test reads; bodies are borrowed from the answer's bytes when
/// they hold no escapes (letters), decoded when they do (control characters).
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    deliveries: Vec<Item<'a>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    delivery_id: Uuid,
    message: ItemMessage,
    #[serde(borrow)]
    body: Cow<'a, str>,
    redelivered: bool,
}

#[derive(Deserialize)]
struct ItemMessage {
    id: Uuid,
}

/// `VmRSS` or `VmHWM` of this process, bytes.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("{key} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

/// Resets the kernel's peak resident size of this process (`VmHWM`) to its current one; false
/// when the kernel refuses.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The character message `i`'s body is made of: a letter, or a control character.
fn char_of(i: usize, control: bool) -> u8 {
    if control { 1 + i as u8 } else { b'a' + i as u8 }
}

/// The body message `i` carries: 1 MiB of its character.
fn body_of(i: usize, control: bool) -> String {
    char::from(char_of(i, control))
        .to_string()
        .repeat(MIB as usize)
}

/// What each agent received: count per message id.
type Received = Vec<Mutex<HashMap<Uuid, usize>>>;

/// What every fetch loop shares.
struct Load {
    http: reqwest::Client,
    url: String,
    /// Each message's letter (its body is 1 MiB of it).
    bodies: HashMap<Uuid, u8>,
    received: Received,
    /// Calls answered 503 (retried).
    unavailable: AtomicU64,
    /// Deliveries marked `redelivered`.
    redelivered: AtomicU64,
    deadline: Instant,
    /// Messages every agent receives.
    messages: usize,
}

/// One fetch loop of agent `a`: fetch (waiting up to 2 s), check and count each delivery,
/// confirm them, until the agent has every message.
async fn fetch_loop(load: Arc<Load>, token: String, a: usize) {
    let Load {
        http,
        url,
        bodies,
        received,
        unavailable,
        redelivered,
        deadline,
        messages,
    } = &*load;
    let deadline = *deadline;
    let done = || received[a].lock().unwrap().len() == *messages;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "agent {a} did not get every message in time"
        );
        let resp = http
            .post(format!("{url}/v1/inbox/fetch"))
            .bearer_auth(&token)
            .json(&json!({"limit": 10, "wait_ms": 2000}))
            .send()
            .await
            .unwrap();
        if resp.status() == 503 {
            // Retryable (the store's pool was busy): nothing was handed out.
            unavailable.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        assert_eq!(resp.status(), 200);
        let bytes = resp.bytes().await.unwrap();
        let answer: Answer<'_> = serde_json::from_slice(&bytes).unwrap();
        let mut ids = Vec::with_capacity(answer.deliveries.len());
        for d in &answer.deliveries {
            let letter = bodies[&d.message.id];
            assert_eq!(d.body.len() as u64, MIB);
            assert!(
                d.body.as_bytes()[0] == letter && d.body.as_bytes()[MIB as usize - 1] == letter,
                "agent {a}: another message's body"
            );
            // A reference fetched from the inbox and left for lack of room again and again
            // comes back from the inbox after its ack wait (30 s) with a delivery count of 2,
            // and is marked `redelivered` though never handed out: counted, not refused (a
            // second hand-out of one message would count it twice below).
            if d.redelivered {
                redelivered.fetch_add(1, Ordering::Relaxed);
            }
            *received[a].lock().unwrap().entry(d.message.id).or_default() += 1;
            ids.push(d.delivery_id);
        }
        drop(answer);
        drop(bytes);
        if ids.is_empty() {
            continue;
        }
        // A 503 is "not committed; retry".
        let v: serde_json::Value = loop {
            assert!(
                Instant::now() < deadline,
                "agent {a}: confirm never committed"
            );
            let resp = http
                .post(format!("{url}/v1/inbox/confirm"))
                .bearer_auth(&token)
                .json(&json!({"deliveries": ids}))
                .send()
                .await
                .unwrap();
            if resp.status() == 503 {
                unavailable.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            assert_eq!(resp.status(), 200);
            break resp.json().await.unwrap();
        };
        for r in v["results"].as_array().unwrap() {
            assert_eq!(r["outcome"], "confirmed", "agent {a}: {r}");
        }
    }
}

/// Set in the child process that runs the load.
const CHILD: &str = "CREWBUS_READ_PATH_CHILD";

/// Runs `shape`'s load in a child process of this binary running test `name` (see the module
/// docs), or, in that child, the load itself.
fn run(name: &str, shape: Shape) {
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap()
            .block_on(load(shape));
        return;
    }
    // The load runs in a child process of this binary whose allocator returns a freed body to
    // the kernel at once (see the module docs), so its resident size is what it holds.
    // The harness names a test by its module path in this binary (`read_path_bounded::…`).
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    // `/proc/self/exe`, not `current_exe()`: the image this process runs, even when a build
    // in the same target directory replaced the binary's file during the run.
    let status = std::process::Command::new("/proc/self/exe")
        .args([
            "--exact",
            &format!("{module}::{name}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("MALLOC_MMAP_THRESHOLD_", MMAP_THRESHOLD.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "the load's process failed: {status}");
}

#[test]
fn three_hundred_fetches_of_1_mib_bodies_stay_within_the_room_and_deliver_once() {
    run(
        "three_hundred_fetches_of_1_mib_bodies_stay_within_the_room_and_deliver_once",
        Shape {
            agents: AGENTS,
            messages: MESSAGES,
            control: false,
        },
    );
}

/// Bodies of control characters are six times their UTF-8 length in the answer (`\u0001` per
/// byte): the room counts them as JSON, so the bound holds for them too (counted at their
/// recorded length, the room let about six times its size into answers). Fewer agents and
/// messages than above: each delivery is 6 MiB of answer.
#[test]
fn fetches_of_control_character_bodies_stay_within_the_room_counted_as_json_and_deliver_once() {
    run(
        "fetches_of_control_character_bodies_stay_within_the_room_counted_as_json_and_deliver_once",
        Shape {
            agents: 50,
            messages: 2,
            control: true,
        },
    );
}

/// The load and its checks (in the child process).
async fn load(shape: Shape) {
    let Shape {
        agents: agent_count,
        messages,
        control,
    } = shape;
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    config.storage.kind = Some(StorageKind::Sqlite);
    std::fs::create_dir(dir.path().join("data")).unwrap();
    config.storage.data_dir = Some(dir.path().join("data"));
    config.bus.max_body_bytes_in_flight = ROOM;
    config.console.enabled = false;
    config.validate().unwrap();
    let composed = compose_server(&config).await.unwrap();
    let bus = composed.bus.clone();
    let team = bus.add_team("team-a", None, None).await.unwrap();
    let sender = bus.add_agent(team.id, "sender").await.unwrap();
    let mut agents = Vec::with_capacity(agent_count);
    for i in 0..agent_count {
        agents.push(bus.add_agent(team.id, &format!("agent-{i}")).await.unwrap());
    }
    let server = Server::start(bus.clone(), config.listen, Shutdown::new())
        .await
        .unwrap();
    let url = server.url();

    // MESSAGES bodies of 1 MiB to a conversation of every agent: each agent holds them all.
    let alice = ApiClient::new(url.clone(), Some(sender.token.clone()));
    let members: Vec<Uuid> = agents.iter().map(|a| a.agent.id).collect();
    let conv = alice.create_conversation("load", &members).await.unwrap();
    let conv = uuid_of(&conv["id"]);
    let mut letters = HashMap::new();
    for i in 0..messages {
        let m = alice
            .send(conv, &format!("m{i}"), &body_of(i, control))
            .await
            .unwrap();
        letters.insert(uuid_of(&m["message"]["id"]), char_of(i, control));
    }
    // Every body stored and every reference published: the load is reads only.
    let references = (agent_count * messages) as u64;
    common::eventually("every reference published", 60, || async {
        let text = reqwest::get(format!("{url}/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let published = text
            .lines()
            .find_map(|l| l.strip_prefix("crewbus_references_published_total "))?
            .parse::<u64>()
            .ok()?;
        (published >= references).then_some(())
    })
    .await;

    // The baseline, and the sampler.
    let peak_reset = reset_peak();
    let baseline = status_bytes("VmRSS:");
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, metrics) = (stop.clone(), bus.metrics().clone());
        std::thread::spawn(move || {
            let (mut rss, mut room, mut samples) = (0u64, 0i64, 0u64);
            while !stop.load(Ordering::Acquire) {
                rss = rss.max(status_bytes("VmRSS:"));
                room = room.max(metrics.fetch_bodies_in_flight.get());
                samples += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (rss, room, samples)
        })
    };

    // 300 fetch loops at once.
    let started = Instant::now();
    let load = Arc::new(Load {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        url: url.clone(),
        bodies: letters,
        received: (0..agent_count).map(|_| Mutex::default()).collect(),
        unavailable: AtomicU64::new(0),
        redelivered: AtomicU64::new(0),
        deadline: started + LOAD_DEADLINE,
        messages,
    });
    let mut loops = tokio::task::JoinSet::new();
    for (a, agent) in agents.iter().enumerate() {
        for _ in 0..LOOPS {
            loops.spawn(fetch_loop(load.clone(), agent.token.clone(), a));
        }
    }
    while let Some(done) = loops.join_next().await {
        done.unwrap();
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Release);
    let (sampled, room_peak, samples) = sampler.join().unwrap();
    let hwm = if peak_reset {
        status_bytes("VmHWM:")
    } else {
        0
    };
    let peak = sampled.max(hwm);
    let waits = bus.metrics().fetch_bytes_waits.get();
    let shortened = bus.metrics().fetch_bytes_shortened.get();
    eprintln!(
        "read path ({}): {} fetches at once, {} deliveries of 1 MiB in {took:.1?}; RSS baseline {} MiB, \
         peak {} MiB (sampled {} MiB over {samples} samples, VmHWM {} MiB), growth {} MiB \
         (bound {} MiB = room {} MiB + overhead {} MiB); room peak {} MiB; {waits} waits, \
         {shortened} shortened fetches, {} calls answered 503, {} deliveries marked redelivered",
        if control {
            "control characters"
        } else {
            "letters"
        },
        agent_count * LOOPS,
        agent_count * messages,
        baseline / MIB,
        peak / MIB,
        sampled / MIB,
        hwm / MIB,
        peak.saturating_sub(baseline) / MIB,
        (ROOM + OVERHEAD) / MIB,
        ROOM / MIB,
        OVERHEAD / MIB,
        room_peak as u64 / MIB,
        load.unavailable.load(Ordering::Relaxed),
        load.redelivered.load(Ordering::Relaxed),
    );

    // Every agent got every message exactly once, and the ledger says so.
    for (a, got) in load.received.iter().enumerate() {
        let got = got.lock().unwrap();
        let expected: HashMap<Uuid, usize> = load.bodies.keys().map(|m| (*m, 1)).collect();
        assert_eq!(*got, expected, "agent {a}");
    }
    for m in load.bodies.keys() {
        let receipts = alice.receipts(*m).await.unwrap();
        assert_eq!(receipts.len(), agent_count, "{m}");
        assert!(
            receipts.iter().all(|r| !r["delivered_at"].is_null()),
            "{m}: a receipt not delivered"
        );
    }
    // The room held: its gauge never passed the bound, and fetches waited for it.
    assert!(
        room_peak as u64 <= ROOM,
        "room peak {room_peak} above {ROOM}"
    );
    assert!(
        room_peak as u64 >= ROOM / 2,
        "the room was hardly used ({room_peak} bytes): the load does not test it"
    );
    assert!(
        waits > 0,
        "no fetch waited for room: the load does not test the bound"
    );
    assert_eq!(
        bus.metrics().fetch_bodies_in_flight.get(),
        0,
        "room not given back"
    );
    // And the process's memory stayed within the room plus the overhead.
    assert!(
        peak.saturating_sub(baseline) <= ROOM + OVERHEAD,
        "RSS grew {} MiB (baseline {} MiB, peak {} MiB), above the room {} MiB + overhead {} MiB",
        peak.saturating_sub(baseline) / MIB,
        baseline / MIB,
        peak / MIB,
        ROOM / MIB,
        OVERHEAD / MIB
    );
    server.stop().await;
}
