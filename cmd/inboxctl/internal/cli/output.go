package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Output formats of the commands that print data.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatJSONL = "jsonl"
)

// outputKind is the shape of what a command prints, which decides the
// formats its -o takes.
type outputKind int

const (
	// documentOutput is one thing (stats, show, a change's result): table
	// or json.
	documentOutput outputKind = iota
	// listOutput is a list (list, failures, scheduled, outbox list,
	// migrate status): table, json (one array) or jsonl (one object a
	// line, which streams).
	listOutput
	// changeOutput is a bulk change's result (replay, discard): table,
	// json (changeReport), or jsonl: with --dry-run every selected
	// message, one a line, otherwise changeReport on one line.
	changeOutput
	// snapshotOutput is a list inside the picture that explains it
	// (processes: the time it was taken, the heartbeats a process may
	// miss, the maintenance leader): table, json (one object, the list
	// in it), or jsonl (the list's items, one a line). An array alone
	// would lose the rest: which process leads, and what dead means.
	snapshotOutput
)

// formats returns the -o values k takes, the default first.
func (k outputKind) formats() []string {
	if k == documentOutput {
		return []string{formatTable, formatJSON}
	}
	return []string{formatTable, formatJSON, formatJSONL}
}

// outputFlag adds -o/--output to cmd, the same way on every command that
// prints data: table by default, json, and jsonl where the output is or
// holds a list, in any case. Any other value is a usage error.
func outputFlag(cmd *cobra.Command, target *string, kind outputKind) {
	formats := kind.formats()
	help := map[outputKind]string{
		documentOutput: "output format: table or json",
		listOutput:     "output format: table, json (one array) or jsonl (one object a line)",
		changeOutput:   "output format: table, json (the count and the selection) or jsonl (with --dry-run: the messages, one a line)",
		snapshotOutput: "output format: table, json (one object, the list in it) or jsonl (the list's items, one a line)",
	}[kind]
	cmd.Flags().StringVarP(target, "output", "o", formatTable, help)
	cmd.PreRunE = chain(cmd.PreRunE, func(*cobra.Command, []string) error {
		*target = strings.ToLower(*target) // -o JSON is no typo
		if slices.Contains(formats, *target) {
			return nil
		}
		return usagef("unknown output format %q: use %s", *target, strings.Join(formats, ", "))
	})
}

// limitFlag adds --limit to cmd, def by default: how many rows, groups or
// replays to show. A negative count is a usage error, not a silent "all".
func limitFlag(cmd *cobra.Command, target *int, def int, usage string) {
	cmd.Flags().IntVar(target, "limit", def, usage)
	cmd.PreRunE = chain(cmd.PreRunE, func(*cobra.Command, []string) error {
		if *target < 0 {
			return usagef("--limit %d: use a count of 0 or more", *target)
		}
		return nil
	})
}

func chain(first, second func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	if first == nil {
		return second
	}
	return func(cmd *cobra.Command, args []string) error {
		if err := first(cmd, args); err != nil {
			return err
		}
		return second(cmd, args)
	}
}

// writeJSON writes v as indented JSON, safe for a terminal (jsonSafe).
func writeJSON(w io.Writer, v any) error {
	return encodeJSON(w, v, "  ")
}

// writeJSONLine writes v as one line of JSON, safe for a terminal
// (jsonSafe).
func writeJSONLine(w io.Writer, v any) error {
	return encodeJSON(w, v, "")
}

// encodeJSON writes v as JSON and a newline, indented by indent ("": on
// one line), safe for a terminal (jsonSafe). <, > and & are written as
// they are, not as \u003c and the like: the output is for jq and people,
// not for an HTML page, and an error text such as "<nil>" stays greppable.
func encodeJSON(w io.Writer, v any, indent string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(jsonSafe(b.Bytes()))
	return err
}

// writeList writes items as format says: json, one array ([] when there
// are none, never null); jsonl, one line each.
func writeList[T any](w io.Writer, format string, items []T) error {
	if format == formatJSONL {
		for _, item := range items {
			if err := writeJSONLine(w, item); err != nil {
				return err
			}
		}
		return nil
	}
	if items == nil {
		items = []T{}
	}
	return writeJSON(w, items)
}

// changeReport is what replay, discard and purge print with -o json: the
// selection, how many messages it matched, and how many were changed.
type changeReport struct {
	// Action is replay, discard or purge.
	Action string `json:"action"`
	// Changed is how many messages were changed: 0 for a dry run.
	Changed int64 `json:"changed"`
	// DryRun is set for --dry-run: nothing was changed.
	DryRun bool `json:"dry_run"`
	// Interrupted is set when an interruption stopped the change part way;
	// running the same command again finishes it.
	Interrupted bool `json:"interrupted"`
	// Matched is how many eligible messages the selection matched.
	Matched int64 `json:"matched"`
	// Selection is what the flags selected.
	Selection any `json:"selection"`
}

// printReport prints r in the JSON formats (jsonl: on one line), or text
// for a table.
func (a *app) printReport(output string, r changeReport, text string) error {
	switch output {
	case formatJSON:
		return writeJSON(a.out, r)
	case formatJSONL:
		return writeJSONLine(a.out, r)
	}
	_, err := fmt.Fprintln(a.out, text)
	return err
}
