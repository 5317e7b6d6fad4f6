-- The operator console: operators (their own tokens, scopes, one-time sign-in codes, console
-- sessions), a team's human members (the operators posting in it), agents' last activity, the
-- sender's kind on every message, each push registration's attempts log, and the indexes the
-- console's reads need. Additive only: existing rows read as agents sent by agents (the column
-- defaults; ADD COLUMN with a constant default rewrites no table), no foreign key changes.

-- Operators of a tenant: a name unique in the tenant (the agent-name rule), the SHA-256 of a
-- bearer token no agent holds (checked in the writing transaction; unique among operators
-- here), every team or the teams of operator_teams.
CREATE TABLE operators (
    id          uuid PRIMARY KEY,
    tenant      text        NOT NULL CHECK (tenant <> ''),
    name        text        NOT NULL CHECK (name ~ '^[A-Za-z0-9_-]{1,128}$'),
    token_hash  bytea       NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    all_teams   boolean     NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    UNIQUE (tenant, name)
);

CREATE TABLE operator_teams (
    operator_id  uuid NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    team_id      uuid NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    PRIMARY KEY (operator_id, team_id)
);

-- One-time sign-in codes (their SHA-256): used once (used_at), before expires_at. A redeem is
-- one UPDATE … WHERE used_at IS NULL: of two concurrent ones, the second waits for the first's
-- row lock and then finds the code used.
CREATE TABLE sign_in_codes (
    code_hash    bytea       PRIMARY KEY CHECK (octet_length(code_hash) = 32),
    operator_id  uuid        NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX sign_in_codes_operator ON sign_in_codes (operator_id);

-- Console sessions (the SHA-256 of the cookie's secret): live while not ended, the operator
-- not revoked, and used within the idle period.
CREATE TABLE operator_sessions (
    session_hash  bytea       PRIMARY KEY CHECK (octet_length(session_hash) = 32),
    operator_id   uuid        NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    opened_at     timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    ended_at      timestamptz
);
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);

-- Agents: their kind ('human': a team's human member, standing for operator_id), and their
-- last authenticated call the bus recorded. One human member per (team, operator).
ALTER TABLE agents
    ADD COLUMN kind text NOT NULL DEFAULT 'agent' CHECK (kind IN ('agent', 'human')),
    ADD COLUMN operator_id uuid REFERENCES operators (id),
    ADD COLUMN last_active_at timestamptz,
    ADD CONSTRAINT agents_human_operator CHECK ((operator_id IS NOT NULL) = (kind = 'human'));
CREATE UNIQUE INDEX agents_human ON agents (team_id, operator_id) WHERE kind = 'human';

-- Messages: the sender's kind when it sent.
ALTER TABLE messages
    ADD COLUMN sender_kind text NOT NULL DEFAULT 'agent'
        CHECK (sender_kind IN ('agent', 'human'));

-- The console's reads: a team's sends over time, confirmed deliveries over time (joined to
-- their messages for the team), a team's runs newest first.
CREATE INDEX messages_sent ON messages (team_id, sent_at);
CREATE INDEX receipts_delivered ON receipts (delivered_at) WHERE delivered_at IS NOT NULL;
CREATE INDEX runs_team ON runs (tenant, team_id, admitted_at);

-- Each push registration's attempts log, newest by ord. No foreign key to push_registrations:
-- a finished registration's log outlives it until pruned. Exactly one of status (the HTTP
-- answer) and error (no answer) is set.
CREATE TABLE push_attempts (
    ord          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text        NOT NULL,
    run_id       uuid        NOT NULL,
    id           text        NOT NULL,
    at           timestamptz NOT NULL,
    seq          bigint      NOT NULL CHECK (seq >= 0),
    status       bigint      CHECK (status BETWEEN 0 AND 65535),
    error        text,
    duration_ms  bigint      NOT NULL CHECK (duration_ms >= 0),
    CHECK ((status IS NULL) <> (error IS NULL))
);
CREATE INDEX push_attempts_registration ON push_attempts (tenant, run_id, id, ord);
