-- crewbus bus schema: the ledger (teams, agents, conversations, members, messages, receipts,
-- outbox slots, inbox events, hand-outs), runs and their journal, the body table and the inbox
-- queue.
--
-- Invariants are enforced by the database itself (unique keys, CHECKs, foreign keys), so a bug
-- in a use case cannot write two messages with one seq or two receipts for one recipient.
-- Times are always bound by the application (an injected clock): no column defaults to now().
-- Counters are bigint (the domain's u64 values are kept within i64 range) and CHECKed
-- non-negative.

-- Teams: the unit of isolation. A team records its default body backend and its inbox (the
-- backend names a registry answers for: 'postgres', 'memory', 'jetstream').
CREATE TABLE teams (
    id            uuid PRIMARY KEY,
    tenant        text        NOT NULL,
    name          text        NOT NULL,
    body_backend  text        NOT NULL CHECK (body_backend <> ''),
    inbox         text        NOT NULL CHECK (inbox <> ''),
    created_at    timestamptz NOT NULL,
    UNIQUE (tenant, name)
);

-- Agents: members of one team; authenticated by a token whose hash only is stored.
CREATE TABLE agents (
    id             uuid PRIMARY KEY,
    team_id        uuid        NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name           text        NOT NULL,
    recipient_key  text        NOT NULL CHECK (recipient_key ~ '^[A-Za-z0-9_-]{1,128}$'),
    token_hash     bytea       NOT NULL UNIQUE,
    created_at     timestamptz NOT NULL,
    disabled_at    timestamptz,
    UNIQUE (team_id, name),
    UNIQUE (team_id, recipient_key),
    UNIQUE (team_id, id)
);

-- Conversations record the body backend they were created with; it never changes silently.
-- next_seq is the gap-free counter: the send transaction takes it with UPDATE … RETURNING, which
-- row-locks the conversation, so concurrent senders are serialised per conversation and a
-- rolled-back send gives its number back.
CREATE TABLE conversations (
    id          uuid PRIMARY KEY,
    team_id     uuid        NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    title       text        NOT NULL DEFAULT '',
    backend     text        NOT NULL CHECK (backend <> ''),
    next_seq    bigint      NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    created_at  timestamptz NOT NULL,
    UNIQUE (team_id, id)
);

CREATE TABLE members (
    conversation_id  uuid        NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    agent_id         uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    joined_at        timestamptz NOT NULL,
    left_at          timestamptz,
    PRIMARY KEY (conversation_id, agent_id)
);
CREATE INDEX members_agent ON members (agent_id);

-- Messages: one row per send. publication is the message's state: 'stored' (the body backend
-- confirmed it; locator set), 'pending_publication' (an outbox slot holds it), 'failed' (a fatal
-- refusal; the slot is kept as evidence). retained_at marks a body removed by retention.
CREATE TABLE messages (
    id               uuid PRIMARY KEY,
    team_id          uuid        NOT NULL,
    conversation_id  uuid        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq >= 1),
    sender_id        uuid        NOT NULL REFERENCES agents (id),
    request_id       text        NOT NULL CHECK (request_id <> ''),
    body_sha256      bytea       NOT NULL CHECK (octet_length(body_sha256) = 32),
    body_bytes       bigint      NOT NULL CHECK (body_bytes >= 0),
    backend          text        NOT NULL CHECK (backend <> ''),
    publication      text        NOT NULL
                     CHECK (publication IN ('stored', 'pending_publication', 'failed')),
    locator          text,
    failure          text,
    run_id           uuid,
    created_at       timestamptz NOT NULL,
    stored_at        timestamptz,
    retained_at      timestamptz,
    FOREIGN KEY (team_id, conversation_id) REFERENCES conversations (team_id, id) ON DELETE CASCADE,
    UNIQUE (conversation_id, seq),
    UNIQUE (conversation_id, request_id),
    CHECK ((publication = 'stored') = (locator IS NOT NULL AND stored_at IS NOT NULL))
);
CREATE INDEX messages_pending ON messages (conversation_id, seq)
    WHERE publication = 'pending_publication';
CREATE INDEX messages_retention ON messages (team_id, stored_at)
    WHERE retained_at IS NULL AND publication = 'stored';

-- Receipts: one per (message, recipient), snapshotted at send. Observation times are set once.
CREATE TABLE receipts (
    message_id       uuid        NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id     uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    stored_at        timestamptz,
    delivered_at     timestamptz,
    acknowledged_at  timestamptz,
    PRIMARY KEY (message_id, recipient_id),
    CHECK (acknowledged_at IS NULL OR delivered_at IS NOT NULL)
);
CREATE INDEX receipts_undelivered ON receipts (recipient_id, message_id)
    WHERE delivered_at IS NULL;

-- Outbox slots: one per message whose body goes through the relay. A lease bumps generation;
-- settling is fenced on (generation, lease_until > at). state: 'due' (waiting for due_at),
-- 'uncertain' (an attempt ended without an answer; reconcile settles it), 'failed' (kept as
-- evidence of a fatal refusal, never leased again).
CREATE TABLE outbox_slots (
    message_id    uuid PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    team_id       uuid        NOT NULL,
    backend       text        NOT NULL CHECK (backend <> ''),
    publish_key   uuid        NOT NULL UNIQUE,
    state         text        NOT NULL DEFAULT 'due' CHECK (state IN ('due', 'uncertain', 'failed')),
    generation    bigint      NOT NULL DEFAULT 0 CHECK (generation >= 0),
    attempts      integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    due_at        timestamptz NOT NULL,
    lease_until   timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL
);
-- The relay's scan: only live slots, in due order (a failed slot is evidence, never due).
CREATE INDEX outbox_slots_due ON outbox_slots (due_at, created_at) WHERE state <> 'failed';

-- Inbox events: one per (kind, message, recipient); the reference worker publishes each to the
-- recipient's inbox (dedup on id) and marks it published.
CREATE TABLE inbox_events (
    id            uuid PRIMARY KEY,
    team_id       uuid        NOT NULL,
    kind          text        NOT NULL CHECK (kind <> ''),
    message_id    uuid        NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id  uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    inbox         text        NOT NULL CHECK (inbox <> ''),
    created_at    timestamptz NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    due_at        timestamptz NOT NULL,
    published_at  timestamptz,
    UNIQUE (kind, message_id, recipient_id)
);
CREATE INDEX inbox_events_due ON inbox_events (due_at) WHERE published_at IS NULL;

-- Hand-outs: each reference handed to an agent, with the inbox that issued it (the ack goes back
-- there) and its opaque ack token (kept server-side).
CREATE TABLE hand_outs (
    delivery_id   uuid PRIMARY KEY,
    team_id       uuid        NOT NULL,
    message_id    uuid        NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient_id  uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    inbox         text,
    ack_subject   text,
    redelivered   boolean     NOT NULL DEFAULT false,
    handed_out_at timestamptz NOT NULL,
    confirmed_at  timestamptz
);
CREATE INDEX hand_outs_open ON hand_outs (recipient_id, message_id) WHERE confirmed_at IS NULL;

-- Runs and their journal. next_seq is the gap-free journal counter (taken with UPDATE …
-- RETURNING in the appending transaction); a sealed run refuses appends.
CREATE TABLE runs (
    id          uuid PRIMARY KEY,
    tenant      text        NOT NULL,
    team_id     uuid        NOT NULL,
    agent_id    uuid        NOT NULL,
    admitted_at timestamptz NOT NULL,
    next_seq    bigint      NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    sealed_at   timestamptz
);
CREATE INDEX runs_agent ON runs (team_id, agent_id);

-- One record per (run, seq). kind is the record kind as JSON text (not jsonb: jsonb refuses
-- the \u0000 escape a note may carry; text keeps serde's escaped JSON verbatim).
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
