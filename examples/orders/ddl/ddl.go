// Package ddl creates the example's own tables, each process of a service
// or provider doing it at start-up.
package ddl

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Create makes schema if it is missing and runs statements (CREATE …
// IF NOT EXISTS) in it, in one transaction. Processes starting together
// take turns on an advisory lock per schema, since CREATE … IF NOT EXISTS
// is not safe to run concurrently.
func Create(ctx context.Context, pool *pgxpool.Pool, schema string, statements ...string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('pgbox-example:' || $1))", schema); err != nil {
			return err
		}
		quoted := pgx.Identifier{schema}.Sanitize()
		for _, q := range append([]string{"CREATE SCHEMA IF NOT EXISTS " + quoted, "SET LOCAL search_path TO " + quoted}, statements...) {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("create the tables of schema %s: %w", schema, err)
			}
		}
		return nil
	})
}
