package pgtest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolsByMode returns, by name, ways to get a pool for a test that shows a
// statement works in every query mode: "default", the shared pool in
// whatever mode DATABASE_URL picks (through a pooler too), and each of
// UntypedModes, a pool of its own forced into that mode. Forcing a mode
// that prepares statements would fail behind a transaction pooler, so the
// default one is never forced.
func PoolsByMode() map[string]func(testing.TB) *pgxpool.Pool {
	pools := map[string]func(testing.TB) *pgxpool.Pool{"default": Pool}
	for _, mode := range UntypedModes {
		pools[mode.String()] = func(tb testing.TB) *pgxpool.Pool { return NewPoolMode(tb, mode, 2) }
	}
	return pools
}
