package tables

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
)

// TestLiteralsAreWords checks that every status can stand in a SQL string
// literal as it is: a lower-case word, with no quote to escape.
func TestLiteralsAreWords(t *testing.T) {
	t.Parallel()
	word := regexp.MustCompile(`^[a-z_]+$`)
	for _, s := range pgbox.InboxStatuses() {
		require.Regexp(t, word, string(s))
	}
	for _, s := range pgbox.OutboxStatuses() {
		require.Regexp(t, word, string(s))
	}
}

// TestNoStatusLiteralsOutsideTables keeps the rule this package exists for:
// no engine code spells a status out in SQL. A query that wrote 'dead'
// itself would compile with a typo in it ('daed'), and would not change
// when a status or a rule here does. Examples (user programs, which may
// write their own SQL), the benchmark's raw-SQL peer, migrations (history,
// in .sql files) and tests are left out.
func TestNoStatusLiteralsOutsideTables(t *testing.T) {
	t.Parallel()
	var words []string
	for _, s := range pgbox.InboxStatuses() {
		words = append(words, string(s))
	}
	for _, s := range pgbox.OutboxStatuses() {
		words = append(words, string(s))
	}
	literal := regexp.MustCompile(`'(` + strings.Join(words, "|") + `)'`)
	root := filepath.Join("..", "..")
	skip := []string{"examples", filepath.Join("cmd", "pgbox-bench"), filepath.Join("internal", "tables"), ".git", ".pgbox"}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if slices.Contains(skip, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			// Idempotency keys have a state of their own ('done'), and a
			// history entry an action ('discarded'): neither is a status.
			if !strings.Contains(line, "state") && !strings.Contains(line, "'action'") && literal.MatchString(line) {
				t.Errorf("%s:%d spells a status out in SQL; use internal/tables: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	require.NoError(t, err)
}
