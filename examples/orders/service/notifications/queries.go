package notifications

// The service's SQL. Every table is named "{schema}.table", rendered with
// the service's schema by ddl.Render: the pool has no search_path.

// emailsTableSQL creates the service's record of confirmations sent: one
// per order.
const emailsTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.emails (
    order_id   text        PRIMARY KEY,
    message_id text        NOT NULL,
    mail_id    text        NOT NULL,
    sent_at    timestamptz NOT NULL DEFAULT now()
)`

const insertEmailSQL = `
INSERT INTO {schema}.emails (order_id, message_id, mail_id) VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO NOTHING`
