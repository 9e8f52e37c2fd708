// Package inspect writes the commands with which a user looks at what an
// example left in its database: pasteable as printed, from the
// repository's root, in a shell that may not have DATABASE_URL set, so
// each command carries the URL itself.
package inspect

import (
	"net/url"
	"regexp"
	"strings"
)

// Inboxctl returns the command line that runs inboxctl, built from the
// checkout, on databaseURL: DATABASE_URL='…' go run ./cmd/inboxctl args….
func Inboxctl(databaseURL string, args ...string) string {
	words := []string{"DATABASE_URL=" + Quote(withoutPassword(databaseURL)), "go", "run", "./cmd/inboxctl"}
	for _, a := range args {
		words = append(words, Quote(a))
	}
	return strings.Join(words, " ")
}

// Setup returns the shell line after which the commands inboxctl prints
// itself (its hints, such as inboxctl show ID --consumer C --schema S)
// paste as printed from the repository's root: inboxctl built and on PATH,
// DATABASE_URL set to databaseURL (without its password).
func Setup(databaseURL string) string {
	return `make inboxctl && export PATH="$PWD/bin:$PATH" DATABASE_URL=` + Quote(withoutPassword(databaseURL))
}

// SetupNote is Setup as the examples print it, under their commands.
func SetupNote(databaseURL string) string {
	return "(for inboxctl's own hints to paste as printed, first: " + Setup(databaseURL) + ")"
}

// Psql returns the command line that runs query in psql on databaseURL,
// without the parameters only pgx knows, which libpq would refuse.
func Psql(databaseURL, query string) string {
	return "psql " + Quote(forLibpq(withoutPassword(databaseURL))) + " -c " + Quote(query)
}

// PasswordNote says, when databaseURL holds a password, that the commands
// leave it out and how to give it; otherwise it returns "".
func PasswordNote(databaseURL string) string {
	if withoutPassword(databaseURL) == databaseURL {
		return ""
	}
	return "(the commands leave the URL's password out: set PGPASSWORD to it first)"
}

// plain matches a word a POSIX shell takes as it is.
var plain = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// Quote returns s as one shell word: as it is when that is safe, else in
// single quotes.
func Quote(s string) string {
	if plain.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// keyValuePassword matches a password in a key=value connection string.
var keyValuePassword = regexp.MustCompile(`\s*\bpassword=('(\\.|[^'])*'|\S*)`)

// withoutPassword returns the connection string without its password, in
// URL or key=value form: the commands are printed to a terminal and may be
// pasted into a ticket. libpq and pgx both take PGPASSWORD instead.
func withoutPassword(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return strings.TrimSpace(keyValuePassword.ReplaceAllString(dsn, ""))
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.User(u.User.Username())
		return u.String()
	}
	return dsn
}

// pgxOnly names the URL parameters pgx reads and libpq rejects.
func pgxOnly(name string) bool {
	switch name {
	case "default_query_exec_mode", "statement_cache_capacity", "description_cache_capacity":
		return true
	}
	return strings.HasPrefix(name, "pool_")
}

// forLibpq drops pgx's own parameters from a URL.
func forLibpq(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" || u.RawQuery == "" {
		return dsn
	}
	q := u.Query()
	for name := range q {
		if pgxOnly(name) {
			q.Del(name)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}
