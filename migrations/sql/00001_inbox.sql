-- The inbox: one row per (consumer, message id). It is both the dedupe memory
-- (done rows are kept for a retention window so redeliveries find them) and
-- the dispatcher's work queue (pending and running rows, covered by partial
-- indexes so the queue stays small however large the memory grows).
--
-- Tables are created unqualified: the migrator runs each migration in a
-- transaction that first sets search_path (for that transaction only) to
-- the quoted pgbox schema, so they land there whatever it is called.

-- +goose Up
CREATE TABLE inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    seq          bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME inbox_seq),
    event_type   text        NOT NULL,
    status       text        NOT NULL DEFAULT 'pending',
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL,
    replays      integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    received_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    claim_token  bigint,
    ordering_key text,
    payload_hash bytea       NOT NULL,
    payload      bytea       NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}',
    last_error   text,
    errors       jsonb       NOT NULL DEFAULT '[]',
    PRIMARY KEY (consumer, message_id),
    CONSTRAINT inbox_status_check CHECK (status IN ('pending', 'running', 'done', 'dead', 'discarded')),
    CONSTRAINT inbox_attempts_check CHECK (attempts >= 0 AND max_attempts >= 1)
);

COMMENT ON TABLE inbox IS 'pgbox inbox: dedupe memory and work queue, one row per (consumer, message_id)';
COMMENT ON COLUMN inbox.seq IS 'arrival order; per ordering key it is also commit order (receivers serialize on the key)';
COMMENT ON COLUMN inbox.status IS 'pending: waiting or backing off; running: claimed by a worker; done; dead: out of attempts or permanent error; discarded: dead and set aside by an operator';
COMMENT ON COLUMN inbox.attempts IS 'attempts started, counted when a worker claims the message, before its handler runs';
COMMENT ON COLUMN inbox.available_at IS 'pending: when the message may next be claimed (backoff); running: when the claim''s lease ends and another worker may take it';
COMMENT ON COLUMN inbox.claim_token IS 'the current claim; every write a worker makes to the row is fenced by it';
COMMENT ON COLUMN inbox.payload_hash IS 'SHA-256 of payload: a redelivery with the same id but other bytes is a conflict';
COMMENT ON COLUMN inbox.errors IS 'one entry per failed attempt: {attempt, at, error, trace}';

-- The work queue: only pending rows, in claim order.
CREATE INDEX inbox_pending_idx ON inbox (consumer, available_at, seq)
    WHERE status = 'pending';

-- Claimed rows by lease end, so expired leases are found without scanning
-- the queue.
CREATE INDEX inbox_running_idx ON inbox (consumer, available_at)
    WHERE status = 'running';

-- The heads of ordering keys: a keyed row is claimable only when no earlier
-- row of its key is pending, running or dead.
CREATE INDEX inbox_ordering_idx ON inbox (consumer, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running', 'dead');

-- Redeliveries whose payload differed from the stored message: never
-- applied, kept here (append-only, so recording one never waits on a busy
-- row) for operators to see what the producer sent.
CREATE TABLE inbox_conflicts (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    payload_hash bytea       NOT NULL,
    payload      bytea       NOT NULL
);
CREATE INDEX inbox_conflicts_message_idx ON inbox_conflicts (consumer, message_id);

COMMENT ON TABLE inbox_conflicts IS 'pgbox: deliveries that reused a stored message id with a different payload';

-- +goose Down
DROP TABLE inbox_conflicts;
DROP TABLE inbox;
