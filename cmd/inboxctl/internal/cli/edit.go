package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/pgbox/pgbox/admin"
)

// editAndReplay replaces one message's payload with the file's bytes and
// replays it: replay ID --consumer C --payload-file F.
func (a *app) editAndReplay(ctx context.Context, flags changeFlags, ids []string, note, file string, later replayLater) error {
	switch {
	case len(ids) != 1:
		return usagef("--payload-file edits one message: name exactly one id (with --consumer), not %d", len(ids))
	case flags.f.consumer == "":
		return usagef("--payload-file needs --consumer: ids are unique per consumer")
	case flags.f.narrows() || flags.all:
		return usagef("--payload-file edits the one message named by id: drop the filters")
	case later.set():
		return usagef("--payload-file replays at once: drop --at, --rate and --over")
	}
	payload, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("--payload-file %s: no such file; nothing was changed", file)
	case err != nil:
		return usagef("--payload-file: %v; nothing was changed", err)
	case len(payload) == 0:
		return usagef("--payload-file %s is empty: give the whole payload the handler should see; nothing was changed", file)
	}
	if err := a.open(ctx); err != nil {
		return err
	}
	id, consumer := ids[0], flags.f.consumer
	if flags.dryRun {
		d, err := a.admin.Show(ctx, consumer, id)
		if errors.Is(err, admin.ErrNotFound) {
			return fmt.Errorf("consumer %q holds no message %s: %w", consumer, id, err)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(a.out, "Would replace the payload of %s (%s, %d bytes) with %s (%d bytes), keep the original, and replay it. Nothing was changed (--dry-run).\n",
			clean(id), d.Status, len(d.Payload), clean(file), len(payload))
		return nil
	}
	err = a.admin.EditAndReplay(ctx, admin.EditOptions{Actor: a.actor(), Consumer: consumer, ID: id, Note: note, Payload: payload})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "Replaced the payload of %s with %s (%d bytes), kept the original, and replayed it.\n", clean(id), clean(file), len(payload))
	fmt.Fprintf(a.out, "See it: %s\n", a.hint("show", id, "--consumer", consumer))
	return nil
}
