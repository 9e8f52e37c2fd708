-- Dated foreign ids (docs/design.md, "Dated foreign ids"): an inbox message
-- whose id is no UUIDv7 but that carries a time fixed with its id
-- (inbox.Message.IDTime: an SQS message's SentTimestamp, a Kafka record's
-- timestamp) goes to that time's day partition, as a UUIDv7 goes to the day
-- it was made on. So an inbox day partition, and the inbox's default
-- partition, may now hold ids that are no UUIDv7: their checks no longer
-- read the id, only the bucket. The outbox's are unchanged (pgbox makes
-- its ids, UUIDv7s).
--
-- Nothing else changes: the bucket of a row is still computed by the
-- receive, a dated foreign id's from its IDTime, and no row moves.
--
-- A day partition's check is only dropped: once attached, its bound keeps
-- its rows to its bucket (internal/partition adds "bucket = day" to every
-- partition it makes, for ATTACH's sake). Adding that check here would read
-- every row of every kept day under an exclusive lock. The default
-- partition's check becomes "bucket >= origin_day", which reads the default
-- partition's rows (few: ids of days without a partition).

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    c record;
BEGIN
    -- The constraints on message_id, found by the columns they name: a
    -- function that decompiles a catalog row (pg_get_constraintdef) may be
    -- run on every schema's rows before the join picks this one's, and
    -- fails on a table another session is dropping ("could not open
    -- relation with OID").
    FOR c IN
        SELECT k.conrelid::regclass AS rel, k.conname
        FROM pg_catalog.pg_constraint AS k
        JOIN pg_catalog.pg_inherits AS i ON i.inhrelid = k.conrelid
        WHERE i.inhparent = 'inbox'::regclass AND k.contype = 'c'
          AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                      WHERE a.attrelid = k.conrelid AND a.attname = 'message_id' AND a.attnum = ANY (k.conkey))
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.rel, c.conname);
    END LOOP;
    EXECUTE format('ALTER TABLE inbox_default ADD CONSTRAINT inbox_default_bucket_check CHECK (bucket >= %s)',
                   (SELECT origin_day FROM partitioning WHERE table_name = 'inbox'));
END $$;
-- +goose StatementEnd

COMMENT ON COLUMN inbox.bucket IS 'the partition: the UTC day of a dated id (a UUIDv7''s own time, or the IDTime a foreign id was received with); -g for an undated id first received in generation g';
COMMENT ON TABLE inbox_default IS 'pgbox: dated inbox rows whose day has no partition (not created yet, or dropped: its rows that were not done)';

-- +goose Down
-- Back to checks that every dated row's id is a UUIDv7 of its day. That
-- reads every dated row, and fails, changing nothing, if the inbox holds a
-- dated foreign id: pgbox before version 11 would look for its
-- redeliveries in the generations, and store them again.
-- +goose StatementBegin
DO $$
DECLARE
    p record;
    uuid_day constant text := $c$substr(message_id, 15, 1) = '7'
        AND ('x' || substr(message_id, 1, 8) || substr(message_id, 10, 4))::bit(48)::bigint / 86400000 = bucket$c$;
BEGIN
    ALTER TABLE inbox_default DROP CONSTRAINT inbox_default_bucket_check;
    EXECUTE format('ALTER TABLE inbox_default ADD CONSTRAINT inbox_default_bucket_check CHECK (bucket >= %s AND %s)',
                   (SELECT origin_day FROM partitioning WHERE table_name = 'inbox'), uuid_day);
    -- The inbox's dated partitions; pg_get_expr only on them (OFFSET 0
    -- keeps it out of the catalog scans, see Up).
    FOR p IN
        SELECT ours.rel, ours.relname
        FROM (SELECT c.oid::regclass AS rel, c.relname, c.oid, c.relpartbound
              FROM pg_catalog.pg_inherits AS i JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'inbox'::regclass
              OFFSET 0) AS ours
        WHERE pg_catalog.pg_get_expr(ours.relpartbound, ours.oid) ~ '^FOR VALUES FROM \([1-9]'
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I, ADD CONSTRAINT %I CHECK (%s)',
                       p.rel, p.relname || '_day_check', p.relname || '_day_check', uuid_day);
    END LOOP;
EXCEPTION WHEN check_violation THEN
    RAISE EXCEPTION 'pgbox: cannot roll back to version 10: the inbox holds messages dated by their IDTime (ids that are no UUIDv7 in a day partition), which version 10 would look for in the generations and store again'
        USING HINT = 'wait until retention has dropped their days, with receivers that set no IDTime, then roll back',
              DETAIL = SQLERRM;
END $$;
-- +goose StatementEnd
