-- The operator console: operators (their own tokens, scopes, one-time sign-in codes, console
-- sessions), a team's human members (the operators posting in it), agents' last activity, the
-- sender's kind on every message, each push registration's attempts log, and the indexes the
-- console's reads need. Additive only: existing rows read as agents sent by agents (the column
-- defaults), no table is rebuilt, no foreign key changes.

-- Operators of a tenant: a name unique in the tenant (the agent-name rule), the SHA-256 of a
-- bearer token no agent holds (checked in the writing transaction; unique among operators
-- here), every team or the teams of operator_teams.
CREATE TABLE operators (
    id          BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    tenant      TEXT    NOT NULL CHECK (tenant <> ''),
    name        TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 128
                                        AND name NOT GLOB '*[^A-Za-z0-9_-]*'),
    token_hash  BLOB    NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    all_teams   INTEGER NOT NULL CHECK (all_teams IN (0, 1)),
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER,
    UNIQUE (tenant, name)
) STRICT;

CREATE TABLE operator_teams (
    operator_id  BLOB NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    team_id      BLOB NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    PRIMARY KEY (operator_id, team_id)
) STRICT;

-- One-time sign-in codes (their SHA-256): used once (used_at), before expires_at.
CREATE TABLE sign_in_codes (
    code_hash    BLOB    NOT NULL PRIMARY KEY CHECK (length(code_hash) = 32),
    operator_id  BLOB    NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER
) STRICT;
CREATE INDEX sign_in_codes_operator ON sign_in_codes (operator_id);

-- Console sessions (the SHA-256 of the cookie's secret): live while not ended, the operator
-- not revoked, and used within the idle period.
CREATE TABLE operator_sessions (
    session_hash  BLOB    NOT NULL PRIMARY KEY CHECK (length(session_hash) = 32),
    operator_id   BLOB    NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    opened_at     INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL,
    ended_at      INTEGER
) STRICT;
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);

-- Agents: their kind ('human': a team's human member, standing for operator_id), and their
-- last authenticated call the bus recorded. One human member per (team, operator).
ALTER TABLE agents ADD COLUMN kind TEXT NOT NULL DEFAULT 'agent'
    CHECK (kind IN ('agent', 'human'));
ALTER TABLE agents ADD COLUMN operator_id BLOB REFERENCES operators (id)
    CHECK ((operator_id IS NOT NULL) = (kind = 'human'));
ALTER TABLE agents ADD COLUMN last_active_at INTEGER;
CREATE UNIQUE INDEX agents_human ON agents (team_id, operator_id) WHERE kind = 'human';

-- Messages: the sender's kind when it sent.
ALTER TABLE messages ADD COLUMN sender_kind TEXT NOT NULL DEFAULT 'agent'
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
    ord          INTEGER NOT NULL PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    run_id       BLOB    NOT NULL CHECK (length(run_id) = 16),
    id           TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    seq          INTEGER NOT NULL CHECK (seq >= 0),
    status       INTEGER CHECK (status BETWEEN 0 AND 65535),
    error        TEXT,
    duration_ms  INTEGER NOT NULL CHECK (duration_ms >= 0),
    CHECK ((status IS NULL) <> (error IS NULL))
) STRICT;
CREATE INDEX push_attempts_registration ON push_attempts (tenant, run_id, id, ord);
