-- Send allowances (issue 21): each agent's send rate limit as one token bucket shared by every
-- server on this database. A server leases a chunk of tokens from the row (locking it: takes of
-- one agent are serialised) and counts sends against its chunk, so a send writes nothing here.
-- milli_tokens: thousandths of a token held when counted at refilled_at; the limit's shape
-- (rate, burst) comes from each server's configuration at every take.
CREATE TABLE send_allowances (
    agent_id      uuid        PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
    milli_tokens  bigint      NOT NULL CHECK (milli_tokens >= 0),
    refilled_at   timestamptz NOT NULL
);
