package notifications

// The service's SQL. Table names are unqualified: the service's pool sets
// search_path to its schema.

// emailsTableSQL creates the service's record of confirmations sent: one
// per order.
const emailsTableSQL = `
CREATE TABLE IF NOT EXISTS emails (
    order_id   text        PRIMARY KEY,
    message_id text        NOT NULL,
    mail_id    text        NOT NULL,
    sent_at    timestamptz NOT NULL DEFAULT now()
)`

const insertEmailSQL = `
INSERT INTO emails (order_id, message_id, mail_id) VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO NOTHING`
