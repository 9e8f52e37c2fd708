package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// filterFlags are the flags that select inbox messages, shared by list,
// replay and discard.
type filterFlags struct {
	consumer, eventType         string
	errorContains, errorMatches string
	group, orderingKey          string
	since, until                string
	statuses                    []string
}

func (f *filterFlags) add(cmd *cobra.Command, withStatus bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.consumer, "consumer", "", "only this consumer's messages")
	fl.StringVar(&f.eventType, "type", "", "only this event type")
	fl.StringVar(&f.errorContains, "error-contains", "", "only messages whose last error contains this text (any case)")
	fl.StringVar(&f.errorMatches, "error-matches", "", "only messages whose last error matches this regular expression (any case)")
	fl.StringVar(&f.group, "group", "", "only one failure group: a fingerprint from 'inboxctl failures'")
	fl.StringVar(&f.orderingKey, "ordering-key", "", "only the messages of this ordering key")
	fl.StringVar(&f.since, "since", "", "only messages received since: a duration ago (90m, 2h, 7d) or a time with its zone (2026-11-22T06:00:00Z, 2026-11-22 06:00 UTC)")
	fl.StringVar(&f.until, "until", "", "only messages received before: a duration ago or a time")
	if withStatus {
		fl.StringSliceVar(&f.statuses, "status", nil, "only these statuses: pending, running, done, dead, discarded (comma-separated)")
	}
}

// any reports whether any selecting flag was given.
func (f *filterFlags) any() bool { return f.consumer != "" || f.narrows() }

// narrows reports whether a flag other than --consumer was given.
func (f *filterFlags) narrows() bool {
	return f.eventType != "" || f.errorContains != "" || f.errorMatches != "" ||
		f.group != "" || f.orderingKey != "" || f.since != "" || f.until != "" || len(f.statuses) > 0
}

func (f *filterFlags) filter(now time.Time) (admin.Filter, error) {
	out := admin.Filter{
		Consumer:      f.consumer,
		ErrorContains: f.errorContains,
		ErrorMatches:  f.errorMatches,
		EventType:     f.eventType,
		Fingerprint:   f.group,
		OrderingKey:   f.orderingKey,
		Statuses:      statuses[pgbox.InboxStatus](f.statuses),
	}
	var err error
	if out.Since, err = parseWhen("--since", f.since, now); err != nil {
		return out, err
	}
	if out.Until, err = parseWhen("--until", f.until, now); err != nil {
		return out, err
	}
	if printed, ok := printedUnit(f.until); ok {
		// Pasted from inboxctl's output, which cuts times to the second:
		// a message shown at that second was received within it.
		out.Until = out.Until.Add(printed)
	}
	if err := out.Validate(); err != nil {
		return out, usageError{err}
	}
	return out, nil
}

// statuses types the --status values as given; the filter's Validate
// rejects unknown ones. None gives nil, which selects every status.
func statuses[S ~string](values []string) []S {
	if len(values) == 0 {
		return nil
	}
	out := make([]S, len(values))
	for i, v := range values {
		out[i] = S(v)
	}
	return out
}

// joinStatuses lists statuses as --status takes them: comma-separated.
func joinStatuses[S ~string](statuses []S) string {
	names := make([]string, len(statuses))
	for i, s := range statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

// parseWhen reads a point in time given as a duration ago ("2h", "7d") or
// a time (parseTime).
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := parseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, ok, err := parseTime(flag, s); ok || err != nil {
		return t, err
	}
	return time.Time{}, usagef("%s %q is neither a duration (90m, 2h, 7d) nor a time (%s)", flag, s, timeForms)
}

// timeLayouts are the times a flag takes, each with its zone: RFC 3339,
// or a date and time in UTC as inboxctl prints them ("2026-11-22 06:00:00
// UTC", so that a time can be pasted from its output), with or without the
// seconds.
var timeLayouts = []string{time.RFC3339, printedLayouts[0].layout, printedLayouts[1].layout}

// printedLayouts are inboxctl's own forms of a time, each with the unit it
// is cut to: a time pasted from its output stands for that whole second
// (or minute), which --until takes in.
var printedLayouts = []struct {
	layout string
	unit   time.Duration
}{{"2006-01-02 15:04:05 UTC", time.Second}, {"2006-01-02 15:04 UTC", time.Minute}}

// printedUnit returns the unit s is cut to when s is a time in one of
// printedLayouts.
func printedUnit(s string) (time.Duration, bool) {
	for _, p := range printedLayouts {
		if _, err := time.Parse(p.layout, s); err == nil {
			return p.unit, true
		}
	}
	return 0, false
}

// zonelessLayouts are times without a zone: refused, since reading them as
// UTC or as local time would each be wrong for someone, and a window hours
// off selects the wrong messages to replay or discard without a word.
var zonelessLayouts = []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04", time.DateOnly}

// timeForms shows the forms timeLayouts take, for a usage error.
const timeForms = "2026-11-22T06:00:00Z, 2026-11-22T07:00:00+01:00, 2026-11-22 06:00 UTC"

// parseTime reads s in one of timeLayouts. A time without a zone is a
// usage error that says how to give one; any other text is not a time
// (ok false, err nil).
func parseTime(flag, s string) (t time.Time, ok bool, err error) {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true, nil
		}
	}
	for _, layout := range zonelessLayouts {
		if _, err := time.Parse(layout, s); err == nil {
			utc := strings.Replace(s, "T", " ", 1)
			if layout == time.DateOnly {
				utc += " 00:00"
			}
			return time.Time{}, false, usagef("%s %q has no time zone: add UTC, as inboxctl prints times (%s UTC), or an offset (%s)",
				flag, s, utc, "2026-11-22T07:00:00+01:00")
		}
	}
	return time.Time{}, false, nil
}

// parseDuration is time.ParseDuration plus days: "7d", "1d12h".
func parseDuration(s string) (time.Duration, error) {
	if i := strings.Index(s, "d"); i > 0 {
		days, err := strconv.Atoi(s[:i])
		if err != nil {
			return 0, err
		}
		rest := time.Duration(0)
		if s[i+1:] != "" {
			if rest, err = time.ParseDuration(s[i+1:]); err != nil {
				return 0, err
			}
		}
		return time.Duration(days)*24*time.Hour + rest, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		return 0, fmt.Errorf("negative duration")
	}
	return d, err
}

// checkGroup explains why a selection with a failure group matched
// nothing, when it is not that the group was drained (which is no error):
// a fingerprint that no failure ever had (a typo, or one printed before
// fingerprints included the consumer) is an error wrapping
// admin.ErrNotFound; a fingerprint given with another consumer than its
// own, which would otherwise read as a drained group, is an error with
// ExitNotFound that names its consumer and the command that acts on it.
// verb is the command's ("replay", "discard", "list"), past what it
// would have done ("replayed"). A selection without a group is fine.
func (a *app) checkGroup(ctx context.Context, f admin.Filter, verb, past string) error {
	if f.Fingerprint == "" {
		return nil
	}
	owners, err := a.admin.GroupConsumers(ctx, f.Fingerprint)
	switch {
	case err != nil:
		return err
	case len(owners) == 0:
		return fmt.Errorf("no message in schema %s ever failed in group %s: %w; '%s' lists the groups and their fingerprints",
			a.admin.Schema(), f.Fingerprint, admin.ErrNotFound, a.hint("failures"))
	case f.Consumer == "" || slices.Contains(owners, f.Consumer):
		return nil
	}
	msg := groupOwners(f.Fingerprint, owners, f.Consumer)
	if past != "" {
		msg += ": nothing was " + past
	}
	switch {
	case len(owners) > 1:
		msg += ". Pass --consumer with one of them"
	case verb == "replay":
		msg += ". Replay it with its consumer: " + a.hint("replay", "--group", f.Fingerprint, "--consumer", owners[0])
	default:
		msg += ". See its messages: " + a.hint("list", "--group", f.Fingerprint, "--consumer", owners[0])
	}
	return &exitError{ExitNotFound, errors.New(msg)}
}

// unknownConsumer returns an error wrapping admin.ErrNotFound, naming the
// consumers pgbox knows, when consumer, given to narrow a command that
// found nothing, is one it has never seen: a misspelt name must not read
// as "nothing to do". It returns nil when consumer is "" or known.
func (a *app) unknownConsumer(ctx context.Context, consumer string) error {
	if consumer == "" {
		return nil
	}
	return a.admin.KnownConsumer(ctx, consumer)
}

// groupElsewhere returns the consumers failure group f.Fingerprint
// belongs to when f names another consumer; nil otherwise, or when they
// cannot be read.
func (a *app) groupElsewhere(ctx context.Context, f admin.Filter) []string {
	if f.Fingerprint == "" || f.Consumer == "" {
		return nil
	}
	owners, err := a.admin.GroupConsumers(ctx, f.Fingerprint)
	if err != nil || len(owners) == 0 || slices.Contains(owners, f.Consumer) {
		return nil
	}
	return owners
}

// groupOwners says that failure group fingerprint belongs to owners, not
// to consumer.
func groupOwners(fingerprint string, owners []string, consumer string) string {
	whose := "consumer " + clean(owners[0])
	if len(owners) > 1 {
		whose = "consumers " + cleanList(owners)
	}
	return fmt.Sprintf("failure group %s belongs to %s, not %s", fingerprint, whose, clean(consumer))
}

// window formats a window of time as its flag would give it: "1h", "5m",
// "7d", "1h30m".
func window(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String() // 1h0m0s, 5m0s, 1h30m0s, 45s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
