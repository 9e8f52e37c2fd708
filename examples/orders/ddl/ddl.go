// Package ddl creates the example's own tables, each process of a service
// or provider doing it at start-up, and names their schema in the
// example's SQL.
//
// Every query names its schema, "{schema}.orders", rendered by Render:
// the processes connect without startup parameters (no search_path), so
// they run unchanged behind PgBouncer in transaction pooling mode, where a
// session setting would not follow the process from one transaction to the
// next.
package ddl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Render returns query with every "{schema}" replaced by schema as a
// quoted identifier, so that "{schema}.orders" names the orders table of
// that schema whatever its name.
func Render(schema, query string) string {
	return strings.ReplaceAll(query, "{schema}", pgx.Identifier{schema}.Sanitize())
}

// Create makes schema if it is missing and runs statements (CREATE …
// IF NOT EXISTS {schema}.…, rendered by Render) in one transaction.
// Processes starting together take turns on an advisory lock per schema,
// since CREATE … IF NOT EXISTS is not safe to run concurrently.
func Create(ctx context.Context, pool *pgxpool.Pool, schema string, statements ...string) error {
	if schema == "" {
		return fmt.Errorf("create tables: no schema given")
	}
	return InTurn(ctx, pool, "pgbox-example:"+schema, func(tx pgx.Tx) error {
		for _, q := range append([]string{"CREATE SCHEMA IF NOT EXISTS {schema}"}, statements...) {
			if _, err := tx.Exec(ctx, Render(schema, q)); err != nil {
				return fmt.Errorf("create the tables of schema %s: %w", schema, err)
			}
		}
		return nil
	})
}

// InTurn runs create (CREATE … IF NOT EXISTS statements) in a transaction
// that first takes an advisory lock on key, so that processes starting
// together take turns. A creator that waited its turn has still collided
// with the schema the one before it committed (unique_violation on
// pg_namespace, once in a run of the orders test through PgBouncer; the
// cause is not pinned down): the transaction is then run once more, and
// finds what the other created.
func InTurn(ctx context.Context, pool *pgxpool.Pool, key string, create func(pgx.Tx) error) error {
	run := func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", key); err != nil {
				return err
			}
			return create(tx)
		})
	}
	err := run()
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
		err = run()
	}
	return err
}
