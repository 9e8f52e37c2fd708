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

// shellQuote returns s as one shell word: as it is, or in single quotes;
// a word holding a control character (an id of a message's own making) in
// bash's (and zsh's) $'…' quoting instead, with the character escaped, so
// that the hint shows no control character and still pastes as s.
func shellQuote(s string) string {
	switch {
	case plainWord.MatchString(s):
		return s
	case needsEscape(s, oneLineText):
		return "$'" + escape(s, shellText) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
