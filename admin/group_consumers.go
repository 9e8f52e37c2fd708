package admin

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox/internal/ident"
)

// groupConsumersSQL lists the consumers among the first 1,000 messages (in
// seq order) that the inbox holds, in any status, whose last error is in
// failure group $1: read from inbox_failure_group_idx, as groupKnownSQL
// is. A fingerprint hashes its consumer, so a group has one; more than one
// would take two consumers' failures hashing alike.
const groupConsumersSQL = `
SELECT DISTINCT s.consumer FROM (
    SELECT i.consumer FROM /* schema */inbox AS i
    WHERE i.last_error IS NOT NULL AND ` + fingerprintSQL + ` = $1
    ORDER BY ` + fingerprintSQL + `, i.seq
    LIMIT 1000
) AS s
ORDER BY s.consumer`

// GroupConsumers returns the consumers whose messages failed in failure
// group fingerprint: the one consumer a fingerprint names (see
// FailureGroup.Fingerprint), found among any message the inbox still holds
// that failed last with an error of the group, drained ones included; none
// for a fingerprint no failure ever had. It tells an operator who gave a
// group with another consumer's name whose group it is. A malformed
// fingerprint is an error (ValidateFingerprint).
func (a *Admin) GroupConsumers(ctx context.Context, fingerprint string) ([]string, error) {
	if err := ValidateFingerprint(fingerprint); err != nil {
		return nil, err
	}
	rows, err := a.pool.Query(ctx, ident.Render(groupConsumersSQL, a.cfg.Schema), fingerprint)
	if err != nil {
		return nil, a.dbError(ctx, "find failure group", err)
	}
	consumers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, a.dbError(ctx, "find failure group", err)
	}
	return consumers, nil
}
