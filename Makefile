# pgbox developer entry points. Two commands on a fresh machine:
#   make demo   run the example end to end on a local PostgreSQL
#   make test   vet and run every test against a real PostgreSQL
#
# Both use DATABASE_URL when it is set; otherwise they start the throwaway
# cluster in .pgbox/pg (scripts/pg.sh) and leave it running for the next
# run. `make pg-down` removes it.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

PG := scripts/pg.sh
# The database URL: DATABASE_URL, or the local cluster (started if needed).
DB = $${DATABASE_URL:-$$($(PG) up)}

.PHONY: test demo pg-up pg-down

test:
	@url=$(DB); \
	go vet ./...; \
	DATABASE_URL="$$url" go test -race -count=1 -timeout 20m ./...

demo:
	@url=$(DB); DATABASE_URL="$$url" go run ./examples/quickstart

pg-up:
	@$(PG) up

pg-down:
	@$(PG) down
