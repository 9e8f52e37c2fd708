-- The operators' audit trail, throttled scheduled replays, and the payloads
-- an operator replaced before a replay.
--
-- audit_log: one row per operator action (package admin, inboxctl): who,
-- from where, when, what, on which selection, and how many rows it changed.
-- A bulk action inserts its row first, then each batch statement adds its
-- count to the row in the same statement (a data-modifying WITH), so the
-- count is exactly what committed, even when the process dies half way: a
-- row still 'running' long after it began belongs to a process that died,
-- and its count is what that process had changed.
--
-- scheduled_replays gains a rate (messages per second; NULL: as fast as the
-- batches go), the pace the replay has used up to, how many messages were
-- selected when it was scheduled, and its audit row.
--
-- inbox_payload_edits keeps each payload an operator replaced (inboxctl
-- replay ID --payload-file F). The inbox row's payload_hash stays the hash
-- of what the producer sent, so a redelivery of the original is still a
-- duplicate, not a conflict.

-- +goose Up
CREATE TABLE audit_log (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    actor       text        NOT NULL,
    host        text        NOT NULL DEFAULT '',
    pid         integer,
    action      text        NOT NULL,
    selection   jsonb       NOT NULL DEFAULT '{}',
    note        text,
    affected    bigint      NOT NULL DEFAULT 0,
    state       text        NOT NULL DEFAULT 'running',
    error       text,
    CONSTRAINT audit_log_state_check CHECK (state IN ('running', 'finished', 'interrupted', 'cancelled'))
);

COMMENT ON TABLE audit_log IS 'pgbox: operator actions (replay, discard, purge, scheduled replays, outbox retries, payload edits)';
COMMENT ON COLUMN audit_log.actor IS 'who: the OS user or inboxctl --as; a library caller''s admin.Actor (by default the program''s name)';
COMMENT ON COLUMN audit_log.selection IS 'which rows: the filter or ids, as JSON';
COMMENT ON COLUMN audit_log.affected IS 'rows changed so far; each batch adds its count in its own statement';
COMMENT ON COLUMN audit_log.state IS 'running: under way (or its process died: see affected); finished; interrupted (error); cancelled (a scheduled replay called off)';

-- inboxctl audit --since: newest first, from a time on.
CREATE INDEX audit_log_at_idx ON audit_log (at);

ALTER TABLE scheduled_replays
    ADD COLUMN rate     double precision CONSTRAINT scheduled_replays_rate_check CHECK (rate > 0),
    ADD COLUMN paced_at timestamptz,
    ADD COLUMN selected bigint,
    ADD COLUMN audit_id bigint REFERENCES audit_log (id);

COMMENT ON COLUMN scheduled_replays.rate IS 'messages per second at most; NULL: no limit';
COMMENT ON COLUMN scheduled_replays.paced_at IS 'a throttled replay has used its rate up to this time; committed with each batch';
COMMENT ON COLUMN scheduled_replays.selected IS 'replayable messages the filter selected when it was scheduled';

CREATE TABLE inbox_payload_edits (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    edited_at  timestamptz NOT NULL DEFAULT now(),
    audit_id   bigint      NOT NULL REFERENCES audit_log (id),
    payload    bytea       NOT NULL
);
CREATE INDEX inbox_payload_edits_message_idx ON inbox_payload_edits (consumer, message_id);

COMMENT ON TABLE inbox_payload_edits IS 'pgbox: payloads an operator replaced before a replay, the replaced bytes kept as they were';

-- +goose Down
DROP TABLE inbox_payload_edits;
ALTER TABLE scheduled_replays
    DROP COLUMN audit_id,
    DROP COLUMN selected,
    DROP COLUMN paced_at,
    DROP COLUMN rate;
DROP TABLE audit_log;
