-- A request id is the sender's own: the idempotency key of a send becomes (conversation,
-- sender, request_id), so two members of a conversation that both pick `t42-1` each get a
-- message of their own (before, the second was answered the first's message, or refused with
-- 409 for another body).
--
-- Every key unique today stays unique (a pair unique per conversation is unique per conversation
-- and sender), so the new constraint holds for every existing row. Its index replaces the old
-- one for the send's lookup (conversation, sender, request id). Built under the table's lock, in
-- the migration's transaction: start-up waits for it on a large table.
ALTER TABLE messages
    DROP CONSTRAINT messages_conversation_id_request_id_key,
    ADD CONSTRAINT messages_conversation_id_sender_id_request_id_key
        UNIQUE (conversation_id, sender_id, request_id);
