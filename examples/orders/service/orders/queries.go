package orders

// The service's SQL. Every table is named "{schema}.table", rendered with
// the service's schema by ddl.Render: the pool has no search_path.

// ordersTableSQL creates the orders table. cart is the client's reference
// and is deliberately not unique: the Idempotency-Key is what keeps a
// retried request from placing a second order, and the demo checks that
// every cart has exactly one order.
const ordersTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.orders (
    id        uuid        PRIMARY KEY,
    customer  text        NOT NULL,
    cart      text        NOT NULL,
    email     text        NOT NULL,
    cents     bigint      NOT NULL CHECK (cents > 0),
    placed_at timestamptz NOT NULL DEFAULT now()
)`

const insertOrderSQL = `
INSERT INTO {schema}.orders (id, customer, cart, email, cents) VALUES ($1, $2, $3, $4, $5)
RETURNING placed_at`

// selectOrderSQL finds an order of one customer: another customer's order
// is as good as missing.
const selectOrderSQL = `
SELECT customer, cart, email, cents, placed_at FROM {schema}.orders WHERE id = $1 AND customer = $2`
