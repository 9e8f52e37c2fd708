package inspect

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A quoted word reaches the command as it was, through a real shell.
func TestQuoteSurvivesTheShell(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"pgbox_quickstart",
		"postgres://postgres@127.0.0.1:5432/pgbox?sslmode=disable&x=1",
		`SELECT status, count(*) FROM "pgbox_quickstart".inbox GROUP BY 1`,
		"it's $HOME `date` \\ *",
	} {
		out, err := exec.Command("sh", "-c", "printf '%s' "+Quote(s)).Output()
		require.NoError(t, err, s)
		require.Equal(t, s, string(out))
	}
}

func TestCommandsCarryTheURLWithoutItsPassword(t *testing.T) {
	t.Parallel()
	plain := "postgres://postgres@127.0.0.1:5432/pgbox?sslmode=disable"
	require.Equal(t, `DATABASE_URL='postgres://postgres@127.0.0.1:5432/pgbox?sslmode=disable' go run ./cmd/inboxctl stats --schema demo_payments`,
		Inboxctl(plain, "stats", "--schema", "demo_payments"))
	require.Empty(t, PasswordNote(plain))

	secret := "postgres://ops:s3cr%40t@db:5432/orders?sslmode=disable"
	require.Equal(t, `DATABASE_URL='postgres://ops@db:5432/orders?sslmode=disable' go run ./cmd/inboxctl stats`, Inboxctl(secret, "stats"))
	require.Contains(t, PasswordNote(secret), "PGPASSWORD")

	kv := "host=db user=ops password='s3 cr' dbname=orders"
	require.Equal(t, `psql 'host=db user=ops dbname=orders' -c 'SELECT 1'`, Psql(kv, "SELECT 1"))
	require.NotEmpty(t, PasswordNote(kv))

	require.Equal(t, `psql 'postgres://u@h:1/d?sslmode=disable' -c 'SELECT 1'`,
		Psql("postgres://u:p@h:1/d?sslmode=disable&default_query_exec_mode=exec&pool_max_conns=4", "SELECT 1"),
		"psql refuses pgx's own parameters")
}

// After Setup's line (make left out), the shell has the checkout's bin on
// PATH and the URL, without its password, in DATABASE_URL: what the
// commands inboxctl prints need to paste as printed.
func TestSetupExportsWhatInboxctlsHintsNeed(t *testing.T) {
	t.Parallel()
	line := Setup("postgres://ops:s3cr%40t@db:5432/orders?sslmode=disable")
	export, ok := strings.CutPrefix(line, "make inboxctl && ")
	require.True(t, ok, line)
	out, err := exec.Command("sh", "-c", export+`; printf '%s\n%s' "$DATABASE_URL" "${PATH%%:*}"`).Output()
	require.NoError(t, err, line)
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, "postgres://ops@db:5432/orders?sslmode=disable\n"+wd+"/bin", string(out))
	require.Contains(t, SetupNote("postgres://u@h/d"), "make inboxctl && export PATH=")
}
