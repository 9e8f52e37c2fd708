-- Pauses an operator put on a consumer, or on one event type of it
-- (inboxctl pause, the console, admin.Pause). While a pause row exists,
-- every dispatcher of the consumer, in every process, stops claiming the
-- paused messages within a poll interval; messages keep arriving and wait
-- as pending. Deleting the row (resume) lets them be claimed again.
--
-- event_type is '' for a pause of the whole consumer, so that the primary
-- key holds at most one pause per consumer and event type without a NULL.

-- +goose Up
CREATE TABLE consumer_pauses (
    consumer   text        NOT NULL,
    event_type text        NOT NULL DEFAULT '',
    paused_at  timestamptz NOT NULL DEFAULT now(),
    paused_by  text        NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    audit_id   bigint,
    PRIMARY KEY (consumer, event_type)
);

-- +goose Down
DROP TABLE consumer_pauses;
