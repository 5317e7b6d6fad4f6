-- crewbus bus schema on SQLite: the ledger (teams, agents, conversations, members, messages,
-- receipts, outbox slots, inbox events, hand-outs), runs and their journal, the body table and
-- the inbox queue. The same tables and invariants as the Postgres schema, in SQLite's terms:
--
-- - STRICT tables: a value of the wrong type is refused, never coerced.
-- - ids are 16-byte BLOBs (sqlx's UUID encoding), compared bytewise like Postgres' uuid;
-- - times are INTEGER microseconds since the Unix epoch, always bound by the application (an
--   injected clock; no column defaults to the current time);
-- - booleans are INTEGER 0/1, CHECKed;
-- - counters are INTEGER (i64), CHECKed non-negative;
-- - text compares bytewise (SQLite's BINARY collation, Postgres' COLLATE "C").
--
-- There is no row locking in SQLite: every write transaction starts with BEGIN IMMEDIATE on the
-- adapter's single write connection, so write transactions are serialised as a whole; the
-- invariants below are still enforced by the database itself.

CREATE TABLE teams (
    id            BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    tenant        TEXT    NOT NULL CHECK (tenant <> ''),
    name          TEXT    NOT NULL CHECK (name <> ''),
    body_backend  TEXT    NOT NULL CHECK (trim(body_backend) <> ''),
    inbox         TEXT    NOT NULL CHECK (trim(inbox) <> ''),
    created_at    INTEGER NOT NULL,
    UNIQUE (tenant, name)
) STRICT;

CREATE TABLE agents (
    id             BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    team_id        BLOB    NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name           TEXT    NOT NULL CHECK (name <> ''),
    recipient_key  TEXT    NOT NULL CHECK (length(recipient_key) BETWEEN 1 AND 128
                                           AND recipient_key NOT GLOB '*[^A-Za-z0-9_-]*'),
    token_hash     BLOB    NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at     INTEGER NOT NULL,
    revoked_at     INTEGER,
    UNIQUE (team_id, name),
    UNIQUE (team_id, id)
) STRICT;

-- next_seq is the gap-free counter, taken and bumped inside the send transaction.
-- ord (the rowid) orders conversations by creation.
CREATE TABLE conversations (
    ord         INTEGER NOT NULL PRIMARY KEY,
    id          BLOB    NOT NULL UNIQUE CHECK (length(id) = 16),
    team_id     BLOB    NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    title       TEXT    NOT NULL CHECK (title <> ''),
    backend     TEXT    NOT NULL CHECK (trim(backend) <> ''),
    next_seq    INTEGER NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    created_at  INTEGER NOT NULL,
    UNIQUE (team_id, id)
) STRICT;

CREATE TABLE members (
    conversation_id  BLOB    NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    agent_id         BLOB    NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    recipient_key    TEXT    NOT NULL,
    joined_at        INTEGER NOT NULL,
    PRIMARY KEY (conversation_id, agent_id)
) STRICT;
CREATE INDEX members_agent ON members (agent_id);

-- publication: 'stored' (locator and stored_at set), 'pending_publication' (an outbox slot holds
-- it), 'failed' (failure holds the bus's error code; the slot is kept as evidence).
CREATE TABLE messages (
    id               BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    team_id          BLOB    NOT NULL,
    conversation_id  BLOB    NOT NULL,
    seq              INTEGER NOT NULL CHECK (seq >= 1),
    sender_id        BLOB    NOT NULL REFERENCES agents (id),
    request_id       TEXT    NOT NULL CHECK (request_id <> ''),
    body_sha256      TEXT    NOT NULL CHECK (length(body_sha256) = 64
                                             AND body_sha256 NOT GLOB '*[^0-9a-f]*'),
    body_len         INTEGER NOT NULL CHECK (body_len >= 0),
    backend          TEXT    NOT NULL CHECK (trim(backend) <> ''),
    publication      TEXT    NOT NULL
                     CHECK (publication IN ('stored', 'pending_publication', 'failed')),
    locator          TEXT,
    failure          TEXT,
    sent_at          INTEGER NOT NULL,
    stored_at        INTEGER,
    retained_at      INTEGER,
    FOREIGN KEY (team_id, conversation_id) REFERENCES conversations (team_id, id)
        ON DELETE CASCADE,
    UNIQUE (conversation_id, seq),
    UNIQUE (conversation_id, request_id),
    CHECK ((publication = 'stored') = (locator IS NOT NULL AND stored_at IS NOT NULL)),
    CHECK ((publication = 'failed') = (failure IS NOT NULL)),
    CHECK (retained_at IS NULL OR publication = 'stored')
) STRICT;
CREATE INDEX messages_unsettled ON messages (team_id, sent_at)
    WHERE publication <> 'stored';
CREATE INDEX messages_retention ON messages (team_id, backend, stored_at)
    WHERE publication = 'stored' AND retained_at IS NULL;

CREATE TABLE receipts (
    message_id       BLOB    NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id     BLOB    NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    recipient_key    TEXT    NOT NULL,
    stored_at        INTEGER,
    delivered_at     INTEGER,
    acknowledged_at  INTEGER,
    PRIMARY KEY (message_id, recipient_id),
    CHECK (acknowledged_at IS NULL OR delivered_at IS NOT NULL)
) STRICT;
CREATE INDEX receipts_undelivered ON receipts (recipient_id, message_id)
    WHERE delivered_at IS NULL;

-- Outbox slots: the body (UTF-8 as a BLOB) until the backend confirms it. Leasing bumps
-- generation (the fencing token) and sets leased_until; a settlement applies only with the
-- current generation before leased_until. A failed slot is kept and never leased again.
CREATE TABLE outbox_slots (
    ord              INTEGER NOT NULL PRIMARY KEY,
    id               BLOB    NOT NULL UNIQUE CHECK (length(id) = 16),
    tenant           TEXT    NOT NULL,
    message_id       BLOB    NOT NULL UNIQUE REFERENCES messages (id) ON DELETE CASCADE,
    team_id          BLOB    NOT NULL,
    conversation_id  BLOB    NOT NULL,
    backend          TEXT    NOT NULL CHECK (trim(backend) <> ''),
    publish_key      BLOB    NOT NULL UNIQUE CHECK (length(publish_key) = 16),
    body             BLOB    NOT NULL,
    generation       INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 2147483647),
    uncertain        INTEGER NOT NULL DEFAULT 0 CHECK (uncertain IN (0, 1)),
    failed           INTEGER NOT NULL DEFAULT 0 CHECK (failed IN (0, 1)),
    next_attempt_at  INTEGER NOT NULL,
    leased_until     INTEGER,
    last_error       TEXT
) STRICT;
CREATE INDEX outbox_slots_due ON outbox_slots (tenant, next_attempt_at, ord) WHERE failed = 0;

-- Inbox events: one per (kind, message, recipient), enqueued when the body is stored.
CREATE TABLE inbox_events (
    ord            INTEGER NOT NULL PRIMARY KEY,
    id             BLOB    NOT NULL UNIQUE CHECK (length(id) = 16),
    tenant         TEXT    NOT NULL,
    team_id        BLOB    NOT NULL,
    kind           TEXT    NOT NULL DEFAULT 'message' CHECK (kind <> ''),
    message_id     BLOB    NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id   BLOB    NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    recipient_key  TEXT    NOT NULL,
    inbox          TEXT    NOT NULL CHECK (trim(inbox) <> ''),
    payload        TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    leased_until   INTEGER,
    published_at   INTEGER,
    UNIQUE (kind, message_id, recipient_id)
) STRICT;
CREATE INDEX inbox_events_unpublished ON inbox_events (tenant, ord) WHERE published_at IS NULL;

-- Hand-outs: each message handed to a recipient, with the inbox ack to send once the receipt is
-- committed, held until held_until unless confirmed. ord orders hand-outs of one pair.
CREATE TABLE hand_outs (
    ord              INTEGER NOT NULL PRIMARY KEY,
    delivery_id      BLOB    NOT NULL UNIQUE CHECK (length(delivery_id) = 16),
    team_id          BLOB    NOT NULL,
    message_id       BLOB    NOT NULL,
    recipient_id     BLOB    NOT NULL,
    conversation_id  BLOB    NOT NULL,
    seq              INTEGER NOT NULL CHECK (seq >= 1),
    redelivered      INTEGER NOT NULL CHECK (redelivered IN (0, 1)),
    issued_at        INTEGER NOT NULL,
    held_until       INTEGER NOT NULL CHECK (held_until >= issued_at),
    ack_inbox        TEXT,
    ack_subject      TEXT,
    confirmed_at     INTEGER,
    FOREIGN KEY (message_id, recipient_id) REFERENCES receipts (message_id, recipient_id)
        ON DELETE CASCADE,
    CHECK ((ack_inbox IS NULL) = (ack_subject IS NULL))
) STRICT;
CREATE INDEX hand_outs_pair ON hand_outs (message_id, recipient_id, ord);

-- Runs and their journal. last_seq is the gap-free journal counter, bumped in the transaction
-- of the record; a sealed run (sealed_at set) refuses appends.
CREATE TABLE runs (
    id           BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    tenant       TEXT    NOT NULL,
    team_id      BLOB    NOT NULL,
    agent_id     BLOB    NOT NULL,
    admitted_at  INTEGER NOT NULL,
    last_seq     INTEGER NOT NULL CHECK (last_seq >= 1),
    sealed_at    INTEGER,
    outcome      TEXT    CHECK (outcome IN ('succeeded', 'failed', 'cancelled')),
    CHECK ((sealed_at IS NULL) = (outcome IS NULL))
) STRICT;
CREATE INDEX runs_agent ON runs (team_id, agent_id);

-- One record per (run, seq); kind is the record kind as serde's JSON text.
CREATE TABLE journal_records (
    run_id  BLOB    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL CHECK (seq >= 1),
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

-- Bodies: the table SqliteBackend reads, written by its publish and by the ledger's send
-- transaction. No foreign key to messages: the body backend stands alone.
CREATE TABLE bodies (
    message_id       BLOB    NOT NULL PRIMARY KEY CHECK (length(message_id) = 16),
    team_id          BLOB    NOT NULL,
    conversation_id  BLOB    NOT NULL,
    publish_key      BLOB    NOT NULL UNIQUE,
    body             BLOB    NOT NULL,
    stored_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX bodies_retention ON bodies (team_id, stored_at);

-- The inbox queue: one row per reference. seq is the reference's position (stream_seq):
-- AUTOINCREMENT, so a position is never reused, even after the newest row is purged.
-- visible_at is when it may be handed out (again). Acknowledged rows are kept (acked_at) so
-- dedup on the event id holds for the life of the row.
CREATE TABLE inbox_queue (
    seq            INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    team_id        BLOB    NOT NULL,
    recipient_key  TEXT    NOT NULL CHECK (length(recipient_key) BETWEEN 1 AND 128
                                           AND recipient_key NOT GLOB '*[^A-Za-z0-9_-]*'),
    event_id       BLOB    NOT NULL,
    payload        BLOB    NOT NULL,
    stored_at      INTEGER NOT NULL,
    visible_at     INTEGER NOT NULL,
    deliveries     INTEGER NOT NULL DEFAULT 0 CHECK (deliveries >= 0),
    acked_at       INTEGER,
    UNIQUE (team_id, event_id)
) STRICT;
CREATE INDEX inbox_queue_ready ON inbox_queue (team_id, recipient_key, seq)
    WHERE acked_at IS NULL;

-- The queue's consumers: created on a recipient's first fetch.
CREATE TABLE inbox_consumers (
    team_id        BLOB    NOT NULL,
    recipient_key  TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (team_id, recipient_key)
) STRICT;
