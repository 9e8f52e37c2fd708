package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// pauseSetup returns an Admin on a schema whose consumer "payments" has
// ChargeCard messages (dead ones and one done), and whose consumer
// "emails" has none but a registered dispatcher.
func pauseSetup(t *testing.T) (*admin.Admin, string) {
	t.Helper()
	schema := pgtest.Schema(t)
	deadMessages(t, schema, 3)
	_, err := pgtest.Pool(t).Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */processes (id, kind, consumer, name, host, pid, version, heartbeat_ms)
		VALUES (7, 'dispatcher', 'emails', 'emails-1', 'h', 1, 'v', 60000)`, schema))
	require.NoError(t, err)
	adm, err := admin.New(pgtest.Pool(t), admin.Config{Schema: schema})
	require.NoError(t, err)
	return adm, schema
}

// auditOf returns the audit records of action, newest first.
func auditOf(t *testing.T, adm *admin.Admin, action admin.AuditAction) []admin.AuditRecord {
	t.Helper()
	records, err := adm.AuditLog(context.Background(), admin.AuditLogOptions{Action: action})
	require.NoError(t, err)
	return records
}

// A pause is kept with who made it, when and why, audited with its
// selection and reason, and the audit record's id kept with it; Resume
// lifts it, audited too.
func TestPauseAndResumeAreAudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	p, err := adm.Pause(ctx, admin.PauseOptions{Actor: admin.Actor{Name: "alice"}, Consumer: "payments", Reason: "gateway down, OPS-7"})
	require.NoError(t, err)
	require.Equal(t, "payments", p.Consumer)
	require.Empty(t, p.EventType)
	require.Equal(t, "alice", p.PausedBy)
	require.Equal(t, "gateway down, OPS-7", p.Reason)
	require.False(t, p.PausedAt.IsZero())

	pauses, err := adm.Pauses(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []admin.Pause{*p}, pauses)

	records := auditOf(t, adm, admin.AuditPause)
	require.Len(t, records, 1)
	r := records[0]
	require.Equal(t, p.AuditID, r.ID, "the pause keeps its audit record's id")
	require.Equal(t, admin.AuditFinished, r.State)
	require.EqualValues(t, 1, r.Affected)
	require.Equal(t, "gateway down, OPS-7", r.Note)
	require.Equal(t, "alice", r.Actor.Name)
	var sel map[string]string
	require.NoError(t, json.Unmarshal(r.Selection, &sel))
	require.Equal(t, map[string]string{"consumer": "payments", "event_type": ""}, sel)

	lifted, err := adm.Resume(ctx, admin.ResumeOptions{Actor: admin.Actor{Name: "bob"}, Consumer: "payments", Note: "gateway back"})
	require.NoError(t, err)
	require.Equal(t, *p, *lifted, "Resume returns the pause it lifted")
	pauses, err = adm.Pauses(ctx, "")
	require.NoError(t, err)
	require.Empty(t, pauses)
	records = auditOf(t, adm, admin.AuditResume)
	require.Len(t, records, 1)
	require.Equal(t, "bob", records[0].Actor.Name)
	require.Equal(t, "gateway back", records[0].Note)
	require.EqualValues(t, 1, records[0].Affected)
	require.Equal(t, admin.AuditFinished, records[0].State)
}

// Pausing what is paused already keeps the pause in place and says who
// made it, since when and why; nothing is recorded. Many operators
// pausing at once make one pause.
func TestPauseAlreadyPausedKeepsThePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		made      []*admin.Pause
		refusals  []error
		operators = []string{"alice", "bob", "carol", "dave"}
	)
	for _, name := range operators {
		wg.Go(func() {
			p, err := adm.Pause(ctx, admin.PauseOptions{Actor: admin.Actor{Name: name}, Consumer: "payments", EventType: "ChargeCard", Reason: name + "'s reason"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refusals = append(refusals, err)
				return
			}
			made = append(made, p)
		})
	}
	wg.Wait()
	require.Len(t, made, 1, "one pause is made")
	require.Len(t, refusals, len(operators)-1)
	for _, err := range refusals {
		require.ErrorIs(t, err, admin.ErrAlreadyPaused)
		require.ErrorContains(t, err, `event type "ChargeCard" of consumer "payments" is already paused by `+made[0].PausedBy)
		require.ErrorContains(t, err, made[0].Reason)
		require.ErrorContains(t, err, made[0].PausedAt.UTC().Format("2006-01-02 15:04:05")+" UTC")
	}
	pauses, err := adm.Pauses(ctx, "payments")
	require.NoError(t, err)
	require.Equal(t, []admin.Pause{*made[0]}, pauses, "the first pause is kept as it was")
	require.Len(t, auditOf(t, adm, admin.AuditPause), 1, "a refused pause is not recorded")
}

// Resuming what is not paused changes and records nothing.
func TestResumeNotPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	_, err := adm.Resume(ctx, admin.ResumeOptions{Consumer: "payments"})
	require.ErrorIs(t, err, admin.ErrNotPaused)
	require.EqualError(t, err, `consumer "payments" is not paused; nothing was changed`)
	_, err = adm.Resume(ctx, admin.ResumeOptions{Consumer: "payments", EventType: "ChargeCard"})
	require.EqualError(t, err, `event type "ChargeCard" of consumer "payments" is not paused; nothing was changed`)
	require.Empty(t, auditOf(t, adm, admin.AuditResume))
}

// A consumer pgbox has not seen, or an event type its consumer has not
// received, is a typo until Force says otherwise: refused with the known
// names, and matching ErrNotFound. A consumer with no message yet but a
// registered dispatcher is known.
func TestPauseUnknownIsRefusedUnlessForced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	_, err := adm.Pause(ctx, admin.PauseOptions{Consumer: "paymnts", Reason: "r"})
	var unknown *admin.UnknownError
	require.ErrorAs(t, err, &unknown)
	require.ErrorIs(t, err, admin.ErrNotFound)
	require.Equal(t, []string{"emails", "payments"}, unknown.Known)
	require.Empty(t, unknown.EventType)
	require.ErrorContains(t, err, `consumer "paymnts" is unknown`)
	require.ErrorContains(t, err, `known consumers: "emails", "payments"`)
	require.ErrorContains(t, err, "check the name, or force the pause")

	// KnownConsumer tells the same apart for any tool, without the pause's hint.
	require.NoError(t, adm.KnownConsumer(ctx, "payments"))
	require.NoError(t, adm.KnownConsumer(ctx, "emails"), "a registered dispatcher")
	err = adm.KnownConsumer(ctx, "paymnts")
	require.ErrorIs(t, err, admin.ErrNotFound)
	require.EqualError(t, err, `consumer "paymnts" is unknown: the inbox holds no message of it, no dispatcher of it is registered, and it was never paused `+
		`(known consumers: "emails", "payments"); nothing was changed: check the name`)

	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "payments", EventType: "ChargeCrad", Reason: "r"})
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, "ChargeCrad", unknown.EventType)
	require.Equal(t, []string{"ChargeCard"}, unknown.Known)
	require.ErrorContains(t, err, `known event types: "ChargeCard"`)

	// An event type of an unknown consumer: the consumer is what is wrong.
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "paymnts", EventType: "ChargeCard", Reason: "r"})
	require.ErrorAs(t, err, &unknown)
	require.Empty(t, unknown.EventType)
	require.Empty(t, auditOf(t, adm, admin.AuditPause), "a refused pause is not recorded")

	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "emails", Reason: "no messages yet, but a dispatcher"})
	require.NoError(t, err)
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "refunds", Reason: "before its first deploy", Force: true})
	require.NoError(t, err)
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "payments", EventType: "RefundCard", Reason: "new type", Force: true})
	require.NoError(t, err)
	pauses, err := adm.Pauses(ctx, "")
	require.NoError(t, err)
	require.Len(t, pauses, 3)

	// A consumer forced into a pause before its first message stays known
	// once resumed: the audit log keeps its pause.
	_, err = adm.Resume(ctx, admin.ResumeOptions{Consumer: "refunds"})
	require.NoError(t, err)
	require.NoError(t, adm.KnownConsumer(ctx, "refunds"))
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "refunds", Reason: "again, no force needed"})
	require.NoError(t, err)
	require.ErrorIs(t, adm.KnownConsumer(ctx, "refundz"), admin.ErrNotFound)
}

// A whole-consumer pause and event-type pauses are separate: both may be
// in place, and resuming the consumer leaves its event types paused.
func TestPauseWholeConsumerAndEventTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	_, err := adm.Pause(ctx, admin.PauseOptions{Consumer: "payments", EventType: "ChargeCard", Reason: "bad card data"})
	require.NoError(t, err)
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "payments", Reason: "database maintenance"})
	require.NoError(t, err)
	pauses, err := adm.Pauses(ctx, "payments")
	require.NoError(t, err)
	require.Len(t, pauses, 2)
	require.Empty(t, pauses[0].EventType, "the whole consumer's pause comes first")
	require.Equal(t, "ChargeCard", pauses[1].EventType)

	_, err = adm.Resume(ctx, admin.ResumeOptions{Consumer: "payments"})
	require.NoError(t, err)
	pauses, err = adm.Pauses(ctx, "payments")
	require.NoError(t, err)
	require.Len(t, pauses, 1)
	require.Equal(t, "ChargeCard", pauses[0].EventType, "the event type stays paused")
	other, err := adm.Pauses(ctx, "emails")
	require.NoError(t, err)
	require.Empty(t, other)
}

// The Tx forms take effect with the caller's transaction, audit record
// included, or not at all.
func TestPauseTxRollsBackWithTheCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	errRollback := errors.New("roll back")
	err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		if _, err := adm.PauseTx(ctx, tx, admin.PauseOptions{Consumer: "payments", Reason: "r"}); err != nil {
			return err
		}
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	pauses, err := adm.Pauses(ctx, "")
	require.NoError(t, err)
	require.Empty(t, pauses)
	require.Empty(t, auditOf(t, adm, admin.AuditPause))

	// A refused resume inside the caller's transaction leaves it usable.
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "payments", Reason: "r"})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		_, err := adm.ResumeTx(ctx, tx, admin.ResumeOptions{Consumer: "payments", EventType: "ChargeCard"})
		require.ErrorIs(t, err, admin.ErrNotPaused)
		_, err = adm.ResumeTx(ctx, tx, admin.ResumeOptions{Consumer: "payments"})
		return err
	})
	require.NoError(t, err)
	pauses, err = adm.Pauses(ctx, "")
	require.NoError(t, err)
	require.Empty(t, pauses)
	require.Len(t, auditOf(t, adm, admin.AuditResume), 1)
}

// Bad input is refused before anything is touched.
func TestPauseBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	adm, _ := pauseSetup(t)

	_, err := adm.Pause(ctx, admin.PauseOptions{Reason: "r"})
	require.EqualError(t, err, "pause: a consumer is required")
	_, err = adm.Pause(ctx, admin.PauseOptions{Consumer: "payments", Reason: "  "})
	require.EqualError(t, err, "pause: a reason is required, for whoever finds the consumer paused")
	_, err = adm.Resume(ctx, admin.ResumeOptions{})
	require.EqualError(t, err, "resume: a consumer is required")
	require.Empty(t, auditOf(t, adm, ""))
}
