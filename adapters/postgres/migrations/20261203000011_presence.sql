-- Presence (issue 21): the status line an agent sets, on the agent's row. status is NULL when
-- the agent has none (never set, or cleared); status and status_set_at are set together. The
-- bound (200 characters, one line) is the domain's rule, checked before the write; the CHECK keeps
-- the column from growing past it whatever writes it.
ALTER TABLE agents
    ADD COLUMN status text CHECK (char_length(status) BETWEEN 1 AND 200),
    ADD COLUMN status_set_at timestamptz,
    ADD CONSTRAINT agents_status_set_at CHECK ((status IS NULL) = (status_set_at IS NULL));

-- An agent's current run (its latest admitted unsealed run), read per agent of a team.
CREATE INDEX runs_open_by_agent ON runs (agent_id, admitted_at DESC, id DESC)
    WHERE sealed_at IS NULL;
