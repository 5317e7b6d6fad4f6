-- no-transaction
--
-- A request id is the sender's own: the idempotency key of a send becomes (conversation,
-- sender, request_id), so two members of a conversation that both pick `t42-1` each get a
-- message of their own (before, the second was answered the first's message, or refused with
-- 409 for another body).
--
-- SQLite cannot drop a table constraint, so `messages` is rebuilt (expand, copy, contract):
-- messages_new with every column, CHECK and foreign key of `messages` as migrations 1 and 3 left
-- it, UNIQUE (conversation_id, request_id) replaced by UNIQUE (conversation_id, sender_id,
-- request_id); every row copied with its values; the old table dropped; the new one renamed;
-- every index of `messages` created again under its name and definition (the reads name
-- messages_unsettled and messages_retention in INDEXED BY). Every key unique before is unique
-- under the new constraint, so the copy cannot fail on it.
--
-- Foreign keys: receipts, outbox_slots and inbox_events reference messages (id) ON DELETE
-- CASCADE. With foreign keys on, DROP TABLE messages deletes every row first and the cascade
-- empties those tables, so the rebuild runs with foreign keys off — and `PRAGMA foreign_keys`
-- is a no-op inside a transaction, hence `no-transaction`: this file opens and commits its own
-- transaction (crewbus_sqlite::migrate runs such a file outside one, on the write connection,
-- and turns foreign keys back on whatever happens). The children keep referencing `messages`
-- by name, and the rebuilt table has the same ids, so every reference still resolves. Before
-- the commit, `foreign_key_check` over the whole database must find nothing: the insert into a
-- temporary table whose CHECK wants zero violations fails the statement, and the migration with
-- it, leaving the transaction to be rolled back (the store as it was). A rerun after a commit
-- whose bookkeeping was lost rebuilds the table again into the same shape.
PRAGMA foreign_keys = OFF;

BEGIN IMMEDIATE;

CREATE TABLE messages_new (
    id               BLOB    NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    team_id          BLOB    NOT NULL,
    conversation_id  BLOB    NOT NULL,
    seq              INTEGER NOT NULL CHECK (seq >= 1),
    sender_id        BLOB    NOT NULL REFERENCES agents (id),
    request_id       TEXT    NOT NULL CHECK (request_id <> ''),
    body_sha256      TEXT    NOT NULL CHECK (length(body_sha256) = 64
                                             AND body_sha256 NOT GLOB '*[^0-9a-f]*'),
    body_len         INTEGER NOT NULL CHECK (body_len >= 0),
    backend          TEXT    NOT NULL CHECK (trim(backend) <> ''),
    publication      TEXT    NOT NULL
                     CHECK (publication IN ('stored', 'pending_publication', 'failed')),
    locator          TEXT,
    failure          TEXT,
    sent_at          INTEGER NOT NULL,
    stored_at        INTEGER,
    retained_at      INTEGER,
    sender_kind      TEXT    NOT NULL DEFAULT 'agent'
                     CHECK (sender_kind IN ('agent', 'human')),
    FOREIGN KEY (team_id, conversation_id) REFERENCES conversations (team_id, id)
        ON DELETE CASCADE,
    UNIQUE (conversation_id, seq),
    UNIQUE (conversation_id, sender_id, request_id),
    CHECK ((publication = 'stored') = (locator IS NOT NULL AND stored_at IS NOT NULL)),
    CHECK ((publication = 'failed') = (failure IS NOT NULL)),
    CHECK (retained_at IS NULL OR publication = 'stored')
) STRICT;

INSERT INTO messages_new
    (id, team_id, conversation_id, seq, sender_id, request_id, body_sha256, body_len, backend,
     publication, locator, failure, sent_at, stored_at, retained_at, sender_kind)
SELECT id, team_id, conversation_id, seq, sender_id, request_id, body_sha256, body_len, backend,
       publication, locator, failure, sent_at, stored_at, retained_at, sender_kind
FROM messages;

DROP TABLE messages;

ALTER TABLE messages_new RENAME TO messages;

CREATE INDEX messages_unsettled ON messages (team_id, sent_at)
    WHERE publication <> 'stored';
CREATE INDEX messages_retention ON messages (team_id, backend, stored_at)
    WHERE publication = 'stored' AND retained_at IS NULL;
CREATE INDEX messages_sent ON messages (team_id, sent_at);

CREATE TEMP TABLE foreign_key_violations (
    found INTEGER NOT NULL CHECK (found = 0)
) STRICT;
INSERT INTO temp.foreign_key_violations SELECT count(*) FROM pragma_foreign_key_check;
DROP TABLE temp.foreign_key_violations;

COMMIT;

PRAGMA foreign_key_check;

PRAGMA foreign_keys = ON;
