-- Claims of batches in flight (package dispatcher). A worker claims a batch
-- inside the transaction that handles it: one UPDATE marks the messages
-- done (or hands leased ones a lease) and locks them, so a message costs
-- one row write instead of a claim and a completion. The attempt must still
-- count before any handler runs, even if the process then dies with the
-- transaction, so the worker records the batch here, from another session,
-- before running handlers: one small row per batch, naming the batch
-- transaction's id.
--
-- A claim whose transaction committed is finished and is swept away by the
-- next claim. A claim whose transaction aborted (the process died, lost its
-- connection, stalled past its lease) holds attempts that never completed:
-- the next worker to claim counts them on the messages, records them in the
-- history, and has the messages retried one at a time, as an expired lease
-- is.
--
-- UNLOGGED: a row lives for one batch, so it is not worth a WAL write. A
-- server crash empties the table, and then every batch transaction in
-- flight is lost with it, handlers' writes included; the messages are
-- simply claimed again (their lost attempt is not counted, as after any
-- server crash with synchronous_commit's guarantees).

-- +goose Up
CREATE UNLOGGED TABLE inbox_claims (
    consumer    text        NOT NULL,
    xid         xid8        NOT NULL,
    message_ids text[]      NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE inbox_claims IS 'pgbox: batches claimed by dispatcher workers, one row per batch transaction; a row whose transaction aborted marks attempts still to be counted';

-- +goose Down
DROP TABLE inbox_claims;
