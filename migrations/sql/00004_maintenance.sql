-- Maintenance (package maintenance) and operators' queries on a huge inbox:
-- indexes that let retention and inboxctl find the few rows they want
-- without reading the whole dedupe memory, and the table of replays an
-- operator scheduled for later (inboxctl replay --at).
--
-- River's own tables, which run the maintenance jobs with leader election,
-- are installed right after this migration by the same migrate step
-- (rivermigrate, into this schema): see package migrations.
--
-- The indexes are built with a plain CREATE INDEX, which blocks writes to
-- the table while it runs: instant on a new or small inbox. On an inbox
-- already holding many millions of rows, build them first with CREATE INDEX
-- CONCURRENTLY under the same names (docs/operations.md lists the
-- statements); this migration then finds them and skips them.

-- +goose Up

-- Retention: done rows by completion time, oldest first. Pruning deletes
-- them in small batches from the old end; stats count the recent end.
CREATE INDEX IF NOT EXISTS inbox_done_idx ON inbox (processed_at)
    WHERE status = 'done';

-- Failures and replays: dead, discarded and failing (pending after a
-- failure) rows, by arrival. inboxctl failures groups them, replay walks
-- them by seq; both would otherwise read every done row too.
CREATE INDEX IF NOT EXISTS inbox_failed_idx ON inbox (seq)
    WHERE status IN ('dead', 'discarded') OR (status = 'pending' AND last_error IS NOT NULL);

-- Retention of conflict records, oldest first.
CREATE INDEX IF NOT EXISTS inbox_conflicts_received_idx ON inbox_conflicts (received_at);

-- Replays an operator scheduled for later. The maintenance job runs each one
-- once its time has come (by the database clock), in batches, each batch in
-- one transaction with the row's progress (cursor, replayed), so a replay
-- interrupted by a crash resumes where it stopped and replays no message
-- twice.
CREATE TABLE scheduled_replays (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_at      timestamptz NOT NULL,
    filter      jsonb       NOT NULL,
    note        text,
    state       text        NOT NULL DEFAULT 'scheduled',
    cursor_seq  bigint      NOT NULL DEFAULT -1,
    replayed    bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz,
    last_error  text,
    CONSTRAINT scheduled_replays_state_check CHECK (state IN ('scheduled', 'running', 'done', 'failed', 'cancelled'))
);

COMMENT ON TABLE scheduled_replays IS 'pgbox: inbox replays scheduled for later (inboxctl replay --at), run by the maintenance job';
COMMENT ON COLUMN scheduled_replays.filter IS 'which messages: the admin.Filter, as JSON; only those still replayable when it runs are replayed';
COMMENT ON COLUMN scheduled_replays.state IS 'scheduled: waiting for run_at; running: part done; done; failed (last_error); cancelled by an operator';
COMMENT ON COLUMN scheduled_replays.cursor_seq IS 'the inbox seq the replay has walked up to; committed with each batch';
COMMENT ON COLUMN scheduled_replays.replayed IS 'messages replayed so far';

-- The maintenance job's queue: replays not yet finished, by due time.
CREATE INDEX scheduled_replays_due_idx ON scheduled_replays (run_at)
    WHERE state IN ('scheduled', 'running');

-- +goose Down
DROP TABLE scheduled_replays;
DROP INDEX inbox_conflicts_received_idx;
DROP INDEX inbox_failed_idx;
DROP INDEX inbox_done_idx;
