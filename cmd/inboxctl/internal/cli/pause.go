package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pgbox/pgbox/admin"
)

// pauseWhat is the text pause, resume and pauses share on what a pause
// does.
const pauseWhat = `While a pause is in place, every dispatcher of the consumer, in every process,
stops claiming its messages (of that event type) within a poll interval, and
says so in its health and logs. Messages keep arriving, deduplicated as ever,
and wait as pending; a paused message holds up the later ones of its
ordering key, which keep their order. Nothing is lost and no attempt is
spent: 'inboxctl resume' lets them be claimed again, in order.`

// eventTypeFlag adds --event-type to cmd, which also takes --type, the
// name list, replay and discard give it.
func eventTypeFlag(cmd *cobra.Command, target *string, usage string) {
	cmd.Flags().StringVar(target, "event-type", "", usage)
	cmd.Flags().SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "type" {
			name = "event-type"
		}
		return pflag.NormalizedName(name)
	})
}

func (a *app) pauseCommand() *cobra.Command {
	var (
		eventType, output, reason string
		force                     bool
	)
	cmd := &cobra.Command{
		Use:   "pause CONSUMER --reason TEXT",
		Short: "Stop a consumer's dispatchers claiming its messages (or one event type's), until resume",
		Long: `pause stops a consumer, or one event type of it (--event-type), everywhere:
` + pauseWhat + `

Pause rather than let messages fail when what they need is down for a known
while (a payment gateway's maintenance, a bad deploy being rolled back):
failing messages spend attempts and end dead; paused ones wait.

A pause is kept with who made it (the OS user, or --as), when, and the
--reason, and recorded in the audit log. Pausing what is paused already
changes nothing and says whose the pause is. A consumer pgbox has not seen
(no message, no dispatcher registered), or an event type the consumer has not
received lately, is refused as a likely typo, with the known names: --force
pauses it anyway (before its first message, say).

A pause of the whole consumer and pauses of its event types are separate:
both may be in place, and resuming one leaves the others.`,
		Example: `  inboxctl pause payments --reason "gateway maintenance until 03:00, OPS-412"
  inboxctl pause payments --event-type ChargeCard --reason "card data bug, fix in review"
  inboxctl pauses
  inboxctl resume payments`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			consumer := args[0]
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required: say why, for whoever finds %s paused", clean(consumer))
			}
			if err := a.open(ctx); err != nil {
				return err
			}
			p, err := a.admin.Pause(ctx, admin.PauseOptions{Actor: a.actor(), Consumer: consumer, EventType: eventType, Force: force, Reason: reason})
			if errors.Is(err, admin.ErrAlreadyPaused) {
				return fmt.Errorf("%w: %s", err, a.hint(resumeArgs(consumer, eventType)...))
			}
			if err != nil {
				return err
			}
			if output == formatJSON {
				return writeJSON(a.out, p)
			}
			fmt.Fprintf(a.out, "Paused %s: its dispatchers, in every process, stop claiming within a poll interval. Messages keep arriving and wait.\n",
				describePause(*p))
			others, err := a.admin.Pauses(ctx, consumer)
			if err != nil {
				return err
			}
			for _, o := range others {
				if o.EventType != p.EventType {
					fmt.Fprintf(a.out, "Also paused: %s.\n", pauseLine(o, a.now()))
				}
			}
			fmt.Fprintf(a.out, "Resume: %s\n", a.hint(resumeArgs(consumer, eventType)...))
			return nil
		},
	}
	eventTypeFlag(cmd, &eventType, "pause only this event type of the consumer")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; kept with the pause and in the audit log)")
	cmd.Flags().BoolVar(&force, "force", false, "pause a consumer or event type pgbox has not seen (not a typo)")
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

// resumeReport is what resume prints with -o json.
type resumeReport struct {
	// Resumed is the pause lifted; null when there was none (nothing to
	// resume).
	Resumed *admin.Pause `json:"resumed"`
	// StillPaused lists the consumer's pauses left in place: its event
	// types' after a whole-consumer resume, or the whole consumer's.
	StillPaused []admin.Pause `json:"still_paused"`
}

func (a *app) resumeCommand() *cobra.Command {
	var eventType, note, output string
	cmd := &cobra.Command{
		Use:   "resume CONSUMER",
		Short: "Lift a pause: the consumer's dispatchers claim its messages again",
		Long: `resume lifts the pause of a consumer, or of one event type of it
(--event-type): within a poll interval its dispatchers claim the messages that
waited, in order, and those that arrive. The resume is recorded in the audit
log, with --note.

Only the pause named is lifted: resuming the whole consumer leaves the pauses
of its event types in place, and says so, with the command that lifts each.
Resuming what is not paused changes nothing: it says so and exits 0, as a
script that makes sure a consumer runs expects; but a consumer pgbox has
never seen (no message, no dispatcher registered) is refused as a likely
typo, with the known names (exit 3).

` + pauseWhat,
		Example: `  inboxctl resume payments
  inboxctl resume payments --event-type ChargeCard --note "fix deployed"
  inboxctl resume payments -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			consumer := args[0]
			if err := a.open(ctx); err != nil {
				return err
			}
			lifted, err := a.admin.Resume(ctx, admin.ResumeOptions{Actor: a.actor(), Consumer: consumer, EventType: eventType, Note: note})
			if err != nil && !errors.Is(err, admin.ErrNotPaused) {
				return err
			}
			left, err := a.admin.Pauses(ctx, consumer)
			if err != nil {
				return err
			}
			if lifted == nil && len(left) == 0 {
				// A consumer paused (--force) before its first message is
				// known by its pauses.
				if err := a.unknownConsumer(ctx, consumer); err != nil {
					return err
				}
			}
			if output == formatJSON {
				if left == nil {
					left = []admin.Pause{}
				}
				return writeJSON(a.out, resumeReport{Resumed: lifted, StillPaused: left})
			}
			now := a.now()
			what := "consumer " + clean(consumer)
			if eventType != "" {
				what = describeScope(consumer, eventType)
			}
			if lifted == nil {
				fmt.Fprintf(a.out, "Nothing to resume: %s is not paused.\n", what)
			} else {
				fmt.Fprintf(a.out, "Resumed %s, paused by %s since %s UTC (%s): %s.\n", what, clean(lifted.PausedBy),
					stamp(lifted.PausedAt), age(now.Sub(lifted.PausedAt)), quoteText(lifted.Reason))
				fmt.Fprintln(a.out, "Its dispatchers claim again within a poll interval, in order.")
			}
			for _, p := range left {
				fmt.Fprintf(a.out, "Still paused: %s. Resume: %s\n", pauseLine(p, now), a.hint(resumeArgs(p.Consumer, p.EventType)...))
			}
			return nil
		},
	}
	eventTypeFlag(cmd, &eventType, "resume only this event type's pause")
	cmd.Flags().StringVar(&note, "note", "", "why, for the audit log")
	outputFlag(cmd, &output, documentOutput)
	return cmd
}

func (a *app) pausesCommand() *cobra.Command {
	var consumer, output string
	cmd := &cobra.Command{
		Use:   "pauses",
		Short: "List the consumers and event types paused: by whom, why and since when",
		Long: `pauses lists the pauses in place ('inboxctl pause'), by consumer, a whole
consumer's before its event types': who paused it, when, for how long so far,
and why. 'inboxctl stats' shows them too.

` + pauseWhat,
		Example: `  inboxctl pauses
  inboxctl pauses --consumer payments -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.open(ctx); err != nil {
				return err
			}
			list, err := a.admin.Pauses(ctx, consumer)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				if err := a.unknownConsumer(ctx, consumer); err != nil {
					return err
				}
			}
			if output != formatTable {
				return writeList(a.out, output, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(a.out, "Nothing is paused.")
				return nil
			}
			now := a.now()
			t := newTable(a.out)
			fmt.Fprintln(t, "CONSUMER\tEVENT TYPE\tPAUSED SINCE (UTC)\tFOR\tBY\tREASON")
			for _, p := range list {
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", clean(p.Consumer), orEvery(p.EventType), stamp(p.PausedAt), age(now.Sub(p.PausedAt)),
					clean(p.PausedBy), cell(p.Reason, 60))
			}
			if err := t.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "\nResume one: %s\n", a.hint(resumeArgs(list[0].Consumer, list[0].EventType)...))
			return nil
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "only this consumer's pauses")
	outputFlag(cmd, &output, listOutput)
	return cmd
}

// resumeArgs is the resume command line that lifts a pause.
func resumeArgs(consumer, eventType string) []string {
	if eventType == "" {
		return []string{"resume", consumer}
	}
	return []string{"resume", consumer, "--event-type", eventType}
}

// describePause names what p pauses: "consumer payments (every event
// type)", "event type ChargeCard of consumer payments".
func describePause(p admin.Pause) string { return describeScope(p.Consumer, p.EventType) }

func describeScope(consumer, eventType string) string {
	if eventType == "" {
		return fmt.Sprintf("consumer %s (every event type)", clean(consumer))
	}
	return fmt.Sprintf("event type %s of consumer %s", clean(eventType), clean(consumer))
}

// pauseLine says what p pauses, who paused it, since when and why, on one
// line, its age measured at now.
func pauseLine(p admin.Pause, now time.Time) string {
	return fmt.Sprintf("%s, by %s since %s UTC (%s): %s", describePause(p), clean(p.PausedBy), stamp(p.PausedAt), age(now.Sub(p.PausedAt)),
		quoteText(p.Reason))
}

// quoteText is a text from the database in double quotes, escaped.
func quoteText(s string) string { return `"` + clean(s) + `"` }

// orEvery is a pause's event type for a table cell: "(every)" for a whole
// consumer's.
func orEvery(eventType string) string {
	if eventType == "" {
		return "(every)"
	}
	return clean(eventType)
}
