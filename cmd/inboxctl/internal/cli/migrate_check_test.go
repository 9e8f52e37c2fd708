package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// migrate check exits with a code a deploy pipeline can act on, for each
// way the schema can stand against this build; migrate version prints the
// same and exits 0.
func TestMigrateCheck(t *testing.T) {
	t.Parallel()
	schema := pgtest.EmptySchema(t)
	check := func(wantCode int, wantState string) {
		t.Helper()
		r := inboxctl(t, schema, "", "migrate", "check", "-o", "json")
		require.Equal(t, wantCode, r.code, "stderr: %s", r.stderr)
		var st schemaState
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		require.Equal(t, wantState, st.State)
		require.Equal(t, schema, st.Schema)
		require.EqualValues(t, pgbox.SchemaVersion, st.Want)
		version := inboxctl(t, schema, "", "migrate", "version", "-o", "json").ok(t)
		require.JSONEq(t, r.stdout, version.stdout, "version prints what check prints")
	}

	check(ExitSchemaMissing, "missing")
	require.Contains(t, inboxctl(t, schema, "", "migrate", "check").stderr, "has no pgbox tables: run inboxctl migrate up")

	inboxctl(t, schema, "", "migrate", "up").ok(t)
	check(ExitOK, "current")
	require.Contains(t, inboxctl(t, schema, "", "migrate", "check").ok(t).stdout,
		fmt.Sprintf("this build needs %d", pgbox.SchemaVersion))

	inboxctl(t, schema, "", "migrate", "down", "--yes").ok(t)
	check(ExitSchemaBehind, "behind")
	require.Contains(t, inboxctl(t, schema, "", "migrate", "check").stderr, "is behind this build: run inboxctl migrate up")

	inboxctl(t, schema, "", "migrate", "up").ok(t)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(
		"INSERT INTO /* schema */"+pgbox.MigrationsTable+" (version_id, is_applied) VALUES ($1, true)", schema), pgbox.SchemaVersion+1)
	require.NoError(t, err)
	check(ExitSchemaAhead, "ahead")
	require.Contains(t, inboxctl(t, schema, "", "migrate", "check").stderr, "is ahead of this build")
}

// The exit codes are documented once, in the root command's help.
func TestExitCodesInRootHelp(t *testing.T) {
	t.Parallel()
	help := inboxctlEnv(t, nil, "", "--help").stdout
	for _, c := range exitCodes {
		require.Contains(t, help, fmt.Sprintf("%3d  %s", c.code, c.meaning))
	}
}

// inboxctl --version and inboxctl version print the module's version and
// the schema version this build needs.
func TestVersion(t *testing.T) {
	t.Parallel()
	flag := inboxctlEnv(t, nil, "", "--version").stdout
	require.Contains(t, flag, "inboxctl ")
	require.Contains(t, flag, fmt.Sprintf("needs pgbox schema version %d", pgbox.SchemaVersion))
	require.Equal(t, flag, inboxctlEnv(t, nil, "", "version").stdout)

	var b buildInfo
	require.NoError(t, json.Unmarshal([]byte(inboxctlEnv(t, nil, "", "version", "-o", "json").stdout), &b))
	require.EqualValues(t, pgbox.SchemaVersion, b.SchemaVersion)
	require.NotEmpty(t, b.Version)
	require.NotEmpty(t, b.GoVersion)
}
