-- crewbus bus schema: the ledger (teams, agents, conversations, members, messages, receipts,
-- outbox slots, inbox events, hand-outs), runs and their journal, the body table and the inbox
-- queue.
--
-- Invariants are enforced by the database itself (unique keys, CHECKs, foreign keys), so a bug
-- in a use case cannot write two messages with one seq or two receipts for one recipient.
-- Times are always bound by the application (an injected clock): no column defaults to now().
-- Counters are bigint (the domain's u64 values are kept within i64 range) and CHECKed
-- non-negative.

-- Teams: the unit of isolation, inside a tenant. A team records its default body backend and
-- its inbox (the names a Backends registry answers for: 'postgres', 'memory', 'jetstream').
CREATE TABLE teams (
    id            uuid PRIMARY KEY,
    tenant        text        NOT NULL CHECK (tenant <> ''),
    name          text        NOT NULL CHECK (name <> ''),
    body_backend  text        NOT NULL CHECK (btrim(body_backend) <> ''),
    inbox         text        NOT NULL CHECK (btrim(inbox) <> ''),
    created_at    timestamptz NOT NULL,
    UNIQUE (tenant, name)
);

-- Agents: members of one team, found by the SHA-256 of their bearer token (never the token).
CREATE TABLE agents (
    id             uuid PRIMARY KEY,
    team_id        uuid        NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name           text        NOT NULL CHECK (name <> ''),
    recipient_key  text        NOT NULL CHECK (recipient_key ~ '^[A-Za-z0-9_-]{1,128}$'),
    token_hash     bytea       NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    created_at     timestamptz NOT NULL,
    revoked_at     timestamptz,
    UNIQUE (team_id, name),
    UNIQUE (team_id, id)
);

-- Conversations record the body backend they were created with; it never changes.
-- next_seq is the gap-free counter: the send transaction locks the row (SELECT … FOR NO KEY UPDATE),
-- takes next_seq and bumps it, so concurrent sends are serialised per conversation and a send
-- that rolls back gives its number back. ord breaks ties between equal creation times.
CREATE TABLE conversations (
    id          uuid PRIMARY KEY,
    team_id     uuid        NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    title       text        NOT NULL CHECK (title <> ''),
    backend     text        NOT NULL CHECK (btrim(backend) <> ''),
    next_seq    bigint      NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    created_at  timestamptz NOT NULL,
    ord         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    UNIQUE (team_id, id)
);

-- Members, with the recipient key copied at join time.
CREATE TABLE members (
    conversation_id  uuid        NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    agent_id         uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    recipient_key    text        NOT NULL,
    joined_at        timestamptz NOT NULL,
    PRIMARY KEY (conversation_id, agent_id)
);
CREATE INDEX members_agent ON members (agent_id);

-- Messages: one row per send. publication: 'stored' (the body backend confirmed it; locator
-- and stored_at set), 'pending_publication' (an outbox slot holds it), 'failed' (a fatal
-- refusal; failure holds the bus's error code; the slot is kept as evidence). retained_at
-- marks a body removed by retention (the message stays 'stored').
CREATE TABLE messages (
    id               uuid PRIMARY KEY,
    team_id          uuid        NOT NULL,
    conversation_id  uuid        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq >= 1),
    sender_id        uuid        NOT NULL REFERENCES agents (id),
    request_id       text        NOT NULL CHECK (request_id <> ''),
    body_sha256      text        NOT NULL CHECK (body_sha256 ~ '^[0-9a-f]{64}$'),
    body_len         bigint      NOT NULL CHECK (body_len >= 0),
    backend          text        NOT NULL CHECK (btrim(backend) <> ''),
    publication      text        NOT NULL
                     CHECK (publication IN ('stored', 'pending_publication', 'failed')),
    locator          text,
    failure          text,
    sent_at          timestamptz NOT NULL,
    stored_at        timestamptz,
    retained_at      timestamptz,
    FOREIGN KEY (team_id, conversation_id) REFERENCES conversations (team_id, id) ON DELETE CASCADE,
    UNIQUE (conversation_id, seq),
    UNIQUE (conversation_id, request_id),
    CHECK ((publication = 'stored') = (locator IS NOT NULL AND stored_at IS NOT NULL)),
    CHECK ((publication = 'failed') = (failure IS NOT NULL)),
    CHECK (retained_at IS NULL OR publication = 'stored')
);
CREATE INDEX messages_unsettled ON messages (team_id, sent_at)
    WHERE publication <> 'stored';
CREATE INDEX messages_retention ON messages (team_id, backend, stored_at)
    WHERE publication = 'stored' AND retained_at IS NULL;

-- Receipts: one per (message, recipient), snapshotted at send with the recipient's key. Each
-- observation time is set once; acknowledged only after delivered.
CREATE TABLE receipts (
    message_id       uuid        NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id     uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    recipient_key    text        NOT NULL,
    stored_at        timestamptz,
    delivered_at     timestamptz,
    acknowledged_at  timestamptz,
    PRIMARY KEY (message_id, recipient_id),
    CHECK (acknowledged_at IS NULL OR delivered_at IS NOT NULL)
);
CREATE INDEX receipts_undelivered ON receipts (recipient_id, message_id)
    WHERE delivered_at IS NULL;

-- Outbox slots: one per message whose body goes through the relay, holding the body (UTF-8 as
-- bytea: text refuses U+0000) until the backend confirms it. Leasing bumps generation (the
-- fencing token) and sets leased_until; a settlement applies only with the current generation
-- before leased_until. A failed slot is kept as evidence and never leased again.
CREATE TABLE outbox_slots (
    id               uuid PRIMARY KEY,
    tenant           text        NOT NULL,
    message_id       uuid        NOT NULL UNIQUE REFERENCES messages (id) ON DELETE CASCADE,
    team_id          uuid        NOT NULL,
    conversation_id  uuid        NOT NULL,
    backend          text        NOT NULL CHECK (btrim(backend) <> ''),
    publish_key      uuid        NOT NULL UNIQUE,
    body             bytea       NOT NULL,
    generation       bigint      NOT NULL DEFAULT 0 CHECK (generation >= 0),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    uncertain        boolean     NOT NULL DEFAULT false,
    failed           boolean     NOT NULL DEFAULT false,
    next_attempt_at  timestamptz NOT NULL,
    leased_until     timestamptz,
    last_error       text,
    ord              bigint GENERATED ALWAYS AS IDENTITY UNIQUE
);
-- The relay's scan: live slots only, in due order.
CREATE INDEX outbox_slots_due ON outbox_slots (tenant, next_attempt_at, ord) WHERE NOT failed;

-- Inbox events: one per (kind, message, recipient), enqueued when the body is stored; the
-- reference worker leases them, publishes each to the recipient's inbox (dedup on id) and marks
-- it published.
CREATE TABLE inbox_events (
    id             uuid PRIMARY KEY,
    tenant         text        NOT NULL,
    team_id        uuid        NOT NULL,
    kind           text        NOT NULL DEFAULT 'message' CHECK (kind <> ''),
    message_id     uuid        NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id   uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    recipient_key  text        NOT NULL,
    inbox          text        NOT NULL CHECK (btrim(inbox) <> ''),
    payload        text        NOT NULL,
    created_at     timestamptz NOT NULL,
    leased_until   timestamptz,
    published_at   timestamptz,
    ord            bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    UNIQUE (kind, message_id, recipient_id)
);
CREATE INDEX inbox_events_unpublished ON inbox_events (tenant, ord) WHERE published_at IS NULL;

-- Hand-outs: each message handed to a recipient, with the inbox ack to send once the receipt is
-- committed (kept server-side), held until held_until unless confirmed.
CREATE TABLE hand_outs (
    delivery_id      uuid PRIMARY KEY,
    team_id          uuid        NOT NULL,
    message_id       uuid        NOT NULL,
    recipient_id     uuid        NOT NULL,
    conversation_id  uuid        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq >= 1),
    redelivered      boolean     NOT NULL,
    issued_at        timestamptz NOT NULL,
    held_until       timestamptz NOT NULL CHECK (held_until >= issued_at),
    ack_inbox        text,
    ack_subject      text,
    confirmed_at     timestamptz,
    ord              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    FOREIGN KEY (message_id, recipient_id) REFERENCES receipts (message_id, recipient_id)
        ON DELETE CASCADE,
    CHECK ((ack_inbox IS NULL) = (ack_subject IS NULL))
);
CREATE INDEX hand_outs_pair ON hand_outs (message_id, recipient_id, ord);

-- Runs and their journal. last_seq is the gap-free journal counter: every append locks the run
-- row (SELECT … FOR UPDATE), checks it is open, and takes last_seq + 1. A sealed run
-- (sealed_at set) refuses appends.
CREATE TABLE runs (
    id           uuid PRIMARY KEY,
    tenant       text        NOT NULL,
    team_id      uuid        NOT NULL,
    agent_id     uuid        NOT NULL,
    admitted_at  timestamptz NOT NULL,
    last_seq     bigint      NOT NULL CHECK (last_seq >= 1),
    sealed_at    timestamptz,
    outcome      text        CHECK (outcome IN ('succeeded', 'failed', 'cancelled')),
    CHECK ((sealed_at IS NULL) = (outcome IS NULL))
);
CREATE INDEX runs_agent ON runs (team_id, agent_id);

-- One record per (run, seq). kind is the record kind as JSON text — not jsonb, which refuses
-- the \u0000 escape a note may carry; text keeps serde's escaped JSON verbatim.
CREATE TABLE journal_records (
    run_id  uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq     bigint      NOT NULL CHECK (seq >= 1),
    at      timestamptz NOT NULL,
    kind    text        NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Bodies: the table PostgresBackend reads, written by its publish and by the ledger's send
-- transaction. No foreign key to messages: the body backend stands alone (it is also reached
-- through the outbox). The body is bytea holding UTF-8: Postgres text refuses U+0000, which is
-- valid in a body.
CREATE TABLE bodies (
    message_id       uuid PRIMARY KEY,
    team_id          uuid        NOT NULL,
    conversation_id  uuid        NOT NULL,
    publish_key      uuid        NOT NULL UNIQUE,
    body             bytea       NOT NULL,
    stored_at        timestamptz NOT NULL
);
CREATE INDEX bodies_retention ON bodies (team_id, stored_at);

-- The inbox queue: one row per reference. seq is the reference's position (stream_seq);
-- visible_at is when it may be handed out (again): stored time at first, then hand-out time +
-- ack wait (the visibility timeout). Acknowledged rows are kept (acked_at) so dedup on event id
-- holds for the life of the row; they are never handed out again.
CREATE TABLE inbox_queue (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    team_id        uuid        NOT NULL,
    recipient_key  text        NOT NULL CHECK (recipient_key ~ '^[A-Za-z0-9_-]{1,128}$'),
    event_id       uuid        NOT NULL,
    payload        text        NOT NULL,
    stored_at      timestamptz NOT NULL,
    visible_at     timestamptz NOT NULL,
    deliveries     bigint      NOT NULL DEFAULT 0 CHECK (deliveries >= 0),
    acked_at       timestamptz,
    UNIQUE (team_id, event_id)
);
CREATE INDEX inbox_queue_ready ON inbox_queue (team_id, recipient_key, seq) WHERE acked_at IS NULL;

-- The queue's consumers: created on a recipient's first fetch, so status can tell a recipient
-- nobody has read for ("present": false) from an empty inbox.
CREATE TABLE inbox_consumers (
    team_id        uuid        NOT NULL,
    recipient_key  text        NOT NULL,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (team_id, recipient_key)
);
