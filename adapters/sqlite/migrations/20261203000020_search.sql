-- Full-text search (issue 21): an FTS5 index of each stored message's conversation title and
-- body, built by the index worker in batches after the body is stored — never in the send
-- transaction (only the partial index below is kept by it).
--
-- messages.indexed_at: when the index worker indexed the message (NULL: not yet). The partial
-- index messages_unindexed holds exactly the backlog (stored, not retained, not indexed), in
-- the worker's order, so finding it costs the backlog's size, not the store's. Adding a
-- nullable column rebuilds nothing.
ALTER TABLE messages ADD COLUMN indexed_at INTEGER;

CREATE INDEX messages_unindexed ON messages (stored_at, id)
    WHERE publication = 'stored' AND retained_at IS NULL AND indexed_at IS NULL;

-- One row per indexed message: the facts a hit shows (copied: they never change) and the
-- indexed body (the first 32,000 bytes, U+0000 as spaces), kept for snippets. ord is the FTS5
-- rowid (an INTEGER PRIMARY KEY: VACUUM keeps it), growing with each message first indexed
-- (kept when it is indexed again): a search ranks the 1,000 matches of greatest ord. Deleting a message (its team's or its
-- conversation's deletion) deletes its row; retention deletes it in the transaction that marks
-- the message retained.
CREATE TABLE message_search (
    ord              INTEGER NOT NULL PRIMARY KEY,
    message_id       BLOB    NOT NULL UNIQUE REFERENCES messages (id) ON DELETE CASCADE,
    team_id          BLOB    NOT NULL,
    conversation_id  BLOB    NOT NULL,
    sender_id        BLOB    NOT NULL,
    seq              INTEGER NOT NULL CHECK (seq >= 1),
    sent_at          INTEGER NOT NULL,
    body             TEXT    NOT NULL
) STRICT;
CREATE INDEX message_search_conversation ON message_search (conversation_id);

-- The FTS5 index, contentless (the text is in message_search; the index holds words only):
-- each row the domain's words (crewbus_domain::SearchDocument) of the title and the body joined
-- by spaces, split by the ascii tokenizer, which splits on ASCII punctuation and spaces only
-- (and the words hold none), so SQLite indexes exactly the words every ledger indexes.
-- contentless_delete lets a row be deleted by rowid.
CREATE VIRTUAL TABLE message_search_fts USING fts5 (
    title, body, content = '', contentless_delete = 1, tokenize = 'ascii'
);

CREATE TRIGGER message_search_unindexed AFTER DELETE ON message_search
BEGIN
    DELETE FROM message_search_fts WHERE rowid = old.ord;
END;
