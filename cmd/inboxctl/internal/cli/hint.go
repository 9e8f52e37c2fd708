package cli

import (
	"regexp"
	"strings"

	"github.com/pgbox/pgbox"
)

// plainWord is an argument a shell takes as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:@=,+-]+$`)

// hint returns the inboxctl command line of args, ready to paste: with
// --schema when this run's schema is not the default, and every argument
// quoted for a POSIX shell when it needs it. The database stays where the
// operator gave it (DATABASE_URL, or their own --dsn, never printed).
func (a *app) hint(args ...string) string {
	if a.schema != "" && a.schema != pgbox.DefaultSchema {
		args = append(args, "--schema", a.schema)
	}
	words := append([]string{"inboxctl"}, args...)
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

// shellQuote returns s as one POSIX shell word.
func shellQuote(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
