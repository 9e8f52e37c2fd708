package pgboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/migrations"
)

// Schema creates a PostgreSQL schema of the test's own, migrated to
// pgbox.SchemaVersion, and drops it, with everything in it, when the test
// ends. Give its name to every pgbox Config (Config.Schema) and create the
// test's own tables in it too, and parallel tests never see each other's
// rows. The name starts with the test's name, so a leftover schema (of a
// test binary killed before its cleanup) tells whose it was.
//
// pool must stay open until the test's cleanups have run: create it before
// calling Schema, and close it in a cleanup registered earlier (cleanups
// run last-registered first) or not at all.
func Schema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	name := EmptySchema(tb, pool)
	if err := migrations.Migrate(tb.Context(), pool, migrations.Options{Schema: name}); err != nil {
		tb.Fatalf("pgboxtest: migrate schema %s: %v", name, err)
	}
	return name
}

// EmptySchema returns a fresh schema name for the test and drops that
// schema, with whatever was created in it, when the test ends. The schema
// itself is not created: it is for tests of migrating, or of what happens
// without pgbox's tables.
func EmptySchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	name := schemaName(tb.Name())
	tb.Cleanup(func() {
		// The test's context is done by now; cleanups get their own.
		if err := dropSchema(context.Background(), pool, name); err != nil {
			tb.Error(err)
		}
	})
	return name
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// schemaName is "t_", the end of the test's name in lower case letters and
// digits, and a random suffix: unique, and at most 46 bytes, which River's
// client (package maintenance) accepts as well as PostgreSQL.
func schemaName(test string) string {
	base := unsafeChars.ReplaceAllString(strings.ToLower(test), "_")
	if len(base) > 35 {
		base = base[len(base)-35:]
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return "t_" + strings.Trim(base, "_") + "_" + hex.EncodeToString(suffix[:])
}
