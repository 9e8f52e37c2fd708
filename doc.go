// Package pgbox makes message consumers and producers safe under
// at-least-once delivery, with PostgreSQL as the only source of truth.
//
// Brokers and HTTP clients retry, so every message may arrive more than
// once. pgbox turns those retries into effectively-exactly-once effects:
//
//   - package inbox stores each delivered message once per consumer (INSERT …
//     ON CONFLICT DO NOTHING on the message id) and reports redeliveries as
//     duplicates; its Process runs a handler in the same transaction that
//     records the message.
//   - package dispatcher runs handlers for stored messages with a pool of
//     workers that claim batches with FOR UPDATE SKIP LOCKED, retries
//     failures with backoff, keeps every attempt's error and parks poison
//     messages as dead.
//   - package migrations creates and upgrades the tables.
//
// This root package holds what they share: the default schema name and the
// schema version check.
package pgbox
