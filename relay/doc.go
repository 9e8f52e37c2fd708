// Package relay publishes committed outbox rows through any Watermill
// publisher: watermill-sql on the same PostgreSQL (nothing else to run;
// package watermillsql writes in the relay's own transaction), NATS
// JetStream, RabbitMQ (package rabbitmq), Kafka (package kafka).
//
//	r, _ := relay.New(pool, relay.Config{Publisher: publisher})
//	_ = r.Start(ctx)
//	defer r.Stop(shutdownCtx)
//
// Workers claim batches of rows with FOR UPDATE SKIP LOCKED, in a
// transaction held open while they publish them topic by topic, one
// message per Publish call (a topic's rows in one call with
// Config.AtomicPublisher, or through a ResultPublisher, such as package
// natsjs's or redisstream's, which reports each message's result, or in
// one statement in the transaction itself through a TxPublisher, package
// watermillsql's), and record each row's outcome in the same transaction:
// one write per row.
// The row locks keep other relays off the rows meanwhile. Several relays,
// in one process or many, may run at once.
//
// Guarantees:
//
//   - Every committed row is published at least once, including rows whose
//     transactions committed out of id order: rows are claimed by status,
//     never by "id greater than the last one seen". A rolled-back row does
//     not exist, so it is never published.
//   - Every attempt publishes the row under its own id, so a relay that
//     dies after publishing and before recording it (its transaction dies
//     with it, and another relay publishes the rows again at once, the
//     lost attempt counted from the batch's claim record) causes a
//     duplicate delivery that the consumer's inbox absorbs, never a
//     duplicate effect.
//   - Rows that share an ordering key are published one at a time, in the
//     order their transactions committed, across every relay process. A
//     failing row holds up only its own key.
//   - A failed publish is recorded on the row and retried after a backoff,
//     for ever unless Config.MaxAttempts says otherwise; a row out of
//     attempts is dead, for an operator to retry. Nothing is dropped.
//   - Each row's outcome is its own: a row is recorded published when the
//     call that carried it returned without error (a ResultPublisher's: its
//     message's result was nil), and only the rows whose call (or result)
//     failed are charged. A row that went out is never published again
//     because a neighbour of its batch failed.
//   - A publish that hangs is given up after Config.PublishTimeout: its
//     rows count as not published (never recorded published on a late
//     answer), the relay makes no new call to the topic until it returns,
//     and the other topics go on. A topic that hangs for three
//     PublishTimeouts is an error: logged, named in BrokerErr and counted
//     in a gauge until it answers. Stop does not wait for it past its
//     context.
//   - A broker outage is not the rows' fault, however it begins: when no
//     publish of a round reaches the broker (each found it unreachable,
//     Config.UnreachableFunc, or hung), its rows go back with their attempt
//     refunded and the whole relay pauses, probing the broker after a
//     backoff; BrokerErr, the health check and a gauge show it, and the log
//     says it when it starts, once a minute while it lasts, and when it
//     ends. When the broker goes away in the middle of a round, after it
//     took some of the round's messages, the rows of the failed calls go
//     back uncharged and the next round probes at once: an outage if it
//     reaches nothing, and the rows' own failure, charged, if the broker
//     answers.
//   - Through a TxPublisher (package watermillsql), a message is written
//     in the transaction that records its row published: it is in its
//     table once, even when the relay dies, and never without its row
//     recorded.
//   - A relay that has publishable rows and publishes none of them for
//     Config.StallTimeout says so, whatever the cause: an error log naming
//     what it waits on, StallErr, the pgbox.stalled gauge and a failing
//     health check.
//   - New rows wake an idle relay through LISTEN/NOTIFY; polling remains the
//     source of truth.
//
// Published rows are deleted by package maintenance after its
// OutboxRetention (7 days by default), once per interval for the whole
// deployment; dead rows never are.
//
// Each published message gets a span (Config.TracerProvider), the child of
// the producer's trace found in its metadata, whose context replaces the
// producer's in the message, so the consumer's handler continues the trace
// from the publish. Config.MeterProvider receives messages published,
// publish failures, and the outbox's backlog and lag.
package relay
