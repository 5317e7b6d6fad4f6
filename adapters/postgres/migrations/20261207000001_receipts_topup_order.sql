-- A fetch costs what it hands out, not what is waiting (issue 36 item 4): the ledger's top-up
-- (`undelivered`) hands out a recipient's oldest undelivered messages, ordered by the message's
-- (stored_at, conversation_id, seq). Driven by receipts_undelivered (recipient_id, message_id)
-- it read and sorted every undelivered receipt of the recipient to return 20: a backlog of
-- 100,000 cost 100,000 rows a fetch. The order's columns are copied onto the receipt, so one
-- partial index holds the recipient's undelivered receipts in the top-up's order and the
-- top-up walks only the rows it returns (and those it skips: held by a live hand-out).
--
-- receipts.stored_at, conversation_id, seq: the message's, as they stand (stored_at NULL until
-- the message is stored; written by the send that stores it, or by the relay's settlement).
-- Backfilled here for the undelivered receipts only (the index holds no other; a delivered
-- receipt made before this migration keeps NULL, and nothing reads them).
ALTER TABLE receipts
    ADD COLUMN stored_at timestamptz,
    ADD COLUMN conversation_id uuid,
    ADD COLUMN seq bigint;

UPDATE receipts r
SET stored_at = m.stored_at, conversation_id = m.conversation_id, seq = m.seq
FROM messages m
WHERE m.id = r.message_id AND r.delivered_at IS NULL;

CREATE INDEX receipts_topup_order ON receipts (recipient_id, stored_at, conversation_id, seq)
    WHERE delivered_at IS NULL;
