-- Each fact written once (issue 19): a stored message's references are one marker per message,
-- not one inbox event per recipient inserted, leased and marked; a receipt's stored time is its
-- message's; a hand-out is written once (its confirmation is the receipt's delivered_at).
--
-- reference_marks: one row per stored message whose references are not yet confirmed
-- published, written in the transaction that stores the body (a local send, or the relay's
-- settlement); the reference worker leases it (leased_until), publishes one reference per
-- recipient not yet delivered with the event id derived from (message, recipient) — so a
-- re-publish after a lapsed lease or a crash is dropped by the inbox's dedup — and deletes it.
-- inbox is the team's inbox when the body was stored. ord is the lease order (oldest first).
--
-- No table is rebuilt (no constraint of messages changes): DROP TABLE inbox_events cascades to
-- nothing (no table references it) and ALTER TABLE … DROP COLUMN rewrites the rows in place,
-- so this runs in the migrator's transaction with foreign keys on.
CREATE TABLE reference_marks (
    ord           INTEGER NOT NULL PRIMARY KEY,
    message_id    BLOB    NOT NULL UNIQUE REFERENCES messages (id) ON DELETE CASCADE,
    tenant        TEXT    NOT NULL,
    team_id       BLOB    NOT NULL,
    inbox         TEXT    NOT NULL CHECK (trim(inbox) <> ''),
    created_at    INTEGER NOT NULL,
    leased_until  INTEGER
) STRICT;
CREATE INDEX reference_marks_due ON reference_marks (tenant, ord);

-- Every message with an unpublished inbox event keeps its references due, in the order of its
-- oldest such event (its inbox, tenant and time taken from that event). A reference an older
-- build published but had not marked is published again under the derived id: the recipient
-- may see one extra reference, which the fetch recognises (the receipt, or the live hand-out)
-- and acknowledges away; nothing is handed out twice.
-- One pass over the unpublished events (grouped, not a correlated lookup per event: no index
-- of inbox_events starts with message_id); SQLite takes the bare columns of a min() aggregate
-- from the row holding the minimum, so they are the oldest event's.
INSERT INTO reference_marks (message_id, tenant, team_id, inbox, created_at)
SELECT message_id, tenant, team_id, inbox, created_at
FROM (SELECT message_id, tenant, team_id, inbox, created_at, min(ord) AS oldest
      FROM inbox_events WHERE published_at IS NULL
      GROUP BY message_id)
ORDER BY oldest;

DROP TABLE inbox_events;

-- A receipt's stored time is its message's stored_at (the same instant, written once).
ALTER TABLE receipts DROP COLUMN stored_at;

-- A hand-out's confirmation is its receipt's delivered_at (decide_confirms reads it); the
-- hand-out row is written once, when issued.
ALTER TABLE hand_outs DROP COLUMN confirmed_at;
