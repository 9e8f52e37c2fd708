package demo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A run ends with the inboxctl commands that show what it left behind:
// one per service, naming its schema, each carrying the database URL
// without its password, a note on how to give that, and the shell set-up
// after which inboxctl's own hints paste as printed.
func TestPrintLeftBehind(t *testing.T) {
	t.Parallel()
	const url = "postgres://ops:s3cret@db.internal:5432/shop?sslmode=disable&default_query_exec_mode=cache_describe"
	var out strings.Builder
	r := &run{cfg: Config{DatabaseURL: url}, out: &out, schemas: SchemasFor("demo_")}
	r.printLeftBehind()
	const inboxctl = "DATABASE_URL='postgres://ops@db.internal:5432/shop?sslmode=disable&default_query_exec_mode=cache_describe' go run ./cmd/inboxctl stats --schema "
	require.Equal(t, `
What it left behind, each service's inbox and outbox, from the repository's root:
  `+inboxctl+`demo_orders
  `+inboxctl+`demo_payments
  `+inboxctl+`demo_notifications
  (the commands leave the URL's password out: set PGPASSWORD to it first)
  (for inboxctl's own hints to paste as printed, first: make inboxctl && export PATH="$PWD/bin:$PATH" DATABASE_URL='postgres://ops@db.internal:5432/shop?sslmode=disable&default_query_exec_mode=cache_describe')
`, out.String())

	// Pasted into a shell, each runs inboxctl on that database and schema:
	// here a stand-in go says what it was given.
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "go"), []byte("#!/bin/sh\nprintf '%s\\n' \"$DATABASE_URL\" \"$*\"\n"), 0o755))
	var commands []string
	for line := range strings.Lines(out.String()) {
		if command, ok := strings.CutPrefix(strings.TrimSpace(line), "DATABASE_URL="); ok {
			commands = append(commands, "DATABASE_URL="+command)
		}
	}
	require.Len(t, commands, 3)
	for i, schema := range []string{"demo_orders", "demo_payments", "demo_notifications"} {
		cmd := exec.Command("sh", "-c", commands[i])
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		got, err := cmd.Output()
		require.NoError(t, err, commands[i])
		require.Equal(t, "postgres://ops@db.internal:5432/shop?sslmode=disable&default_query_exec_mode=cache_describe\n"+
			"run ./cmd/inboxctl stats --schema "+schema+"\n", string(got))
	}

	// Without a password there is nothing to say about one.
	out.Reset()
	r.cfg.DatabaseURL = "postgres://postgres@127.0.0.1:5432/pgbox?sslmode=disable"
	r.printLeftBehind()
	require.NotContains(t, out.String(), "PGPASSWORD")
	require.Contains(t, out.String(), "  DATABASE_URL='postgres://postgres@127.0.0.1:5432/pgbox?sslmode=disable' go run ./cmd/inboxctl stats --schema demo_payments\n")
}
