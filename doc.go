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
//   - package outbox makes the producer reliable: messages are written in
//     the business transaction, so they exist if and only if it commits.
//   - package relay publishes committed outbox messages through any
//     Watermill publisher (watermill-sql, NATS JetStream, Kafka), at least
//     once, in commit order per ordering key.
//   - package watermillinbox stores a Watermill subscription into an inbox.
//   - package idempotency is net/http middleware for Idempotency-Key
//     headers: a retried POST runs its handler once and gets the stored
//     response.
//   - package pgboxtest helps services' own tests: throwaway schemas, a wait
//     for the dispatcher and relay to drain, and a check that a consumer is
//     idempotent.
//   - package maintenance deletes what retention allows and runs scheduled
//     replays, as River periodic jobs that one elected process enqueues.
//   - package health is a health check to expose over HTTP.
//   - package admin is what operators need (inboxctl is built on it).
//   - package migrations creates and upgrades the tables, River's included.
//
// This root package holds what they share: the default schema name, the
// schema version check, the statuses of inbox and outbox messages
// (InboxStatus, OutboxStatus: what admin reports and inboxctl prints) and
// the metadata keys the relay and the subscriber agree on.
//
// # A consumer, stated once
//
// A consumer is an *inbox.Inbox: its Config names the consumer and the
// schema, and everything that works for that consumer takes the Inbox
// (dispatcher.Config.Inbox, watermillinbox.Config.Inbox), so the two can
// never disagree.
package pgbox
