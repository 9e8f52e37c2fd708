package bench

import (
	"fmt"
	"strconv"
)

// describe says what each scenario measures, for the report.
var describe = map[string]string{
	"ingest": "Storing new messages: `Receive` (one message per transaction) from 1, 4 and 16 connections, and `ReceiveBatch` " +
		"of 100 and 1000 from 4 connections, for the case's duration. **raw** is the plain `INSERT … ON CONFLICT DO NOTHING` " +
		"into the same table, one row or an `unnest` batch per statement: the ceiling.",
	"dispatch-drain": "Draining a pre-loaded backlog with a no-op in-transaction handler: from the start of the workers until the " +
		"last message is committed done. pgbox: 4 workers claiming batches of 200. River: `InsertMany` then a client with " +
		"2,000 workers, tuned as River's own `river bench` is. **raw**: 4 loops of one transaction each: claim a batch of 200 " +
		"and mark it done in one plain `UPDATE … FOR UPDATE SKIP LOCKED`, then commit (pgbox's shape without its ordering keys, " +
		"rescues, leases and claim record).",
	"dispatch-continuous": "Receiving and dispatching at once, like `river bench --duration`: two producers store batches of 100 " +
		"(`ReceiveBatch`; River `InsertMany`) while the workers handle them, never more than 20,000 ahead; messages handled per second.",
	"tables": "Whether the dedupe memory and the work queue should share one table (DESIGN.md leaves it to measurement): " +
		"receiving and dispatching at once in plain SQL, shaped as dispatch-continuous is (two producers store `unnest` " +
		"batches of 100, never more than 20,000 ahead, while 4 workers loop on one transaction each that claims and " +
		"completes a batch of 200), on empty tables and on tables already holding a long-running service's memory of done " +
		"messages; messages handled per second. **one table** is pgbox's inbox as migrated, worked as the raw cases work " +
		"it: `INSERT … ON CONFLICT DO NOTHING`, then an `UPDATE … FOR UPDATE SKIP LOCKED` that marks the batch done, so " +
		"done rows, payloads included, stay as the dedupe memory in the table the claim reads. **two tables** keeps a " +
		"dedupe table (key, arrival time, payload hash) and a queue of pending messages: receiving is one statement that " +
		"inserts into the dedupe table `ON CONFLICT DO NOTHING` and the ids it took into the queue; the claim `DELETE`s " +
		"its batch from the queue (`WHERE seq = ANY (ARRAY(SELECT … FOR UPDATE SKIP LOCKED)) RETURNING …`), so only the dedupe row " +
		"stays. MiB on disk is the tables with their indexes after the run; bytes/msg stored divides it by the messages " +
		"pre-loaded and received.",
	"duplicate-storm": "Nine deliveries in ten are redeliveries of ids already received (from the last 10,000), the rest new, " +
		"each through `Receive`, from 4 connections. Database round trips counted by a pgx tracer; **raw** sends every " +
		"delivery to the database.",
	"relay": "Publishing a pre-written outbox backlog through the relay until every row is marked published. pgbox: the relay " +
		"with its defaults (2 workers, batches of 100): a topic's rows of a batch in one call to a publisher that reports " +
		"each message's result (`relay.ResultPublisher`: pgbox's natsjs, rabbitmq, kafka, redisstream, sqs and googlepubsub " +
		"publishers; for Kafka, `kafka.FranzPublisher` on a franz-go client with its defaults, and in the case marked " +
		"Sarama `kafka.Publisher`), or to one that takes a call all or none (`Config.AtomicPublisher`: GoChannel, whose Publish fails only once closed, " +
		"before it sends anything; watermill-sql in the case so marked), or in one " +
		"statement in the relay's batch transaction (`relay.TxPublisher`: pgbox's watermillsql); one message per Publish " +
		"call to any other (watermill-sql without it). " +
		"**raw** is the ceiling a hand-written relay reaches on the same outbox and broker: 2 loops, each a transaction that " +
		"claims the oldest 100 pending rows (`SELECT … ORDER BY available_at, seq … FOR UPDATE SKIP LOCKED`, the relay's " +
		"order on its index), publishes them, marks them published (`UPDATE … FROM unnest(ids)`) and commits; the row locks " +
		"are its lease. It publishes each batch with the broker's own Go client, pipelined within the batch and waiting for the " +
		"durability pgbox's publisher waits for, each message carrying its id: GoChannel, the plain-SQL ceiling, through the " +
		"same GoChannel in one Publish call; watermill-sql, one `INSERT … SELECT FROM unnest` into its table in the claiming " +
		"transaction (the broker is the same database, so the publish commits with the mark); NATS JetStream, " +
		"`PublishMsgAsync` of the batch, then every ack; RabbitMQ, amqp091-go on a confirm-mode channel per loop, persistent " +
		"messages to the same durable exchange and queue, then every confirm; Redis Streams, the batch's XADDs in one " +
		"go-redis pipeline; Kafka, franz-go's `ProduceSync` of the batch (acks from all in-sync replicas); Amazon SQS, the AWS " +
		"SDK's `SendMessage`, 10 at once (goaws drops batched messages' attributes, the id among them); Pub/Sub, the client's " +
		"own `Publisher` (which bundles), then every result. What raw leaves out is what pgbox's relay keeps: per-key order " +
		"across processes, the gap-safe claim, claim records that outlive a transaction (a lost attempt counts), attempts and backoff, the outage rules, " +
		"fencing and its memory bound. **ratio** is pgbox's figure over raw's, run by run.",
	"latency": "A steady rate of single messages; the time from the call that stores a message (inbox `Receive`, or the " +
		"producer's outbox commit) until its handler has run, sent by 16 goroutines; sent/s is the rate they held. " +
		"Workers wake on LISTEN/NOTIFY. Senders, subscribers, relay and dispatcher share one pool of " +
		strconv.Itoa(latencyConns) + " connections, a few per core (see docs/operations.md, Connections); the " +
		"dispatcher's claim records and the listeners have their own. The end-to-end path also runs at half the rate, " +
		"and reports each leg's p99: commit to the relay's publish, publish to the inbox's commit, and that to the " +
		"handler's end.",
	"memory": "Resident memory of a process that does nothing but drain a backlog with 4 workers, sampled every 250 ms after the first 10% (warm-up).",
	"pooler": "The hot paths on a direct connection and through PgBouncer in transaction pooling mode (`scripts/pgbouncer.sh`, " +
		"its stock configuration) in front of the same server, side by side: Receive from 16 connections, ReceiveBatch of 100 " +
		"from 4, the drain and relay cases, and the latency cases at their rate. Through the pooler, pgx runs in " +
		"`" + poolerMode + "` mode and the dispatchers and relays LISTEN on a direct connection (`ListenConnConfig`), as " +
		"docs/operations.md advises. **ratio** is the pooled figure over the direct one. The *poll-only* cases run the latency " +
		"paths at " + strconv.Itoa(pollOnlyRate) + " msgs/s, a quiet service whose workers sit idle between messages, through " +
		"the pooler with `Config.PollOnly` on the dispatcher and relay (no LISTEN anywhere, the default `PollInterval` of 1s): " +
		"a new message waits for a worker's next poll. Beside it, the same rate through the pooler with LISTEN on a direct " +
		"connection, and on a direct connection; **ratio** is the poll-only figure over each.",
	"operator": "What an on-call engineer runs, on an inbox holding a service's dedupe memory (the retained scenario's inbox " +
		"of `-operator-rows` done messages with UUIDv7 ids over two consumers, processed over 7 days, kept between runs) and " +
		"3,000 dead, 600 retrying and 3,000 replayed-then-done messages in six failure groups: the " +
		"admin call behind each inboxctl read, timed alone (ms, median of runs). `stats` estimates done messages from the " +
		"planner's statistics; `stats --exact` counts them, for contrast. The cases with *dead messages* in their setting " +
		"read an inbox of their own holding only `-operator-dead-rows` dead messages (an outage's), each with three failed " +
		"attempts over the last 6 hours: nine in ten in six groups of consumer payments, the rest in about 30,000 small " +
		"groups of consumer refunds. `failures` reads the newest 2,000 dead and failing messages and marks its counts as " +
		"lower bounds when there are more; `failures --exact` reads them all, for contrast (once, no warm-up).",
	"retained": "The hot paths on an inbox that keeps a week of done messages, the dedupe memory of a long-running service, beside " +
		"an empty one, in the same run: each system is an inbox by the done messages it keeps (filled once into schemas " +
		"pgbox_bench_retained_*, with a fifth as many published outbox rows, and reused by later runs), and **ratio** is the " +
		"first one's figure over the others'. *UUIDv7 ids* are messages as pgbox's outbox makes them: kept in the partitions of " +
		"the last seven days, new ones stored in today's. *Random ids with a stable time* (UUIDv4, as an SQS MessageId, each " +
		"received with a time fixed with it, inbox.Message.IDTime, as SQS's SentTimestamp) are kept likewise in the day " +
		"partitions of their times, new ones stored in today's after a look for the id in the generations and the " +
		"neighbouring days. *Random ids* (UUIDv4, as another producer may send, with no time) are kept half in " +
		"the previous generation and half in the current one, which new ones join after a look in the previous one. " +
		"ReceiveBatch: batches of 100 new messages from 4 connections for the case's duration. Drain: a backlog of new " +
		"messages stored, then drained by the dispatcher's workers. *Drop an expired day*: a day's partition as large as a " +
		"kept day (a seventh of the inbox), made a month old, dropped by the retention code (`partition.Drop`): the database " +
		"work that expiring a day's messages costs, whatever their number, and the disk the kept days take per message.",
	"relay-scaling": "The relay case's drain, through GoChannel and NATS JetStream, by the relay's workers (`Config.Workers`; " +
		"batches of 100), and with two relay processes of the default 2 workers each at once (the bench's executable again, " +
		"each with its own pool and publisher: a GoChannel of its own, or a NATS connection), timed from when both, ready, are " +
		"told to start: messages published per second. **ratio** is 1 worker's figure over each.",
	"end-to-end": "The whole path at the rate it holds: two producers write the outbox as fast as they can (`outbox.Write` of " +
		"100 messages, a transaction each, while fewer than " + strconv.Itoa(e2eAhead) + " written wait to be handled), the relay (its defaults) publishes them to the broker through the publisher pgbox recommends for it (package " +
		"watermillsql, in the relay's transaction; package natsjs), a Watermill subscriber stores them with watermillinbox " +
		"(acking after the commit; concurrent deliveries stored together) and the dispatcher's 4 workers handle them with a no-op in-transaction handler; messages " +
		"handled a second over the case's duration, after the pipeline filled. watermill-sql: one subscription of one " +
		"consumer group (its subscriptions take turns on the group's offset row), polling every 10 ms. NATS JetStream: 16 " +
		"subscriptions to one durable consumer. *CPU µs/msg* is the CPU used per message written, over the whole run until " +
		"every one was handled: *process* is the bench's process (every stage's Go side, the brokers' clients); *db, …* " +
		"are the database backends of each stage's own pool (producers; the relay, with watermill-sql's inserts; " +
		"watermill-sql's subscriber; the inbox's stores; the dispatcher), read from /proc when PostgreSQL runs on the " +
		"bench's machine. The NATS server's CPU is not measured. Beside it, in the same run, the plain-SQL ceilings of " +
		"its two database stages: **raw relay** is the relay case's raw system to GoChannel, **raw drain** the dispatch-drain " +
		"case's raw system, each on a backlog of a quarter of `-backlog`; **ratio** is the share of each the whole path reaches.",
	"sweep": "Drain throughput against worker count (pgbox workers × batches of 200; River with 200 × as many job workers, the same number of messages in flight).",
}

// cases lists what a run measures, in report order.
func (e *env) cases() ([]benchCase, error) {
	cfg := e.cfg
	var cs []benchCase
	for _, conns := range []int{1, 4, 16} {
		cs = append(cs, benchCase{scenario: "ingest", setting: fmt.Sprintf("Receive, %d conns", conns), main: "msgs/s", higherBetter: true,
			systems: []system{{"pgbox", e.pgboxIngest(conns, 1)}, {"raw", e.rawIngest(conns, 1)}}})
	}
	for _, batch := range []int{100, 1000} {
		cs = append(cs, benchCase{scenario: "ingest", setting: fmt.Sprintf("ReceiveBatch %d", batch), main: "msgs/s", higherBetter: true,
			systems: []system{{"pgbox", e.pgboxIngest(4, batch)}, {"raw", e.rawIngest(4, batch)}}})
	}
	cs = append(cs,
		benchCase{scenario: "dispatch-drain", setting: fmt.Sprintf("%d messages", cfg.Backlog), main: "msgs/s", higherBetter: true,
			systems: []system{{"pgbox", e.pgboxDrain(cfg.Backlog, cfg.Workers)}, {"river", e.riverDrain(cfg.Backlog, riverWorkers)},
				{"raw", e.rawDrain(cfg.Backlog, cfg.Workers)}}},
		benchCase{scenario: "dispatch-continuous", setting: cfg.Duration.String(), main: "msgs/s", higherBetter: true,
			systems: []system{{"pgbox", e.pgboxContinuous(cfg.Workers)}, {"river", e.riverContinuous()}}},
		benchCase{scenario: "tables", setting: "empty tables", main: "msgs/s", higherBetter: true,
			systems: []system{{"one table", e.tablesContinuous(oneTable, 0)}, {"two tables", e.tablesContinuous(twoTables, 0)}}},
		benchCase{scenario: "tables", setting: fmt.Sprintf("%d done messages kept", cfg.Backlog), main: "msgs/s", higherBetter: true,
			systems: []system{{"one table", e.tablesContinuous(oneTable, cfg.Backlog)}, {"two tables", e.tablesContinuous(twoTables, cfg.Backlog)}}},
		benchCase{scenario: "duplicate-storm", setting: "90% redeliveries", main: "round trips/redelivery",
			systems: []system{{"pgbox", e.pgboxStorm()}, {"raw", e.rawStorm()}}},
	)
	relayTo := func(broker string, pub newPublisher, raw newRawPublisher, atomic bool) benchCase {
		return benchCase{scenario: "relay", setting: fmt.Sprintf("%d rows → %s", cfg.Backlog/4, broker), main: "msgs/s", higherBetter: true,
			systems: []system{{"pgbox", e.relayDrain(cfg.Backlog/4, pub, relayShape{atomic: atomic})}, {"raw", e.rawRelay(cfg.Backlog/4, raw)}}}
	}
	// watermill-sql three times: through pgbox's watermillsql, in the
	// batch transaction; and through its own publisher (otherWirings),
	// one message per Publish call, the relay's default, and a batch per
	// call, as AtomicPublisher lets it publish through a publisher that
	// takes a call all or none.
	cs = append(cs, relayTo("GoChannel", goChannel, rawWatermill(goChannel), true), relayTo("watermill-sql", watermillSQL, rawWatermillSQL, false),
		relayTo("watermill-sql, AtomicPublisher", watermillSQL, rawWatermillSQL, true),
		relayTo("watermill-sql, pgbox's watermillsql", watermillSQLInTx, rawWatermillSQL, false))
	if cfg.NATSURL != "" {
		cs = append(cs, relayTo("NATS JetStream", natsJetStream(cfg.NATSURL), rawNATS(cfg.NATSURL), false))
	}
	if cfg.RabbitMQURL != "" {
		cs = append(cs, relayTo("RabbitMQ", rabbitMQ(cfg.RabbitMQURL), rawRabbitMQ(cfg.RabbitMQURL), false))
	}
	if cfg.RedisURL != "" {
		cs = append(cs, relayTo("Redis Streams", redisStreams(cfg.RedisURL), rawRedis(cfg.RedisURL), false))
	}
	cs = append(cs, relayTo("Kafka (kfake, in process)", kafkaFranz, rawKafka, false),
		relayTo("Kafka (kfake, in process), Sarama", kafkaSarama, rawKafka, false))
	cs = append(cs, sqsRelay(cfg.SQSURL, relayTo)...)
	cs = append(cs, relayTo("Google Cloud Pub/Sub (pstest, in process)", pubsubPSTest, rawPubSub, false))
	scaling := []string{"GoChannel"}
	if cfg.NATSURL != "" {
		scaling = append(scaling, "NATS JetStream")
	}
	for _, broker := range scaling {
		c, err := e.relayScaling(broker)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	cs = append(cs, e.e2eCase("watermill-sql", watermillSQLInTx, watermillSQLSubscriber, true))
	if cfg.NATSURL != "" {
		cs = append(cs, e.e2eCase("NATS JetStream", natsJetStream(cfg.NATSURL), natsSubscriber(cfg.NATSURL), false))
	}
	cs = append(cs,
		benchCase{scenario: "latency", setting: fmt.Sprintf("inbox, %d/s", cfg.Rate), main: "p99 ms",
			systems: []system{{"pgbox", e.inboxLatency(cfg.Rate)}}},
		benchCase{scenario: "latency", setting: fmt.Sprintf("outbox → relay → inbox, %d/s", cfg.Rate), main: "p99 ms",
			systems: []system{{"pgbox", e.endToEndLatency(cfg.Rate)}}},
		benchCase{scenario: "latency", setting: fmt.Sprintf("outbox → relay → inbox, %d/s", cfg.Rate/2), main: "p99 ms",
			systems: []system{{"pgbox", e.endToEndLatency(cfg.Rate / 2)}}},
		benchCase{scenario: "memory", setting: fmt.Sprintf("%d messages", cfg.MemoryBacklog), main: "RSS spread %", once: true,
			systems: []system{{"pgbox", e.memory(cfg.MemoryBacklog)}}},
	)
	cs = append(cs, e.retainedCases()...)
	cs = append(cs, e.operatorCases()...)
	cs = append(cs, e.consoleCases()...)
	if cfg.PoolerURL != "" {
		pooled, err := e.poolerCases()
		if err != nil {
			return nil, err
		}
		cs = append(cs, pooled...)
	}
	return cs, nil
}
