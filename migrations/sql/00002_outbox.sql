-- The outbox: messages written in a service's business transactions,
-- waiting for the relay to publish them to a broker. A row exists only if
-- its transaction committed, so the relay never publishes a rolled-back
-- change; it claims rows by status (never by "id greater than the last one
-- seen"), so rows whose transactions committed out of id order are never
-- skipped.

-- +goose Up
CREATE TABLE outbox (
    id           uuid        PRIMARY KEY,
    seq          bigint      GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME outbox_seq),
    topic        text        NOT NULL,
    event_type   text        NOT NULL,
    ordering_key text,
    status       text        NOT NULL DEFAULT 'pending',
    attempts     integer     NOT NULL DEFAULT 0,
    replays      integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz,
    claim_token  bigint,
    payload      bytea       NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}',
    last_error   text,
    errors       jsonb       NOT NULL DEFAULT '[]',
    CONSTRAINT outbox_status_check CHECK (status IN ('pending', 'running', 'published', 'dead')),
    CONSTRAINT outbox_attempts_check CHECK (attempts >= 0)
);

COMMENT ON TABLE outbox IS 'pgbox outbox: messages committed with business changes, waiting to be published';
COMMENT ON COLUMN outbox.id IS 'UUIDv7 unless the producer chose one; published as the message id, so consumers dedupe on it';
COMMENT ON COLUMN outbox.seq IS 'write order; per ordering key it is also commit order (writers serialize on the key)';
COMMENT ON COLUMN outbox.status IS 'pending: waiting or backing off; running: claimed by a relay; published; dead: out of attempts';
COMMENT ON COLUMN outbox.available_at IS 'pending: when the row may next be claimed (backoff); running: when the claim''s lease ends';
COMMENT ON COLUMN outbox.errors IS 'one entry per failed publish attempt: {attempt, at, error}';

-- The relay's queue: pending rows in publish order.
CREATE INDEX outbox_pending_idx ON outbox (available_at, seq) WHERE status = 'pending';

-- Claimed rows by lease end, so a dead relay's rows are found without
-- scanning the queue.
CREATE INDEX outbox_running_idx ON outbox (available_at) WHERE status = 'running';

-- The heads of ordering keys: a keyed row is claimable only when no earlier
-- row of its key is pending, running or dead.
CREATE INDEX outbox_ordering_idx ON outbox (ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running', 'dead');

-- Retention: published rows by age.
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE status = 'published';

-- +goose Down
DROP TABLE outbox;
