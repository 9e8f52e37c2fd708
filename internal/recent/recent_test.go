package recent

import (
	"crypto/sha256"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSetEvictsTheOldest(t *testing.T) {
	t.Parallel()
	s := New(3)
	for i := range 5 {
		s.Add(strconv.Itoa(i), sha256.Sum256([]byte{byte(i)}))
	}
	require.Equal(t, 3, s.Len())
	for i, want := range []bool{false, false, true, true, true} {
		h, ok := s.Get(strconv.Itoa(i))
		require.Equal(t, want, ok, "id %d", i)
		if ok {
			require.Equal(t, sha256.Sum256([]byte{byte(i)}), h)
		}
	}
	s.Add("4", Hash{}) // already held: neither replaced nor counted twice
	h, _ := s.Get("4")
	require.Equal(t, sha256.Sum256([]byte{4}), h)
	require.Equal(t, 3, s.Len())
}

// An id found already committed fills the set while it has room, and
// never pushes out an id the set holds.
func TestFillNeverEvicts(t *testing.T) {
	t.Parallel()
	s := New(3)
	s.Fill("old", Hash{1})
	s.Add("a", Hash{})
	s.Add("b", Hash{})
	require.Equal(t, 3, s.Len())
	s.Fill("older", Hash{2})
	for _, id := range []string{"old", "a", "b"} {
		_, ok := s.Get(id)
		require.True(t, ok, "id %s", id)
	}
	_, ok := s.Get("older")
	require.False(t, ok, "a full set takes no found id")
	s.Add("c", Hash{}) // a new one still pushes out the oldest
	_, ok = s.Get("old")
	require.False(t, ok)
}

func TestNilSetRemembersNothing(t *testing.T) {
	t.Parallel()
	s := New(0)
	require.Nil(t, s)
	s.Add("a", Hash{})
	s.Fill("b", Hash{})
	_, ok := s.Get("a")
	require.False(t, ok)
	require.Zero(t, s.Len())
}
