-- The inbox and the outbox become tables partitioned by bucket, so that the
-- rows a service keeps for months cost the hot paths nothing and retention
-- drops whole partitions instead of deleting rows (docs/design.md,
-- "Partitions", says why this layout and what it was measured against).
--
-- A row's bucket is a function of its message id alone, so that every
-- delivery of an id lands in the same partition, where the partition's
-- primary key finds the duplicate:
--
--   - an id that is a UUIDv7 (as pgbox's outbox makes them) made on day D,
--     from the table's origin day on, is "dated": bucket D, the day partition
--     inbox_dYYYYMMDD (outbox_dYYYYMMDD), or the default partition while no
--     partition of that day exists (a day not created yet, or dropped);
--   - any other id is "undated". In the outbox, bucket 0 (outbox_undated).
--     In the inbox, the generation current when the message first arrived:
--     bucket -g, partition inbox_gN. A new undated message is stored in the
--     current generation only if no earlier generation holds its id; the
--     receive statement reads the current generation from the partitioning
--     table, whose lock it holds until it commits, and a new generation is
--     started only under an exclusive lock on that table, so no receive
--     ever straddles a change of generation.
--
-- Package maintenance (internal/partition) creates day partitions ahead,
-- starts generations, and drops partitions whose done (published) rows
-- are all past the retention window, moving the rows that are not done to
-- the partition that now holds their bucket (default, or the current
-- generation).
--
-- The existing tables become partitions in place: the inbox as generation 0,
-- the outbox as outbox_undated, their rows untouched. On a table of many
-- millions of rows, run the preparation statements in docs/operations.md
-- ("Upgrading a large inbox to version 9") first, without blocking; this
-- migration then finds their results and only renames and attaches.

-- +goose Up

-- The UTC day (days since 1970-01-01) a UUIDv7 id was made on, or NULL for
-- any other id: only the canonical lower-case text counts, as in Go's
-- partition.IDDay, which computes it on the hot paths (the regular
-- expression costs microseconds an id). Not STRICT, so that it is inlined.
CREATE FUNCTION uuidv7_day(id text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
            THEN (('x' || substr(id, 1, 8) || substr(id, 10, 4))::bit(48)::bigint / 86400000)::integer END
$$;

COMMENT ON FUNCTION uuidv7_day(text) IS 'pgbox: the UTC day (since 1970-01-01) of a canonical UUIDv7 id, or NULL';

CREATE TABLE partitioning (
    table_name            text        PRIMARY KEY,
    origin_day            integer     NOT NULL,
    generation            integer     NOT NULL DEFAULT 0,
    generation_started_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT partitioning_table_check CHECK (table_name IN ('inbox', 'outbox')),
    CONSTRAINT partitioning_origin_check CHECK (origin_day >= 1),
    CONSTRAINT partitioning_generation_check CHECK (generation >= 0)
);

COMMENT ON TABLE partitioning IS 'pgbox: how the inbox and outbox are partitioned; receives of undated ids read (and so lock) the inbox row';
COMMENT ON COLUMN partitioning.origin_day IS 'UUIDv7 ids made on this UTC day (since 1970-01-01) or later are dated: their bucket is their day';
COMMENT ON COLUMN partitioning.generation IS 'inbox: the generation new undated messages go to (bucket -generation); changed only under an exclusive lock on this table';
COMMENT ON COLUMN partitioning.generation_started_at IS 'inbox: when the current generation started taking messages';

-- The bucket a row with this id belongs in, for tests, fixtures and
-- repairs made by hand. pgbox's own writes compute it themselves, and a
-- receive looks for an undated id in the earlier generations first, which
-- inbox_bucket does not. The bodies name their tables with the schema: a
-- function body is resolved with the caller's search_path.
-- +goose StatementBegin
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION inbox_bucket(message_id text) RETURNS integer
        LANGUAGE sql STABLE PARALLEL SAFE AS $b$
        SELECT CASE WHEN %1$I.uuidv7_day(message_id) >= p.origin_day THEN %1$I.uuidv7_day(message_id) ELSE -p.generation END
        FROM %1$I.partitioning AS p WHERE p.table_name = 'inbox'
        $b$ $f$, current_schema());
    EXECUTE format($f$
        CREATE FUNCTION outbox_bucket(id uuid) RETURNS integer
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $b$
        SELECT coalesce(%1$I.uuidv7_day(id::text), 0)
        $b$ $f$, current_schema());
END $do$;
-- +goose StatementEnd

COMMENT ON FUNCTION inbox_bucket(text) IS 'pgbox: the bucket (partition) of an inbox row with this message id, for fixtures and repairs by hand';
COMMENT ON FUNCTION outbox_bucket(uuid) IS 'pgbox: the bucket (partition) of an outbox row with this id, for fixtures and repairs by hand';

-- +goose StatementBegin
DO $$
DECLARE
    -- The inbox's origin, if it holds messages: the day after tomorrow, so
    -- that the ids it holds, made until today, stay undated and are found
    -- where they are, in generation 0. An id made today by a producer
    -- whose clock ran a day ahead would be dated and missed: the margin is
    -- that day. A new inbox's origin is 1: every UUIDv7 is dated. The
    -- outbox's is always 1: it dedupes nothing, and an id is made once.
    later    integer := floor(extract(epoch FROM now()) / 86400)::integer + 2;
    next_seq bigint;
BEGIN
    -- Both tables are locked first, so that no message arrives between
    -- reading whether the inbox is empty and changing it.
    LOCK TABLE inbox, outbox IN ACCESS EXCLUSIVE MODE;
    INSERT INTO partitioning (table_name, origin_day)
    VALUES ('inbox', CASE WHEN EXISTS (SELECT 1 FROM inbox) THEN later ELSE 1 END), ('outbox', 1);

    -- The inbox becomes generation 0: bucket 0 in every row, the primary
    -- key (consumer, message_id, bucket), a sequence of its own for seq.

    ALTER TABLE inbox ADD COLUMN IF NOT EXISTS bucket integer NOT NULL DEFAULT 0;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'inbox_g0_bucket_check'
                   AND conrelid = 'inbox'::regclass) THEN
        ALTER TABLE inbox ADD CONSTRAINT inbox_g0_bucket_check CHECK (bucket = 0);
    END IF;
    CREATE UNIQUE INDEX IF NOT EXISTS inbox_g0_pkey ON inbox (consumer, message_id, bucket);
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO next_seq FROM inbox_seq;
    ALTER TABLE inbox ALTER COLUMN seq DROP IDENTITY;
    EXECUTE format('CREATE SEQUENCE inbox_seq AS bigint START %s', next_seq);
    ALTER TABLE inbox DROP CONSTRAINT inbox_pkey;
    ALTER TABLE inbox ADD CONSTRAINT inbox_g0_pkey PRIMARY KEY USING INDEX inbox_g0_pkey;
    ALTER TABLE inbox RENAME TO inbox_g0;
    ALTER INDEX inbox_pending_idx RENAME TO inbox_g0_pending_idx;
    ALTER INDEX inbox_running_idx RENAME TO inbox_g0_running_idx;
    ALTER INDEX inbox_ordering_idx RENAME TO inbox_g0_ordering_idx;
    ALTER INDEX inbox_done_idx RENAME TO inbox_g0_done_idx;
    ALTER INDEX inbox_failed_idx RENAME TO inbox_g0_failed_idx;
    ALTER INDEX inbox_failure_group_idx RENAME TO inbox_g0_failure_group_idx;

    -- The outbox likewise becomes outbox_undated (bucket 0).
    ALTER TABLE outbox ADD COLUMN IF NOT EXISTS bucket integer NOT NULL DEFAULT 0;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'outbox_undated_bucket_check'
                   AND conrelid = 'outbox'::regclass) THEN
        ALTER TABLE outbox ADD CONSTRAINT outbox_undated_bucket_check CHECK (bucket = 0);
    END IF;
    CREATE UNIQUE INDEX IF NOT EXISTS outbox_undated_pkey ON outbox (id, bucket);
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END INTO next_seq FROM outbox_seq;
    ALTER TABLE outbox ALTER COLUMN seq DROP IDENTITY;
    EXECUTE format('CREATE SEQUENCE outbox_seq AS bigint START %s', next_seq);
    ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
    ALTER TABLE outbox ADD CONSTRAINT outbox_undated_pkey PRIMARY KEY USING INDEX outbox_undated_pkey;
    ALTER TABLE outbox RENAME TO outbox_undated;
    ALTER INDEX outbox_pending_idx RENAME TO outbox_undated_pending_idx;
    ALTER INDEX outbox_running_idx RENAME TO outbox_undated_running_idx;
    ALTER INDEX outbox_ordering_idx RENAME TO outbox_undated_ordering_idx;
    ALTER INDEX outbox_published_idx RENAME TO outbox_undated_published_idx;
    CREATE INDEX IF NOT EXISTS outbox_undated_dead_idx ON outbox_undated (seq) WHERE status = 'dead';
END $$;
-- +goose StatementEnd

CREATE TABLE inbox (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    seq          bigint      NOT NULL DEFAULT nextval('inbox_seq'),
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
    bucket       integer     NOT NULL,
    CONSTRAINT inbox_pkey PRIMARY KEY (consumer, message_id, bucket),
    CONSTRAINT inbox_status_check CHECK (status IN ('pending', 'running', 'done', 'dead', 'discarded')),
    CONSTRAINT inbox_attempts_check CHECK (attempts >= 0 AND max_attempts >= 1)
) PARTITION BY RANGE (bucket);

ALTER SEQUENCE inbox_seq OWNED BY inbox.seq;

CREATE INDEX inbox_pending_idx ON inbox (consumer, available_at, seq) WHERE status = 'pending';
CREATE INDEX inbox_running_idx ON inbox (consumer, available_at) WHERE status = 'running';
CREATE INDEX inbox_ordering_idx ON inbox (consumer, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running', 'dead');
CREATE INDEX inbox_done_idx ON inbox (processed_at) WHERE status = 'done';
CREATE INDEX inbox_failed_idx ON inbox (seq)
    WHERE status IN ('dead', 'discarded') OR (status = 'pending' AND last_error IS NOT NULL);
CREATE INDEX inbox_failure_group_idx
    ON inbox (inbox_failure_group(consumer, event_type, inbox_error_pattern(last_error)), seq)
    WHERE last_error IS NOT NULL;

ALTER TABLE inbox ATTACH PARTITION inbox_g0 FOR VALUES FROM (0) TO (1);

CREATE TABLE inbox_default PARTITION OF inbox DEFAULT;

COMMENT ON TABLE inbox IS 'pgbox inbox: dedupe memory and work queue, one row per (consumer, message_id), partitioned by bucket (a function of message_id)';
COMMENT ON COLUMN inbox.bucket IS 'the partition: the UTC day of a dated (UUIDv7) id; -g for an undated id first received in generation g';
COMMENT ON COLUMN inbox.seq IS 'arrival order; per ordering key it is also commit order (receivers serialize on the key)';
COMMENT ON COLUMN inbox.status IS 'pending: waiting or backing off; running: claimed by a worker; done; dead: out of attempts or permanent error; discarded: dead and set aside by an operator';
COMMENT ON COLUMN inbox.attempts IS 'attempts started, counted when a worker claims the message, before its handler runs';
COMMENT ON COLUMN inbox.available_at IS 'pending: when the message may next be claimed (backoff); running: when the claim''s lease ends and another worker may take it';
COMMENT ON COLUMN inbox.claim_token IS 'the current claim; every write a worker makes to the row is fenced by it';
COMMENT ON COLUMN inbox.payload_hash IS 'SHA-256 of payload: a redelivery with the same id but other bytes is a conflict';
COMMENT ON COLUMN inbox.errors IS 'one entry per failed attempt: {attempt, at, error, trace}';
COMMENT ON TABLE inbox_default IS 'pgbox: dated inbox rows whose day has no partition (not created yet, or dropped: its rows that were not done)';

CREATE TABLE outbox (
    id           uuid        NOT NULL,
    seq          bigint      NOT NULL DEFAULT nextval('outbox_seq'),
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
    bucket       integer     NOT NULL,
    CONSTRAINT outbox_pkey PRIMARY KEY (id, bucket),
    CONSTRAINT outbox_status_check CHECK (status IN ('pending', 'running', 'published', 'dead')),
    CONSTRAINT outbox_attempts_check CHECK (attempts >= 0)
) PARTITION BY RANGE (bucket);

ALTER SEQUENCE outbox_seq OWNED BY outbox.seq;

CREATE INDEX outbox_pending_idx ON outbox (available_at, seq) WHERE status = 'pending';
CREATE INDEX outbox_running_idx ON outbox (available_at) WHERE status = 'running';
CREATE INDEX outbox_ordering_idx ON outbox (ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running', 'dead');
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE status = 'published';
-- Dead rows by write order: counted and listed (inboxctl stats, outbox
-- list --status dead) without reading the published ones.
CREATE INDEX outbox_dead_idx ON outbox (seq) WHERE status = 'dead';

ALTER TABLE outbox ATTACH PARTITION outbox_undated FOR VALUES FROM (0) TO (1);

CREATE TABLE outbox_default PARTITION OF outbox DEFAULT;

COMMENT ON TABLE outbox IS 'pgbox outbox: messages committed with business changes, waiting to be published; partitioned by bucket (a function of id)';
COMMENT ON COLUMN outbox.bucket IS 'the partition: the UTC day of a UUIDv7 id, 0 for any other id';
COMMENT ON COLUMN outbox.id IS 'UUIDv7 unless the producer chose one; published as the message id, so consumers dedupe on it';
COMMENT ON COLUMN outbox.seq IS 'write order; per ordering key it is also commit order (writers serialize on the key)';
COMMENT ON COLUMN outbox.status IS 'pending: waiting or backing off; running: claimed by a relay; published; dead: out of attempts';
COMMENT ON COLUMN outbox.available_at IS 'pending: when the row may next be claimed (backoff); running: when the claim''s lease ends';
COMMENT ON COLUMN outbox.errors IS 'one entry per failed publish attempt: {attempt, at, error}';
COMMENT ON TABLE outbox_undated IS 'pgbox: outbox rows whose id is not a UUIDv7 of the origin day or later (and every row written before version 9)';
COMMENT ON TABLE outbox_default IS 'pgbox: dated outbox rows whose day has no partition (not created yet, or dropped: its rows that were not published)';

-- The constraints that keep each partition's rows where the bucket rule
-- puts them (internal/partition makes the same for every partition it
-- creates). A dated row's id must be a UUIDv7 of its bucket's day: the
-- check reads the id's first 48 bits (an id that is no hexadecimal UUID
-- fails it with an error). That an undated id is no UUIDv7 is not checked:
-- the regular expression it takes (uuidv7_day) costs more than the insert.
-- +goose StatementBegin
DO $$
DECLARE
    inbox_origin integer := (SELECT origin_day FROM partitioning WHERE table_name = 'inbox');
BEGIN
    EXECUTE format('ALTER TABLE inbox_default ADD CONSTRAINT inbox_default_bucket_check CHECK (bucket >= %s
        AND substr(message_id, 15, 1) = ''7''
        AND (''x'' || substr(message_id, 1, 8) || substr(message_id, 10, 4))::bit(48)::bigint / 86400000 = bucket)', inbox_origin);
    ALTER TABLE outbox_default ADD CONSTRAINT outbox_default_bucket_check CHECK (bucket >= 1
        AND substr(id::text, 15, 1) = '7'
        AND ('x' || substr(id::text, 1, 8) || substr(id::text, 10, 4))::bit(48)::bigint / 86400000 = bucket);
    -- An inbox that holds messages starts generation 1 at once, so that
    -- generation 0, the old table, stops growing and is dropped whole
    -- once all of it is past the retention window.
    IF EXISTS (SELECT 1 FROM inbox) THEN
        CREATE TABLE inbox_g1 PARTITION OF inbox FOR VALUES FROM (-1) TO (0);
        UPDATE partitioning SET generation = 1, generation_started_at = now() WHERE table_name = 'inbox';
    END IF;
END $$;
-- +goose StatementEnd

-- +goose Down

-- Back to one table each, rows copied (a read and a write of every row:
-- on a large inbox, a long, blocking step).
ALTER SEQUENCE inbox_seq RENAME TO inbox_seq_partitioned;
CREATE TABLE inbox_unpartitioned (
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
    errors       jsonb       NOT NULL DEFAULT '[]'
);
INSERT INTO inbox_unpartitioned (consumer, message_id, seq, event_type, status, attempts, max_attempts, replays,
    available_at, received_at, processed_at, claim_token, ordering_key, payload_hash, payload, metadata, last_error, errors)
OVERRIDING SYSTEM VALUE
SELECT consumer, message_id, seq, event_type, status, attempts, max_attempts, replays,
    available_at, received_at, processed_at, claim_token, ordering_key, payload_hash, payload, metadata, last_error, errors
FROM inbox ORDER BY seq;
SELECT setval('inbox_seq', greatest(nextval('inbox_seq_partitioned') - 1, 1));
DROP TABLE inbox;
ALTER TABLE inbox_unpartitioned RENAME TO inbox;
ALTER TABLE inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (consumer, message_id),
    ADD CONSTRAINT inbox_status_check CHECK (status IN ('pending', 'running', 'done', 'dead', 'discarded')),
    ADD CONSTRAINT inbox_attempts_check CHECK (attempts >= 0 AND max_attempts >= 1);
CREATE INDEX inbox_pending_idx ON inbox (consumer, available_at, seq) WHERE status = 'pending';
CREATE INDEX inbox_running_idx ON inbox (consumer, available_at) WHERE status = 'running';
CREATE INDEX inbox_ordering_idx ON inbox (consumer, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running', 'dead');
CREATE INDEX inbox_done_idx ON inbox (processed_at) WHERE status = 'done';
CREATE INDEX inbox_failed_idx ON inbox (seq)
    WHERE status IN ('dead', 'discarded') OR (status = 'pending' AND last_error IS NOT NULL);
CREATE INDEX inbox_failure_group_idx
    ON inbox (inbox_failure_group(consumer, event_type, inbox_error_pattern(last_error)), seq)
    WHERE last_error IS NOT NULL;
COMMENT ON TABLE inbox IS 'pgbox inbox: dedupe memory and work queue, one row per (consumer, message_id)';

ALTER SEQUENCE outbox_seq RENAME TO outbox_seq_partitioned;
CREATE TABLE outbox_unpartitioned (
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
    errors       jsonb       NOT NULL DEFAULT '[]'
);
INSERT INTO outbox_unpartitioned (id, seq, topic, event_type, ordering_key, status, attempts, replays,
    available_at, created_at, published_at, claim_token, payload, metadata, last_error, errors)
OVERRIDING SYSTEM VALUE
SELECT id, seq, topic, event_type, ordering_key, status, attempts, replays,
    available_at, created_at, published_at, claim_token, payload, metadata, last_error, errors
FROM outbox ORDER BY seq;
SELECT setval('outbox_seq', greatest(nextval('outbox_seq_partitioned') - 1, 1));
DROP TABLE outbox;
ALTER TABLE outbox_unpartitioned RENAME TO outbox;
ALTER INDEX outbox_unpartitioned_pkey RENAME TO outbox_pkey;
ALTER TABLE outbox
    ADD CONSTRAINT outbox_status_check CHECK (status IN ('pending', 'running', 'published', 'dead')),
    ADD CONSTRAINT outbox_attempts_check CHECK (attempts >= 0);
CREATE INDEX outbox_pending_idx ON outbox (available_at, seq) WHERE status = 'pending';
CREATE INDEX outbox_running_idx ON outbox (available_at) WHERE status = 'running';
CREATE INDEX outbox_ordering_idx ON outbox (ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'running', 'dead');
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE status = 'published';
COMMENT ON TABLE outbox IS 'pgbox outbox: messages committed with business changes, waiting to be published';

DROP FUNCTION outbox_bucket(uuid);
DROP FUNCTION inbox_bucket(text);
DROP TABLE partitioning;
DROP FUNCTION uuidv7_day(text);
