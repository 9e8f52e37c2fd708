# pgbox developer entry points. Two commands on a fresh machine:
#   make demo   run the orders example end to end on a local PostgreSQL
#   make test   vet and run every test against a real PostgreSQL
#
# Both use DATABASE_URL when it is set; otherwise they start the throwaway
# cluster in .pgbox/pg (scripts/pg.sh) and leave it running for the next
# run. The end-to-end tests also need NATS JetStream: NATS_URL, or a
# throwaway nats-server in .pgbox/nats (scripts/nats.sh, which installs
# Debian's package if missing), and make test a PgBouncer in transaction
# pooling mode in .pgbox/pgbouncer (scripts/pgbouncer.sh, likewise), or
# PGBOUNCER_URL. The RabbitMQ and Redis tests start brokers of their own
# (scripts/rabbitmq.sh, Debian's rabbitmq-server, and scripts/redis.sh,
# Debian's redis-server, installed if missing) to kill them, the Amazon
# SQS tests goaws servers (scripts/goaws.sh, built from the Go module proxy
# into .pgbox/bin), and the failover test a pg_auto_failover cluster of its
# own (scripts/pgaf.sh, Debian's postgresql-15-auto-failover, installed if
# missing) to kill its primary, and a primary with an asynchronous standby
# (scripts/pgpair.sh) to promote the standby without the last commits; make bench uses RABBITMQ_URL, REDIS_URL and
# SQS_URL, or the ones in .pgbox/rabbitmq, .pgbox/redis and .pgbox/goaws.
# `make down` stops and removes them all.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

PG := scripts/pg.sh
NATS := scripts/nats.sh
PGBOUNCER := scripts/pgbouncer.sh
RABBITMQ := scripts/rabbitmq.sh
GOAWS := scripts/goaws.sh
REDIS := scripts/redis.sh
# The database URL: DATABASE_URL, or the local cluster (started if needed).
DB = $${DATABASE_URL:-$$($(PG) up)}
# The NATS URL: NATS_URL, or the local server (started if needed).
NATSURL = $${NATS_URL:-$$($(NATS) up)}
# The RabbitMQ URL: RABBITMQ_URL, or the local broker (started if needed).
RABBIT = $${RABBITMQ_URL:-$$($(RABBITMQ) up)}
# The SQS endpoint: SQS_URL, or the local goaws (started if needed).
SQS = $${SQS_URL:-$$($(GOAWS) up)}
# The Redis URL: REDIS_URL, or the local server (started if needed).
REDISURL = $${REDIS_URL:-$$($(REDIS) up)}

# Fuzz targets run briefly by make test (each target:package), for a count
# of inputs rather than a duration: with -fuzztime=5s, Go 1.26's fuzzing
# coordinator can fail a healthy target with "context deadline exceeded"
# when the deadline catches a worker mid-input (golang/go#75804, fixed in
# Go 1.27); a loaded CI machine hit it in FuzzWrite. 4000 inputs take a few
# seconds per target here.
FUZZ := FuzzReceive:./inbox FuzzWrite:./outbox FuzzHandler:./watermillinbox
FUZZTIME ?= 4000x

# make test runs the core packages again in two more of pgx's query exec
# modes, which users pick with default_query_exec_mode (added to
# DATABASE_URL after ? or &). exec and simple_protocol send parameters
# without their types, as users behind PgBouncer may choose: there a Go
# type that pgx encodes only for a known parameter type, such as
# []uuid.UUID or a []byte for jsonb, fails, though the default mode takes
# it. The default mode (cache_statement) is the first run's, and
# cache_describe the pooled run's (below). describe_exec is not run
# apart: it encodes every statement as cache_describe does, from the
# statement's description, and only fetches that description afresh each
# time instead of once per connection; a third pass cost some 4 minutes
# of a run already past 20 on a slow 2-core machine (CI's, 2026-11-28).
# Without -race (the first run has it), and without slow packages that
# add nothing mode-specific: ./test (its harness and the watermill-sql
# broker, not pgbox's code, are what fail there) and cmd/inboxctl (admin
# underneath). 2 to 4 minutes a mode on 2 cores, the machine's CPU busy
# throughout, nearly all of it PostgreSQL's: 346 of some 400 CPU seconds
# in an exec pass (2026-11-28), its statements' time half planning (these
# modes plan every statement, the dispatcher's claim at 16 ms) and two
# fifths the DDL of migrating each test's schema (402 of them).
QUERY_MODES := exec simple_protocol
QUERY_MODE_PKGS := ./dispatcher ./migrations ./inbox ./internal/partition ./outbox ./relay ./idempotency ./admin ./maintenance \
	./health ./pgboxtest ./watermillinbox ./watermillsql ./internal/liveness ./internal/notify ./internal/telemetry

# make test also runs the packages that talk to PostgreSQL through a
# transaction-pooling PgBouncer (scripts/pgbouncer.sh, Debian's pgbouncer,
# stock settings), as most Kubernetes deployments do, in pgx's
# cache_describe mode (docs/operations.md says why that one): the core
# packages, the end-to-end tests (outbox → relay → NATS, SQS or watermill-sql →
# inbox → dispatcher, crashes included), the orders example's processes
# (TestOrders: HTTP with Idempotency-Key retries through the middleware,
# then on through outbox, relay, broker, inbox and dispatcher, with a
# SIGKILL, exactly once counted from the database) and the quickstart.
# Tests that LISTEN, or need one server session of their own, reach the
# server directly through PGBOX_DIRECT_URL. PGBOUNCER_URL, set for every
# run, lets the pooler-specific tests (migrations, LISTEN behind a pooler)
# run. A process of the orders example that fails at start fails the run
# with the end of its log in the error (its log folder is the test's, and
# goes with it). The RabbitMQ end-to-end test runs in this pass only:
# it is built without -race, since watermill-amqp races on its own
# connection state when the broker goes, in the subscriber it uses
# (ThreeDotsLabs/watermill#693).
POOLER_MODE := cache_describe
POOLER_PKGS := ./migrations ./inbox ./internal/partition ./dispatcher ./outbox ./relay ./idempotency ./admin ./maintenance ./internal/liveness \
	./health ./pgboxtest ./watermillinbox ./watermillsql ./test ./examples/quickstart

.PHONY: test chaos bench demo demo-pooler demo-quickstart inboxctl pg-up pg-down nats-up nats-down pgbouncer-up pgbouncer-down rabbitmq-up rabbitmq-down redis-up redis-down goaws-up goaws-down down

# go test runs two packages at a time (its builds among them), in the
# order they are named: the slowest, mostly waiting on timers (outages,
# kills), are named first, so that the rest run beside them instead of
# leaving them alone at the end of a run. The query-mode list names
# dispatcher first too. test/failover stays in its place near the end,
# away from test/chaos: both load the machine, and the failover test's
# cluster is the more sensitive to it. The PgBouncer pass keeps ./test
# near its end: named first, beside dispatcher, the two overloaded the
# pooler and the machine, and a dispatcher test's 30 s wait for 2,020
# leased messages ran out (CI on a clean clone, 2026-11-28 17:39 UTC).
SLOW_FIRST := ./test ./cmd/pgbox-bench/internal/bench ./test/chaos ./dispatcher ./admin ./rabbitmq ./cmd/inboxctl/internal/cli

# The -race run writes data race reports to files (GORACE log_path) and
# prints them after the run's other output when it fails: CI keeps only
# the end of a long log, where a report printed as it happened is lost.
test:
	@url=$(DB); nats=$(NATSURL); pooler=$${PGBOUNCER_URL:-$$($(PGBOUNCER) up "$$url")}; \
	export NATS_URL="$$nats" PGBOUNCER_URL="$$pooler"; \
	go vet ./...; \
	races=$$(mktemp -d); \
	DATABASE_URL="$$url" GORACE="log_path=$$races/race" go test -race -count=1 -timeout 20m $(SLOW_FIRST) ./... || { \
		status=$$?; for f in "$$races"/race.*; do [ -e "$$f" ] || continue; echo "data race report ($$f):"; cat "$$f"; done; exit $$status; }; \
	rm -rf "$$races"; \
	echo "go test: the bench's cases left out under -race (the NATS end-to-end case races in watermill-nats), at a tiny scale"; \
	DATABASE_URL="$$url" go test -count=1 -run '^TestCasesLeftOutUnderRaceRunAtTinyScale$$' ./cmd/pgbox-bench/internal/bench; \
	case "$$url" in *://*\?*) sep='&';; *://*) sep='?';; *) sep=' ';; esac; \
	for mode in $(QUERY_MODES); do \
		echo "go test: default_query_exec_mode=$$mode"; \
		DATABASE_URL="$$url$${sep}default_query_exec_mode=$$mode" \
			go test -count=1 -timeout 10m $(QUERY_MODE_PKGS); \
	done; \
	echo "go test: through PgBouncer (transaction pooling), default_query_exec_mode=$(POOLER_MODE)"; \
	case "$$pooler" in *\?*) psep='&';; *) psep='?';; esac; \
	DATABASE_URL="$$pooler$${psep}default_query_exec_mode=$(POOLER_MODE)" PGBOX_DIRECT_URL="$$url" \
		go test -count=1 -timeout 10m $(POOLER_PKGS); \
	for target in $(FUZZ); do \
		DATABASE_URL="$$url" go test -run='^$$' -fuzz="^$${target%%:*}$$" -fuzztime=$(FUZZTIME) "$${target#*:}"; \
	done

# The fault-injection suite at full size: 50,000 orders (100,000 messages)
# under SIGKILLs, cut connections and a crash-restart, then a 1,000,000
# message backlog drain. It runs on a PostgreSQL cluster of its own,
# appends its figures to .pgbox/chaos-report.md and keeps each child
# process's log (level Warn) in .pgbox/chaos-logs/<time of the run>/.
# Then the failover test (test/failover, which make test runs too): a
# pg_auto_failover cluster of its own (scripts/pgaf.sh, Debian's
# postgresql-15-auto-failover, installed if missing) whose primary is
# SIGKILLed under load, then switched over, and an asynchronous standby
# (scripts/pgpair.sh) promoted without the last commits; its figures go to
# .pgbox/failover-report.md.
chaos:
	@url=$(DB); nats=$(NATSURL); \
	DATABASE_URL="$$url" go test ./test/chaos -run 'TestChaos' -count=1 -v -timeout 120m -args \
		-chaos.orders=50000 -chaos.producers=8 -chaos.kill-every=2s -chaos.backlog=1000000 \
		-chaos.settle=20m -chaos.report=$(CURDIR)/.pgbox/chaos-report.md; \
	DATABASE_URL="$$url" NATS_URL="$$nats" go test ./test/failover -run 'TestFailover' -count=1 -v -timeout 20m -args \
		-failover.report=$(CURDIR)/.pgbox/failover-report.md

# pgbox against River and plain SQL on the same database, in one run, and
# the hot paths again through a transaction-pooling PgBouncer: writes docs/benchmarks.md, .json and .png. BENCHFLAGS passes flags on
# (go run ./cmd/pgbox-bench -h lists them), e.g. BENCHFLAGS="-runs 5"; after a fix,
# BENCHFLAGS="-only operator -update" measures that scenario again into the report, which says so.
bench:
	@url=$(DB); nats=$(NATSURL); rabbit=$(RABBIT); redis=$(REDISURL); sqs=$(SQS); pooler=$${PGBOUNCER_URL:-$$($(PGBOUNCER) up "$$url")}; \
	DATABASE_URL="$$url" NATS_URL="$$nats" RABBITMQ_URL="$$rabbit" REDIS_URL="$$redis" SQS_URL="$$sqs" PGBOUNCER_URL="$$pooler" \
		go run ./cmd/pgbox-bench $(BENCHFLAGS)

# The orders example (examples/orders): three services and two stand-in
# providers as separate processes, under load, duplicate deliveries and a
# SIGKILL, then verified from the database. It fails unless every order was
# charged once and mailed once. BROKER picks the broker between the
# services: postgres (watermill-sql on the same PostgreSQL, the default),
# nats (NATS JetStream: NATS_URL, or the local server), redis (Redis
# Streams: REDIS_URL, or the local server) or sqs (Amazon SQS's protocol:
# SQS_URL, or the local goaws), e.g. make demo BROKER=redis.
# DEMO_FLAGS passes flags on, for instance DEMO_FLAGS="-orders 5000".
BROKER ?= postgres
DEMO_FLAGS ?=
# The demo's -broker for BROKER, starting its local server if needed.
DEMO_BROKER = case "$(BROKER)" in \
		postgres) echo postgres;; \
		nats) echo $(NATSURL);; \
		redis) echo $(REDISURL);; \
		sqs) echo "sqs+$(SQS)";; \
		*) echo "make: unknown BROKER=$(BROKER): use postgres, nats, redis or sqs" >&2; exit 2;; \
	esac
demo:
	@url=$(DB); broker=$$($(DEMO_BROKER)); \
	DATABASE_URL="$$url" go run ./examples/orders demo -broker "$$broker" $(DEMO_FLAGS)

# The orders example with every service and provider connecting through a
# transaction-pooling PgBouncer (scripts/pgbouncer.sh, installed if
# missing) in POOLER_MODE; the run's setup and verification stay on the
# direct URL. BROKER as for make demo. (In exec mode its watermill-sql
# broker cannot publish: watermill-sql sends its metadata as bytes to a
# JSON column.)
demo-pooler:
	@url=$(DB); broker=$$($(DEMO_BROKER)); pooler=$${PGBOUNCER_URL:-$$($(PGBOUNCER) up "$$url")}; \
	DATABASE_URL="$$url" go run ./examples/orders demo -broker "$$broker" -services-db "$$pooler&default_query_exec_mode=$(POOLER_MODE)" $(DEMO_FLAGS)

# The smaller, single-process example: an inbox and a dispatcher.
demo-quickstart:
	@url=$(DB); DATABASE_URL="$$url" go run ./examples/quickstart

# The operator CLI, built from this checkout into bin/ (git-ignored): the
# module is not published yet, so `go install …@latest` cannot fetch it.
inboxctl:
	@go build -o bin/inboxctl ./cmd/inboxctl; \
	echo "built $(CURDIR)/bin/inboxctl"; \
	echo "run it as ./bin/inboxctl from here, or put it on your PATH:"; \
	echo "  export PATH=\"$(CURDIR)/bin:\$$PATH\""

pg-up:
	@$(PG) up

pg-down:
	@$(PG) down

nats-up:
	@$(NATS) up

nats-down:
	@$(NATS) down

pgbouncer-up:
	@$(PGBOUNCER) up

pgbouncer-down:
	@$(PGBOUNCER) down

rabbitmq-up:
	@$(RABBITMQ) up

rabbitmq-down:
	@$(RABBITMQ) down

goaws-up:
	@$(GOAWS) up

goaws-down:
	@$(GOAWS) down

redis-up:
	@$(REDIS) up

redis-down:
	@$(REDIS) down

down: pgbouncer-down rabbitmq-down redis-down goaws-down nats-down pg-down
