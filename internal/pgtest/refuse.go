package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
)

// Refuse makes a table of schema refuse the writes of event (a trigger's
// "BEFORE UPDATE ON /* schema */outbox") for which the trigger condition
// when holds, with the error "test: " + what, until the function it
// returns is called. Turning it off is an update of a table of its own,
// not a DROP TRIGGER, which could deadlock with the statements refused.
// Call the function in a cleanup registered after whatever waits for the
// refused writes to go through (a relay's Stop waits for its outcomes).
func Refuse(tb testing.TB, pool *pgxpool.Pool, schema, what, event, when string) (stop func()) {
	tb.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE /* schema */refusing (on_ bool NOT NULL)`,
		`INSERT INTO /* schema */refusing VALUES (true)`,
		`CREATE FUNCTION /* schema */refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT on_ FROM /* schema */refusing) THEN
				RAISE EXCEPTION 'test: ` + what + `';
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER refuse ` + event + ` FOR EACH ROW WHEN (` + when + `) EXECUTE FUNCTION /* schema */refuse()`,
	} {
		_, err := pool.Exec(ctx, ident.Render(q, schema))
		require.NoError(tb, err)
	}
	return func() {
		_, err := pool.Exec(ctx, ident.Render("UPDATE /* schema */refusing SET on_ = false", schema))
		require.NoError(tb, err)
	}
}
