package payments

// The service's SQL. Every table is named "{schema}.table", rendered with
// the service's schema by ddl.Render: the pool has no search_path.

// paymentsTableSQL creates the payments table: one row per order, whatever
// happens upstream. The primary key is the natural-idempotency guard: the
// inbox dedupes message ids, and this dedupes orders.
const paymentsTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.payments (
    order_id          text        PRIMARY KEY,
    cents             bigint      NOT NULL,
    email             text        NOT NULL,
    status            text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'captured')),
    charge_id         text,
    placed_message_id text        NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    captured_at       timestamptz
)`

// ignoredTableSQL creates the record of OrderPlaced messages the natural
// key absorbed: orders that arrived again under a new message id.
const ignoredTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.ignored_events (
    message_id  text        PRIMARY KEY,
    order_id    text        NOT NULL,
    reason      text        NOT NULL,
    ignored_at  timestamptz NOT NULL DEFAULT now()
)`

const insertPaymentSQL = `
INSERT INTO {schema}.payments (order_id, cents, email, placed_message_id) VALUES ($1, $2, $3, $4)
ON CONFLICT (order_id) DO NOTHING`

const paymentCentsSQL = `SELECT cents FROM {schema}.payments WHERE order_id = $1`

const insertIgnoredSQL = `
INSERT INTO {schema}.ignored_events (message_id, order_id, reason) VALUES ($1, $2, $3)
ON CONFLICT (message_id) DO NOTHING`

// capturePaymentSQL marks a pending payment captured and returns where the
// confirmation goes; it matches nothing if the payment is captured already.
const capturePaymentSQL = `
UPDATE {schema}.payments SET status = 'captured', charge_id = $2, captured_at = now()
WHERE order_id = $1 AND status = 'pending'
RETURNING email`
