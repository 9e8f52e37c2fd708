# pgbox developer entry points. Two commands on a fresh machine:
#   make demo   run the example end to end on a local PostgreSQL
#   make test   vet and run every test against a real PostgreSQL
#
# Both use DATABASE_URL when it is set; otherwise they start the throwaway
# cluster in .pgbox/pg (scripts/pg.sh) and leave it running for the next
# run. The end-to-end tests also need NATS JetStream: NATS_URL, or a
# throwaway nats-server in .pgbox/nats (scripts/nats.sh, which installs
# Debian's package if missing). `make down` stops and removes both.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

PG := scripts/pg.sh
NATS := scripts/nats.sh
# The database URL: DATABASE_URL, or the local cluster (started if needed).
DB = $${DATABASE_URL:-$$($(PG) up)}
# The NATS URL: NATS_URL, or the local server (started if needed).
BROKER = $${NATS_URL:-$$($(NATS) up)}

.PHONY: test demo pg-up pg-down nats-up nats-down down

test:
	@url=$(DB); nats=$(BROKER); \
	go vet ./...; \
	DATABASE_URL="$$url" NATS_URL="$$nats" go test -race -count=1 -timeout 20m ./...

demo:
	@url=$(DB); DATABASE_URL="$$url" go run ./examples/quickstart

pg-up:
	@$(PG) up

pg-down:
	@$(PG) down

nats-up:
	@$(NATS) up

nats-down:
	@$(NATS) down

down: nats-down pg-down
