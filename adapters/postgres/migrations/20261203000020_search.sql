-- Full-text search (issue 21): a tsvector per stored message (its conversation's title and its
-- body, as the domain's words) with a GIN index, built by the index worker in batches after
-- the body is stored — never in the send transaction, which only keeps the partial index below.
--
-- messages.indexed_at: when the index worker indexed the message (NULL: not yet). A nullable
-- column without a default is added without rewriting the table. The partial index
-- messages_unindexed holds exactly the backlog (stored, not retained, not indexed) in the
-- worker's order, so finding it costs the backlog's size, not the table's; an indexed message
-- leaves it. Built under the table's lock, in the migration's transaction: start-up waits for
-- one scan of messages on a large table. Every message stored before this migration is in the
-- backlog, and the worker indexes them, oldest first.
ALTER TABLE messages ADD COLUMN indexed_at timestamptz;

CREATE INDEX messages_unindexed ON messages (stored_at, id)
    WHERE publication = 'stored' AND retained_at IS NULL AND indexed_at IS NULL;

-- One row per indexed message: the facts a hit shows (copied: they never change), the indexed
-- body (its first 32,000 bytes, U+0000 as spaces: text refuses it) for snippets, and the
-- document: the title's words at positions 1..n with weight A, the body's from n + 2 with
-- weight D (crewbus_domain::SearchDocument::positions), built by the adapter as a tsvector
-- literal so Postgres indexes exactly the words every ledger indexes. Deleting a message (its
-- team's or conversation's deletion) deletes its row; retention deletes it in the transaction
-- that marks the message retained.
CREATE TABLE message_search (
    message_id       uuid        PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    team_id          uuid        NOT NULL,
    conversation_id  uuid        NOT NULL,
    sender_id        uuid        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq >= 1),
    sent_at          timestamptz NOT NULL,
    body             text        NOT NULL,
    document         tsvector    NOT NULL,
    -- Unique as generated; no unique index (the planner took one without the team for a
    -- full backward scan): message_search_recent is the index on it.
    ord              bigint      GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX message_search_document ON message_search USING gin (document);
CREATE INDEX message_search_conversation ON message_search (conversation_id);
-- A search ranks the 1,000 matches indexed last (crewbus_domain::MAX_SEARCH_DEPTH; ord grows
-- with each message first indexed and is kept when it is indexed again): for a common word
-- the planner walks this index newest first and stops after 1,000 matches.
CREATE INDEX message_search_recent ON message_search (team_id, ord DESC);
