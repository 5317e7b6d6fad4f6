//! Full-text search (issue 21 item 7), on the embedded store (SQLite) and Postgres, through the
//! use cases (`Bus::search`, `Bus::send`, `Bus::index_pass`) as the HTTP and MCP handlers and the
//! index worker call them (no HTTP: the ledger's cost, not the transport's).
//!
//! Set-up (untimed), per store: a fresh store (SQLite: the test kit's `sqlite_bus`; Postgres: a
//! fresh database on `DATABASE_URL`, composed by `compose::postgres_with_pool`; an unreachable
//! server fails the run loudly).
//!
//! - **Search latency over a large store.** Through the bus: one team of 10 agents and 10
//!   conversations (titles `bench thread <k>`); the searching agent is a member of 8 of them.
//!   Then, with SQL and not through the API, `messages` stored messages, spread round-robin over
//!   the 10 conversations (each sent by the conversation's creator, `stored`, seqs after the
//!   bus's, `indexed_at` set so the index worker leaves them alone; every FK and CHECK of
//!   `messages` holds; no bodies in the body table and no receipts: search reads neither) and
//!   their search rows written exactly as the ledgers' `index` writes them (Postgres: the body
//!   and the `tsvector` literal of the domain's words, title words 1..n weight A, body words
//!   from n + 2; SQLite: the `message_search` row and its contentless FTS5 row, title and body
//!   words joined by spaces). Each body is 20 words drawn from a Zipf-like vocabulary of 5,000
//!   synthetic words `w0`…`w4999` (word k with probability ∝ 1/(k+1): `w0` is in about 80 % of
//!   the messages, `w200` in about 1 %, `w4990` in about 0.05 %). Postgres: `generate_series`
//!   in batches of 100,000, the GIN and btree indexes of `message_search` dropped during the
//!   load and created again from their own definitions, then `VACUUM ANALYZE` (what autovacuum
//!   would have done on a store that grew); SQLite: batched inserts in one transaction (no
//!   `ANALYZE`: the server runs none either). Seeding time is printed.
//!   Timed: a fixed mix of 18 queries (6 one-word, 6 two-word, 6 phrases, rare to very common),
//!   each searched by the member agent for a first page of 20 hits, the mix repeated; two passes,
//!   the first right after seeding, the second right after it (warm). Printed:
//!   p50 and p99 per store, pass and query class (the goal: p99 ≤ 50 ms), each query's
//!   median (nearest-rank, from `support::latency`'s histogram: 3 significant digits; before
//!   it, the sample at index round((n − 1) × p) of the sorted list, one rank off at most), and
//!   Postgres' `shared_buffers`. Checked: every hit is of a conversation of the
//!   agent, and the very common word fills its page.
//! - **Send throughput with search indexing on ÷ off.** Two stores per kind (SQLite: two fresh
//!   stores; Postgres: two fresh databases — the index worker indexes a whole tenant's backlog,
//!   so the off side must not share its ledger), each with a team of 32 agents in one
//!   conversation of two members each. 32 agents, each in a task of its own, send 16-byte
//!   messages as fast as the store answers for a window; the windows alternate on, off, on,
//!   off… (6 each in bench mode). On: the index worker's loop (`workers.rs`: `index_pass`, at
//!   once again after a full batch, else after `INDEX_EVERY` = 1 s) runs during the window;
//!   after the window it is stopped and the backlog left is drained by further passes, and that
//!   drain counts as on-time — so "on" is the rate of sending *and* indexing every message sent.
//!   Off: no indexing. Printed: messages/s on and off, on ÷ off (the goal: ≥ 0.95), and
//!   the share of on-time spent draining. Checked: the on side indexed exactly what it sent.
//!
//! Test mode (`cargo test --bench search`; `scripts/test` runs every bench so): 5,000 messages,
//! the mix once per pass, 0.3 s windows, checked to run, not measured. Bench mode: `cargo bench
//! -p crewbus-benches --bench search` (`SEARCH_BENCH_MESSAGES`, default 1,000,000; the mix 10
//! times per pass; 3 s windows).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use crewbus::bus::Bus;
use crewbus::config::Config;
use crewbus::usecases::search::INDEX_EVERY;
use crewbus_domain::{Agent, SearchDocument, SearchQuery, Uuid};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

mod support;

use crewbus_benches::kit::postgres::database;
use crewbus_benches::kit::store::{STORES, Store, postgres_bus, sqlite_bus};
use support::cpu::load_average;
use support::latency::{Latencies, ms};
use support::measuring;
use support::rounds::{Order, Tally, rounds};
use support::senders::{Sender, burst, sender};

const VOCABULARY: u32 = 5_000;
const WORDS_PER_BODY: usize = 20;
const CONVERSATIONS: usize = 10;
/// Of the conversations, the searching agent is a member of the first this many.
const MEMBER_OF: usize = 8;

/// The query mix: (class, text).
const QUERIES: [(&str, &str); 18] = [
    ("one word", "w0"),
    ("one word", "w3"),
    ("one word", "w50"),
    ("one word", "w200"),
    ("one word", "w1000"),
    ("one word", "w4990"),
    ("two words", "w0 w1"),
    ("two words", "w2 w40"),
    ("two words", "w10 w200"),
    ("two words", "w100 w2000"),
    ("two words", "w300 w600"),
    ("two words", "w1500 w4000"),
    ("phrase", "\"w0 w1\""),
    ("phrase", "\"w1 w0\""),
    ("phrase", "\"w5 w20\""),
    ("phrase", "\"w0 w200\""),
    ("phrase", "\"w30 w30\""),
    ("phrase", "\"w100 w1000\""),
];
const CLASSES: [&str; 3] = ["one word", "two words", "phrase"];

/// A small deterministic generator (xorshift64*): the same corpus on every run and store.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// In [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A word index with probability ∝ 1/(k+1): ⌊e^(u·ln(V+1))⌋ − 1, as the Postgres seed.
    fn word(&mut self) -> u32 {
        let k = (self.unit() * f64::from(VOCABULARY + 1).ln()).exp().floor() as u32;
        k.saturating_sub(1).min(VOCABULARY - 1)
    }
}

/// The team, its conversations and the searching agent, made through the bus.
struct Corpus {
    team: Uuid,
    searcher: Agent,
    /// (conversation, its creator, its title).
    conversations: Vec<(Uuid, Uuid, String)>,
}

async fn corpus(bus: &Bus) -> Corpus {
    let team = bus
        .add_team("search-bench", None, None)
        .await
        .expect("team");
    let mut agents = Vec::new();
    for i in 0..CONVERSATIONS {
        agents.push(
            bus.add_agent(team.id, &format!("agent-{i}"))
                .await
                .expect("agent")
                .agent,
        );
    }
    let searcher = agents[0].clone();
    let mut conversations = Vec::new();
    for k in 0..CONVERSATIONS {
        // The searcher creates (is in) the first MEMBER_OF; the others are between two others.
        let (creator, other) = if k < MEMBER_OF {
            (&agents[0], &agents[1 + k % (CONVERSATIONS - 1)])
        } else {
            (&agents[1 + k % (CONVERSATIONS - 1)], &agents[1])
        };
        let title = format!("bench thread {k}");
        let c = bus
            .create_conversation(creator, &title, &[other.id.to_string()])
            .await
            .expect("conversation");
        conversations.push((c.id, creator.id, title));
    }
    Corpus {
        team: team.id,
        searcher,
        conversations,
    }
}

/// The `tsvector` literal of a title's words (positions 1..n, weight A) and where the body's
/// words start (n + 2), as `SearchDocument::positions` gives them.
fn title_part(title: &str) -> (String, usize) {
    let d = SearchDocument::new(title, None);
    let parts: Vec<String> = d
        .positions()
        .into_iter()
        .map(|(w, ps)| {
            let ps: Vec<String> = ps.iter().map(|(p, _)| format!("{p}A")).collect();
            format!("'{w}':{}", ps.join(","))
        })
        .collect();
    (parts.join(" "), d.title.len() + 2)
}

/// Seeds `n` messages into Postgres with SQL (module docs). Returns the time taken.
async fn seed_postgres(pool: &sqlx::PgPool, c: &Corpus, n: u64) -> Duration {
    let start = Instant::now();
    let ids: Vec<Uuid> = c.conversations.iter().map(|x| x.0).collect();
    let senders: Vec<Uuid> = c.conversations.iter().map(|x| x.1).collect();
    let parts: Vec<(String, usize)> = c.conversations.iter().map(|x| title_part(&x.2)).collect();
    let offset = parts[0].1;
    assert!(parts.iter().all(|p| p.1 == offset), "titles of one length");
    let titles: Vec<String> = parts.into_iter().map(|p| p.0).collect();
    let backend: String = sqlx::query_scalar("SELECT backend FROM conversations WHERE id = $1")
        .bind(ids[0])
        .fetch_one(pool)
        .await
        .expect("backend");
    let base: i64 =
        sqlx::query_scalar("SELECT max(next_seq) FROM conversations WHERE team_id = $1")
            .bind(c.team)
            .fetch_one(pool)
            .await
            .expect("next seq");
    let defs: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes
         WHERE tablename = 'message_search' AND indexname <> 'message_search_pkey'",
    )
    .fetch_all(pool)
    .await
    .expect("index definitions");
    for (name, _) in &defs {
        sqlx::query(&format!("DROP INDEX {name}"))
            .execute(pool)
            .await
            .expect("drop index");
    }
    let t0 = Utc::now() - chrono::Duration::milliseconds(n as i64) - chrono::Duration::hours(1);
    let batch = 100_000u64;
    let mut lo = 0u64;
    while lo < n {
        let hi = (lo + batch).min(n) - 1;
        sqlx::query(
            "WITH b AS (
                 SELECT g AS i, string_agg(w, ' ' ORDER BY p) AS body,
                        string_agg('''' || w || ''':' || (p + $10 - 1), ' ' ORDER BY p) AS doc
                 FROM generate_series($1::bigint, $2::bigint) g
                 CROSS JOIN LATERAL (
                     SELECT p, 'w' || (floor(exp(random() * ln($11::float8 + 1)) + 0 * g)::int - 1) AS w
                     FROM generate_series(1, $12) p) x
                 GROUP BY g
             ), s AS MATERIALIZED (
                 SELECT i, gen_random_uuid() AS id, body, doc,
                        ($4::uuid[])[(i % $6) + 1] AS conversation,
                        ($5::uuid[])[(i % $6) + 1] AS sender,
                        ($9::text[])[(i % $6) + 1] AS title,
                        $7::bigint + i / $6 AS seq,
                        $8::timestamptz + i * interval '1 millisecond' AS sent_at
                 FROM b
             ), m AS (
                 INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                                       body_sha256, body_len, backend, publication, locator,
                                       sent_at, stored_at, indexed_at)
                 SELECT id, $3, conversation, seq, sender, 'seed-' || i,
                        encode(sha256(convert_to(body, 'UTF8')), 'hex'),
                        octet_length(body), $13, 'stored', $13 || ':' || id, sent_at, sent_at,
                        sent_at
                 FROM s
                 RETURNING id
             )
             INSERT INTO message_search
                 (message_id, team_id, conversation_id, sender_id, seq, sent_at, body, document)
             SELECT id, $3, conversation, sender, seq, sent_at, body,
                    (title || ' ' || doc)::tsvector
             FROM s ORDER BY i",
        )
        .bind(lo as i64)
        .bind(hi as i64)
        .bind(c.team)
        .bind(&ids)
        .bind(&senders)
        .bind(CONVERSATIONS as i64)
        .bind(base)
        .bind(t0)
        .bind(&titles)
        .bind(offset as i64)
        .bind(f64::from(VOCABULARY))
        .bind(WORDS_PER_BODY as i32)
        .bind(&backend)
        .execute(pool)
        .await
        .expect("seed a batch");
        lo = hi + 1;
    }
    for (_, def) in &defs {
        sqlx::query(def).execute(pool).await.expect("create index");
    }
    sqlx::query(
        "UPDATE conversations c SET next_seq = m.seq + 1
         FROM (SELECT conversation_id, max(seq) AS seq FROM messages GROUP BY conversation_id) m
         WHERE m.conversation_id = c.id",
    )
    .execute(pool)
    .await
    .expect("next seq");
    sqlx::query("VACUUM ANALYZE messages, message_search")
        .execute(pool)
        .await
        .expect("vacuum analyze");
    start.elapsed()
}

/// Seeds `n` messages into the SQLite store of `dir` with batched inserts in one transaction
/// (module docs). Returns the time taken.
async fn seed_sqlite(dir: &std::path::Path, c: &Corpus, n: u64) -> Duration {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    let start = Instant::now();
    let options = SqliteConnectOptions::new()
        .filename(dir.join("crewbus.db"))
        .journal_mode(SqliteJournalMode::Wal)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(30));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("open the store");
    let mut tx = pool.begin().await.expect("begin");
    let backend: String = sqlx::query_scalar("SELECT backend FROM conversations WHERE id = ?")
        .bind(c.conversations[0].0)
        .fetch_one(&mut *tx)
        .await
        .expect("backend");
    let base: i64 = sqlx::query_scalar("SELECT max(next_seq) FROM conversations WHERE team_id = ?")
        .bind(c.team)
        .fetch_one(&mut *tx)
        .await
        .expect("next seq");
    let ord: i64 = sqlx::query_scalar("SELECT coalesce(max(ord), 0) + 1 FROM message_search")
        .fetch_one(&mut *tx)
        .await
        .expect("ord");
    let titles: Vec<String> = c
        .conversations
        .iter()
        .map(|x| SearchDocument::new(&x.2, None).title.join(" "))
        .collect();
    let t0 = (Utc::now() - chrono::Duration::milliseconds(n as i64) - chrono::Duration::hours(1))
        .timestamp_micros();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let batch = 500u64;
    let mut lo = 0u64;
    while lo < n {
        let hi = (lo + batch).min(n);
        let rows: Vec<(u64, Uuid, String)> = (lo..hi)
            .map(|i| {
                let id = Uuid::from_u128(u128::from(rng.next()) << 64 | u128::from(rng.next()));
                let words: Vec<String> = (0..WORDS_PER_BODY)
                    .map(|_| format!("w{}", rng.word()))
                    .collect();
                (i, id, words.join(" "))
            })
            .collect();
        let mut m = sqlx::QueryBuilder::new(
            "INSERT INTO messages (id, team_id, conversation_id, seq, sender_id, request_id,
                 body_sha256, body_len, backend, publication, locator, sent_at, stored_at,
                 indexed_at) ",
        );
        m.push_values(&rows, |mut b, (i, id, body)| {
            let k = (*i as usize) % CONVERSATIONS;
            let at = t0 + *i as i64 * 1000;
            b.push_bind(*id)
                .push_bind(c.team)
                .push_bind(c.conversations[k].0)
                .push_bind(base + (*i / CONVERSATIONS as u64) as i64)
                .push_bind(c.conversations[k].1)
                .push_bind(format!("seed-{i}"))
                .push_bind(format!("{:x}", Sha256::digest(body.as_bytes())))
                .push_bind(body.len() as i64)
                .push_bind(backend.clone())
                .push_bind("stored")
                .push_bind(format!("{backend}:{id}"))
                .push_bind(at)
                .push_bind(at)
                .push_bind(at);
        });
        m.build().execute(&mut *tx).await.expect("seed messages");
        let mut s = sqlx::QueryBuilder::new(
            "INSERT INTO message_search
                 (ord, message_id, team_id, conversation_id, sender_id, seq, sent_at, body) ",
        );
        s.push_values(&rows, |mut b, (i, id, body)| {
            let k = (*i as usize) % CONVERSATIONS;
            b.push_bind(ord + *i as i64)
                .push_bind(*id)
                .push_bind(c.team)
                .push_bind(c.conversations[k].0)
                .push_bind(c.conversations[k].1)
                .push_bind(base + (*i / CONVERSATIONS as u64) as i64)
                .push_bind(t0 + *i as i64 * 1000)
                .push_bind(body.clone());
        });
        s.build().execute(&mut *tx).await.expect("seed search rows");
        let mut f = sqlx::QueryBuilder::new("INSERT INTO message_search_fts (rowid, title, body) ");
        f.push_values(&rows, |mut b, (i, _, body)| {
            b.push_bind(ord + *i as i64)
                .push_bind(titles[(*i as usize) % CONVERSATIONS].clone())
                .push_bind(body.clone());
        });
        f.build()
            .execute(&mut *tx)
            .await
            .expect("seed the FTS5 index");
        lo = hi;
    }
    sqlx::query(
        "UPDATE conversations SET next_seq = (SELECT max(seq) + 1 FROM messages m
             WHERE m.conversation_id = conversations.id)
         WHERE team_id = ?",
    )
    .bind(c.team)
    .execute(&mut *tx)
    .await
    .expect("next seq");
    tx.commit().await.expect("commit");
    let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&pool)
        .await;
    pool.close().await;
    start.elapsed()
}

/// One pass of the query mix, `repeat` times: each query's latencies, in mix order.
async fn search_pass(bus: &Bus, c: &Corpus, repeat: usize) -> Vec<Latencies> {
    let mine: Vec<Uuid> = c.conversations[..MEMBER_OF].iter().map(|x| x.0).collect();
    let mut out = vec![Latencies::new(); QUERIES.len()];
    for _ in 0..repeat {
        for (q, (_, text)) in QUERIES.iter().enumerate() {
            let query = SearchQuery::new(*text);
            let t = Instant::now();
            let page = bus.search(&c.searcher, &query).await.expect("search");
            out[q].record(t.elapsed());
            assert!(
                page.hits.iter().all(|h| mine.contains(&h.conversation)),
                "a hit outside the agent's conversations"
            );
            if *text == "w0" {
                assert_eq!(page.hits.len(), 20, "the very common word fills its page");
                assert!(page.next_offset.is_some());
                assert!(!page.hits[0].snippet.is_empty());
            }
        }
    }
    out
}

struct SearchFigures {
    store: Store,
    messages: u64,
    seeding: Duration,
    shared_buffers: Option<String>,
    /// Per pass (first, warm), per query: latencies.
    passes: Vec<Vec<Latencies>>,
}

async fn search_bench(store: Store, bench: bool) -> SearchFigures {
    let messages: u64 = if bench {
        std::env::var("SEARCH_BENCH_MESSAGES")
            .ok()
            .map(|v| v.parse().expect("SEARCH_BENCH_MESSAGES: a count"))
            .unwrap_or(1_000_000)
    } else {
        5_000
    };
    let repeat = if bench { 10 } else { 1 };
    let mut config = Config::default();
    let (bus, db, dir) = match store {
        Store::Sqlite => {
            let (bus, dir) = sqlite_bus(&mut config).await;
            (bus, None, Some(dir))
        }
        Store::Postgres => {
            let db = database("search bench").await;
            let bus = postgres_bus(&config, db.pool().clone()).await;
            (bus, Some(db), None)
        }
    };
    let c = corpus(&bus).await;
    let (seeding, shared_buffers) = match (&db, &dir) {
        (Some(db), _) => {
            let took = seed_postgres(db.pool(), &c, messages).await;
            let sb: String = sqlx::query_scalar("SHOW shared_buffers")
                .fetch_one(db.pool())
                .await
                .expect("shared_buffers");
            (took, Some(sb))
        }
        (None, Some(dir)) => (seed_sqlite(dir.path(), &c, messages).await, None),
        _ => unreachable!(),
    };
    eprintln!(
        "search bench: {} seeded with {messages} messages in {:.1} s",
        store.name(),
        seeding.as_secs_f64()
    );
    let first = search_pass(&bus, &c, repeat).await;
    let warm = search_pass(&bus, &c, repeat).await;
    if let Some(db) = db {
        db.passed().await;
    }
    SearchFigures {
        store,
        messages,
        seeding,
        shared_buffers,
        passes: vec![first, warm],
    }
}

/// The index worker's loop (`workers.rs`), until `stop`: messages indexed.
fn indexer(bus: Bus, stop: Arc<Notify>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut indexed = 0;
        loop {
            let p = bus.index_pass().await.expect("index pass");
            indexed += p.indexed;
            let wait = if p.more { Duration::ZERO } else { INDEX_EVERY };
            tokio::select! {
                () = stop.notified() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        indexed
    })
}

struct SendFigures {
    store: &'static str,
    on: f64,
    off: f64,
    drain_share: f64,
}

async fn send_bench(store: &'static str, on: Sender, off: Sender, bench: bool) -> SendFigures {
    let (windows, window) = if bench {
        (6, Duration::from_secs(3))
    } else {
        (1, Duration::from_millis(300))
    };
    let sent = Tally::new();
    let (mut indexed, mut drain) = (0, Duration::ZERO);
    for (round, indexing) in rounds(windows, [true, false], Order::Same) {
        if !indexing {
            let (n, t) = burst(&off, window, round).await;
            sent.add(false, n, t);
            continue;
        }
        let stop = Arc::new(Notify::new());
        let worker = indexer(on.bus.clone(), stop.clone());
        let (n, t) = burst(&on, window, round).await;
        let d = Instant::now();
        stop.notify_one();
        indexed += worker.await.expect("index worker");
        loop {
            let p = on.bus.index_pass().await.expect("drain");
            indexed += p.indexed;
            if p.listed == 0 {
                break;
            }
        }
        drain += d.elapsed();
        sent.add(true, n, t + d.elapsed());
    }
    let rate = |indexing| sent.rate(&indexing).expect("nothing was sent");
    let (on, off) = (rate(true), rate(false));
    assert_eq!(
        indexed,
        sent.items(&true),
        "the on side indexes what it sent"
    );
    SendFigures {
        store,
        on,
        off,
        drain_share: drain.as_secs_f64() / sent.sum(&true).1.as_secs_f64(),
    }
}

fn main() {
    let bench = measuring();
    eprintln!(
        "search bench ({}): load average {}",
        if bench { "bench mode" } else { "test mode" },
        load_average()
    );
    let runtime = support::runtime();
    runtime.block_on(async {
        let mut searches = Vec::new();
        for store in STORES {
            searches.push(search_bench(store, bench).await);
        }
        eprintln!("search bench: load average {} after searching", load_average());
        let mut sends = Vec::new();
        {
            let (on, _on_dir) = sqlite_bus(&mut Config::default()).await;
            let (off, _off_dir) = sqlite_bus(&mut Config::default()).await;
            let (on, off) = (sender(on, "indexed").await, sender(off, "unindexed").await);
            sends.push(send_bench("sqlite", on, off, bench).await);
        }
        {
            let (on_db, off_db) = (
                database("search bench, indexing on").await,
                database("search bench, indexing off").await,
            );
            let config = Config::default();
            let on = sender(postgres_bus(&config, on_db.pool().clone()).await, "indexed").await;
            let off = postgres_bus(&config, off_db.pool().clone()).await;
            let off = sender(off, "unindexed").await;
            sends.push(send_bench("postgres", on, off, bench).await);
            on_db.passed().await;
            off_db.passed().await;
        }
        eprintln!();
        for s in &searches {
            eprintln!(
                "{}: {} messages seeded in {:.1} s{}",
                s.store.name(),
                s.messages,
                s.seeding.as_secs_f64(),
                s.shared_buffers
                    .as_ref()
                    .map(|b| format!(", shared_buffers {b}"))
                    .unwrap_or_default()
            );
        }
        eprintln!();
        eprintln!("| store | pass | class | searches | p50 (ms) | p99 (ms) |");
        eprintln!("|---|---|---|---:|---:|---:|");
        for s in &searches {
            for (p, pass) in s.passes.iter().enumerate() {
                let label = if p == 0 { "first" } else { "warm" };
                let mut all = Latencies::new();
                for class in CLASSES {
                    let mut l = Latencies::new();
                    for (_, q) in QUERIES.iter().zip(pass).filter(|((c, _), _)| *c == class) {
                        l.merge(q);
                    }
                    all.merge(&l);
                    eprintln!(
                        "| {} | {label} | {class} | {} | {:.1} | {:.1} |",
                        s.store.name(),
                        l.len(),
                        ms(l.p50()),
                        ms(l.p99())
                    );
                }
                eprintln!(
                    "| {} | {label} | **all** | {} | {:.1} | {:.1} |",
                    s.store.name(),
                    all.len(),
                    ms(all.p50()),
                    ms(all.p99())
                );
            }
        }
        eprintln!();
        eprintln!("| query | sqlite first / warm median (ms) | postgres first / warm median (ms) |");
        eprintln!("|---|---:|---:|");
        for (q, (_, text)) in QUERIES.iter().enumerate() {
            let median = |s: &SearchFigures, p: usize| ms(s.passes[p][q].p50());
            eprintln!(
                "| `{text}` | {:.1} / {:.1} | {:.1} / {:.1} |",
                median(&searches[0], 0),
                median(&searches[0], 1),
                median(&searches[1], 0),
                median(&searches[1], 1)
            );
        }
        eprintln!();
        eprintln!("| store | indexing on (msg/s) | indexing off (msg/s) | on ÷ off | drain share of on-time |");
        eprintln!("|---|---:|---:|---:|---:|");
        for f in &sends {
            eprintln!(
                "| {} | {:.0} | {:.0} | {:.3} | {:.1} % |",
                f.store,
                f.on,
                f.off,
                f.on / f.off,
                f.drain_share * 100.0
            );
        }
        eprintln!();
        eprintln!("search bench: load average {} at the end", load_average());
    });
}
