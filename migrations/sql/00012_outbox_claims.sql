-- Claims of relay batches in flight (package relay), as inbox_claims are
-- the dispatcher's. A relay worker claims a batch inside a transaction that
-- it holds open while it publishes: the claim only locks the rows (SELECT
-- ... FOR UPDATE SKIP LOCKED, no write), and the transaction's one UPDATE
-- records what became of each row, published or failed. A row costs one
-- write instead of two (a claim that marked it running, then the
-- outcome). The row locks keep every other relay off the rows until the
-- transaction ends, and a row stays pending while locked, so the next row
-- of its ordering key is not at the key's head.
--
-- The attempt must still count if the relay dies while it publishes (a row
-- that kills its relay each time must end dead, not crash-loop), and the
-- transaction dies with it: so the worker records the batch here, from
-- another session, before it publishes; one small row per batch, naming
-- the transaction. The transaction deletes its own row when it records
-- the outcomes. A row whose transaction aborted (the relay died, stalled
-- past its lease and was ended by the server, or lost its connection)
-- holds attempts that never completed: the next relay to claim counts
-- them on the rows still pending, and records them in their history.
--
-- UNLOGGED: a row lives for one batch, so it is not worth a WAL write. A
-- server crash (or a failover) empties the table and aborts every batch
-- transaction in flight; the rows are claimed and published again, their
-- lost attempt not counted, and consumers dedupe them.
--
-- The relay no longer marks rows running. Rows an older relay marked so
-- are taken back by the new one once their lease ends, as before.

-- +goose Up
CREATE UNLOGGED TABLE outbox_claims (
    xid        xid8        NOT NULL,
    ids        uuid[]      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE outbox_claims IS 'pgbox: batches claimed by relay workers, one row per batch transaction while it publishes; a row whose transaction aborted marks attempts still to be counted';
COMMENT ON COLUMN outbox.status IS 'pending: waiting, backing off, or being published (its row locked by a relay''s transaction); published; dead: out of attempts; running: claimed by a relay older than version 12';
COMMENT ON COLUMN outbox.available_at IS 'pending: when the row may next be claimed (backoff); running (relays older than version 12): when the claim''s lease ends';

-- +goose Down
DROP TABLE outbox_claims;
COMMENT ON COLUMN outbox.status IS 'pending: waiting or backing off; running: claimed by a relay; published; dead: out of attempts';
COMMENT ON COLUMN outbox.available_at IS 'pending: when the row may next be claimed (backoff); running: when the claim''s lease ends';
