-- Send allowances (issue 21): each agent's send rate limit as one token bucket in the store
-- (see the Postgres migration of the same name). milli_tokens: thousandths of a token held when
-- counted at refilled_at (microseconds since the Unix epoch, as everywhere in this store).
CREATE TABLE send_allowances (
    agent_id      BLOB    NOT NULL PRIMARY KEY REFERENCES agents (id) ON DELETE CASCADE,
    milli_tokens  INTEGER NOT NULL CHECK (milli_tokens >= 0),
    refilled_at   INTEGER NOT NULL
) STRICT;
