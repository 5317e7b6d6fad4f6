//! Relay lease + settle throughput on Postgres against a raw insert-then-update loop, in the
//! same run, on the same database, over the same number of rows.
//!
//! One fresh database per run (`crewbus_conformance::postgres::TestDatabase` on the server of
//! `DATABASE_URL`, migrated; dropped at the end, kept and named if the run fails). An unset or
//! unreachable `DATABASE_URL` fails the run loudly.
//!
//! Each iteration moves `slots` rows, `batch` at a time (see [`BATCHES`]: 256 rows at batch 1,
//! 1 024 at batch 128; 8 and 256 in test mode), the same number for both targets:
//! - `ledger_lease_settle`: `slots` pending outbox slots are made first, outside the timed
//!   section, by sending messages through the ledger into conversations of a team whose body
//!   backend is `"memory"` (not the ledger's local backend, so each send writes an outbox slot
//!   holding the 1 KiB body). Timed: `Ledger::lease_slots(at, 30 s, batch)` then
//!   `Ledger::settle` of the leased slots, all `Confirmed`, until `slots` slots are settled.
//!   Per slot the ledger leases (generation bump), then in the settle transaction re-reads it
//!   under a row lock, marks the message and its receipt stored, enqueues one inbox event (one
//!   recipient per conversation) and deletes the slot.
//! - `raw_insert_update`: the baseline, sqlx directly on a scratch table in the same database:
//!   per batch one transaction inserting `batch` rows (1 KiB body each, `pending`, one statement
//!   per row), then one transaction updating each of them to `done` (one statement per row). Two
//!   commits per batch, like the ledger's lease and settle.
//!
//! Every settlement must be `Applied`, every update must touch its row, and after each ledger
//! iteration no slot is left due: the benchmark checks its own work.
//!
//! After criterion's groups, an interleaved phase alternates short rounds of both targets per
//! batch size (so drift and neighbours' load hit both alike) and prints the ratio
//! `ledger ÷ raw` of the summed rates: `--bench` runs `ROUNDS` rounds, test mode
//! (`cargo test --benches`) one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use crewbus_conformance::postgres::TestDatabase;
use crewbus_domain::{Locator, Publication, SendRequest, TenantId, TokenHash};
use crewbus_ports::Ledger;
use crewbus_postgres::PostgresLedger;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use sqlx::PgPool;
use uuid::Uuid;

mod support;
use support::rounds::{Order, Tally, rounds};
use support::{lease_and_settle_all, measuring};

/// Batch sizes (slots leased per `lease_slots` call and settlements per `settle` call; rows per
/// raw transaction) with the slots (rows) each iteration moves under `--bench` and in test mode.
/// Both targets move the same number at a given batch size.
const BATCHES: [Batch; 2] = [
    Batch {
        size: 1,
        slots: 256,
        test_slots: 8,
    },
    Batch {
        size: 128,
        slots: 1024,
        test_slots: 256,
    },
];
/// Body bytes per message (and per raw row).
const BODY_BYTES: usize = 1024;
/// Conversations the pending slots are sent into, one concurrent sender each (a conversation
/// serialises its senders).
const CONVERSATIONS: usize = 8;
/// The relay's lease.
const LEASE: Duration = Duration::from_secs(30);
/// Interleaved rounds per batch size under `--bench`.
const ROUNDS: usize = 10;

/// The scratch table of the baseline.
const SCRATCH: &str = "CREATE TABLE bench_raw (
    id         uuid PRIMARY KEY,
    body       bytea       NOT NULL,
    state      text        NOT NULL,
    created_at timestamptz NOT NULL,
    done_at    timestamptz
)";

#[derive(Clone, Copy)]
struct Batch {
    size: usize,
    slots: usize,
    test_slots: usize,
}

/// One team on body backend `"memory"` with `CONVERSATIONS` conversations of two agents each
/// (sender and one recipient).
struct Scene {
    ledger: PostgresLedger,
    pool: PgPool,
    team: Uuid,
    /// (conversation, sender) pairs.
    conversations: Vec<(Uuid, Uuid)>,
    body: String,
}

async fn scene(db: &TestDatabase) -> Scene {
    let pool = db.pool().clone();
    let ledger = PostgresLedger::new(pool.clone(), TenantId::new("bench").expect("tenant"));
    assert_ne!(ledger.local_backend(), Some("memory"));
    let at = Utc::now();
    let team = ledger
        .create_team("relay-bench", "memory", "memory", at)
        .await
        .expect("create team");
    let mut conversations = Vec::new();
    for i in 0..CONVERSATIONS {
        let agent = |name: String| {
            let ledger = ledger.clone();
            async move {
                ledger
                    .create_agent(
                        team.id,
                        &name,
                        TokenHash::of(&Uuid::new_v4().to_string()),
                        at,
                    )
                    .await
                    .expect("create agent")
            }
        };
        let sender = agent(format!("sender-{i}")).await;
        let recipient = agent(format!("recipient-{i}")).await;
        let conversation = ledger
            .create_conversation(team.id, sender.id, "bench", &[recipient.id], at)
            .await
            .expect("create conversation");
        conversations.push((conversation.id, sender.id));
    }
    sqlx::query(SCRATCH)
        .execute(&pool)
        .await
        .expect("scratch table");
    Scene {
        ledger,
        pool,
        team: team.id,
        conversations,
        body: "x".repeat(BODY_BYTES),
    }
}

/// Sends `slots` messages through the ledger (one concurrent sender per conversation); each
/// leaves a pending outbox slot, then refreshes the planner's statistics (`ANALYZE`). Returns
/// the last message sent by each sender.
async fn populate(s: &Scene, slots: usize) -> Vec<Uuid> {
    let mut senders = tokio::task::JoinSet::new();
    for (i, &(conversation, sender)) in s.conversations.iter().enumerate() {
        let (ledger, team, body) = (s.ledger.clone(), s.team, s.body.clone());
        let count = slots / CONVERSATIONS + usize::from(i < slots % CONVERSATIONS);
        senders.spawn(async move {
            let mut last = None;
            for _ in 0..count {
                let sent = ledger
                    .send(
                        SendRequest {
                            team,
                            conversation,
                            sender,
                            request_id: Uuid::new_v4().to_string(),
                            body: body.clone(),
                            run: None,
                        },
                        Utc::now(),
                    )
                    .await
                    .expect("send");
                assert_eq!(sent.message.publication, Publication::PendingPublication);
                last = Some(sent.message.id);
            }
            last
        });
    }
    let last = senders
        .join_all()
        .await
        .into_iter()
        .flatten()
        .collect::<Vec<_>>();
    // Statistics as autovacuum keeps them in a database in steady state. Without this, the
    // tables grow from empty by thousands of rows a second, faster than autovacuum re-analyzes
    // them, and the planner's generic plans for the set-based settle read `receipts` with a
    // sequential scan it believes tiny (BENCHMARKS.md reports both figures).
    sqlx::query("ANALYZE")
        .execute(&s.pool)
        .await
        .expect("analyze");
    last
}

/// One ledger iteration: populate (untimed), then lease + settle every slot `batch` at a time
/// (timed), then check nothing is left due and the last messages are stored (untimed).
async fn ledger_pass(s: &Scene, batch: usize, slots: usize) -> Duration {
    let last = populate(s, slots).await;
    let took = lease_and_settle_all(&s.ledger, LEASE, batch, slots, |l| {
        Locator::new("memory", &l.envelope.message_id.to_string())
    })
    .await;
    let left = s
        .ledger
        .lease_slots(Utc::now(), LEASE, 1)
        .await
        .expect("lease slots");
    assert!(left.is_empty(), "a slot is still due: {left:?}");
    for message in last {
        let m = s.ledger.message(s.team, message).await.expect("message");
        assert_eq!(m.publication, Publication::Stored);
    }
    took
}

/// One raw iteration: `slots` rows inserted `pending` then updated to `done`, `batch` per
/// transaction (timed).
async fn raw_pass(s: &Scene, batch: usize, slots: usize) -> Duration {
    let body = s.body.as_bytes();
    let start = Instant::now();
    let ids: Vec<Uuid> = (0..slots).map(|_| Uuid::new_v4()).collect();
    for chunk in ids.chunks(batch) {
        let at = Utc::now();
        let mut tx = s.pool.begin().await.expect("begin");
        for id in chunk {
            sqlx::query(
                "INSERT INTO bench_raw (id, body, state, created_at) VALUES ($1, $2, 'pending', $3)",
            )
            .bind(id)
            .bind(body)
            .bind(at)
            .execute(&mut *tx)
            .await
            .expect("insert");
        }
        tx.commit().await.expect("commit");
        let mut tx = s.pool.begin().await.expect("begin");
        for id in chunk {
            let done = sqlx::query(
                "UPDATE bench_raw SET state = 'done', done_at = $2 WHERE id = $1 AND state = 'pending'",
            )
            .bind(id)
            .bind(at)
            .execute(&mut *tx)
            .await
            .expect("update");
            assert_eq!(done.rows_affected(), 1);
        }
        tx.commit().await.expect("commit");
    }
    start.elapsed()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Raw,
    Ledger,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Raw => "raw_insert_update",
            Target::Ledger => "ledger_lease_settle",
        }
    }

    async fn pass(self, s: &Scene, batch: usize, slots: usize) -> Duration {
        match self {
            Target::Raw => raw_pass(s, batch, slots).await,
            Target::Ledger => ledger_pass(s, batch, slots).await,
        }
    }
}

/// Σ slots and Σ time per (batch, target).
type Totals = Tally<(usize, Target)>;

fn print_ratio(label: &str, batch: usize, totals: &Totals) {
    let rate = |target: Target| totals.rate(&(batch, target));
    if let (Some(ledger), Some(raw)) = (rate(Target::Ledger), rate(Target::Raw)) {
        eprintln!(
            "{label}batch {batch}: ledger lease+settle {ledger:.0} slots/s, raw insert+update \
             {raw:.0} rows/s; ledger/raw = {:.2}",
            ledger / raw
        );
    }
}

fn relay(c: &mut Criterion) {
    let runtime = support::runtime();
    let db = runtime.block_on(crewbus_benches::kit::postgres::database("relay bench"));
    eprintln!("relay bench: fresh database {}", db.name());
    let scene = Arc::new(runtime.block_on(scene(&db)));
    let totals = Totals::new();

    let measure = measuring();
    let slots = |batch: Batch| {
        if measure {
            batch.slots
        } else {
            batch.test_slots
        }
    };

    for batch in BATCHES {
        let (size, n) = (batch.size, slots(batch));
        let mut group = c.benchmark_group(format!("relay/batch_{size}"));
        group.throughput(Throughput::Elements(n as u64));
        group.sampling_mode(SamplingMode::Flat);
        group.sample_size(10);
        for target in [Target::Raw, Target::Ledger] {
            group.bench_function(target.name(), |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let (scene, totals) = (scene.clone(), totals.clone());
                    async move {
                        let mut took = Duration::ZERO;
                        for _ in 0..iters {
                            took += target.pass(&scene, size, n).await;
                        }
                        totals.add((size, target), iters * n as u64, took);
                        took
                    }
                })
            });
        }
        group.finish();
        print_ratio("", size, &totals);
    }

    // Interleaved rounds: both targets alternate, so drift and load hit both alike.
    let count = if measure { ROUNDS } else { 1 };
    let interleaved = Totals::new();
    runtime.block_on(async {
        for batch in BATCHES {
            let (size, n) = (batch.size, slots(batch));
            for (_, target) in rounds(count, [Target::Raw, Target::Ledger], Order::Same) {
                let took = target.pass(&scene, size, n).await;
                interleaved.add((size, target), n as u64, took);
            }
            print_ratio("interleaved ", size, &interleaved);
        }
    });
    drop(scene);
    runtime.block_on(db.passed());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = relay
}
criterion_main!(benches);
