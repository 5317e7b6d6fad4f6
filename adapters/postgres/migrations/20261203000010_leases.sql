-- Leases on path patterns (issue 21): fenced, expiring claims of a team's agents.
--
-- lease_fences holds one row per team: the fencing counter (the last token granted) and the
-- lock that serialises a team's acquires. An acquire locks its team's row (SELECT … FOR UPDATE,
-- after inserting it on the team's first acquire), checks the overlap against the live leases in
-- Rust (the pattern rule is the domain's), and bumps the counter with the grant, all in one
-- transaction; so no two servers grant conflicting leases, and tokens only grow.
CREATE TABLE lease_fences (
    team_id     uuid   PRIMARY KEY REFERENCES teams (id) ON DELETE CASCADE,
    last_token  bigint NOT NULL CHECK (last_token >= 0)
);

-- A lease lives until expires_at (exclusive) unless ended earlier; ended_at and end_reason are
-- set together when it ends (released, expired: at its expires_at, revoked, run_sealed).
CREATE TABLE leases (
    id           uuid        PRIMARY KEY,
    team_id      uuid        NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    agent_id     uuid        NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    pattern      text        NOT NULL CHECK (pattern <> ''),
    mode         text        NOT NULL CHECK (mode IN ('exclusive', 'shared')),
    token        bigint      NOT NULL CHECK (token >= 1),
    run_id       uuid        REFERENCES runs (id) ON DELETE SET NULL,
    acquired_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    end_reason   text        CHECK (end_reason IN ('released', 'expired', 'revoked', 'run_sealed')),
    last_event   integer     NOT NULL DEFAULT 1 CHECK (last_event >= 1),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    UNIQUE (team_id, token)
);
-- The acquire's read of a team's leases that have not ended, and the listings.
CREATE INDEX leases_open ON leases (team_id, token) WHERE ended_at IS NULL;
-- The expiry sweep, oldest expiry first.
CREATE INDEX leases_due ON leases (expires_at) WHERE ended_at IS NULL;
-- The ends a revocation and a seal bring.
CREATE INDEX leases_open_agent ON leases (agent_id) WHERE ended_at IS NULL;
CREATE INDEX leases_open_run ON leases (run_id) WHERE ended_at IS NULL AND run_id IS NOT NULL;

-- Each lease's own history, numbered from 1 (grant, renewals, end); kind is serde's JSON.
CREATE TABLE lease_events (
    lease_id  uuid        NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    seq       integer     NOT NULL CHECK (seq >= 1),
    at        timestamptz NOT NULL,
    kind      text        NOT NULL,
    PRIMARY KEY (lease_id, seq)
);
