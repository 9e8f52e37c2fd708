-- Idempotency keys for HTTP (package idempotency): one row per key a client
-- sent to a route, per caller. While the first request with a key runs, the
-- row is in_progress and holds a lease (lock_token, locked_until) that
-- concurrent duplicates see at once and answer 409; once the handler
-- answers, the row is done and holds the response, replayed byte for byte
-- to every retry until expires_at.

-- +goose Up
CREATE TABLE idempotency_keys (
    route        text        NOT NULL,
    caller       text        NOT NULL DEFAULT '',
    key          text        NOT NULL,
    fingerprint  bytea       NOT NULL,
    state        text        NOT NULL DEFAULT 'in_progress',
    attempts     integer     NOT NULL DEFAULT 1,
    lock_token   bigint,
    locked_until timestamptz,
    status       integer,
    headers      jsonb,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (route, caller, key),
    CONSTRAINT idempotency_keys_state_check CHECK (state IN ('in_progress', 'done')),
    CONSTRAINT idempotency_keys_lease_check CHECK (
        (state = 'in_progress') = (lock_token IS NOT NULL AND locked_until IS NOT NULL)),
    CONSTRAINT idempotency_keys_response_check CHECK (
        state = 'in_progress' OR (status IS NOT NULL AND headers IS NOT NULL AND body IS NOT NULL))
);

COMMENT ON TABLE idempotency_keys IS 'pgbox: HTTP Idempotency-Key requests, each key run once per (route, caller) and its response replayed until expires_at';
COMMENT ON COLUMN idempotency_keys.route IS 'the route the key was sent to (the ServeMux pattern, or method and path): the same key on two routes is two keys';
COMMENT ON COLUMN idempotency_keys.caller IS 'who sent it (Config.ScopeFunc, such as an account id), or empty: the same key from two callers is two keys';
COMMENT ON COLUMN idempotency_keys.fingerprint IS 'SHA-256 of the method, request target and body: the same key with another request is refused (422)';
COMMENT ON COLUMN idempotency_keys.state IS 'in_progress: a request with this key holds the lease and is running; done: its response is stored';
COMMENT ON COLUMN idempotency_keys.attempts IS 'how many requests have run the handler for this key: more than 1 means an earlier one crashed or stalled past its lease';
COMMENT ON COLUMN idempotency_keys.lock_token IS 'the running request''s claim; its final write (done, or release) is fenced by it';
COMMENT ON COLUMN idempotency_keys.locked_until IS 'end of the running request''s lease (database clock): after it, a retry takes the key over';
COMMENT ON COLUMN idempotency_keys.headers IS 'the stored response headers (Config.ReplayHeaders), as {name: [values]}';
COMMENT ON COLUMN idempotency_keys.body IS 'the stored response body, byte for byte';
COMMENT ON COLUMN idempotency_keys.expires_at IS 'when the key is forgotten: after it the same key starts afresh, and Cleanup deletes the row';

-- Cleanup: expired keys, oldest first. Every row expires, so the index is
-- not partial: a predicate would leave out rows Cleanup must find.
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
