-- Failure groups (inboxctl failures, replay --group, discard --group) as
-- SQL functions, so that the queries that group failures and the index
-- that finds a group share one definition, and an index on a group's
-- fingerprint, so that listing, counting or replaying one group, and
-- telling an unknown fingerprint from a drained group, read only the rows
-- that ever failed, however many done rows the inbox holds.
--
-- The functions are IMMUTABLE and made only of built-in immutable
-- functions, so PostgreSQL inlines them and matches the queries' calls
-- against the index expression.
--
-- The index is built with a plain CREATE INDEX, which blocks writes to the
-- inbox while it runs: instant on a new or small inbox, since it holds only
-- rows with a last error. On an inbox already holding many millions of
-- rows, build it first with CREATE INDEX CONCURRENTLY under the same name
-- (docs/operations.md gives the statement, after creating the functions);
-- this migration then finds it and skips it.

-- +goose Up

-- A last error with what varies from one occurrence of the same failure to
-- the next (ids, quoted values, timestamps, hex, numbers) replaced by
-- placeholders, so that "order 'order-17' timed out after 30s" and "order
-- 'order-9' timed out after 31s" read alike.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inbox_error_pattern(last_error text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
    coalesce(last_error, ''),
    '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'),
    '"[^"]*"', '"<str>"', 'g'),
    '''[^'']*''', '''<str>''', 'g'),
    '\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}(:?\d{2})?)?', '<time>', 'g'),
    '\m0x[0-9a-fA-F]+\M', '<hex>', 'g'),
    '\m[0-9a-f]{12,}\M', '<hex>', 'g'),
    '\d+(\.\d+)?', '<n>', 'g')
$$;
-- +goose StatementEnd

-- A failure group's fingerprint: the consumer, the event type and the
-- error pattern (inbox_error_pattern of the last error), hashed to 12 hex
-- digits an operator can type. The consumer is part of it, so a group is
-- one line of inboxctl failures. It takes the pattern rather than calling
-- inbox_error_pattern itself: a function body is resolved with the
-- caller's search_path, which need not name pgbox's schema; callers name
-- both functions with their schema.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inbox_failure_group(consumer text, event_type text, error_pattern text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT left(md5(consumer || chr(10) || event_type || chr(10) || error_pattern), 12)
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION inbox_error_pattern(text) IS 'pgbox: a last error with ids, quoted values, timestamps, hex and numbers replaced by placeholders';
COMMENT ON FUNCTION inbox_failure_group(text, text, text) IS 'pgbox: the fingerprint of a failure group (inboxctl failures): consumer, event type and error pattern';

-- Every row that ever failed (a replay and a later success keep its last
-- error), by group and arrival: a group's rows in seq order, for list and
-- replay, and whether a fingerprint was ever seen.
CREATE INDEX IF NOT EXISTS inbox_failure_group_idx
    ON inbox (inbox_failure_group(consumer, event_type, inbox_error_pattern(last_error)), seq)
    WHERE last_error IS NOT NULL;

-- +goose Down
DROP INDEX inbox_failure_group_idx;
DROP FUNCTION inbox_failure_group(text, text, text);
DROP FUNCTION inbox_error_pattern(text);
