package cli

import (
	"fmt"
	"strings"
)

// Exit codes scripts can rely on. exitCodes documents them, in the root
// command's help and in docs/inboxctl.md, from this one list.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailure: the command failed (database unreachable, schema not
	// migrated, an operation refused or declined).
	ExitFailure = 1
	// ExitUsage: the command line was wrong; nothing was done.
	ExitUsage = 2
	// ExitNotFound: a message asked for by id does not exist, a failure
	// group is unknown or another consumer's, a consumer named is one
	// pgbox has never seen (a likely typo), or an event type to pause is
	// unknown.
	ExitNotFound = 3
	// ExitSchemaBehind: migrate check found the schema at an older
	// version than this build needs (or River's tables behind).
	ExitSchemaBehind = 4
	// ExitSchemaAhead: migrate check found the schema at a newer version
	// than this build knows.
	ExitSchemaAhead = 5
	// ExitSchemaMissing: migrate check found no pgbox tables in the
	// schema.
	ExitSchemaMissing = 6
	// ExitCheckFailed: stats --check or processes --check found a problem
	// on-call must act on (dead or failing messages, a stall, a dead
	// process's leases): each is listed on stdout.
	ExitCheckFailed = 7
	// ExitInterrupted: the command was interrupted (Ctrl-C, SIGINT or
	// SIGTERM), as shells report a process ended by SIGINT (128+2).
	ExitInterrupted = 130
)

// exitCodes explains each exit code, in order.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{ExitOK, "ok"},
	{ExitFailure, "failure: database unreachable, schema not migrated, a change refused or not confirmed"},
	{ExitUsage, "usage error: nothing was done"},
	{ExitNotFound, "not found: a message, row or scheduled replay asked for by id; a failure group unknown, or another consumer's; a consumer never seen (a likely typo), or an event type to pause unknown"},
	{ExitSchemaBehind, "migrate check: the schema is behind this build: run inboxctl migrate up"},
	{ExitSchemaAhead, "migrate check: the schema is ahead of this build: deploy a newer inboxctl"},
	{ExitSchemaMissing, "migrate check: the schema has no pgbox tables: run inboxctl migrate up"},
	{ExitCheckFailed, "stats --check or processes --check found a problem (dead or failing messages, a stall, a dead process's work): each is listed"},
	{ExitInterrupted, "interrupted (Ctrl-C, SIGINT, SIGTERM): see the command's last line for what it changed"},
}

// exitCodesHelp is exitCodes as the root command's help shows them.
func exitCodesHelp() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, c := range exitCodes {
		fmt.Fprintf(&b, "  %3d  %s\n", c.code, c.meaning)
	}
	return strings.TrimRight(b.String(), "\n")
}

// exitError ends the command with code, after printing its message (if
// any) like any other error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (e *exitError) Unwrap() error { return e.err }
