package cli

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// A fingerprint given with another consumer than its own is not "Nothing
// to replay", as a drained group would be: it is not found (exit 3), and
// the error says whose group it is and how to act on it.
func TestGroupOfAnotherConsumer(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	failures := inboxctl(t, schema, "", "failures", "--consumer", "payments").ok(t).stdout
	group := regexp.MustCompile(`2\s+2\s+0\s+payments\s+ChargeCard\s+([0-9a-f]{12})`).FindStringSubmatch(failures)[1]

	replay := inboxctl(t, schema, "", "replay", "--group", group, "--consumer", "shipping", "--yes")
	require.Equal(t, ExitNotFound, replay.code, "stdout: %s", replay.stdout)
	require.Empty(t, replay.stdout)
	require.Contains(t, replay.stderr, "inboxctl: failure group "+group+" belongs to consumer payments, not shipping: nothing was replayed. "+
		"Replay it with its consumer: inboxctl replay --group "+group+" --consumer payments --schema "+schema)

	for _, args := range [][]string{
		{"replay", "--group", group, "--consumer", "shipping", "--dry-run"},
		{"replay", "--group", group, "--consumer", "shipping", "--rate", "10/s", "--yes"},
		{"replay", "--group", group, "--consumer", "shipping", "--at", "2h", "--dry-run", "-o", "json"},
		{"discard", "--group", group, "--consumer", "shipping", "--reason", "x", "--yes"},
	} {
		r := inboxctl(t, schema, "", args...)
		require.Equal(t, ExitNotFound, r.code, "%q: %s", args, r.stdout)
		require.Contains(t, r.stderr, "belongs to consumer payments, not shipping", "%q", args)
	}
	require.Contains(t, inboxctl(t, schema, "", "discard", "--group", group, "--consumer", "shipping", "--reason", "x").stderr,
		"See its messages: inboxctl list --group "+group+" --consumer payments")
	require.Contains(t, inboxctl(t, schema, "", "list", "--group", group, "--consumer", "shipping").ok(t).stdout,
		"(no messages match: failure group "+group+" belongs to consumer payments, not shipping)")
	require.Equal(t, "[]\n", inboxctl(t, schema, "", "scheduled", "-o", "json").ok(t).stdout, "nothing was scheduled")
	for _, id := range []string{"order-2/placed", "order-3/placed"} {
		status, _, _ := state(t, schema, "payments", id)
		require.Equal(t, "dead", status, id)
	}

	// Its own consumer's drained group is still "Nothing to replay".
	inboxctl(t, schema, "", "replay", "--group", group, "--consumer", "payments", "--yes").ok(t)
	require.Equal(t, "Nothing to replay: no eligible message matches.\n",
		inboxctl(t, schema, "", "replay", "--group", group, "--consumer", "payments", "--status", "dead", "--yes").ok(t).stdout)
}

// A message discarded out of a group has left it: failures no longer
// counts it, and the group's replay, as failures hints it, leaves it
// alone and matches that count; --status discarded still asks for it.
func TestADiscardedMessageIsNotReplayedWithItsGroup(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	inboxctl(t, schema, "", "discard", "order-2/placed", "--consumer", "payments", "--reason", "test order, not real").ok(t)
	failures := inboxctl(t, schema, "", "failures", "--consumer", "payments").ok(t).stdout
	group := regexp.MustCompile(`1\s+1\s+0\s+payments\s+ChargeCard\s+([0-9a-f]{12})`).FindStringSubmatch(failures)
	require.NotNil(t, group, "the group counts its one dead message:\n%s", failures)

	require.Contains(t, inboxctl(t, schema, "", "replay", "--group", group[1], "--consumer", "payments", "--dry-run").ok(t).stdout,
		"Would replay 1 message.")
	require.Equal(t, "Replayed 1 message.\n", inboxctl(t, schema, "", "replay", "--group", group[1], "--consumer", "payments", "--yes").ok(t).stdout)
	status, _, replays := state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "discarded", status)
	require.Zero(t, replays)
	status, _, _ = state(t, schema, "payments", "order-3/placed")
	require.Equal(t, "pending", status)

	require.Equal(t, "Replayed 1 message.\n",
		inboxctl(t, schema, "", "replay", "--group", group[1], "--consumer", "payments", "--status", "discarded", "--yes").ok(t).stdout)
	status, _, _ = state(t, schema, "payments", "order-2/placed")
	require.Equal(t, "pending", status)
}

// A replay of a group whose messages were all discarded finds nothing,
// and says why, with what replays them: it does not read as an empty
// group.
func TestAReplayOfADiscardedGroupSaysHowToNameThem(t *testing.T) {
	t.Parallel()
	schema := fixture(t)
	failures := inboxctl(t, schema, "", "failures", "--consumer", "payments").ok(t).stdout
	group := regexp.MustCompile(`2\s+2\s+0\s+payments\s+ChargeCard\s+([0-9a-f]{12})`).FindStringSubmatch(failures)
	require.NotNil(t, group, "the group counts its two dead messages:\n%s", failures)
	inboxctl(t, schema, "", "discard", "order-2/placed", "order-3/placed", "--consumer", "payments", "--reason", "test orders").ok(t)

	replay := []string{"replay", "--group", group[1], "--consumer", "payments", "--yes"}
	require.Equal(t, "Nothing to replay: no eligible message matches. 2 selected messages are discarded, which a replay leaves "+
		"alone unless named: add --status discarded to replay them.\n", inboxctl(t, schema, "", replay...).ok(t).stdout)
	require.Equal(t, "Replayed 2 messages.\n", inboxctl(t, schema, "", append(replay, "--status", "discarded")...).ok(t).stdout)
	require.Equal(t, "Nothing to replay: no eligible message matches.\n",
		inboxctl(t, schema, "", append(replay, "--status", "dead")...).ok(t).stdout,
		"a selection naming its statuses gets no word on the discarded")
}
