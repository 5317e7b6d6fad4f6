-- Presence (issue 21): the status line an agent sets, on the agent's row. status is NULL when
-- the agent has none (never set, or cleared); status_set_at (microseconds since the Unix epoch)
-- is set with it. The bound (200 characters, one line) is the domain's rule, checked before the
-- write; ADD COLUMN cannot carry a table CHECK across both columns, so each column has its own.
ALTER TABLE agents ADD COLUMN status TEXT CHECK (status IS NULL OR length(status) BETWEEN 1 AND 200);
ALTER TABLE agents ADD COLUMN status_set_at INTEGER;

-- An agent's current run (its latest admitted unsealed run), read per agent of a team.
CREATE INDEX runs_open_by_agent ON runs (agent_id, admitted_at DESC, id DESC)
    WHERE sealed_at IS NULL;
