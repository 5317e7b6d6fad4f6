-- Leases on path patterns (issue 21): fenced, expiring claims of a team's agents.
--
-- SQLite serialises every write transaction (one writer), so a team's acquires are serialised
-- with everything else; lease_fences keeps each team's fencing counter (the last token granted),
-- bumped with the grant.
CREATE TABLE lease_fences (
    team_id     BLOB    NOT NULL PRIMARY KEY REFERENCES teams (id) ON DELETE CASCADE,
    last_token  INTEGER NOT NULL CHECK (last_token >= 0)
) STRICT;

-- A lease lives until expires_at (exclusive) unless ended earlier; ended_at and end_reason are
-- set together when it ends (released, expired: at its expires_at, revoked, run_sealed).
-- Times are microseconds since the Unix epoch, as everywhere in this store.
CREATE TABLE leases (
    id           BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    team_id      BLOB    NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    agent_id     BLOB    NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    pattern      TEXT    NOT NULL CHECK (pattern <> ''),
    mode         TEXT    NOT NULL CHECK (mode IN ('exclusive', 'shared')),
    token        INTEGER NOT NULL CHECK (token >= 1),
    run_id       BLOB    REFERENCES runs (id) ON DELETE SET NULL,
    acquired_at  INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    ended_at     INTEGER,
    end_reason   TEXT    CHECK (end_reason IN ('released', 'expired', 'revoked', 'run_sealed')),
    last_event   INTEGER NOT NULL DEFAULT 1 CHECK (last_event >= 1),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    UNIQUE (team_id, token)
) STRICT;
CREATE INDEX leases_open ON leases (team_id, token) WHERE ended_at IS NULL;
CREATE INDEX leases_due ON leases (expires_at) WHERE ended_at IS NULL;
CREATE INDEX leases_open_agent ON leases (agent_id) WHERE ended_at IS NULL;
CREATE INDEX leases_open_run ON leases (run_id) WHERE ended_at IS NULL AND run_id IS NOT NULL;

-- Each lease's own history, numbered from 1 (grant, renewals, end); kind is serde's JSON.
CREATE TABLE lease_events (
    lease_id  BLOB    NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL CHECK (seq >= 1),
    at        INTEGER NOT NULL,
    kind      TEXT    NOT NULL,
    PRIMARY KEY (lease_id, seq)
) STRICT;
