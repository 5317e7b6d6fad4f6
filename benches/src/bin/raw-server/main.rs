//! `crewbus-raw-server`: the raw same-work baseline of `scripts/bench-e2e` (issue 14).
//!
//! A minimal axum + sqlx + async-nats program that serves the HTTP routes `crewbus-load` uses
//! and does the same durable work per message as `crewbus serve` on a Postgres ledger with
//! JetStream bodies and inbox — with no outbox, relay, hand-outs, journal, quotas, retention,
//! metrics or configuration. What it does per message:
//!
//! - **send**, a two-stage pipeline with group commit (a batch is whatever queued while the
//!   stage was busy, at most `--batch-max` requests): stage 1 publishes the batch's bodies to
//!   the body stream concurrently (subject `raw.body.<conversation>`, `Nats-Msg-Id` =
//!   `<conversation>:<request_id>:<body digest>`, so a retry stores nothing twice) and waits
//!   for every PubAck;
//!   stage 2, while stage 1 publishes the next batch, runs one transaction that locks the
//!   batch's conversations `FOR NO KEY UPDATE` in id order, reads membership and request ids in
//!   one statement, decides every request in queue order (not a member → 403, a repeated
//!   request id → the first message (200) or 409 for another body), bumps `next_seq` and
//!   inserts the messages (with their body's stream sequence) and one receipt per recipient in
//!   one statement, commits and answers 201; then publishes one reference per recipient
//!   (subject `raw.inbox.<agent>`, `Nats-Msg-Id` = `<message>:<agent>`), each retried for up
//!   to about 10 s. A repeat (200) publishes its references again (deduplicated by the broker
//!   within its 120 s duplicate window), so a retried send whose first answer was lost gets
//!   its references. An answered message thus has its body in JetStream and its rows in
//!   Postgres, as with crewbus. A conversation that does not exist is 403, like one the sender
//!   is not a member of. A refused send (403, 409) leaves its body in the body stream, unused:
//!   bodies go first.
//! - **fetch**: pulls up to `limit` references from the agent's durable pull consumer (explicit
//!   ack), reads their messages and receipts in one statement and their bodies from the body
//!   stream (direct get), acknowledges a reference whose receipt is already committed (a
//!   redelivery after commit-but-no-ack) and hands out the others under a fresh delivery id.
//! - **confirm**: commits the receipts of the given delivery ids in one statement (locked in
//!   message order), then acknowledges their references (double ack) and answers, per delivery
//!   id in request order, `confirmed` (this call committed the receipt; once per message),
//!   `already_confirmed` (committed before, e.g. a retried confirm) or `unknown_delivery`.
//! - **history** and **receipts** reads for the load tool's zero-loss check (`stored_at` is
//!   the send's time: the body was stored before the commit; receipts of a message the caller
//!   cannot see are `[]`), `GET /v1/me`, `POST /v1/conversations`, `GET /healthz`.
//!
//! Refusals are `{code, message}` with 400 (`invalid`), 401 (`unauthenticated`), 403
//! (`forbidden`), 409 (`conflict`) or 503 (`unavailable`: the database or the broker failed;
//! retryable).
//!
//! It is **not** crash-safe (a crash between a commit and its reference publishes loses those
//! references, and nothing tops them up: that is what crewbus's outbox and ledger top-up are
//! for), keeps tokens and delivery ids in memory,
//! and trusts its input more than crewbus does. It exists only to be measured against.
//!
//! Usage: `crewbus-raw-server --database-url URL --nats-url URL --listen 127.0.0.1:PORT
//! --tokens-file PATH [--agents 4] [--batch-max 64] [--pool 10]` (the pool size and batch
//! bound are crewbus's defaults). It creates its tables in the database
//! (which should be fresh), its two streams on the server (`RAW_BODIES`, `RAW_INBOX`, replaced
//! if present), one team of `--agents` agents, writes their bearer tokens to `--tokens-file`
//! (one per line, written last: its presence means ready) and serves until SIGTERM or Ctrl-C.

mod app;
mod directory;
mod history;
mod inbox;
mod send;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use axum::Router;
use axum::routing::{get, post};
use clap::Parser;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::app::App;
use crate::directory::{create_conversation, me};
use crate::history::{history, receipts};
use crate::inbox::{confirm, fetch};
use crate::send::{batcher, send};

const BODY_STREAM: &str = "RAW_BODIES";
const INBOX_STREAM: &str = "RAW_INBOX";

/// The raw same-work baseline server (see the module docs).
#[derive(Debug, Parser)]
#[command(
    name = "crewbus-raw-server",
    about = "The raw same-work baseline of scripts/bench-e2e: crewbus's HTTP routes and durable \
             work per message (Postgres rows, JetStream bodies and references) with no outbox, \
             relay or hand-outs",
    long_about = None,
    after_help = "It creates its tables in --database-url (use a fresh database), DELETES and \
                  recreates the streams RAW_BODIES and RAW_INBOX on --nats-url, creates one team \
                  of --agents agents (at least 2) and writes their bearer tokens to \
                  --tokens-file (removed first; written last, so its presence means ready). \
                  Drive it with `crewbus-load --url http://<listen> --tokens-file <file>`. Not \
                  crash-safe: a benchmark baseline only. Stops on SIGTERM or Ctrl-C.\n\n\
                  Example:\n  crewbus-raw-server --database-url postgres://postgres@127.0.0.1:5432/raw \\\n    \
                  --nats-url nats://127.0.0.1:4222 --listen 127.0.0.1:7701 --tokens-file /tmp/raw-tokens"
)]
struct Args {
    /// Postgres URL of a fresh database (its tables are created there).
    #[arg(long)]
    database_url: String,
    /// NATS URL with JetStream (`nats://user:password@host:port` when the server needs them).
    #[arg(long)]
    nats_url: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7701")]
    listen: SocketAddr,
    /// Agents of the one team it creates (at least 2).
    #[arg(long, default_value_t = 4)]
    agents: usize,
    /// Where to write the agents' bearer tokens (one per line), once ready.
    #[arg(long)]
    tokens_file: PathBuf,
    /// Most send requests one commit takes.
    #[arg(long, default_value_t = 64)]
    batch_max: usize,
    /// Postgres connections in the pool (crewbus's default).
    #[arg(long, default_value_t = 10)]
    pool: u32,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS raw_agents (id uuid PRIMARY KEY, team uuid NOT NULL, token text UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS raw_conversations (id uuid PRIMARY KEY, title text NOT NULL, next_seq bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS raw_members (conversation uuid NOT NULL REFERENCES raw_conversations, agent uuid NOT NULL REFERENCES raw_agents, PRIMARY KEY (conversation, agent));
CREATE TABLE IF NOT EXISTS raw_messages (id uuid PRIMARY KEY, conversation uuid NOT NULL REFERENCES raw_conversations, seq bigint NOT NULL, sender uuid NOT NULL, request_id text NOT NULL, body_digest bytea NOT NULL, sent_at timestamptz NOT NULL, body_seq bigint NOT NULL, UNIQUE (conversation, request_id), UNIQUE (conversation, seq));
CREATE TABLE IF NOT EXISTS raw_receipts (message uuid NOT NULL REFERENCES raw_messages, recipient uuid NOT NULL, delivered_at timestamptz, PRIMARY KEY (message, recipient));
";

async fn streams(js: &jetstream::Context) -> Result<stream::Stream, Box<dyn std::error::Error>> {
    for name in [BODY_STREAM, INBOX_STREAM] {
        let _ = js.delete_stream(name).await; // a previous run's
    }
    let bodies = js
        .create_stream(stream::Config {
            name: BODY_STREAM.into(),
            subjects: vec!["raw.body.>".into()],
            allow_direct: true,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await?;
    js.create_stream(stream::Config {
        name: INBOX_STREAM.into(),
        subjects: vec!["raw.inbox.>".into()],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await?;
    Ok(bodies)
}

/// Connects to `url`; a `user:password@` in it is sent as the user and password (the client
/// does not read them from the URL itself).
async fn connect_nats(url: &str) -> Result<async_nats::Client, Box<dyn std::error::Error>> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("nats", url));
    let client = match rest.rsplit_once('@') {
        Some((credentials, host)) => {
            let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
            async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
                .connect(format!("{scheme}://{host}"))
                .await?
        }
        None => async_nats::connect(url).await?,
    };
    Ok(client)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crewbus-raw-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `what: error` for a failed start-up step.
fn step<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Sets up (listener and tokens file first, so a bad `--listen` or `--tokens-file` changes
/// nothing), then serves until SIGTERM or Ctrl-C. Errors: the failed step and its cause.
async fn run(args: Args) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(step("--listen"))?;
    match std::fs::remove_file(&args.tokens_file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("--tokens-file {}: {e}", args.tokens_file.display()));
        }
        _ => {}
    }
    let tmp = args.tokens_file.with_extension("partial");
    std::fs::write(&tmp, "").map_err(|e| format!("--tokens-file {}: {e}", tmp.display()))?;
    let pool = PgPoolOptions::new()
        .max_connections(args.pool)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&args.database_url)
        .await
        .map_err(step("--database-url"))?;
    sqlx::raw_sql(SCHEMA)
        .execute(&pool)
        .await
        .map_err(step("creating the tables"))?;
    let nats = connect_nats(&args.nats_url)
        .await
        .map_err(step("--nats-url"))?;
    let js = jetstream::new(nats.clone());
    let bodies = streams(&js).await.map_err(step("creating the streams"))?;
    let inbox = js
        .get_stream(INBOX_STREAM)
        .await
        .map_err(step("the inbox stream"))?;

    let team = Uuid::new_v4();
    let mut tokens = HashMap::new();
    let mut consumers = HashMap::new();
    for _ in 0..args.agents.max(2) {
        let (id, token) = (Uuid::new_v4(), format!("raw_{}", Uuid::new_v4().simple()));
        sqlx::query("INSERT INTO raw_agents (id, team, token) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(team)
            .bind(&token)
            .execute(&pool)
            .await
            .map_err(step("creating the agents"))?;
        let consumer = inbox
            .create_consumer(pull::Config {
                durable_name: Some(id.simple().to_string()),
                filter_subject: format!("raw.inbox.{id}"),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            })
            .await
            .map_err(step("creating the agents' consumers"))?;
        consumers.insert(id, consumer);
        tokens.insert(token, id);
    }

    let (sends, queue) = mpsc::channel(4096);
    let app = Arc::new(App {
        pool,
        nats,
        js,
        bodies,
        team,
        tokens,
        consumers,
        deliveries: Mutex::new(HashMap::new()),
        sends,
    });
    tokio::spawn(batcher(app.clone(), queue, args.batch_max.max(1)));
    let router = Router::new()
        .route("/v1/me", get(me))
        .route("/v1/conversations", post(create_conversation))
        .route("/v1/conversations/{id}/messages", post(send).get(history))
        .route("/v1/inbox/fetch", post(fetch))
        .route("/v1/inbox/confirm", post(confirm))
        .route("/v1/messages/{id}/receipts", get(receipts))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(app.clone());
    let lines: Vec<&str> = app.tokens.keys().map(String::as_str).collect();
    std::fs::write(&tmp, lines.join("\n") + "\n")
        .and_then(|()| std::fs::rename(&tmp, &args.tokens_file))
        .map_err(|e| format!("--tokens-file {}: {e}", args.tokens_file.display()))?;
    eprintln!("crewbus-raw-server: listening on {}", args.listen);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        })
        .await
        .map_err(step("serving"))
}
